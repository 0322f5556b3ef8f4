"""The machinery of the on-policy actor-critic losses.

PPO and A2C derive from :class:`_ActorCriticLoss`: the actor and critic, the advantage
(read, or computed by the value estimator with the critic held out), the entropy bonus
and the critic regression. REINFORCE shares the critic regression
(:func:`_critic_regression`).
"""

from __future__ import annotations

from typing import Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import (
    CompositeDistribution,
    ProbabilisticTensorDictSequential,
    composite_lp_aggregate,
)
from tensordict.utils import NestedKey
from torch import distributions as D
from torch import nn

from ._actions import _sum_heads
from ._loss import LossModule, _MissingKeyError
from ._networks import _network_output, _next_keys
from ._reduction import _check_loss_function, _check_reduction, _reduce, distance_loss
from .value import VTrace
from .value._base import _standardize

__all__: list[str] = []


def _reduce_samples(loss: torch.Tensor, reduction: str) -> torch.Tensor:
    """Reduce a per-sample term ``[*B, 1]``; ``reduction="none"`` returns it as ``[*B]``."""
    if reduction == "none":
        return loss.squeeze(-1)
    return _reduce(loss, reduction)


def _scaled_reduce(coeff: torch.Tensor, loss: torch.Tensor, reduction: str) -> torch.Tensor:
    """``_reduce_samples(coeff * loss, reduction)`` for a scalar ``coeff``, scaled after
    the reduction where that is the same number (mean, sum): one product of scalars
    instead of one over the batch, in the forward and in the backward."""
    if reduction in ("mean", "sum") and getattr(coeff, "ndim", 0) == 0:
        return coeff * _reduce(loss, reduction)
    return _reduce_samples(coeff * loss, reduction)


def _entropy(dist: D.Distribution, samples: int) -> torch.Tensor:
    """Analytic entropy, else a Monte-Carlo estimate over ``samples`` draws."""
    pre_tanh = getattr(dist, "_log_prob_pre_tanh", None)
    if pre_tanh is not None:  # rl.modules.TanhNormal: score pre-tanh draws, no squashing needed
        # one draw (the default) without a sample dimension: the same numbers, no
        # broadcast against it in the backward and no mean over a dimension of one
        shape = () if samples == 1 else (samples,)
        eps = torch.randn(
            dist._extended_shape(torch.Size(shape)), dtype=dist.loc.dtype, device=dist.loc.device
        )
        log_prob = pre_tanh(dist.loc + eps * dist.scale)
        return -(log_prob if samples == 1 else log_prob.mean(0))
    sampler = getattr(dist, "rsample_and_log_prob", None)
    if sampler is not None:  # other squashed distributions without a closed form
        return -sampler((samples,))[1].mean(0)
    try:
        return dist.entropy()
    except NotImplementedError:
        x = dist.rsample((samples,)) if dist.has_rsample else dist.sample((samples,))
        return -dist.log_prob(x).mean(0)


def _stored_action_log_prob(
    loss: LossModule, dist: D.Distribution, tensordict: TensorDictBase
) -> tuple[torch.Tensor, torch.Tensor | TensorDictBase]:
    """``log pi(a|s)`` of the stored action (``loss.tensor_keys.action``) under ``dist``,
    and that action.

    A composite distribution (several action heads, ``tensordict.nn.CompositeDistribution``)
    scores the action entries it names, read from the root; its per-head log-probs are
    summed over their feature dims into one log-prob per sample, as TorchRL does.

    Raises:
        RuntimeError: if the stored action (any head) requires grad.
    """
    action_key = loss.tensor_keys.action
    if isinstance(dist, CompositeDistribution):
        keys = [action_key] if isinstance(action_key, (str, tuple)) else list(action_key)
        action = tensordict.select(*keys)
        heads = [str(k) for k, v in action.items(True, True) if v.requires_grad]
        if heads:
            raise RuntimeError(
                f"tensordict stored {action_key} requires grad (heads {heads}). The stored "
                "action must be data, detach it before calling the loss."
            )
        log_prob = dist.log_prob(action)
        if isinstance(log_prob, TensorDictBase):
            log_prob = _sum_heads(log_prob, tensordict.batch_dims)
        return log_prob, action
    action = loss._get(tensordict, "action")
    if action.requires_grad:
        raise RuntimeError(
            f"tensordict stored {action_key} requires grad. The stored action must be "
            "data, detach it before calling the loss."
        )
    return dist.log_prob(action), action


