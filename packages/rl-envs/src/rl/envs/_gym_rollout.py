"""The policy-free rollout fast path of :class:`~rl.envs.GymWrapper`.

It produces exactly what the generic loop (``_step`` + partial ``reset``) produces, but
talks to gymnasium directly: actions are drawn for all steps at once and converted to
gym actions in one call, and every gym output is written with numpy into numpy views of
the preallocated torch buffers (zero-copy). No tensor or TensorDict is created per step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from tensordict import TensorDictBase

from ._gym_spaces import walk
from ._rollout import build_output, presample_actions, rollout_generic

if TYPE_CHECKING:
    from ._gym import GymWrapper

__all__ = ["gym_rollout"]


def _key(key: tuple[str, ...]):
    return key[0] if len(key) == 1 else key


def _obs_writer(leaves, views):
    """A function writing a gym observation at ``index`` of the numpy ``views``."""
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


def _gym_actions(env: GymWrapper, actions: list, max_steps: int) -> list:
    """The gym action of each step, from the presampled ``[T, *B, ...]`` tensors."""
    by_key = dict(actions)
    values = [by_key[_key(leaf.key)].cpu().numpy() for leaf in env._act_leaves]
    if env._simple_act:
        converted = env.actions_to_gym(values)
        if not env.is_vector and isinstance(env.gym_action_space, spaces.Discrete):
            return converted.tolist()
        return list(converted)
    return [env.actions_to_gym([v[t] for v in values]) for t in range(max_steps)]


def gym_rollout(
    env: GymWrapper,
    max_steps: int,
    tensordict: TensorDictBase,
    *,
    break_when_any_done: bool,
    break_when_all_done: bool,
) -> TensorDictBase:
    """Random-action rollout of a gym env from the reset ``tensordict``."""
    root_keys = set(env.observation_keys) | set(env.done_keys)
    if set(tensordict.keys(True, True)) != root_keys:
        return rollout_generic(
            env,
            max_steps,
            tensordict,
            policy=None,
            callback=None,
            break_when_any_done=break_when_any_done,
            break_when_all_done=break_when_all_done,
        )
    batch_size = env.batch_size
    nb = len(batch_size)
    actions = presample_actions(env, max_steps)
    gym_actions = _gym_actions(env, actions, max_steps)

    root, nxt = {}, {}
    root_views, next_views = [], []
    for leaf in env._obs_leaves:
        key = _key(leaf.key)
        spec = leaf.spec
        shape = (*batch_size, max_steps, *spec.shape[nb:])
        root[key] = torch.empty(shape, dtype=spec.dtype)
        nxt[key] = torch.empty(shape, dtype=spec.dtype)
        root_views.append(root[key].numpy())
        next_views.append(nxt[key].numpy())
        first = tensordict[key].cpu()
        root[key].select(nb, 0).copy_(first)
    flag_shape = (*batch_size, max_steps, 1)
    reward = torch.zeros(flag_shape, dtype=torch.float32)
    terminated = torch.zeros(flag_shape, dtype=torch.bool)
    truncated = torch.zeros(flag_shape, dtype=torch.bool)
    write_next = _obs_writer(env._obs_leaves, next_views)
    write_root = _obs_writer(env._obs_leaves, root_views)
    gym_env = env._env
    step_fn = gym_env.step
    steps = max_steps
    last = max_steps - 1
    if not env.is_vector:
        rew1, term1, trunc1 = (
            reward[:, 0].numpy(),
            terminated[:, 0].numpy(),
            truncated[:, 0].numpy(),
        )
        reset_fn = gym_env.reset
        stop_at_done = break_when_any_done or break_when_all_done
        for t in range(max_steps):
            obs, r, te, tr, _ = step_fn(gym_actions[t])
            write_next(t, obs)
            rew1[t] = r
            term1[t] = te
            trunc1[t] = tr
            if te or tr:
                if stop_at_done:
                    steps = t + 1
                    break
                if t < last:
                    obs, _ = reset_fn()
            if t < last:
                write_root(t + 1, obs)
    else:
        rew_np, term_np, trunc_np = reward.numpy(), terminated.numpy(), truncated.numpy()
        same_step = env.autoreset_mode == AutoresetMode.SAME_STEP
        reset_fn = gym_env.reset
        seen = None
        done = np.zeros(batch_size[0], dtype=np.bool_)
        for t in range(max_steps):
            obs, r, te, tr, info = step_fn(gym_actions[t])
            write_next((slice(None), t), obs)
            rew_np[:, t, 0] = r
            term_np[:, t, 0] = te
            trunc_np[:, t, 0] = tr
            done = te | tr
            if done.any():
                if same_step:
                    final = info["final_obs"]
                    for i in np.flatnonzero(info["_final_obs"]):
                        write_next((i, t), final[i])
                if break_when_any_done:
                    steps = t + 1
                    break
                if break_when_all_done:
                    seen = done.copy() if seen is None else seen | done
                    if seen.all():
                        steps = t + 1
                        break
                if not same_step and t < last:
                    obs, _ = reset_fn(options={"reset_mask": done})
                    done = np.zeros_like(done)
            if t < last:
                write_root((slice(None), t + 1), obs)
        env._last_obs = obs
        env._autoreset = done.copy() if same_step else np.zeros_like(done)

    for key in env.done_keys:
        buf = torch.zeros(flag_shape, dtype=torch.bool)
        buf.select(nb, 0).copy_(tensordict[key].cpu())
        root[key] = buf
    for key, value in actions:
        root[key] = value.movedim(0, nb).contiguous() if nb else value
    nxt["reward"] = reward
    nxt["done"] = terminated | truncated
    nxt["terminated"] = terminated
    nxt["truncated"] = truncated
    device = env.device
    on_cpu = device is None or device.type == "cpu"
    out = build_output(root, nxt, batch_size, steps, device if on_cpu else None, time_dim=nb)
    return out if on_cpu else out.to(device)
