"""Soft Actor-Critic losses: SACLoss (continuous actions) and DiscreteSACLoss."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey
from torch import nn

from rl.core import TensorSpec

from ._actions import _find_action_space, _policy_rsample, _select
from ._loss import _TD_ESTIMATORS, LossModule
from ._networks import _network_dist, _network_output, _next_keys
from ._reduction import (
    _check_loss_function,
    _check_reduction,
    _check_scalar_output_mode,
    _loss_output,
    _reduce,
    distance_loss,
)
from ._temperature import _EntropyTemperature

__all__ = ["DiscreteSACLoss", "SACLoss"]


class SACLoss(_EntropyTemperature, LossModule):
    """The Soft Actor-Critic loss (SAC v2 with twin Q networks; SAC v1 with a value network).

    With the default ``value_network=None``, the Q networks regress on
    ``r + gamma * (1 - terminated) * (min_i Q_target_i(s', a') - alpha * log pi(a'|s'))``
    with ``a' ~ pi(.|s')``; the actor minimises ``alpha * log pi(a|s) - min_i Q_i(s, a)``
    for ``a ~ pi(.|s)`` reparameterised, with the critics held out; the temperature
    ``alpha = exp(log_alpha)`` is learned by minimising
    ``-log_alpha * (log pi(a|s) + target_entropy)``. ``target_entropy="auto"`` is minus
    the number of action dimensions (from ``action_spec``, the actor's ``spec``, or the
    first batch). The largest absolute TD error over the Q networks is written under
    ``"td_error"``. Papers: https://arxiv.org/abs/1801.01290,
    https://arxiv.org/abs/1812.05905.

    Args:
        actor_network (ProbabilisticTensorDictSequential): the policy; its ``get_dist``
            gives a distribution with ``rsample`` (e.g. ``TanhNormal``).
        qvalue_network (nn.Module): reads the observation and ``action``, writes
            ``state_action_value``; copied ``num_qvalue_nets`` times.
        value_network (nn.Module, optional): a state-value network (SAC v1).

    Keyword Args:
        num_qvalue_nets (int): number of Q networks. Defaults to 2.
        loss_function (str): ``"smooth_l1"`` (default), ``"l2"`` or ``"l1"``.
        alpha_init (float): initial temperature. Defaults to 1.0.
        min_alpha, max_alpha (float, optional): clamp of the temperature.
        action_spec (TensorSpec, optional): to size ``target_entropy="auto"``.
        fixed_alpha (bool): keep the temperature fixed. Defaults to ``False``.
        target_entropy (float or "auto"): Defaults to ``"auto"``.
        delay_actor (bool): keep a target actor. Defaults to ``False``.
        delay_qvalue (bool): keep target Q networks. Defaults to ``True``.
        delay_value (bool): keep a target value network (v1). Defaults to ``True``.
        gamma (float, optional): discount for the value estimator.
        separate_losses (bool): hold the actor's parameters out of the critic losses
            when the networks share them. Defaults to ``False``.
        reduction (str): ``"mean"`` (default), ``"sum"`` or ``"none"``.
        priority_key (NestedKey, optional): deprecated shortcut for ``set_keys(priority=...)``.
        use_prioritized_weights (bool or "auto"): weight by ``priority_weight``.
        skip_done_states (bool): run the actor and critics of the target only on next
            states that are not terminal (their observation may be garbage, e.g. NaN);
            the losses are unchanged. Defaults to ``False``.
        deactivate_vmap (bool): accepted for compatibility (the critics always run as a
            loop over the members).
        scalar_output_mode (str, optional): with ``reduction="none"``, ``"exclude"``
            (default) leaves ``alpha`` and ``entropy`` out, ``"non_tensor"`` keeps them as
            non-tensor data.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import NormalParamExtractor, TensorDictModule
        >>> from rl.modules import ProbabilisticActor, TanhNormal
        >>> from rl.objectives import SACLoss
        >>> net = torch.nn.Sequential(torch.nn.Linear(3, 2), NormalParamExtractor())
        >>> actor = ProbabilisticActor(
        ...     TensorDictModule(net, ["observation"], ["loc", "scale"]),
        ...     in_keys=["loc", "scale"],
        ...     distribution_class=TanhNormal,
        ... )
        >>> class QNet(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.linear = torch.nn.Linear(4, 1)
        ...     def forward(self, obs, act):
        ...         return self.linear(torch.cat([obs, act], -1))
        >>> qnet = TensorDictModule(QNet(), ["observation", "action"], ["state_action_value"])
        >>> loss = SACLoss(actor, qnet, target_entropy=-1.0)
        >>> data = TensorDict(
        ...     observation=torch.randn(4, 3),
        ...     action=torch.rand(4, 1) * 2 - 1,
        ...     next=TensorDict(
        ...         observation=torch.randn(4, 3),
        ...         reward=torch.randn(4, 1),
        ...         done=torch.zeros(4, 1, dtype=torch.bool),
        ...         terminated=torch.zeros(4, 1, dtype=torch.bool),
        ...         batch_size=[4],
        ...     ),
        ...     batch_size=[4],
        ... )
        >>> out = loss(data)
        >>> sorted(out.keys())
        ['alpha', 'entropy', 'loss_actor', 'loss_alpha', 'loss_qvalue']
    """

    @dataclass
    class _AcceptedKeys:
        """Keys read and written by SACLoss.

        Attributes:
            action: the action (``"action"``).
            value: the state value of the value network, v1 (``"state_value"``).
            state_action_value: the Q networks' output (``"state_action_value"``).
            log_prob: unused (the log-probability is computed from the distribution);
                kept for TorchRL compatibility, named as the actor's ``log_prob_key``
                (``"action_log_prob"``).
            priority: where the TD error is written (``"td_error"``).
            reward, done, terminated: read under ``"next"``.
            priority_weight: importance weights of a prioritized buffer.
        """

        action: NestedKey = "action"
        value: NestedKey = "state_value"
        state_action_value: NestedKey = "state_action_value"
        log_prob: NestedKey | None = None
        priority: NestedKey = "td_error"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"
        priority_weight: NestedKey = "priority_weight"

    default_value_estimator = "TD0"
    SUPPORTED_VALUE_ESTIMATORS = _TD_ESTIMATORS

    def __init__(
        self,
        actor_network: nn.Module,
        qvalue_network: nn.Module,
        value_network: nn.Module | None = None,
        *,
        num_qvalue_nets: int = 2,
        loss_function: Literal["l2", "l1", "smooth_l1"] = "smooth_l1",
        alpha_init: float = 1.0,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        action_spec: TensorSpec | None = None,
        fixed_alpha: bool = False,
        target_entropy: str | float = "auto",
        delay_actor: bool = False,
        delay_qvalue: bool = True,
        delay_value: bool = True,
        gamma: float | None = None,
        separate_losses: bool = False,
        reduction: Literal["mean", "sum", "none"] | None = None,
        priority_key: NestedKey | None = None,
        use_prioritized_weights: str | bool = "auto",
        skip_done_states: bool = False,
        deactivate_vmap: bool = False,
        scalar_output_mode: Literal["exclude", "non_tensor"] | None = None,
    ) -> None:
        super().__init__()
        _check_loss_function(loss_function)
        self.skip_done_states = skip_done_states
        self.deactivate_vmap = deactivate_vmap
        self.scalar_output_mode = _check_scalar_output_mode(scalar_output_mode)
        if num_qvalue_nets < 1:
            raise ValueError(f"num_qvalue_nets must be >= 1, got {num_qvalue_nets}")
        self.delay_actor = delay_actor
        self.delay_qvalue = delay_qvalue
        self.delay_value = delay_value
        self.num_qvalue_nets = num_qvalue_nets
        self.loss_function = loss_function
        self.reduction = _check_reduction(reduction)
        if priority_key is not None:  # deprecated in TorchRL: set_keys(priority=...)
            self._tensor_keys.priority = priority_key
        self.use_prioritized_weights = use_prioritized_weights
        self.gamma = gamma
        self._version = 1 if value_network is not None else 2
        self.convert_to_functional(actor_network, "actor_network", create_target_params=delay_actor)
        shared = list(actor_network.parameters()) if separate_losses else None
        if value_network is not None:
            self.convert_to_functional(
                value_network,
                "value_network",
                create_target_params=delay_value,
                compare_against=shared,
            )
            if separate_losses:
                shared = shared + list(value_network.parameters())
        self.convert_to_functional(
            qvalue_network,
            "qvalue_network",
            num_qvalue_nets,
            create_target_params=delay_qvalue,
            compare_against=shared,
        )
        # "auto" without a spec stays unsized until the first batch tells the action size
        auto = self._action_entropy_target(action_spec, actor_network)
        self._init_temperature(alpha_init, min_alpha, max_alpha, fixed_alpha, target_entropy, auto)
        if self.tensor_keys.log_prob is None:  # named as the actor writes it, as TorchRL
            self.tensor_keys.log_prob = getattr(actor_network, "log_prob_key", "action_log_prob")
        self._set_in_keys()

    def _set_in_keys(self) -> None:
        actor_keys = list(getattr(self.actor_network, "in_keys", []))
        q_keys = list(getattr(self.qvalue_network, "in_keys", []))
        tk = self.tensor_keys
        keys = [tk.action, *actor_keys, *q_keys, *_next_keys([tk.reward, tk.done, tk.terminated])]
        keys += _next_keys(actor_keys)
        self.in_keys = list(dict.fromkeys(keys))
        self.out_keys = ["loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy"]
        if self._version == 1:
            self.out_keys.append("loss_value")
        self._in_keys_extra = list(dict.fromkeys(actor_keys + q_keys))

    def _required_key_names(self):
        return ("action",)

    def _target_value(self, tensordict: TensorDictBase, alpha: torch.Tensor) -> torch.Tensor:
        """The soft Bellman target ``[*B]`` (no gradient) at temperature ``alpha``."""
        with torch.no_grad():
            next_value = self._on_nonterminal(
                tensordict, lambda next_td: self._next_state_value(next_td, alpha)
            )
            return self._value_target(tensordict, next_value).squeeze(-1)

    def _next_state_value(self, next_td: TensorDictBase, alpha: torch.Tensor) -> torch.Tensor:
        """``V(s')`` ``[*b, 1]``: the target value network (v1) or the soft value of the twins."""
        if self._version == 1:
            value_net = self._target_network("value_network")
            return _network_output(value_net, next_td, self.tensor_keys.value)
        next_action, next_log_prob = _policy_rsample(self._target_network("actor_network"), next_td)
        # no gradient here: the members' minimum folded as they run, then the entropy
        # term (the same numbers as the minimum of q - alpha * log_prob: rounding is
        # monotonic)
        min_q = self._ensemble_values(
            "qvalue_network",
            "target",
            next_td,
            self.tensor_keys.state_action_value,
            {self.tensor_keys.action: next_action},
            reduce="min",
        )
        return min_q - alpha * next_log_prob.unsqueeze(-1)

    def qvalue_loss(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, dict]:
        """Soft Q regression; returns ``(loss, {"td_error": [*B]})``."""
        return self._qvalue_loss(tensordict, self._alpha, self._priority_weight(tensordict))

    def _qvalue_loss(self, tensordict, alpha, weights) -> tuple[torch.Tensor, dict]:
        """:meth:`qvalue_loss` at temperature ``alpha`` with priority ``weights`` (read
        once per forward)."""
        target = self._target_value(tensordict, alpha)
        self._get(tensordict, "action")
        pred = self._ensemble_values(
            "qvalue_network", "online", tensordict, self.tensor_keys.state_action_value
        ).squeeze(-1)
        loss = distance_loss(pred, target.expand_as(pred), self.loss_function).sum(0)
        td_error = (pred.detach() - target).abs().amax(0)
        return _reduce(loss, self.reduction, weights), {"td_error": td_error}

    def actor_loss(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, dict]:
        """``alpha * log pi(a|s) - min_i Q_i(s, a)``; returns ``(loss, {"log_prob": ...})``."""
        return self._actor_loss(tensordict, self._alpha, self._priority_weight(tensordict))

    def _actor_loss(self, tensordict, alpha, weights) -> tuple[torch.Tensor, dict]:
        """:meth:`actor_loss` at temperature ``alpha`` with priority ``weights``."""
        action, log_prob = _policy_rsample(self.actor_network, tensordict)
        q = self._ensemble_values(
            "qvalue_network",
            "detached",
            tensordict,
            self.tensor_keys.state_action_value,
            {self.tensor_keys.action: action},
        )
        min_q = q.min(0)[0].squeeze(-1)
        if self._target_entropy is None:
            self._size_target_entropy(
                -float(action.shape[tensordict.batch_dims :].numel()), action.device
            )
        loss = alpha * log_prob - min_q
        return _reduce(loss, self.reduction, weights), {"log_prob": log_prob.detach()}

    def value_loss(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, dict]:
        """SAC v1 value regression on ``min_i Q_target_i(s, a) - alpha * log pi(a|s)``."""
        return self._value_loss(tensordict, self._alpha, self._priority_weight(tensordict))

    def _value_loss(self, tensordict, alpha, weights) -> tuple[torch.Tensor, dict]:
        """:meth:`value_loss` at temperature ``alpha`` with priority ``weights``."""
        value = _network_output(self.value_network, tensordict, self.tensor_keys.value).squeeze(-1)
        with torch.no_grad():
            action, log_prob = _policy_rsample(self._target_network("actor_network"), tensordict)
            q = self._ensemble_values(
                "qvalue_network",
                "target",
                tensordict,
                self.tensor_keys.state_action_value,
                {self.tensor_keys.action: action},
            )
            target = q.squeeze(-1).amin(0) - alpha * log_prob
        loss = distance_loss(value, target, self.loss_function)
        return _reduce(loss, self.reduction, weights), {}

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute the losses on a batch of transitions; writes ``td_error`` into it.

        Returns:
            a TensorDict with ``loss_actor``, ``loss_qvalue``, ``loss_alpha``, ``alpha``
            and ``entropy`` (and ``loss_value`` with a value network).
        """
        # the temperature and the priority weights, read once for every term
        alpha = self._alpha
        weights = self._priority_weight(tensordict)
        loss_qvalue, metadata = self._qvalue_loss(tensordict, alpha, weights)
        loss_value = None
        if self._version == 1:
            loss_value = self._value_loss(tensordict, alpha, weights)[0]
        loss_actor, metadata_actor = self._actor_loss(tensordict, alpha, weights)
        log_prob = metadata_actor["log_prob"]
        mean_log_prob = log_prob.mean()
        loss_alpha = self._reduced_alpha_loss(log_prob, self.reduction, weights, mean_log_prob)
        tensordict.set(self.tensor_keys.priority, metadata["td_error"], inplace=True)
        out = {"loss_actor": loss_actor, "loss_qvalue": loss_qvalue, "loss_alpha": loss_alpha}
        if loss_value is not None:
            out["loss_value"] = loss_value
        return _loss_output(
            out,
            {"alpha": alpha, "entropy": -mean_log_prob},
            reduction=self.reduction,
            scalar_output_mode=self.scalar_output_mode,
            batch_size=tensordict.batch_size,
        )


class DiscreteSACLoss(_EntropyTemperature, LossModule):
    """Soft Actor-Critic for discrete actions.

    The actor gives a categorical distribution (``probs`` / ``logits``) and the Q networks
    write ``action_value`` ``[*B, n]``. Expectations over actions are exact: the target is
    ``r + gamma * (1 - terminated) * sum_a pi(a|s') (min_i Q_target_i(s', a) - alpha *
    log pi(a|s'))``; the actor minimises ``sum_a pi(a|s) (alpha * log pi(a|s) - min_i
    Q_i(s, a))`` with the critics held out; ``target_entropy="auto"`` is
    ``target_entropy_weight * log(num_actions)``. Paper: https://arxiv.org/abs/1910.07207.

    Args:
        actor_network (ProbabilisticTensorDictSequential): a categorical policy.
        qvalue_network (nn.Module): writes ``action_value`` ``[*B, n]``.

    Keyword Args:
        action_space (str or TensorSpec): ``"one-hot"`` or ``"categorical"``.
        num_actions (int, optional): the number of actions (for ``target_entropy="auto"``);
            read from the first batch when not given.
        num_qvalue_nets (int): number of Q networks. Defaults to 2.
        loss_function (str): ``"smooth_l1"`` (default), ``"l2"`` or ``"l1"``.
        alpha_init, min_alpha, max_alpha, fixed_alpha: the temperature, as in SACLoss.
        target_entropy_weight (float): fraction of the maximal entropy aimed at.
            Defaults to 0.98.
        target_entropy (float or "auto"): Defaults to ``"auto"``.
        delay_qvalue (bool): keep target Q networks. Defaults to ``True``.
        gamma (float, optional): discount for the value estimator.
        separate_losses (bool): as in SACLoss.
        reduction (str): ``"mean"`` (default), ``"sum"`` or ``"none"``.
        priority_key (NestedKey, optional): deprecated shortcut for ``set_keys(priority=...)``.
        use_prioritized_weights (bool or "auto"): weight by ``priority_weight``.
        skip_done_states, deactivate_vmap, scalar_output_mode: as in SACLoss.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.modules import OneHotCategorical, ProbabilisticActor
        >>> from rl.objectives import DiscreteSACLoss
        >>> actor = ProbabilisticActor(
        ...     TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["logits"]),
        ...     in_keys=["logits"],
        ...     distribution_class=OneHotCategorical,
        ... )
        >>> qnet = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["action_value"])
        >>> loss = DiscreteSACLoss(actor, qnet, action_space="one-hot", num_actions=2)
        >>> data = TensorDict(
        ...     observation=torch.randn(4, 3),
        ...     action=torch.nn.functional.one_hot(torch.randint(2, (4,)), 2),
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
        """Keys read and written by DiscreteSACLoss (see :class:`SACLoss`)."""

        action: NestedKey = "action"
        value: NestedKey = "state_value"
        action_value: NestedKey = "action_value"
        priority: NestedKey = "td_error"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"
        log_prob: NestedKey = "log_prob"
        priority_weight: NestedKey = "priority_weight"

    default_value_estimator = "TD0"
    SUPPORTED_VALUE_ESTIMATORS = _TD_ESTIMATORS
    delay_actor: bool = False  # the target uses the online actor, as in TorchRL
    _target_entropy_hint = "give num_actions=... or run a batch through the loss first"

    def __init__(
        self,
        actor_network: nn.Module,
        qvalue_network: nn.Module,
        *,
        action_space: str | TensorSpec | None = None,
        num_actions: int | None = None,
        num_qvalue_nets: int = 2,
        loss_function: Literal["l2", "l1", "smooth_l1"] = "smooth_l1",
        alpha_init: float = 1.0,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        fixed_alpha: bool = False,
        target_entropy_weight: float = 0.98,
        target_entropy: str | float = "auto",
        delay_qvalue: bool = True,
        gamma: float | None = None,
        separate_losses: bool = False,
        reduction: Literal["mean", "sum", "none"] | None = None,
        priority_key: NestedKey | None = None,
        use_prioritized_weights: str | bool = "auto",
        skip_done_states: bool = False,
        deactivate_vmap: bool = False,
        scalar_output_mode: Literal["exclude", "non_tensor"] | None = None,
    ) -> None:
        super().__init__()
        _check_loss_function(loss_function)
        self.skip_done_states = skip_done_states
        self.deactivate_vmap = deactivate_vmap
        self.scalar_output_mode = _check_scalar_output_mode(scalar_output_mode)
        self.action_space = _find_action_space(
            action_space,
            qvalue_network[0] if isinstance(qvalue_network, (list, tuple)) else qvalue_network,
        )
        self.delay_qvalue = delay_qvalue
        self.num_qvalue_nets = num_qvalue_nets
        self.loss_function = loss_function
        self.reduction = _check_reduction(reduction)
        if priority_key is not None:  # deprecated in TorchRL: set_keys(priority=...)
            self._tensor_keys.priority = priority_key
        self.use_prioritized_weights = use_prioritized_weights
        self.gamma = gamma
        self.target_entropy_weight = target_entropy_weight
        self.convert_to_functional(actor_network, "actor_network")
        self.convert_to_functional(
            qvalue_network,
            "qvalue_network",
            num_qvalue_nets,
            create_target_params=delay_qvalue,
            compare_against=list(actor_network.parameters()) if separate_losses else None,
        )
        auto = None if num_actions is None else target_entropy_weight * math.log(num_actions)
        self._init_temperature(alpha_init, min_alpha, max_alpha, fixed_alpha, target_entropy, auto)
        self._set_in_keys()

    def _set_in_keys(self) -> None:
        """``in_keys`` from the networks and ``tensor_keys`` (again after ``set_keys``)."""
        tk = self.tensor_keys
        actor_keys = list(getattr(self.actor_network, "in_keys", []))
        q_keys = list(getattr(self.qvalue_network, "in_keys", []))
        keys = [tk.action, *actor_keys, *q_keys, *_next_keys([tk.reward, tk.done, tk.terminated])]
        keys += _next_keys(list(dict.fromkeys(actor_keys + q_keys)))
        next_action = _next_keys([tk.action])[0]  # drawn by the loss, never read
        self.in_keys = [k for k in dict.fromkeys(keys) if k != next_action]
        self.out_keys = ["loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy"]
        self._in_keys_extra = list(dict.fromkeys(actor_keys + q_keys))

    def _required_key_names(self):
        return ("action",)

    def _probs(self, actor, tensordict) -> tuple[torch.Tensor, torch.Tensor]:
        dist = _network_dist(actor, tensordict)
        probs = dist.probs
        log_probs = torch.log(torch.where(probs == 0, torch.full_like(probs, 1e-8), probs))
        return probs, log_probs

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute the losses on a batch of transitions; writes ``td_error`` into it.

        Returns:
            a TensorDict with ``loss_actor``, ``loss_qvalue``, ``loss_alpha``, ``alpha``
            and ``entropy``.
        """
        key = self.tensor_keys.action_value
        action = self._get(tensordict, "action")
        alpha = self._alpha
        with torch.no_grad():
            next_value = self._on_nonterminal(tensordict, self._next_state_value)
            target = self._value_target(tensordict, next_value).squeeze(-1)
        values = self._ensemble_values("qvalue_network", "online", tensordict, key)  # [N, *B, n]
        self._size_target_entropy(
            self.target_entropy_weight * math.log(values.shape[-1]), values.device
        )
        pred = torch.stack([_select(v, action, self.action_space or "one-hot") for v in values])
        loss_qvalue = distance_loss(pred, target.expand_as(pred), self.loss_function).sum(0)
        weights = self._priority_weight(tensordict)
        loss_qvalue = _reduce(loss_qvalue, self.reduction, weights)
        tensordict.set(
            self.tensor_keys.priority, (pred.detach() - target).abs().max(0)[0], inplace=True
        )

        probs, log_probs = self._probs(self.actor_network, tensordict)
        min_q = self._ensemble_values("qvalue_network", "detached", tensordict, key).min(0)[0]
        loss_actor = _reduce((probs * (alpha * log_probs - min_q)).sum(-1), self.reduction, weights)
        neg_entropy = (probs * log_probs).sum(-1).detach()
        loss_alpha = _reduce(self._alpha_loss(neg_entropy), self.reduction, weights)
        return _loss_output(
            {"loss_actor": loss_actor, "loss_qvalue": loss_qvalue, "loss_alpha": loss_alpha},
            {"alpha": alpha, "entropy": -neg_entropy.mean()},
            reduction=self.reduction,
            scalar_output_mode=self.scalar_output_mode,
            batch_size=tensordict.batch_size,
        )

    def _next_state_value(self, next_td: TensorDictBase) -> torch.Tensor:
        """``sum_a pi(a|s') (min_i Q_target_i(s', a) - alpha log pi(a|s'))`` ``[*b, 1]``."""
        next_td = next_td.copy()
        next_probs, next_log_probs = self._probs(self._target_network("actor_network"), next_td)
        key = self.tensor_keys.action_value
        next_q = self._ensemble_values("qvalue_network", "target", next_td, key)
        next_q = next_q.min(0)[0]
        return (next_probs * (next_q - self._alpha * next_log_probs)).sum(-1, keepdim=True)
