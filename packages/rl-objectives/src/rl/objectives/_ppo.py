"""PPO losses: PPOLoss (unclipped surrogate), ClipPPOLoss, KLPENPPOLoss, and the
multi-agent MAPPOLoss / IPPOLoss (ClipPPOLoss with MAPPO's defaults and a value normaliser).

Paper: Schulman et al., 2017, "Proximal Policy Optimization Algorithms",
https://arxiv.org/abs/1707.06347.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential
from tensordict.utils import NestedKey
from torch import distributions as D
from torch import nn

from ._actor_critic import _ActorCriticLoss, _default_log_prob_key, _reduce_samples
from ._networks import _network_dist
from ._reduction import _clip_epsilon

__all__ = ["ClipPPOLoss", "IPPOLoss", "KLPENPPOLoss", "MAPPOLoss", "PPOLoss"]


class PPOLoss(_ActorCriticLoss):
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
        advantage_norm (ValueNorm, optional): divide the advantage by its ``scale()`` (no
            re-centring), e.g. :class:`~rl.modules.PercentileValueNorm` for DreamerV3's
            return normalisation. In training mode its statistics take in the value
            targets when the loss computes the advantage itself (the input has none).
            Excludes ``normalize_advantage``.
        delay_actor (bool): keep a detached copy of the actor's parameters
            (``target_actor_network_params``) as the *proximal* policy of the objective,
            apart from the *behaviour* policy that collected the data (whose
            log-probability is read from ``sample_log_prob``). The surrogate stays
            weighted by the behaviour ratio ``pi / pi_behav``; the trust region (the clip
            of :class:`ClipPPOLoss`, the KL of :class:`KLPENPPOLoss`) and ``kl_approx``
            act on ``pi / pi_prox``. A :class:`~rl.objectives.SoftUpdate` after each
            optimizer step makes the proximal policy a moving average of the policy:
            PPO-EWMA (Hilton et al., 2021, https://arxiv.org/abs/2110.00641). Defaults
            to ``False``.
        max_importance_ratio (float, optional): cap the behaviour ratio at this value by
            raising the (gradient-free) behaviour log-probability, so a capped sample
            keeps a rescaled gradient rather than none. Defaults to ``None`` (no cap).

    Raises:
        ValueError: on an unknown ``loss_critic_type`` or ``reduction``, with both
            ``normalize_advantage`` and ``advantage_norm``, or a ``max_importance_ratio``
            that is not positive.
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
        ['ESS', 'clip_fraction', 'entropy', 'explained_variance', 'kl_approx', 'loss_critic', 'loss_entropy', 'loss_objective', 'max_ratio', 'mean_ratio']
    """

    _algorithm_name = "PPO"  # how clip_value errors name the loss, as TorchRL's

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

    def _required_key_names(self) -> tuple[str, ...]:
        return ("action", "sample_log_prob")

    # ---------------------------------------------------- value estimator

    def _log_weight(self, tensordict: TensorDictBase, adv_shape: torch.Size):
        """The log-ratios of a batch and the current distribution.

        Returns ``(log_weight, dist, kl_approx, log_is_weight)``: ``log(pi / pi_prox)``
        ``[*B, 1]`` (the ratio the trust region acts on), the current distribution,
        ``log(pi_prox / pi)`` ``[*B, 1]`` (detached: a diagnostic), and ``log(pi_prox / pi_behav)`` ``[*B, 1]``, the
        gradient-free correction to the behaviour ratio (``None`` when the proximal
        policy is the behaviour policy and no ratio cap is set).
        """
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
        prox_log_prob = prev_log_prob
        if self.delay_actor:
            with torch.no_grad():
                proximal = _network_dist(self._target_network("actor_network"), tensordict)
                prox_log_prob = proximal.log_prob(action)
        diff = log_prob - prox_log_prob
        unsqueeze = diff.shape == adv_shape
        if unsqueeze:
            diff = diff.unsqueeze(-1)
        log_is_weight = None
        if self.delay_actor:
            log_is_weight = prox_log_prob - prev_log_prob
            if unsqueeze:
                log_is_weight = log_is_weight.unsqueeze(-1)
        if self.max_importance_ratio is not None:
            if log_is_weight is None:
                log_is_weight = torch.zeros_like(diff)
            log_is_weight = torch.minimum(
                log_is_weight, self.max_importance_ratio.log() - diff.detach()
            )
        return diff, dist, -diff.detach(), log_is_weight

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
        log_weight, dist, kl, log_is_weight = self._log_weight(tensordict, advantage.shape[:-1])
        if log_is_weight is not None:  # weighted by the behaviour ratio pi / pi_behav
            log_weight = log_weight + log_is_weight
        out = {
            "loss_objective": _reduce_samples(-log_weight.exp() * advantage, self.reduction),
            "kl_approx": kl.detach().mean(),
        }
        return self._finish(tensordict, dist, out)


