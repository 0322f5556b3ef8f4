"""The rollout fast path of batched envs, on numpy views of the preallocated buffers.

Same output as the generic ``EnvBase`` rollout loop, with done sub-envs reset inside
the workers in the step's round trip (``step_and_maybe_reset``). Per step, the parent
only copies the action into the shared input buffer and the outputs into the rollout
buffers, through numpy views (a numpy copy of a few floats costs a fraction of a torch
one).

With a policy, the policy reads a root TensorDict whose entries are views of the
rollout's own root buffers at step ``t`` (zero-copy); what it writes is recorded in
buffers allocated at step 0 and its action is copied into the shared input buffer. A
policy that writes a ``"next"`` entry makes the rollout fall back to the generic loop
(before the env moved). The last step does not reset done sub-envs: the env is left as
the generic loop leaves it, so that a caller continuing the rollout (a collector)
resets them once, through ``reset``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from .._partial_step import peek_step_mask
from .._rollout import build_output, presample_actions, rollout_generic

if TYPE_CHECKING:
    from ._base import BatchedEnvBase

__all__ = ["batched_rollout"]


class _UseGeneric(Exception):
    """The policy wrote a ``"next"`` entry at step 0 (the env has not moved)."""

    def __init__(self, tensordict: TensorDictBase) -> None:
        super().__init__("the policy wrote a 'next' entry")
        self.tensordict = tensordict


def batched_rollout(
    env: BatchedEnvBase,
    max_steps: int,
    tensordict: TensorDictBase,
    *,
    break_when_any_done: bool,
    break_when_all_done: bool,
    policy: Callable[[TensorDictBase], TensorDictBase] | None = None,
) -> TensorDictBase:
    """Steps ``env`` ``max_steps`` times from the reset ``tensordict``, with random
    actions (``policy=None``) or the actions ``policy`` writes.

    Returns:
        a TensorDict of batch size ``[*env.batch_size, T']``, ``T' <= max_steps``.
    """
    try:
        return _batched_rollout(
            env, max_steps, tensordict, break_when_any_done, break_when_all_done, policy
        )
    except _UseGeneric as use_generic:
        return rollout_generic(
            env, max_steps, use_generic.tensordict, policy=policy, callback=None,
            break_when_any_done=break_when_any_done, break_when_all_done=break_when_all_done,
            skip_first_policy=True,
        )  # fmt: skip


def _batched_rollout(
    env: BatchedEnvBase,
    max_steps: int,
    tensordict: TensorDictBase,
    break_when_any_done: bool,
    break_when_all_done: bool,
    policy: Callable[[TensorDictBase], TensorDictBase] | None,
) -> TensorDictBase:
    layout = env._layout
    bufs = env._shm_buffers
    batch_size = env.batch_size
    nb = len(batch_size)
    prefix = (slice(None),) * nb

    def alloc(value: torch.Tensor) -> torch.Tensor:
        return torch.empty((*value.shape[:nb], max_steps, *value.shape[nb:]), dtype=value.dtype)

    root_bufs, next_bufs = {}, {}
    root_writes = []  # (rollout buffer, out buffer, reset buffer) as numpy arrays
    for key in layout.reset_keys:
        value = tensordict.get(key)
        buf = root_bufs[key] = alloc(value)
        buf[(*prefix, 0)] = value
        root_writes.append((buf.numpy(), bufs.out[key].numpy(), bufs.reset[key].numpy()))
    in_writes = []
    state_writes = []  # (input buffer, root rollout buffer): state inputs the env reads back
    if policy is None:
        for key, value in presample_actions(env, max_steps):
            in_writes.append((bufs.inputs[key].numpy(), value.numpy()))
            root_bufs[key] = value.movedim(0, nb).contiguous()
        actions = set(layout.action_keys)
        for key in layout.in_keys + layout.obs_in_keys:
            if key not in actions and key in root_bufs:
                state_writes.append((bufs.inputs[key].numpy(), root_bufs[key].numpy()))
    else:
        # the root the policy reads: views of the root buffers at step t
        root_views = [(key, root_bufs[key]) for key in layout.reset_keys]
        td = TensorDict({}, batch_size=batch_size)
        extras: list = []  # (key, rollout buffer) of what the policy writes
    next_writes = []
    for key in layout.step_keys:
        buf = next_bufs[key] = alloc(bufs.out[key])
        next_writes.append((buf.numpy(), bufs.out[key].numpy()))
    done = bufs.out[layout.done_key].numpy()
    auto_reset = not break_when_any_done
    seen_done = None
    steps = max_steps
    last = max_steps - 1
    for t in range(max_steps):
        idx = (*prefix, t)
        if policy is None:
            for dst, src in in_writes:
                dst[...] = src[t]
            for dst, src in state_writes:  # e.g. StepCounter's step_count
                dst[...] = src[idx]
        else:
            provided = []
            for key, buf in root_views:
                view = buf[idx]
                td.set(key, view)
                provided.append((key, view))
            out = policy(td)
            if out is not None:
                td = out
            if t == 0:
                if "next" in td.keys() or "_step" in td.keys():
                    raise _UseGeneric(td)
                env._raise_missing_action(td)
                known = {key for key, _ in provided}
                for key in td.keys(True, True):
                    if key not in known and key != "_reset":
                        buf = root_bufs[key] = alloc(td.get(key))
                        extras.append((key, buf))
            elif peek_step_mask(td) is not None:
                raise RuntimeError(
                    "the policy wrote a '_step' mask after the first step of a batched fast "
                    "rollout; write it at every step (from the first) for partial steps"
                )
            for key, buf in extras:
                buf[idx] = td.get(key)
            for key, view in provided:
                value = td.get(key)
                if value is not view:  # the policy replaced a root entry
                    root_bufs[key][idx] = value
            env._write_inputs(td)
        if auto_reset and t < last:
            reset_workers = env._do_step_and_maybe_reset()
        else:
            env._do_step()
            reset_workers = []
        env.__dict__["_pending_promote"] = reset_workers  # per step: not nn.Module.__setattr__
        for dst, src in next_writes:
            dst[idx] = src
        if break_when_any_done and done.any():
            steps = t + 1
            break
        if break_when_all_done:
            seen_done = done.copy() if seen_done is None else np.logical_or(seen_done, done)
            if seen_done.all():
                steps = t + 1
                break
        if t == last:
            break
        idx = (*prefix, t + 1)
        for dst, src, reset_src in root_writes:
            dst[idx] = src
            if reset_workers:
                dst[idx][reset_workers] = reset_src[reset_workers]
    return build_output(root_bufs, next_bufs, batch_size, steps, env.device, nb)
