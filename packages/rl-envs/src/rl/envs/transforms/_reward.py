"""Reward transforms: episode sums, scaling, clipping, sign / binary / linearised / success
rewards, and return-to-go (``TargetReturn`` in an env, ``Reward2GoTransform`` on stored data).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from tensordict import TensorDictBase

from rl.core import Binary, Bounded, Composite, Unbounded

from ._base import Transform, _missing_key_error
from ._spec_utils import NestedKey, normalize_key, normalize_keys, tget, tset
from ._utils import (
    episode_cumsum,
    episode_starts,
    first_episode,
    masked_reset,
    reset_entry_mask,
    reset_mask,
)

__all__ = [
    "BinarizeReward",
    "LineariseRewards",
    "Reward2GoTransform",
    "RewardClipping",
    "RewardScaling",
    "RewardSum",
    "SignTransform",
    "SuccessReward",
    "TargetReturn",
]


def _prefixed(key: NestedKey, prefix: str) -> NestedKey:
    if isinstance(key, str):
        return prefix + key
    return (*key[:-1], prefix + key[-1])


def _where_reset(fresh: torch.Tensor, previous, reset: torch.Tensor | None) -> torch.Tensor:
    """``fresh`` where the reset entry is True, right-expanded to ``fresh`` (TorchRL's rule)."""
    if reset is None or previous is None or previous.shape != fresh.shape:
        return fresh
    while reset.ndim > fresh.ndim:
        reset = reset.any(-1)
    reset = reset.reshape(*reset.shape, *((1,) * (fresh.ndim - reset.ndim)))
    return torch.where(reset, fresh, previous)


def _reward_shape_from_spec(composite, key):
    if key in composite.keys(True, True):
        spec = composite[key]
        return spec.shape, spec.dtype
    return None


class RewardSum(Transform):
    """Accumulates the reward of the current episode in ``"episode_reward"``.

    The sum is reset to 0 at every (partial) reset. Called on stored data
    (``transform(td)``), it writes the cumulative sum of each ``in_key`` along the time
    dimension, restarting after each ``("next", "done")``.

    Args:
        in_keys: reward keys. Default: the parent env's ``reward_keys`` (every reward
            entry); ``["reward"]`` outside an env.
        out_keys: sums, one per in_key (default ``"episode_<name>"`` beside each in_key).
        reset_keys: one reset entry per in_key (e.g. ``("agents", "_reset")`` for a
            nested multi-agent reward); the entry is right-expanded to the sum, so a
            per-agent reset clears only that agent's sum. Default: the env's root
            ``"_reset"``. Needed when ``_reset`` is called outside an env.
        reward_spec: declare the sums in the env's reward spec instead of its
            observation spec.

    Raises:
        ValueError: ``in_keys`` and ``out_keys`` differ in length; at reset,
            ``reset_keys`` and ``in_keys`` differ in length; on data, the tensordict has
            no time dimension.
        TypeError: ``_reset`` is called outside an env with no ``reset_keys``.

    Note:
        On data the time dimension is the one named ``"time"`` or, where no dimension is
        named so, the last batch dimension (rl's rollouts are ``[*B, T]``); the in_keys
        are read as given (``("next", "reward")`` for a rollout). TorchRL 0.14.1 sums
        over the reward's last dimension instead of time, and across episodes; here
        each episode restarts from 0.

    Examples:
        >>> from rl.envs import PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), RewardSum())
        >>> r = env.rollout(4)
        >>> bool((r["next", "episode_reward"][-1] - r["next", "reward"].sum()).abs() < 1e-4)
        True
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        reset_keys: Sequence[NestedKey] | None = None,
        *,
        reward_spec: bool = False,
    ):
        given_in = None if in_keys is None else normalize_keys(in_keys)
        given_out = None if out_keys is None else normalize_keys(out_keys)
        if given_in is not None and given_out is not None and len(given_in) != len(given_out):
            raise ValueError(
                "RewardSum expects the same number of input and output keys, got "
                f"in_keys={given_in} and out_keys={given_out}"
            )
        in_keys = ["reward"] if given_in is None else given_in
        if given_out is None:
            out_keys = [_prefixed(k, "episode_") for k in in_keys]
        super().__init__(in_keys, out_keys)
        self.__dict__["_given_keys"] = (given_in, given_out)
        self._reset_keys = None if reset_keys is None else normalize_keys(reset_keys)
        self.reward_spec = bool(reward_spec)
        self.__dict__["_specs"] = {}
        self.__dict__["_last"] = {}

    def _default_keys_from(self, reward_keys) -> None:
        """In an env, in_keys given as None are the env's reward keys (TorchRL's rule)."""
        given_in, given_out = self.__dict__["_given_keys"]
        if given_in is not None or not reward_keys:
            return
        in_keys = list(reward_keys)
        out_keys = given_out
        if out_keys is None or len(out_keys) != len(in_keys):
            out_keys = [_prefixed(k, "episode_") for k in in_keys]
        d = self.__dict__
        # set without empty_cache(): this runs while the env computes its specs
        d["_in_keys"], d["_out_keys"] = in_keys, out_keys
        d["_io_pairs"] = list(zip(in_keys, out_keys))

    @property
    def reset_keys(self) -> list[NestedKey]:
        """The reset entries, one per in_key: those given, else the env's root ``_reset``."""
        if self._reset_keys is not None:
            return list(self._reset_keys)
        if self.parent is None:
            raise TypeError(
                "reset_keys not provided but parent env not found: give RewardSum its "
                "reset_keys when it is used outside an environment"
            )
        return ["_reset"] * len(self.in_keys)

    @reset_keys.setter
    def reset_keys(self, value) -> None:
        self._reset_keys = None if value is None else normalize_keys(value)

    def _in_env(self) -> bool:
        from ._env import TransformedEnv

        return isinstance(self.container, TransformedEnv)

    def _reset(self, tensordict, tensordict_reset):
        reset_keys = self._reset_keys
        if reset_keys is None:
            if not self._in_env():
                raise TypeError(
                    "reset_keys not provided but parent env not found: give RewardSum "
                    "its reset_keys when it is used outside an environment"
                )
            reset_keys = [None] * len(self.in_keys)
        elif len(reset_keys) != len(self.in_keys):
            raise ValueError(
                f"Could not match the env reset_keys {reset_keys} with the in_keys "
                f"{self.in_keys}: give one reset key per in_key"
            )
        bs = tensordict_reset.batch_size
        for (_, out_key), reset_key in zip(self._io_pairs, reset_keys):
            prev = tensordict.get(out_key, None) if tensordict is not None else None
            if self.reward_spec and out_key in self._last:
                prev = self._last[out_key]
            shape, dtype = self._specs.get(out_key, ((*bs, 1), torch.get_default_dtype()))
            if prev is not None and out_key not in self._specs:
                fresh = torch.zeros_like(prev)  # outside an env: the stored sum's shape
            else:
                fresh = torch.zeros(shape, dtype=dtype, device=tensordict_reset.device)
            if reset_key is None:
                value = masked_reset(fresh, prev, reset_mask(tensordict))
            else:
                reset = None if tensordict is None else tensordict.get(reset_key, None)
                value = _where_reset(fresh, prev, reset)
            tensordict_reset.set(out_key, value)
            if self.reward_spec:
                self._last[out_key] = value
        return tensordict_reset

    def _step(self, tensordict, next_tensordict):
        for in_key, out_key in self._io_pairs:
            reward = tget(next_tensordict, in_key)
            if reward is None:
                if self.missing_tolerance:
                    continue
                raise _missing_key_error(self, in_key, next_tensordict)
            prev = tget(tensordict, out_key)
            if self.reward_spec and out_key in self._last:
                # a reward entry is not carried to the next root by step_mdp: the sum of
                # the previous step is kept here
                prev = self._last[out_key]
            total = reward.clone() if prev is None else prev + reward
            tset(next_tensordict, out_key, total)
            if self.reward_spec:
                self._last[out_key] = total
        return next_tensordict

    def forward(self, tensordict):
        """Per-episode cumulative sums of the in_keys along the time dim of stored data.

        The time dim is the batch dim named ``"time"``, else the last batch dim; an
        episode restarts after each ``("next", "done")``.
        """
        nb = tensordict.batch_dims
        if nb == 0:
            raise ValueError(
                "At least one dimension of the tensordict must be named 'time' in offline "
                "mode (unnamed, the last batch dim is time): RewardSum got a tensordict "
                "with batch_size torch.Size([])"
            )
        names = list(tensordict.names)
        tdim = names.index("time") if "time" in names else nb - 1
        starts = episode_starts(tensordict, time_dim=tdim).movedim(tdim, -1)
        for in_key, out_key in self._io_pairs:
            reward = tensordict.get(in_key, None)
            if reward is None:
                raise _missing_key_error(self, in_key, tensordict)
            total = episode_cumsum(reward.movedim(tdim, nb - 1), starts)
            tensordict.set(out_key, total.movedim(nb - 1, tdim))
        return tensordict

    @property
    def _last(self) -> dict:
        return self.__dict__["_last"]

    def _rollout_safe(self) -> bool:
        return not self.reward_spec

    def _transform_rollout(self, rollout, initial):
        starts = episode_starts(rollout)
        first = first_episode(starts)
        nxt = rollout.get("next")
        for in_key, out_key in self._io_pairs:
            reward = nxt.get(in_key)
            extra = reward.ndim - starts.ndim
            total = episode_cumsum(reward, starts)
            init = initial.get(out_key, None)
            if init is not None:
                m = first.reshape(*first.shape, *((1,) * extra))
                total = total + torch.where(m, init.unsqueeze(starts.ndim - 1), 0)
            nxt.set(out_key, total)
            # the root value is the previous step's sum, 0 after a reset
            root = torch.empty_like(total)
            root.select(starts.ndim - 1, 0).copy_(
                init if init is not None else torch.zeros_like(total.select(starts.ndim - 1, 0))
            )
            m = starts[..., 1:].reshape(*starts.shape[:-1], -1, *((1,) * extra))
            root.narrow(starts.ndim - 1, 1, starts.shape[-1] - 1).copy_(
                torch.where(m, 0, total.narrow(starts.ndim - 1, 0, starts.shape[-1] - 1))
            )
            rollout.set(out_key, root)
        return rollout

    def transform_output_spec(self, output_spec):
        output_spec = output_spec.clone()
        obs = output_spec["full_observation_spec"]
        rew = output_spec["full_reward_spec"]
        self._default_keys_from(list(rew.keys(True, True)))
        for in_key, out_key in self._io_pairs:
            found = _reward_shape_from_spec(rew, in_key)
            if found is None:
                found = _reward_shape_from_spec(obs, in_key)
            if found is None:
                raise KeyError(
                    f"RewardSum in_key {in_key!r} is not in the env's reward spec "
                    f"{sorted(map(str, rew.keys(True, True)))}"
                )
            shape, dtype = found
            self._specs[out_key] = (shape, dtype)
            target = rew if self.reward_spec else obs
            target[out_key] = Unbounded(shape=shape, device=target.device, dtype=dtype)
        return output_spec

    def _repr_args(self) -> str:
        extra = f", reset_keys={self._reset_keys}" if self._reset_keys is not None else ""
        if self.reward_spec:
            extra += ", reward_spec=True"
        return f"in_keys={self.in_keys}, out_keys={self.out_keys}{extra}"