class ClipPPOLoss(PPOLoss):
    """Clipped PPO loss: ``-min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A)``.

    Reports ``clip_fraction`` (share of clipped ratios), ``kl_approx`` (mean of
    ``log pi_old - log pi``), ``ESS`` (effective sample size of the ratios over the first
    batch dimension, divided by its size; one per entry of the other dimensions, as
    TorchRL's) and ``max_ratio`` / ``mean_ratio``, besides the losses of :class:`PPOLoss`.

    Args:
        actor_network, critic_network: see :class:`PPOLoss`.

    Keyword Args:
        clip_epsilon (float or (float, float)): the clip range ``[1 - eps, 1 + eps]``, or
            ``(eps_low, eps_high)`` for ``[1 - eps_low, 1 + eps_high]`` (DAPO's
            clip-higher). Defaults to ``0.2``.
        clip_value (bool or float, optional): ``True`` clips the critic by ``clip_epsilon``
            (a float ``clip_epsilon`` only); a float by that value.
        the others: see :class:`PPOLoss`.

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

    _schedulable_buffers = frozenset({"clip_epsilon", "clip_epsilon_high", "clip_epsilon_low"})

    def __init__(
        self,
        actor_network: ProbabilisticTensorDictSequential | None = None,
        critic_network: nn.Module | None = None,
        *,
        clip_epsilon: float | tuple[float, float] = 0.2,
        entropy_bonus: bool = True,
        samples_mc_entropy: int = 1,
        entropy_coeff: float | None = None,
        critic_coeff: float | None = None,
        loss_critic_type: str = "smooth_l1",
        normalize_advantage: bool = False,
        normalize_advantage_exclude_dims: tuple[int, ...] = (),
        advantage_norm: nn.Module | None = None,
        gamma: float | None = None,
        separate_losses: bool = False,
        reduction: str | None = None,
        clip_value: bool | float | None = None,
        delay_actor: bool = False,
        max_importance_ratio: float | None = None,
        device: torch.device | None = None,
        **kwargs,
    ) -> None:
        asymmetric = isinstance(clip_epsilon, (tuple, list))
        if isinstance(clip_value, bool):
            if clip_value and asymmetric:
                raise ValueError(
                    "clip_value=True cannot take its threshold from the asymmetric "
                    f"clip_epsilon {tuple(clip_epsilon)}: pass a float, e.g. clip_value=0.2"
                )
            clip_value = clip_epsilon if clip_value else None
        super().__init__(
            actor_network,
            critic_network,
            entropy_bonus=entropy_bonus,
            samples_mc_entropy=samples_mc_entropy,
            entropy_coeff=entropy_coeff,
            critic_coeff=critic_coeff,
            loss_critic_type=loss_critic_type,
            normalize_advantage=normalize_advantage,
            normalize_advantage_exclude_dims=normalize_advantage_exclude_dims,
            advantage_norm=advantage_norm,
            gamma=gamma,
            separate_losses=separate_losses,
            reduction=reduction,
            clip_value=clip_value,
            delay_actor=delay_actor,
            max_importance_ratio=max_importance_ratio,
            device=device,
            **kwargs,
        )
        device = self.entropy_coeff.device
        self._asymmetric_clip = asymmetric
        if asymmetric:  # DAPO's clip-higher: (eps_low, eps_high)
            low, high = _clip_epsilon(clip_epsilon)
            self.register_buffer("clip_epsilon_low", torch.tensor(low, device=device))
            self.register_buffer("clip_epsilon_high", torch.tensor(high, device=device))
        else:  # a schedulable scalar, not validated (as TorchRL's)
            self.register_buffer("clip_epsilon", torch.tensor(float(clip_epsilon), device=device))

    _CLIP_EPSILON_NAMES = ("clip_epsilon", "clip_epsilon_low", "clip_epsilon_high")

    def __setattr__(self, name: str, value) -> None:
        # scheduling the other flavour of the clip (a float on a loss built with a pair, or
        # the reverse) would add an attribute the clip never reads: refused, as TorchRL
        if (
            name in self._CLIP_EPSILON_NAMES
            and isinstance(value, (int, float))
            and name not in self.__dict__.get("_buffers", {})
            and any(n in self.__dict__.get("_buffers", {}) for n in self._CLIP_EPSILON_NAMES)
        ):
            if self._asymmetric_clip:
                raise AttributeError(
                    f"Cannot schedule {name!r}: this {type(self).__name__} was built with an "
                    "asymmetric clip_epsilon tuple; schedule 'clip_epsilon_low' / "
                    "'clip_epsilon_high' instead."
                )
            raise AttributeError(
                f"Cannot schedule {name!r}: this {type(self).__name__} was built with a "
                "symmetric float clip_epsilon; schedule 'clip_epsilon' instead."
            )
        super().__setattr__(name, value)

    @property
    def _clip_bounds(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The clip range of the log-ratio: ``(log(1 - eps_low), log(1 + eps_high))``."""
        if self._asymmetric_clip:
            return (-self.clip_epsilon_low).log1p(), self.clip_epsilon_high.log1p()
        return (-self.clip_epsilon).log1p(), self.clip_epsilon.log1p()

    def _ratio_bounds(self) -> tuple[torch.Tensor | float, torch.Tensor | float]:
        """The clip range of the ratio, ``(1 - eps_low, 1 + eps_high)``.

        Python numbers when the coefficients live on the CPU and nothing is being
        compiled: a clamp by numbers has no tensor bounds to broadcast, forward or
        backward, and reading a CPU buffer waits for no device. The same float32 bounds
        either way (``1 - eps`` is exact in double, rounded once by the clamp).
        """
        if self._asymmetric_clip:
            eps_low, eps_high = self.clip_epsilon_low, self.clip_epsilon_high
        else:
            eps_low = eps_high = self.clip_epsilon
        if eps_low.device.type == "cpu" and not torch.compiler.is_compiling():
            return 1.0 - float(eps_low), 1.0 + float(eps_high)
        return 1 - eps_low, 1 + eps_high

    def _policy_out_keys(self) -> list[str]:
        return ["loss_objective", "clip_fraction"]

    def _extra_out_keys(self) -> list[str]:
        return ["ESS", "kl_approx", "max_ratio", "mean_ratio"]

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """See :meth:`PPOLoss.forward`; adds ``clip_fraction``, ``ESS`` and the behaviour
        ratio's ``max_ratio`` / ``mean_ratio``."""
        tensordict = tensordict.copy()
        advantage = self._advantage(tensordict)
        log_weight, dist, kl, log_is_weight = self._log_weight(tensordict, advantage.shape[:-1])
        # the clip acts on the proximal ratio, the surrogate is weighted by the behaviour one;
        # clamping the ratio is clamping log_weight to _clip_bounds with one exp fewer
        low, high = self._ratio_bounds()
        ratio = log_weight.exp()
        ratio_clip = ratio.clamp(low, high)
        with torch.no_grad():
            clip_fraction = (ratio_clip != ratio).to(ratio.dtype).mean()
        behaviour = log_weight
        if log_is_weight is not None:
            behaviour = log_weight + log_is_weight
            is_weight = log_is_weight.exp()
            ratio, ratio_clip = ratio * is_weight, ratio_clip * is_weight
        gain = torch.minimum(ratio * advantage, ratio_clip * advantage)
        with torch.no_grad():
            # over the first batch dimension: feature dims (tokens, agents) keep their own
            lw = behaviour.squeeze(-1)
            ess = (2 * lw.logsumexp(0) - (2 * lw).logsumexp(0)).exp() / lw.shape[0]
            max_ratio, mean_ratio = ratio.max(), ratio.mean()
        out = {
            "loss_objective": _reduce_samples(-gain, self.reduction),
            "clip_fraction": clip_fraction,
            "kl_approx": kl.detach().mean(),
            "ESS": ess,
            "max_ratio": max_ratio,
            "mean_ratio": mean_ratio,
        }
        return self._finish(tensordict, dist, out)


