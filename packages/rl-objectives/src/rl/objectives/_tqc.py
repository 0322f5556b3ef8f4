"""Truncated Quantile Critics (TQC) loss."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey
from torch import nn

from rl.core import TensorSpec

from ._actions import _policy_rsample
from ._loss import LossModule
from ._networks import _next_keys
from ._reduction import _check_reduction, _loss_output, _reduce
from ._temperature import _EntropyTemperature
from .value import ValueEstimators

__all__ = ["TQCLoss"]


def _quantile_huber_loss(quantiles: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The quantile Huber loss of QR-DQN between predicted and target atoms.

    Each predicted quantile ``q_j`` (fraction ``tau_j = (j + 0.5) / M``) is regressed on
    every target atom ``z_k`` with ``|tau_j - 1(z_k - q_j < 0)| * huber(z_k - q_j)``
    (Huber threshold 1), averaged over ``j`` and ``k``.

    Args:
        quantiles (Tensor): predictions ``[..., M]``.
        target (Tensor): target atoms ``[..., K]`` (broadcast against ``quantiles``
            except in the last dimension); no gradient is taken through it.

    Returns:
        a tensor ``[...]``.

    Examples:
        >>> _quantile_huber_loss(torch.tensor([0.0, 0.0]), torch.tensor([1.0]))
        tensor(0.2500)
    """
    delta = target.unsqueeze(-2) - quantiles.unsqueeze(-1)  # [..., M, K]
    abs_delta = delta.abs()
    huber = torch.where(abs_delta <= 1, 0.5 * delta.pow(2), abs_delta - 0.5)
    m = quantiles.shape[-1]
    tau = (torch.arange(m, device=quantiles.device, dtype=quantiles.dtype) + 0.5) / m
    weight = (tau.unsqueeze(-1) - (delta.detach() < 0).to(quantiles.dtype)).abs()
    return (weight * huber).mean(dim=(-1, -2))


