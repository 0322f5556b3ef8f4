"""REINFORCE with a learned baseline (Williams, 1992)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import ProbabilisticTensorDictSequential
from tensordict.utils import NestedKey
from torch import nn

from ._actor_critic import _critic_regression, _default_log_prob_key, _reduce_samples
from ._loss import LossModule
from ._networks import _network_dist, _next_keys
from ._reduction import _check_loss_function, _check_reduction

__all__ = ["ReinforceLoss"]


class ReinforceLoss(LossModule):
    """REINFORCE: ``loss_actor = -log pi(a|s) * A`` (advantage detached), ``loss_value`` for the critic.

    Paper: https://doi.org/10.1007/BF00992696. The advantage is read from the input or
    computed by the value estimator (GAE by default) with the critic, whose next-state
    values come from a target copy when ``delay_value=True``.

    Args:
        actor_network (ProbabilisticTensorDictSequential): the policy (``get_dist``).
        critic_network (TensorDictModule, optional): writes ``tensor_keys.value``.

    Keyword Args:
        delay_value (bool): keep a target copy of the critic for the estimator's
            next-state values (updated by ``SoftUpdate``/``HardUpdate``). Defaults to ``False``.
        loss_critic_type (str): ``"l1"``, ``"l2"`` or ``"smooth_l1"`` (default).
        gamma (float, optional): discount of the default value estimator.
        advantage_key, value_target_key (NestedKey, optional): shortcuts for ``set_keys``.
        separate_losses (bool): the value loss leaves parameters shared with the actor alone.
        functional (bool): accepted for TorchRL compatibility.
        actor, critic: aliases of the two networks.
        reduction (str): ``"mean"`` (default), ``"sum"`` or ``"none"``.
        clip_value (float, optional): clip the critic's prediction around the stored value.

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
        >>> sorted(ReinforceLoss(actor, critic)(data).keys())
        ['loss_actor', 'loss_value']
    """

    _schedulable_buffers = frozenset({"clip_value"})

    _algorithm_name = "Reinforce"  # how clip_value errors name the loss, as TorchRL's

    @dataclass
    class _AcceptedKeys:
        """Keys read by ReinforceLoss; remap them with ``set_keys``."""

        advantage: NestedKey = "advantage"
        value_target: NestedKey = "value_target"
        value: NestedKey = "state_value"
        sample_log_prob: NestedKey | None = None
        action: NestedKey = "action"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"

        def __post_init__(self):
            if self.sample_log_prob is None:  # as the probabilistic modules name it
                self.sample_log_prob = _default_log_prob_key()

    default_value_estimator = "GAE"
    _next_state_optional = True  # only the value estimator reads it, without an advantage

    def __init__(
        self,
        actor_network: ProbabilisticTensorDictSequential,
        critic_network: nn.Module | None = None,
        *,
        delay_value: bool = False,
        loss_critic_type: Literal["l1", "l2", "smooth_l1"] = "smooth_l1",
        gamma: float | None = None,
        advantage_key: NestedKey | None = None,
        value_target_key: NestedKey | None = None,
        separate_losses: bool = False,
        functional: bool = True,
        actor: ProbabilisticTensorDictSequential | None = None,
        critic: nn.Module | None = None,
        reduction: Literal["mean", "sum", "none"] | None = None,
        clip_value: float | None = None,
    ) -> None:
        actor_network = actor if actor is not None else actor_network
        critic_network = critic if critic is not None else critic_network
        if actor_network is None:
            raise TypeError("ReinforceLoss needs actor_network")
        super().__init__()
        self.loss_critic_type = _check_loss_function(loss_critic_type, "loss_critic_type")
        self.reduction = _check_reduction("mean" if reduction is None else reduction)
        self.delay_value = delay_value
        self.gamma = gamma
        self.separate_losses = separate_losses
        self._functional_flag = functional
        self.convert_to_functional(actor_network, "actor_network")
        if critic_network is not None:
            shared = list(actor_network.parameters()) if separate_losses else None
            self.convert_to_functional(
                critic_network,
                "critic_network",
                create_target_params=delay_value,
                compare_against=shared,
            )
        else:
            self.__dict__["critic_network"] = None
        self.register_coeff_buffer("clip_value", clip_value, dtype=torch.get_default_dtype())
        keys = {"advantage": advantage_key, "value_target": value_target_key}
        sample_keys = getattr(actor_network, "dist_sample_keys", None)
        if sample_keys:
            keys["action"] = sample_keys[0]
        self.set_keys(**{k: v for k, v in keys.items() if v is not None})

    @property
    def functional(self) -> bool:
        return self._functional_flag

    def _set_in_keys(self) -> None:
        tk = self.tensor_keys
        actor_keys = list(getattr(self.actor_network, "in_keys", []))
        critic_keys = (
            list(getattr(self.critic_network, "in_keys", []) or [])
            if self.critic_network is not None
            else []
        )
        nxt = _next_keys([tk.reward, tk.done, tk.terminated])
        next_state = _next_keys(list(dict.fromkeys(actor_keys + critic_keys)))
        self.in_keys = list(
            dict.fromkeys([*actor_keys, *critic_keys, tk.action, *nxt, *next_state])
        )
        self.out_keys = ["loss_actor", "loss_value"]
        self._in_keys_extra = actor_keys

    def _required_key_names(self) -> tuple[str, ...]:
        return ("action",)

    def _build_value_estimator(self, value_type, hyperparams: dict):
        hyperparams.setdefault("value_network", self.critic_network)
        return super()._build_value_estimator(value_type, hyperparams)

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """``loss_actor`` and ``loss_value`` (and ``value_clip_fraction`` with ``clip_value``)."""
        tensordict = tensordict.copy()
        advantage = tensordict.get(self.tensor_keys.advantage, None)
        if advantage is None:
            if self.critic_network is None:
                raise RuntimeError(
                    f"ReinforceLoss has no critic to compute {self.tensor_keys.advantage!r}; "
                    "write the advantage into the input first"
                )
            target = self.target_critic_network_params if self.delay_value else None
            with torch.no_grad():
                self.value_estimator(tensordict, target_params=target)
            advantage = tensordict.get(self.tensor_keys.advantage)
        action = self._get(tensordict, "action")
        dist = _network_dist(self.actor_network, tensordict)
        log_prob = dist.log_prob(action)
        if log_prob.shape == advantage.shape[:-1]:
            log_prob = log_prob.unsqueeze(-1)
        out = {"loss_actor": _reduce_samples(-log_prob * advantage.detach(), self.reduction)}
        if self.critic_network is not None:
            loss_value, clip_fraction = self.loss_critic(tensordict)
            out["loss_value"] = _reduce_samples(loss_value, self.reduction)
            if clip_fraction is not None:
                out["value_clip_fraction"] = clip_fraction
        return TensorDict(out, batch_size=[])

    def loss_critic(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``distance(value_target, V(s))`` (unreduced) and the value clip fraction."""
        loss, clip_fraction, _, _ = _critic_regression(self, tensordict)
        return loss, clip_fraction
