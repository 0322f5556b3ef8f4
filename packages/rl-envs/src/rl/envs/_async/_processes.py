"""``ProcessorAsyncEnvPool``: each sub-env of an :class:`AsyncEnvPool` runs in a worker
process.

The workers are :class:`~rl.envs.ParallelEnv`'s (``rl.envs._batched``): same start-up,
shared buffers, one-byte commands, failure reports and shutdown. The pool drives them
one by one: a send writes the sub-env's row of the shared input buffer and sends the
command to that worker only; a receive waits (``WorkerPool.collect`` with ``at_least``)
for the workers that have answered and reads their rows of the shared output buffers.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from rl.core import Composite

from .._batched._parallel import ParallelEnv, _MetaEnv
from .._batched._worker import ANS_RESET, OP_RESET, OP_STEP, OP_STEP_RESET
from .._env_base import EnvBase
from .._utils import step_mdp
from ._pool import AsyncEnvPool

__all__ = ["ProcessorAsyncEnvPool"]

_OPCODES = {"step": OP_STEP, "reset": OP_RESET, "step_and_maybe_reset": OP_STEP_RESET}


class _GivenEnv:
    """A maker that returns an env the pool was given (the worker gets a copy of it)."""

    def __init__(self, env: EnvBase) -> None:
        self.env = env

    def __call__(self, **kwargs: Any) -> EnvBase:
        return self.env


class _PoolWorkers(ParallelEnv):
    """``ParallelEnv``'s workers and buffers; a given env read for its specs stays open."""

    _worker_name = "ProcessorAsyncEnvPool"

    def _make_meta_env(self) -> Any:
        given = isinstance(self.create_env_fn[0], _GivenEnv)
        env = self._check_env(self._creators[0]())
        try:
            return _MetaEnv(env)
        finally:
            if not given:
                env.close()