def _default_log_prob_key() -> str:
    return "sample_log_prob" if composite_lp_aggregate(nowarn=True) else "action_log_prob"


def _critic_regression(
    loss: LossModule, tensordict: TensorDictBase, value_norm: nn.Module | None = None
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """``distance(value_target, V(s))``, unreduced, of an actor-critic ``loss``.

    With ``loss.clip_value``, the prediction is also clipped to ``[old_value -
    clip_value, old_value + clip_value]`` around the stored value (PPO2-style) and the
    larger of the two distances is kept. With ``loss.separate_losses``, the parameters
    the critic shares with the actor are held out. With a ``value_norm``
    (:class:`~rl.modules.ValueNorm`), its statistics take in the target first, then the
    target, the prediction and the old value are compared on its normalised scale (the
    clip radius too); the critic itself keeps predicting returns.

    Returns:
        the distance ``[*B, 1]``, the clipped fraction (``None`` without clipping), the
        prediction ``V(s)`` and the target.
    """
    if loss.separate_losses:
        tensordict = tensordict.detach()
    target = loss._get(tensordict, "value_target")
    old_value = None
    if loss.clip_value is not None:
        old_value = tensordict.get(loss.tensor_keys.value, None)
        if old_value is None:
            raise _MissingKeyError(
                f"clip_value is set to {loss.clip_value}, but the key {loss.tensor_keys.value} "
                "was not found in the input tensordict. Make sure that the value_key passed to "
                f"{loss._algorithm_name} exists in the input tensordict."
            )
    value_key = loss.tensor_keys.value
    if loss.separate_losses:
        # the critic's own parameters, with those it shares with the actor detached
        with loss.critic_network_params.to_module(loss.critic_network):
            value = _network_output(loss.critic_network, tensordict, value_key)
    else:
        value = _network_output(loss.critic_network, tensordict, value_key)
    if value_norm is not None:
        value_norm.update(target)
        target = value_norm.normalize(target.detach())
        value = value_norm.normalize(value)
        if old_value is not None:
            old_value = value_norm.normalize(old_value)
    distance = distance_loss(target, value, loss.loss_critic_type, strict_shape=False)
    clip_fraction = None
    if old_value is not None:
        delta = value - old_value
        clipped = delta.clamp(-loss.clip_value, loss.clip_value)
        with torch.no_grad():
            clip_fraction = (delta != clipped).to(value.dtype).mean()
        distance_clipped = distance_loss(
            target, old_value + clipped, loss.loss_critic_type, strict_shape=False
        )
        distance = torch.maximum(distance, distance_clipped)
    return distance, clip_fraction, value, target


class _ActorCriticLoss(LossModule):
    """Base of PPO and A2C: a policy, an optional critic, advantage, entropy and critic terms.

    Subclasses declare their keys (``advantage``, ``value_target``, ``value``, ``action``,
    ``reward``, ``done``, ``terminated`` at least), write ``forward`` (the policy term)
    and end it with :meth:`_finish`, which adds ``loss_entropy`` and ``loss_critic``. The
    arguments are those of :class:`~rl.objectives.PPOLoss`.
    """

    _schedulable_buffers = frozenset(
        {"clip_value", "critic_coeff", "entropy_coeff", "max_importance_ratio"}
    )

    default_value_estimator = "GAE"
    _next_state_optional = True  # only the value estimator reads it, without an advantage
    _reads_sample_log_prob = True  # the behaviour policy's log-probability (PPO's ratio)

    def __init__(
        self,
        actor_network: ProbabilisticTensorDictSequential | None = None,
        critic_network: nn.Module | None = None,
        *,
        entropy_bonus: bool = True,
        samples_mc_entropy: int = 1,
        entropy_coeff: float | None = None,
        log_explained_variance: bool = True,
        critic_coeff: float | None = None,
        loss_critic_type: Literal["l1", "l2", "smooth_l1"] = "smooth_l1",
        normalize_advantage: bool = False,
        normalize_advantage_exclude_dims: tuple[int, ...] = (),
        gamma: float | None = None,
        separate_losses: bool = False,
        advantage_key: NestedKey | None = None,
        value_target_key: NestedKey | None = None,
        value_key: NestedKey | None = None,
        functional: bool = True,
        actor: ProbabilisticTensorDictSequential | None = None,
        critic: nn.Module | None = None,
        reduction: Literal["mean", "sum", "none"] | None = None,
        clip_value: float | None = None,
        device: torch.device | None = None,
        advantage_norm: nn.Module | None = None,
        delay_actor: bool = False,
        max_importance_ratio: float | None = None,
    ) -> None:
        if advantage_norm is not None and normalize_advantage:
            raise ValueError(
                "normalize_advantage=True and advantage_norm are mutually exclusive: pass "
                "either the mean/std standardization flag or a ValueNorm instance, not both"
            )
        actor_network = actor if actor is not None else actor_network
        critic_network = critic if critic is not None else critic_network
        if critic_coeff is None and critic_network is not None:
            critic_coeff = 1.0
        if actor_network is None or (critic_network is None and critic_coeff not in (None, 0, 0.0)):
            raise TypeError(
                f"{type(self).__name__} needs actor_network, and critic_network when critic_coeff is set"
            )
        super().__init__()
        self.loss_critic_type = _check_loss_function(loss_critic_type, "loss_critic_type")
        self.reduction = _check_reduction("mean" if reduction is None else reduction)
        self._functional_flag = functional
        self.convert_to_functional(actor_network, "actor_network", create_target_params=delay_actor)
        self.delay_actor = delay_actor
        self.has_critic = critic_network is not None and critic_coeff not in (None, 0, 0.0)
        if critic_network is not None:
            shared = list(actor_network.parameters()) if separate_losses else None
            self.convert_to_functional(critic_network, "critic_network", compare_against=shared)
        else:
            self.__dict__["critic_network"] = None
        self.entropy_bonus = entropy_bonus
        self.samples_mc_entropy = samples_mc_entropy
        self.log_explained_variance = log_explained_variance
        self.separate_losses = separate_losses
        self.normalize_advantage = normalize_advantage
        self.normalize_advantage_exclude_dims = tuple(normalize_advantage_exclude_dims)
        self.gamma = gamma
        # a ValueNorm module set by the losses that take one (MAPPOLoss, IPPOLoss)
        self.value_norm = None
        self.advantage_norm = advantage_norm
        if device is None:
            device = next(iter(self.parameters()), torch.empty(0)).device
        self.register_buffer(
            "entropy_coeff",
            torch.tensor(0.01 if entropy_coeff is None else float(entropy_coeff), device=device),
        )
        self.register_buffer(
            "critic_coeff", torch.tensor(float(critic_coeff or 0.0), device=device)
        )
        self.register_coeff_buffer(
            "clip_value", clip_value, device=device, dtype=torch.get_default_dtype()
        )
        if max_importance_ratio is not None and max_importance_ratio <= 0:
            raise ValueError(f"max_importance_ratio must be > 0, got {max_importance_ratio}.")
        self.register_coeff_buffer("max_importance_ratio", max_importance_ratio, device=device)
        keys = {"advantage": advantage_key, "value_target": value_target_key, "value": value_key}
        log_prob_keys = getattr(actor_network, "log_prob_keys", None)
        sample_keys = getattr(actor_network, "dist_sample_keys", None)
        if log_prob_keys:
            keys["sample_log_prob"] = log_prob_keys[0]
        if sample_keys:
            keys["action"] = sample_keys[0]
        self.set_keys(**{k: v for k, v in keys.items() if v is not None})

    @property
    def functional(self) -> bool:
        return self._functional_flag

    # ---------------------------------------------------------------- keys
    def _set_in_keys(self) -> None:
        tk = self.tensor_keys
        actor_keys = list(getattr(self.actor_network, "in_keys", []))
        critic_keys = (
            list(getattr(self.critic_network, "in_keys", []))
            if self.critic_network is not None
            else []
        )
        nxt = _next_keys([tk.reward, tk.done, tk.terminated])
        self.in_keys = list(
            dict.fromkeys(
                [
                    *actor_keys,
                    *critic_keys,
                    tk.action,
                    getattr(tk, "sample_log_prob", tk.action)
                    if self._reads_sample_log_prob
                    else tk.action,
                    *nxt,
                    # the next state, read by the value estimator's critic (as TorchRL's)
                    *_next_keys(list(dict.fromkeys(actor_keys + critic_keys))),
                ]
            )
        )
        self.out_keys = self._default_out_keys()
        self._in_keys_extra = actor_keys

    def _default_out_keys(self) -> list[str]:
        """The loss terms in TorchRL's order for PPO (the order of a keyword call's
        returned tuple): the policy terms, the entropy terms, the critic, the value clip
        fraction, then the subclass's diagnostics."""
        out = self._policy_out_keys()
        if self.entropy_bonus:
            out += ["entropy", "loss_entropy"]
        if self.has_critic:
            out.append("loss_critic")
        if self.clip_value is not None:
            out.append("value_clip_fraction")
        return out + self._extra_out_keys()

    def _policy_out_keys(self) -> list[str]:
        """The policy terms that open ``out_keys``."""
        return ["loss_objective"]

    def _extra_out_keys(self) -> list[str]:
        """Diagnostics the subclass appends to ``out_keys``."""
        return []

    def _required_key_names(self) -> tuple[str, ...]:
        return ("action",)

    # ---------------------------------------------------- value estimator
    def _build_value_estimator(self, value_type, hyperparams: dict):
        hyperparams.setdefault("value_network", self.critic_network)
        if value_type.name == "VTrace":
            hyperparams.setdefault("actor_network", self.actor_network)
            estimator = VTrace(**hyperparams)
            estimator.set_keys(sample_log_prob=self.tensor_keys.sample_log_prob)
            return estimator
        return super()._build_value_estimator(value_type, hyperparams)

    def _advantage(self, tensordict: TensorDictBase) -> torch.Tensor:
        advantage = tensordict.get(self.tensor_keys.advantage, None)
        computed = advantage is None
        if computed:
            if self.critic_network is None:
                raise RuntimeError(
                    f"{type(self).__name__} has no critic to compute {self.tensor_keys.advantage!r}; "
                    "write the advantage into the input first"
                )
            with torch.no_grad():
                self.value_estimator(tensordict)
            advantage = tensordict.get(self.tensor_keys.advantage)
        if self.advantage_norm is not None:
            # statistics from the fresh targets only: repeated passes over a batch whose
            # advantage is already written do not count it again
            if computed and self.training:
                self.advantage_norm.update(self._get(tensordict, "value_target"))
            return advantage / self.advantage_norm.scale()
        if self.normalize_advantage and advantage.numel() > 1:
            advantage = _standardize(
                advantage, 1e-6, exclude_dims=self.normalize_advantage_exclude_dims
            )
        return advantage

    # ------------------------------------------------------------ pieces
    def _entropy_terms(self, dist: D.Distribution, out: dict) -> None:
        entropy = _entropy(dist, self.samples_mc_entropy)
        out["entropy"] = entropy.detach().mean()
        out["loss_entropy"] = _scaled_reduce(
            -self.entropy_coeff, entropy.unsqueeze(-1), self.reduction
        )

    def loss_critic(
        self, tensordict: TensorDictBase
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """``critic_coeff * distance(value_target, V(s))`` (unreduced), clip fraction, explained variance."""
        loss, clip_fraction, explained = self._critic_distance(tensordict)
        return self.critic_coeff * loss, clip_fraction, explained

    def _critic_distance(
        self, tensordict: TensorDictBase
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """:meth:`loss_critic` before the ``critic_coeff`` factor."""
        loss, clip_fraction, value, target = _critic_regression(self, tensordict, self.value_norm)
        explained = None
        if self.log_explained_variance:
            with torch.no_grad():
                resid = torch.var(target - value, correction=0, dim=0)
                total = torch.var(target, correction=0, dim=0)
                explained = 1.0 - resid / (total + torch.finfo(target.dtype).eps)
        return loss, clip_fraction, explained

    def _critic_terms(self, tensordict: TensorDictBase, out: dict) -> None:
        if type(self).loss_critic is _ActorCriticLoss.loss_critic:
            loss, clip_fraction, explained = self._critic_distance(tensordict)
            out["loss_critic"] = _scaled_reduce(self.critic_coeff, loss, self.reduction)
        else:  # a subclass's own loss_critic
            loss, clip_fraction, explained = self.loss_critic(tensordict)
            out["loss_critic"] = _reduce_samples(loss, self.reduction)
        if clip_fraction is not None:
            out["value_clip_fraction"] = clip_fraction
        if explained is not None:
            out["explained_variance"] = explained

    def _finish(self, tensordict: TensorDictBase, dist: D.Distribution, out: dict) -> TensorDict:
        """``out`` (the policy term) with the entropy and critic terms, as a TensorDict."""
        if self.entropy_bonus:
            self._entropy_terms(dist, out)
        if self.has_critic:
            self._critic_terms(tensordict, out)
        return TensorDict(out, batch_size=[])
