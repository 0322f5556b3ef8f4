"""The rollout kernel of :class:`~rl.envs.MultiThreadedEnvWrapper` (see
:mod:`rl.envs.engine`).

It does what ``_step`` and ``reset`` do, but drives the pool directly: each step is one
send / receive of the pool whose outputs are written with numpy into views of the
engine's buffers (zero-copy); the action is sent in :meth:`EnvPoolKernel.begin`, so the
engine records the policy's outputs while the pool steps; done sub-envs are reset with
one ``reset(env_ids)`` (sent as soon as their flags are read, answered after the step's
outputs are written, in a rollout that runs to the end).

Where the pool's layout is the usual one (one action array, observations under
``obs`` / ``obs:<name>``, one player per env), :class:`RawPool` talks to EnvPool's C++
``_send`` / ``_recv`` / ``_reset`` with the action arrays built once, skipping EnvPool's
per-call Python conversions (dicts of arrays, dtype checks, tree unflattening); anything
else goes through the public ``step`` / ``reset``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from tensordict import TensorDict

from rl.envs._gym_kernel import _key, _obs_writer
from rl.envs.engine import BufferKernel

if TYPE_CHECKING:
    pass

__all__ = ["EnvPoolKernel"]


class RawPool:
    """``send(action)`` / ``recv()`` and ``reset_send(env_ids)`` / ``reset_recv()`` of a
    synchronous single-player pool through EnvPool's C++ calls: ``recv`` returns ``(obs,
    reward, terminated, truncated)`` and ``reset_recv`` ``(obs, env_ids)``, as the public
    API would."""

    def __init__(self, pool, obs_leaves) -> None:
        spec = pool._spec
        names = list(spec._action_keys)
        if sorted(names) != ["action", "env_id", "players.env_id"]:
            raise TypeError(f"unexpected EnvPool action keys {names}")
        if int(pool.config.get("max_num_players", 1)) != 1:
            raise TypeError("multi-player pools take the public API")
        self.action_dtype = spec._action_spec[names.index("action")][0]
        self.action_pos = names.index("action")
        ids = np.asarray(pool.all_env_ids, dtype=np.int32)
        # env_id and players.env_id are the same ids at every step
        self.arrays = [None if n == "action" else ids for n in names]
        state = {name: i for i, name in enumerate(pool._state_keys)}
        self.i_ids, self.i_rew = state["info:env_id"], state["reward"]
        self.i_done, self.i_trunc = state["done"], state["trunc"]
        if "obs" in state:
            if any(leaf.path != () for leaf in obs_leaves):
                raise TypeError("observation layout differs from the spec")
            self.obs_index = state["obs"]
            self.obs_names = None
        else:
            self.obs_names = [leaf.path[0] for leaf in obs_leaves]
            if any(len(leaf.path) != 1 for leaf in obs_leaves):
                raise TypeError("nested observations take the public API")
            self.obs_index = [state[f"obs:{name}"] for name in self.obs_names]
        self._send, self._recv, self._reset = pool._send, pool._recv, pool._reset

    def _obs(self, st):
        if self.obs_names is None:
            return st[self.obs_index]
        return {name: st[i] for name, i in zip(self.obs_names, self.obs_index)}

    def send(self, action: np.ndarray) -> None:
        arrays = list(self.arrays)
        # a copy: EnvPool may read the array after send returns
        arrays[self.action_pos] = np.array(action, dtype=self.action_dtype)
        self._send(arrays)

    def recv(self):
        st = self._recv()
        trunc = st[self.i_trunc]
        return self._obs(st), st[self.i_rew], st[self.i_done] & ~trunc, trunc

    def reset_send(self, env_ids: np.ndarray) -> None:
        self._reset(np.asarray(env_ids, dtype=np.int32))

    def reset_recv(self):
        st = self._recv()
        return self._obs(st), st[self.i_ids]


def raw_pool(pool, obs_leaves) -> RawPool | None:
    """A :class:`RawPool` over ``pool``, or ``None`` where its layout is not the usual one."""
    try:
        return RawPool(pool, obs_leaves)
    except (AttributeError, KeyError, TypeError, IndexError, ValueError):
        return None


class _PublicPool:
    """The same interface over EnvPool's public ``step`` / ``reset``."""

    def __init__(self, pool) -> None:
        self.pool = pool

    def send(self, action) -> None:
        self.pool.send(action)

    def recv(self):
        obs, reward, terminated, truncated, _ = self.pool.recv(reset=False, return_info=True)
        return obs, reward, terminated, truncated

    def reset_send(self, env_ids) -> None:
        self.env_ids = env_ids

    def reset_recv(self):
        obs, info = self.pool.reset(self.env_ids)
        return obs, info["env_id"]


class EnvPoolKernel(BufferKernel):
    """The kernel of an EnvPool env (one synchronous pool of ``n`` envs)."""

    uses_begin = True  # the action goes to the pool's threads before the engine records

    def start(self, buffers, tensordict, actions, *, eager, stops) -> None:
        env = self.env
        leaves = env._obs_leaves
        self.obs_keys = [_key(leaf.key) for leaf in leaves]
        self.obs_bufs = [
            buffers.next_buffer(key, leaf.spec.shape[1:], leaf.spec.dtype)
            for key, leaf in zip(self.obs_keys, leaves)
        ]
        self.write_next = _obs_writer(leaves, [buf.numpy() for buf in self.obs_bufs])
        self.flag_buffers(buffers)
        self.pool_actions = None
        if actions is not None:  # [n, T, ...] -> one pool action per step
            value = actions[0][1].movedim(1, 0).numpy()
            self.pool_actions = env._act_leaves[0].to_gym(value)
        pool = env._env
        io = raw_pool(pool, leaves) or _PublicPool(pool)
        self.send, self.recv = io.send, io.recv
        self.reset_send, self.reset_recv = io.reset_send, io.reset_recv
        self.eager, self.stops = eager, stops
        self.last = buffers.max_steps - 1
        self.fresh = None

    def begin(self, t: int, tensordict) -> None:
        if self.pool_actions is not None:
            self.send(self.pool_actions[t])
        elif type(tensordict) is TensorDict and "action" in tensordict._tensordict:
            # a plain root's entry, read from its dict (td.get parses the key per call)
            self.send(self.env._action_from_td(tensordict, tensordict._tensordict.__getitem__))
        else:
            self.send(self.env._action_from_td(tensordict))

    def step(self, t: int, tensordict) -> np.ndarray:
        obs, r, te, tr = self.recv()
        done = te | tr
        any_done = done.any()
        early = any_done and not self.stops and t < self.last
        if early:
            self.reset_send(np.flatnonzero(done))  # the pool resets while we write
        self.write_next((slice(None), t), obs)
        self.rew[:, t] = r
        self.term[:, t] = te
        self.trunc[:, t] = tr
        if self.eager:
            self.done[:, t] = done
        if early:
            self.fresh = self.reset_recv()
        return done if any_done else False  # False: the engine needs no second look

    def reset(self, t: int, done: np.ndarray, tensordict) -> dict:
        if self.fresh is None:
            self.reset_send(np.flatnonzero(done))
            self.fresh = self.reset_recv()
        fresh, rows = self.fresh
        self.fresh = None
        return self.reset_entries(rows, self.env._obs_arrays(fresh))

    def finish(self, steps: int) -> None:
        super().finish(steps)
        # the env's current observation: the last "next" one (done rows are reset later)
        self.env.__dict__["_last_obs"] = [buf[:, steps - 1].clone() for buf in self.obs_bufs]
