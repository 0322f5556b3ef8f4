"""The rollout fast path of :class:`~rl.envs.MultiThreadedEnvWrapper`.

It records exactly what the generic loop (``_step`` + partial ``reset``) records, but
drives the pool directly: each step is one send / receive of the pool whose outputs are
written with numpy into views of preallocated time-first buffers (zero-copy), done
sub-envs are reset with one ``reset(env_ids)`` (sent as soon as their flags are read,
answered after the step's outputs are written), and no tensor or TensorDict is built per
step. The policy (if any) runs through :class:`PipelinedPolicyActions`, which hands it
views of these buffers and records what it wrote while the pool steps.

Where the pool's layout is the usual one (one action array, observations under
``obs`` / ``obs:<name>``, one player per env), :class:`RawPool` talks to EnvPool's C++
``_send`` / ``_recv`` / ``_reset`` with the action arrays built once, skipping EnvPool's
per-call Python conversions (dicts of arrays, dtype checks, tree unflattening); anything
else goes through the public ``step`` / ``reset``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from rl.core import TensorPolicy
from rl.envs._gym_policy import PolicyActions
from rl.envs._gym_rollout import _obs_writer, fast_or_generic_rollout, rollout_entries
from rl.envs._rollout import build_output, presample_actions

if TYPE_CHECKING:
    from .envpool import MultiThreadedEnvWrapper

__all__ = ["envpool_rollout"]


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


class PipelinedPolicyActions(PolicyActions):
    """:class:`PolicyActions` split in two: :meth:`act` runs the policy and returns the
    pool action, :meth:`record` stores what the policy wrote, run while the pool steps."""

    def act(self, t: int) -> np.ndarray:
        td = self.td
        if t > 0:
            fast_set = type(td) is TensorDict and self.str_obs_keys
            entries = td._tensordict if fast_set else None
            patches = self._take_resets(t) if self.seen_overrides < len(self.overrides) else ()
            for i, (key, buf) in enumerate(self.obs):
                value = buf[t - 1]
                if patches:
                    value = value.clone()
                    for _, index, arrays in patches:
                        value[index] = torch.from_numpy(arrays[i])
                if fast_set:  # a view of the right shape and dtype: no checks needed
                    entries[key] = value
                else:
                    td.set(key, value)
            if t == 1:
                for key, flag in self.zero_flags:
                    td.set(key, flag)
        get = _getter(td)
        provided = [(key, get(key)) for key in self.root_keys]
        out = self.policy(td)
        if out is not None and out is not td:
            td = self.td = out
            get = _getter(td)
        if t == 0:
            self._discover(td, provided)
        self._provided = provided
        return self.env._action_from_td(td, get)

    @property
    def str_obs_keys(self) -> bool:
        """Whether every observation key is a string (set in the entry dict directly)."""
        flag = self.__dict__.get("_str_obs_keys")
        if flag is None:
            flag = self._str_obs_keys = all(type(key) is str for key, _ in self.obs)
        return flag

    @property
    def root_keys(self) -> list:
        keys = self.__dict__.get("_root_keys")
        if keys is None:
            keys = self._root_keys = [key for key, _ in self.obs] + list(self.done_keys)
        return keys

    def record(self, t: int) -> None:
        td = self.td
        get = _getter(td)
        for key, buf in self.extras:
            buf[t] = get(key)
        for key, value in self._provided:
            current = get(key)
            if current is not value:
                self.root_overrides.append((t, key, current.clone()))


class TensorPolicyActions(PipelinedPolicyActions):
    """:class:`PipelinedPolicyActions` for a policy with a tensor twin (the collectors'
    ``TensorPolicy``: ``in_keys``, ``out_keys``, ``forward(*tensors) -> tensors``).

    Step 0 runs through the TensorDict as usual (it validates the outputs and finds the
    keys to record); from step 1 on, ``forward`` takes the observation buffers' views
    (patched where sub-envs were reset) and its outputs go straight into the recorded
    buffers: no TensorDict is read or written per step. Where step 0 shows anything
    else (a key the policy writes that is not an out_key, a root entry replaced) the
    later steps keep the TensorDict path.
    """

    def __init__(self, env, policy, tensordict, next_obs, overrides, max_steps, outputs):
        super().__init__(env, policy, tensordict, next_obs, overrides, max_steps, outputs)
        self.forward = policy.forward
        obs_index = {key: i for i, (key, _) in enumerate(self.obs)}
        flags = dict(self.zero_flags)
        # each input: an observation buffer index, or the (all False) done flag of t >= 1
        self.sources = [(obs_index.get(key), flags.get(key)) for key in policy.in_keys]
        # the rows of the observation buffers (zero-copy views, made once per rollout)
        self.rows = [buf.unbind(0) for _, buf in self.obs]
        self.rows_np = [buf.numpy() for _, buf in self.obs]
        self.out_keys = list(policy.out_keys)
        self.action_pos = self.out_keys.index("action")
        self.act_shape = env._act_shape
        self.act_to_pool = env._act_to_pool
        self.slots: list | None = None  # (out index, buffer, its numpy view) after step 0
        self._outs: tuple = ()

    @staticmethod
    def accepts(env, policy) -> bool:
        """Whether ``policy`` has a usable tensor twin this loop can feed."""
        if not isinstance(policy, TensorPolicy) or not policy.usable():
            return False
        obs_keys = {key for key, _ in env._obs_np_dtypes}
        roots = obs_keys | set(env.done_keys)
        return (
            "action" in policy.out_keys
            and all(key in roots for key in policy.in_keys)
            and not any(key in roots for key in policy.out_keys)
        )

    def act(self, t: int) -> np.ndarray:
        if t == 0 or self.slots is None:
            return super().act(t)
        patches = self._take_resets(t) if self.seen_overrides < len(self.overrides) else ()
        inputs = []
        for i, flag in self.sources:
            if i is None:
                inputs.append(flag)
            elif patches:  # a copy of the row with the reset sub-envs' observations
                row = self.rows_np[i][t - 1].copy()
                for _, index, arrays in patches:
                    row[index] = arrays[i]
                inputs.append(torch.from_numpy(row))
            else:
                inputs.append(self.rows[i][t - 1])
        outs = self._outs = self.forward(*inputs)
        action = outs[self.action_pos]
        if action.shape != self.act_shape:
            self.env._action_from_td(None, lambda _: action)  # raises, naming the spec
        if action.requires_grad or not action.is_cpu:
            action = action.detach().cpu()
        array = action.numpy()
        return array if self.act_to_pool is None else self.act_to_pool(array)

    def record(self, t: int) -> None:
        slots = self.slots
        if slots is not None:
            outs = self._outs
            for i, buf, view in slots:
                value = outs[i]
                # numpy writes the row for a fraction of torch's indexing cost
                if view is not None and value.dtype == buf.dtype and value.is_cpu:
                    if not value.requires_grad:
                        view[t] = value.numpy()
                        continue
                buf[t] = value
            return
        super().record(t)
        if t == 0 and not self.root_overrides:
            by_key = dict(self.extras)
            if sorted(by_key) == sorted(self.out_keys):
                self.slots = [
                    (i, by_key[key], _numpy_view(by_key[key]))
                    for i, key in enumerate(self.out_keys)
                ]


def _numpy_view(buf: torch.Tensor) -> np.ndarray | None:
    """A numpy view of a CPU buffer (``None`` for a dtype numpy lacks, e.g. bfloat16)."""
    try:
        return buf.numpy()
    except (TypeError, RuntimeError):
        return None


def _getter(td: TensorDictBase):
    """``td.get`` for the keys of the loop; for a plain ``TensorDict``, string keys are
    read from its entry dict directly (``td.get`` parses the key at every call)."""
    if type(td) is not TensorDict:
        return td.get
    entries = td._tensordict
    slow = td.get

    def get(key):
        if type(key) is str:
            value = entries.get(key)
            if value is not None:
                return value
        return slow(key)

    return get


def envpool_rollout(
    env: MultiThreadedEnvWrapper,
    max_steps: int,
    tensordict: TensorDictBase,
    *,
    policy,
    break_when_any_done: bool,
    break_when_all_done: bool,
) -> TensorDictBase:
    """Rollout of an EnvPool env from the reset ``tensordict``, random actions or ``policy``."""
    return fast_or_generic_rollout(
        _rollout,
        env,
        max_steps,
        tensordict,
        policy=policy,
        break_when_any_done=break_when_any_done,
        break_when_all_done=break_when_all_done,
    )


def _rollout(
    env: MultiThreadedEnvWrapper,
    max_steps: int,
    tensordict: TensorDictBase,
    break_when_any_done: bool,
    break_when_all_done: bool,
    policy,
) -> TensorDictBase:
    batch_size = env.batch_size
    leaves = env._obs_leaves
    obs_keys = [key for key, _ in env._obs_np_dtypes]
    initial = {key: tensordict[key] for key in (*obs_keys, *env.done_keys)}
    # root obs of step t + 1 is the next obs of step t, except after a reset: (t + 1, idx, arrays)
    overrides: list = []
    next_obs = [
        torch.empty((max_steps, *leaf.spec.shape), dtype=leaf.spec.dtype) for leaf in leaves
    ]
    write_next = _obs_writer(leaves, [buf.numpy() for buf in next_obs])
    reward = torch.empty((max_steps, *batch_size), dtype=torch.float32)
    terminated = torch.empty((max_steps, *batch_size), dtype=torch.bool)
    truncated = torch.empty((max_steps, *batch_size), dtype=torch.bool)
    rew_np, term_np, trunc_np = reward.numpy(), terminated.numpy(), truncated.numpy()
    if policy is None:
        actions = presample_actions(env, max_steps)
        pool_actions = env._act_leaves[0].to_gym(actions[0][1].numpy())
    else:
        driver = (
            TensorPolicyActions
            if TensorPolicyActions.accepts(env, policy)
            else PipelinedPolicyActions
        )
        pool_actions = driver(
            env, policy, tensordict, next_obs, overrides, max_steps, (reward, terminated, truncated)
        )
    pool = env._env
    io = raw_pool(pool, leaves) or _PublicPool(pool)
    send, recv, reset_send, reset_recv = io.send, io.recv, io.reset_send, io.reset_recv
    act = None if policy is None else pool_actions.act
    record = None if policy is None else pool_actions.record
    steps = max_steps
    last = max_steps - 1
    seen = None
    for t in range(max_steps):
        if act is None:
            send(pool_actions[t])
        else:
            send(act(t))
            record(t)  # while the pool steps in its threads
        obs, r, te, tr = recv()
        done = te | tr
        reset = False
        if done.any():
            if break_when_any_done:
                steps = t + 1
            elif break_when_all_done:
                seen = done.copy() if seen is None else seen | done
                if seen.all():
                    steps = t + 1
            if steps == max_steps and t < last:
                reset_send(np.flatnonzero(done))  # the pool resets while we write
                reset = True
        write_next(t, obs)
        rew_np[t] = r
        term_np[t] = te
        trunc_np[t] = tr
        if reset:
            fresh, rows = reset_recv()
            overrides.append((t + 1, (rows,), env._obs_arrays(fresh)))
        elif steps < max_steps:
            break
    # the env's current observation: the last "next" one (done rows are reset later)
    env.__dict__["_last_obs"] = [buf[steps - 1].clone() for buf in next_obs]

    root, nxt = rollout_entries(
        env, obs_keys, next_obs, initial, overrides, (reward, terminated, truncated), steps,
        actions if policy is None else pool_actions,
    )  # fmt: skip
    return build_output(root, nxt, batch_size, steps, env.device, time_dim=0)