def _check_scale(scale, who: str) -> torch.Tensor:
    scale = torch.as_tensor(scale, dtype=torch.get_default_dtype())
    if bool((scale == 0).any()):
        raise ValueError(f"{who} scale must be non-zero, got scale={scale}")
    return scale


class RewardScaling(Transform):
    """Affine reward map: ``reward * scale + loc`` (``(reward - loc) / scale`` if standard_normal).

    Args:
        loc: the offset.
        scale: the scale, non-zero.
        in_keys: reward keys (default ``["reward"]``).
        out_keys: where to write (default ``in_keys``).
        standard_normal: use ``(reward - loc) / scale``.

    Raises:
        ValueError: ``scale`` contains a zero.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> RewardScaling(loc=1.0, scale=0.5)(TensorDict({"reward": torch.tensor([2.0])}, []))["reward"]
        tensor([2.])
    """

    _elementwise = True

    def __init__(
        self,
        loc: float | torch.Tensor,
        scale: float | torch.Tensor,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        standard_normal: bool = False,
    ):
        super().__init__(["reward"] if in_keys is None else in_keys, out_keys)
        self.register_buffer("scale", _check_scale(scale, "RewardScaling"))
        self.register_buffer("loc", torch.as_tensor(loc, dtype=torch.get_default_dtype()))
        self.standard_normal = standard_normal

    def _apply_transform(self, reward):
        if self.standard_normal:
            return ((reward - self.loc) / self.scale).to(reward.dtype)
        return (reward * self.scale + self.loc).to(reward.dtype)

    def _leaf_spec(self, spec, in_key):
        if isinstance(spec, Bounded):
            a, b = self._apply_transform(spec.low), self._apply_transform(spec.high)
            return Bounded(
                torch.minimum(a, b),
                torch.maximum(a, b),
                shape=spec.shape,
                device=spec.device,
                dtype=spec.dtype,
            )
        return Unbounded(shape=spec.shape, device=spec.device, dtype=spec.dtype)

    def _repr_args(self) -> str:
        return f"loc={self.loc.tolist()}, scale={self.scale.tolist()}, keys={self.in_keys}"


