"""Soft Actor-Critic losses: SACLoss (continuous actions) and DiscreteSACLoss."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import InteractionType, set_interaction_type
from tensordict.utils import NestedKey
from torch import nn

from rl.core import Composite, TensorSpec

from ._ddpg import _next_keys
from ._dqn import _check_reduction, _find_action_space, _reduce, _select
from ._loss import LossModule
from ._td3 import _run_ensemble
from ._utils import _network_dist, _network_output, distance_loss

__all__ = ["DiscreteSACLoss", "SACLoss"]


def _rsample_log_prob(dist) -> tuple[torch.Tensor, torch.Tensor]:
    """A reparameterised sample and its log-probability summed over the action dims."""
    joint = getattr(dist, "rsample_and_log_prob", None)
    if joint is not None:  # scores the pre-squash value: cheaper and exact near the bounds
        action, log_prob = joint()
    else:
        action = dist.rsample()
        log_prob = dist.log_prob(action)
    if log_prob.shape == action.shape and action.ndim > 0:
        # a factorised distribution that does not sum over the event: sum it here
        log_prob = log_prob.sum(-1)
    return action, log_prob


def _action_numel(spec, action_key) -> int | None:
    if spec is None:
        return None
    if isinstance(spec, Composite):
        if action_key not in spec.keys(True, True):
            return None
        spec = spec[action_key]
    return int(math.prod(spec.shape)) if len(spec.shape) else 1


class _TemperatureMixin:
    """The learned (or fixed) entropy temperature shared by the SAC losses."""

    def _init_temperature(self, alpha_init, min_alpha, max_alpha, fixed_alpha) -> None:
        if alpha_init <= 0:
            raise ValueError(f"alpha_init must be > 0, got {alpha_init}")
        if (min_alpha is None) != (max_alpha is None):
            min_alpha = 0.0 if min_alpha is None else min_alpha
            max_alpha = 1e9 if max_alpha is None else max_alpha
        if max_alpha is not None and max_alpha <= 0:
            raise ValueError(f"max_alpha must be None or > 0, got {max_alpha}")
        self.min_log_alpha = math.log(min_alpha) if min_alpha else None
        self.max_log_alpha = math.log(max_alpha) if max_alpha else None
        self.fixed_alpha = fixed_alpha
        self.register_buffer("alpha_init", torch.tensor(float(alpha_init)))
        log_alpha = torch.tensor(math.log(alpha_init))
        if fixed_alpha:
            self.register_buffer("log_alpha", log_alpha)
        else:
            self.log_alpha = nn.Parameter(log_alpha)

    @property
    def _alpha(self) -> torch.Tensor:
        if self.min_log_alpha is not None or self.max_log_alpha is not None:
            with torch.no_grad():
                self.log_alpha.clamp_(self.min_log_alpha, self.max_log_alpha)
        return self.log_alpha.detach().exp()

    def _alpha_loss(self, log_prob: torch.Tensor) -> torch.Tensor:
        target_entropy = self.target_entropy
        return -self.log_alpha * (log_prob + target_entropy)


class SACLoss(_TemperatureMixin, LossModule):
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
        use_prioritized_weights (bool or "auto"): weight by ``priority_weight``.

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
                kept for TorchRL compatibility.
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
        reduction: Literal["mean", "sum", "none"] = "mean",
        use_prioritized_weights: str | bool = "auto",
    ) -> None:
        super().__init__()
        if loss_function not in ("l2", "l1", "smooth_l1"):
            raise ValueError(
                f"unknown loss_function {loss_function!r}; valid ones are ['l2', 'l1', 'smooth_l1']"
            )
        if num_qvalue_nets < 1:
            raise ValueError(f"num_qvalue_nets must be >= 1, got {num_qvalue_nets}")
        self.delay_actor = delay_actor
        self.delay_qvalue = delay_qvalue
        self.delay_value = delay_value
        self.num_qvalue_nets = num_qvalue_nets
        self.loss_function = loss_function
        self.reduction = _check_reduction(reduction)
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
        self._init_temperature(alpha_init, min_alpha, max_alpha, fixed_alpha)
        if target_entropy == "auto":
            numel = _action_numel(action_spec, self.tensor_keys.action)
            if numel is None:
                numel = _action_numel(getattr(actor_network, "spec", None), self.tensor_keys.action)
            target_entropy = None if numel is None else -float(numel)
        elif isinstance(target_entropy, str):
            raise ValueError(f"target_entropy must be a number or 'auto', got {target_entropy!r}")
        # None until the first batch tells the action size ("auto" without a spec)
        self.register_buffer(
            "_target_entropy",
            None if target_entropy is None else torch.tensor(float(target_entropy)),
        )
        self._set_in_keys()

    @property
    def target_entropy(self) -> torch.Tensor:
        """The entropy the temperature aims at (``-action dims`` for ``"auto"``)."""
        if self._target_entropy is None:
            raise RuntimeError(
                "target_entropy='auto' could not be sized: give action_spec=..., an actor with a "
                "spec, or run a batch through the loss first"
            )
        return self._target_entropy

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

    def _forward_value_estimator_keys(self, **kwargs) -> None:
        if self._value_estimator is not None:
            tk = self.tensor_keys
            self._value_estimator.set_keys(
                value=tk.value, reward=tk.reward, done=tk.done, terminated=tk.terminated
            )

    def _supported_value_estimators(self):
        from .value import ValueEstimators

        return (ValueEstimators.TD0, ValueEstimators.TD1, ValueEstimators.TDLambda)

    def _weights(self, tensordict):
        if self.use_prioritized_weights in (True, "auto"):
            return tensordict.get(self.tensor_keys.priority_weight, None)
        return None

    def _sample(self, actor, tensordict: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        with set_interaction_type(InteractionType.RANDOM):
            dist = _network_dist(actor, tensordict)
        return _rsample_log_prob(dist)

    def _target_value(self, tensordict: TensorDictBase) -> torch.Tensor:
        """The soft Bellman target ``[*B]`` (no gradient)."""
        with torch.no_grad():
            next_td = tensordict.get("next")
            if self._version == 1:
                value_net = self._target_network("value_network")
                next_value = _network_output(value_net, next_td, self.tensor_keys.value)
            else:
                next_action, next_log_prob = self._sample(
                    self._target_network("actor_network"), next_td
                )
                q = _run_ensemble(
                    self._ensemble("qvalue_network", "target"),
                    next_td,
                    self.tensor_keys.state_action_value,
                    {self.tensor_keys.action: next_action},
                )
                next_value = (q - self._alpha * next_log_prob.unsqueeze(-1)).min(0)[0]
            return self._value_target(tensordict, next_value).squeeze(-1)

    def qvalue_loss(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, dict]:
        """Soft Q regression; returns ``(loss, {"td_error": [*B]})``."""
        target = self._target_value(tensordict)
        self._get(tensordict, "action")
        members = self._ensemble("qvalue_network")
        pred = _run_ensemble(members, tensordict, self.tensor_keys.state_action_value).squeeze(-1)
        loss = distance_loss(pred, target.expand_as(pred), self.loss_function).sum(0)
        td_error = (pred.detach() - target).abs().max(0)[0]
        return _reduce(loss, self.reduction, self._weights(tensordict)), {"td_error": td_error}

    def actor_loss(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, dict]:
        """``alpha * log pi(a|s) - min_i Q_i(s, a)``; returns ``(loss, {"log_prob": ...})``."""
        action, log_prob = self._sample(self.actor_network, tensordict)
        q = _run_ensemble(
            self._ensemble("qvalue_network", "detached"),
            tensordict,
            self.tensor_keys.state_action_value,
            {self.tensor_keys.action: action},
        )
        min_q = q.min(0)[0].squeeze(-1)
        if self._target_entropy is None:  # "auto" sized by the first batch
            numel = action.shape[tensordict.batch_dims :].numel()
            self._target_entropy = torch.tensor(-float(numel), device=action.device)
        loss = self._alpha * log_prob - min_q
        return _reduce(loss, self.reduction, self._weights(tensordict)), {
            "log_prob": log_prob.detach()
        }

    def value_loss(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, dict]:
        """SAC v1 value regression on ``min_i Q_target_i(s, a) - alpha * log pi(a|s)``."""
        value = _network_output(self.value_network, tensordict, self.tensor_keys.value).squeeze(-1)
        with torch.no_grad():
            action, log_prob = self._sample(self._target_network("actor_network"), tensordict)
            td_q = tensordict.copy()
            td_q.set(self.tensor_keys.action, action)
            q = _run_ensemble(
                self._ensemble("qvalue_network", "target"),
                td_q,
                self.tensor_keys.state_action_value,
            )
            target = q.squeeze(-1).min(0)[0] - self._alpha * log_prob
        loss = distance_loss(value, target, self.loss_function)
        return _reduce(loss, self.reduction, self._weights(tensordict)), {}

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute the losses on a batch of transitions; writes ``td_error`` into it.

        Returns:
            a TensorDict with ``loss_actor``, ``loss_qvalue``, ``loss_alpha``, ``alpha``
            and ``entropy`` (and ``loss_value`` with a value network).
        """
        loss_qvalue, metadata = self.qvalue_loss(tensordict)
        loss_value = self.value_loss(tensordict)[0] if self._version == 1 else None
        loss_actor, metadata_actor = self.actor_loss(tensordict)
        log_prob = metadata_actor["log_prob"]
        loss_alpha = _reduce(self._alpha_loss(log_prob), self.reduction, self._weights(tensordict))
        tensordict.set(self.tensor_keys.priority, metadata["td_error"], inplace=True)
        out = {"loss_actor": loss_actor, "loss_qvalue": loss_qvalue, "loss_alpha": loss_alpha}
        if loss_value is not None:
            out["loss_value"] = loss_value
        out["alpha"] = self._alpha
        out["entropy"] = -log_prob.mean()
        return TensorDict(out)


