"""DreamerV3 losses: world model, actor (through imagination), critic, and all three at once.

Names, arguments, defaults and outputs follow ``torchrl.objectives.dreamer_v3`` (TorchRL
0.14.1). Hafner et al., "Mastering Diverse Domains through World Models", 2023,
https://arxiv.org/abs/2301.04104.

- :class:`DreamerV3ModelLoss`: balanced KL between categorical prior and posterior,
  symlog reconstruction, two-hot (or symlog MSE) reward, optional continuation.
- :class:`DreamerV3ActorLoss`: imagined rollouts, lambda returns (optionally weighted by a
  learned continuation), return normalisation by a moving percentile range, REINFORCE
  or reparameterised gradients and an entropy bonus.
- :class:`DreamerV3ValueLoss`: symlog MSE or two-hot critic on the lambda returns, an
  optional slow (target) critic regulariser, and the replay-sequence critic loss.
- :class:`DreamerV3Loss`: the three on one replay batch.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey, unravel_key
from torch import nn

from rl.core import ExplorationType, set_exploration_type
from rl.modules import PercentileValueNorm, SymExpTwoHot, has_analytic_entropy, symexp, symlog
from rl.modules.models import two_hot_cross_entropy, two_hot_decode, two_hot_encode

from ._hold_out import hold_out_net
from ._loss import _TD_ESTIMATORS, LossModule, _reinit
from .value.functional import td0_return_estimate, vec_td_lambda_return_estimate

__all__ = [
    "DreamerV3ActorLoss",
    "DreamerV3Loss",
    "DreamerV3ModelLoss",
    "DreamerV3ValueLoss",
    "categorical_kl_balanced",
    "categorical_kl_terms",
    "symexp",
    "symlog",
    "two_hot_cross_entropy",
    "two_hot_decode",
    "two_hot_encode",
]

_DEFAULT_NUM_BINS = 255
_GAMMA_LMBDA_ERROR = (
    "Setting gamma/lmbda in the loss constructor is not supported: build the value "
    "estimator with loss.make_value_estimator(value_type, gamma=..., lmbda=...)"
)
_LEGACY_LOGITS = (
    "Storing DreamerV3 categorical {what} logits under the decoded {what} key {key!r} is "
    "deprecated and will be removed in v0.16. Write logits to the configured {what}_logits "
    "key instead."
)


def _default_bins(num_bins: int) -> torch.Tensor:
    """DreamerV3's ``num_bins`` two-hot support (the one :class:`SymExpTwoHot` holds)."""
    return SymExpTwoHot(num_bins).bins


def _unimix_probs(logits: torch.Tensor, unimix: float) -> torch.Tensor:
    if not 0 <= unimix < 1:
        raise ValueError(f"unimix must be in [0, 1), got {unimix}.")
    probs = torch.softmax(logits, dim=-1)
    if unimix:
        probs = (1 - unimix) * probs + unimix / logits.shape[-1]
    return probs


def _check_logits_pair(posterior_logits: torch.Tensor, prior_logits: torch.Tensor) -> None:
    if posterior_logits.shape != prior_logits.shape or posterior_logits.ndim < 2:
        raise ValueError(
            f"posterior_logits {tuple(posterior_logits.shape)} and prior_logits "
            f"{tuple(prior_logits.shape)} must have the same shape "
            "[..., num_categoricals, num_classes]."
        )


def categorical_kl_terms(
    posterior_logits: torch.Tensor,
    prior_logits: torch.Tensor,
    free_nats: float = 1.0,
    unimix: float = 0.01,
) -> tuple[torch.Tensor, torch.Tensor]:
    """DreamerV3's dynamics and representation KL losses (the reference formulation).

    Both are ``KL(posterior || prior)`` of the ``unimix``-mixed categoricals summed over
    the categoricals, clamped below at ``free_nats`` and averaged over the batch; the
    dynamics term stops the gradient to the posterior, the representation term the one to
    the prior.

    Args:
        posterior_logits (Tensor): ``[*B, num_categoricals, num_classes]``.
        prior_logits (Tensor): the same shape.
        free_nats (float, optional): lower clamp of the summed KL. Defaults to ``1.0``.
        unimix (float, optional): uniform fraction mixed in. Defaults to ``0.01``.

    Returns:
        ``(dynamics, representation)``, two scalars.

    Raises:
        ValueError: if the shapes differ.

    Examples:
        >>> import torch
        >>> from rl.objectives import categorical_kl_terms
        >>> logits = torch.zeros(2, 4, 8)
        >>> categorical_kl_terms(logits, logits, free_nats=1.0)
        (tensor(1.), tensor(1.))
    """
    _check_logits_pair(posterior_logits, prior_logits)
    posterior = _unimix_probs(posterior_logits, unimix)
    prior = _unimix_probs(prior_logits, unimix)
    log_posterior, log_prior = posterior.log(), prior.log()
    dynamics = (posterior.detach() * (log_posterior.detach() - log_prior)).sum((-1, -2))
    representation = (posterior * (log_posterior - log_prior.detach())).sum((-1, -2))
    if free_nats:
        dynamics = dynamics.clamp_min(free_nats)
        representation = representation.clamp_min(free_nats)
    return dynamics.mean(), representation.mean()


