"""Deep Q-learning losses: DQNLoss (with double DQN) and DistributionalDQNLoss (C51)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey
from torch import nn

from rl.core import TensorSpec

from ._actions import _check_action, _find_action_space, _mask, _resolve_space, _select
from ._loss import _TD_ESTIMATORS, LossModule, _UnsupportedEstimatorError
from ._networks import _network_output
from ._reduction import _check_loss_function, _check_reduction, _reduce, distance_loss
from .value import ValueEstimators

__all__ = ["DQNLoss", "DistributionalDQNLoss"]


class DQNLoss(LossModule):
    """The DQN loss, with optional double DQN.

    The value network reads an observation and writes ``action_value`` (``[*B, n]``).
    The target is ``r + gamma * (1 - terminated) * Q_target(s', a*)`` with
    ``a* = argmax_a Q_target(s', a)`` (``argmax_a Q(s', a)`` with ``double_dqn=True``),
    built by the value estimator (TD(0) by default, see :meth:`make_value_estimator`).
    Actions are one-hot or indices; a ``("next", "action_mask")`` entry, when present,
    keeps disallowed actions out of the max. The squared TD error is written to the
    input under ``"td_error"`` for prioritized replay. Paper:
    https://arxiv.org/abs/1312.5602 (double DQN: https://arxiv.org/abs/1509.06461).

    Args:
        value_network (nn.Module): a TensorDict module writing ``action_value``, e.g.
            :class:`~rl.modules.QValueActor`.

    Keyword Args:
        loss_function (str): ``"l2"``, ``"l1"`` or ``"smooth_l1"``. Defaults to ``"l2"``.
        delay_value (bool): keep a target copy of the network. Defaults to ``True``.
        double_dqn (bool): pick the next action with the online network. Defaults to
            ``False``; needs ``delay_value=True``.
        gamma (float, optional): discount, passed to the value estimator (TorchRL now
            rejects it here; it is accepted and used).
        action_space (str or TensorSpec, optional): ``"one-hot"`` or ``"categorical"`` or
            a spec; read from ``value_network.action_space`` / ``.spec`` when ``None``, and
            from the shapes of the data as a last resort.
        reduction (str): ``"mean"`` (default), ``"sum"`` or ``"none"``.
        priority_key (NestedKey, optional): deprecated shortcut for ``set_keys(priority=...)``.
        use_prioritized_weights (bool or "auto"): weight the loss by
            ``priority_weight`` when present. Defaults to ``"auto"``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.objectives import DQNLoss
        >>> qnet = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["action_value"])
        >>> loss = DQNLoss(value_network=qnet, action_space="categorical", gamma=0.99)
        >>> data = TensorDict(
        ...     observation=torch.randn(5, 3),
        ...     action=torch.randint(2, (5,)),
        ...     next=TensorDict(
        ...         observation=torch.randn(5, 3),
        ...         reward=torch.randn(5, 1),
        ...         done=torch.zeros(5, 1, dtype=torch.bool),
        ...         terminated=torch.zeros(5, 1, dtype=torch.bool),
        ...         batch_size=[5],
        ...     ),
        ...     batch_size=[5],
        ... )
        >>> out = loss(data)
        >>> out["loss"].shape, data["td_error"].shape
        (torch.Size([]), torch.Size([5, 1]))
    """

    @dataclass
    class _AcceptedKeys:
        """Keys read and written by DQNLoss.

        Attributes:
            advantage, value_target: forwarded to the value estimator.
            value: where the chosen action's value is written (``"chosen_action_value"``).
            action_value: the network's output (``"action_value"``).
            action: the taken action (``"action"``).
            action_mask: optional mask of allowed actions (``"action_mask"``).
            priority: where the TD error is written (``"td_error"``).
            reward, done, terminated: read under ``"next"``.
            priority_weight: importance weights of a prioritized buffer.
        """

        advantage: NestedKey = "advantage"
        value_target: NestedKey = "value_target"
        value: NestedKey = "chosen_action_value"
        action_value: NestedKey = "action_value"
        action: NestedKey = "action"
        action_mask: NestedKey = "action_mask"
        priority: NestedKey = "td_error"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"
        priority_weight: NestedKey = "priority_weight"

    default_value_estimator = "TD0"
    SUPPORTED_VALUE_ESTIMATORS = _TD_ESTIMATORS

    def __init__(
        self,
        value_network: nn.Module,
        *,
        loss_function: Literal["l2", "l1", "smooth_l1"] = "l2",
        delay_value: bool = True,
        double_dqn: bool = False,
        gamma: float | None = None,
        action_space: str | TensorSpec | None = None,
        reduction: Literal["mean", "sum", "none"] | None = None,
        priority_key: NestedKey | None = None,
        use_prioritized_weights: str | bool = "auto",
    ) -> None:
        super().__init__()
        if double_dqn and not delay_value:
            raise ValueError("double_dqn=True requires delay_value=True")
        self.delay_value = delay_value
        self.double_dqn = double_dqn
        self.loss_function = _check_loss_function(loss_function)
        self.reduction = _check_reduction(reduction)
        if priority_key is not None:  # deprecated in TorchRL: set_keys(priority=...)
            self._tensor_keys.priority = priority_key
        self.use_prioritized_weights = use_prioritized_weights
        self.gamma = gamma
        self.action_space = _find_action_space(action_space, value_network)
        self.convert_to_functional(value_network, "value_network", create_target_params=delay_value)
        self._set_in_keys()

    def _set_in_keys(self) -> None:
        net_keys = list(getattr(self.value_network, "in_keys", []))
        keys = [self.tensor_keys.action, *net_keys]
        keys += [
            ("next", k)
            for k in (self.tensor_keys.reward, self.tensor_keys.done, self.tensor_keys.terminated)
        ]
        keys += [("next", k) if isinstance(k, str) else ("next", *k) for k in net_keys]
        self.in_keys = list(dict.fromkeys(keys))
        self.out_keys = ["loss"]
        self._in_keys_extra = net_keys

    def _required_key_names(self):
        return ("action",)

    def _next_value(self, next_td: TensorDictBase) -> torch.Tensor:
        """``Q_target(s', a*)``, ``[*B, 1]``, without gradient."""
        key = self.tensor_keys.action_value
        with torch.no_grad():
            mask = next_td.get(self.tensor_keys.action_mask, None)
            target_values = _network_output(self._target_network("value_network"), next_td, key)
            if self.double_dqn:
                online = _network_output(self.value_network, next_td, key)
                index = _mask(online, mask).argmax(-1, keepdim=True)
            else:
                index = _mask(target_values, mask).argmax(-1, keepdim=True)
            return target_values.gather(-1, index)

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute the loss on a batch of transitions; writes ``td_error`` into it.

        Args:
            tensordict (TensorDictBase): transitions with the network's inputs, ``action``
                and ``("next", ...)`` observation, ``reward``, ``done``, ``terminated``.

        Returns:
            a TensorDict with ``loss``.
        """
        action = self._get(tensordict, "action")
        values = _network_output(self.value_network, tensordict, self.tensor_keys.action_value)
        space = _resolve_space(self.action_space, action, values)
        _check_action(self.tensor_keys.action, action, values, space)
        pred = _select(values, action, space)
        next_value = self._next_value(tensordict.get("next"))
        target = self._value_target(tensordict, next_value).squeeze(-1)
        td_error = (pred.detach() - target).pow(2)
        tensordict.set(self.tensor_keys.priority, td_error.unsqueeze(-1), inplace=True)
        loss = distance_loss(pred, target, self.loss_function)
        return TensorDict(loss=_reduce(loss, self.reduction, self._priority_weight(tensordict)))


class DistributionalDQNLoss(LossModule):
    """The categorical distributional DQN loss (C51), with double-Q action selection.

    The value network writes ``action_value``: log-probabilities over ``atoms`` support
    points for each action, ``[*B, atoms, n]``. The target distribution is the target
    network's at ``a* = argmax_a E[Z(s', a)]`` (expectation under the online network),
    shifted by ``r + gamma * (1 - terminated) * z``, clamped to the support and projected
    back onto it; the loss is its cross-entropy with the predicted distribution of the
    taken action. The per-sample loss is written under ``"td_error"``. Paper:
    https://arxiv.org/abs/1707.06887.

    Args:
        value_network (nn.Module): a TensorDict module writing log-probabilities, e.g.
            :class:`~rl.modules.DistributionalQValueActor`; its ``support`` attribute
            gives the atoms unless ``support`` is passed.

    Keyword Args:
        gamma (float): discount (required, as TorchRL's).
        delay_value (bool): keep a target copy of the network. Defaults to ``True``.
        support (Tensor, optional): the atoms ``[atoms]``.
        action_space (str or TensorSpec, optional): as in :class:`DQNLoss`.
        reduction (str): ``"mean"`` (default), ``"sum"`` or ``"none"``.
        priority_key (NestedKey, optional): deprecated shortcut for ``set_keys(priority=...)``.
        use_prioritized_weights (bool or "auto"): weight by ``priority_weight``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.objectives import DistributionalDQNLoss
        >>> class Net(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.linear = torch.nn.Linear(3, 5 * 2)
        ...     def forward(self, obs):
        ...         return self.linear(obs).view(*obs.shape[:-1], 5, 2).log_softmax(-2)
        >>> qnet = TensorDictModule(Net(), ["observation"], ["action_value"])
        >>> loss = DistributionalDQNLoss(
        ...     qnet, gamma=0.9, support=torch.linspace(-1, 1, 5), action_space="categorical"
        ... )
        >>> data = TensorDict(
        ...     observation=torch.randn(4, 3),
        ...     action=torch.randint(2, (4,)),
        ...     next=TensorDict(
        ...         observation=torch.randn(4, 3),
        ...         reward=torch.randn(4, 1),
        ...         done=torch.zeros(4, 1, dtype=torch.bool),
        ...         terminated=torch.zeros(4, 1, dtype=torch.bool),
        ...         batch_size=[4],
        ...     ),
        ...     batch_size=[4],
        ... )
        >>> loss(data)["loss"].shape
        torch.Size([])
    """

    @dataclass
    class _AcceptedKeys:
        """Keys read and written by DistributionalDQNLoss (see :class:`DQNLoss`)."""

        action_value: NestedKey = "action_value"
        action: NestedKey = "action"
        action_mask: NestedKey = "action_mask"
        priority: NestedKey = "td_error"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"
        steps_to_next_obs: NestedKey = "steps_to_next_obs"
        priority_weight: NestedKey = "priority_weight"

    default_value_estimator = "TD0"
    SUPPORTED_VALUE_ESTIMATORS = (ValueEstimators.TD0,)

    def __init__(
        self,
        value_network: nn.Module,
        *,
        gamma: float,
        delay_value: bool = True,
        support: torch.Tensor | None = None,
        action_space: str | TensorSpec | None = None,
        reduction: Literal["mean", "sum", "none"] | None = None,
        priority_key: NestedKey | None = None,
        use_prioritized_weights: str | bool = "auto",
    ) -> None:
        super().__init__()
        if support is None:
            support = getattr(value_network, "support", None)
            if support is None:
                for sub in value_network.modules():
                    if isinstance(getattr(sub, "support", None), torch.Tensor):
                        support = sub.support
                        break
        if support is None:
            raise ValueError(
                "DistributionalDQNLoss needs the atoms: pass support=... or a value_network "
                "with a `support` attribute"
            )
        self.register_buffer(
            "support", torch.as_tensor(support, dtype=torch.get_default_dtype()).clone()
        )
        self.gamma = gamma
        self.delay_value = delay_value
        self.reduction = _check_reduction(reduction)
        if priority_key is not None:  # deprecated in TorchRL: set_keys(priority=...)
            self._tensor_keys.priority = priority_key
        self.use_prioritized_weights = use_prioritized_weights
        self.action_space = _find_action_space(action_space, value_network)
        self.convert_to_functional(value_network, "value_network", create_target_params=delay_value)
        self.in_keys = [self.tensor_keys.action, *getattr(value_network, "in_keys", [])]
        self.out_keys = ["loss"]
        self._in_keys_extra = list(getattr(value_network, "in_keys", []))

    def _required_key_names(self):
        return ("action",)

    def make_value_estimator(self, value_type=None, **hyperparams):
        """Only TD(0) is supported; ``gamma=`` updates the discount."""
        if value_type is not None and value_type not in (ValueEstimators.TD0, "TD0"):
            raise _UnsupportedEstimatorError(
                f"DistributionalDQNLoss does not support the {value_type} value estimator; "
                "supported: ['TD0']"
            )
        if "gamma" in hyperparams:
            self.gamma = hyperparams.pop("gamma")
        self.value_type = ValueEstimators.TD0
        return self

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute the loss on a batch of transitions; writes ``td_error`` into it."""
        action = self._get(tensordict, "action")
        next_td = tensordict.get("next")
        reward = self._get(tensordict, "reward", "next")
        done = self._get(tensordict, "done", "next")
        terminated = next_td.get(self.tensor_keys.terminated, done)
        steps = tensordict.get(self.tensor_keys.steps_to_next_obs, None)
        discount = self.gamma if steps is None else self.gamma**steps
        support = self.support
        atoms = support.numel()
        v_min, v_max = support[0], support[-1]
        delta = (v_max - v_min) / (atoms - 1)

        log_p = _network_output(self.value_network, tensordict, self.tensor_keys.action_value)
        if log_p.shape[-2] != atoms:
            raise ValueError(
                f"action_value has shape {tuple(log_p.shape)}: expected [*B, atoms={atoms}, n_actions]"
            )
        space = _resolve_space(self.action_space, action, log_p[..., 0, :])
        _check_action(self.tensor_keys.action, action, log_p[..., 0, :], space)
        if space == "categorical":
            index = action.long().reshape(*log_p.shape[:-2], 1, 1).expand(*log_p.shape[:-1], 1)
        else:
            index = action.argmax(-1).reshape(*log_p.shape[:-2], 1, 1).expand(*log_p.shape[:-1], 1)
        log_p_a = log_p.gather(-1, index).squeeze(-1)  # [*B, atoms]

        with torch.no_grad():
            mask = next_td.get(self.tensor_keys.action_mask, None)
            online_next = _network_output(
                self.value_network, next_td, self.tensor_keys.action_value
            )
            expected = (online_next.exp() * support.unsqueeze(-1)).sum(-2)
            if mask is not None:
                expected = expected.masked_fill(~mask.bool(), torch.finfo(expected.dtype).min)
            best = expected.argmax(-1)
            target_next = _network_output(
                self._target_network("value_network"), next_td, self.tensor_keys.action_value
            )
            p_next = target_next.exp()
            p_next = p_next.gather(
                -1, best.reshape(*best.shape, 1, 1).expand(*p_next.shape[:-1], 1)
            ).squeeze(-1)
            not_term = 1.0 - terminated.to(reward.dtype)
            tz = (reward + not_term * discount * support).clamp(v_min, v_max)  # [*B, atoms]
            b = (tz - v_min) / delta
            low, up = b.floor().long(), b.ceil().long()
            # when b lands on an atom, low == up: give the mass to that atom once
            low = torch.where((up > 0) & (low == up), low - 1, low)
            up = torch.where((low < atoms - 1) & (low == up), up + 1, up)
            m = torch.zeros_like(p_next)
            m.scatter_add_(-1, low, p_next * (up.to(b.dtype) - b))
            m.scatter_add_(-1, up, p_next * (b - low.to(b.dtype)))
        loss = -(m * log_p_a).sum(-1)
        tensordict.set(self.tensor_keys.priority, loss.detach().unsqueeze(-1), inplace=True)
        return TensorDict(loss=_reduce(loss, self.reduction, self._priority_weight(tensordict)))
