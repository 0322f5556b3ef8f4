"""Randomized Ensembled Double Q-learning (REDQ) loss."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey
from torch import nn

from rl.core import TensorSpec

from ._actions import _policy_rsample
from ._loss import _TD_ESTIMATORS, LossModule
from ._networks import _next_keys
from ._reduction import (
    _check_loss_function,
    _check_reduction,
    _check_scalar_output_mode,
    _reduce,
    distance_loss,
)
from ._temperature import _EntropyTemperature

__all__ = ["REDQLoss"]


class REDQLoss(_EntropyTemperature, LossModule):
    """The REDQ loss: a large Q ensemble with targets from a random subset of it.

    Each call draws ``sub_sample_len`` of the ``num_qvalue_nets`` target Q networks; the
    target is ``r + gamma * (1 - terminated) * min_{j in subset} (Q_target_j(s', a') -
    alpha * log pi(a'|s'))``. Every Q network regresses on it (``loss_qvalue`` averages
    over networks and samples); the actor minimises the ensemble average of
    ``alpha * log pi(a|s) - Q_i(s, a)`` with the critics held out; the temperature loss is
    ``-alpha * (log pi + target_entropy)`` over both the current and next samples, with
    ``alpha`` clamped to ``[min_alpha, max_alpha]``. The largest squared TD error over the
    ensemble is written under ``"td_error"``. Paper: https://arxiv.org/abs/2101.05982.

    Args:
        actor_network (ProbabilisticTensorDictSequential): the policy.
        qvalue_network (nn.Module): writes ``state_action_value``; copied
            ``num_qvalue_nets`` times.

    Keyword Args:
        num_qvalue_nets (int): ensemble size. Defaults to 10.
        sub_sample_len (int): size of the target subset, clamped to
            ``[1, num_qvalue_nets - 1]`` as in TorchRL. Defaults to 2.
        loss_function (str): ``"smooth_l1"`` (default), ``"l2"`` or ``"l1"``.
        alpha_init (float): initial temperature. Defaults to 1.0.
        min_alpha, max_alpha (float): temperature clamp. Default 0.1 and 10.0.
        action_spec (TensorSpec, optional): sizes ``target_entropy="auto"``.
        fixed_alpha (bool): keep the temperature fixed. Defaults to ``False``.
        target_entropy (float or "auto"): Defaults to ``"auto"`` (``-action dims``).
        delay_qvalue (bool): keep target Q networks. Defaults to ``True``.
        gamma (float, optional): discount for the value estimator.
        separate_losses (bool): as in SACLoss.
        reduction (str): ``"mean"`` (default), ``"sum"`` or ``"none"``.
        priority_key (NestedKey, optional): deprecated shortcut for ``set_keys(priority=...)``.
        gSDE (bool): the actor is a gSDE policy (:class:`~rl.modules.gSDEModule`): give it
            a zero ``"_eps_gSDE"`` placeholder so that it draws fresh noise. Defaults to
            ``False``.
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
        >>> from rl.objectives import REDQLoss
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
        >>> loss = REDQLoss(actor, qnet, num_qvalue_nets=4, target_entropy=-1.0)
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
        >>> loss(data)["loss_qvalue"].shape
        torch.Size([])
    """

    @dataclass
    class _AcceptedKeys:
        """Keys read and written by REDQLoss (see :class:`SACLoss`)."""

        action: NestedKey = "action"
        value: NestedKey = "state_value"
        sample_log_prob: NestedKey = "action_log_prob"
        priority: NestedKey = "td_error"
        state_action_value: NestedKey = "state_action_value"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"

    default_value_estimator = "TD0"
    SUPPORTED_VALUE_ESTIMATORS = _TD_ESTIMATORS
    delay_actor: bool = False
    _clamp_log_alpha_in_place = False

    def __init__(
        self,
        actor_network: nn.Module,
        qvalue_network: nn.Module,
        *,
        num_qvalue_nets: int = 10,
        sub_sample_len: int = 2,
        loss_function: Literal["l2", "l1", "smooth_l1"] = "smooth_l1",
        alpha_init: float = 1.0,
        min_alpha: float = 0.1,
        max_alpha: float = 10.0,
        action_spec: TensorSpec | None = None,
        fixed_alpha: bool = False,
        target_entropy: str | float = "auto",
        delay_qvalue: bool = True,
        gSDE: bool = False,  # noqa: N803 (TorchRL's name)
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
        self.gSDE = gSDE
        self.scalar_output_mode = _check_scalar_output_mode(scalar_output_mode)
        self.num_qvalue_nets = num_qvalue_nets
        # as TorchRL: a strict subset of the critics (one at least), whatever was asked
        self.sub_sample_len = max(1, min(sub_sample_len, num_qvalue_nets - 1))
        self.loss_function = loss_function
        self.reduction = _check_reduction(reduction)
        if priority_key is not None:  # deprecated in TorchRL: set_keys(priority=...)
            self._tensor_keys.priority = priority_key
        self.delay_qvalue = delay_qvalue
        self.gamma = gamma
        self.convert_to_functional(actor_network, "actor_network")
        self.convert_to_functional(
            qvalue_network,
            "qvalue_network",
            num_qvalue_nets,
            create_target_params=delay_qvalue,
            compare_against=list(actor_network.parameters()) if separate_losses else None,
        )
        auto = self._action_entropy_target(action_spec, actor_network)
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
        self.out_keys = [
            "loss_actor",
            "loss_qvalue",
            "loss_alpha",
            "alpha",
            "entropy",
            "state_action_value_actor",
            "action_log_prob_actor",
            "next.state_value",
            "target_value",
        ]
        self._in_keys_extra = list(dict.fromkeys(actor_keys + q_keys))

    @property
    def alpha(self) -> torch.Tensor:
        """The clamped temperature (no gradient)."""
        return self._alpha

    def _required_key_names(self):
        return ("action",)

    def _terms(self, tensordict: TensorDictBase) -> dict[str, torch.Tensor]:
        """What every REDQ loss is made of: the temperature, the reparameterised draw at the
        current states (``log_prob`` ``[*B]``) and its value under each critic held out
        (``q_actor`` ``[N, *B]``), the target policy's draw at the next states
        (``next_log_prob``), the soft value of a random subset of target critics
        (``next_value``), the bootstrapped ``target`` ``[*B]`` and the critics' ``pred``
        ``[N, *B]``."""
        sav = self.tensor_keys.state_action_value
        self._get(tensordict, "action")
        subset = torch.randperm(self.num_qvalue_nets)[: self.sub_sample_len].sort()[0]
        alpha = self.alpha
        actor_td, next_td = tensordict, tensordict.get("next").copy()
        if self.gSDE:  # a zero placeholder: the gSDE actor draws fresh exploration noise
            actor_td = tensordict.copy()
            for td in (actor_td, next_td):
                td.set("_eps_gSDE", torch.zeros(td.shape, device=td.device))
        action, log_prob = _policy_rsample(self.actor_network, actor_td)
        with torch.no_grad():
            next_action, next_log_prob = _policy_rsample(
                self._target_network("actor_network"), next_td
            )
        self._size_target_entropy(
            -float(action.shape[tensordict.batch_dims :].numel()), action.device
        )
        q_actor = self._ensemble_values(
            "qvalue_network", "detached", tensordict, sav, {self.tensor_keys.action: action}
        ).squeeze(-1)
        with torch.no_grad():
            next_td.set(self.tensor_keys.action, next_action)
            next_q = self._ensemble_values(
                "qvalue_network", "target", next_td, sav, index=subset
            ).squeeze(-1)
            next_value = (next_q - alpha * next_log_prob).min(0)[0]
            target = self._value_target(tensordict, next_value.unsqueeze(-1)).squeeze(-1)
        pred = self._ensemble_values("qvalue_network", "online", tensordict, sav).squeeze(-1)
        return {
            "alpha": alpha,
            "log_prob": log_prob,
            "q_actor": q_actor,
            "next_log_prob": next_log_prob,
            "next_value": next_value,
            "target": target,
            "pred": pred,
        }

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute the losses on a batch of transitions; writes ``td_error`` into it.

        Returns:
            a TensorDict with ``loss_actor``, ``loss_qvalue``, ``loss_alpha``, ``alpha``,
            ``entropy``, ``state_action_value_actor``, ``action_log_prob_actor``,
            ``next.state_value`` and ``target_value`` (the last four averaged).
        """
        t = self._terms(tensordict)
        log_prob, next_log_prob, alpha = t["log_prob"], t["next_log_prob"], t["alpha"]
        q_actor, pred, target = t["q_actor"], t["pred"], t["target"]
        loss_actor = _reduce(alpha * log_prob - q_actor, self.reduction, None)
        loss_qvalue = _reduce(
            distance_loss(pred, target.expand_as(pred), self.loss_function), self.reduction, None
        )
        tensordict.set(
            self.tensor_keys.priority, (pred.detach() - target).pow(2).max(0)[0], inplace=True
        )

        both_log_probs = torch.stack([log_prob.detach(), next_log_prob])
        safe_log_alpha = self.log_alpha - self.log_alpha.detach() + self.alpha.log()
        loss_alpha = _reduce(
            -safe_log_alpha.exp() * (both_log_probs + self.target_entropy), self.reduction, None
        )
        out = TensorDict(
            {
                "loss_actor": loss_actor,
                "loss_qvalue": loss_qvalue,
                "loss_alpha": loss_alpha,
                "state_action_value_actor": q_actor.detach().mean(),
                "action_log_prob_actor": log_prob.detach().mean(),
                "next.state_value": t["next_value"].mean(),
                "target_value": target.mean(),
            }
        )
        # the losses have different per-sample shapes ([N, B], [B], [2, B]): the output
        # stays unbatched and, with reduction="none", the scalars follow scalar_output_mode
        scalars = {"alpha": alpha, "entropy": -both_log_probs.mean()}
        for key, value in scalars.items():
            if self.reduction != "none":
                out.set(key, value)
            elif self.scalar_output_mode == "non_tensor":
                out.set_non_tensor(key, value)
        return out
