"""Dreamer (v1) losses: world model, actor (through imagination) and value.

Names, arguments, defaults and outputs follow ``torchrl.objectives.dreamer`` (TorchRL
0.14.1); each ``forward`` returns ``(loss_td, data)``. Reference: https://arxiv.org/abs/1912.01603
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey
from torch import nn

from rl.core import ExplorationType, set_exploration_type

from ._hold_out import hold_out_net
from ._loss import _TD_ESTIMATORS, LossModule, _reinit
from ._reduction import distance_loss
from .value import ValueEstimators
from .value.functional import (
    td0_return_estimate,
    vec_td1_return_estimate,
    vec_td_lambda_return_estimate,
)

__all__ = ["DreamerActorLoss", "DreamerModelLoss", "DreamerValueLoss"]

_GAMMA_LMBDA_ERROR = (
    "Setting gamma/lmbda in the loss constructor is not supported: build the value "
    "estimator with loss.make_value_estimator(value_type, gamma=..., lmbda=...)"
)


class _DreamerLossBase(LossModule):
    """The Dreamer losses hold their networks as plain submodules (no functional copies)."""

    def reset_parameters_recursive(self) -> None:
        """Re-initialise every layer of the loss's networks (``reset_parameters``)."""
        for module in self.children():
            _reinit(module)
        for module in self.__dict__.values():
            if isinstance(module, nn.Module):
                _reinit(module)


def _discount_weights(gamma, like: torch.Tensor) -> torch.Tensor:
    """``[1, gamma, gamma**2, ...]`` along the time dim (-2) of ``like``."""
    discount = torch.as_tensor(gamma, dtype=like.dtype, device=like.device).expand(like.shape)
    discount = discount.clone()
    discount[..., 0, :] = 1
    return discount.cumprod(dim=-2)