class KLPENPPOLoss(PPOLoss):
    """PPO with an adaptive KL penalty: ``-(ratio * A - beta * KL(pi_old || pi))``.

    ``pi_old`` is rebuilt from the distribution parameters stored in the data (e.g.
    ``loc``/``scale`` or ``logits`` written by the collecting policy), or with
    ``delay_actor=True`` is the proximal policy (the actor on its target parameters). After each call,
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
        the others: see :class:`PPOLoss`.
    """

    _schedulable_buffers = frozenset({"beta"})

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
        entropy_bonus: bool = True,
        samples_mc_entropy: int = 1,
        entropy_coeff: float | None = None,
        critic_coeff: float | None = None,
        loss_critic_type: str = "smooth_l1",
        normalize_advantage: bool = False,
        normalize_advantage_exclude_dims: tuple[int, ...] = (),
        advantage_norm: nn.Module | None = None,
        gamma: float | None = None,
        separate_losses: bool = False,
        reduction: str | None = None,
        clip_value: float | None = None,
        delay_actor: bool = False,
        max_importance_ratio: float | None = None,
        device: torch.device | None = None,
        **kwargs,
    ) -> None:
        super().__init__(
            actor_network,
            critic_network,
            entropy_bonus=entropy_bonus,
            samples_mc_entropy=samples_mc_entropy,
            entropy_coeff=entropy_coeff,
            critic_coeff=critic_coeff,
            loss_critic_type=loss_critic_type,
            normalize_advantage=normalize_advantage,
            normalize_advantage_exclude_dims=normalize_advantage_exclude_dims,
            advantage_norm=advantage_norm,
            gamma=gamma,
            separate_losses=separate_losses,
            reduction=reduction,
            clip_value=clip_value,
            delay_actor=delay_actor,
            max_importance_ratio=max_importance_ratio,
            device=device,
            **kwargs,
        )
        device = self.entropy_coeff.device
        self.register_buffer("beta", torch.tensor(float(beta), device=device))
        self.register_buffer("dtarg", torch.tensor(float(dtarg), device=device))
        self._beta_init = float(beta)
        self.increment = increment
        self.decrement = decrement
        self.samples_mc_kl = samples_mc_kl

    def _policy_out_keys(self) -> list[str]:
        return ["loss_objective", "kl"]

    def _previous_dist(self, tensordict: TensorDictBase) -> D.Distribution:
        if self.delay_actor:  # the proximal policy: the actor on its target parameters
            with torch.no_grad():
                return _network_dist(self._target_network("actor_network"), tensordict)
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
        log_weight, dist, kl_approx, log_is_weight = self._log_weight(
            tensordict, advantage.shape[:-1]
        )
        if log_is_weight is not None:  # weighted by the behaviour ratio pi / pi_behav
            log_weight = log_weight + log_is_weight
        try:
            kl = D.kl_divergence(previous, dist)
        except NotImplementedError:
            x = previous.sample((self.samples_mc_kl,))
            kl = (previous.log_prob(x) - dist.log_prob(x)).mean(0)
        if kl.shape == advantage.shape[:-1]:
            kl = kl.unsqueeze(-1)
        # a copy: the in-place update of beta below must not change what backward reads
        neg_loss = log_weight.exp() * advantage - self.beta.clone() * kl
        with torch.no_grad():
            mean_kl = kl.mean()
            grow = (mean_kl > self.dtarg * 1.5).to(self.beta.dtype)
            shrink = (mean_kl < self.dtarg / 1.5).to(self.beta.dtype)
            factor = 1 + grow * (self.increment - 1) + shrink * (self.decrement - 1)
        out = {
            "loss_objective": _reduce_samples(-neg_loss, self.reduction),
            "kl": kl.detach().mean(),
            "kl_approx": kl_approx.detach().mean(),
        }
        td = self._finish(tensordict, dist, out)
        self.beta.mul_(factor)  # after the loss used the current beta
        return td

    def reset(self) -> None:
        """Restore the initial ``beta``."""
        self.beta.fill_(self._beta_init)


