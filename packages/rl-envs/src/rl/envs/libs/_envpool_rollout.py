"""The rollout fast path of :class:`~rl.envs.MultiThreadedEnvWrapper`.

It records exactly what the generic loop (``_step`` + partial ``reset``) records, but
drives the pool directly: each step is one ``pool.step`` whose outputs are written with
numpy into views of preallocated time-first buffers (zero-copy), done sub-envs are reset
with one ``pool.reset(env_ids)``, and no tensor or TensorDict is built per step. The
policy (if any) runs through :class:`~rl.envs._gym_policy.PolicyActions`, which hands it
views of these buffers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from tensordict import TensorDictBase

from rl.envs._gym_policy import PolicyActions, UseGenericLoop
from rl.envs._gym_spaces import walk
from rl.envs._rollout import build_output, presample_actions, rollout_generic

if TYPE_CHECKING:
    from .envpool import MultiThreadedEnvWrapper

__all__ = ["envpool_rollout"]


def _obs_writer(leaves, views):
    """A function writing an EnvPool observation into row ``t`` of the numpy ``views``."""
    if len(leaves) == 1 and leaves[0].from_gym is None and leaves[0].path == ():
        view = views[0]

        def write_simple(t, obs):
            view[t] = obs

        return write_simple
    pairs = list(zip(leaves, views))

    def write(t, obs):
        for leaf, buf in pairs:
            value = walk(obs, leaf.path)
            buf[t] = value if leaf.from_gym is None else leaf.from_gym(value)

    return write


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
    generic = {
        "policy": policy,
        "callback": None,
        "break_when_any_done": break_when_any_done,
        "break_when_all_done": break_when_all_done,
    }
    root_keys = set(env.observation_keys) | set(env.done_keys)
    if set(tensordict.keys(True, True)) != root_keys:
        return rollout_generic(env, max_steps, tensordict, **generic)
    try:
        return _rollout(
            env, max_steps, tensordict, break_when_any_done, break_when_all_done, policy
        )
    except UseGenericLoop as use_generic:  # raised at step 0, before the pool moved
        return rollout_generic(
            env, max_steps, use_generic.tensordict, skip_first_policy=True, **generic
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
        pool_actions = PolicyActions(
            env, policy, tensordict, next_obs, overrides, max_steps, (reward, terminated, truncated)
        )
    pool = env._env
    step_fn, reset_fn = pool.step, pool.reset
    steps = max_steps
    last = max_steps - 1
    seen = None
    for t in range(max_steps):
        obs, r, te, tr, _ = step_fn(pool_actions[t])
        write_next(t, obs)
        rew_np[t] = r
        term_np[t] = te
        trunc_np[t] = tr
        done = te | tr
        if done.any():
            if break_when_any_done:
                steps = t + 1
                break
            if break_when_all_done:
                seen = done.copy() if seen is None else seen | done
                if seen.all():
                    steps = t + 1
                    break
            if t < last:
                fresh, info = reset_fn(np.flatnonzero(done))
                rows = np.asarray(info["env_id"])
                overrides.append((t + 1, (rows,), env._obs_arrays(fresh)))
    # the env's current observation: the last "next" one (done rows are reset later)
    env.__dict__["_last_obs"] = [buf[steps - 1].clone() for buf in next_obs]

    root, nxt = {}, {}
    for key, buf in zip(obs_keys, next_obs):
        root_buf = torch.empty_like(buf)
        root_buf[0] = initial[key].cpu()
        if steps > 1:
            root_buf[1:steps] = buf[: steps - 1]
        root[key] = root_buf
        nxt[key] = buf
    for t, idx, arrays in overrides:
        for key, array in zip(obs_keys, arrays):
            root[key][(t, *idx)] = torch.from_numpy(np.asarray(array))
    flag_shape = (max_steps, *batch_size, 1)
    for key in env.done_keys:
        buf = torch.zeros(flag_shape, dtype=torch.bool)
        buf[0] = initial[key].cpu()
        root[key] = buf
    if policy is None:
        root.update(actions)
    else:
        root.update(pool_actions.extras)
        for t, key, value in pool_actions.root_overrides:
            if t < steps:
                root[key][t] = value
    nxt["reward"] = reward.unsqueeze(-1)
    nxt["done"] = (terminated | truncated).unsqueeze(-1)
    nxt["terminated"] = terminated.unsqueeze(-1)
    nxt["truncated"] = truncated.unsqueeze(-1)
    return build_output(root, nxt, batch_size, steps, env.device, time_dim=0)
