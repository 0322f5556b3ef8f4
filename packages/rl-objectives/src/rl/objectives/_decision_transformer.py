"""Decision Transformer losses: action regression (DT) and max-likelihood with entropy (online DT).

Chen et al. 2021, "Decision Transformer: Reinforcement Learning via Sequence Modeling",
https://arxiv.org/abs/2106.01345; Zheng et al. 2022, "Online Decision Transformer",
https://arxiv.org/abs/2202.05607. Both read the dataset's action sequence
(``action_target``) and the actor's inputs (observation, action and return-to-go
sequences, as the actor's ``in_keys`` say); the actor is typically a ``ProbabilisticActor``
around a :class:`~rl.modules.DTActor` (``TanhDelta``) or an
:class:`~rl.modules.OnlineDTActor` (``TanhNormal``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import ProbabilisticTensorDictSequential, TensorDictModule
from tensordict.utils import NestedKey

from ._actions import _action_dims, _sum_action_dims
from ._loss import LossModule
from ._networks import _network_dist, _network_output
from ._reduction import _check_choice, _check_loss_function, _check_reduction, distance_loss
from ._temperature import _EntropyTemperature

__all__ = ["DTLoss", "OnlineDTLoss"]


def _in_keys(actor, *keys: NestedKey) -> list[NestedKey]:
    return sorted({*getattr(actor, "in_keys", ()), *keys}, key=str)


class OnlineDTLoss(_EntropyTemperature, LossModule):
    """The Online Decision Transformer loss: action log-likelihood, entropy bonus, temperature.

    For a stochastic actor ``pi`` over action sequences and the dataset's actions ``a``
    (``[*B, (T,) A]``), with ``H = -mean_k log pi(a_k)`` a Monte-Carlo entropy over
    ``samples_mc_entropy`` reparameterised draws ``a_k``, each entry is per element
    ``[*B, (T)]`` before the reduction::

        loss_log_likelihood = -log pi(a)
        loss_entropy        = -alpha * H              (alpha detached)
        loss_alpha          = alpha * (H - target_entropy)   (H detached)

    ``alpha = exp(log_alpha)`` is learned unless ``fixed_alpha``; the mean entropy and the
    temperature are returned as ``entropy`` and ``alpha``. Zheng et al. 2022,
    https://arxiv.org/abs/2202.05607.

    Args:
        actor_network (ProbabilisticTensorDictSequential): the stochastic actor (with
            ``get_dist``).

    Keyword Args:
        alpha_init (float): initial temperature. Defaults to ``1.0``.
        min_alpha, max_alpha (float, optional): clamp of the temperature. Default: none.
        fixed_alpha (bool): keep the temperature at ``alpha_init``. Defaults to ``False``.
        target_entropy (float or "auto"): the entropy aimed at; ``"auto"`` is minus the
            number of action dimensions, read from the actor's spec (or, without one, from
            the first batch's actions). Defaults to ``"auto"``.
        samples_mc_entropy (int): draws of the entropy estimate. Defaults to ``1``.
        reduction (str, optional): ``"mean"`` (default), ``"sum"`` or ``"none"``.
        scalar_output_mode (str, optional): with ``reduction="none"``, ``"exclude"``
            leaves ``alpha`` and ``entropy`` out of the output (warned about when not
            given), ``"non_tensor"`` stores them as non-tensor entries.

    Raises:
        ValueError: an unknown ``reduction`` or ``scalar_output_mode``, ``alpha_init <=
            0`` or ``samples_mc_entropy < 1``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.core import Bounded
        >>> from rl.modules import (NormalParamExtractor, ProbabilisticActor, TanhNormal,
        ...     TensorDictModule)
        >>> from rl.objectives import OnlineDTLoss
        >>> net = torch.nn.Sequential(torch.nn.Linear(3, 2), NormalParamExtractor())
        >>> actor = ProbabilisticActor(TensorDictModule(net, ["observation"], ["loc", "scale"]),
        ...     in_keys=["loc", "scale"], distribution_class=TanhNormal, spec=Bounded(-1.0, 1.0, (1,)))
        >>> loss = OnlineDTLoss(actor)
        >>> data = TensorDict(observation=torch.randn(4, 10, 3),
        ...     action=torch.rand(4, 10, 1) * 2 - 1, batch_size=[4, 10])
        >>> sorted(loss(data).keys())
        ['alpha', 'entropy', 'loss_alpha', 'loss_entropy', 'loss_log_likelihood']
    """

    @dataclass
    class _AcceptedKeys:
        """Keys read by OnlineDTLoss.

        Attributes:
            action_target: the dataset's actions (``"action"``).
            action_pred: the actor's action entry, whose spec sizes the target entropy
                (``"action"``).
        """

        action_target: NestedKey = "action"
        action_pred: NestedKey = "action"

    def __init__(
        self,
        actor_network: ProbabilisticTensorDictSequential,
        *,
        alpha_init: float = 1.0,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        fixed_alpha: bool = False,
        target_entropy: Literal["auto"] | float = "auto",
        samples_mc_entropy: int = 1,
        reduction: Literal["mean", "sum", "none"] | None = None,
        scalar_output_mode: Literal["exclude", "non_tensor"] | None = None,
    ) -> None:
        super().__init__()
        if samples_mc_entropy < 1:
            raise ValueError(f"samples_mc_entropy must be >= 1, got {samples_mc_entropy}")
        self.reduction = _check_reduction(reduction)
        if scalar_output_mode is not None:
            _check_choice("scalar_output_mode", scalar_output_mode, ("exclude", "non_tensor"))
        elif self.reduction == "none":
            warnings.warn(
                "OnlineDTLoss with reduction='none' leaves the scalars alpha and entropy out of "
                "its per-element output (read loss.alpha instead); pass "
                "scalar_output_mode='exclude' to silence this warning, or 'non_tensor' to "
                "keep them as non-tensor entries",
                UserWarning,
                stacklevel=2,
            )
        self.scalar_output_mode = scalar_output_mode or "exclude"
        self.samples_mc_entropy = samples_mc_entropy
        self.convert_to_functional(actor_network, "actor_network")
        dims = _action_dims(getattr(actor_network, "spec", None), self.tensor_keys.action_pred)
        self._init_temperature(
            alpha_init,
            min_alpha,
            max_alpha,
            fixed_alpha,
            target_entropy,
            None if dims is None else -float(dims),
        )
        self._set_in_keys()

    def _set_in_keys(self) -> None:
        self.in_keys = _in_keys(self.actor_network, self.tensor_keys.action_target)
        self.out_keys = ["loss_log_likelihood", "loss_entropy", "loss_alpha", "alpha", "entropy"]
        self._in_keys_extra = list(getattr(self.actor_network, "in_keys", ()))

    def _required_key_names(self) -> tuple[str, ...]:
        return ("action_target",)

    @property
    def alpha(self) -> torch.Tensor:
        """The temperature ``exp(log_alpha)`` (clamped to its bounds), without gradient."""
        return self._alpha

    def get_entropy_bonus(self, dist) -> torch.Tensor:
        """Monte-Carlo entropy of ``dist`` over ``samples_mc_entropy`` draws: ``[*B]``."""
        shape = (self.samples_mc_entropy,)
        joint = getattr(dist, "rsample_and_log_prob", None)
        if joint is not None:  # TanhNormal scores the exact pre-tanh value of its draw
            sample, log_prob = joint(shape)
        else:
            sample = dist.rsample(shape)
            log_prob = dist.log_prob(sample)
        return -_sum_action_dims(log_prob, sample).mean(0)

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute the online DT losses.

        Returns:
            a TensorDict with ``loss_log_likelihood``, ``loss_entropy``, ``loss_alpha``,
            ``alpha`` and ``entropy``.

        Raises:
            RuntimeError: when the target actions require a gradient.
        """
        target = self._get(tensordict, "action_target")
        if target.requires_grad:
            raise RuntimeError(
                f"OnlineDTLoss: the target actions {self.tensor_keys.action_target!r} cannot be "
                "part of a graph (detach them)"
            )
        self._size_target_entropy(-float(target.shape[-1]), target.device)
        dist = _network_dist(self.actor_network, tensordict)
        log_likelihood = _sum_action_dims(dist.log_prob(target), target)
        entropy = self.get_entropy_bonus(dist)
        alpha = self.alpha
        losses = {
            "loss_log_likelihood": -log_likelihood,
            "loss_entropy": -alpha * entropy,
            "loss_alpha": self.log_alpha.exp() * (entropy - self.target_entropy).detach(),
        }
        if self.reduction == "none":
            out = TensorDict(losses, batch_size=tensordict.batch_size)
            if self.scalar_output_mode == "non_tensor":
                out.set_non_tensor("alpha", alpha)
                out.set_non_tensor("entropy", entropy.detach().mean())
            return out
        out = {key: self._reduce_loss(value, tensordict) for key, value in losses.items()}
        return TensorDict(**out, entropy=entropy.detach().mean(), alpha=alpha)