class DreamerModelLoss(_DreamerLossBase):
    """Dreamer's world-model loss: KL(posterior || prior), pixel reconstruction and reward.

    The world model is run on the sampled sequence (the ``("next", "reward")`` entry is
    first renamed ``("next", "true_reward")``, so the model's prediction can take its
    place). With Gaussian ``prior`` and ``posterior`` latents,

    ``kl = log(prior_std / post_std) + (post_std**2 + (prior_mean - post_mean)**2)
    / (2 prior_std**2) - 1/2``, summed over the state dimension (unless
    ``global_average``), clamped below at ``free_nats`` then averaged (or averaged then
    clamped with ``delayed_clamp``). The reconstruction loss is summed over the
    observation's dims (``C, H, W`` for pixels, the features of a vector observation)
    unless ``global_average``, and averaged; the reward loss is averaged.

    Args:
        world_model (TensorDictModule): a sequence whose first element ends with the pixel
            decoder and whose second element is the reward model.
        lambda_kl (float, optional): weight of the KL term. Defaults to ``1.0``.
        lambda_reco (float, optional): weight of the reconstruction term. Defaults to ``1.0``.
        lambda_reward (float, optional): weight of the reward term. Defaults to ``1.0``.
        reco_loss (str, optional): ``"l2"``, ``"l1"`` or ``"smooth_l1"``. Defaults to ``"l2"``.
        reward_loss (str, optional): as ``reco_loss``. Defaults to ``"l2"``.
        free_nats (int, optional): lower clamp of the KL term. Defaults to ``3``.
        delayed_clamp (bool, optional): clamp after averaging. Defaults to ``False``.
        global_average (bool, optional): average over every dimension instead of summing
            over the feature dimensions first. Defaults to ``False``.

    Returns (from ``forward``):
        ``(TensorDict(loss_model_kl, loss_model_reco, loss_model_reward), data)``, each
        loss of shape ``[1]``; ``data`` is the world model's output.
    """

    @dataclass
    class _AcceptedKeys:
        """Configurable keys (``set_keys``); all read under ``"next"``.

        Attributes:
            reward: the predicted reward. Defaults to ``"reward"``.
            true_reward: where the sampled reward is moved. Defaults to ``"true_reward"``.
            prior_mean, prior_std, posterior_mean, posterior_std: the latent Gaussians.
            pixels: the observed pixels. Defaults to ``"pixels"``.
            reco_pixels: the reconstruction. Defaults to ``"reco_pixels"``.
        """

        reward: NestedKey = "reward"
        true_reward: NestedKey = "true_reward"
        prior_mean: NestedKey = "prior_mean"
        prior_std: NestedKey = "prior_std"
        posterior_mean: NestedKey = "posterior_mean"
        posterior_std: NestedKey = "posterior_std"
        pixels: NestedKey = "pixels"
        reco_pixels: NestedKey = "reco_pixels"

    def __init__(
        self,
        world_model: nn.Module,
        *,
        lambda_kl: float = 1.0,
        lambda_reco: float = 1.0,
        lambda_reward: float = 1.0,
        reco_loss: str | None = None,
        reward_loss: str | None = None,
        free_nats: int = 3,
        delayed_clamp: bool = False,
        global_average: bool = False,
    ) -> None:
        super().__init__()
        self.world_model = world_model
        self.reco_loss = reco_loss if reco_loss is not None else "l2"
        self.reward_loss = reward_loss if reward_loss is not None else "l2"
        self.lambda_kl = lambda_kl
        self.lambda_reco = lambda_reco
        self.lambda_reward = lambda_reward
        self.free_nats = free_nats
        self.delayed_clamp = delayed_clamp
        self.global_average = global_average
        try:
            self.__dict__["decoder"] = world_model[0][-1]
            self.__dict__["reward_model"] = world_model[1]
        except (TypeError, IndexError, KeyError):
            self.__dict__["decoder"] = None
            self.__dict__["reward_model"] = None

    def _forward_value_estimator_keys(self, **kwargs) -> None:
        pass

    def _next(self, tensordict: TensorDictBase, name: str) -> torch.Tensor:
        key = ("next", *((k,) if isinstance(k := getattr(self.tensor_keys, name), str) else k))
        value = tensordict.get(key, None)
        if value is None:
            raise KeyError(
                f"{type(self).__name__}: the world model output has no {key!r} entry "
                f"(tensor_keys.{name}); 'next' keys: "
                f"{list(tensordict.get('next').keys(True, True)) if 'next' in tensordict.keys() else []}"
            )
        return value

    def forward(self, tensordict: TensorDictBase):
        tensordict = tensordict.copy()
        self._next(tensordict, "reward")
        tensordict.rename_key_(
            ("next", self.tensor_keys.reward), ("next", self.tensor_keys.true_reward)
        )
        tensordict = self.world_model(tensordict)

        kl_loss = self.kl_loss(
            self._next(tensordict, "prior_mean"),
            self._next(tensordict, "prior_std"),
            self._next(tensordict, "posterior_mean"),
            self._next(tensordict, "posterior_std"),
        ).unsqueeze(-1)

        pixels = self._next(tensordict, "pixels").contiguous()
        reco_pixels = self._next(tensordict, "reco_pixels").contiguous()
        reco_loss = distance_loss(pixels, reco_pixels, self.reco_loss)
        if not self.global_average:
            # summed over the observation's own dims (C, H, W for pixels, the features of
            # a vector observation), never over the batch and time dims
            reco_loss = reco_loss.flatten(tensordict.batch_dims).sum(-1)
        reco_loss = reco_loss.mean().unsqueeze(-1)

        true_reward = self._next(tensordict, "true_reward")
        pred_reward = self._next(tensordict, "reward")
        reward_loss = distance_loss(true_reward, pred_reward, self.reward_loss)
        if not self.global_average:
            reward_loss = reward_loss.squeeze(-1)
        reward_loss = reward_loss.mean().unsqueeze(-1)

        td_out = TensorDict(
            loss_model_kl=self.lambda_kl * kl_loss,
            loss_model_reco=self.lambda_reco * reco_loss,
            loss_model_reward=self.lambda_reward * reward_loss,
        )
        return td_out, tensordict.data

    @staticmethod
    def normal_log_probability(x, mean, std):
        """Gaussian log-density of ``x`` up to the constant ``-log(2 pi) / 2``."""
        return -0.5 * ((x.to(mean.dtype) - mean) / std).pow(2) - std.log()

    def kl_loss(self, prior_mean, prior_std, posterior_mean, posterior_std) -> torch.Tensor:
        """KL(posterior || prior) of diagonal Gaussians, with the free-nats clamp; a scalar."""
        if prior_mean.shape != posterior_mean.shape:
            raise ValueError(
                f"{type(self).__name__}: prior_mean {tuple(prior_mean.shape)} and "
                f"posterior_mean {tuple(posterior_mean.shape)} differ: the prior and posterior "
                "must have the same latent (state) size"
            )
        kl = (
            torch.log(prior_std / posterior_std)
            + (posterior_std**2 + (prior_mean - posterior_mean) ** 2) / (2 * prior_std**2)
            - 0.5
        )
        if not self.global_average:
            kl = kl.sum(-1)
        if self.delayed_clamp:
            return kl.mean().clamp_min(self.free_nats)
        return kl.clamp_min(self.free_nats).mean()


