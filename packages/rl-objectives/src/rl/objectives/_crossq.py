"""CrossQ loss: SAC without target networks, with batch-normalised critics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import InteractionType, set_interaction_type
from tensordict.utils import NestedKey
from torch import nn

from rl.core import TensorSpec

from ._actions import _policy_rsample, _sum_action_dims
from ._loss import _TD_ESTIMATORS, LossModule
from ._networks import _ensemble_output, _network_dist, _next_keys
from ._reduction import (
    _check_loss_function,
    _check_reduction,
    _check_scalar_output_mode,
    _loss_output,
    _reduce,
    distance_loss,
)
from ._temperature import _EntropyTemperature

__all__ = ["CrossQLoss"]


class CrossQLoss(_EntropyTemperature, LossModule):
    """The CrossQ loss: SAC whose critics see ``(s, a)`` and ``(s', a')`` in one batch.

    There are no target networks. The Q networks (typically MLPs with
    :class:`~rl.modules.BatchRenorm1d` layers) run once on the concatenation of the
    current pairs and the next pairs ``(s', a' ~ pi(.|s'))``, so their normalisation
    statistics cover both; the next half gives the target
    ``r + gamma * (1 - terminated) * (min_i Q_i(s', a') - alpha * log pi(a'|s'))``
    (detached) and the first half the prediction. The actor loss evaluates the critics in
    ``eval()`` mode (running statistics) with their parameters held out. Temperature as in
    :class:`~rl.objectives.SACLoss`. Paper: https://arxiv.org/abs/1902.05605.

    Args:
        actor_network (ProbabilisticTensorDictSequential): the policy.
        qvalue_network (nn.Module): writes ``state_action_value``; copied
            ``num_qvalue_nets`` times.

    Keyword Args:
        num_qvalue_nets (int): number of Q networks. Defaults to 2.
        loss_function (str): ``"smooth_l1"`` (default), ``"l2"`` or ``"l1"``.
        alpha_init, min_alpha, max_alpha, fixed_alpha, action_spec, target_entropy: the
            temperature, as in SACLoss.
        gamma (float, optional): discount for the value estimator.
        separate_losses (bool): as in SACLoss.
        reduction (str): ``"mean"`` (default), ``"sum"`` or ``"none"``.
        priority_key (NestedKey, optional): deprecated shortcut for ``set_keys(priority=...)``.
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
        >>> from rl.objectives import CrossQLoss
        >>> net = torch.nn.Sequential(torch.nn.Linear(3, 2), NormalParamExtractor())
        >>> actor = ProbabilisticActor(
        ...     TensorDictModule(net, ["observation"], ["loc", "scale"]),
        ...     in_keys=["loc", "scale"],
        ...     distribution_class=TanhNormal,
        ... )
        >>> class QNet(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.norm = torch.nn.BatchNorm1d(4)
        ...         self.linear = torch.nn.Linear(4, 1)
        ...     def forward(self, obs, act):
        ...         return self.linear(self.norm(torch.cat([obs, act], -1)))
        >>> qnet = TensorDictModule(QNet(), ["observation", "action"], ["state_action_value"])
        >>> loss = CrossQLoss(actor, qnet, target_entropy=-1.0)
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
        >>> sorted(loss(data).keys())
        ['alpha', 'entropy', 'loss_actor', 'loss_alpha', 'loss_qvalue']
    """

    @dataclass
    class _AcceptedKeys:
        """Keys read and written by CrossQLoss (see :class:`SACLoss`)."""

        action: NestedKey = "action"
        value: NestedKey = "state_value"
        state_action_value: NestedKey = "state_action_value"
        log_prob: NestedKey = "sample_log_prob"
        priority: NestedKey = "td_error"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"

    default_value_estimator = "TD0"
    SUPPORTED_VALUE_ESTIMATORS = _TD_ESTIMATORS

    def __init__(
        self,
        actor_network: nn.Module,
        qvalue_network: nn.Module,
        *,
        num_qvalue_nets: int = 2,
        loss_function: Literal["l2", "l1", "smooth_l1"] = "smooth_l1",
        alpha_init: float = 1.0,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        action_spec: TensorSpec | None = None,
        fixed_alpha: bool = False,
        target_entropy: str | float = "auto",
        gamma: float | None = None,
        separate_losses: bool = False,
        reduction: Literal["mean", "sum", "none"] | None = None,
        priority_key: NestedKey | None = None,
        deactivate_vmap: bool = False,
        scalar_output_mode: Literal["exclude", "non_tensor"] | None = None,
    ) -> None:
        super().__init__()
        _check_loss_function(loss_function)
        self.deactivate_vmap = deactivate_vmap
        self.scalar_output_mode = _check_scalar_output_mode(scalar_output_mode)
        self.num_qvalue_nets = num_qvalue_nets
        self.loss_function = loss_function
        self.reduction = _check_reduction(reduction)
        if priority_key is not None:  # deprecated in TorchRL: set_keys(priority=...)
            self._tensor_keys.priority = priority_key
        self.gamma = gamma
        self.convert_to_functional(actor_network, "actor_network")
        self.convert_to_functional(
            qvalue_network,
            "qvalue_network",
            num_qvalue_nets,
            create_target_params=False,
            compare_against=list(actor_network.parameters()) if separate_losses else None,
        )
        auto = self._action_entropy_target(action_spec, actor_network)
        self._init_temperature(alpha_init, min_alpha, max_alpha, fixed_alpha, target_entropy, auto)
        self._set_in_keys()

    def _set_in_keys(self) -> None:
        """``in_keys`` from the networks and ``tensor_keys`` (again after ``set_keys``)."""
        tk = self.tensor_keys
        actor_keys = list(getattr(self.actor_network, "in_keys", []))
        q_keys = self._q_in_keys = list(getattr(self.qvalue_network, "in_keys", []))
        keys = [tk.action, *actor_keys, *q_keys, *_next_keys([tk.reward, tk.done, tk.terminated])]
        keys += _next_keys(list(dict.fromkeys(actor_keys + q_keys)))
        next_action = _next_keys([tk.action])[0]  # drawn by the loss, never read
        self.in_keys = [k for k in dict.fromkeys(keys) if k != next_action]
        self.out_keys = ["loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy"]
        self._in_keys_extra = list(dict.fromkeys(actor_keys + q_keys))

    def _required_key_names(self):
        return ("action",)

    def qvalue_loss(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, dict]:
        """Critic regression on the joint batch; returns ``(loss, {"td_error": [*B]})``."""
        sav = self.tensor_keys.state_action_value
        self._get(tensordict, "action")
        with torch.no_grad(), set_interaction_type(InteractionType.RANDOM):
            next_td = tensordict.get("next").copy()
            dist = _network_dist(self.actor_network, next_td)
            next_action = dist.sample()
            next_log_prob = _sum_action_dims(dist.log_prob(next_action), next_action)
            next_td.set(self.tensor_keys.action, next_action)
        keys = self._q_in_keys
        joint = torch.cat(
            [tensordict.select(*keys, strict=False), next_td.select(*keys, strict=False)], 0
        )
        n = tensordict.batch_size[0]
        members = self._ensemble("qvalue_network")
        for m in members:
            m.train()
        q = _ensemble_output(members, joint, sav).squeeze(-1)  # [N, 2B]
        pred, next_q = q[:, :n], q[:, n:]
        next_value = (next_q.min(0)[0] - self._alpha * next_log_prob).detach()
        target = self._value_target(tensordict, next_value.unsqueeze(-1)).squeeze(-1)
        loss = distance_loss(pred, target.expand_as(pred), self.loss_function).sum(0)
        td_error = (pred.detach() - target).abs().max(0)[0]
        return _reduce(loss, self.reduction, None), {"td_error": td_error}

    def actor_loss(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, dict]:
        """``alpha * log pi - min_i Q_i`` with the critics in eval mode and held out."""
        action, log_prob = _policy_rsample(self.actor_network, tensordict)
        self._size_target_entropy(
            -float(action.shape[tensordict.batch_dims :].numel()), action.device
        )
        td_q = tensordict.copy()
        td_q.set(self.tensor_keys.action, action)
        members = self._ensemble("qvalue_network", "detached")
        for m in members:
            m.eval()
        q = _ensemble_output(members, td_q, self.tensor_keys.state_action_value)
        min_q = q.min(0)[0].squeeze(-1)
        return _reduce(self._alpha * log_prob - min_q, self.reduction, None), {
            "log_prob": log_prob.detach()
        }

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute the losses on a batch of transitions (any batch dims); writes ``td_error``.

        Returns:
            a TensorDict with ``loss_actor``, ``loss_qvalue``, ``loss_alpha``, ``alpha``
            and ``entropy``.
        """
        loss_qvalue, metadata = self.qvalue_loss(tensordict)
        loss_actor, metadata_actor = self.actor_loss(tensordict)
        log_prob = metadata_actor["log_prob"]
        loss_alpha = _reduce(self._alpha_loss(log_prob), self.reduction, None)
        tensordict.set(self.tensor_keys.priority, metadata["td_error"], inplace=True)
        return _loss_output(
            {"loss_actor": loss_actor, "loss_qvalue": loss_qvalue, "loss_alpha": loss_alpha},
            {"alpha": self._alpha, "entropy": -log_prob.mean()},
            reduction=self.reduction,
            scalar_output_mode=self.scalar_output_mode,
            batch_size=tensordict.batch_size,
        )
