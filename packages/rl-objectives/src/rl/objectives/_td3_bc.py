"""TD3 with behaviour cloning (TD3+BC), a minimalist offline RL loss."""

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
from ._networks import _next_keys
from ._reduction import _check_loss_function, _check_reduction, _reduce, distance_loss

__all__ = ["TD3BCLoss"]


class TD3BCLoss(LossModule):
    r"""The TD3+BC loss: TD3 whose actor is also pulled towards the dataset actions.

    - ``loss_qvalue``: each critic regressed on ``r + gamma (1 - terminated)
      min_i Q_target_i(s', a')`` with the smoothed target action
      ``a' = clip(mu_target(s') + clip(N(0, policy_noise), -noise_clip, noise_clip),
      low, high)``, summed over the critics;
    - ``loss_actor``: ``-lmbd * Q_1(s, mu(s)) + bc_loss``, where
      ``bc_loss = mean((mu(s) - a_data)^2)`` and ``lmbd = alpha / mean|Q_1(s, mu(s))|``
      (held constant), with the critics held out.

    The squared TD error (max over critics) is written to the input under
    ``"td_error"``. Paper: https://arxiv.org/abs/2106.06860.

    Args:
        actor_network (TensorDictModule): a deterministic actor writing ``action``.
        qvalue_network (TensorDictModule): reads the observation and ``action``, writes
            ``state_action_value``; copied into ``num_qvalue_nets`` critics.

    Keyword Args:
        action_spec (TensorSpec, optional): a ``Bounded`` action spec; exclusive with
            ``bounds``, one of the two is required.
        bounds (tuple of float or tensors, optional): ``(low, high)`` of the actions.
        num_qvalue_nets (int): number of critics. Defaults to 2.
        policy_noise (float): standard deviation of the target action noise.
            Defaults to 0.2.
        noise_clip (float): bound of the target action noise. Defaults to 0.5.
        alpha (float): weight of the Q term against behaviour cloning. Defaults to 2.5.
        loss_function (str): ``"smooth_l1"`` (default), ``"l2"`` or ``"l1"``.
        delay_actor (bool): keep a target actor. Defaults to ``True``.
        delay_qvalue (bool): keep target critics. Defaults to ``True``.
        gamma (float, optional): discount for the value estimator.
        priority_key (str, optional): deprecated, use ``set_keys(priority=...)``.
        separate_losses (bool): hold the actor's parameters out of the critic loss when
            the networks share them. Defaults to ``False``.
        reduction (str, optional): ``"mean"`` (default), ``"sum"`` or ``"none"``.
        deactivate_vmap (bool): accepted for compatibility.
        use_prioritized_weights (bool or "auto"): weight the losses by
            ``priority_weight`` when present. Defaults to ``"auto"``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.core import Bounded
        >>> from rl.modules import Actor, ValueOperator
        >>> from rl.objectives import TD3BCLoss
        >>> spec = Bounded(-1.0, 1.0, (2,))
        >>> actor = Actor(torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Tanh()), spec=spec)
        >>> class QNet(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.linear = torch.nn.Linear(5, 1)
        ...     def forward(self, obs, act):
        ...         return self.linear(torch.cat([obs, act], -1))
        >>> qvalue = ValueOperator(QNet(), in_keys=["observation", "action"])
        >>> loss = TD3BCLoss(actor, qvalue, action_spec=spec, gamma=0.99)
        >>> data = TensorDict(
        ...     observation=torch.randn(4, 3),
        ...     action=spec.rand((4,)),
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
        >>> sorted(out.keys())  # doctest: +NORMALIZE_WHITESPACE
        ['bc_loss', 'lmbd', 'loss_actor', 'loss_qvalue', 'next_state_value', 'pred_value',
         'state_action_value_actor', 'target_value']
    """

    @dataclass
    class _AcceptedKeys:
        """Keys read and written by TD3BCLoss.

        Attributes:
            action: the dataset action, and the actor's output (``"action"``).
            state_action_value: the critics' output (``"state_action_value"``).
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
        bounds: tuple | None = None,
        num_qvalue_nets: int = 2,
        policy_noise: float = 0.2,
        noise_clip: float = 0.5,
        alpha: float = 2.5,
        loss_function: Literal["l2", "l1", "smooth_l1"] = "smooth_l1",
        delay_actor: bool = True,
        delay_qvalue: bool = True,
        gamma: float | None = None,
        priority_key: str | None = None,
        separate_losses: bool = False,
        reduction: Literal["mean", "sum", "none"] | None = None,
        deactivate_vmap: bool = False,
        use_prioritized_weights: str | bool = "auto",
    ) -> None:
        super().__init__()
        if num_qvalue_nets < 1:
            raise ValueError(f"num_qvalue_nets must be >= 1, got {num_qvalue_nets}")
        if priority_key is not None:
            self._tensor_keys.priority = priority_key
        low, high = _bounds(action_spec, bounds, self.tensor_keys.action)
        self.register_buffer("min_action", low)
        self.register_buffer("max_action", high)
        self.loss_function = _check_loss_function(loss_function)
        self.reduction = _check_reduction("mean" if reduction is None else reduction)
        self.use_prioritized_weights = use_prioritized_weights
        self.deactivate_vmap = deactivate_vmap
        self.delay_actor = delay_actor
        self.delay_qvalue = delay_qvalue
        self.num_qvalue_nets = num_qvalue_nets
        self.policy_noise = policy_noise
        self.noise_clip = noise_clip
        self.alpha = alpha
        self.gamma = gamma
        self.convert_to_functional(actor_network, "actor_network", create_target_params=delay_actor)
        self.convert_to_functional(
            qvalue_network,
            "qvalue_network",
            expand_dim=num_qvalue_nets,
            create_target_params=delay_qvalue,
            compare_against=list(actor_network.parameters()) if separate_losses else None,
        )
        self._set_in_keys()

    def _set_in_keys(self) -> None:
        tk = self.tensor_keys
        actor_keys = list(getattr(self.actor_network, "in_keys", []))
        q_keys = list(getattr(self.qvalue_network, "in_keys", []))
        keys = [tk.action, *_next_keys([tk.reward, tk.done, tk.terminated])]
        keys += [*actor_keys, *_next_keys(actor_keys), *q_keys]
        self.in_keys = list(dict.fromkeys(keys))
        self.out_keys = [
            "loss_actor",
            "loss_qvalue",
            "bc_loss",
            "lmbd",
            "pred_value",
            "state_action_value_actor",
            "next_state_value",
            "target_value",
        ]
        self._in_keys_extra = list(dict.fromkeys(actor_keys + q_keys + _next_keys(actor_keys)))

    def _required_key_names(self):
        return ("action",)

    def _q(self, tensordict: TensorDictBase, kind: str) -> torch.Tensor:
        key = self.tensor_keys.state_action_value
        return self._ensemble_values("qvalue_network", kind, tensordict, key).squeeze(-1)

    def actor_loss(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, dict]:
        """``-lmbd * Q_1(s, mu(s)) + bc_loss`` with the critics held out."""
        data_action = self._get(tensordict, "action")
        td = self.actor_network(tensordict.select(*self.actor_network.in_keys, strict=False))
        q = self._q(td, "detached")[0]
        bc_loss = torch.nn.functional.mse_loss(td.get(self.tensor_keys.action), data_action)
        lmbd = self.alpha / q.abs().mean().detach()
        loss = -lmbd * q + bc_loss
        metadata = {
            "state_action_value_actor": q.detach(),
            "bc_loss": bc_loss.detach(),
            "lmbd": lmbd,
        }
        return _reduce(loss, self.reduction, self._priority_weight(tensordict)), metadata

    def qvalue_loss(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, dict]:
        """Critic regression on the smoothed clipped double-Q target; ``(loss, metadata)``."""
        action = self._get(tensordict, "action")
        noise = (torch.randn_like(action) * self.policy_noise).clamp(
            -self.noise_clip, self.noise_clip
        )
        with torch.no_grad():
            next_td = tensordict.get("next").select(*self.actor_network.in_keys, strict=False)
            next_td = self._target_network("actor_network")(next_td)
            next_action = (next_td.get(self.tensor_keys.action) + noise).clamp(
                self.min_action, self.max_action
            )
            next_td.set(self.tensor_keys.action, next_action)
            next_value = self._q(next_td, "target").min(0).values
            target = self._value_target(tensordict, next_value.unsqueeze(-1)).squeeze(-1)
        pred = self._q(tensordict, "online")
        loss = distance_loss(pred, target.expand_as(pred), self.loss_function).sum(0)
        metadata = {
            "td_error": (pred.detach() - target).pow(2),
            "next_state_value": next_value,
            "pred_value": pred.detach(),
            "target_value": target,
        }
        return _reduce(loss, self.reduction, self._priority_weight(tensordict)), metadata

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute both losses; writes ``td_error`` into the input.

        Returns:
            a TensorDict with ``loss_actor``, ``loss_qvalue`` and the diagnostics
            ``bc_loss``, ``lmbd``, ``pred_value`` (``[N, *B]``),
            ``state_action_value_actor``, ``next_state_value`` and ``target_value``.
        """
        loss_actor, metadata_actor = self.actor_loss(tensordict)
        loss_qvalue, metadata_value = self.qvalue_loss(tensordict)
        tensordict.set(self.tensor_keys.priority, metadata_value.pop("td_error").max(0).values)
        return TensorDict(
            {
                "loss_actor": loss_actor,
                "loss_qvalue": loss_qvalue,
                **metadata_actor,
                **metadata_value,
            }
        )