def categorical_kl_balanced(
    posterior_logits: torch.Tensor,
    prior_logits: torch.Tensor,
    alpha: float = 0.8,
    free_bits: float = 1.0,
) -> torch.Tensor:
    """``alpha * KL(sg(post) || prior) + (1 - alpha) * KL(post || sg(prior))``, per categorical.

    Each categorical's KL is clamped below at ``free_bits`` then averaged over the
    categoricals and the batch (the reference clamps the sum over categoricals instead:
    see :func:`categorical_kl_terms`). Probabilities are floored at ``1e-8``.

    Args:
        posterior_logits (Tensor): ``[*B, num_categoricals, num_classes]``.
        prior_logits (Tensor): the same shape.
        alpha (float, optional): weight of the prior-training term. Defaults to ``0.8``.
        free_bits (float, optional): per-categorical lower clamp. Defaults to ``1.0``.

    Returns:
        A scalar.

    Raises:
        ValueError: if the shapes differ.

    Examples:
        >>> import torch
        >>> from rl.objectives import categorical_kl_balanced
        >>> logits = torch.zeros(2, 4, 8)
        >>> categorical_kl_balanced(logits, logits, free_bits=0.5)
        tensor(0.5000)
    """
    _check_logits_pair(posterior_logits, prior_logits)
    posterior = torch.softmax(posterior_logits, dim=-1).clamp_min(1e-8)
    prior = torch.softmax(prior_logits, dim=-1).clamp_min(1e-8)
    log_posterior, log_prior = posterior.log(), prior.log()
    post_sg, log_post_sg = posterior.detach(), log_posterior.detach()
    train_prior = (post_sg * (log_post_sg - log_prior)).sum(-1)
    train_posterior = (posterior * (log_posterior - log_prior.detach())).sum(-1)
    train_prior = train_prior.clamp_min(free_bits).mean()
    train_posterior = train_posterior.clamp_min(free_bits).mean()
    return alpha * train_prior + (1.0 - alpha) * train_posterior


