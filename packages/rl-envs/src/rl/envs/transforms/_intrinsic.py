"""Intrinsic rewards: ``RNDTransform``, the random-network-distillation exploration bonus."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase
from torch import nn

from rl.core import Unbounded

from ._base import Transform, _missing_key_error
from ._norm import RunningMeanStd
from ._spec_utils import NestedKey, tget, tset

__all__ = ["RNDTransform"]


class RNDTransform(Transform):
    """Writes the random-network-distillation bonus of each next observation as a reward.

    Burda et al. 2018, "Exploration by Random Network Distillation",
    https://arxiv.org/abs/1810.12894. A fixed, randomly initialised *target* network maps
    an observation to an embedding; a *predictor* network is trained (by
    :class:`~rl.objectives.RNDLoss`, given the same two networks) to reproduce it. Its
    error is small on observations seen often and large on novel ones, so it serves as an
    exploration bonus. At every step the transform

    1. reads the next observation ``in_keys[0]`` ``[*B, F]`` and, with ``normalize_obs``,
       standardises it by running statistics (:class:`RunningMeanStd` over ``F``) and clips
       it to ``[-obs_clip, obs_clip]``;
    2. writes ``mean((predictor(x) - target(x)) ** 2, -1)`` ``[*B, 1]`` under
       ``out_keys[0]`` (computed without gradients);
    3. with ``normalize_reward``, divides that reward by the running standard deviation of
       the rewards seen so far (no mean subtracted) and clips it to
       ``[-reward_clip, reward_clip]``.

    The running statistics are created on the first step (the observation size need not
    be given), are in the ``state_dict``, and are updated only while the transform is in
    training mode (``transform.train()``, the default; ``eval()`` freezes them). Each
    step's batch is folded in before it is normalised. Nothing is written at reset.
    ``transform(td)`` applies the same map to a batch of data (root ``in_keys[0]`` ->
    ``out_keys[0]``). The output is declared in the env's reward spec, beside ``"reward"``
    (so ``env.reward_keys`` lists both, as in TorchRL).

    Args:
        target_network: the fixed random network ``[*B, F] -> [*B, E]``; its parameters
            are frozen (``requires_grad=False``) here.
        predictor_network: the trained network, same input and output shapes.
        in_keys: the observation read from the step's output (default
            ``["observation"]``); exactly one key.
        out_keys: where the bonus is written (default ``["intrinsic_reward"]``); one key.
        normalize_obs: standardise and clip the observation before the networks.
        normalize_reward: divide the bonus by its running standard deviation and clip it.
        obs_clip: bound of the standardised observation (> 0).
        reward_clip: bound of the normalised bonus (> 0).

    Raises:
        TypeError: a network is not an ``nn.Module``.
        ValueError: more or fewer than one in_key / out_key, or a clip that is not
            positive.
        KeyError: the step's output lacks the observation.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from rl.envs import GymEnv, TransformedEnv
        >>> from rl.envs.transforms import RNDTransform
        >>> target = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 32))
        >>> predictor = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 32))
        >>> env = TransformedEnv(GymEnv("MountainCar-v0"), RNDTransform(target, predictor))
        >>> rollout = env.rollout(3)
        >>> rollout["next", "intrinsic_reward"].shape
        torch.Size([3, 1])
        >>> sorted(env.reward_keys)
        ['intrinsic_reward', 'reward']
    """

    def __init__(
        self,
        target_network: nn.Module,
        predictor_network: nn.Module,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        normalize_obs: bool = True,
        normalize_reward: bool = True,
        obs_clip: float = 5.0,
        reward_clip: float = 5.0,
    ):
        for name, network in (
            ("target_network", target_network),
            ("predictor_network", predictor_network),
        ):
            if not isinstance(network, nn.Module):
                raise TypeError(
                    f"RNDTransform {name} must be an nn.Module, got {type(network).__name__}"
                )
        if in_keys is None:
            in_keys = ["observation"]
        if out_keys is None:
            out_keys = ["intrinsic_reward"]
        super().__init__(in_keys=in_keys, out_keys=out_keys)
        if len(self.in_keys) != 1 or len(self.out_keys) != 1:
            raise ValueError(
                "RNDTransform reads one observation and writes one reward, got "
                f"in_keys={self.in_keys} and out_keys={self.out_keys}"
            )
        for name, value in (("obs_clip", obs_clip), ("reward_clip", reward_clip)):
            if not value > 0:
                raise ValueError(f"RNDTransform {name} must be positive, got {value!r}")
        self.target_network = target_network
        self.predictor_network = predictor_network
        self.target_network.requires_grad_(False)
        self.normalize_obs = normalize_obs
        self.normalize_reward = normalize_reward
        self.obs_clip = obs_clip
        self.reward_clip = reward_clip
        # created on the first step, when the observation's size is known
        self._obs_rms: RunningMeanStd | None = None
        self._reward_rms: RunningMeanStd | None = None

    @property
    def obs_rms(self) -> RunningMeanStd | None:
        """The running observation statistics (``None`` before the first step, or without
        ``normalize_obs``); give them to ``RNDLoss(obs_rms=...)`` so that the predictor is
        trained on the inputs it sees here."""
        return self._obs_rms

    @property
    def reward_rms(self) -> RunningMeanStd | None:
        """The running statistics of the raw bonus (``None`` before the first step, or
        without ``normalize_reward``)."""
        return self._reward_rms

    def _maybe_init_rms(self, obs: torch.Tensor) -> None:
        if self.normalize_obs and self._obs_rms is None:
            self._obs_rms = RunningMeanStd(shape=obs.shape[-1:]).to(obs.device)
        if self.normalize_reward and self._reward_rms is None:
            self._reward_rms = RunningMeanStd(shape=()).to(obs.device)

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ) -> None:
        # statistics saved after the first step are loaded into a transform that has not
        # stepped yet: build them with the saved shapes first
        for flag, name in (
            (self.normalize_obs, "_obs_rms"),
            (self.normalize_reward, "_reward_rms"),
        ):
            mean = state_dict.get(f"{prefix}{name}.mean")
            if flag and getattr(self, name) is None and mean is not None:
                setattr(self, name, RunningMeanStd(shape=tuple(mean.shape)).to(mean.device))
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

    @torch.no_grad()
    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        in_key, out_key = self._io_pairs[0]
        obs = tget(next_tensordict, in_key)
        if obs is None:
            raise _missing_key_error(self, in_key, next_tensordict)
        obs = obs.float()
        self._maybe_init_rms(obs)
        if self._obs_rms is not None:
            if self.training:
                self._obs_rms.update(obs)
            obs = self._obs_rms.normalize(obs).clamp(-self.obs_clip, self.obs_clip)
        error = self.predictor_network(obs) - self.target_network(obs)
        bonus = error.pow(2).mean(-1, keepdim=True)
        if self._reward_rms is not None:
            if self.training:
                self._reward_rms.update(bonus)
            std = self._reward_rms.var.clamp_min(1e-8).sqrt()
            bonus = (bonus / std).clamp(-self.reward_clip, self.reward_clip)
        tset(next_tensordict, out_key, bonus)
        return next_tensordict

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        return self._call(next_tensordict)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return tensordict_reset

    def transform_observation_spec(self, observation_spec):
        return observation_spec

    def transform_reward_spec(self, reward_spec):
        # the bonus takes the shape and device of the env's reward (one per env: [*B, 1])
        shape, device = (*reward_spec.shape, 1), reward_spec.device
        parent = self.parent
        if parent is not None:
            present = set(reward_spec.keys(include_nested=True, leaves_only=True))
            for key in parent.reward_keys:
                if key in present:
                    shape, device = reward_spec[key].shape, reward_spec[key].device
                    break
        reward_spec[self.out_keys[0]] = Unbounded(shape=shape, device=device, dtype=torch.float32)
        return reward_spec

    def _repr_args(self) -> str:
        return (
            f"{super()._repr_args()}, normalize_obs={self.normalize_obs}, "
            f"normalize_reward={self.normalize_reward}"
        )