class DTLoss(LossModule):
    """The Decision Transformer loss: distance between the predicted and the dataset actions.

    The actor writes its (deterministic) action sequence at ``action_pred``; the loss is
    ``distance(pred, target)`` per element ``[*B, (T,) A]`` (squared error by default),
    then reduced. Chen et al. 2021, https://arxiv.org/abs/2106.01345.

    Args:
        actor_network (TensorDictModule): the actor, e.g. a ``ProbabilisticActor`` with a
            ``TanhDelta`` distribution around a :class:`~rl.modules.DTActor`.

    Keyword Args:
        loss_function (str): ``"l2"`` (default), ``"l1"`` or ``"smooth_l1"``.
        reduction (str, optional): ``"mean"`` (default), ``"sum"`` or ``"none"``.
        device (torch.device, optional): unused, kept for TorchRL's signature.

    Raises:
        ValueError: an unknown ``loss_function`` or ``reduction``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.core import Bounded
        >>> from rl.modules import ProbabilisticActor, TanhDelta, TensorDictModule
        >>> from rl.objectives import DTLoss
        >>> module = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["param"])
        >>> actor = ProbabilisticActor(module, in_keys=["param"], distribution_class=TanhDelta,
        ...     spec=Bounded(-1.0, 1.0, (1,)))
        >>> data = TensorDict(observation=torch.randn(4, 10, 3),
        ...     action=torch.rand(4, 10, 1) * 2 - 1, batch_size=[4, 10])
        >>> DTLoss(actor)(data)["loss"].shape
        torch.Size([])
    """

    @dataclass
    class _AcceptedKeys:
        """Keys read by DTLoss.

        Attributes:
            action_target: the dataset's actions (``"action"``).
            action_pred: where the actor writes its predicted actions (``"action"``).
        """

        action_target: NestedKey = "action"
        action_pred: NestedKey = "action"

    def __init__(
        self,
        actor_network: TensorDictModule,
        *,
        loss_function: Literal["l2", "l1", "smooth_l1"] = "l2",
        reduction: Literal["mean", "sum", "none"] | None = None,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        self.loss_function = _check_loss_function(loss_function)
        self.reduction = _check_reduction(reduction)
        self.convert_to_functional(actor_network, "actor_network")
        self._set_in_keys()

    def _set_in_keys(self) -> None:
        keys = self.tensor_keys
        self.in_keys = _in_keys(self.actor_network, keys.action_pred, keys.action_target)
        self.out_keys = ["loss"]
        self._in_keys_extra = list(getattr(self.actor_network, "in_keys", ()))

    def _required_key_names(self) -> tuple[str, ...]:
        return ("action_target",)

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute the DT loss.

        Returns:
            a TensorDict with ``loss``.

        Raises:
            RuntimeError: when the actor does not write ``action_pred``.
        """
        target = self._get(tensordict, "action_target").detach()
        pred = _network_output(self.actor_network, tensordict, self.tensor_keys.action_pred)
        if pred is None or pred is tensordict.get(self.tensor_keys.action_pred, None):
            raise RuntimeError(
                f"DTLoss: the actor did not write its prediction at "
                f"{self.tensor_keys.action_pred!r}; make its out_keys match "
                "(loss.set_keys(action_pred=...))"
            )
        loss = distance_loss(pred, target, self.loss_function)
        return TensorDict(loss=self._reduce_loss(loss, tensordict))
