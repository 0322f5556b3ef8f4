"""The rollout kernels of :class:`~rl.envs.GymWrapper` (see :mod:`rl.envs.engine`).

They do what ``GymWrapper._step`` and ``_reset`` do, but talk to gymnasium directly:
presampled actions are converted to gym actions in one call, and every gym output is
written with numpy into numpy views of the engine's preallocated buffers (zero-copy). No
tensor or TensorDict is created per step.

- :class:`GymKernel`: a single gym env.
- :class:`SyncVectorKernel`: a ``SyncVectorEnv`` in ``SAME_STEP`` mode, stepped through
  its sub-envs directly (the same calls in the same order as ``SyncVectorEnv.step``:
  step, then reset when done), so each sub-env writes straight into the buffers without
  gymnasium's concatenation, copies and info dicts.
- :class:`VectorKernel`: any other vector env. An ``AsyncVectorEnv`` in ``SAME_STEP``
  mode running presampled actions to the end is pipelined: the next step is sent to the
  workers as soon as this step's observations are copied out of gymnasium's buffers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import concatenate, create_empty_array, iterate

from ._gym_spaces import walk
from .engine import BufferKernel, RolloutKernel

if TYPE_CHECKING:
    from ._gym import GymWrapper

__all__ = ["GymKernel", "SyncVectorKernel", "VectorKernel", "gym_kernel"]

# What a gym env's step raises when it refuses an action outside its space (CartPole's
# ``assert self.action_space.contains(action)``, a Dict / Tuple lookup, numpy casting).
SIMULATOR_ERRORS = (AssertionError, ValueError, TypeError, IndexError, KeyError)


def _key(key: tuple[str, ...]):
    """The TensorDict key of a space leaf: a string for a one-part key, else the tuple."""
    return key[0] if len(key) == 1 else key


def _shown(action) -> str:
    """A short text of a gym action (numpy arrays summarised, scalars plain)."""
    if isinstance(action, np.ndarray):
        return np.array2string(action, threshold=16, separator=", ")
    if isinstance(action, np.generic):
        return repr(action.item())
    return repr(action)


def raise_if_rejected(env: GymWrapper, action, err: Exception, index: int | None = None) -> None:
    """Raises a ``ValueError`` naming the action key, ``action_spec`` and the value given
    when gym's ``step`` failed (``err``) on an action outside its action space.

    Called only after ``step`` raised, so the hot path pays nothing; an action inside the
    space returns, and the caller re-raises the env's own error unchanged.

    Args:
        env: the wrapped gym env.
        action: the gym action passed to ``step`` (one sub-env's with ``index``).
        err: what ``step`` raised.
        index: the sub-env of a vector env stepped on its own, else ``None``.
    """
    gym_env = env._env
    if index is not None:
        space = gym_env.single_action_space
    else:
        space = gym_env.action_space
    try:
        inside = bool(space.contains(action))
    except Exception:  # noqa: BLE001 - a value the space cannot even read is outside it
        inside = False
    if inside:
        return
    keys = list(env.action_keys)
    key = keys[0] if len(keys) == 1 else keys
    spec = env.full_action_spec[key] if len(keys) == 1 else env.full_action_spec
    where = "" if index is None else f" (sub-env {index})"
    raise ValueError(
        f"action {key!r}{where} holds {_shown(action)}, expected a value in action_spec "
        f"{spec!r}; gymnasium's step rejected it with {type(err).__name__}: {err} (pass "
        "run_type_checks=True to check actions against action_spec before each step)"
    ) from err


def _obs_writer(leaves, views):
    """A function writing a gym (or EnvPool) observation at ``index`` of the numpy ``views``."""
    if len(leaves) == 1 and leaves[0].from_gym is None and leaves[0].path == ():
        view = views[0]

        def write_simple(index, obs):
            view[index] = obs

        return write_simple
    pairs = list(zip(leaves, views))

    def write(index, obs):
        for leaf, view in pairs:
            value = walk(obs, leaf.path)
            view[index] = value if leaf.from_gym is None else leaf.from_gym(value)

    return write


def gym_kernel(env: GymWrapper) -> RolloutKernel | None:
    """The kernel of ``env``'s gym env, or ``None`` (the env's ``_step`` / ``_reset``)."""
    vec = env._env
    if not env.is_vector:
        return GymKernel(env)
    if isinstance(vec, SyncVectorEnv) and env.autoreset_mode == AutoresetMode.SAME_STEP:
        return SyncVectorKernel(env)
    return VectorKernel(env)


class _GymKernelBase(BufferKernel):
    """Buffers and action conversion shared by the gym kernels."""

    def start(self, buffers, tensordict, actions, *, eager, stops) -> None:
        env = self.env
        nb = len(env.batch_size)
        self.prefix = (slice(None),) * nb
        leaves = env._obs_leaves
        self.obs_keys = [_key(leaf.key) for leaf in leaves]
        self.obs_bufs = [
            buffers.next_buffer(key, leaf.spec.shape[nb:], leaf.spec.dtype)
            for key, leaf in zip(self.obs_keys, leaves)
        ]
        self.write_next = _obs_writer(leaves, [buf.numpy() for buf in self.obs_bufs])
        # the dtype _step writes (fixed at construction from the reward space), so that the
        # engine's rollouts and step() agree even after reward_spec is replaced
        reward_dtype = torch.from_numpy(np.zeros((), dtype=env._reward_np_dtype)).dtype
        self.flag_buffers(buffers, env._reward_shape, reward_dtype)
        self.eager = eager
        self.max_steps = buffers.max_steps
        self.gym_actions = None if actions is None else self._convert(actions)

    def _convert(self, actions: list) -> list:
        """The gym action of each step, from the presampled ``[*B, T, ...]`` buffers."""
        env = self.env
        nb = len(env.batch_size)
        by_key = dict(actions)
        values = [by_key[_key(leaf.key)].movedim(nb, 0).numpy() for leaf in env._act_leaves]
        if env._simple_act:
            converted = env.actions_to_gym(values)
            if not env.is_vector and isinstance(env.gym_action_space, spaces.Discrete):
                return converted.tolist()
            return list(converted)
        return [env.actions_to_gym([v[t] for v in values]) for t in range(self.max_steps)]

    def _action(self, t: int, tensordict):
        if self.gym_actions is not None:
            return self.gym_actions[t]
        return self.env._action_from_td(tensordict)


class GymKernel(_GymKernelBase):
    """A single gym env."""

    def start(self, buffers, tensordict, actions, *, eager, stops) -> None:
        super().start(buffers, tensordict, actions, eager=eager, stops=stops)
        gym_env = self.env._env
        self.step_fn, self.reset_fn = gym_env.step, gym_env.reset

    def step(self, t: int, tensordict) -> bool:
        # outside the try: a policy's errors pass; _GymKernelBase._action, inlined (one
        # call less a step): keep the two in step
        actions = self.gym_actions
        action = self.env._action_from_td(tensordict) if actions is None else actions[t]
        try:
            obs, r, te, tr, _ = self.step_fn(action)
        except SIMULATOR_ERRORS as err:
            raise_if_rejected(self.env, action, err)
            raise
        self.write_next(t, obs)
        self.rew[t] = r
        self.term[t] = te
        self.trunc[t] = tr
        done = bool(te or tr)
        if self.eager:
            self.done[t] = done
        return done

    def reset(self, t: int, done, tensordict) -> dict:
        env = self.env
        obs, _ = self.reset_fn(seed=env._take_seed())
        return self.reset_entries((), env._obs_arrays(obs))


class VectorKernel(_GymKernelBase):
    """A gymnasium vector env (``NEXT_STEP`` or ``SAME_STEP`` auto-reset)."""

    uses_begin = True  # the pipelined async step sends step 0's action there

    def start(self, buffers, tensordict, actions, *, eager, stops) -> None:
        super().start(buffers, tensordict, actions, eager=eager, stops=stops)
        env = self.env
        vec = env._env
        self.vec, self.step_fn, self.reset_fn = vec, vec.step, vec.reset
        self.same_step = env.autoreset_mode == AutoresetMode.SAME_STEP
        # presampled actions run to the end: step t + 1 is sent before step t is written
        self.pipelined = (
            isinstance(vec, AsyncVectorEnv)
            and self.same_step
            and actions is not None
            and not (stops or eager)
        )
        self.obs = None
        self.last_done = np.zeros(vec.num_envs, dtype=np.bool_)
        self.reset_rows = None

    def begin(self, t: int, tensordict) -> None:
        if self.pipelined and t == 0:
            self.vec.step_async(self.gym_actions[0])

    def step(self, t: int, tensordict) -> np.ndarray:
        env = self.env
        if self.pipelined:
            try:
                obs, r, te, tr, info = self.vec.step_wait()
            except SIMULATOR_ERRORS as err:
                raise_if_rejected(env, self.gym_actions[t], err)
                raise
            self.write_next((slice(None), t), obs)
            done = te | tr
            if t < self.max_steps - 1:
                # obs lives in gymnasium's shared buffer, which step t + 1 overwrites
                if done.any():
                    idx = np.flatnonzero(done)
                    self.reset_rows = (idx, [a[idx].copy() for a in env._obs_arrays(obs)])
                self.vec.step_async(self.gym_actions[t + 1])
        else:
            action = self._action(t, tensordict)
            try:
                obs, r, te, tr, info = self.step_fn(action)
            except SIMULATOR_ERRORS as err:
                raise_if_rejected(env, action, err)
                raise
            self.write_next((slice(None), t), obs)
            done = te | tr
        self.rew[:, t] = r
        self.term[:, t] = te
        self.trunc[:, t] = tr
        if self.eager:
            self.done[:, t] = done
        if self.same_step and done.any():
            # SAME_STEP returns the reset observation of an ended sub-env and its final
            # one in info: the final one is what step t records as "next"
            final = info["final_obs"]
            for i in np.flatnonzero(info["_final_obs"]):
                self.write_next((i, t), final[i])
        self.obs, self.last_done = obs, done
        return done

    def reset(self, t: int, done: np.ndarray, tensordict) -> dict:
        env = self.env
        if self.pipelined:
            idx, arrays = self.reset_rows
        else:
            if not self.same_step:
                self.obs, _ = self.reset_fn(options={"reset_mask": done})
                self.last_done = np.zeros_like(done)
            idx = np.flatnonzero(done)
            arrays = [a[idx] for a in env._obs_arrays(self.obs)]
        return self.reset_entries(idx, arrays)

    def finish(self, steps: int) -> None:
        super().finish(steps)
        env = self.env
        env._last_obs = self.obs
        done = self.last_done
        env._autoreset = done.copy() if self.same_step else np.zeros_like(done)


class SyncVectorKernel(_GymKernelBase):
    """A ``SAME_STEP`` ``SyncVectorEnv``, its sub-envs stepped one by one."""

    def start(self, buffers, tensordict, actions, *, eager, stops) -> None:
        super().start(buffers, tensordict, actions, eager=eager, stops=stops)
        vec = self.env._env
        self.subs = vec.envs
        self.space = vec.action_space
        self.discrete = isinstance(vec.single_action_space, spaces.Discrete)
        self.per_env = None
        if self.gym_actions is not None:
            self.per_env = [self._split(a) for a in self.gym_actions]
        n = len(self.subs)
        self.latest = [None] * n
        # the reset observations of the sub-envs that ended, written as they reset
        self.fresh = [
            np.empty(buf.shape[:1] + buf.shape[2:], buf.numpy().dtype) for buf in self.obs_bufs
        ]
        self.write_fresh = _obs_writer(self.env._obs_leaves, self.fresh)
        self.done_np = np.zeros(n, dtype=np.bool_)

    def _split(self, action) -> list:
        if self.discrete:
            return np.asarray(action).tolist()
        return list(iterate(self.space, action))

    def step(self, t: int, tensordict) -> np.ndarray:
        if self.per_env is not None:
            actions_t = self.per_env[t]
        else:
            actions_t = self._split(self.env._action_from_td(tensordict))
        done, latest, write_fresh = self.done_np, self.latest, self.write_fresh
        write, rew, term, trunc = self.write_next, self.rew, self.term, self.trunc
        any_done = False
        for i, sub in enumerate(self.subs):
            try:
                obs, r, te, tr, _ = sub.step(actions_t[i])
            except SIMULATOR_ERRORS as err:
                raise_if_rejected(self.env, actions_t[i], err, index=i)
                raise
            write((i, t), obs)
            rew[i, t] = r
            term[i, t] = te
            trunc[i, t] = tr
            if te or tr:
                done[i] = any_done = True
                obs, _ = sub.reset()
                write_fresh(i, obs)
            else:
                done[i] = False
            latest[i] = obs
        if self.eager:
            self.done[:, t] = done
        return done if any_done else False  # a bool: no array test per step

    def reset(self, t: int, done: np.ndarray, tensordict) -> dict:
        idx = np.flatnonzero(done)
        return self.reset_entries(idx, [fresh[idx] for fresh in self.fresh])

    def finish(self, steps: int) -> None:
        super().finish(steps)
        env = self.env
        space = env._env.single_observation_space
        n = len(self.subs)
        env._last_obs = concatenate(space, self.latest, create_empty_array(space, n))
        env._autoreset = self.done_np.copy()