class ProcessorAsyncEnvPool(AsyncEnvPool):
    """An :class:`AsyncEnvPool` whose sub-envs run in worker processes.

    The workers are those of :class:`~rl.envs.ParallelEnv` (forked on Linux, spawned
    where CUDA is initialised): they exchange data through shared-memory buffers (no
    tensordict is pickled per step), a worker that raises is reported here with its
    traceback, one that dies within about a second, one that does not answer within 30
    seconds is killed; :meth:`shutdown` (``close()``), garbage collection and
    interpreter exit stop every worker. A failure shuts the whole pool down (results
    in flight are lost) and every later call raises a ``RuntimeError`` naming it
    (threads driving other sub-envs included); build a new pool to go on.

    As with ``ParallelEnv``, all sub-envs must have the same specs (a mismatch raises at
    start-up naming the entry); use :class:`ThreadingAsyncEnvPool` for sub-envs that
    differ. Env instances (rather than makers) are copied into their worker (by fork,
    or pickled by ``cloudpickle`` with spawn).

    Args: as :class:`AsyncEnvPool` (``backend`` is ``"multiprocessing"``).

    Examples:
        >>> import torch
        >>> from rl.envs import PendulumEnv, ProcessorAsyncEnvPool
        >>> env = ProcessorAsyncEnvPool([PendulumEnv, PendulumEnv])
        >>> reset = env.reset()
        >>> reset["action"] = torch.zeros(2, 1)
        >>> env.async_step_send(reset)
        >>> out = env.async_step_recv(min_get=2)
        >>> list(out["env_index"]), out["next", "reward"].shape
        ([0, 1], torch.Size([2, 1]))
        >>> env.close()
    """

    # seconds a worker may take to answer before it is killed (ParallelEnv's); None waits
    # without a limit (a subclass's choice: AsyncBatchedCollector's env processes, whose
    # envs may compile or load for longer)
    _worker_timeout: float | None = 30.0

    def _setup(self) -> tuple[list[Composite], torch.device | None]:
        makers = [_GivenEnv(m) if isinstance(m, EnvBase) else m for m in self.env_makers]
        # a plain attribute (not a submodule): the pool is built before Module.__init__
        self._failure: BaseException | None = None
        self.__dict__["_workers"] = _PoolWorkers(
            self.num_envs, makers, self.create_env_kwargs, timeout=self._worker_timeout
        )
        self._workers.start()
        if self.worker_affinity is not None:
            for pid, cpus in zip(self._workers.worker_pids, self.worker_affinity, strict=True):
                os.sched_setaffinity(pid, cpus)
        self._sent: dict[int, TensorDictBase] = {}
        specs = self._workers.specs
        return [specs[i] for i in range(self.num_envs)], self._workers.device

    @property
    def worker_pids(self) -> list[int]:
        """The process ids of the running workers (empty once shut down)."""
        return self._workers.worker_pids

    def _running_pool(self) -> Any:
        pool = self._workers._pool
        if pool is None or pool.closed:
            name = type(self).__name__
            failure = self.__dict__.get("_failure")
            if isinstance(failure, Exception):
                raise RuntimeError(
                    f"{name} is shut down: a worker failed ({failure}); build a new pool"
                ) from failure
            if failure is not None:  # KeyboardInterrupt and the like
                raise RuntimeError(
                    f"{name} is shut down: a wait for its workers was interrupted "
                    f"({type(failure).__name__}); build a new pool"
                ) from failure
            raise RuntimeError(f"{name} is shut down (close() was called); build a new pool")
        return pool

    def _check_open(self) -> None:
        self._running_pool()

    def _submit(self, index: int, op: str, tensordict: TensorDictBase | None) -> None:
        pool = self._running_pool()
        workers = self._workers
        buffers = workers._shm_buffers
        if op == "reset":
            mask = None if tensordict is None else tensordict.get("_reset", None)
            if mask is None:
                buffers.mask[index].fill_(True)
            else:
                buffers.mask[index].copy_(mask.reshape(buffers.mask[index].shape))
        else:
            self._write_inputs(index, tensordict)
            self._sent[index] = tensordict
        pool.send([index], _OPCODES[op])

    def _write_inputs(self, index: int, tensordict: TensorDictBase) -> None:
        workers = self._workers
        for key, buf, required in workers._in_pairs:
            value = tensordict.get(key, None)
            if value is None:
                if required:
                    raise KeyError(
                        f"step of env {index} needs the action key {key!r} (action_spec "
                        f"{self.full_action_spec[key][index]!r}) but the tensordict has keys "
                        f"{sorted(map(str, tensordict.keys(True, True)))}"
                    )
                continue
            row = buf[index]
            if value.shape != row.shape:
                raise ValueError(
                    f"{key!r} of env {index} has shape {tuple(value.shape)}, expected "
                    f"{tuple(row.shape)} from the spec of {type(self).__name__}"
                )
            row.copy_(value)
        for key, buf, last in workers._obs_pairs:
            value = tensordict.get(key, None)
            row = buf[index]
            if value is None or value.shape != row.shape or value.dtype != row.dtype:
                value = last[index]
            row.copy_(value)

    def _wait(self, indices: list[int], wait_s: float | None) -> dict[int, Any]:
        pool = self._running_pool()
        ops = sorted({self._inflight[i][0] for i in indices})
        try:
            answers = pool.collect(indices, " / ".join(ops), at_least=1, wait_s=wait_s)
        except BaseException as err:
            # threads waiting on other sub-envs then raise this failure, not a bare
            # "shut down"
            self._failure = err
            self.shutdown()
            raise
        return {index: self._result(index, answer) for index, answer in answers.items()}

    def _row(self, buffers: dict, keys: list, index: int) -> TensorDictBase:
        out = TensorDict(
            {key: buffers[key][index].clone() for key in keys},
            batch_size=self._child_specs[index].shape,
        )
        device = self.device
        return out if device is None or device.type == "cpu" else out.to(device)

    def _result(self, index: int, answer: bytes) -> Any:
        op = self._inflight[index][0]
        layout = self._workers._layout
        buffers = self._workers._shm_buffers
        if op == "reset":
            return self._row(buffers.out, layout.reset_keys, index)
        tensordict = self._sent.pop(index)
        tensordict.set("next", self._row(buffers.out, layout.step_keys, index))
        if op == "step":
            return tensordict
        root_next = step_mdp(
            tensordict,
            keep_other=True,
            exclude_action=False,
            reward_keys=self.reward_keys,
            action_keys=self.action_keys,
        )
        if answer == ANS_RESET:
            root_next.update(self._row(buffers.reset, layout.reset_keys, index))
        return tensordict, root_next

    def _seed(self, seed: int | None, static_seed: bool) -> int | None:
        self._running_pool()
        return self._workers.set_seed(seed, static_seed)

    def shutdown(self) -> None:
        """Stops every worker process (idempotent); leaves none behind."""
        workers = self.__dict__.get("_workers")
        if workers is None:
            return
        workers.close()
        self._inflight.clear()
        self._ready.clear()
        self._sent.clear()
