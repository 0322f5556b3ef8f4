"""A worker-side fast step for single gymnasium sub-envs (``GymEnv("CartPole-v1")``).

``GymWrapper._step`` builds tensors and a TensorDict at each call; a batched env only
needs the values in its buffers. For a single (non-vector) CPU ``GymWrapper``, this step
converts the action from a numpy view of the input buffer, calls the gym env and writes
the observation, reward and flags straight into numpy views of the output buffer. It
produces exactly what ``_step`` produces (a test checks it); envs it does not cover
(vector envs, another device, other wrappers, extra keys) use ``_step``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._gym import GymWrapper
from .._gym_rollout import _obs_writer
from ._buffers import BufferLayout, Buffers

__all__ = ["gym_fast_step"]

_FLAGS = ("reward", "done", "terminated", "truncated")
_NEEDED = ("_env", "_obs_leaves", "_act_leaves", "actions_to_gym", "gym_action_space")


def _key(key: tuple[str, ...]):
    return key[0] if len(key) == 1 else key


def gym_fast_step(
    env: Any, index: int, buffers: Buffers, layout: BufferLayout
) -> Callable[[], None] | None:
    """The fast step of sub-env ``index``, or ``None`` when ``env`` is not covered."""
    if type(env).__name__ not in ("GymEnv", "GymWrapper") or not isinstance(env, GymWrapper):
        return None
    if not all(hasattr(env, name) for name in _NEEDED) or env.is_vector:
        return None
    if env.device is not None and env.device.type != "cpu":
        return None
    obs_keys = [_key(leaf.key) for leaf in env._obs_leaves]
    act_keys = [_key(leaf.key) for leaf in env._act_leaves]
    if set(layout.step_keys) != {*obs_keys, *_FLAGS} or set(layout.in_keys) != set(act_keys):
        return None
    act_views = [buffers.inputs[key][index].numpy() for key in act_keys]
    obs_views = [buffers.out[key][index].numpy() for key in obs_keys]
    reward, done, terminated, truncated = (buffers.out[key][index].numpy() for key in _FLAGS)
    write_obs = _obs_writer(env._obs_leaves, obs_views)
    to_gym = env.actions_to_gym
    gym_step = env._env.step

    def step() -> None:
        obs, r, te, tr, _ = gym_step(to_gym(act_views))
        write_obs(Ellipsis, obs)
        reward[...] = np.float32(r)
        terminated[...] = te
        truncated[...] = tr
        done[...] = te or tr

    return step
