"""A2C loss (Mnih et al., 2016, https://arxiv.org/abs/1602.01783)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import ProbabilisticTensorDictSequential
from tensordict.utils import NestedKey
from torch import distributions as D
from torch import nn

from ._actor_critic import _ActorCriticLoss, _reduce_samples, _stored_action_log_prob
from ._networks import _network_dist

__all__ = ["A2CLoss"]


class A2CLoss(_ActorCriticLoss):
    """Advantage actor-critic: ``-log pi(a|s) * A``, plus critic and entropy terms.

    The advantage is read from ``tensor_keys.advantage`` or computed by the value
    estimator (GAE by default) with the critic held out of the graph. Unlike PPO, no
    log-probability of the collecting policy is needed.

    Args:
        actor_network (ProbabilisticTensorDictSequential): the policy (``get_dist``).
        critic_network (TensorDictModule, optional): writes ``tensor_keys.value``.

    Keyword Args:
        entropy_bonus (bool): Defaults to ``True``.
        samples_mc_entropy (int): Defaults to ``1``.
        entropy_coeff (float): Defaults to ``0.01``.
        critic_coeff (float): Defaults to ``1.0``.
        loss_critic_type (str): ``"l1"``, ``"l2"`` or ``"smooth_l1"`` (default).
        gamma (float, optional): discount of the default value estimator.
        separate_losses (bool): the critic loss leaves parameters shared with the actor alone.
        advantage_key, value_target_key (NestedKey, optional): shortcuts for ``set_keys``.
        functional (bool): accepted for TorchRL compatibility.
        actor, critic: aliases of the two networks.
        reduction (str): ``"mean"`` (default), ``"sum"`` or ``"none"``.
        clip_value (float, optional): clip the critic's prediction around the stored value.
        advantage_norm (ValueNorm, optional): divide the advantage by its ``scale()``, see
            :class:`~rl.objectives.PPOLoss`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential, TensorDictModule
        >>> actor = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(torch.nn.Linear(3, 4), ["obs"], ["logits"]),
        ...     ProbabilisticTensorDictModule(["logits"], ["action"], distribution_class=torch.distributions.Categorical),
        ... )
        >>> critic = TensorDictModule(torch.nn.Linear(3, 1), ["obs"], ["state_value"])
        >>> data = actor(TensorDict({"obs": torch.randn(8, 3)}, [8])).detach()
        >>> data["advantage"] = torch.randn(8, 1); data["value_target"] = torch.randn(8, 1)
        >>> sorted(A2CLoss(actor, critic)(data).keys())
        ['entropy', 'loss_critic', 'loss_entropy', 'loss_objective']
    """

    _reads_sample_log_prob = False
    _algorithm_name = "A2C"  # how clip_value errors name the loss, as TorchRL's

    @dataclass
    class _AcceptedKeys:
        """Keys read by A2CLoss; remap them with ``set_keys``."""

        advantage: NestedKey = "advantage"
        value_target: NestedKey = "value_target"
        value: NestedKey = "state_value"
        action: NestedKey = "action"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"
        sample_log_prob: NestedKey = "action_log_prob"  # kept for TorchRL; A2C never reads it

    def __init__(
        self,
        actor_network: ProbabilisticTensorDictSequential | None = None,
        critic_network: nn.Module | None = None,
        *,
        entropy_bonus: bool = True,
        samples_mc_entropy: int = 1,
        entropy_coeff: float | None = None,
        critic_coeff: float = 1.0,
        loss_critic_type: Literal["l1", "l2", "smooth_l1"] = "smooth_l1",
        gamma: float | None = None,
        separate_losses: bool = False,
        advantage_key: NestedKey | None = None,
        value_target_key: NestedKey | None = None,
        functional: bool = True,
        actor: ProbabilisticTensorDictSequential | None = None,
        critic: nn.Module | None = None,
        reduction: Literal["mean", "sum", "none"] | None = None,
        clip_value: float | None = None,
        advantage_norm: nn.Module | None = None,
    ) -> None:
        critic_network = critic if critic is not None else critic_network
        super().__init__(
            actor_network,
            critic_network,
            advantage_norm=advantage_norm,
            entropy_bonus=entropy_bonus,
            samples_mc_entropy=samples_mc_entropy,
            entropy_coeff=entropy_coeff,
            log_explained_variance=False,
            critic_coeff=critic_coeff if critic_network is not None else None,
            loss_critic_type=loss_critic_type,
            gamma=gamma,
            separate_losses=separate_losses,
            advantage_key=advantage_key,
            value_target_key=value_target_key,
            functional=functional,
            actor=actor,
            reduction=reduction,
            clip_value=clip_value,
        )

    def _default_out_keys(self) -> list[str]:
        # TorchRL's A2C out_keys (a keyword call's tuple): the critic before the entropy
        # terms; value_clip_fraction stays in the TensorDict output only, as TorchRL
        out = ["loss_objective"]
        if self.has_critic:
            out.append("loss_critic")
        if self.entropy_bonus:
            out += ["entropy", "loss_entropy"]
        return out

    def _log_probs(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, D.Distribution]:
        """``log pi(a|s)`` ``[*B, 1]`` of the stored action under the current actor, and the distribution.

        Raises:
            RuntimeError: if the stored action requires grad (the policy gradient would
                flow into the data).
        """
        dist = _network_dist(self.actor_network, tensordict)
        log_prob, _ = _stored_action_log_prob(self, dist, tensordict)
        if log_prob.shape == tensordict.batch_size:
            log_prob = log_prob.unsqueeze(-1)
        return log_prob, dist

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """``loss_objective``, ``loss_critic``, ``loss_entropy`` and ``entropy``."""
        tensordict = tensordict.copy()
        advantage = self._advantage(tensordict)
        log_prob, dist = self._log_probs(tensordict)
        if log_prob.shape == advantage.shape[:-1]:
            log_prob = log_prob.unsqueeze(-1)
        out = {"loss_objective": _reduce_samples(-(log_prob * advantage), self.reduction)}
        return self._finish(tensordict, dist, out)
