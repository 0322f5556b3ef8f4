"""PPO losses: PPOLoss (unclipped surrogate), ClipPPOLoss and KLPENPPOLoss.

Paper: Schulman et al., 2017, "Proximal Policy Optimization Algorithms",
https://arxiv.org/abs/1707.06347.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import (
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    composite_lp_aggregate,
)
from tensordict.utils import NestedKey
from torch import distributions as D
from torch import nn

from ._loss import LossModule
from ._utils import _network_dist, _network_output, distance_loss

__all__ = ["ClipPPOLoss", "KLPENPPOLoss", "PPOLoss"]

_CRITIC_LOSSES = ("l1", "l2", "smooth_l1")
_REDUCTIONS = ("mean", "sum", "none")


def _check_choice(name: str, value, valid: tuple[str, ...]):
    if value not in valid:
        raise ValueError(f"unknown {name} {value!r}; valid ones are {list(valid)}")
    return value


def _reduce(loss: torch.Tensor, reduction: str) -> torch.Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss.squeeze(-1)


def _entropy(dist: D.Distribution, samples: int) -> torch.Tensor:
    """Analytic entropy, else a Monte-Carlo estimate over ``samples`` draws."""
    pre_tanh = getattr(dist, "_log_prob_pre_tanh", None)
    if pre_tanh is not None:  # rl.modules.TanhNormal: score pre-tanh draws, no squashing needed
        eps = torch.randn(
            dist._extended_shape(torch.Size((samples,))),
            dtype=dist.loc.dtype,
            device=dist.loc.device,
        )
        return -pre_tanh(dist.loc + eps * dist.scale).mean(0)
    sampler = getattr(dist, "rsample_and_log_prob", None)
    if sampler is not None:  # other squashed distributions without a closed form
        return -sampler((samples,))[1].mean(0)
    try:
        return dist.entropy()
    except NotImplementedError:
        x = dist.rsample((samples,)) if dist.has_rsample else dist.sample((samples,))
        return -dist.log_prob(x).mean(0)


def _standardize(x: torch.Tensor, exclude_dims: tuple[int, ...] = ()) -> torch.Tensor:
    if not exclude_dims:
        return (x - x.mean()) / x.std().clamp_min(1e-6)
    exclude = {d % x.ndim for d in exclude_dims}
    dims = [d for d in range(x.ndim) if d not in exclude]
    return (x - x.mean(dims, keepdim=True)) / x.std(dims, keepdim=True).clamp_min(1e-6)


def _default_log_prob_key() -> str:
    return "sample_log_prob" if composite_lp_aggregate(nowarn=True) else "action_log_prob"


class PPOLoss(LossModule):
    """The PPO loss without clipping: ``-ratio * advantage``, plus critic and entropy terms.

    ``ratio = pi(a|s) / pi_old(a|s)``, with ``pi_old``'s log-probability read from the
    data (``tensor_keys.sample_log_prob``, written by the collecting policy). The
    advantage is read from ``tensor_keys.advantage`` or, when absent, computed by the
    value estimator (GAE by default, see :meth:`make_value_estimator`) with the critic's
    weights held out of the graph.

    Args:
        actor_network (ProbabilisticTensorDictSequential): the policy; must offer
            ``get_dist(tensordict)``.
        critic_network (TensorDictModule, optional): writes ``tensor_keys.value``.

    Keyword Args:
        entropy_bonus (bool): add ``loss_entropy = -entropy_coeff * entropy``. Defaults to ``True``.
        samples_mc_entropy (int): draws of the Monte-Carlo entropy estimate when the
            distribution has no closed form. Defaults to ``1``.
        entropy_coeff (float): Defaults to ``0.01``.
        log_explained_variance (bool): report ``explained_variance`` of the critic.
            Defaults to ``True``.
        critic_coeff (float, optional): weight of ``loss_critic``; ``1.0`` when a critic is
            given. ``0`` or ``None`` without a critic turns the critic loss off.
        loss_critic_type (str): ``"l1"``, ``"l2"`` or ``"smooth_l1"`` (default).
        normalize_advantage (bool): standardize the advantage over the batch. Defaults to
            ``False``.
        normalize_advantage_exclude_dims (tuple of int): dimensions kept independent by the
            standardization.
        gamma (float, optional): discount of the default value estimator (TorchRL
            raises on it; here it is used).
        separate_losses (bool): the critic loss does not train parameters shared with
            the actor. Defaults to ``False``.
        advantage_key, value_target_key, value_key (NestedKey, optional): shortcuts for
            :meth:`set_keys`.
        functional (bool): accepted for TorchRL compatibility; networks are always held
            by the loss.
        actor, critic: aliases of ``actor_network`` / ``critic_network``.
        reduction (str): ``"mean"`` (default), ``"sum"`` or ``"none"``.
        clip_value (float, optional): clip the critic's prediction to
            ``[old_value - clip_value, old_value + clip_value]`` (PPO2-style) and report
            ``value_clip_fraction``. ``old_value`` is read from ``tensor_keys.value``.
        device (torch.device, optional): device of the coefficient buffers.

    Raises:
        ValueError: on an unknown ``loss_critic_type`` or ``reduction``.
        TypeError: when ``actor_network`` is missing, or the critic is missing while
            ``critic_coeff`` asks for a critic loss.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.modules import MLP, NormalParamExtractor, ProbabilisticActor, TanhNormal, ValueOperator
        >>> from tensordict.nn import TensorDictModule
        >>> net = torch.nn.Sequential(MLP(in_features=3, out_features=4, num_cells=[8]), NormalParamExtractor())
        >>> actor = ProbabilisticActor(
        ...     TensorDictModule(net, ["observation"], ["loc", "scale"]),
        ...     in_keys=["loc", "scale"], distribution_class=TanhNormal, return_log_prob=True,
        ... )
        >>> critic = ValueOperator(MLP(in_features=3, out_features=1, num_cells=[8]), in_keys=["observation"])
        >>> loss = ClipPPOLoss(actor, critic)
        >>> data = TensorDict({"observation": torch.randn(5, 3)}, [5])
        >>> data = actor(data)
        >>> data["advantage"] = torch.randn(5, 1)
        >>> data["value_target"] = torch.randn(5, 1)
        >>> sorted(loss(data.detach()).keys())
        ['ESS', 'clip_fraction', 'entropy', 'explained_variance', 'kl_approx', 'loss_critic', 'loss_entropy', 'loss_objective']
    """

    @dataclass
    class _AcceptedKeys:
        """Keys read by the PPO losses; remap them with ``set_keys``.

        Attributes:
            advantage: the advantage (read, or written by the value estimator).
            value_target: the critic's regression target.
            value: the critic's output key (and the old value for ``clip_value``).
            sample_log_prob: log-probability of the action under the collecting policy.
            action: the action taken.
            reward, done, terminated: read under ``"next"`` by the value estimator.
        """

        advantage: NestedKey = "advantage"
        value_target: NestedKey = "value_target"
        value: NestedKey = "state_value"
        sample_log_prob: NestedKey | None = None
        action: NestedKey = "action"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"

        def __post_init__(self):
            if self.sample_log_prob is None:
                self.sample_log_prob = _default_log_prob_key()

    default_value_estimator = "GAE"
    _value_estimator_default_keys = (
        "advantage",
        "value_target",
        "value",
        "reward",
        "done",
        "terminated",
    )

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
    ) -> None:
        actor_network = actor if actor is not None else actor_network
        critic_network = critic if critic is not None else critic_network
        if critic_coeff is None and critic_network is not None:
            critic_coeff = 1.0
        if actor_network is None or (critic_network is None and critic_coeff not in (None, 0, 0.0)):
            raise TypeError(
                f"{type(self).__name__} needs actor_network, and critic_network when critic_coeff is set"
            )
        super().__init__()
        self.loss_critic_type = _check_choice("loss_critic_type", loss_critic_type, _CRITIC_LOSSES)
        self.reduction = _check_choice(
            "reduction", "mean" if reduction is None else reduction, _REDUCTIONS
        )
        self._functional_flag = functional
        self.convert_to_functional(actor_network, "actor_network")
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
        if device is None:
            device = next(iter(self.parameters()), torch.empty(0)).device
        self.register_buffer(
            "entropy_coeff",
            torch.tensor(0.01 if entropy_coeff is None else float(entropy_coeff), device=device),
        )
        self.register_buffer(
            "critic_coeff", torch.tensor(float(critic_coeff or 0.0), device=device)
        )
        self.register_buffer(
            "clip_value",
            None if clip_value is None else torch.tensor(float(clip_value), device=device),
        )
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
        nxt = [
            ("next", k) if isinstance(k, str) else ("next", *k)
            for k in (tk.reward, tk.done, tk.terminated)
        ]
        self.in_keys = list(
            dict.fromkeys(
                [
                    *actor_keys,
                    *critic_keys,
                    tk.action,
                    getattr(tk, "sample_log_prob", tk.action),
                    *nxt,
                ]
            )
        )
        out = ["loss_objective"]
        if self.entropy_bonus:
            out += ["entropy", "loss_entropy"]
        if self.has_critic:
            out.append("loss_critic")
        if self.clip_value is not None:
            out.append("value_clip_fraction")
        self.out_keys = out + self._extra_out_keys()
        self._in_keys_extra = actor_keys

    def _extra_out_keys(self) -> list[str]:
        return ["kl_approx"]

    def _required_key_names(self) -> tuple[str, ...]:
        return ("action", "sample_log_prob")

    # ---------------------------------------------------- value estimator
    def _supported_value_estimators(self):
        from .value import ValueEstimators

        return tuple(ValueEstimators)

    def _build_value_estimator(self, value_type, hyperparams: dict):
        from .value import VTrace

        hyperparams.setdefault("value_network", self.critic_network)
        if value_type.name == "VTrace":
            hyperparams.setdefault("actor_network", self.actor_network)
            estimator = VTrace(**hyperparams)
            estimator.set_keys(sample_log_prob=self.tensor_keys.sample_log_prob)
            return estimator
        return super()._build_value_estimator(value_type, hyperparams)

    def _advantage(self, tensordict: TensorDictBase) -> torch.Tensor:
        advantage = tensordict.get(self.tensor_keys.advantage, None)
        if advantage is None:
            if self.critic_network is None:
                raise RuntimeError(
                    f"{type(self).__name__} has no critic to compute {self.tensor_keys.advantage!r}; "
                    "write the advantage into the input first"
                )
            with torch.no_grad():
                self.value_estimator(tensordict)
            advantage = tensordict.get(self.tensor_keys.advantage)
        if self.normalize_advantage and advantage.numel() > 1:
            advantage = _standardize(advantage, self.normalize_advantage_exclude_dims)
        return advantage

    # ------------------------------------------------------------ pieces
    def _log_weight(self, tensordict: TensorDictBase, adv_shape: torch.Size):
        """``log(pi / pi_old)`` ``[*B, 1]``, the current distribution, ``kl_approx`` ``[*B, 1]``."""
        prev_log_prob = self._get(tensordict, "sample_log_prob")
        if prev_log_prob.requires_grad:
            raise RuntimeError(
                f"the stored {self.tensor_keys.sample_log_prob!r} must not require grad"
            )
        action = self._get(tensordict, "action")
        dist = _network_dist(self.actor_network, tensordict)
        log_prob = dist.log_prob(action)
        if log_prob.shape != prev_log_prob.shape:
            prev_log_prob = prev_log_prob.reshape(log_prob.shape)
        diff = log_prob - prev_log_prob
        if diff.shape == adv_shape:
            diff = diff.unsqueeze(-1)
        return diff, dist, -diff

    def _entropy_terms(self, dist: D.Distribution, out: dict) -> None:
        entropy = _entropy(dist, self.samples_mc_entropy)
        out["entropy"] = entropy.detach().mean()
        out["loss_entropy"] = _reduce(-self.entropy_coeff * entropy.unsqueeze(-1), self.reduction)

    def loss_critic(
        self, tensordict: TensorDictBase
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """``critic_coeff * distance(value_target, V(s))`` (unreduced), clip fraction, explained variance."""
        if self.separate_losses:
            tensordict = tensordict.detach()
        target = self._get(tensordict, "value_target")
        old_value = self._get(tensordict, "value") if self.clip_value is not None else None
        value_key = self.tensor_keys.value
        if self.separate_losses:
            # the critic's own parameters, with those it shares with the actor detached
            with self.critic_network_params.to_module(self.critic_network):
                value = _network_output(self.critic_network, tensordict, value_key)
        else:
            value = _network_output(self.critic_network, tensordict, value_key)
        loss = distance_loss(target, value, self.loss_critic_type, strict_shape=False)
        clip_fraction = None
        if old_value is not None:
            delta = value - old_value
            clipped = delta.clamp(-self.clip_value, self.clip_value)
            with torch.no_grad():
                clip_fraction = (delta != clipped).to(value.dtype).mean()
            loss_clipped = distance_loss(
                target, old_value + clipped, self.loss_critic_type, strict_shape=False
            )
            loss = torch.maximum(loss, loss_clipped)
        explained = None
        if self.log_explained_variance:
            with torch.no_grad():
                resid = torch.var(target - value, correction=0, dim=0)
                total = torch.var(target, correction=0, dim=0)
                explained = 1.0 - resid / (total + torch.finfo(target.dtype).eps)
        return self.critic_coeff * loss, clip_fraction, explained

    def _critic_terms(self, tensordict: TensorDictBase, out: dict) -> None:
        loss, clip_fraction, explained = self.loss_critic(tensordict)
        out["loss_critic"] = _reduce(loss, self.reduction)
        if clip_fraction is not None:
            out["value_clip_fraction"] = clip_fraction
        if explained is not None:
            out["explained_variance"] = explained

    def _finish(self, tensordict: TensorDictBase, dist: D.Distribution, out: dict) -> TensorDict:
        if self.entropy_bonus:
            self._entropy_terms(dist, out)
        if self.has_critic:
            self._critic_terms(tensordict, out)
        return TensorDict(out, batch_size=[])

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Losses ``loss_objective``, ``loss_critic``, ``loss_entropy`` and diagnostics.

        Args:
            tensordict (TensorDictBase): a batch with the actor's inputs, ``action``,
                ``sample_log_prob`` and either ``advantage`` and ``value_target`` or what
                the value estimator needs to compute them.

        Returns:
            A TensorDict of scalar losses (with ``reduction="mean"``) and diagnostics.
        """
        tensordict = tensordict.copy()
        advantage = self._advantage(tensordict)
        log_weight, dist, kl = self._log_weight(tensordict, advantage.shape[:-1])
        out = {
            "loss_objective": _reduce(-log_weight.exp() * advantage, self.reduction),
            "kl_approx": kl.detach().mean(),
        }
        return self._finish(tensordict, dist, out)