class MAPPOLoss(ClipPPOLoss):
    """Multi-agent PPO with a centralised critic (Yu et al., 2022, https://arxiv.org/abs/2103.01955).

    The clipped PPO loss of :class:`ClipPPOLoss` with MAPPO's defaults: the agents'
    policies act on their own observations, the critic (e.g.
    ``MultiAgentMLP(centralized=True)`` or :class:`~rl.modules.CrossGroupCritic`) sees
    the whole team and writes one value per agent, ``[*B, T, n_agents, 1]``. Compared with
    :class:`ClipPPOLoss`:

    - the default value estimator is :class:`~rl.objectives.value.MultiAgentGAE`
      (``ValueEstimators.MAGAE``), which repeats team rewards and done flags
      ``[*B, T, 1]`` along the agents;
    - the advantage is standardized by default, each agent on its own
      (``normalize_advantage_exclude_dims=(-2,)``);
    - ``value_norm`` (a :class:`~rl.modules.ValueNorm`, e.g.
      :class:`~rl.modules.PopArtValueNorm`) measures the critic loss on a normalised
      scale: its statistics take in each value target, then target, prediction and old
      value are normalised before the distance (and the ``clip_value`` radius applies
      there). The critic keeps predicting returns, so the value estimator uses it as is.

    The data follows the multi-agent layout: the group's entries under a key such as
    ``"agents"`` (``("agents", "observation")`` ``[*B, T, n_agents, obs]``,
    ``("agents", "action")``), team ``("next", "reward")``, ``("next", "done")``,
    ``("next", "terminated")`` ``[*B, T, 1]`` (or per agent under the group). Point the
    keys there with :meth:`set_keys` (``value=("agents", "state_value")``,
    ``action=("agents", "action")``).

    Args:
        actor_network (ProbabilisticTensorDictSequential): the agents' policy.
        critic_network (TensorDictModule): the centralised critic.

    Keyword Args:
        value_norm (ValueNorm, optional): the critic-loss normaliser (a submodule: it
            follows ``.to()`` and ``state_dict()``). Defaults to ``None``.
        entropy_coeff (float): Defaults to ``0.01``.
        normalize_advantage (bool): Defaults to ``True``.
        normalize_advantage_exclude_dims (tuple of int): Defaults to ``(-2,)``, the agents.
        **kwargs: the other arguments of :class:`ClipPPOLoss` (``clip_epsilon``,
            ``critic_coeff``, ``loss_critic_type``, ``clip_value``, ``separate_losses``, ...).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.modules import (MultiAgentMLP, NormalParamExtractor, PopArtValueNorm,
        ...     ProbabilisticActor, TanhNormal, TensorDictModule)
        >>> n, obs = 3, 4
        >>> actor = ProbabilisticActor(
        ...     TensorDictModule(torch.nn.Sequential(
        ...         MultiAgentMLP(obs, 4, n, centralized=False, share_params=True, depth=1, num_cells=8),
        ...         NormalParamExtractor()), [("agents", "observation")], [("agents", "loc"), ("agents", "scale")]),
        ...     in_keys={"loc": ("agents", "loc"), "scale": ("agents", "scale")},
        ...     out_keys=[("agents", "action")], distribution_class=TanhNormal, return_log_prob=True)
        >>> critic = TensorDictModule(
        ...     MultiAgentMLP(obs, 1, n, centralized=True, share_params=True, depth=1, num_cells=8),
        ...     [("agents", "observation")], [("agents", "state_value")])
        >>> loss = MAPPOLoss(actor, critic, value_norm=PopArtValueNorm(shape=1))
        >>> loss.set_keys(value=("agents", "state_value"), action=("agents", "action"))
        >>> flags = torch.zeros(2, 5, 1, dtype=torch.bool)
        >>> data = TensorDict({"agents": {"observation": torch.randn(2, 5, n, obs)},
        ...     "next": {"agents": {"observation": torch.randn(2, 5, n, obs)},
        ...              "reward": torch.randn(2, 5, 1), "done": flags, "terminated": flags}}, [2, 5])
        >>> with torch.no_grad():
        ...     data = actor(data)
        >>> out = loss(data)
        >>> out["loss_objective"].shape, out["loss_critic"].shape
        (torch.Size([]), torch.Size([]))
    """

    default_value_estimator = "MAGAE"

    def __init__(
        self,
        actor_network: ProbabilisticTensorDictSequential | None = None,
        critic_network: nn.Module | None = None,
        *,
        value_norm: nn.Module | None = None,
        entropy_coeff: float = 0.01,
        normalize_advantage: bool = True,
        normalize_advantage_exclude_dims: tuple[int, ...] = (-2,),
        **kwargs,
    ) -> None:
        super().__init__(
            actor_network,
            critic_network,
            entropy_coeff=entropy_coeff,
            normalize_advantage=normalize_advantage,
            normalize_advantage_exclude_dims=normalize_advantage_exclude_dims,
            **kwargs,
        )
        self.value_norm = value_norm


