"""What runs next to each sub-environment: :class:`WorkerCore` and the worker process loop.

``WorkerCore`` binds one sub-env to its index of the shared buffers and implements the
operations (step, reset, step-and-maybe-reset, seed). ``SerialEnv`` calls the cores in
its own process; each ``ParallelEnv`` worker process runs one core in
:func:`worker_main`, driven by one-byte commands on a socket.

Wire protocol (parent -> worker, one byte): ``s`` step, ``r`` reset (mask in the shared
buffer), ``m`` step and reset if done, ``x`` a pickled ``(name, args)`` command follows,
``c`` close. Worker -> parent: ``k`` done, ``R`` done and reset (for ``m``), ``e`` an
exception (a pickled traceback string follows). A ``k`` answer to ``x`` is followed by
the pickled result. No TensorDict is ever pickled per step: data goes through the
shared buffers.
"""

from __future__ import annotations

import os
import pickle
import sys
import traceback
from typing import Any

import torch
from tensordict import TensorDict

from rl.core.workers import die_with_parent, ignore_interrupts

from ._buffers import BufferLayout, Buffers
from ._gym_step import gym_fast_reset, gym_fast_step

__all__ = ["WorkerCore", "worker_main"]

OP_STEP = b"s"
OP_RESET = b"r"
OP_STEP_RESET = b"m"
OP_CALL = b"x"
OP_CLOSE = b"c"
ANS_OK = b"k"
ANS_RESET = b"R"
ANS_ERROR = b"e"


class WorkerCore:
    """Runs sub-environment ``index`` against its slices of the batched env's buffers.

    Args:
        env: the sub-environment (an :class:`~rl.envs.EnvBase`).
        index: the worker index, i.e. the index of the buffers' leading dim it owns.
        buffers: the batched env's buffers.
        layout: which keys live in which buffer.

    Raises:
        ValueError: the sub-env's specs do not match the buffers (a key is missing or
            has another shape or dtype), e.g. when factories build different envs.
    """

    def __init__(self, env: Any, index: int, buffers: Buffers, layout: BufferLayout) -> None:
        self.env = env
        self.index = index
        self.batch_size = env.batch_size
        self.batched = len(self.batch_size) > 0
        self._check_specs(buffers)
        device = env.device
        # the buffers live on the CPU: inputs are moved to a sub-env on another device
        self.env_device = device if device is not None and device.type != "cpu" else None
        self.in_td = TensorDict({}, batch_size=self.batch_size)
        for key in layout.in_keys:
            self.in_td.set(key, buffers.inputs[key][index])
        for key in layout.obs_in_keys:
            self.in_td.set(key, buffers.inputs[key][index])
        self.step_pairs = [(key, buffers.out[key][index]) for key in layout.step_keys]
        self.reset_pairs = [(key, buffers.out[key][index]) for key in layout.reset_keys]
        # (key, reset-buffer view, out-buffer view) of each reset key
        self.auto_pairs = [
            (key, buffers.reset[key][index], buffers.out[key][index]) for key in layout.reset_keys
        ]
        self.mask = buffers.mask[index]
        self.done = buffers.out[layout.done_key][index]
        self.done_np = self.done.numpy()
        self.promote = False
        self.fill_done = False  # set once a _step output lacked a done entry
        self.fast_step = gym_fast_step(env, index, buffers, layout)
        self.fast_reset = gym_fast_reset(env, index, buffers, layout)

    def _check_specs(self, buffers: Buffers) -> None:
        specs = {}
        for composite in (*self.env.input_spec.values(), *self.env.output_spec.values()):
            for key in composite.keys(include_nested=True, leaves_only=True):
                specs[key] = composite[key]
        for role in (buffers.inputs, buffers.out):
            for key, buf in role.items():
                spec = specs.get(key)
                if spec is None:
                    raise ValueError(
                        f"sub-env {self.index} has no spec for key {key!r}, which the "
                        f"first sub-env declares (all sub-envs must have the same specs)"
                    )
                if tuple(spec.shape) != tuple(buf.shape[1:]) or spec.dtype != buf.dtype:
                    raise ValueError(
                        f"sub-env {self.index} declares {key!r} with shape "
                        f"{tuple(spec.shape)} and dtype {spec.dtype}, expected "
                        f"{tuple(buf.shape[1:])} and {buf.dtype} as the first sub-env"
                    )

    def _promote(self) -> None:
        for _, src, dst in self.auto_pairs:
            dst.copy_(src)
        self.promote = False

    def _reset_env(self, mask: torch.Tensor) -> Any:
        if not self.batched or bool(mask.all()):
            return self.env.reset()
        td = TensorDict({"_reset": mask}, batch_size=self.batch_size)
        for key, view in self.reset_pairs:
            td.set(key, view)
        if self.env_device is not None:
            td = td.to(self.env_device)
        return self.env.reset(td)

    def step(self) -> None:
        """Steps the sub-env with the shared inputs and writes its outputs."""
        if self.promote:
            self._promote()
        if self.fast_step is not None:
            self.fast_step()
            return
        in_td = self.in_td if self.env_device is None else self.in_td.to(self.env_device)
        out = self.env._step(in_td)
        if self.fill_done:
            self.env._complete_done(out)
        for key, dst in self.step_pairs:
            value = out.get(key)
            if value is None:
                # the copies read every done key, so a step that lacks one is caught here;
                # _step leaves done entries out (TorchRL fills them): fill them from now on
                self.fill_done = True
                self.env._complete_done(out)
                value = out[key]
            dst.copy_(value)

    def reset(self) -> None:
        """Resets the entries selected by the shared mask (all of them when unbatched)."""
        if self.promote:
            self._promote()
        if self.fast_reset is not None:
            self.fast_reset(False)
            return
        result = self._reset_env(self.mask.clone())
        for key, dst in self.reset_pairs:
            value = result.get(key, None)
            if value is not None:
                dst.copy_(value)

    def step_and_maybe_reset(self) -> bool:
        """Steps, then resets the done entries into the ``reset`` buffer; True if any."""
        if self.fast_step is not None and self.fast_reset is not None:
            if self.promote:
                self._promote()
            if not self.fast_step():
                return False
            self.fast_reset(True)
            self.promote = True
            return True
        self.step()
        if not self.done_np.any():
            return False
        result = self._reset_env(self.done.clone())
        for key, dst, current in self.auto_pairs:
            value = result.get(key, None)
            dst.copy_(value if value is not None else current)
        self.promote = True
        return True

    def call(self, name: str, args: tuple) -> Any:
        """Runs a non-hot command: ``"seed"`` (returns the next seed), ``"env_state"``,
        ``"load_env_state"`` (the env's state as tensors and plain data) or ``"close"``."""
        if name == "seed":
            return self.env.set_seed(*args)
        if name == "env_state":
            return self.env.env_state()
        if name == "load_env_state":
            return self.env.load_env_state(*args)
        if name == "close":
            return self.env.close()
        raise ValueError(
            f"unknown worker command {name!r}, expected 'seed', 'env_state', "
            "'load_env_state' or 'close'"
        )


