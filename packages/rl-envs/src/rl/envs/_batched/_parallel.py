"""``ParallelEnv``: ``num_workers`` envs, each in its own process, exchanging shared memory."""

from __future__ import annotations

import multiprocessing as mp
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from .._env_base import EnvBase
from ._base import BatchedEnvBase
from ._options import batched_options, given_options, warn_without_effect
from ._pool import WorkerPool
from ._worker import OP_RESET, OP_STEP, OP_STEP_RESET

__all__ = ["ParallelEnv"]


class ParallelEnv(BatchedEnvBase):
    """Runs ``num_workers`` sub-environments in worker processes as one batched env.

    The parent allocates ``[num_workers, ...]`` buffers in shared memory once, from the
    specs, and sends them to the workers when they start. At each step the parent
    writes the actions into the shared input buffer and sends each worker a one-byte
    command; each worker steps its env, writes the results into its row of the shared
    output buffer and answers with one byte. Nothing is pickled per step.

    ``step_and_maybe_reset`` and policy-free rollouts reset done sub-envs inside the
    workers in the same round trip. Each worker uses one torch thread and (on Linux) the
    ``SCHED_BATCH`` policy, so that a woken worker does not preempt the parent.

    Workers start lazily, at the first ``reset``, ``step`` or ``set_seed`` (or at
    :meth:`start`); specs are read from one sub-env built in this process at
    construction (then closed).

    Failures: a worker that raises is reported here as a ``RuntimeError`` naming the
    worker and holding its traceback (the env stays usable); a worker that dies (e.g.
    killed) is reported within about a second with its exit code, and one that does not
    answer within ``timeout`` (30 s by default: stuck in a loop, stopped by SIGSTOP) is
    killed and reported as a :class:`~rl.core.workers.WorkerTimeoutError` naming its pid,
    its state and the command; all workers are then shut down (``reset()`` starts new
    ones), as they are when a wait is interrupted (``KeyboardInterrupt``: workers leave
    Ctrl-C to this process, which reports it once). ``close()``, garbage collection and
    interpreter exit stop every worker, stopped ones included; workers exit when the
    parent dies (on Linux the kernel kills them, even stopped, when this process, or the
    thread that started them, ends).

    ``set_seed(seed)`` seeds worker ``i`` with the ``i``-th seed of the chain each
    sub-env's ``set_seed`` returns (as :class:`SerialEnv`, so both give the same
    rollouts); until then each worker's torch generator gets its own seed drawn from
    this process's. Pickling a ParallelEnv sends its construction arguments: the copy
    starts its own workers.

    Args:
        num_workers: the number of sub-environments (worker processes).
        create_env_fn: a callable returning a sub-env (an :class:`EnvBase`), or a list
            of ``num_workers`` callables whose envs share the same specs. It is sent to
            the workers with cloudpickle (see :class:`EnvCreator`): importable
            callables, ``functools.partial`` objects and lambdas all work.
        create_env_kwargs: keyword arguments of ``create_env_fn`` (one dict, or a list
            of one dict per worker).
        device: the device of the returned tensors (default: the sub-env's).
        mp_start_method: ``"fork"``, ``"spawn"`` or ``"forkserver"``; the default
            (``None``) is ``"fork"`` on Linux while CUDA is not initialised in this
            process, else ``"spawn"`` (safe with CUDA; each worker imports torch, which
            takes seconds). Forked workers start at once and share the parent's (or the
            fork server's) memory pages, which also makes steps faster when there are
            more workers than cores (about 1.7x with 8 workers on 2 cores, see
            ``benchmarks/bench_batched_envs.py``).
        num_sub_threads: the number of torch threads of each worker.
        run_type_checks: check actions against ``action_spec`` at each step.
        timeout: seconds a reset, step or call may wait for a worker's answer (default
            30; ``None``: no limit). A worker that exceeds it (stuck in an endless loop,
            stopped) is killed and raises :class:`~rl.core.workers.WorkerTimeoutError`
            here (a ``RuntimeError`` and a ``TimeoutError``) about ``timeout`` seconds
            after the command, naming the worker, its pid and state and the command;
            every worker is shut down (``reset()`` starts new ones). The wait is the one
            the answers arrive on: the check costs nothing while workers answer.
            Start-up (spawned workers import torch) may take ``max(timeout, 600)``
            seconds. TorchRL has no such argument (its workers wait
            ``BATCHED_PIPE_TIMEOUT``, 10000 s by default).
        serial_for_single: with ``num_workers=1``, build a :class:`SerialEnv` instead
            (no worker process), as TorchRL does.
        num_threads: torch threads of this (the parent) process, set when the workers
            start (``None``: unchanged).
        use_buffers: ``False`` runs each sub-env in its own one-worker ParallelEnv (its
            own buffers, from its own specs) and stacks their outputs at each step:
            sub-envs whose entries differ in shape then work (``LazyStackedTensorDict``
            data). ``None`` (the default) and ``True``: one set of shared buffers.
            Either way, a sub-env whose own specs have entries that vary in shape (a
            ``StackedComposite`` group of agents with different spaces) cannot be laid
            out in shared memory: that raises ``ValueError`` (use :class:`SerialEnv`).
        daemon: the worker processes' daemon flag (TorchRL's default ``False``: workers
            may start processes of their own). Either way they are stopped by
            ``close()``, garbage collection and interpreter exit, and exit when this
            process dies.
        shutdown_timeout: seconds the workers get to exit on ``close()`` before they
            are terminated (default 10).
        share_individual_td: ``reset`` / ``step`` return a lazy stack of one
            tensordict per worker (TorchRL's layout then).
        pin_memory: pin the returned tensors (needs CUDA; ``ValueError`` otherwise).
        non_blocking: device copies of the outputs (``device=`` other than the CPU)
            are non-blocking.
        shared_memory, memmap, policy_proof, metadata_from_workers: TorchRL's arguments
            of its other transports; the workers always write shared-memory buffers,
            so a non-default value warns.
        allow_step_when_done, consolidate: accepted (nothing to consolidate: no
            tensordict is sent per step). Every option is kept in
            ``env.batched_options``.

    Raises:
        ValueError: bad ``num_workers``, list lengths, ``mp_start_method`` or
            ``timeout``, or sub-env specs whose entries vary in shape.
        WorkerTimeoutError: a worker did not answer within ``timeout`` (a
            ``TimeoutError``).
        TypeError: the factory cannot be pickled for a non-fork start method.
        RuntimeError: a worker failed (see above), or a step on a closed env.

    Examples:
        >>> import functools
        >>> from rl.envs import GymEnv, ParallelEnv
        >>> env = ParallelEnv(2, functools.partial(GymEnv, "CartPole-v1"))
        >>> _ = env.set_seed(0)
        >>> rollout = env.rollout(20, break_when_any_done=False)
        >>> rollout.batch_size
        torch.Size([2, 20])
        >>> env.close()
    """

    _share_memory = True
    #: who the workers' error messages name
    _worker_name = "ParallelEnv"

    def __new__(cls, num_workers=None, *args, serial_for_single: bool = False, **kwargs):
        if cls is ParallelEnv and kwargs.get("use_buffers") is False:
            from ._lazy_parallel import LazyParallelEnv

            return super().__new__(LazyParallelEnv)
        if cls is ParallelEnv and serial_for_single and num_workers == 1:
            # TorchRL's serial_for_single: one worker runs in process (no process start)
            from ._serial import SerialEnv

            kwargs.pop("mp_start_method", None)
            kwargs.pop("num_sub_threads", None)
            kwargs.pop("timeout", None)
            return SerialEnv(num_workers, *args, serial_for_single=True, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        num_workers: int,
        create_env_fn: Callable[..., EnvBase] | Sequence[Callable[..., EnvBase]],
        create_env_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        *,
        pin_memory: bool = False,
        share_individual_td: bool | None = None,
        shared_memory: bool = True,
        memmap: bool = False,
        policy_proof: Callable | None = None,
        device: torch.device | str | None = None,
        allow_step_when_done: bool = False,
        num_threads: int | None = None,
        num_sub_threads: int = 1,
        serial_for_single: bool = False,
        non_blocking: bool = False,
        mp_start_method: str | None = None,
        use_buffers: bool | None = None,
        metadata_from_workers: bool = False,
        consolidate: bool = True,
        daemon: bool = False,
        shutdown_timeout: float = 10.0,
        run_type_checks: bool = False,
        timeout: float | None = 30.0,
    ) -> None:
        options = given_options(locals())
        self.batched_options = batched_options(type(self).__name__, options)
        if shared_memory is False:
            warn_without_effect(
                type(self).__name__,
                {"shared_memory": False},
                {"shared_memory": "the buffers the workers write are always in shared memory"},
            )
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0
        ):
            raise ValueError(
                f"timeout must be a positive number of seconds or None, got {timeout!r}"
            )
        self.timeout = timeout
        if isinstance(num_sub_threads, bool) or not isinstance(num_sub_threads, int):
            raise TypeError(f"num_sub_threads must be an int, got {num_sub_threads!r}")
        if num_sub_threads < 1:
            raise ValueError(f"num_sub_threads must be at least 1, got {num_sub_threads}")
        self.num_sub_threads = num_sub_threads
        if mp_start_method is None:
            cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
            linux = sys.platform.startswith("linux")
            mp_start_method = "fork" if linux and not cuda else "spawn"
        methods = mp.get_all_start_methods()
        if mp_start_method not in methods:
            raise ValueError(f"mp_start_method must be one of {methods}, got {mp_start_method!r}")
        self.mp_start_method = mp_start_method
        self._pool: WorkerPool | None = None
        super().__init__(
            num_workers,
            create_env_fn,
            create_env_kwargs,
            device=device,
            run_type_checks=run_type_checks,
        )
        self._init_kwargs.update(
            mp_start_method=mp_start_method, num_sub_threads=num_sub_threads, timeout=timeout
        )
        self._creators_changed()
        self.is_closed = True

    def _creators_changed(self) -> None:
        # the creators themselves: forked, inherited; spawned, pickled by
        # torch.multiprocessing at the workers' start, so that an EnvCreator's shared
        # state (tensors in shared memory, multiprocessing values) stays shared. The
        # factories are checked now, for an error naming them before any worker starts
        if self.mp_start_method != "fork":
            for creator in self._creators:
                creator._check_picklable()
        self._payloads = list(self._creators)

    def _make_meta_env(self) -> EnvBase:
        env = self._check_env(self._creators[0]())
        try:
            return _MetaEnv(env)
        finally:
            env.close()

    def _start(self) -> None:
        if self.batched_options["num_threads"] is not None:  # TorchRL: this process's threads
            torch.set_num_threads(self.batched_options["num_threads"])
        self._pool = WorkerPool(
            self._payloads,
            self._shm_buffers,
            self._layout,
            self.mp_start_method,
            self._worker_name,
            num_threads=self.num_sub_threads,
            timeout=self.timeout,
            daemon=bool(self.batched_options["daemon"]),
            shutdown_timeout=float(self.batched_options["shutdown_timeout"]),
        )
        self._pending_promote = []
        self.is_closed = False

    def start(self) -> None:
        """Starts the worker processes now (else the first reset, step or seed does)."""
        if not self._running():
            self._start()

    def _running(self) -> bool:
        return self._pool is not None and not self._pool.closed

    def _ensure_started(self) -> None:
        if self._running():
            return
        if self._pool is None:
            self._start()
            return
        raise RuntimeError(
            "ParallelEnv has no running workers (close() was called or a worker died); "
            "call reset() to start new ones"
        )

    def _reset(self, tensordict):
        if not self._running():
            self._start()
        return super()._reset(tensordict)

    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int | None:
        if not self._running():
            self._start()
        return super().set_seed(seed, static_seed)

    @property
    def worker_pids(self) -> list[int]:
        """The process ids of the running workers (empty when none runs)."""
        pool = self._pool
        return [] if pool is None or pool.closed else list(pool.pids)

    def _do_step(self) -> None:
        self._pool.run(range(self.num_workers), OP_STEP, "step")

    def _do_step_workers(self, workers: list[int]) -> None:
        self._pool.run(workers, OP_STEP, "step")

    def _do_reset(self, workers: list[int]) -> None:
        self._pool.run(workers, OP_RESET, "reset")

    def _do_step_and_maybe_reset(self) -> list[int]:
        answers = self._pool.run(range(self.num_workers), OP_STEP_RESET, "step_and_maybe_reset")
        return [index for index, answer in sorted(answers.items()) if answer == b"R"]

    def _do_seed(self, index: int, seed: int | None, static_seed: bool) -> int | None:
        return self._pool.call(index, "seed", seed, static_seed)

    def _do_env_state(self, index: int) -> dict[str, Any]:
        return self._pool.call(index, "env_state")

    def _do_load_env_state(self, index: int, state: dict[str, Any]) -> None:
        self._pool.call(index, "load_env_state", state)

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Stops every worker process (idempotent); a later ``reset()`` restarts them."""
        if self._pool is not None:
            self._pool.close()
        self.is_closed = True


class _MetaEnv:
    """The specs and batch size of a sub-env, kept after the env itself is closed."""

    def __init__(self, env: EnvBase) -> None:
        self.batch_size = env.batch_size
        self.device = env.device
        self.output_spec = env.output_spec.clone()
        self.input_spec = env.input_spec.clone()
        self._step_reads_observations = env._step_reads_observations
