"""Reward maps: sign, binarisation, linearisation of vector rewards, success rewards, reward-to-go."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase

from rl.core import Binary, Bounded, Composite, Unbounded

from ._base import Transform
from ._spec_utils import NestedKey, normalize_key, normalize_keys

__all__ = [
    "BinarizeReward",
    "LineariseRewards",
    "Reward2GoTransform",
    "SignTransform",
    "SuccessReward",
]


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
                    f"LineariseRewards expects 1-d weights, got weights with {weights.ndim} dims"
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
                f"LineariseRewards cannot aggregate the discrete reward {in_key!r} ({spec})"
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

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        output_spec = output_spec.clone()
        success_key, reward_key = self.in_keys[0], self.out_keys[0]
        leaf = None
        for name in ("full_observation_spec", "full_done_spec", "full_reward_spec"):
            if name not in output_spec.keys():
                continue
            comp = output_spec[name]
            if success_key in comp.keys(True, True):
                leaf = comp[success_key]
                break
        rewards = output_spec["full_reward_spec"]
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
        return output_spec

    def _repr_args(self) -> str:
        return (
            f"success_key={self.in_keys[0]!r}, reward_key={self.out_keys[0]!r}, scale={self.scale}"
        )


_R2G_ENV_ERR = (
    "Reward2GoTransform is only an inverse transform: it needs whole episodes, so it goes "
    "in a replay buffer (or a collector's postproc=transform.inv), not in an env"
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
        from rl.envs._common import EnvBase

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
                f"Reward2GoTransform found none of its in_keys {self.in_keys_inv}; keys present: "
                f"{sorted(map(str, present))}"
            )
        return tensordict

    def _repr_args(self) -> str:
        return f"gamma={self.gamma.tolist()}, in_keys={self.in_keys}, out_keys={self.out_keys_inv}"