def _send_error(fd: int, conn: Any) -> None:
    os.write(fd, ANS_ERROR)
    conn.send(traceback.format_exc())


def worker_main(
    index: int,
    creator_payload: bytes | Any,
    buffers: Buffers,
    layout: BufferLayout,
    conn: Any,
    parent_pid: int | None,
    other_conns: list | None = None,
    torch_seed: int | None = None,
    num_threads: int = 1,
    parent_death_signal: bool = True,
) -> None:
    """The body of a ``ParallelEnv`` worker process (see the module docstring).

    ``parent_pid``: the parent (``None``: this process's parent at start, the fork server
    of a ``"forkserver"`` worker); ``parent_death_signal``: whether the kernel may kill
    this worker when the parent thread that started it ends (see
    :func:`rl.core.workers.die_with_parent`).
    """
    die_with_parent(parent_pid, parent_death_signal)
    ignore_interrupts()
    torch.set_num_threads(num_threads)
    if hasattr(os, "SCHED_BATCH"):
        # a woken worker does not preempt the parent while it signals the other workers
        # (about 10% more steps/s with 8 workers on 2 cores)
        try:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        except OSError:
            pass
    if torch_seed is not None:
        torch.manual_seed(torch_seed)
    for other in other_conns or ():
        other.close()  # fork: ends inherited from the parent would keep sockets open
    fd = conn.fileno()
    try:
        creator = creator_payload
        if isinstance(creator_payload, bytes):
            creator = pickle.loads(creator_payload)
        env = creator()
        core = WorkerCore(env, index, buffers, layout)
    except Exception:
        _send_error(fd, conn)
        return
    os.write(fd, ANS_OK)
    read, write = os.read, os.write
    while True:
        try:
            op = read(fd, 1)
        except OSError:
            break
        if not op or op == OP_CLOSE:
            break
        try:
            if op == OP_STEP:
                core.step()
                write(fd, ANS_OK)
            elif op == OP_STEP_RESET:
                write(fd, ANS_RESET if core.step_and_maybe_reset() else ANS_OK)
            elif op == OP_RESET:
                core.reset()
                write(fd, ANS_OK)
            elif op == OP_CALL:
                name, args = conn.recv()
                payload = pickle.dumps(core.call(name, args))
                write(fd, ANS_OK)
                conn.send_bytes(payload)
            else:
                raise RuntimeError(f"worker {index} got an unknown command byte {op!r}")
        except Exception:
            _send_error(fd, conn)
    try:
        env.close()
    finally:
        conn.close()
        # skip the interpreter teardown (seconds with torch loaded): nothing to save
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
