"""Deep Deterministic Policy Gradient loss."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey
from torch import nn

from ._loss import _TD_ESTIMATORS, LossModule
from ._networks import _network_output, _next_keys
from ._reduction import _check_loss_function, _check_reduction, _reduce, distance_loss

__all__ = ["DDPGLoss"]


class DDPGLoss(LossModule):
    """The DDPG loss: a deterministic actor and a state-action value network.

    ``loss_value`` regresses ``Q(s, a)`` on ``r + gamma * (1 - terminated) *
    Q_target(s', mu_target(s'))`` (the value estimator, TD(0) by default);
    ``loss_actor = -Q(s, mu(s))`` with the critic's parameters held out, so the actor loss
    trains the actor only. The squared TD error is written into the input under
    ``"td_error"``. Paper: https://arxiv.org/abs/1509.02971.

    Args:
        actor_network (nn.Module): reads the observation, writes ``action``.
        value_network (nn.Module): reads the observation and ``action``, writes
            ``state_action_value``.

    Keyword Args:
        loss_function (str): ``"l2"`` (default), ``"l1"`` or ``"smooth_l1"``.
        delay_actor (bool): keep a target actor. Defaults to ``False``.
        delay_value (bool): keep a target critic. Defaults to ``True``.
        gamma (float, optional): discount for the value estimator.
        separate_losses (bool): hold the actor's parameters out of the value loss when
            the two networks share them. Defaults to ``False``.
        reduction (str): ``"mean"`` (default), ``"sum"`` or ``"none"``.
        use_prioritized_weights (bool or "auto"): weight by ``priority_weight``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.objectives import DDPGLoss
        >>> class QNet(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.linear = torch.nn.Linear(4, 1)
        ...     def forward(self, obs, act):
        ...         return self.linear(torch.cat([obs, act], -1))
        >>> actor = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["action"])
        >>> value = TensorDictModule(QNet(), ["observation", "action"], ["state_action_value"])
        >>> loss = DDPGLoss(actor, value)
        >>> data = TensorDict(
        ...     observation=torch.randn(2, 3),
        ...     action=torch.randn(2, 1),
        ...     next=TensorDict(
        ...         observation=torch.randn(2, 3),
        ...         reward=torch.randn(2, 1),
        ...         done=torch.zeros(2, 1, dtype=torch.bool),
        ...         terminated=torch.zeros(2, 1, dtype=torch.bool),
        ...         batch_size=[2],
        ...     ),
        ...     batch_size=[2],
        ... )
        >>> out = loss(data)
        >>> sorted(out.keys())
        ['loss_actor', 'loss_value', 'pred_value', 'pred_value_max', 'target_value', 'target_value_max', 'td_error']
        >>> data["td_error"].shape
        torch.Size([2])
    """

    @dataclass
    class _AcceptedKeys:
        """Keys read and written by DDPGLoss.

        Attributes:
            state_action_value: the critic's output (``"state_action_value"``).
            priority: where the TD error is written (``"td_error"``).
            reward, done, terminated: read under ``"next"``.
            priority_weight: importance weights of a prioritized buffer.
        """

        state_action_value: NestedKey = "state_action_value"
        priority: NestedKey = "td_error"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"
        priority_weight: NestedKey = "priority_weight"

    default_value_estimator = "TD0"
    SUPPORTED_VALUE_ESTIMATORS = _TD_ESTIMATORS
    _value_estimator_key_names = {"value": "state_action_value"}

    def __init__(
        self,
        actor_network: nn.Module,
        value_network: nn.Module,
        *,
        loss_function: Literal["l2", "l1", "smooth_l1"] = "l2",
        delay_actor: bool = False,
        delay_value: bool = True,
        gamma: float | None = None,
        separate_losses: bool = False,
        reduction: Literal["mean", "sum", "none"] | None = None,
        use_prioritized_weights: str | bool = "auto",
    ) -> None:
        super().__init__()
        self.delay_actor = delay_actor
        self.delay_value = delay_value
        self.loss_function = _check_loss_function(loss_function)
        self.reduction = _check_reduction(reduction)
        self.use_prioritized_weights = use_prioritized_weights
        self.gamma = gamma
        self.convert_to_functional(actor_network, "actor_network", create_target_params=delay_actor)
        self.convert_to_functional(
            value_network,
            "value_network",
            create_target_params=delay_value,
            compare_against=list(actor_network.parameters()) if separate_losses else None,
        )
        self._set_in_keys()

    def _set_in_keys(self) -> None:
        actor_keys = list(getattr(self.actor_network, "in_keys", []))
        value_keys = list(getattr(self.value_network, "in_keys", []))
        tk = self.tensor_keys
        keys = [*actor_keys, *value_keys, *_next_keys([tk.reward, tk.done, tk.terminated])]
        keys += _next_keys(actor_keys)
        self.in_keys = list(dict.fromkeys(keys))
        # TorchRL's (a keyword call's tuple); the TensorDict output also holds td_error
        self.out_keys = [
            "loss_actor",
            "loss_value",
            "pred_value",
            "target_value",
            "pred_value_max",
            "target_value_max",
        ]
        self._in_keys_extra = list(dict.fromkeys(actor_keys + value_keys))

    def loss_actor(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, dict]:
        """``-Q(s, mu(s))`` with the critic held out; returns ``(loss, metadata)``."""
        td = self.actor_network(tensordict.copy())
        q = _network_output(
            self._detached_network("value_network"), td, self.tensor_keys.state_action_value
        )
        return _reduce(-q.squeeze(-1), self.reduction, self._priority_weight(tensordict)), {}

    def loss_value(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, dict]:
        """Critic regression; writes ``td_error``; returns ``(loss, metadata)``."""
        sav = self.tensor_keys.state_action_value
        # the critic's inputs as data: an action (or features) written by a policy with its
        # graph must not carry the critic's loss into the policy (as TorchRL)
        inputs = tensordict.select(*self.value_network.in_keys, strict=False).detach()
        pred = _network_output(self.value_network, inputs, sav).squeeze(-1)
        with torch.no_grad():
            next_td = self._target_network("actor_network")(tensordict.get("next").copy())
            next_value = _network_output(self._target_network("value_network"), next_td, sav)
            target = self._value_target(tensordict, next_value).squeeze(-1)
        loss = distance_loss(pred, target, self.loss_function)
        td_error = (pred.detach() - target).pow(2)
        tensordict.set(self.tensor_keys.priority, td_error, inplace=True)
        metadata = {
            "td_error": td_error,
            "pred_value": pred.detach(),
            "target_value": target,
            "target_value_max": target.max(),
            "pred_value_max": pred.detach().max(),
        }
        return _reduce(loss, self.reduction, self._priority_weight(tensordict)), metadata

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute both losses on a batch of transitions; writes ``td_error`` into it.

        Returns:
            a TensorDict with ``loss_actor``, ``loss_value``, ``pred_value``,
            ``target_value``, ``pred_value_max``, ``target_value_max`` and ``td_error``.
        """
        loss_value, metadata = self.loss_value(tensordict)
        loss_actor, _ = self.loss_actor(tensordict)
        return TensorDict(loss_actor=loss_actor, loss_value=loss_value, **metadata)
