"""The policy-free rollout of batched envs, on numpy views of the preallocated buffers.

Same output as the generic ``EnvBase`` rollout loop, with done sub-envs reset inside
the workers in the step's round trip (``step_and_maybe_reset``). Per step, the parent
only copies the action into the shared input buffer and the outputs into the rollout
buffers, through numpy views (a numpy copy of a few floats costs a fraction of a torch
one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from tensordict import TensorDictBase

from .._rollout import build_output, presample_actions

if TYPE_CHECKING:
    from ._base import BatchedEnvBase

__all__ = ["batched_rollout"]


def batched_rollout(
    env: BatchedEnvBase,
    max_steps: int,
    tensordict: TensorDictBase,
    *,
    break_when_any_done: bool,
    break_when_all_done: bool,
) -> TensorDictBase:
    """Steps ``env`` ``max_steps`` times with random actions from the reset ``tensordict``.

    Returns:
        a TensorDict of batch size ``[*env.batch_size, T']``, ``T' <= max_steps``.
    """
    layout = env._layout
    bufs = env._buffers
    nb = len(env.batch_size)
    prefix = (slice(None),) * nb
    actions = presample_actions(env, max_steps)

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
    for key, value in actions:
        in_writes.append((bufs.inputs[key].numpy(), value.numpy()))
        root_bufs[key] = value.movedim(0, nb).contiguous()
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
        for dst, src in in_writes:
            dst[...] = src[t]
        if auto_reset:
            reset_workers = env._do_step_and_maybe_reset()
        else:
            env._do_step()
            reset_workers = []
        env._pending_promote = reset_workers
        idx = (*prefix, t)
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
    return build_output(root_bufs, next_bufs, env.batch_size, steps, env.device, nb)
