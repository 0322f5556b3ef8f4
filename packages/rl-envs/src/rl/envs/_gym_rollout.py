"""The policy-free rollout fast path of :class:`~rl.envs.GymWrapper`.

It produces exactly what the generic loop (``_step`` + partial ``reset``) produces, but
talks to gymnasium directly: actions are drawn for all steps at once and converted to
gym actions in one call, and every gym output is written with numpy into numpy views of
the preallocated torch buffers (zero-copy). No tensor or TensorDict is created per step.

A ``SyncVectorEnv`` in ``SAME_STEP`` mode is stepped through its sub-envs directly (the
same calls in the same order as ``SyncVectorEnv.step``: step, then reset when done), so
each sub-env writes straight into the buffers without gymnasium's concatenation, copies
and info dicts. An ``AsyncVectorEnv`` in ``SAME_STEP`` mode running random actions to the
end (no early break) is pipelined: the next step is sent to the workers as soon as this
step's observations are copied out of gymnasium's buffers, and the rest of this step's
bookkeeping runs while the workers step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import concatenate, create_empty_array, iterate
from tensordict import TensorDictBase

from ._gym_policy import PerEnvActions, PolicyActions, UseGenericLoop
from ._gym_spaces import walk
from ._rollout import build_output, presample_actions, rollout_generic

if TYPE_CHECKING:
    from ._gym import GymWrapper

__all__ = ["gym_rollout"]

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
    policy=None,
) -> TensorDictBase:
    """Rollout of a gym env from the reset ``tensordict``, random actions or ``policy``."""
    return fast_or_generic_rollout(
        _gym_rollout,
        env,
        max_steps,
        tensordict,
        policy=policy,
        break_when_any_done=break_when_any_done,
        break_when_all_done=break_when_all_done,
    )


def fast_or_generic_rollout(
    fast_loop,
    env,
    max_steps: int,
    tensordict: TensorDictBase,
    *,
    policy,
    break_when_any_done: bool,
    break_when_all_done: bool,
) -> TensorDictBase:
    """``fast_loop(env, max_steps, tensordict, break_when_any_done, break_when_all_done,
    policy)`` when ``tensordict`` holds exactly the env's observations and done flags,
    else (or when the loop raises :class:`UseGenericLoop` at step 0, before the env
    moved) the generic loop."""
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
        return fast_loop(
            env, max_steps, tensordict, break_when_any_done, break_when_all_done, policy
        )
    except UseGenericLoop as use_generic:
        return rollout_generic(
            env, max_steps, use_generic.tensordict, skip_first_policy=True, **generic
        )


def _gym_rollout(
    env: GymWrapper,
    max_steps: int,
    tensordict: TensorDictBase,
    break_when_any_done: bool,
    break_when_all_done: bool,
    policy,
) -> TensorDictBase:
    batch_size = env.batch_size
    leaves = env._obs_leaves
    # the root of step 0 (the policy path reuses ``tensordict`` for the following steps)
    initial = {key: tensordict[key] for key in (*env.observation_keys, *env.done_keys)}
    # root obs of step t + 1 is the next obs of step t, except after a reset: (t + 1, idx, arrays)
    overrides: list = []
    # time-first buffers: each step writes one contiguous row; laid out [*B, T] at the end
    next_obs = [
        torch.empty((max_steps, *leaf.spec.shape), dtype=leaf.spec.dtype) for leaf in leaves
    ]
    next_np = [buf.numpy() for buf in next_obs]
    reward = torch.zeros((max_steps, *batch_size), dtype=torch.float32)
    terminated = torch.zeros((max_steps, *batch_size), dtype=torch.bool)
    truncated = torch.zeros((max_steps, *batch_size), dtype=torch.bool)
    rew_np, term_np, trunc_np = reward.numpy(), terminated.numpy(), truncated.numpy()
    write_next = _obs_writer(leaves, next_np)
    if policy is None:
        actions = presample_actions(env, max_steps)
        gym_actions = _gym_actions(env, actions, max_steps)
    else:
        # a TransformedEnv's policy brings its own PolicyActions subclass
        driver = getattr(policy, "_rl_policy_actions", PolicyActions)
        gym_actions = driver(
            env, policy, tensordict, next_obs, overrides, max_steps, (reward, terminated, truncated)
        )
    gym_env = env._env
    step_fn = gym_env.step
    reset_fn = gym_env.reset
    steps = max_steps
    last = max_steps - 1
    if not env.is_vector:
        stop_at_done = break_when_any_done or break_when_all_done
        for t in range(max_steps):
            action = gym_actions[t]  # outside the try: a policy's own errors pass as they are
            try:
                obs, r, te, tr, _ = step_fn(action)
            except SIMULATOR_ERRORS as err:
                raise_if_rejected(env, action, err)
                raise
            write_next(t, obs)
            rew_np[t] = r
            term_np[t] = te
            trunc_np[t] = tr
            if te or tr:
                if stop_at_done:
                    steps = t + 1
                    break
                if t < last:
                    obs, _ = reset_fn()
                    overrides.append((t + 1, (), env._obs_arrays(obs)))
    elif isinstance(gym_env, SyncVectorEnv) and env.autoreset_mode == AutoresetMode.SAME_STEP:
        steps = _sync_vector_loop(
            env, gym_actions, write_next, rew_np, term_np, trunc_np, overrides,
            break_when_any_done, break_when_all_done,
        )  # fmt: skip
    elif (
        isinstance(gym_env, AsyncVectorEnv)
        and env.autoreset_mode == AutoresetMode.SAME_STEP
        and policy is None
        and not (break_when_any_done or break_when_all_done)
    ):
        _async_pipelined_loop(env, gym_actions, write_next, rew_np, term_np, trunc_np, overrides)
    else:
        same_step = env.autoreset_mode == AutoresetMode.SAME_STEP
        seen = None
        done = np.zeros(batch_size[0], dtype=np.bool_)
        for t in range(max_steps):
            action = gym_actions[t]
            try:
                obs, r, te, tr, info = step_fn(action)
            except SIMULATOR_ERRORS as err:
                raise_if_rejected(env, action, err)
                raise
            write_next(t, obs)
            rew_np[t] = r
            term_np[t] = te
            trunc_np[t] = tr
            done = te | tr
            if done.any():
                if same_step:
                    _write_final_obs(write_next, t, info)
                if break_when_any_done:
                    steps = t + 1
                    break
                if break_when_all_done:
                    seen = done.copy() if seen is None else seen | done
                    if seen.all():
                        steps = t + 1
                        break
                if t < last:
                    if not same_step:
                        obs, _ = reset_fn(options={"reset_mask": done})
                    idx = np.flatnonzero(done)
                    overrides.append((t + 1, (idx,), [a[idx] for a in env._obs_arrays(obs)]))
                    if not same_step:
                        done = np.zeros_like(done)
        env._last_obs = obs
        env._autoreset = done.copy() if same_step else np.zeros_like(done)

    obs_keys = [_key(leaf.key) for leaf in leaves]
    root, nxt = rollout_entries(
        env, obs_keys, next_obs, initial, overrides, (reward, terminated, truncated), steps,
        actions if policy is None else gym_actions,
    )  # fmt: skip
    device = env.device
    on_cpu = device is None or device.type == "cpu"
    out = build_output(root, nxt, batch_size, steps, device if on_cpu else None, time_dim=0)
    return out if on_cpu else out.to(device)


def rollout_entries(
    env,
    obs_keys: list,
    next_obs: list[torch.Tensor],
    initial: dict,
    overrides: list,
    flags: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    steps: int,
    actions: list | PolicyActions,
) -> tuple[dict, dict]:
    """The root and ``"next"`` entries of a fast rollout, time-first (``[T, *B, ...]``).

    Args:
        env: the env rolled out (its ``batch_size`` and ``done_keys``).
        obs_keys: the observation key of each buffer of ``next_obs``.
        next_obs: the ``"next"`` observations, ``[max_steps, *B, *F]``, filled up to ``steps``.
        initial: the root observations and done flags of step 0, by key.
        overrides: ``(t, idx, arrays)``: the root observations at ``(t, *idx)`` after a reset.
        flags: ``reward``, ``terminated`` and ``truncated``, ``[max_steps, *B]``.
        steps: the number of steps recorded.
        actions: the presampled ``(key, [max_steps, *B, ...])`` actions, or the
            :class:`PolicyActions` that ran the policy.
    """
    reward, terminated, truncated = flags
    max_steps = reward.shape[0]
    root, nxt = {}, {}
    for key, buf in zip(obs_keys, next_obs):
        root_buf = torch.empty_like(buf)
        root_buf[0] = initial[key].cpu()
        if steps > 1:
            root_buf[1:steps] = buf[: steps - 1]
        root[key] = root_buf
        nxt[key] = buf
    root_np = [root[key].numpy() for key in obs_keys]
    for t, idx, arrays in overrides:
        for view, array in zip(root_np, arrays):
            view[(t, *idx)] = array
    flag_shape = (max_steps, *env.batch_size, 1)
    for key in env.done_keys:
        buf = torch.zeros(flag_shape, dtype=torch.bool)
        buf[0] = initial[key].cpu()
        root[key] = buf
    if isinstance(actions, PolicyActions):
        root.update(actions.extras)
        for t, key, value in actions.root_overrides:
            if t < steps:
                root[key][t] = value
    else:
        root.update(actions)
    nxt["reward"] = reward.unsqueeze(-1)
    nxt["done"] = (terminated | truncated).unsqueeze(-1)
    nxt["terminated"] = terminated.unsqueeze(-1)
    nxt["truncated"] = truncated.unsqueeze(-1)
    return root, nxt


def _sync_vector_loop(
    env: GymWrapper,
    gym_actions: list,
    write_next,
    rew_np: np.ndarray,
    term_np: np.ndarray,
    trunc_np: np.ndarray,
    overrides: list,
    break_when_any_done: bool,
    break_when_all_done: bool,
) -> int:
    """Steps the sub-envs of a SAME_STEP ``SyncVectorEnv``; returns the number of steps."""
    vec = env._env
    sub_envs = vec.envs
    num_envs = len(sub_envs)
    max_steps = len(gym_actions)
    last = max_steps - 1
    if isinstance(gym_actions, PolicyActions):
        per_env = PerEnvActions(env, gym_actions)  # the policy runs step by step
    elif isinstance(vec.single_action_space, spaces.Discrete):
        per_env = [np.asarray(a).tolist() for a in gym_actions]
    else:
        per_env = [list(iterate(vec.action_space, a)) for a in gym_actions]
    latest = [None] * num_envs  # the current observation of each sub-env
    seen = np.zeros(num_envs, dtype=np.bool_)
    done = np.zeros(num_envs, dtype=np.bool_)
    steps = max_steps
    for t in range(max_steps):
        actions_t = per_env[t]
        any_done = False
        for i in range(num_envs):
            sub = sub_envs[i]
            try:
                obs, r, te, tr, _ = sub.step(actions_t[i])
            except SIMULATOR_ERRORS as err:
                raise_if_rejected(env, actions_t[i], err, index=i)
                raise
            write_next((t, i), obs)
            rew_np[t, i] = r
            term_np[t, i] = te
            trunc_np[t, i] = tr
            if te or tr:
                any_done = True
                done[i] = True
                obs, _ = sub.reset()
                if t < last and not break_when_any_done:
                    overrides.append((t + 1, (i,), env._obs_arrays(obs)))
            else:
                done[i] = False
            latest[i] = obs
        if any_done:
            if break_when_any_done:
                steps = t + 1
                break
            if break_when_all_done:
                seen |= done
                if seen.all():
                    steps = t + 1
                    # the overrides of this step's resets are past the end: harmless
                    break
    obs_space = vec.single_observation_space
    env._last_obs = concatenate(obs_space, latest, create_empty_array(obs_space, num_envs))
    env._autoreset = done.copy()
    return steps


def _async_pipelined_loop(
    env: GymWrapper,
    gym_actions: list,
    write_next,
    rew_np: np.ndarray,
    term_np: np.ndarray,
    trunc_np: np.ndarray,
    overrides: list,
) -> None:
    """Steps a SAME_STEP ``AsyncVectorEnv`` through all of ``gym_actions``, pipelined.

    The actions are known in advance and no step ends the rollout early, so step ``t + 1``
    is sent before step ``t``'s rewards, flags and final observations are written. Step
    ``t``'s observations live in gymnasium's shared buffer (``copy=False``), which the
    workers overwrite at step ``t + 1``: they (and the reset rows) are copied out first.
    """
    vec = env._env
    max_steps = len(gym_actions)
    last = max_steps - 1
    done = np.zeros(vec.num_envs, dtype=np.bool_)
    vec.step_async(gym_actions[0])
    for t in range(max_steps):
        try:
            obs, r, te, tr, info = vec.step_wait()
        except SIMULATOR_ERRORS as err:
            raise_if_rejected(env, gym_actions[t], err)
            raise
        write_next(t, obs)
        done = te | tr
        reset_rows = None
        if t < last:
            if done.any():
                idx = np.flatnonzero(done)
                reset_rows = (idx, [a[idx].copy() for a in env._obs_arrays(obs)])
            vec.step_async(gym_actions[t + 1])
        rew_np[t] = r
        term_np[t] = te
        trunc_np[t] = tr
        if done.any():
            _write_final_obs(write_next, t, info)
            if reset_rows is not None:
                overrides.append((t + 1, (reset_rows[0],), reset_rows[1]))
    env._last_obs = obs
    env._autoreset = done.copy()


def _write_final_obs(write_next, t: int, info: dict) -> None:
    """SAME_STEP vector envs return the reset observation of an ended sub-env and its
    final one in ``info``: the final one is what step ``t`` recorded as ``"next"``."""
    final = info["final_obs"]
    for i in np.flatnonzero(info["_final_obs"]):
        write_next((t, i), final[i])