class DreamerActorLoss(_DreamerLossBase):
    """Dreamer's actor loss: minus the (discounted) lambda return of imagined rollouts.

    From the posterior ``state`` and ``belief`` of the data, the model-based env is rolled
    out ``imagination_horizon`` steps with the actor (random exploration, world model held
    out); the value model (held out) evaluates the next latents, and the lambda return
    ``G[t] = r[t] + gamma * ((1 - lmbda) V(s[t+1]) + lmbda G[t+1])`` (bootstrapped with
    ``V`` at the horizon, no termination) is written under ``"lambda_target"``.
    The loss is ``-(G * [1, gamma, gamma**2, ...]).sum(time, feature).mean()`` with
    ``discount_loss`` (default), else ``-G.sum(time, feature).mean()``.

    Args:
        actor_model (TensorDictModule): the policy on ``state`` and ``belief``.
        value_model (TensorDictModule): writes ``state_value`` from the latents.
        model_based_env (DreamerEnv): the imagination env.
        imagination_horizon (int, optional): imagined steps. Defaults to ``15``.
        discount_loss (bool, optional): discount the return over time. Defaults to ``True``.

    The estimator is TD(lambda) (``gamma=0.99``, ``lmbda=0.95``) unless
    :meth:`make_value_estimator` chooses TD0, TD1 or other hyper-parameters.

    Returns (from ``forward``):
        ``(TensorDict(loss_actor=...), imagined_data)``.
    """

    @dataclass
    class _AcceptedKeys:
        """Configurable keys (``set_keys``).

        Attributes:
            belief: the deterministic latent. Defaults to ``"belief"``.
            reward: the imagined reward, under ``"next"``. Defaults to ``"reward"``.
            value: the value model's output. Defaults to ``"state_value"``.
            done: Defaults to ``"done"``.
            terminated: Defaults to ``"terminated"``.
        """

        belief: NestedKey = "belief"
        reward: NestedKey = "reward"
        value: NestedKey = "state_value"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"

    default_value_estimator = "TDLambda"
    SUPPORTED_VALUE_ESTIMATORS = _TD_ESTIMATORS

    def __init__(
        self,
        actor_model: nn.Module,
        value_model: nn.Module,
        model_based_env,
        *,
        imagination_horizon: int = 15,
        discount_loss: bool = True,
        gamma: float | None = None,
        lmbda: float | None = None,
    ) -> None:
        if gamma is not None or lmbda is not None:
            raise TypeError(_GAMMA_LMBDA_ERROR)
        super().__init__()
        self.actor_model = actor_model
        self.__dict__["value_model"] = value_model
        self.model_based_env = model_based_env
        self.imagination_horizon = imagination_horizon
        self.discount_loss = discount_loss

    def _forward_value_estimator_keys(self, **kwargs) -> None:
        if self._value_estimator is not None and hasattr(self._value_estimator, "set_keys"):
            self._value_estimator.set_keys(value=self.tensor_keys.value)

    def make_value_estimator(self, value_type=None, **hyperparams):
        """As :meth:`LossModule.make_value_estimator`; GAE, MAGAE and VTrace (which need a
        value network on the data) raise ``NotImplementedError``, as in TorchRL."""
        if isinstance(value_type, ValueEstimators) and value_type not in _TD_ESTIMATORS:
            raise NotImplementedError(
                f"{type(self).__name__} does not support the {value_type.name} value estimator; "
                f"supported: {[m.name for m in _TD_ESTIMATORS]}"
            )
        return super().make_value_estimator(value_type, **hyperparams)

    def forward(self, tensordict: TensorDictBase):
        for key in ("state", self.tensor_keys.belief):
            if key not in tensordict.keys(True):
                raise KeyError(
                    f"{type(self).__name__} needs the latent {key!r} in its input "
                    f"(keys: {list(tensordict.keys(True, True))})"
                )
        tensordict = tensordict.select("state", self.tensor_keys.belief).data
        with (
            hold_out_net(self.model_based_env),
            set_exploration_type(ExplorationType.RANDOM),
        ):
            start = self.model_based_env.reset(tensordict.copy())
            fake_data = self.model_based_env.rollout(
                max_steps=self.imagination_horizon,
                policy=self.actor_model,
                auto_reset=False,
                tensordict=start,
            )
            next_td = fake_data.exclude("next").update(fake_data.get("next"))
            with hold_out_net(self.value_model):
                next_td = self.value_model(next_td)

        reward = fake_data.get(("next", self.tensor_keys.reward))
        next_value = next_td.get(self.tensor_keys.value)
        lambda_target = self.lambda_target(reward, next_value)
        fake_data.set("lambda_target", lambda_target)

        if self.discount_loss:
            discount = _discount_weights(self.value_estimator.gamma, lambda_target)
            actor_loss = -(lambda_target * discount).sum((-2, -1)).mean()
        else:
            actor_loss = -lambda_target.sum((-2, -1)).mean()
        return TensorDict({"loss_actor": actor_loss}, []), fake_data.data

    def lambda_target(self, reward: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """The return of ``reward`` and next ``value`` (``[*B, T, 1]``), no episode end.

        Uses the loss's estimator type and its ``gamma`` (and ``lmbda``); time is dim -2.
        """
        if reward.shape != value.shape:
            raise ValueError(
                f"{type(self).__name__}.lambda_target: reward {tuple(reward.shape)} and "
                f"value {tuple(value.shape)} must have the same shape [*B, T, 1]"
            )
        estimator = self.value_estimator
        done = torch.zeros(reward.shape, dtype=torch.bool, device=reward.device)
        gamma = estimator.gamma
        name = self.value_type.name if hasattr(self.value_type, "name") else str(self.value_type)
        if name == "TD0" or type(estimator).__name__ == "TD0Estimator":
            return td0_return_estimate(gamma, value, reward, done)
        if name == "TD1" or type(estimator).__name__ == "TD1Estimator":
            return vec_td1_return_estimate(gamma, value, reward, done, done)
        return vec_td_lambda_return_estimate(gamma, estimator.lmbda, value, reward, done, done)


class DreamerValueLoss(_DreamerLossBase):
    """Dreamer's value loss: the value model regressed on the imagined ``lambda_target``.

    ``loss_value = (discount * distance(V(s), lambda_target)).sum(time, feature).mean()``,
    with ``discount = [1, gamma, gamma**2, ...]`` along time when ``discount_loss``
    (default), else 1.

    Args:
        value_model (TensorDictModule): writes ``state_value``.
        value_loss (str, optional): ``"l2"``, ``"l1"`` or ``"smooth_l1"``. Defaults to ``"l2"``.
        discount_loss (bool, optional): discount over time. Defaults to ``True``.
        gamma (float, optional): the discount. Defaults to ``0.99``.

    Returns (from ``forward(fake_data)``):
        ``(TensorDict(loss_value=...), fake_data)``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.objectives import DreamerValueLoss
        >>> value = TensorDictModule(torch.nn.Linear(3, 1), in_keys=["state"], out_keys=["state_value"])
        >>> _ = value.module.weight.data.zero_(), value.module.bias.data.zero_()
        >>> data = TensorDict(state=torch.ones(2, 4, 3), lambda_target=torch.ones(2, 4, 1), batch_size=[2, 4])
        >>> loss, _ = DreamerValueLoss(value, gamma=0.5)(data)
        >>> loss["loss_value"]  # 1 + 0.5 + 0.25 + 0.125
        tensor(1.8750, grad_fn=<MeanBackward0>)
    """

    @dataclass
    class _AcceptedKeys:
        """Configurable keys (``set_keys``).

        Attributes:
            value: the value model's output. Defaults to ``"state_value"``.
        """

        value: NestedKey = "state_value"

    def __init__(
        self,
        value_model: nn.Module,
        value_loss: str | None = None,
        discount_loss: bool = True,
        gamma: float = 0.99,
    ) -> None:
        super().__init__()
        self.value_model = value_model
        self.value_loss = value_loss if value_loss is not None else "l2"
        self.gamma = gamma
        self.discount_loss = discount_loss

    def _forward_value_estimator_keys(self, **kwargs) -> None:
        pass

    def forward(self, fake_data: TensorDictBase):
        lambda_target = fake_data.get("lambda_target", None)
        if lambda_target is None:
            raise KeyError(
                f"{type(self).__name__} needs 'lambda_target' (written by DreamerActorLoss) "
                f"in its input (keys: {list(fake_data.keys(True, True))})"
            )
        selected = fake_data.select(*self.value_model.in_keys, strict=False)
        self.value_model(selected)
        value = selected.get(self.tensor_keys.value)
        distance = distance_loss(value, lambda_target, self.value_loss)
        if self.discount_loss:
            distance = _discount_weights(self.gamma, lambda_target) * distance
        value_loss = distance.sum((-1, -2)).mean()
        return TensorDict({"loss_value": value_loss}), fake_data