class RewardClipping(Transform):
    """Clips rewards to ``[clamp_min, clamp_max]``.

    Args:
        clamp_min: lower bound (``None``: no lower bound).
        clamp_max: upper bound (``None``: no upper bound).
        in_keys: reward keys (default ``["reward"]``).
        out_keys: where to write (default ``in_keys``).

    Raises:
        ValueError: both bounds are ``None`` or ``clamp_min > clamp_max``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> RewardClipping(-1, 1)(TensorDict({"reward": torch.tensor([3.0])}, []))["reward"]
        tensor([1.])
    """

    _elementwise = True

    def __init__(
        self,
        clamp_min: float | None = None,
        clamp_max: float | None = None,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
    ):
        if clamp_min is None and clamp_max is None:
            raise ValueError("RewardClipping needs clamp_min or clamp_max, got neither")
        if clamp_min is not None and clamp_max is not None and clamp_min > clamp_max:
            raise ValueError(
                f"RewardClipping needs clamp_min <= clamp_max, got clamp_min={clamp_min} "
                f"and clamp_max={clamp_max}"
            )
        super().__init__(["reward"] if in_keys is None else in_keys, out_keys)
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def _apply_transform(self, reward):
        return reward.clamp(self.clamp_min, self.clamp_max)

    def _leaf_spec(self, spec, in_key):
        if self.clamp_min is not None and self.clamp_max is not None:
            return Bounded(
                self.clamp_min,
                self.clamp_max,
                shape=spec.shape,
                device=spec.device,
                dtype=spec.dtype,
            )
        return Unbounded(shape=spec.shape, device=spec.device, dtype=spec.dtype)

    def _repr_args(self) -> str:
        return f"clamp_min={self.clamp_min}, clamp_max={self.clamp_max}, keys={self.in_keys}"