class TQCLoss(_EntropyTemperature, LossModule):
    r"""The Truncated Quantile Critics loss (SAC with distributional critics).

    Each of the ``num_qvalue_nets`` critics writes ``M`` return quantiles under
    ``state_action_value`` (shape ``[*B, M]``). The target pools the atoms of every
    target critic at ``(s', a' ~ pi(s'))``, sorts them, drops the
    ``top_quantiles_to_drop_per_net * num_qvalue_nets`` largest, subtracts
    ``alpha log pi(a'|s')`` and discounts: ``r + gamma (1 - terminated) (z - alpha log pi)``.
    Every critic is trained on all kept atoms with the quantile Huber loss
    (the QR-DQN quantile Huber loss), summed over the critics (``loss_qvalue``). The actor
    uses the mean of all atoms of all critics, ``alpha log pi(a|s) - mean Z(s, a)``
    (``loss_actor``), with the critics held out; ``loss_alpha`` is SAC's temperature
    loss. The mean absolute atom error (max over critics) is written to the input
    under ``"td_error"``. Paper: https://arxiv.org/abs/2005.04269.

    Args:
        actor_network (ProbabilisticTensorDictSequential): a stochastic actor.
        qvalue_network (TensorDictModule): reads the observation and ``action``, writes
            ``M`` quantiles under ``state_action_value``.

    Keyword Args:
        num_qvalue_nets (int): number of critics. Defaults to 5.
        top_quantiles_to_drop_per_net (int): atoms dropped from the pooled target, per
            critic. Defaults to 2.
        alpha_init (float): initial temperature. Defaults to 1.0.
        min_alpha, max_alpha (float, optional): bounds of the temperature.
        action_spec (TensorSpec, optional): for ``target_entropy="auto"``.
        fixed_alpha (bool): keep the temperature fixed. Defaults to ``False``.
        target_entropy (float or "auto"): defaults to ``"auto"`` (minus the action size).
        delay_qvalue (bool): keep target critics. Defaults to ``True``.
        gamma (float, optional): discount (TD(0) is the only estimator).
        separate_losses (bool): hold the actor's parameters out of the critic loss.
            Defaults to ``False``.
        reduction (str, optional): ``"mean"`` (default), ``"sum"`` or ``"none"``.
        deactivate_vmap (bool): accepted for compatibility.
        skip_done_states (bool): do not run the actor and critics on terminated next
            states (their value is not used). Defaults to ``False``.
        use_prioritized_weights (bool or "auto"): weight by ``priority_weight``.
        scalar_output_mode (str, optional): with ``reduction="none"``, ``"exclude"``
            (default) or ``"non_tensor"`` for ``alpha`` and ``entropy``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import NormalParamExtractor, TensorDictModule
        >>> from rl.core import Bounded
        >>> from rl.modules import ProbabilisticActor, TanhNormal, ValueOperator
        >>> from rl.objectives import TQCLoss
        >>> actor = ProbabilisticActor(
        ...     TensorDictModule(
        ...         torch.nn.Sequential(torch.nn.Linear(3, 4), NormalParamExtractor()),
        ...         ["observation"], ["loc", "scale"],
        ...     ),
        ...     in_keys=["loc", "scale"],
        ...     spec=Bounded(-1.0, 1.0, (2,)),
        ...     distribution_class=TanhNormal,
        ... )
        >>> class QNet(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.linear = torch.nn.Linear(5, 25)  # 25 quantiles
        ...     def forward(self, obs, act):
        ...         return self.linear(torch.cat([obs, act], -1))
        >>> qvalue = ValueOperator(QNet(), in_keys=["observation", "action"])
        >>> loss = TQCLoss(actor, qvalue, num_qvalue_nets=3, gamma=0.99)
        >>> data = TensorDict(
        ...     observation=torch.randn(4, 3),
        ...     action=torch.rand(4, 2) * 2 - 1,
        ...     next=TensorDict(
        ...         observation=torch.randn(4, 3),
        ...         reward=torch.randn(4, 1),
        ...         done=torch.zeros(4, 1, dtype=torch.bool),
        ...         terminated=torch.zeros(4, 1, dtype=torch.bool),
        ...         batch_size=[4],
        ...     ),
        ...     batch_size=[4],
        ... )
        >>> sorted(loss(data).keys())
        ['alpha', 'entropy', 'loss_actor', 'loss_alpha', 'loss_qvalue']
    """

    @dataclass
    class _AcceptedKeys:
        """Keys read and written by TQCLoss (those of ``SACLoss``).

        Attributes:
            action: the dataset action (``"action"``).
            value: unused by TQC, kept for ``SACLoss`` compatibility (``"state_value"``).
            state_action_value: the critics' quantiles (``"state_action_value"``).
            log_prob: log-probability entry (``"sample_log_prob"``).
            priority: where the TD error is written (``"td_error"``).
            reward, done, terminated: read under ``"next"``.
            priority_weight: importance weights of a prioritized buffer.
        """

        action: NestedKey = "action"
        value: NestedKey = "state_value"
        state_action_value: NestedKey = "state_action_value"
        log_prob: NestedKey = "sample_log_prob"
        priority: NestedKey = "td_error"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"
        priority_weight: NestedKey = "priority_weight"

    default_value_estimator = "TD0"
    SUPPORTED_VALUE_ESTIMATORS = (ValueEstimators.TD0,)
    _target_entropy_hint = "pass target_entropy=... or action_spec=..., or give the actor a spec"

    def __init__(
        self,
        actor_network: nn.Module,
        qvalue_network: nn.Module,
        *,
        num_qvalue_nets: int = 5,
        top_quantiles_to_drop_per_net: int = 2,
        alpha_init: float = 1.0,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        action_spec: TensorSpec | None = None,
        fixed_alpha: bool = False,
        target_entropy: Literal["auto"] | float = "auto",
        delay_qvalue: bool = True,
        gamma: float | None = None,
        separate_losses: bool = False,
        reduction: Literal["mean", "sum", "none"] | None = None,
        deactivate_vmap: bool = False,
        skip_done_states: bool = False,
        use_prioritized_weights: str | bool = "auto",
        scalar_output_mode: Literal["exclude", "non_tensor"] | None = None,
    ) -> None:
        super().__init__()
        if num_qvalue_nets < 1:
            raise ValueError(f"num_qvalue_nets must be greater than zero, got {num_qvalue_nets}")
        if top_quantiles_to_drop_per_net < 0:
            raise ValueError(
                "top_quantiles_to_drop_per_net must be greater than or equal to zero, got "
                f"{top_quantiles_to_drop_per_net}"
            )
        self.num_qvalue_nets = num_qvalue_nets
        self.top_quantiles_to_drop_per_net = top_quantiles_to_drop_per_net
        self.reduction = _check_reduction("mean" if reduction is None else reduction)
        self.scalar_output_mode = scalar_output_mode or "exclude"
        self.deactivate_vmap = deactivate_vmap
        self.skip_done_states = skip_done_states
        self.use_prioritized_weights = use_prioritized_weights
        self.delay_qvalue = delay_qvalue
        self.gamma = gamma
        self.convert_to_functional(actor_network, "actor_network")
        self.convert_to_functional(
            qvalue_network,
            "qvalue_network",
            expand_dim=num_qvalue_nets,
            create_target_params=delay_qvalue,
            compare_against=list(actor_network.parameters()) if separate_losses else None,
        )
        auto = self._action_entropy_target(action_spec, actor_network)
        self._init_temperature(alpha_init, min_alpha, max_alpha, fixed_alpha, target_entropy, auto)
        self._set_in_keys()

    def _set_in_keys(self) -> None:
        tk = self.tensor_keys
        actor_keys = list(getattr(self.actor_network, "in_keys", []))
        q_keys = list(getattr(self.qvalue_network, "in_keys", []))
        keys = [tk.action, *_next_keys([tk.reward, tk.done, tk.terminated])]
        keys += [*actor_keys, *_next_keys(actor_keys), *q_keys]
        self.in_keys = list(dict.fromkeys(keys))
        self.out_keys = ["loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy"]
        self._in_keys_extra = list(dict.fromkeys(actor_keys + q_keys + _next_keys(actor_keys)))

    def _required_key_names(self):
        return ("action",)

    def _quantiles(self, tensordict: TensorDictBase, kind: str) -> torch.Tensor:
        """Quantiles of every critic, ``[N, *B, M]``."""
        z = self._ensemble_values(
            "qvalue_network", kind, tensordict, self.tensor_keys.state_action_value
        )
        if z.ndim != tensordict.ndim + 2:
            raise RuntimeError(
                f"{type(self).__name__}: the critic must write one quantile dimension after "
                f"the batch dimensions {tuple(tensordict.batch_size)} under "
                f"{self.tensor_keys.state_action_value!r}, got shape {tuple(z.shape[1:])}"
            )
        return z

    def compute_target(self, tensordict: TensorDictBase) -> torch.Tensor:
        """The kept target atoms, ``[*B, K]`` with ``K = N * (M - drop)``."""
        with torch.no_grad():
            next_td = tensordict.get("next").copy()
            selection = None
            selected = next_td
            if self.skip_done_states:
                terminated = next_td.get(self.tensor_keys.terminated, None)
                if terminated is None:
                    terminated = self._get(tensordict, "done", "next")
                if terminated.any():
                    selection = ~terminated.reshape(next_td.batch_size)
                    selected = next_td[selection]
            if selected.numel():
                action, log_prob = _policy_rsample(
                    self._detached_network("actor_network"), selected
                )
                selected.set(self.tensor_keys.action, action)
                z = self._quantiles(selected, "target")  # [N, *b, M]
            else:
                m = self._quantiles(next_td[:1], "target").shape[-1] if next_td.numel() else 1
                z = torch.zeros(self.num_qvalue_nets, 0, m)
                log_prob = z.new_zeros(0)
            n_drop = self.top_quantiles_to_drop_per_net * self.num_qvalue_nets
            pooled = z.movedim(0, -2).flatten(-2)  # [*b, N * M]
            keep = pooled.shape[-1] - n_drop
            if keep < 1:
                raise ValueError(
                    "top_quantiles_to_drop_per_net must be smaller than the critic's number "
                    f"of quantiles ({z.shape[-1]}), got {self.top_quantiles_to_drop_per_net}"
                )
            kept = pooled.sort(dim=-1).values[..., :keep]
            next_value = kept - self._alpha * log_prob.unsqueeze(-1)
            if selection is not None:
                full = next_value.new_zeros(*tensordict.batch_size, keep)
                full[selection] = next_value
                next_value = full
            return self._discounted(tensordict, next_value)

    def _discounted(self, tensordict: TensorDictBase, next_value: torch.Tensor) -> torch.Tensor:
        """``r + gamma (1 - terminated) next_value`` for every atom of ``next_value``."""
        if self._value_estimator is None:
            return self._value_target(tensordict, next_value)
        # The estimator checks shapes strictly: give every atom its own reward entry.
        td = tensordict.select("next", strict=False).copy()
        nxt = td.get("next").copy()
        td.set("next", nxt)
        for name in ("reward", "done", "terminated"):
            key = getattr(self.tensor_keys, name)
            value = nxt.get(key, None)
            if value is not None:
                nxt.set(key, value.expand_as(next_value))
        return self.value_estimator.value_estimate(td, next_value=next_value)

    def qvalue_loss(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, dict]:
        """Quantile Huber regression of every critic on the kept target atoms."""
        target = self.compute_target(tensordict)  # [*B, K]
        z = self._quantiles(tensordict, "online")  # [N, *B, M]
        per_critic = _quantile_huber_loss(z, target.unsqueeze(0))  # [N, *B]
        loss = per_critic.sum(0)
        with torch.no_grad():
            td_error = (target.unsqueeze(0).unsqueeze(-2) - z.unsqueeze(-1)).abs()
            td_error = td_error.mean(dim=(-1, -2)).max(0).values
        return _reduce(loss, self.reduction, self._priority_weight(tensordict)), {
            "td_error": td_error
        }

    #: TorchRL's name for the critic loss
    qvalue_v2_loss = qvalue_loss

    def actor_loss(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, dict]:
        """``alpha log pi(a|s) - mean Z(s, a)`` with the critics held out."""
        action, log_prob = _policy_rsample(self.actor_network, tensordict)
        td = tensordict.select(*self.qvalue_network.in_keys, strict=False)
        td.set(self.tensor_keys.action, action)
        q = self._quantiles(td, "detached").mean(dim=(0, -1))
        if log_prob.shape != q.shape:
            raise RuntimeError(
                f"{type(self).__name__}: log_prob has shape {tuple(log_prob.shape)} but the "
                f"critics give {tuple(q.shape)}; they must match"
            )
        loss = self._alpha * log_prob - q
        return _reduce(loss, self.reduction, self._priority_weight(tensordict)), {
            "log_prob": log_prob.detach()
        }

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute the critic, actor and temperature losses; writes ``td_error``.

        Returns:
            a TensorDict with ``loss_actor``, ``loss_qvalue``, ``loss_alpha``, ``alpha``
            and ``entropy``.
        """
        self._get(tensordict, "action")
        loss_qvalue, metadata_q = self.qvalue_loss(tensordict)
        loss_actor, metadata_actor = self.actor_loss(tensordict)
        log_prob = metadata_actor["log_prob"]
        loss_alpha = _reduce(
            self._alpha_loss(log_prob), self.reduction, self._priority_weight(tensordict)
        )
        tensordict.set(self.tensor_keys.priority, metadata_q["td_error"])
        entropy = -log_prob.mean()
        return _loss_output(
            {"loss_actor": loss_actor, "loss_qvalue": loss_qvalue, "loss_alpha": loss_alpha},
            {"alpha": self._alpha, "entropy": entropy},
            reduction=self.reduction,
            scalar_output_mode=self.scalar_output_mode,
            batch_size=tensordict.batch_size,
        )