class IPPOLoss(MAPPOLoss):
    """Independent PPO (de Witt et al., 2020, https://arxiv.org/abs/2011.09533).

    The same loss as :class:`MAPPOLoss`; the critic is decentralised: each agent values
    its own observation (``MultiAgentMLP(centralized=False)``). The separate name says
    which algorithm runs.

    Args:
        actor_network (ProbabilisticTensorDictSequential): the agents' policy.
        critic_network (TensorDictModule): the per-agent critic.

    Keyword Args:
        value_norm (ValueNorm, optional): see :class:`MAPPOLoss`. Defaults to ``None``.
        entropy_coeff (float): Defaults to ``0.01``.
        normalize_advantage (bool): Defaults to ``True``.
        normalize_advantage_exclude_dims (tuple of int): Defaults to ``(-2,)``.
        **kwargs: the other arguments of :class:`ClipPPOLoss`.

    Examples:
        >>> import torch
        >>> from rl.modules import MultiAgentMLP, TensorDictModule
        >>> from tensordict.nn import ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential
        >>> actor = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(MultiAgentMLP(4, 3, 2, centralized=False, share_params=True),
        ...                      [("agents", "observation")], [("agents", "logits")]),
        ...     ProbabilisticTensorDictModule([("agents", "logits")], [("agents", "action")],
        ...         distribution_class=torch.distributions.Categorical, return_log_prob=True))
        >>> critic = TensorDictModule(MultiAgentMLP(4, 1, 2, centralized=False, share_params=True),
        ...                           [("agents", "observation")], [("agents", "state_value")])
        >>> loss = IPPOLoss(actor, critic)
        >>> loss.default_value_estimator, loss.normalize_advantage_exclude_dims
        ('MAGAE', (-2,))
    """