class TargetReturn(Transform):
    """Return-to-go target (Decision Transformer style) in ``"target_return"``.

    Set to ``target_return`` at reset; at each step, ``mode="reduce"`` subtracts the reward,
    ``mode="constant"`` keeps it.

    Args:
        target_return: the initial target.
        mode: ``"reduce"`` or ``"constant"``.
        in_keys: reward keys (default ``["reward"]``).
        out_keys: target keys (default ``["target_return"]``).
        reset_key: the partial-reset entry read at reset (default: the env's
            ``"_reset"``).

    Raises:
        ValueError: unknown ``mode``.

    Examples:
        >>> from rl.envs import PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), TargetReturn(200.0))
        >>> float(env.reset()["target_return"])
        200.0
    """

    def __init__(
        self,
        target_return: float,
        mode: Literal["reduce", "constant"] = "reduce",
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        reset_key: NestedKey | None = None,
    ):
        if mode not in ("reduce", "constant"):
            raise ValueError(f"TargetReturn mode must be 'reduce' or 'constant', got {mode!r}")
        in_keys = normalize_keys(["reward"] if in_keys is None else in_keys)
        if out_keys is None:
            out_keys = (
                ["target_return"]
                if in_keys == ["reward"]
                else [_prefixed(k, "target_") for k in in_keys]
            )
        super().__init__(in_keys, out_keys)
        self.target_return = float(target_return)
        self.mode = mode
        self.reset_key = None if reset_key is None else normalize_key(reset_key)
        self.__dict__["_specs"] = {}

    def _reset(self, tensordict, tensordict_reset):
        mask = reset_entry_mask(tensordict, self.reset_key)
        bs = tensordict_reset.batch_size
        for _, out_key in self._io_pairs:
            shape, dtype = self._specs.get(out_key, ((*bs, 1), torch.get_default_dtype()))
            fresh = torch.full(
                shape, self.target_return, dtype=dtype, device=tensordict_reset.device
            )
            prev = tensordict.get(out_key, None) if tensordict is not None else None
            tensordict_reset.set(out_key, masked_reset(fresh, prev, mask))
        return tensordict_reset

    def _step(self, tensordict, next_tensordict):
        for in_key, out_key in self._io_pairs:
            prev = tensordict.get(out_key, None)
            if prev is None:
                raise _missing_key_error(self, out_key, tensordict)
            if self.mode == "reduce":
                reward = next_tensordict.get(in_key, None)
                if reward is None:
                    raise _missing_key_error(self, in_key, next_tensordict)
                next_tensordict.set(out_key, prev - reward)
            else:
                next_tensordict.set(out_key, prev.clone())
        return next_tensordict

    def forward(self, tensordict):
        """Refused, as in TorchRL: the target counts down only inside an env (from its reset).

        Raises:
            NotImplementedError: always (in a module or a replay buffer).
        """
        raise NotImplementedError(
            f"class {type(self).__name__} cannot be executed without a parent environment."
        )

    def transform_output_spec(self, output_spec):
        output_spec = output_spec.clone()
        obs = output_spec["full_observation_spec"]
        rew = output_spec["full_reward_spec"]
        for in_key, out_key in self._io_pairs:
            found = _reward_shape_from_spec(rew, in_key)
            if found is None:
                raise KeyError(
                    f"TargetReturn in_key {in_key!r} is not in the env's reward spec "
                    f"{sorted(map(str, rew.keys(True, True)))}"
                )
            self._specs[out_key] = found
            obs[out_key] = Unbounded(shape=found[0], device=obs.device, dtype=found[1])
        return output_spec

    def _repr_args(self) -> str:
        return f"target_return={self.target_return}, mode={self.mode!r}"


