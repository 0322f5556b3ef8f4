"""The rollout kernel of ``SerialEnv`` / ``ParallelEnv`` (see :mod:`rl.envs.engine`).

Per step, the parent copies the action into the shared input buffer, lets the workers
step (resetting done sub-envs inside the same round trip, ``step_and_maybe_reset``) and
copies the outputs into the rollout's buffers, through numpy views (a numpy copy of a
few floats costs a fraction of a torch one). The last step does not reset done sub-envs:
the env is left as a step-by-step loop leaves it, so that a caller continuing the
rollout (a collector) resets them once, through ``reset``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from ..engine import BufferKernel

if TYPE_CHECKING:
    pass

__all__ = ["BatchedKernel"]


class BatchedKernel(BufferKernel):
    """The kernel of a batched env over its shared buffers."""

    root_inputs = None  # the workers' envs may read any root entry

    def start(self, buffers, tensordict, actions, *, eager, stops) -> None:
        env = self.env
        env._ensure_started()
        layout, shm = env._layout, env._shm_buffers
        nb = len(env.batch_size)
        self.prefix = (slice(None),) * nb
        self.shm, self.layout = shm, layout
        self.next_writes = []
        for key in layout.step_keys:
            out = shm.out[key]
            buf = buffers.next_buffer(key, out.shape[nb:], out.dtype)
            self.next_writes.append((buf.numpy(), out.numpy()))
        self.in_writes = self.state_writes = None
        if actions is not None:
            self.in_writes = [(shm.inputs[key].numpy(), value.numpy()) for key, value in actions]
            presampled = {key for key, _ in actions}
            # state inputs a sub-env reads back (StepCounter's step_count): the root's
            self.state_writes = []
            for key in layout.in_keys + layout.obs_in_keys:
                if key not in presampled and key in layout.reset_keys:
                    dst = shm.inputs[key].numpy()
                    dst[...] = tensordict.get(key).numpy()
                    self.state_writes.append((dst, shm.out[key].numpy(), shm.reset[key].numpy()))
        actions_keys = set(layout.action_keys)
        self.root_inputs = tuple(
            key for key in layout.in_keys + layout.obs_in_keys if key not in actions_keys
        )
        self.done = shm.out[layout.done_key].numpy()
        self.auto_reset = not stops
        self.last = buffers.max_steps - 1
        self.reset_workers: list = []

    def step(self, t: int, tensordict) -> np.ndarray:
        env = self.env
        idx = (*self.prefix, t)
        if self.in_writes is None:
            env._write_inputs(tensordict)
        else:
            for dst, src in self.in_writes:
                dst[...] = src[idx]
            if t > 0:
                workers = self.reset_workers
                for dst, out, reset in self.state_writes:
                    dst[...] = out
                    if workers:
                        dst[workers] = reset[workers]
        if self.auto_reset and t < self.last:
            workers = env._do_step_and_maybe_reset()
        else:
            env._do_step()
            workers = []
        env.__dict__["_pending_promote"] = workers  # per step: not nn.Module.__setattr__
        self.reset_workers = workers
        for dst, src in self.next_writes:
            dst[idx] = src
        if self.auto_reset and t < self.last and not workers:
            return False  # the workers reset every done sub-env: none was done
        return self.done

    def reset(self, t: int, done: np.ndarray, tensordict) -> dict:
        env, shm = self.env, self.shm
        workers = self.reset_workers
        source = shm.reset
        if not workers:  # no auto-reset in the step (a rollout that may stop early)
            workers = np.flatnonzero(done.reshape(env.num_workers, -1).any(-1)).tolist()
            # the workers reset the sub-envs of the mask only (as BatchedEnvBase._reset)
            shm.mask.copy_(torch.from_numpy(done).reshape(shm.mask.shape))
            env._do_reset(workers)
            env.__dict__["_pending_promote"] = []
            source = shm.out
        rows = np.asarray(workers, dtype=np.int64)
        entries = {}
        for key in self.layout.reset_keys:
            buf = source[key]
            try:  # copies (numpy fancy indexing): the shared buffers change at the next step
                entries[key] = (rows, buf.numpy()[rows])
            except (TypeError, RuntimeError):  # a dtype numpy lacks
                entries[key] = (torch.from_numpy(rows), buf[torch.from_numpy(rows)].clone())
        self.reset_workers = workers if source is shm.reset else []
        return entries