class ClipPPOLoss(PPOLoss):
    """Clipped PPO loss: ``-min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A)``.

    Reports ``clip_fraction`` (share of clipped ratios), ``kl_approx`` (mean of
    ``log pi_old - log pi``) and ``ESS`` (effective sample size of the ratios, over the
    batch size), besides the losses of :class:`PPOLoss`.

    Args:
        actor_network, critic_network: see :class:`PPOLoss`.

    Keyword Args:
        clip_epsilon (float): the clip range. Defaults to ``0.2``.
        clip_value (bool or float, optional): ``True`` clips the critic by ``clip_epsilon``;
            a float by that value.
        **kwargs: the other arguments of :class:`PPOLoss`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential, TensorDictModule
        >>> actor = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(torch.nn.Linear(3, 4), ["obs"], ["logits"]),
        ...     ProbabilisticTensorDictModule(["logits"], ["action"], distribution_class=torch.distributions.Categorical,
        ...                                   return_log_prob=True),
        ... )
        >>> critic = TensorDictModule(torch.nn.Linear(3, 1), ["obs"], ["state_value"])
        >>> loss = ClipPPOLoss(actor, critic, clip_epsilon=0.1)
        >>> data = actor(TensorDict({"obs": torch.randn(8, 3)}, [8])).detach()
        >>> data["advantage"] = torch.randn(8, 1); data["value_target"] = torch.randn(8, 1)
        >>> out = loss(data)
        >>> float(out["clip_fraction"]), float(out["ESS"])
        (0.0, 1.0)
    """

    def __init__(
        self,
        actor_network: ProbabilisticTensorDictSequential | None = None,
        critic_network: nn.Module | None = None,
        *,
        clip_epsilon: float = 0.2,
        clip_value: bool | float | None = None,
        **kwargs,
    ) -> None:
        if isinstance(clip_value, bool):
            clip_value = clip_epsilon if clip_value else None
        super().__init__(actor_network, critic_network, clip_value=clip_value, **kwargs)
        self.register_buffer(
            "clip_epsilon", torch.tensor(float(clip_epsilon), device=self.entropy_coeff.device)
        )

    def _extra_out_keys(self) -> list[str]:
        return ["clip_fraction", "ESS", "kl_approx"]

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """See :meth:`PPOLoss.forward`; adds ``clip_fraction`` and ``ESS``."""
        tensordict = tensordict.copy()
        advantage = self._advantage(tensordict)
        log_weight, dist, kl = self._log_weight(tensordict, advantage.shape[:-1])
        eps = self.clip_epsilon
        ratio = log_weight.exp()
        # clamping the ratio is clamping log_weight to [log1p(-eps), log1p(eps)] (TorchRL)
        # with one exp fewer
        ratio_clip = ratio.clamp(1 - eps, 1 + eps)
        gain = torch.minimum(ratio * advantage, ratio_clip * advantage)
        with torch.no_grad():
            clip_fraction = (ratio_clip != ratio).to(ratio.dtype).mean()
            # over every sample of the batch (TorchRL reduces only the first dimension)
            lw = log_weight.reshape(-1)
            ess = (2 * lw.logsumexp(0) - (2 * lw).logsumexp(0)).exp() / lw.numel()
        out = {
            "loss_objective": _reduce(-gain, self.reduction),
            "clip_fraction": clip_fraction,
            "kl_approx": kl.detach().mean(),
            "ESS": ess,
        }
        return self._finish(tensordict, dist, out)


