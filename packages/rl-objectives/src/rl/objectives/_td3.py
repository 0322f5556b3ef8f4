"""Twin Delayed DDPG (TD3) loss."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey
from torch import nn

from rl.core import TensorSpec

from ._actions import _bounds
from ._loss import _TD_ESTIMATORS, LossModule
from ._networks import _network_output, _next_keys
from ._reduction import _check_loss_function, _check_reduction, _reduce, distance_loss

__all__ = ["TD3Loss"]


class TD3Loss(LossModule):
    """The TD3 loss: clipped double Q-learning with target policy smoothing.

    The target is ``r + gamma * (1 - terminated) * min_i Q_target_i(s', a')`` with
    ``a' = clip(mu_target(s') + clip(N(0, policy_noise), -noise_clip, noise_clip), low,
    high)``; ``loss_qvalue`` sums the regression of every Q network to it;
    ``loss_actor = -Q_1(s, mu(s))`` with the critics held out. The largest squared TD
    error over the Q networks is written under ``"td_error"``. Delaying the actor updates
    is the training loop's business (step the actor optimizer every ``d`` steps). Paper:
    https://arxiv.org/abs/1802.09477.

    Args:
        actor_network (nn.Module): reads the observation, writes ``action``.
        qvalue_network (nn.Module): reads the observation and ``action``, writes
            ``state_action_value``; copied ``num_qvalue_nets`` times (the copies after
            the first are re-initialised).

    Keyword Args:
        action_spec (TensorSpec, optional): a ``Bounded`` spec giving the action bounds.
        bounds (tuple, optional): ``(low, high)``, instead of ``action_spec``.
        num_qvalue_nets (int): number of Q networks. Defaults to 2.
        policy_noise (float): std of the target smoothing noise. Defaults to 0.2.
        noise_clip (float): clip of that noise. Defaults to 0.5.
        loss_function (str): ``"smooth_l1"`` (default), ``"l2"`` or ``"l1"``.
        delay_actor (bool): keep a target actor. Defaults to ``True``.
        delay_qvalue (bool): keep target Q networks. Defaults to ``True``.
        gamma (float, optional): discount for the value estimator.
        separate_losses (bool): hold the actor's parameters out of the Q loss when the
            networks share them. Defaults to ``False``.
        reduction (str): ``"mean"`` (default), ``"sum"`` or ``"none"``.
        priority_key (NestedKey, optional): deprecated shortcut for ``set_keys(priority=...)``.
        use_prioritized_weights (bool or "auto"): weight by ``priority_weight``.
        deactivate_vmap (bool): accepted for compatibility (the critics always run as a
            loop over the members).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.objectives import TD3Loss
        >>> class QNet(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.linear = torch.nn.Linear(4, 1)
        ...     def forward(self, obs, act):
        ...         return self.linear(torch.cat([obs, act], -1))
        >>> actor = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["action"])
        >>> qnet = TensorDictModule(QNet(), ["observation", "action"], ["state_action_value"])
        >>> loss = TD3Loss(actor, qnet, bounds=(-1.0, 1.0))
        >>> data = TensorDict(
        ...     observation=torch.randn(2, 3),
        ...     action=torch.rand(2, 1) * 2 - 1,
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
        >>> out["loss_actor"].shape, out["pred_value"].shape
        (torch.Size([]), torch.Size([2, 2]))
    """

    @dataclass
    class _AcceptedKeys:
        """Keys read and written by TD3Loss.

        Attributes:
            action: the action (``"action"``).
            state_action_value: the Q networks' output (``"state_action_value"``).
            priority: where the TD error is written (``"td_error"``).
            reward, done, terminated: read under ``"next"``.
            priority_weight: importance weights of a prioritized buffer.
        """

        action: NestedKey = "action"
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
        qvalue_network: nn.Module,
        *,
        action_spec: TensorSpec | None = None,
        bounds: tuple[float, float] | None = None,
        num_qvalue_nets: int = 2,
        policy_noise: float = 0.2,
        noise_clip: float = 0.5,
        loss_function: Literal["l2", "l1", "smooth_l1"] = "smooth_l1",
        delay_actor: bool = True,
        delay_qvalue: bool = True,
        gamma: float | None = None,
        separate_losses: bool = False,
        reduction: Literal["mean", "sum", "none"] | None = None,
        priority_key: NestedKey | None = None,
        use_prioritized_weights: str | bool = "auto",
        deactivate_vmap: bool = False,
    ) -> None:
        super().__init__()
        _check_loss_function(loss_function)
        self.deactivate_vmap = deactivate_vmap
        if num_qvalue_nets < 1:
            raise ValueError(f"num_qvalue_nets must be >= 1, got {num_qvalue_nets}")
        low, high = _bounds(action_spec, bounds, self.tensor_keys.action)
        self.register_buffer("min_action", low)
        self.register_buffer("max_action", high)
        self.delay_actor = delay_actor
        self.delay_qvalue = delay_qvalue
        self.num_qvalue_nets = num_qvalue_nets
        self.policy_noise = policy_noise
        self.noise_clip = noise_clip
        self.loss_function = loss_function
        self.reduction = _check_reduction(reduction)
        if priority_key is not None:  # deprecated in TorchRL: set_keys(priority=...)
            self._tensor_keys.priority = priority_key
        self.use_prioritized_weights = use_prioritized_weights
        self.gamma = gamma
        self.convert_to_functional(actor_network, "actor_network", create_target_params=delay_actor)
        self.convert_to_functional(
            qvalue_network,
            "qvalue_network",
            num_qvalue_nets,
            create_target_params=delay_qvalue,
            compare_against=list(actor_network.parameters()) if separate_losses else None,
        )
        self._set_in_keys()

    def _set_in_keys(self) -> None:
        actor_keys = list(getattr(self.actor_network, "in_keys", []))
        q_keys = list(getattr(self.qvalue_network, "in_keys", []))
        tk = self.tensor_keys
        keys = [tk.action, *actor_keys, *q_keys, *_next_keys([tk.reward, tk.done, tk.terminated])]
        keys += _next_keys(actor_keys)
        self.in_keys = list(dict.fromkeys(keys))
        self.out_keys = [  # TorchRL's order (a keyword call's tuple)
            "loss_actor",
            "loss_qvalue",
            "pred_value",
            "state_action_value_actor",
            "next_state_value",
            "target_value",
        ]
        self._in_keys_extra = list(dict.fromkeys(actor_keys + q_keys))

    def _required_key_names(self):
        return ("action",)

    def actor_loss(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, dict]:
        """``-Q_1(s, mu(s))`` with the critics held out; returns ``(loss, metadata)``."""
        td = self.actor_network(tensordict.copy())
        critic = self._ensemble("qvalue_network", "detached")[0]
        q1 = _network_output(critic, td, self.tensor_keys.state_action_value).squeeze(-1)
        metadata = {"state_action_value_actor": q1.detach()}
        return _reduce(-q1, self.reduction, self._priority_weight(tensordict)), metadata

    def value_loss(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, dict]:
        """Q regression to the smoothed clipped-double-Q target; returns ``(loss, metadata)``."""
        sav = self.tensor_keys.state_action_value
        action = self._get(tensordict, "action")
        noise = (torch.randn_like(action) * self.policy_noise).clamp(
            -self.noise_clip, self.noise_clip
        )
        with torch.no_grad():
            next_td = self._target_network("actor_network")(tensordict.get("next").copy())
            next_action = (next_td.get(self.tensor_keys.action) + noise).clamp(
                self.min_action, self.max_action
            )
            next_td.set(self.tensor_keys.action, next_action)
            next_q = self._ensemble_values("qvalue_network", "target", next_td, sav)
            next_value = next_q.min(0)[0]
            target = self._value_target(tensordict, next_value).squeeze(-1)
        pred = self._ensemble_values("qvalue_network", "online", tensordict, sav).squeeze(-1)
        loss = distance_loss(pred, target.expand_as(pred), self.loss_function).sum(0)
        td_error = (pred.detach() - target).pow(2)
        metadata = {
            "td_error": td_error,
            "next_state_value": next_value.squeeze(-1),
            "pred_value": pred.detach(),
            "target_value": target,
        }
        return _reduce(loss, self.reduction, self._priority_weight(tensordict)), metadata

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute both losses on a batch of transitions; writes ``td_error`` into it.

        Returns:
            a TensorDict with ``loss_actor``, ``loss_qvalue``, ``state_action_value_actor``,
            ``next_state_value``, ``pred_value`` (``[N, *B]``) and ``target_value``.
        """
        loss_actor, metadata_actor = self.actor_loss(tensordict)
        loss_qvalue, metadata = self.value_loss(tensordict)
        tensordict.set(self.tensor_keys.priority, metadata.pop("td_error").max(0)[0], inplace=True)
        return TensorDict(
            loss_actor=loss_actor, loss_qvalue=loss_qvalue, **metadata_actor, **metadata
        )
