"""Target-network updaters and small helpers shared by the losses."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any, Literal

import torch
import torch.nn.functional as F
from tensordict import TensorDictBase
from tensordict.nn import ProbabilisticTensorDictSequential, TensorDictModule
from torch import nn

from ._loss import LossModule
from .value import ValueEstimators

__all__ = [
    "HardUpdate",
    "SoftUpdate",
    "TargetNetUpdater",
    "ValueEstimators",
    "default_value_kwargs",
    "distance_loss",
    "hold_out_net",
    "hold_out_params",
]


def _is_plain_tdmodule(module) -> bool:
    """A TensorDictModule whose call is exactly ``module.module(*inputs)`` -> ``out_keys``."""
    return (
        isinstance(module, TensorDictModule)
        and type(module).forward is TensorDictModule.forward
        and module._kwargs is None
        and module.method is None
        and not module.method_kwargs
        and not module._forward_hooks
        and not module._forward_pre_hooks
    )


def _network_output(
    module: nn.Module, tensordict: TensorDictBase, out_key, overrides=None
) -> torch.Tensor:
    """Entry ``out_key`` written by ``module`` on ``tensordict`` (left unchanged).

    ``overrides`` maps input keys to tensors used instead of the entries of
    ``tensordict`` (e.g. a freshly sampled action).

    A plain TensorDictModule is called on the tensors directly, skipping the copy of the
    input and the writes of the outputs (the per-call cost of TensorDict dispatch is
    comparable to a small network's compute). Anything else runs as a TensorDict module
    on a shallow copy.
    """
    if _is_plain_tdmodule(module) and len(module.out_keys) == 1 and module.out_keys[0] == out_key:
        if overrides:
            inputs = [
                overrides[key] if key in overrides else tensordict.get(key, None)
                for key in module.in_keys
            ]
        else:
            inputs = [tensordict.get(key, None) for key in module.in_keys]
        if all(x is not None for x in inputs):
            return module.module(*inputs)
    tensordict = tensordict.copy()
    if overrides:
        tensordict.update(overrides)
    return module(tensordict).get(out_key)


def _network_dist(actor: nn.Module, tensordict: TensorDictBase):
    """``actor.get_dist(tensordict)`` without TensorDict writes for the common actor shape.

    The fast path covers a probabilistic sequence of one plain TensorDictModule that
    writes the distribution parameters followed by the distribution module.
    """
    modules = getattr(actor, "module", None)
    if (
        isinstance(actor, ProbabilisticTensorDictSequential)
        and isinstance(modules, nn.ModuleList)
        and len(modules) == 2
        and _is_plain_tdmodule(modules[0])
    ):
        params_module, dist_module = modules[0], modules[1]
        out_keys = list(params_module.out_keys)
        inputs = [tensordict.get(key, None) for key in params_module.in_keys]
        if all(key in out_keys for key in dist_module.in_keys) and all(
            x is not None for x in inputs
        ):
            outputs = params_module.module(*inputs)
            if isinstance(outputs, torch.Tensor):
                outputs = (outputs,)
            by_key = dict(zip(out_keys, outputs, strict=True))
            kwargs = {
                (name[-1] if isinstance(name, tuple) else name): by_key[key]
                for name, key in zip(dist_module.dist_keys, dist_module.in_keys, strict=True)
            }
            return dist_module.distribution_class(**kwargs, **dict(dist_module.distribution_kwargs))
    return actor.get_dist(tensordict.copy())


_DEFAULT_VALUE_KWARGS: dict[str, dict[str, Any]] = {
    "TD0": {"gamma": 0.99, "differentiable": True},
    "TD1": {"gamma": 0.99, "differentiable": True},
    "TDLambda": {"gamma": 0.99, "lmbda": 0.95, "differentiable": True},
    "GAE": {"gamma": 0.99, "lmbda": 0.95, "differentiable": True},
    "VTrace": {"gamma": 0.99, "differentiable": True},
}


def default_value_kwargs(value_type) -> dict[str, Any]:
    """The default hyperparameters of a value estimator, as in TorchRL.

    Args:
        value_type (ValueEstimators or str): the estimator.

    Returns:
        a new dict, e.g. ``{"gamma": 0.99, "lmbda": 0.95, "differentiable": True}`` for
        ``TDLambda``.

    Examples:
        >>> default_value_kwargs("TD0")
        {'gamma': 0.99, 'differentiable': True}
    """
    name = getattr(value_type, "name", value_type)
    if name not in _DEFAULT_VALUE_KWARGS:
        raise ValueError(
            f"unknown value estimator {value_type!r}; valid ones are {list(_DEFAULT_VALUE_KWARGS)}"
        )
    return dict(_DEFAULT_VALUE_KWARGS[name])


def distance_loss(
    v1: torch.Tensor,
    v2: torch.Tensor,
    loss_function: Literal["l2", "l1", "smooth_l1"],
    strict_shape: bool = True,
) -> torch.Tensor:
    """Element-wise distance between two tensors (no reduction).

    Args:
        v1 (Tensor): predictions, any shape.
        v2 (Tensor): targets, the shape of ``v1`` unless ``strict_shape=False``.
        loss_function (str): ``"l2"`` (squared error), ``"l1"`` or ``"smooth_l1"``
            (Huber with delta 1).
        strict_shape (bool): raise when the shapes differ. Defaults to ``True``.

    Returns:
        a tensor of the broadcast shape of ``v1`` and ``v2``.

    Raises:
        ValueError: on an unknown ``loss_function`` or mismatched shapes.

    Examples:
        >>> distance_loss(torch.tensor([1.0, 3.0]), torch.tensor([0.0, 0.0]), "l2")
        tensor([1., 9.])
    """
    if strict_shape and v1.shape != v2.shape:
        raise ValueError(
            f"distance_loss got tensors of shapes {tuple(v1.shape)} and {tuple(v2.shape)}; "
            "they must match (or pass strict_shape=False)"
        )
    if loss_function == "l2":
        return F.mse_loss(v1, v2, reduction="none")
    if loss_function == "l1":
        return F.l1_loss(v1, v2, reduction="none")
    if loss_function == "smooth_l1":
        return F.smooth_l1_loss(v1, v2, reduction="none")
    raise ValueError(
        f"unknown loss_function {loss_function!r}; valid ones are ['l2', 'l1', 'smooth_l1']"
    )


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
                f"{type(self).__name__} needs a LossModule, got {type(loss_module).__name__}"
            )
        names = list(loss_module._target_param_names())
        if not names:
            raise RuntimeError(
                f"{type(loss_module).__name__} has no target parameters to update; build it "
                "with delay_value=True / delay_actor=True / delay_qvalue=True"
            )
        self.loss_module = loss_module
        self._names = names
        for name in names:
            loss_module._has_update_associated[name] = True
        self.initialized = False
        self.init_()

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
        """Copy the online values into the targets."""
        with torch.no_grad():
            fs, ft, os_, ot = self._pairs()
            if ft:
                torch._foreach_copy_(ft, fs)
            for t, s in zip(ot, os_, strict=True):
                t.copy_(s)
        self.initialized = True

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
                f"SoftUpdate takes exactly one of eps or tau, got eps={eps}, tau={tau}"
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
            self.init_()


class hold_out_net:
    """Context manager that turns off ``requires_grad`` of a network's parameters.

    Args:
        network (nn.Module): the network to freeze inside the ``with`` block.
    """

    def __init__(self, network: nn.Module) -> None:
        self.network = network
        self._params: list[torch.Tensor] = []

    def __enter__(self):
        self._params = [p for p in self.network.parameters() if p.requires_grad]
        for p in self._params:
            p.requires_grad_(False)
        return self

    def __exit__(self, *exc) -> None:
        for p in self._params:
            p.requires_grad_(True)


class hold_out_params(hold_out_net):
    """Context manager that turns off ``requires_grad`` of the given parameters.

    Args:
        params (iterable of tensors): the parameters to freeze inside the ``with`` block.
    """

    def __init__(self, params: Iterable[torch.Tensor]) -> None:
        self._given = list(params)
        self._params = []

    def __enter__(self):
        self._params = [p for p in self._given if p.requires_grad]
        for p in self._params:
            p.requires_grad_(False)
        return self