def _match_trailing_dim(source: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Give ``source`` (a log-prob or entropy) ``reference``'s ``[..., 1]`` feature dim."""
    if source.ndim == reference.ndim:
        return source
    if source.ndim == reference.ndim - 1:
        return source.unsqueeze(-1)
    if source.ndim == reference.ndim + 1:
        return source.sum(-1, keepdim=True)
    raise ValueError(
        f"Cannot align source shape {tuple(source.shape)} to reference shape "
        f"{tuple(reference.shape)}"
    )


@torch.no_grad()
def _replay_value_target(
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor,
    bootstrap: torch.Tensor,
    horizon: float,
    lmbda: float,
) -> torch.Tensor:
    """Lambda returns along replay sequences ``[*B, T(, 1)]``, one step shorter: ``[*B, T-1]``.

    Element ``k`` is the return of replay state ``k``, from the rewards, flags and
    ``bootstrap`` values of steps ``k + 1`` on, with discount ``1 - 1 / horizon``.
    """
    reward, done, terminated, bootstrap = (
        x.squeeze(-1).unsqueeze(-1) for x in (reward, done, terminated, bootstrap)
    )
    return vec_td_lambda_return_estimate(
        1 - 1 / horizon,
        lmbda,
        bootstrap[..., 1:, :],
        reward[..., 1:, :],
        done[..., 1:, :].bool(),
        terminated[..., 1:, :].bool(),
    ).squeeze(-1)


def _required(tensordict: TensorDictBase, key: NestedKey, owner: str, name: str) -> torch.Tensor:
    value = tensordict.get(key, None)
    if value is None:
        raise KeyError(
            f"{owner}: no {unravel_key(key)!r} entry (tensor_keys.{name}) in "
            f"{list(tensordict.keys(True, True))}"
        )
    return value


class _DreamerV3LossBase(LossModule):
    def _forward_value_estimator_keys(self, **kwargs) -> None:
        pass

    def reset_parameters_recursive(self) -> None:
        """Re-initialise the loss's networks (plain submodules and functional ones)."""
        super().reset_parameters_recursive()
        for module in self.children():
            _reinit(module)


class DreamerV3ModelLoss(_DreamerV3LossBase):
    """DreamerV3's world-model loss.

    The world model runs on the replay sequence (the sampled ``("next", "reward")`` is
    moved to ``("next", "true_reward")`` first) and writes categorical prior and
    posterior logits, reconstructions and reward predictions under ``"next"``. Terms:

    - KL: :func:`categorical_kl_balanced` (``kl_mode="balanced"``, key
      ``loss_model_kl``) or :func:`categorical_kl_terms` (``"separate"``, keys
      ``loss_model_dynamic`` and ``loss_model_representation`` weighted by
      ``lambda_dynamic`` and ``lambda_representation``);
    - reconstruction: squared (``"l2"``) or absolute (``"l1"``) error, in symlog space
      unless ``reco_symlog`` is off, summed over the event dims then averaged;
    - reward: two-hot cross entropy of the ``reward_logits`` on ``num_reward_bins`` bins,
      or ``(symlog(r) - symlog(r_hat))**2`` when ``reward_two_hot=False``;
    - continuation (with ``lambda_continue > 0`` and a ``continue_pred`` logit): binary
      cross entropy against ``continue_target_scale * (1 - terminated)``.

    Args:
        world_model (TensorDictModule): the world model.

    Keyword Args:
        lambda_kl, lambda_reco, lambda_reward (float, optional): weights. Default ``1.0``.
        lambda_continue (float, optional): continuation weight. Defaults to ``0.0``.
        kl_mode (str, optional): ``"balanced"`` or ``"separate"``. Defaults to ``"balanced"``.
        lambda_dynamic (float, optional): Defaults to ``1.0``.
        lambda_representation (float, optional): Defaults to ``0.1``.
        unimix (float, optional): uniform fraction of the separate KL. Defaults to ``0.0``.
        continue_target_scale (float, optional): in ``(0, 1]``. Defaults to ``1.0``.
        kl_alpha (float, optional): balance of the balanced KL. Defaults to ``0.8``.
        free_bits (float, optional): KL floor. Defaults to ``1.0``.
        reco_loss (str, optional): ``"l2"`` or ``"l1"``. Defaults to ``"l2"``.
        reco_symlog (bool or list of bool, optional): symlog per reconstruction head
            (without it, integer images are divided by 255). Defaults to ``True``.
        reward_two_hot (bool, optional): Defaults to ``True``.
        num_reward_bins (int, optional): Defaults to ``255``.
        global_average (bool, optional): average over every dim instead of summing the
            event dims first. Defaults to ``False``.
        detach_output (bool, optional): return the world model's output detached.
            Defaults to ``True``.

    Returns (from ``forward``):
        ``(TensorDict of [1]-shaped losses, world-model output)``.

    Raises:
        ValueError: for an unknown ``kl_mode`` or ``reco_loss``, or reward logits whose
            last dim is not ``num_reward_bins``.
        KeyError: naming a key the world model did not write.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.objectives import DreamerV3ModelLoss
        >>> def model(state):
        ...     logits = state.reshape(*state.shape[:-1], 2, 2)
        ...     return logits, logits, state.new_zeros(*state.shape[:-1], 3), state[..., :1] * 0
        >>> wm = TensorDictModule(model, in_keys=["state"], out_keys=[
        ...     ("next", "prior_logits"), ("next", "posterior_logits"),
        ...     ("next", "reco_pixels"), ("next", "reward")])
        >>> data = TensorDict(state=torch.zeros(2, 3, 4), next=TensorDict(
        ...     pixels=torch.ones(2, 3, 3), reward=torch.zeros(2, 3, 1), batch_size=[2, 3]),
        ...     batch_size=[2, 3])
        >>> loss, _ = DreamerV3ModelLoss(wm, reward_two_hot=False, free_bits=0.0)(data)
        >>> loss["loss_model_reco"]  # 3 * symlog(1) ** 2
        tensor([1.4414])
    """

    @dataclass
    class _AcceptedKeys:
        """Configurable keys (``set_keys``), all read under ``"next"``.

        Attributes:
            reward: the decoded predicted reward. Defaults to ``"reward"``.
            reward_logits: the reward logits. Defaults to ``"reward_logits"``.
            true_reward: where the sampled reward is moved. Defaults to ``"true_reward"``.
            prior_logits, posterior_logits: the latent logits.
            pixels: the observation key, or a list of them (one head each).
            reco_pixels: the reconstruction key(s), paired with ``pixels``.
            continue_pred: the continuation logit. Defaults to ``"continue_pred"``.
            done, terminated: the episode-end flags.
        """

        reward: NestedKey = "reward"
        reward_logits: NestedKey = "reward_logits"
        true_reward: NestedKey = "true_reward"
        prior_logits: NestedKey = "prior_logits"
        posterior_logits: NestedKey = "posterior_logits"
        pixels: NestedKey | list[NestedKey] = "pixels"
        reco_pixels: NestedKey | list[NestedKey] = "reco_pixels"
        continue_pred: NestedKey = "continue_pred"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"

    def __init__(
        self,
        world_model: nn.Module,
        *,
        lambda_kl: float = 1.0,
        lambda_reco: float = 1.0,
        lambda_reward: float = 1.0,
        lambda_continue: float = 0.0,
        kl_mode: Literal["balanced", "separate"] = "balanced",
        lambda_dynamic: float = 1.0,
        lambda_representation: float = 0.1,
        unimix: float = 0.0,
        continue_target_scale: float = 1.0,
        kl_alpha: float = 0.8,
        free_bits: float = 1.0,
        reco_loss: Literal["l1", "l2"] = "l2",
        reco_symlog: bool | list[bool] = True,
        reward_two_hot: bool = True,
        num_reward_bins: int = _DEFAULT_NUM_BINS,
        global_average: bool = False,
        detach_output: bool = True,
    ) -> None:
        super().__init__()
        if kl_mode not in ("balanced", "separate"):
            raise ValueError(f"kl_mode must be 'balanced' or 'separate', got {kl_mode!r}.")
        if reco_loss not in ("l1", "l2"):
            raise ValueError(f"reco_loss must be 'l1' or 'l2', got {reco_loss!r}.")
        if not 0 < continue_target_scale <= 1:
            raise ValueError(
                f"continue_target_scale must be in (0, 1], got {continue_target_scale}."
            )
        self.world_model = world_model
        self.lambda_kl = lambda_kl
        self.lambda_reco = lambda_reco
        self.lambda_reward = lambda_reward
        self.lambda_continue = lambda_continue
        self.kl_mode = kl_mode
        self.lambda_dynamic = lambda_dynamic
        self.lambda_representation = lambda_representation
        self.unimix = unimix
        self.continue_target_scale = continue_target_scale
        self.kl_alpha = kl_alpha
        self.free_bits = free_bits
        self.reco_loss = reco_loss
        self.reco_symlog = reco_symlog
        self.reward_two_hot = reward_two_hot
        self.num_reward_bins = num_reward_bins
        self.global_average = global_average
        self.detach_output = detach_output
        self.register_buffer("reward_bins", _default_bins(num_reward_bins))

    def _next(self, tensordict: TensorDictBase, name: str) -> torch.Tensor:
        key = unravel_key(("next", getattr(self.tensor_keys, name)))
        return _required(tensordict, key, type(self).__name__, name)

    def _reconstruction(self, tensordict: TensorDictBase) -> torch.Tensor:
        targets, predictions = self.tensor_keys.pixels, self.tensor_keys.reco_pixels
        targets = targets if isinstance(targets, list) else [targets]
        predictions = predictions if isinstance(predictions, list) else [predictions]
        use_symlog = self.reco_symlog
        if isinstance(use_symlog, bool):
            use_symlog = [use_symlog] * len(targets)
        if not targets or not len(targets) == len(predictions) == len(use_symlog):
            raise ValueError(
                f"pixels ({targets}), reco_pixels ({predictions}) and reco_symlog "
                f"({use_symlog}) must describe the same nonzero number of reconstruction heads."
            )
        owner = type(self).__name__
        total = 0
        for target_key, prediction_key, transform in zip(targets, predictions, use_symlog):
            target = _required(tensordict, unravel_key(("next", target_key)), owner, "pixels")
            prediction = _required(
                tensordict, unravel_key(("next", prediction_key)), owner, "reco_pixels"
            )
            if target.shape != prediction.shape:
                raise ValueError(
                    f"{owner}: the reconstruction {prediction_key!r} has shape "
                    f"{tuple(prediction.shape)}, the observation {target_key!r} "
                    f"{tuple(target.shape)}."
                )
            if transform:
                target, prediction = symlog(target), symlog(prediction)
            elif not target.is_floating_point():
                target = target.float() / 255.0
            error = target - prediction
            error = error.square() if self.reco_loss == "l2" else error.abs()
            if not self.global_average:
                error = error.reshape(*tensordict.batch_size, -1).sum(-1)
            total = total + error.mean().unsqueeze(-1)
        return total

    def _reward(self, tensordict: TensorDictBase) -> torch.Tensor:
        true_reward = self._next(tensordict, "true_reward")
        if not self.reward_two_hot:
            prediction = self._next(tensordict, "reward")
            return (symlog(true_reward) - symlog(prediction)).square().squeeze(-1).mean()
        key = unravel_key(("next", self.tensor_keys.reward_logits))
        logits = tensordict.get(key, None)
        if logits is None:
            logits = self._next(tensordict, "reward")
            warnings.warn(
                _LEGACY_LOGITS.format(
                    what="reward", key=unravel_key(("next", self.tensor_keys.reward))
                ),
                DeprecationWarning,
                stacklevel=3,
            )
        if logits.shape[-1] != self.num_reward_bins:
            raise ValueError(
                f"reward_two_hot=True expects the reward head to output logits over "
                f"{self.num_reward_bins} bins, got trailing dim {logits.shape[-1]} "
                f"(shape {tuple(logits.shape)})."
            )
        return two_hot_cross_entropy(logits, true_reward, self.reward_bins).mean()

    def forward(self, tensordict: TensorDictBase):
        tensordict = tensordict.copy()
        self._next(tensordict, "reward")
        tensordict.rename_key_(
            ("next", self.tensor_keys.reward), ("next", self.tensor_keys.true_reward)
        )
        tensordict = self.world_model(tensordict)
        prior_logits = self._next(tensordict, "prior_logits")
        posterior_logits = self._next(tensordict, "posterior_logits")
        out = TensorDict(
            loss_model_reco=self.lambda_reco * self._reconstruction(tensordict),
            loss_model_reward=self.lambda_reward * self._reward(tensordict).unsqueeze(-1),
        )
        if self.kl_mode == "separate":
            dynamics, representation = categorical_kl_terms(
                posterior_logits, prior_logits, free_nats=self.free_bits, unimix=self.unimix
            )
            weight = self.lambda_kl
            out.set("loss_model_dynamic", weight * self.lambda_dynamic * dynamics.unsqueeze(-1))
            out.set(
                "loss_model_representation",
                weight * self.lambda_representation * representation.unsqueeze(-1),
            )
        else:
            kl = categorical_kl_balanced(
                posterior_logits, prior_logits, alpha=self.kl_alpha, free_bits=self.free_bits
            )
            out.set("loss_model_kl", self.lambda_kl * kl.unsqueeze(-1))
        if self.lambda_continue > 0:
            pred = tensordict.get(("next", self.tensor_keys.continue_pred), None)
            terminated = tensordict.get(("next", self.tensor_keys.terminated), None)
            if terminated is None:
                terminated = tensordict.get(("next", self.tensor_keys.done), None)
            if pred is not None and terminated is not None:
                target = (~terminated.bool()).to(pred.dtype) * self.continue_target_scale
                loss = nn.functional.binary_cross_entropy_with_logits(
                    pred.squeeze(-1), target.reshape(pred.squeeze(-1).shape)
                )
                out.set("loss_model_continue", self.lambda_continue * loss.unsqueeze(-1))
        return out, tensordict.data if self.detach_output else tensordict


class DreamerV3ActorLoss(_DreamerV3LossBase):
    """DreamerV3's actor loss on imagined rollouts.

    From the posterior ``state`` and ``belief`` of the data, the model-based env is rolled
    out ``imagination_horizon`` steps with the actor (world model held out); the value
    model (held out) evaluates the next latents and the lambda return ``R`` is written as
    ``"lambda_target"``. With a ``continuation_model``, ``R_t = r_t + gamma c_t ((1 -
    lmbda) v_{t+1} + lmbda R_{t+1})`` and the step weights are ``w_t = c_0 * prod_{k=1..t}
    gamma c_k`` (without one, ``c = 1``); ``discount_loss=False`` gives ``w = 1``. With
    ``S = max(min_scale, EMA(q95(R)) - EMA(q05(R)))`` (``return_normalization``):

    - REINFORCE (``use_reinforce``): ``-mean(w * log pi(sg(a)|sg(s)) * sg(R - v(s)) / S)``;
    - otherwise (reparameterised): ``-mean(w * R / S)``;

    minus ``entropy_bonus * mean(w * H[pi])`` (analytic entropy, or ``-log pi`` of a
    reparameterised sample).

    Args:
        actor_model (TensorDictModule): the policy on ``state`` and ``belief``.
        value_model (TensorDictModule): writes ``state_value``.
        model_based_env (DreamerEnv): the imagination env.

    Keyword Args:
        continuation_model (TensorDictModule, optional): writes ``continuation``.
        imagination_horizon (int, optional): Defaults to ``15``.
        discount_loss (bool, optional): Defaults to ``True``.
        entropy_bonus (float, optional): Defaults to ``3e-4``.
        use_reinforce (bool, optional): Defaults to ``False``.
        return_normalization (bool, optional): Defaults to ``True``.
        return_normalization_rate (float, optional): Defaults to ``0.01``.
        return_normalization_quantiles (tuple of float, optional): Defaults to
            ``(0.05, 0.95)``.
        return_normalization_min_scale (float, optional): Defaults to ``1.0``.

    The estimator is TD(lambda) (``gamma=0.99``, ``lmbda=0.95``) unless
    :meth:`make_value_estimator` picks TD0, TD1 or other hyper-parameters.

    Returns (from ``forward``):
        ``(TensorDict(loss_actor, actor_entropy, return_low, return_high, return_scale,
        continuation_mean), imagined_data)``.

    Raises:
        KeyError: naming a latent missing from the input.
    """

    @dataclass
    class _AcceptedKeys:
        """Configurable keys (``set_keys``).

        Attributes:
            state, belief: the latents. reward: the imagined reward (under ``"next"``).
            value: the value model's output. action, action_log_prob: the policy's.
            done, terminated: episode flags. continuation: the continuation model's
            output. discount_weight: where the step weights are written.
        """

        state: NestedKey = "state"
        belief: NestedKey = "belief"
        reward: NestedKey = "reward"
        value: NestedKey = "state_value"
        action: NestedKey = "action"
        action_log_prob: NestedKey = "action_log_prob"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"
        continuation: NestedKey = "continuation"
        discount_weight: NestedKey = "discount_weight"

    default_value_estimator = "TDLambda"
    SUPPORTED_VALUE_ESTIMATORS = _TD_ESTIMATORS

    def __init__(
        self,
        actor_model: nn.Module,
        value_model: nn.Module,
        model_based_env,
        *,
        continuation_model: nn.Module | None = None,
        imagination_horizon: int = 15,
        discount_loss: bool = True,
        entropy_bonus: float = 3e-4,
        use_reinforce: bool = False,
        return_normalization: bool = True,
        return_normalization_rate: float = 0.01,
        return_normalization_quantiles: tuple[float, float] = (0.05, 0.95),
        return_normalization_min_scale: float = 1.0,
        gamma: float | None = None,
        lmbda: float | None = None,
    ) -> None:
        if gamma is not None or lmbda is not None:
            raise TypeError(_GAMMA_LMBDA_ERROR)
        super().__init__()
        self.actor_model = actor_model
        self.__dict__["value_model"] = value_model
        self.model_based_env = model_based_env
        self.__dict__["continuation_model"] = continuation_model
        self.imagination_horizon = imagination_horizon
        self.discount_loss = discount_loss
        self.entropy_bonus = entropy_bonus
        self.use_reinforce = use_reinforce
        self.return_normalization = return_normalization
        self.retnorm = PercentileValueNorm(
            quantiles=return_normalization_quantiles,
            rate=return_normalization_rate,
            min_scale=return_normalization_min_scale,
        )

    def _forward_value_estimator_keys(self, **kwargs) -> None:
        if self._value_estimator is not None and hasattr(self._value_estimator, "set_keys"):
            self._value_estimator.set_keys(value=self.tensor_keys.value)

    @property
    def return_normalization_rate(self) -> float:
        return self.retnorm.rate

    @property
    def return_normalization_quantiles(self) -> tuple[float, float]:
        return self.retnorm.quantiles

    @property
    def return_normalization_min_scale(self) -> float:
        return self.retnorm.min_scale

    @property
    def return_low(self) -> torch.Tensor:
        """Moving average of the low return quantile (0-dim view of ``retnorm.low``)."""
        return self.retnorm.low.squeeze(-1)

    @property
    def return_high(self) -> torch.Tensor:
        """Moving average of the high return quantile (0-dim view of ``retnorm.high``)."""
        return self.retnorm.high.squeeze(-1)

    def _return_scale(self, returns: torch.Tensor) -> torch.Tensor:
        if not self.return_normalization:
            return torch.ones((), dtype=returns.dtype, device=returns.device)
        if self.training:
            self.retnorm.update(returns)
        return self.retnorm.scale().squeeze(-1)

    def _gamma(self, like: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(self.value_estimator.gamma, dtype=like.dtype, device=like.device)

    def forward(self, tensordict: TensorDictBase):
        keys = self.tensor_keys
        owner = type(self).__name__
        for name in ("state", "belief"):
            _required(tensordict, getattr(keys, name), owner, name)
        start = tensordict.select(keys.state, keys.belief).data
        with hold_out_net(self.model_based_env), set_exploration_type(ExplorationType.RANDOM):
            start = self.model_based_env.reset(start.copy())
            fake_data = self.model_based_env.rollout(
                max_steps=self.imagination_horizon,
                policy=self.actor_model,
                auto_reset=False,
                tensordict=start,
                break_when_any_done=False,
            )
            next_td = fake_data.get("next").copy()
            with hold_out_net(self.value_model):
                next_td = self.value_model(next_td)
        next_value = _required(next_td, keys.value, owner, "value")
        reward = _required(fake_data, ("next", keys.reward), owner, "reward")

        continuation = root_continuation = None
        continuation_model = self.__dict__["continuation_model"]
        if continuation_model is not None:
            first = fake_data[..., :1].select(*continuation_model.in_keys, strict=False)
            following = next_td.select(*continuation_model.in_keys, strict=False)
            with hold_out_net(continuation_model):
                continuation_model(first)
                continuation_model(following)
            continuation = following.get(keys.continuation)
            root_continuation = torch.cat(
                [first.get(keys.continuation), continuation[..., :-1, :]], dim=-2
            )
            fake_data.set(keys.continuation, root_continuation)
            fake_data.set(("next", keys.continuation), continuation)

        lambda_target = self.lambda_target(reward, next_value, continuation)
        fake_data.set("lambda_target", lambda_target)
        if self.discount_loss:
            gamma = self._gamma(lambda_target)
            conts = (
                root_continuation if continuation is not None else torch.ones_like(lambda_target)
            )
            weight = torch.cat([conts[..., :1, :], gamma * conts[..., 1:, :]], dim=-2).cumprod(-2)
        else:
            weight = torch.ones_like(lambda_target)
        weight = weight.detach()
        fake_data.set(keys.discount_weight, weight)

        if self.use_reinforce or self.entropy_bonus > 0:
            inputs = fake_data.select(*self.actor_model.in_keys, strict=False).detach()
            dist = self.actor_model.get_dist(inputs)
        return_scale = self._return_scale(lambda_target)
        if self.use_reinforce:
            # the imagined action is reparameterised: score a stopped copy of it
            log_prob = dist.log_prob(fake_data.get(keys.action).detach())
            log_prob = _match_trailing_dim(log_prob, lambda_target)
            with hold_out_net(self.value_model):
                baseline = fake_data.select(*self.value_model.in_keys, strict=False)
                baseline = self.value_model(baseline).get(keys.value)
            advantage = (lambda_target - baseline).detach() / return_scale
            actor_loss = -(weight * log_prob * advantage).mean()
        else:
            actor_loss = -(weight * lambda_target / return_scale).mean()
        if self.entropy_bonus > 0:
            if has_analytic_entropy(dist):
                entropy = dist.entropy()
            elif hasattr(dist, "rsample_and_log_prob"):
                entropy = -dist.rsample_and_log_prob()[1]
            else:
                entropy = -dist.log_prob(dist.rsample())
            entropy = (weight * _match_trailing_dim(entropy, weight)).mean()
            actor_loss = actor_loss - self.entropy_bonus * entropy
        else:
            entropy = actor_loss.new_zeros(())
        out = TensorDict(
            loss_actor=actor_loss,
            actor_entropy=entropy.detach(),
            return_low=self.return_low.detach().clone(),
            return_high=self.return_high.detach().clone(),
            return_scale=return_scale.detach().clone(),
            continuation_mean=(
                continuation.mean().detach()
                if continuation is not None
                else torch.ones((), device=actor_loss.device)
            ),
        )
        return out, fake_data.data

    def lambda_target(
        self,
        reward: torch.Tensor,
        value: torch.Tensor,
        continuation: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The return ``[*B, T, 1]`` of imagined ``reward`` and next ``value``.

        Without ``continuation``: the loss's estimator (TD0, TD1 or TD(lambda)) with no
        episode end. With it, TD(lambda) whose step discount is ``gamma * continuation``.

        Raises:
            ValueError: if the shapes differ.
        """
        if reward.shape != value.shape or (
            continuation is not None and continuation.shape != reward.shape
        ):
            raise ValueError(
                f"{type(self).__name__}.lambda_target: reward {tuple(reward.shape)}, value "
                f"{tuple(value.shape)} and continuation "
                f"{None if continuation is None else tuple(continuation.shape)} must share "
                "the shape [*B, T, 1]"
            )
        estimator = self.value_estimator
        gamma = self._gamma(reward)
        done = torch.zeros(reward.shape, dtype=torch.bool, device=reward.device)
        name = getattr(self.value_type, "name", getattr(self.value_type, "__name__", ""))
        if continuation is not None:
            lmbda = torch.as_tensor(estimator.lmbda, dtype=reward.dtype, device=reward.device)
            return vec_td_lambda_return_estimate(
                gamma * continuation, lmbda, value, reward, done, done
            )
        if name in ("TD0", "TD0Estimator"):
            return td0_return_estimate(gamma, value, reward, done)
        lmbda = 1.0 if name in ("TD1", "TD1Estimator") else estimator.lmbda
        return vec_td_lambda_return_estimate(gamma, lmbda, value, reward, done, done)


class DreamerV3ValueLoss(_DreamerV3LossBase):
    """DreamerV3's critic loss on the imagined ``lambda_target``.

    ``"symlog_mse"``: ``(symlog(v) - symlog(R))**2``; ``"two_hot"``: two-hot cross
    entropy of the ``state_value_logits`` on ``num_value_bins`` bins. Steps are weighted
    by the actor loss's ``discount_weight`` when present, else by ``[1, gamma, ...]``
    (``discount_loss``, sequences ``[*B, T, 1]``) or 1. With
    ``slow_critic_regularization > 0`` a target copy of the critic is kept (update it
    with :class:`~rl.objectives.SoftUpdate`) and the online critic is also regressed on
    its decoded predictions with that weight.

    Args:
        value_model (TensorDictModule): writes ``state_value`` (and the logits).
        value_loss (str, optional): ``"symlog_mse"`` or ``"two_hot"``. Defaults to
            ``"symlog_mse"``.
        discount_loss (bool, optional): Defaults to ``True``.
        gamma (float, optional): used when no ``actor_loss`` is given. Defaults to ``0.99``.
        num_value_bins (int, optional): Defaults to ``255``.
        actor_loss (DreamerV3ActorLoss, optional): gamma is read from its estimator.
        slow_critic_regularization (float, optional): Defaults to ``0.0``.
        reduction (str, optional): ``"none"``, ``"mean"`` or ``"sum"``. Defaults to
            ``"mean"``.

    Returns (from ``forward``):
        ``(TensorDict(loss_value, value_slow_loss), fake_data)``.

    Raises:
        ValueError: for an unknown ``value_loss``, a negative regulariser, or value logits
            whose last dim is not ``num_value_bins``.
        KeyError: without ``lambda_target`` in the input.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.objectives import DreamerV3ValueLoss
        >>> value = TensorDictModule(torch.nn.Linear(3, 1), in_keys=["state"],
        ...                          out_keys=["state_value"])
        >>> data = TensorDict(state=torch.randn(6, 3), lambda_target=torch.randn(6, 1),
        ...                   batch_size=[6])
        >>> DreamerV3ValueLoss(value)(data)[0]["loss_value"].shape
        torch.Size([])
    """

    @dataclass
    class _AcceptedKeys:
        """Configurable keys (``set_keys``).

        Attributes:
            value: the decoded value. Defaults to ``"state_value"``.
            value_logits: the value logits. Defaults to ``"state_value_logits"``.
            discount_weight: the actor loss's step weights. Defaults to ``"discount_weight"``.
            reward, done, terminated: replay entries under ``"next"``.
            bootstrap: each replay state's first imagined return. Defaults to ``"bootstrap"``.
        """

        value: NestedKey = "state_value"
        value_logits: NestedKey = "state_value_logits"
        discount_weight: NestedKey = "discount_weight"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"
        bootstrap: NestedKey = "bootstrap"

    def __init__(
        self,
        value_model: nn.Module,
        value_loss: Literal["symlog_mse", "two_hot"] = "symlog_mse",
        discount_loss: bool = True,
        gamma: float = 0.99,
        num_value_bins: int = _DEFAULT_NUM_BINS,
        actor_loss: DreamerV3ActorLoss | None = None,
        slow_critic_regularization: float = 0.0,
        reduction: Literal["none", "mean", "sum"] | None = None,
    ) -> None:
        super().__init__()
        if value_loss not in ("symlog_mse", "two_hot"):
            raise ValueError(f"value_loss must be 'symlog_mse' or 'two_hot', got '{value_loss}'")
        if slow_critic_regularization < 0:
            raise ValueError(
                f"slow_critic_regularization must be non-negative, got {slow_critic_regularization}."
            )
        self.reduction = "mean" if reduction is None else reduction
        self.slow_critic_regularization = slow_critic_regularization
        if any(nn.parameter.is_lazy(p) for p in value_model.parameters()):
            # a lazy network gets its parameters (and this loss its copies) on first use
            self.__dict__["value_model"] = value_model
            self.__dict__["_lazy_value_model"] = True
        else:
            self._convert_value_model(value_model)
        self.value_loss = value_loss
        self.gamma = gamma
        self.discount_loss = discount_loss
        self.__dict__["_actor_loss"] = actor_loss
        self.register_buffer("value_bins", _default_bins(num_value_bins))

    def _convert_value_model(self, value_model: nn.Module) -> None:
        self.__dict__["_lazy_value_model"] = False
        self.convert_to_functional(
            value_model, "value_model", create_target_params=bool(self.slow_critic_regularization)
        )

    def _resolved_gamma(self) -> float:
        actor_loss = self.__dict__.get("_actor_loss")
        if actor_loss is None:
            return float(self.gamma)
        return float(torch.as_tensor(actor_loss.value_estimator.gamma))

    def sync_gamma_with_actor_loss(self, actor_loss: DreamerV3ActorLoss) -> None:
        """Copy ``gamma`` from ``actor_loss``'s estimator (or pass ``actor_loss=``)."""
        self.gamma = float(torch.as_tensor(actor_loss.value_estimator.gamma))

    def _predict(self, tensordict: TensorDictBase, target: bool = False) -> TensorDictBase:
        inputs = tensordict.select(*self.value_model.in_keys, strict=False)
        if self.__dict__["_lazy_value_model"]:
            with torch.no_grad():
                self.value_model(inputs.copy())
            self._convert_value_model(self.__dict__.pop("value_model"))
        if target:
            with torch.no_grad():
                return self._target_network("value_model")(inputs)
        return self.value_model(inputs)

    def _logits(self, prediction: TensorDictBase) -> torch.Tensor:
        logits = prediction.get(self.tensor_keys.value_logits, None)
        if logits is None:
            logits = _required(prediction, self.tensor_keys.value, type(self).__name__, "value")
            warnings.warn(
                _LEGACY_LOGITS.format(what="value", key=unravel_key(self.tensor_keys.value)),
                DeprecationWarning,
                stacklevel=3,
            )
        if logits.shape[-1] != self.value_bins.shape[0]:
            raise ValueError(
                f"value_loss='two_hot' expects the value head to output logits over "
                f"{self.value_bins.shape[0]} bins, got trailing dim {logits.shape[-1]} "
                f"(shape {tuple(logits.shape)})."
            )
        return logits

    def _step_value_loss(self, prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if self.value_loss == "two_hot":
            return two_hot_cross_entropy(prediction, target, self.value_bins)
        return (symlog(prediction) - symlog(target)).square()

    def _slow_target(self, tensordict: TensorDictBase) -> torch.Tensor:
        value = self._predict(tensordict, target=True).get(self.tensor_keys.value)
        if self.value_loss == "two_hot" and value.shape[-1] == self.value_bins.shape[0]:
            value = two_hot_decode(value, self.value_bins).unsqueeze(-1)
        return value.squeeze(-1)

    def forward(self, fake_data: TensorDictBase):
        owner = type(self).__name__
        target = _required(fake_data, "lambda_target", owner, "lambda_target").squeeze(-1)
        prediction_td = self._predict(fake_data)
        weight = fake_data.get(self.tensor_keys.discount_weight, None)
        if weight is not None:
            weight = weight.squeeze(-1)
        elif self.discount_loss and target.ndim >= 2:
            gamma = torch.full_like(target, self._resolved_gamma())
            gamma[..., 0] = 1
            weight = gamma.cumprod(-1)
        else:
            weight = torch.ones_like(target)
        if self.value_loss == "two_hot":
            prediction = self._logits(prediction_td)
        else:
            prediction = _required(prediction_td, self.tensor_keys.value, owner, "value").squeeze(
                -1
            )
        loss = self._step_value_loss(prediction, target)
        if self.slow_critic_regularization:
            slow = self._step_value_loss(prediction, self._slow_target(fake_data))
            loss = loss + self.slow_critic_regularization * slow
        else:
            slow = torch.zeros_like(loss)
        out = TensorDict(
            loss_value=self._reduce_loss(weight * loss),
            value_slow_loss=self._reduce_loss(weight * slow).detach(),
        )
        return out, fake_data.data

    def replay_value_loss(
        self, tensordict: TensorDictBase, *, horizon: float = 333.0, lmbda: float = 0.95
    ) -> TensorDictBase:
        """The critic loss on replay sequences ``[B, T]``, bootstrapped on imagined returns.

        The target of replay state ``k`` is the lambda return of the next steps' rewards
        (discount ``1 - 1 / horizon``) bootstrapped on ``bootstrap`` (each state's first
        imagined return); the last step and the steps ending an episode are dropped. The
        gradient reaches the input features (a representation loss for the world model).

        Returns:
            ``TensorDict(loss_replay_value)``, unweighted, reduced with ``reduction``.
        """
        owner = type(self).__name__
        keys = self.tensor_keys
        reward = _required(tensordict, unravel_key(("next", keys.reward)), owner, "reward")
        done = _required(tensordict, unravel_key(("next", keys.done)), owner, "done")
        terminated = _required(
            tensordict, unravel_key(("next", keys.terminated)), owner, "terminated"
        )
        bootstrap = _required(tensordict, keys.bootstrap, owner, "bootstrap")
        target = _replay_value_target(reward, done, terminated, bootstrap, horizon, lmbda)
        keep = ~done.reshape(*tensordict.batch_size)[..., :-1].bool()
        prediction_td = self._predict(tensordict)
        if self.value_loss == "two_hot":
            prediction = self._logits(prediction_td)[..., :-1, :]
        else:
            prediction = prediction_td.get(keys.value)[..., :-1, 0]
        loss = self._step_value_loss(prediction, target)
        if self.slow_critic_regularization:
            slow_target = self._slow_target(tensordict)[..., :-1]
            loss = loss + self.slow_critic_regularization * self._step_value_loss(
                prediction, slow_target
            )
        return TensorDict(loss_replay_value=self._reduce_loss(keep.to(loss.dtype) * loss))


class DreamerV3Loss(_DreamerV3LossBase):
    """The world-model, actor, critic and replay-critic losses of DreamerV3 on one batch.

    The world model filters the replay batch; its posterior latents (detached) start the
    imagination; the critic trains on the imagined returns and, weighted by
    ``replay_value_loss_weight``, on the replay sequence bootstrapped with them (this term
    keeps its gradient to the world model, so the model loss must not detach its output).
    Sum the ``loss_*`` entries to train.

    Args:
        model_loss (DreamerV3ModelLoss): with ``detach_output=False`` when the replay
            weight is positive.
        actor_loss (DreamerV3ActorLoss): shares the world model's dynamics.
        value_loss (DreamerV3ValueLoss): the critic.

    Keyword Args:
        replay_value_loss_weight (float, optional): Defaults to ``0.3``.
        continuation_horizon (float, optional): replay discount horizon. Defaults to ``333.0``.
        lmbda (float, optional): replay lambda. Defaults to ``0.95``.

    Returns (from ``forward``):
        the scalar losses and metrics of the three losses, ``loss_replay_value``,
        ``replay_value`` and the detached posterior latents under ``replay_context``.

    Raises:
        ValueError: for a negative replay weight, or a positive one with a model loss that
            detaches its output.
    """

    @dataclass
    class _AcceptedKeys:
        """Configurable keys (``set_keys``).

        Attributes:
            state, belief: the posterior latents under ``"next"``.
            is_init: the episode-start flag. replay_context: where the latents are returned.
        """

        state: NestedKey = "state"
        belief: NestedKey = "belief"
        is_init: NestedKey = "is_init"
        replay_context: NestedKey = "replay_context"

    def __init__(
        self,
        model_loss: DreamerV3ModelLoss,
        actor_loss: DreamerV3ActorLoss,
        value_loss: DreamerV3ValueLoss,
        *,
        replay_value_loss_weight: float = 0.3,
        continuation_horizon: float = 333.0,
        lmbda: float = 0.95,
    ) -> None:
        super().__init__()
        if replay_value_loss_weight < 0:
            raise ValueError(
                f"replay_value_loss_weight must be non-negative, got {replay_value_loss_weight}."
            )
        if replay_value_loss_weight and model_loss.detach_output:
            raise ValueError("Replay-value learning requires model_loss.detach_output=False.")
        self.model_loss = model_loss
        self.actor_loss = actor_loss
        self.value_loss = value_loss
        self.replay_value_loss_weight = replay_value_loss_weight
        self.continuation_horizon = continuation_horizon
        self.lmbda = lmbda

    @property
    def in_keys(self) -> list[NestedKey]:
        """World-model inputs, the reset flag and the replay targets."""
        model_keys = self.model_loss.tensor_keys
        pixels = model_keys.pixels if isinstance(model_keys.pixels, list) else [model_keys.pixels]
        value_keys = self.value_loss.tensor_keys
        keys = [
            *getattr(self.model_loss.world_model, "in_keys", []),
            self.tensor_keys.is_init,
            *(("next", key) for key in pixels),
            ("next", model_keys.reward),
            ("next", value_keys.reward),
            ("next", value_keys.done),
            ("next", value_keys.terminated),
        ]
        return list(dict.fromkeys(unravel_key(key) for key in keys))

    @in_keys.setter
    def in_keys(self, value) -> None:
        # derived from the three losses; LossModule's initial empty list is ignored
        pass

    def forward(self, sample: TensorDictBase) -> TensorDictBase:
        keys = self.tensor_keys
        model_losses, posterior = self.model_loss(sample)
        owner = type(self).__name__
        state = _required(posterior, ("next", keys.state), owner, "state")
        belief = _required(posterior, ("next", keys.belief), owner, "belief")
        actor_keys = self.actor_loss.tensor_keys
        actor_input = TensorDict(
            {
                actor_keys.state: state.detach().reshape(-1, state.shape[-1]),
                actor_keys.belief: belief.detach().reshape(-1, belief.shape[-1]),
            },
            [sample.numel()],
        )
        actor_losses, imagined = self.actor_loss(actor_input)
        value_losses, _ = self.value_loss(imagined.detach())
        if self.replay_value_loss_weight:
            value_keys = self.value_loss.tensor_keys
            replay = posterior.get("next").select(*self.value_loss.value_model.in_keys)
            replay.set(
                value_keys.bootstrap,
                imagined.get("lambda_target")[..., 0, 0].reshape(sample.batch_size),
            )
            replay.set(
                "next",
                sample.get("next").select(
                    value_keys.reward, value_keys.done, value_keys.terminated
                ),
            )
            replay_value = self.value_loss.replay_value_loss(
                replay, horizon=self.continuation_horizon, lmbda=self.lmbda
            )["loss_replay_value"]
        else:
            replay_value = state.new_zeros(())
        result = model_losses.apply(torch.squeeze)
        result.update(actor_losses).update(value_losses)
        result.set("loss_replay_value", self.replay_value_loss_weight * replay_value)
        result.set("replay_value", replay_value.detach())
        result.set(
            keys.replay_context,
            posterior.get("next").select(keys.state, keys.belief).detach(),
        )
        return result