def reward_to_go(
    reward: torch.Tensor, done: torch.Tensor, gamma: float | torch.Tensor, time_dim: int = -2
) -> torch.Tensor:
    """Discounted sum of the future rewards of each step's episode.

    ``out[t] = reward[t] + gamma * out[t + 1]``, restarting after every ``done[t]``; the
    last step of the data closes an episode too.

    Args:
        reward: ``[*B, T, *F]`` rewards (time at ``time_dim``).
        done: same shape as ``reward``; True on the last step of an episode.
        gamma: the discount.
        time_dim: the time dim (default ``-2``, the ``[*B, T, 1]`` layout).

    Returns:
        ``[*B, T, *F]`` rewards-to-go, in ``reward``'s dtype.

    Raises:
        ValueError: ``reward`` and ``done`` differ in shape.
    """
    if reward.shape != done.shape:
        raise ValueError(
            f"reward and done must share the same shape, got {tuple(reward.shape)} and "
            f"{tuple(done.shape)}"
        )
    r = reward.movedim(time_dim, 0).double()
    d = done.movedim(time_dim, 0).bool()
    gamma = torch.as_tensor(gamma, dtype=torch.float64, device=r.device)
    out = torch.empty_like(r)
    acc = torch.zeros_like(r[0])
    for t in range(r.shape[0] - 1, -1, -1):
        acc = r[t] + gamma * torch.where(d[t], torch.zeros_like(acc), acc)
        out[t] = acc
    return out.movedim(0, time_dim).to(reward.dtype)


