"""Worker-side fast step and reset for single gymnasium sub-envs (``GymEnv("CartPole-v1")``).

``GymWrapper._step`` and ``reset`` build tensors and a TensorDict at each call (a reset
costs about ten times the gym env's own); a batched env only needs the values in its
buffers. For a single (non-vector) CPU ``GymWrapper``, the step converts the action from
a numpy view of the input buffer, calls the gym env and writes the observation, reward
and flags straight into numpy views of the output buffer; the reset calls the gym env's
reset (with the seed ``set_seed`` left pending) and writes the observation and cleared
flags into the views it is given. Both produce exactly what ``_step`` and ``reset``
produce (a test checks it); envs they do not cover (vector envs, another device, other
wrappers, extra keys) use the generic path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces

from .._gym import GymWrapper
from .._gym_kernel import _obs_writer
from ._buffers import BufferLayout, Buffers

__all__ = ["gym_fast_reset", "gym_fast_step"]

_FLAGS = ("reward", "done", "terminated", "truncated")
_NEEDED = ("_env", "_obs_leaves", "_act_leaves", "actions_to_gym", "gym_action_space")


def _key(key: tuple[str, ...]):
    return key[0] if len(key) == 1 else key


def _covered(env: Any, layout: BufferLayout) -> tuple[list, list] | None:
    """The observation and action keys of ``env`` when the fast paths cover it."""
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
    if set(layout.reset_keys) != {*obs_keys, *_FLAGS[1:]}:
        return None
    return obs_keys, act_keys


def _action_converter(env: Any, act_views: list[np.ndarray]) -> Callable[[], Any]:
    """The gym action from the input views; a python int for a categorical ``Discrete``."""
    space = env.gym_action_space
    view = act_views[0]
    if isinstance(space, spaces.Discrete) and env._simple_act and view.shape == ():
        start = int(space.start)
        return lambda: int(view) + start  # what gym's own spaces check fastest
    to_gym = env.actions_to_gym
    return lambda: to_gym(act_views)


def gym_fast_step(
    env: Any, index: int, buffers: Buffers, layout: BufferLayout
) -> Callable[[], bool] | None:
    """The fast step of sub-env ``index`` (returns its done flag), or ``None`` when
    ``env`` is not covered."""
    keys = _covered(env, layout)
    if keys is None:
        return None
    obs_keys, act_keys = keys
    act_views = [buffers.inputs[key][index].numpy() for key in act_keys]
    obs_views = [buffers.out[key][index].numpy() for key in obs_keys]
    reward, done, terminated, truncated = (buffers.out[key][index].numpy() for key in _FLAGS)
    write_obs = _obs_writer(env._obs_leaves, obs_views)
    action = _action_converter(env, act_views)
    gym_step = env._env.step

    def step() -> bool:
        obs, r, te, tr, _ = gym_step(action())
        write_obs(Ellipsis, obs)
        reward[...] = r
        terminated[...] = te
        truncated[...] = tr
        finished = bool(te or tr)
        done[...] = finished
        return finished

    return step


def gym_fast_reset(
    env: Any, index: int, buffers: Buffers, layout: BufferLayout
) -> Callable[[bool], None] | None:
    """The fast reset of sub-env ``index``, or ``None`` when ``env`` is not covered.

    The returned function resets the gym env and writes into the ``reset`` buffer (its
    argument True: the next root of an auto-reset) or the ``out`` buffer (False).
    """
    keys = _covered(env, layout)
    if keys is None:
        return None
    obs_keys, _ = keys
    targets = []
    for role in (buffers.out, buffers.reset):
        write_obs = _obs_writer(env._obs_leaves, [role[key][index].numpy() for key in obs_keys])
        targets.append((write_obs, [role[key][index].numpy() for key in _FLAGS[1:]]))
    gym_reset = env._env.reset
    take_seed = env._take_seed

    def reset(into_reset_buffer: bool) -> None:
        obs, _ = gym_reset(seed=take_seed())
        write_obs, flags = targets[into_reset_buffer]
        write_obs(Ellipsis, obs)
        for flag in flags:
            flag[...] = False

    return reset