class DiscreteSACLoss(_TemperatureMixin, LossModule):
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
        use_prioritized_weights (bool or "auto"): weight by ``priority_weight``.

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
        reduction: Literal["mean", "sum", "none"] = "mean",
        use_prioritized_weights: str | bool = "auto",
    ) -> None:
        super().__init__()
        if loss_function not in ("l2", "l1", "smooth_l1"):
            raise ValueError(
                f"unknown loss_function {loss_function!r}; valid ones are ['l2', 'l1', 'smooth_l1']"
            )
        self.action_space = _find_action_space(action_space, qvalue_network)
        self.delay_qvalue = delay_qvalue
        self.num_qvalue_nets = num_qvalue_nets
        self.loss_function = loss_function
        self.reduction = _check_reduction(reduction)
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
        self._init_temperature(alpha_init, min_alpha, max_alpha, fixed_alpha)
        if target_entropy == "auto":
            target_entropy = (
                None if num_actions is None else target_entropy_weight * math.log(num_actions)
            )
        elif isinstance(target_entropy, str):
            raise ValueError(f"target_entropy must be a number or 'auto', got {target_entropy!r}")
        self.register_buffer(
            "_target_entropy",
            None if target_entropy is None else torch.tensor(float(target_entropy)),
        )
        actor_keys = list(getattr(actor_network, "in_keys", []))
        q_keys = list(getattr(qvalue_network, "in_keys", []))
        tk = self.tensor_keys
        self.in_keys = list(
            dict.fromkeys(
                [tk.action, *actor_keys, *q_keys, *_next_keys([tk.reward, tk.done, tk.terminated])]
            )
        )
        self.out_keys = ["loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy"]
        self._in_keys_extra = list(dict.fromkeys(actor_keys + q_keys))

    @property
    def target_entropy(self) -> torch.Tensor:
        """The entropy the temperature aims at (``weight * log(num_actions)`` for "auto")."""
        if self._target_entropy is None:
            raise RuntimeError("target_entropy='auto' needs num_actions=... or a first batch")
        return self._target_entropy

    def _required_key_names(self):
        return ("action",)

    def _forward_value_estimator_keys(self, **kwargs) -> None:
        if self._value_estimator is not None:
            tk = self.tensor_keys
            self._value_estimator.set_keys(
                value=tk.value, reward=tk.reward, done=tk.done, terminated=tk.terminated
            )

    def _supported_value_estimators(self):
        from .value import ValueEstimators

        return (ValueEstimators.TD0, ValueEstimators.TD1, ValueEstimators.TDLambda)

    def _weights(self, tensordict):
        if self.use_prioritized_weights in (True, "auto"):
            return tensordict.get(self.tensor_keys.priority_weight, None)
        return None

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
            next_td = tensordict.get("next").copy()
            next_probs, next_log_probs = self._probs(self._target_network("actor_network"), next_td)
            next_q = _run_ensemble(self._ensemble("qvalue_network", "target"), next_td, key).min(0)[
                0
            ]
            next_value = (next_probs * (next_q - alpha * next_log_probs)).sum(-1, keepdim=True)
            target = self._value_target(tensordict, next_value).squeeze(-1)
        values = _run_ensemble(self._ensemble("qvalue_network"), tensordict, key)  # [N, *B, n]
        if self._target_entropy is None:
            self._target_entropy = torch.tensor(
                self.target_entropy_weight * math.log(values.shape[-1])
            )
        pred = torch.stack([_select(v, action, self.action_space or "one-hot") for v in values])
        loss_qvalue = distance_loss(pred, target.expand_as(pred), self.loss_function).sum(0)
        weights = self._weights(tensordict)
        loss_qvalue = _reduce(loss_qvalue, self.reduction, weights)
        tensordict.set(
            self.tensor_keys.priority, (pred.detach() - target).abs().max(0)[0], inplace=True
        )

        probs, log_probs = self._probs(self.actor_network, tensordict)
        min_q = _run_ensemble(self._ensemble("qvalue_network", "detached"), tensordict, key).min(0)[
            0
        ]
        loss_actor = _reduce((probs * (alpha * log_probs - min_q)).sum(-1), self.reduction, weights)
        neg_entropy = (probs * log_probs).sum(-1).detach()
        loss_alpha = _reduce(self._alpha_loss(neg_entropy), self.reduction, weights)
        return TensorDict(
            loss_actor=loss_actor,
            loss_qvalue=loss_qvalue,
            loss_alpha=loss_alpha,
            alpha=alpha,
            entropy=-neg_entropy.mean(),
        )