class BinarizeReward(Transform):
    """Maps the reward to 1 where it is positive and 0 elsewhere (``int8``).

    Args:
        in_keys: reward keys (default ``["reward"]``).
        out_keys: where to write (default ``in_keys``).

    Raises:
        RuntimeError: the reward's last dim is not a singleton.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"reward": torch.tensor([[0.5], [0.0], [-1.0]])}, [3])
        >>> BinarizeReward()(td)["reward"].squeeze(-1)
        tensor([1, 0, 0], dtype=torch.int8)
    """

    _elementwise = True

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
    ):
        super().__init__(["reward"] if in_keys is None else in_keys, out_keys)

    def _apply_transform(self, reward: torch.Tensor) -> torch.Tensor:
        if not reward.shape or reward.shape[-1] != 1:
            raise RuntimeError(
                f"BinarizeReward needs a reward whose last dim is a singleton, got a reward "
                f"of shape {tuple(reward.shape)}"
            )
        return (reward > 0.0).to(torch.int8)

    def _leaf_spec(self, spec, in_key):
        return Binary(n=1, shape=spec.shape, device=spec.device)


class SignTransform(Transform):
    """Replaces entries by their sign (``-1``, ``0`` or ``1``), forward and inverse.

    Args:
        in_keys: keys read by the forward map (default none).
        out_keys: keys written (default ``in_keys``).
        in_keys_inv: keys written by ``inv`` (default none).
        out_keys_inv: keys read by ``inv`` (default ``in_keys_inv``).

    Examples:
        >>> from rl.envs import PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), SignTransform(in_keys=["observation"]))
        >>> obs = env.rollout(5)["observation"]
        >>> bool(((obs == -1) | (obs == 0) | (obs == 1)).all())
        True
    """

    _elementwise = True

    def __init__(self, in_keys=None, out_keys=None, in_keys_inv=None, out_keys_inv=None):
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)

    def _apply_transform(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.sign()

    def _inv_apply_transform(self, state: torch.Tensor) -> torch.Tensor:
        return state.sign()

    def _leaf_spec(self, spec, in_key):
        return Bounded(-1.0, 1.0, shape=spec.shape, device=spec.device, dtype=spec.dtype)


class LineariseRewards(Transform):
    """Turns a vector (multi-objective) reward into a scalar one: ``sum(weights * reward)``.

    Args:
        in_keys: the vector reward keys.
        out_keys: where to write the ``[..., 1]`` reward (default ``in_keys``).
        weights: one weight per objective (default all ones); a 1-d sequence or tensor.

    Raises:
        ValueError: ``weights`` is not 1-d, or its size differs from the reward's last dim.
        NotImplementedError: the reward spec is discrete.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> t = LineariseRewards(in_keys=["reward"], weights=[1.0, -2.0])
        >>> t(TensorDict({"reward": torch.tensor([3.0, 1.0])}, []))["reward"]
        tensor([1.])
    """

    _elementwise = True

    def __init__(
        self,
        in_keys: Sequence[NestedKey],
        out_keys: Sequence[NestedKey] | None = None,
        *,
        weights: Sequence[float] | torch.Tensor | None = None,
    ) -> None:
        super().__init__(in_keys, out_keys)
        if weights is not None:
            weights = weights if isinstance(weights, torch.Tensor) else torch.tensor(weights)
            if weights.ndim >= 2:
                raise ValueError(
                    f"Expected weights to be a unidimensional tensor: LineariseRewards expects 1-d weights, got weights with {weights.ndim} dims"
                )
            self.register_buffer("weights", weights)
        else:
            self.weights = None

    def _apply_transform(self, reward: torch.Tensor) -> torch.Tensor:
        if self.weights is None:
            return reward.sum(dim=-1, keepdim=True)
        if self.weights.numel() != reward.shape[-1]:
            raise ValueError(
                f"LineariseRewards has {self.weights.numel()} weights but the reward has "
                f"{reward.shape[-1]} objectives (shape {tuple(reward.shape)})"
            )
        return (self.weights * reward).sum(dim=-1, keepdim=True)

    def _leaf_spec(self, spec, in_key):
        if spec.domain != "continuous":
            raise NotImplementedError(
                "Aggregation of rewards that take discrete values is not supported: "
                f"LineariseRewards got the discrete reward {in_key!r} ({spec})"
            )
        *batch, num = spec.shape
        weights = (
            torch.ones(num, device=spec.device, dtype=spec.dtype)
            if self.weights is None
            else self.weights.to(spec.device)
        )
        if weights.numel() != num:
            raise ValueError(
                f"LineariseRewards has {weights.numel()} weights but the reward spec of "
                f"{in_key!r} has {num} objectives"
            )
        shape = torch.Size([*batch, 1])
        if not isinstance(spec, Bounded):
            return Unbounded(shape=shape, device=spec.device, dtype=spec.dtype)
        pos, neg = weights.clamp(min=0), weights.clamp(max=0)
        low = (pos * spec.low).sum(-1, keepdim=True) + (neg * spec.high).sum(-1, keepdim=True)
        high = (pos * spec.high).sum(-1, keepdim=True) + (neg * spec.low).sum(-1, keepdim=True)
        return Bounded(low, high, shape=shape, device=spec.device, dtype=spec.dtype)

    def _repr_args(self) -> str:
        w = None if self.weights is None else self.weights.tolist()
        return f"in_keys={self.in_keys}, out_keys={self.out_keys}, weights={w}"


class SuccessReward(Transform):
    """Sparse reward from a success flag: ``scale`` on success, 0 otherwise.

    The reward is written at step time only (not at reset); the reward spec becomes a
    ``Bounded`` spec over ``[min(0, scale), max(0, scale)]`` shaped like the success entry.

    Args:
        success_key: the boolean (or 0/1) success entry (default ``"success"``).
        reward_key: the reward written (default ``"reward"``).
        scale: the reward on success (default ``1.0``).

    Raises:
        RuntimeError: neither the success entry nor the reward is in the env's specs.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"success": torch.tensor([[True], [False]])}, batch_size=[2])
        >>> SuccessReward(scale=1.0)(td)["reward"].squeeze(-1).tolist()
        [1.0, 0.0]
    """

    _elementwise = True

    def __init__(
        self,
        success_key: NestedKey = "success",
        reward_key: NestedKey = "reward",
        *,
        scale: float = 1.0,
    ) -> None:
        super().__init__(in_keys=[success_key], out_keys=[reward_key])
        self.scale = float(scale)

    def _apply_transform(self, success: torch.Tensor) -> torch.Tensor:
        return success.to(torch.get_default_dtype()) * self.scale

    def _reset(self, tensordict, tensordict_reset):
        return tensordict_reset

    def _transform_rollout(self, rollout, initial):
        self._call(rollout.get("next"))
        return rollout

    def _set_reward_spec(self, rewards: Composite, sources: list) -> None:
        """``rewards[reward_key]``: a ``Bounded`` spec over ``{0, scale}`` shaped like the
        success entry found in ``sources`` (else like the existing reward entry)."""
        success_key, reward_key = self.in_keys[0], self.out_keys[0]
        leaf = None
        for comp in sources:
            if success_key in comp.keys(True, True):
                leaf = comp[success_key]
                break
        if leaf is None and reward_key in rewards.keys(True, True):
            leaf = rewards[reward_key]
        if leaf is None:
            raise RuntimeError(
                f"SuccessReward could not infer the reward shape: {success_key!r} is not in the "
                f"env's output specs and {reward_key!r} is not one of its rewards "
                f"{sorted(map(str, rewards.keys(True, True)))}"
            )
        rewards[reward_key] = Bounded(
            min(0.0, self.scale),
            max(0.0, self.scale),
            shape=leaf.shape,
            device=leaf.device,
            dtype=torch.get_default_dtype(),
        )

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        output_spec = output_spec.clone()
        names = ("full_observation_spec", "full_done_spec", "full_reward_spec")
        sources = [output_spec[name] for name in names if name in output_spec.keys()]
        self._set_reward_spec(output_spec["full_reward_spec"], sources)
        return output_spec

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        """The reward spec alone (TorchRL's hook): the success entry is looked up in the
        parent env's observation and done specs, else the existing reward entry sizes it."""
        parent = self.parent
        sources = [] if parent is None else [parent.full_observation_spec, parent.full_done_spec]
        self._set_reward_spec(reward_spec, [*sources, reward_spec])
        return reward_spec

    def _repr_args(self) -> str:
        return (
            f"success_key={self.in_keys[0]!r}, reward_key={self.out_keys[0]!r}, scale={self.scale}"
        )


# TorchRL's wording (users match on it), then why; no regex specials: TorchRL's tests
# pass ``match=Reward2GoTransform.ENV_ERR``
_R2G_ENV_ERR = (
    "The Reward2GoTransform is only an inverse transform and can only be applied to the "
    "replay buffer: it needs whole episodes, so it goes in a replay buffer or a "
    "collector's postproc, not in an env"
)


class Reward2GoTransform(Transform):
    """Writes the discounted reward-to-go of stored episodes (an inverse-only transform).

    ``inv`` (called by a replay buffer on ``extend``, or as a collector ``postproc``) reads
    ``("next", "reward")`` ``[*B, T, 1]`` and ``("next", done_key)`` and writes
    ``out_keys``; ``forward`` (at sampling) returns the data unchanged. Each trajectory
    needs at least one done. It cannot live in an env.

    Args:
        gamma: the discount (default ``1.0``).
        in_keys: reward keys (default ``[("next", "reward")]``).
        out_keys: where to write (default ``in_keys``).
        done_key: the done entry under ``"next"`` (default ``"done"``).

    Raises:
        ValueError: the transform is put in an env.
        RuntimeError: a trajectory of the data has no done.
        KeyError: none of ``in_keys`` is in the data.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> done = torch.tensor([False, True, False, True]).unsqueeze(-1)
        >>> td = TensorDict({"next": {"done": done, "reward": torch.ones(4, 1)}}, [4])
        >>> r2g = Reward2GoTransform(gamma=0.5, out_keys=["reward_to_go"])
        >>> r2g.inv(td)["reward_to_go"].squeeze(-1)
        tensor([1.5000, 1.0000, 1.5000, 1.0000])
    """

    ENV_ERR = _R2G_ENV_ERR

    def __init__(
        self,
        gamma: float | torch.Tensor | None = 1.0,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        done_key: NestedKey | None = "done",
    ):
        in_keys = normalize_keys([("next", "reward")] if in_keys is None else in_keys)
        out_keys = list(in_keys) if out_keys is None else normalize_keys(out_keys)
        super().__init__(in_keys=in_keys, in_keys_inv=in_keys, out_keys_inv=out_keys)
        self.done_key = normalize_key(done_key)
        if not isinstance(gamma, torch.Tensor):
            gamma = torch.tensor(gamma)
        self.register_buffer("gamma", gamma)

    def set_container(self, container) -> None:
        from rl.envs._env_base import EnvBase

        if isinstance(container, EnvBase) or getattr(container, "parent", None) is not None:
            raise ValueError(_R2G_ENV_ERR)
        super().set_container(container)

    @property
    def has_step(self) -> bool:
        return False

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        raise ValueError(_R2G_ENV_ERR)

    def transform_output_spec(self, output_spec):
        # reached when an env computes its specs: the transform is in an env
        raise ValueError(_R2G_ENV_ERR)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.parent is not None:
            raise ValueError(_R2G_ENV_ERR)
        dk = ("next", self.done_key) if isinstance(self.done_key, str) else ("next", *self.done_key)
        done = tensordict.get(dk, None)
        if done is None:
            raise KeyError(
                f"Reward2GoTransform needs the done entry {dk!r}; keys present: "
                f"{sorted(map(str, tensordict.keys(True, True)))}"
            )
        if not bool(done.any(-2).all()):
            raise RuntimeError(
                "Reward2GoTransform found a trajectory with no episode end: no reward-to-go "
                "can be computed (collect more frames per batch than steps per episode)"
            )
        present = set(tensordict.keys(True, True))
        found = False
        for in_key, out_key in self._io_pairs_inv:
            if in_key in present:
                found = True
                reward = tensordict.get(in_key)
                tensordict.set(out_key, reward_to_go(reward, done.expand_as(reward), self.gamma))
        if not found:
            raise KeyError(
                f"Could not find any of its in_keys: Reward2GoTransform found none of its in_keys {self.in_keys_inv}; keys present: "
                f"{sorted(map(str, present))}"
            )
        return tensordict

    def _repr_args(self) -> str:
        return f"gamma={self.gamma.tolist()}, in_keys={self.in_keys}, out_keys={self.out_keys_inv}"
