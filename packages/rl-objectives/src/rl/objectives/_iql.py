"""Implicit Q-learning losses: IQLLoss (continuous actions) and DiscreteIQLLoss."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey
from torch import nn

from rl.core import TensorSpec

from ._actions import _find_action_space, _resolve_space, _select
from ._loss import _TD_ESTIMATORS, LossModule
from ._networks import _network_dist, _network_output, _next_keys
from ._reduction import (
    _check_loss_function,
    _check_reduction,
    _loss_output,
    _reduce,
    distance_loss,
)

__all__ = ["DiscreteIQLLoss", "IQLLoss"]


def _expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """``|expectile - 1(diff < 0)| * diff**2``: the asymmetric squared loss of IQL."""
    weight = torch.where(diff > 0, expectile, 1.0 - expectile)
    return weight * diff.pow(2)


class IQLLoss(LossModule):
    r"""The Implicit Q-Learning loss (offline RL without querying unseen actions).

    Three losses, each training one network:

    - ``loss_value``: expectile regression of ``V(s)`` on ``min_i Q_target_i(s, a)``,
      ``|tau - 1(u < 0)| u^2`` with ``u = min_i Q_i(s, a) - V(s)`` and ``tau = expectile``;
    - ``loss_qvalue``: each ``Q_i(s, a)`` regressed on ``r + gamma (1 - terminated) V(s')``
      (the value estimator, TD(0) by default), summed over the ``num_qvalue_nets``
      critics;
    - ``loss_actor``: advantage-weighted log-likelihood of the dataset action,
      ``-exp(temperature * (min_i Q_target_i(s, a) - V(s))).clamp(max=100) * log pi(a|s)``.

    The squared TD error (max over critics) is written to the input under
    ``"td_error"``, and the log-probability under ``"_log_prob"``. Paper:
    https://arxiv.org/abs/2110.06169.

    Args:
        actor_network (ProbabilisticTensorDictSequential): a stochastic actor with
            ``get_dist`` (e.g. :class:`~rl.modules.ProbabilisticActor` over a
            :class:`~rl.modules.TanhNormal`).
        qvalue_network (TensorDictModule): reads the observation and ``action``, writes
            ``state_action_value``; copied into an ensemble of ``num_qvalue_nets``.
        value_network (TensorDictModule): reads the observation, writes ``state_value``.

    Keyword Args:
        num_qvalue_nets (int): number of critics. Defaults to 2.
        loss_function (str): ``"smooth_l1"`` (default), ``"l2"`` or ``"l1"``, for the
            critics.
        temperature (float): inverse temperature ``beta`` of the advantage weights;
            small values approach behaviour cloning. Defaults to 1.0.
        expectile (float): the expectile ``tau`` of the value loss. Defaults to 0.5.
        gamma (float, optional): discount for the value estimator (TorchRL rejects it
            here; it is accepted and used).
        priority_key (str, optional): deprecated, use ``set_keys(priority=...)``.
        separate_losses (bool): hold the actor's parameters out of the critic and value
            losses when the networks share them. Defaults to ``False``.
        reduction (str, optional): ``"mean"`` (default), ``"sum"`` or ``"none"``.
        deactivate_vmap (bool): accepted for compatibility (the critics always run as a
            loop over the members).
        scalar_output_mode (str, optional): with ``reduction="none"``, ``"exclude"``
            (default) leaves ``entropy`` out, ``"non_tensor"`` keeps it as non-tensor data.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import NormalParamExtractor, TensorDictModule
        >>> from rl.core import Bounded
        >>> from rl.modules import ProbabilisticActor, TanhNormal, ValueOperator
        >>> from rl.objectives import IQLLoss
        >>> n_obs, n_act = 3, 2
        >>> actor = ProbabilisticActor(
        ...     TensorDictModule(
        ...         torch.nn.Sequential(torch.nn.Linear(n_obs, 2 * n_act), NormalParamExtractor()),
        ...         ["observation"], ["loc", "scale"],
        ...     ),
        ...     in_keys=["loc", "scale"],
        ...     spec=Bounded(-1.0, 1.0, (n_act,)),
        ...     distribution_class=TanhNormal,
        ... )
        >>> class QNet(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.linear = torch.nn.Linear(n_obs + n_act, 1)
        ...     def forward(self, obs, act):
        ...         return self.linear(torch.cat([obs, act], -1))
        >>> qvalue = ValueOperator(QNet(), in_keys=["observation", "action"])
        >>> value = ValueOperator(torch.nn.Linear(n_obs, 1), in_keys=["observation"])
        >>> loss = IQLLoss(actor, qvalue, value, expectile=0.7, gamma=0.99)
        >>> data = TensorDict(
        ...     observation=torch.randn(4, n_obs),
        ...     action=torch.rand(4, n_act) * 1.8 - 0.9,
        ...     next=TensorDict(
        ...         observation=torch.randn(4, n_obs),
        ...         reward=torch.randn(4, 1),
        ...         done=torch.zeros(4, 1, dtype=torch.bool),
        ...         terminated=torch.zeros(4, 1, dtype=torch.bool),
        ...         batch_size=[4],
        ...     ),
        ...     batch_size=[4],
        ... )
        >>> sorted(loss(data).keys())
        ['entropy', 'loss_actor', 'loss_qvalue', 'loss_value']
        >>> data["td_error"].shape
        torch.Size([4])
    """

    @dataclass
    class _AcceptedKeys:
        """Keys read and written by IQLLoss.

        Attributes:
            value: the value network's output (``"state_value"``).
            action: the dataset action (``"action"``).
            log_prob: where the action's log-probability is written (``"_log_prob"``).
            priority: where the TD error is written (``"td_error"``).
            state_action_value: the critics' output (``"state_action_value"``).
            reward, done, terminated: read under ``"next"``.
        """

        value: NestedKey = "state_value"
        action: NestedKey = "action"
        log_prob: NestedKey = "_log_prob"
        priority: NestedKey = "td_error"
        state_action_value: NestedKey = "state_action_value"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"

    default_value_estimator = "TD0"
    SUPPORTED_VALUE_ESTIMATORS = _TD_ESTIMATORS

    def __init__(
        self,
        actor_network: nn.Module,
        qvalue_network: nn.Module,
        value_network: nn.Module,
        *,
        num_qvalue_nets: int = 2,
        loss_function: Literal["l2", "l1", "smooth_l1"] = "smooth_l1",
        temperature: float = 1.0,
        expectile: float = 0.5,
        gamma: float | None = None,
        priority_key: str | None = None,
        separate_losses: bool = False,
        reduction: Literal["mean", "sum", "none"] | None = None,
        deactivate_vmap: bool = False,
        scalar_output_mode: Literal["exclude", "non_tensor"] | None = None,
    ) -> None:
        super().__init__()
        if value_network is None:
            raise ValueError(f"{type(self).__name__} needs a value_network, got None")
        if not 0.0 <= expectile <= 1.0:  # 1.0: V regresses on the max (TorchRL allows it)
            raise ValueError(f"expectile must lie in [0, 1], got {expectile}")
        if num_qvalue_nets < 1:
            raise ValueError(f"num_qvalue_nets must be >= 1, got {num_qvalue_nets}")
        self.temperature = temperature
        self.expectile = expectile
        self.loss_function = _check_loss_function(loss_function)
        self.reduction = _check_reduction("mean" if reduction is None else reduction)
        self.scalar_output_mode = scalar_output_mode or "exclude"
        self.deactivate_vmap = deactivate_vmap
        self.num_qvalue_nets = num_qvalue_nets
        self.delay_qvalue = True
        self.gamma = gamma
        if priority_key is not None:
            self._tensor_keys.priority = priority_key
        self.convert_to_functional(actor_network, "actor_network")
        actor_params = list(actor_network.parameters()) if separate_losses else None
        self.convert_to_functional(value_network, "value_network", compare_against=actor_params)
        shared = None
        if separate_losses:
            shared = actor_params + list(value_network.parameters())
        self.convert_to_functional(
            qvalue_network,
            "qvalue_network",
            expand_dim=num_qvalue_nets,
            create_target_params=True,
            compare_against=shared,
        )
        self._set_in_keys()

    # ------------------------------------------------------------------ keys
    def _set_in_keys(self) -> None:
        tk = self.tensor_keys
        actor_keys = list(getattr(self.actor_network, "in_keys", []))
        q_keys = list(getattr(self.qvalue_network, "in_keys", []))
        v_keys = list(getattr(self.value_network, "in_keys", []))
        keys = [tk.action, *_next_keys([tk.reward, tk.done, tk.terminated])]
        keys += [*actor_keys, *_next_keys(v_keys), *q_keys, *v_keys]
        self.in_keys = list(dict.fromkeys(keys))
        self.out_keys = ["loss_actor", "loss_qvalue", "loss_value", "entropy"]
        self._in_keys_extra = list(dict.fromkeys(actor_keys + q_keys + v_keys + _next_keys(v_keys)))

    def _required_key_names(self):
        return ("action",)

    # ---------------------------------------------------------------- pieces
    @staticmethod
    def loss_value_diff(diff: torch.Tensor, expectile: float = 0.8) -> torch.Tensor:
        """The expectile loss ``|expectile - 1(diff < 0)| * diff**2``, element-wise."""
        return _expectile_loss(diff, expectile)

    def _chosen_q(self, tensordict: TensorDictBase, kind: str) -> torch.Tensor:
        """``Q_i(s, a)`` of the dataset action for every critic, ``[N, *B]``."""
        return self._ensemble_values(
            "qvalue_network", kind, tensordict, self.tensor_keys.state_action_value
        ).squeeze(-1)

    def _state_value(self, tensordict: TensorDictBase, network: nn.Module) -> torch.Tensor:
        return _network_output(network, tensordict, self.tensor_keys.value).squeeze(-1)

    def actor_loss(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, dict]:
        """Advantage-weighted regression; writes ``_log_prob``; returns ``(loss, metadata)``."""
        dist = _network_dist(self.actor_network, tensordict)
        log_prob = dist.log_prob(self._get(tensordict, "action"))
        with torch.no_grad():
            min_q = self._chosen_q(tensordict, "target").min(0).values
            value = self._state_value(tensordict, self._detached_network("value_network"))
        if log_prob.shape != min_q.shape:
            raise RuntimeError(
                f"{type(self).__name__}: log_prob has shape {tuple(log_prob.shape)} but the "
                f"critics give {tuple(min_q.shape)}; they must match"
            )
        weight = torch.exp((min_q - value) * self.temperature).clamp_max(100.0)
        tensordict.set(self.tensor_keys.log_prob, log_prob.detach())
        return _reduce(-(weight * log_prob), self.reduction, None), {}

    def value_loss(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, dict]:
        """Expectile regression of ``V(s)`` on the target critics; ``(loss, metadata)``."""
        with torch.no_grad():
            min_q = self._chosen_q(tensordict, "target").min(0).values
        value = self._state_value(tensordict, self.value_network)
        loss = _expectile_loss(min_q - value, self.expectile)
        return _reduce(loss, self.reduction, None), {}

    def _next_state_value(self, tensordict: TensorDictBase) -> torch.Tensor:
        """``V(s')``, ``[*B, 1]``, without gradient."""
        with torch.no_grad():
            net = self._detached_network("value_network")
            return _network_output(net, tensordict.get("next"), self.tensor_keys.value)

    def qvalue_loss(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, dict]:
        """Critic regression on ``r + gamma V(s')``; returns ``(loss, {"td_error": [N, *B]})``."""
        with torch.no_grad():
            target = self._value_target(tensordict, self._next_state_value(tensordict))
            target = target.squeeze(-1)
        pred = self._chosen_q(tensordict, "online")
        return self._critic_loss(tensordict, pred, target)

    def _critic_loss(self, tensordict, pred, target):
        target = target.expand_as(pred)
        loss = distance_loss(pred, target, self.loss_function).sum(0)
        td_error = (pred.detach() - target).pow(2)
        return _reduce(loss, self.reduction, None), {"td_error": td_error}

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute the three losses; writes ``td_error`` and ``_log_prob`` into the input.

        Returns:
            a TensorDict with ``loss_actor``, ``loss_qvalue``, ``loss_value`` and
            ``entropy`` (``-log pi(a|s)`` of the dataset actions, averaged).
        """
        loss_actor, metadata = self.actor_loss(tensordict)
        loss_qvalue, metadata_q = self.qvalue_loss(tensordict)
        loss_value, _ = self.value_loss(tensordict)
        tensordict.set(self.tensor_keys.priority, metadata_q["td_error"].max(0).values)
        entropy = -tensordict.get(self.tensor_keys.log_prob).mean()
        return _loss_output(
            {"loss_actor": loss_actor, "loss_qvalue": loss_qvalue, "loss_value": loss_value},
            {"entropy": entropy},
            reduction=self.reduction,
            scalar_output_mode=self.scalar_output_mode,
            batch_size=tensordict.batch_size,
        )


class DiscreteIQLLoss(IQLLoss):
    r"""The Implicit Q-Learning loss for discrete actions.

    As :class:`IQLLoss`, with critics that write one value per action
    (``state_action_value`` of shape ``[*B, n]``) and read only the observation; the
    value of the dataset action is picked from it (one-hot or index actions). The actor
    is a categorical policy (e.g. :class:`~rl.modules.ProbabilisticActor` over
    ``OneHotCategorical``). Paper: https://arxiv.org/abs/2110.06169.

    Args:
        actor_network (ProbabilisticTensorDictSequential): a categorical actor.
        qvalue_network (TensorDictModule): writes ``state_action_value`` ``[*B, n]``.
        value_network (TensorDictModule): writes ``state_value``.

    Keyword Args:
        action_space (str or TensorSpec, optional): ``"one-hot"`` or ``"categorical"``
            (or a ``OneHot`` / ``Categorical`` spec). When ``None`` it is read from the
            shapes of the data (one-hot when the action has the critic's output shape).
        expectile (float): must be below 1. Defaults to 0.5.
        others: as :class:`IQLLoss`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.modules import OneHotCategorical, ProbabilisticActor, ValueOperator
        >>> from rl.objectives import DiscreteIQLLoss
        >>> actor = ProbabilisticActor(
        ...     TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["logits"]),
        ...     in_keys=["logits"],
        ...     distribution_class=OneHotCategorical,
        ... )
        >>> qvalue = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["state_action_value"])
        >>> value = ValueOperator(torch.nn.Linear(3, 1), in_keys=["observation"])
        >>> loss = DiscreteIQLLoss(actor, qvalue, value, action_space="one-hot")
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
        >>> loss(data)["loss_qvalue"].shape
        torch.Size([])
    """

    def __init__(
        self,
        actor_network: nn.Module,
        qvalue_network: nn.Module,
        value_network: nn.Module,
        *,
        action_space: str | TensorSpec | None = None,
        num_qvalue_nets: int = 2,
        loss_function: Literal["l2", "l1", "smooth_l1"] = "smooth_l1",
        temperature: float = 1.0,
        expectile: float = 0.5,
        gamma: float | None = None,
        priority_key: str | None = None,
        separate_losses: bool = False,
        reduction: Literal["mean", "sum", "none"] | None = None,
        scalar_output_mode: Literal["exclude", "non_tensor"] | None = None,
    ) -> None:
        if expectile >= 1.0:
            raise ValueError(f"Expectile should be lower than 1.0 but is {expectile}")
        super().__init__(
            actor_network,
            qvalue_network,
            value_network,
            num_qvalue_nets=num_qvalue_nets,
            loss_function=loss_function,
            temperature=temperature,
            expectile=expectile,
            gamma=gamma,
            priority_key=priority_key,
            separate_losses=separate_losses,
            reduction=reduction,
            scalar_output_mode=scalar_output_mode,
        )
        self.action_space = _find_action_space(action_space, None)

    def _chosen_q(self, tensordict: TensorDictBase, kind: str) -> torch.Tensor:
        values = self._ensemble_values(
            "qvalue_network", kind, tensordict, self.tensor_keys.state_action_value
        )
        action = self._get(tensordict, "action")
        space = _resolve_space(self.action_space, action, values[0])
        return torch.stack([_select(v, action, space) for v in values.unbind(0)])