class KLPENPPOLoss(PPOLoss):
    """PPO with an adaptive KL penalty: ``-(ratio * A - beta * KL(pi_old || pi))``.

    ``pi_old`` is rebuilt from the distribution parameters stored in the data (e.g.
    ``loc``/``scale`` or ``logits`` written by the collecting policy). After each call,
    ``beta`` is multiplied by ``increment`` when the mean KL exceeds ``1.5 * dtarg`` and by
    ``decrement`` when it is below ``dtarg / 1.5``; :meth:`reset` restores it.

    Args:
        actor_network, critic_network: see :class:`PPOLoss`.

    Keyword Args:
        dtarg (float): target KL. Defaults to ``0.01``.
        beta (float): initial penalty coefficient. Defaults to ``1.0``.
        increment (float): Defaults to ``2``.
        decrement (float): Defaults to ``0.5``.
        samples_mc_kl (int): draws of the Monte-Carlo KL when no closed form exists.
        **kwargs: the other arguments of :class:`PPOLoss`.
    """

    def __init__(
        self,
        actor_network: ProbabilisticTensorDictSequential | None = None,
        critic_network: nn.Module | None = None,
        *,
        dtarg: float = 0.01,
        beta: float = 1.0,
        increment: float = 2,
        decrement: float = 0.5,
        samples_mc_kl: int = 1,
        **kwargs,
    ) -> None:
        super().__init__(actor_network, critic_network, **kwargs)
        device = self.entropy_coeff.device
        self.register_buffer("beta", torch.tensor(float(beta), device=device))
        self.register_buffer("dtarg", torch.tensor(float(dtarg), device=device))
        self._beta_init = float(beta)
        self.increment = increment
        self.decrement = decrement
        self.samples_mc_kl = samples_mc_kl

    def _extra_out_keys(self) -> list[str]:
        return ["kl", "kl_approx"]

    def _previous_dist(self, tensordict: TensorDictBase) -> D.Distribution:
        actor = self.actor_network
        head = actor
        if isinstance(actor, ProbabilisticTensorDictSequential):
            head = actor.module[-1]
        if not isinstance(head, ProbabilisticTensorDictModule):
            raise TypeError(f"KLPENPPOLoss needs a probabilistic actor, got {type(actor).__name__}")
        missing = [k for k in head.in_keys if tensordict.get(k, None) is None]
        if missing:
            raise KeyError(
                f"loss KLPENPPOLoss needs the distribution parameters {missing} of the collecting "
                "policy in the input (the actor writes them during collection)"
            )
        with torch.no_grad():
            return head.get_dist(tensordict.select(*head.in_keys).detach())

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """See :meth:`PPOLoss.forward`; adds ``kl`` and adapts ``beta``."""
        tensordict = tensordict.copy()
        previous = self._previous_dist(tensordict)
        advantage = self._advantage(tensordict)
        log_weight, dist, kl_approx = self._log_weight(tensordict, advantage.shape[:-1])
        try:
            kl = D.kl_divergence(previous, dist)
        except NotImplementedError:
            x = previous.sample((self.samples_mc_kl,))
            kl = (previous.log_prob(x) - dist.log_prob(x)).mean(0)
        if kl.shape == advantage.shape[:-1]:
            kl = kl.unsqueeze(-1)
        neg_loss = log_weight.exp() * advantage - self.beta * kl
        with torch.no_grad():
            mean_kl = kl.mean()
            grow = (mean_kl > self.dtarg * 1.5).to(self.beta.dtype)
            shrink = (mean_kl < self.dtarg / 1.5).to(self.beta.dtype)
            factor = 1 + grow * (self.increment - 1) + shrink * (self.decrement - 1)
        out = {
            "loss_objective": _reduce(-neg_loss, self.reduction),
            "kl": kl.detach().mean(),
            "kl_approx": kl_approx.detach().mean(),
        }
        td = self._finish(tensordict, dist, out)
        self.beta.mul_(factor)  # after the loss used the current beta
        return td

    def reset(self) -> None:
        """Restore the initial ``beta``."""
        self.beta.fill_(self._beta_init)
