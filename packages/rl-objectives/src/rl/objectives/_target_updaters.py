"""Target-network updaters: Polyak averaging (SoftUpdate) and periodic copies (HardUpdate).

They find every ``target_<name>_params`` of a loss and move it towards ``<name>_params``.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from tensordict import TensorDict

from ._loss import LossModule

__all__ = ["HardUpdate", "SoftUpdate", "TargetNetUpdater"]


class TargetNetUpdater:
    """Base class of the target-network updaters.

    Finds every ``target_<name>_params`` of ``loss_module``, pairs it with
    ``<name>_params``, and syncs the targets to the online values at construction
    (:meth:`init_`). Floating-point entries (parameters and buffers such as normalisation
    statistics) are updated by :meth:`step`; integer buffers are copied.

    Args:
        loss_module (LossModule): a loss built with target networks (e.g.
            ``DQNLoss(..., delay_value=True)``).

    Raises:
        ValueError: if ``loss_module`` is not a ``LossModule``.
        RuntimeError: if it has no target parameters.
    """

    def __init__(self, loss_module: LossModule):
        if not isinstance(loss_module, LossModule):
            raise ValueError(
                f"The loss_module must be a LossModule instance: {type(self).__name__} got "
                f"{type(loss_module).__name__}"
            )
        names = list(loss_module._target_param_names())
        if not names:
            raise RuntimeError(
                "Did not find any target parameters or buffers in the loss module: "
                f"{type(loss_module).__name__} has no target parameters to update; build it "
                "with delay_value=True / delay_actor=True / delay_qvalue=True"
            )
        self.loss_module = loss_module
        self._names = names
        for name in names:
            loss_module._has_update_associated[name] = True
        self.initialized = False
        self.init_()

    @property
    def _sources(self) -> TensorDict:
        """The online values the targets follow, by ``<network>_params`` (as TorchRL's)."""
        return TensorDict(
            {n + "_params": getattr(self.loss_module, n + "_params").data for n in self._names}
        )

    @property
    def _targets(self) -> TensorDict:
        """The target values, by ``target_<network>_params`` (as TorchRL's)."""
        return TensorDict(
            {
                "target_" + n + "_params": getattr(self.loss_module, "target_" + n + "_params").data
                for n in self._names
            }
        )

    def _pairs(self) -> tuple[list[torch.Tensor], list[torch.Tensor], list, list]:
        floats_src, floats_tgt, other_src, other_tgt = [], [], [], []
        for name in self._names:
            source = getattr(self.loss_module, name + "_params")
            target = getattr(self.loss_module, "target_" + name + "_params")
            for key, src in source.items(True, True):
                tgt = target.get(key)
                src = src.data
                if tgt.is_floating_point():
                    floats_src.append(src)
                    floats_tgt.append(tgt.data)
                else:
                    other_src.append(src)
                    other_tgt.append(tgt.data)
        return floats_src, floats_tgt, other_src, other_tgt

    def init_(self) -> None:
        """Copy the online values into the targets (warns if they were copied before)."""
        if self.initialized:
            warnings.warn(
                f"{type(self).__name__} already initialized: init_() copies the online "
                "parameters into the targets again",
                category=UserWarning,
                stacklevel=2,
            )
        self._copy()
        self.initialized = True

    def _copy(self) -> None:
        with torch.no_grad():
            fs, ft, os_, ot = self._pairs()
            if ft:
                torch._foreach_copy_(ft, fs)
            for t, s in zip(ot, os_, strict=True):
                t.copy_(s)

    def step(self) -> None:
        """Update the targets (see the subclass)."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """Progress of the updater (the targets themselves are in the loss's state_dict)."""
        state = {"initialized": self.initialized}
        if hasattr(self, "counter"):
            state["counter"] = self.counter
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.initialized = state_dict.get("initialized", self.initialized)
        if "counter" in state_dict:
            self.counter = state_dict["counter"]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(networks={self._names})"


class SoftUpdate(TargetNetUpdater):
    """Polyak averaging of the target networks: ``target <- eps * target + (1 - eps) * online``.

    Give exactly one of ``eps`` or ``tau = 1 - eps``.

    Args:
        loss_module (LossModule): a loss with target networks.

    Keyword Args:
        eps (float, optional): how much of the old target stays, in ``[0, 1]``.
        tau (float, optional): how much of the online network moves in, ``1 - eps``.

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.objectives import DQNLoss, SoftUpdate
        >>> qnet = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["action_value"])
        >>> loss = DQNLoss(qnet, action_space="one-hot", delay_value=True)
        >>> updater = SoftUpdate(loss, tau=0.005)
        >>> updater.step()
    """

    def __init__(
        self, loss_module: LossModule, *, eps: float | None = None, tau: float | None = None
    ):
        if (eps is None) == (tau is None):
            raise ValueError(
                "One and only one argument (eps or tau) can be given to SoftUpdate, got "
                f"eps={eps}, tau={tau}"
            )
        if eps is None:
            eps = 1.0 - tau
        if not 0.0 <= eps <= 1.0:
            raise ValueError(f"SoftUpdate eps must lie in [0, 1], got eps={eps} (tau={1 - eps})")
        if eps < 0.5:
            warnings.warn(
                f"SoftUpdate got eps={eps} < 0.5: the target mostly follows the online network; "
                "did you mean tau=...?",
                stacklevel=2,
            )
        self.eps = eps
        super().__init__(loss_module)

    @property
    def tau(self) -> float:
        """``1 - eps``."""
        return 1.0 - self.eps

    def step(self) -> None:
        """Move every target towards its online network by ``tau``."""
        with torch.no_grad():
            fs, ft, os_, ot = self._cache()
            if ft:
                torch._foreach_lerp_(ft, fs, 1.0 - self.eps)
            for t, s in zip(ot, os_, strict=True):
                t.copy_(s)

    def _cache(self):
        # The tensors are updated in place, so the lists stay valid until the loss is cast.
        key = self.loss_module._cast_version
        cached = getattr(self, "_cached", None)
        if cached is None or cached[0] != key:
            cached = (key, self._pairs())
            self._cached = cached
        return cached[1]


class HardUpdate(TargetNetUpdater):
    """Copy the online networks into the targets every ``value_network_update_interval`` steps.

    The copy happens on calls number ``interval``, ``2 * interval``, ... of :meth:`step`
    (never on the first call unless the interval is 1). Construction already syncs the
    targets.

    Args:
        loss_module (LossModule): a loss with target networks.

    Keyword Args:
        value_network_update_interval (int): steps between copies. Defaults to 1000.

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.objectives import DQNLoss, HardUpdate
        >>> qnet = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["action_value"])
        >>> loss = DQNLoss(qnet, action_space="one-hot", delay_value=True)
        >>> updater = HardUpdate(loss, value_network_update_interval=100)
        >>> updater.step()
    """

    def __init__(self, loss_module: LossModule, *, value_network_update_interval: int = 1000):
        if value_network_update_interval < 1:
            raise ValueError(
                f"value_network_update_interval must be >= 1, got {value_network_update_interval}"
            )
        self.value_network_update_interval = int(value_network_update_interval)
        self.counter = 0
        super().__init__(loss_module)

    def step(self) -> None:
        """Count one step; copy the online values into the targets every interval."""
        self.counter += 1
        if self.counter >= self.value_network_update_interval:
            self.counter = 0
            self._copy()  # its job, not a second init_: no "already initialized" warning
            self.initialized = True
