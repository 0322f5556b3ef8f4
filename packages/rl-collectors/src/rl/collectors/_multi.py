"""``MultiSyncCollector`` and ``MultiAsyncCollector``: one collector per worker process."""

from __future__ import annotations

import inspect
import multiprocessing as mp
import multiprocessing.util
import os
import pickle
import sys
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import wait
from typing import Any

import cloudpickle
import torch
import torch.multiprocessing  # noqa: F401  (registers the shared-memory tensor pickler)
from tensordict import TensorDict, TensorDictBase
from torch import nn

from rl.core import ExplorationType
from rl.core.workers import WorkerTimeoutError, describe_process, exit_description, kill_after
from rl.core.workers import stop_processes as _stop_processes

from ._base import CollectorBase
from ._interruptor import Interruptor
from ._profile import ProfileConfig
from ._single import Collector
from ._worker import CallFailed, worker_main

__all__ = [
    "MultiCollector",
    "MultiSyncCollector",
    "MultiAsyncCollector",
    "MultiSyncDataCollector",
    "MultiaSyncDataCollector",
]

_POLL_S = 0.5
_JOIN_S = 2.0
#: seconds start-up may take at least when answers are limited (spawned workers import
#: torch, which takes minutes on a loaded machine)
_START_S = 600.0
#: the worker-death wording (rl.core.workers), under the name the distributed collectors use
_exit_description = exit_description
_GUARD_HINT = (
    "The worker processes of a {name} re-import the script that creates it (start method "
    '{method!r}); a script without an `if __name__ == "__main__":` guard starts the '
    "collector again in each worker. Put the code that builds and runs the collector "
    'under `if __name__ == "__main__":` (or a main() called from there), or pass '
    'mp_start_method="fork".'
)


def _main_lacks_guard() -> bool:
    """Whether ``__main__`` is a script file without a ``__name__ == "__main__"`` test."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path or not os.path.exists(path):
        return False
    try:
        with open(path, encoding="utf-8") as file:
            source = file.read()
    except OSError:
        return False
    return "__main__" not in source


def _in_bootstrap() -> bool:
    """True inside a spawned / forkserver child that is still importing ``__main__``."""
    return bool(getattr(mp.current_process(), "_inheriting", False))


def _shutdown(procs: list, conns: list, owner_pid: int) -> None:
    """Asks every worker to stop, then terminates and kills the ones that do not."""
    if os.getpid() != owner_pid:
        return
    for proc, conn in zip(procs, conns):
        if proc.is_alive():
            try:
                conn.send(("close",))
            except (OSError, ValueError):
                pass
    stop_processes(procs, _JOIN_S, _JOIN_S)
    for conn in conns:
        conn.close()
    procs.clear()
    conns.clear()


def stop_processes(procs: list, join_s: float, kill_join_s: float) -> None:
    """Waits ``join_s`` for the processes to exit, then terminates and kills the rest
    (waiting ``kill_join_s`` after each signal; stopped ones are not waited for): see
    :func:`rl.core.workers.stop_processes`."""
    _stop_processes(procs, join_s, kill_join_s)


def _check_threshold(value: float | None) -> float:
    """``preemptive_threshold`` as a float in ``[0, 1]`` (``None``: 1.0, no preemption)."""
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"preemptive_threshold must be a number in [0, 1] or None, got {value!r}")
    threshold = float(value)
    if not 0.0 <= threshold <= 1.0:  # (NaN fails too)
        raise ValueError(f"preemptive_threshold must be between 0.0 and 1.0, got {value!r}")
    return threshold


def _per_worker(value: Any, num_workers: int, name: str) -> list:
    if isinstance(value, list | tuple):
        if len(value) != num_workers:
            raise ValueError(
                f"{name} has {len(value)} entries, expected one per worker ({num_workers})"
            )
        return list(value)
    return [value] * num_workers


class _MultiCollectorMeta(type(CollectorBase)):
    """``MultiCollector(..., sync=...)`` builds the mode's class, as TorchRL's."""

    @property
    def __signature__(cls) -> inspect.Signature:
        """The constructor's signature (``__init__``'s without ``self``)."""
        signature = inspect.signature(cls.__init__)
        return signature.replace(parameters=tuple(signature.parameters.values())[1:])

    def __call__(cls, *args, sync: bool | None = None, **kwargs):
        if cls is MultiCollector:
            target = MultiSyncCollector if sync else MultiAsyncCollector
            return target(*args, **kwargs)
        if sync is not None:
            raise TypeError(f"{cls.__name__} takes no sync argument (it is one mode)")
        return super().__call__(*args, **kwargs)


class MultiCollector(CollectorBase, metaclass=_MultiCollectorMeta):
    """One collector per worker process: the base of :class:`MultiSyncCollector` and
    :class:`MultiAsyncCollector`, and TorchRL's entry point for them:
    ``MultiCollector(..., sync=True)`` builds a :class:`MultiSyncCollector`,
    ``sync=False`` (or ``None``) a :class:`MultiAsyncCollector` (the object returned has
    that type; the other arguments are theirs).

    Examples:
        >>> from rl.collectors import MultiCollector, MultiSyncCollector
        >>> from rl.envs import PendulumEnv
        >>> c = MultiCollector([PendulumEnv, PendulumEnv], None, sync=True, frames_per_batch=8)
        >>> type(c) is MultiSyncCollector and isinstance(c, MultiCollector)
        True
        >>> c.shutdown()
    """

    _sync: bool
    _hooks_in_workers = True
    _hooks: tuple = (None, None)

    @property
    def pre_collect_hook(self) -> Callable[[], None] | None:
        """Called in each worker process before it collects a batch (set at construction)."""
        return self._hooks[0]

    @pre_collect_hook.setter
    def pre_collect_hook(self, hook) -> None:
        self._refuse_hook("pre_collect_hook")

    @property
    def post_collect_hook(self) -> Callable[[TensorDictBase], None] | None:
        """Called in each worker process with each batch it collects (set at construction)."""
        return self._hooks[1]

    @post_collect_hook.setter
    def post_collect_hook(self, hook) -> None:
        self._refuse_hook("post_collect_hook")

    def _refuse_hook(self, name: str) -> None:
        raise NotImplementedError(
            f"{type(self).__name__}.{name} runs in the worker processes, which have "
            f"started: pass {name}= to the constructor"
        )

    def __init__(
        self,
        create_env_fn: Sequence[Callable] | Callable,
        policy: Callable[[TensorDictBase], TensorDictBase] | None = None,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        num_workers: int | None = None,
        device=None,
        storing_device=None,
        env_device=None,
        policy_device=None,
        create_env_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        max_frames_per_traj: int | None = None,
        init_random_frames: int | None = None,
        reset_at_each_iter: bool = False,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        split_trajs: bool | None = None,
        exploration_type: ExplorationType = ExplorationType.RANDOM,
        set_truncated: bool = False,
        use_buffers: bool | None = None,
        replay_buffer: Any = None,
        extend_buffer: bool = True,
        trust_policy: bool | None = None,
        compile_policy: bool | Mapping[str, Any] | None = None,
        cat_results: str | int | None = None,
        num_threads: int | None = None,
        num_sub_threads: int = 1,
        mp_start_method: str | None = None,
        worker_timeout: float | None = 60.0,
        pre_collect_hook: Callable[[], None] | None = None,
        post_collect_hook: Callable[[TensorDictBase], None] | None = None,
        trajs_per_batch: int | None = None,
        traj_format: str | None = None,
        trajs_per_write: int | None = None,
        track_policy_version: bool = False,
        policy_factory: Callable[[], Callable] | None = None,
        reset_when_done: bool = True,
        auto_register_policy_transforms: bool | None = None,
        weight_sync_schemes: Mapping[str, Any] | None = None,
        weight_recv_schemes: Mapping[str, Any] | None = None,
        cudagraph_policy: bool | Mapping[str, Any] | None = None,
        collector_class: type | None = None,
        update_at_each_batch: bool = False,
        preemptive_threshold: float | None = None,
        no_cuda_sync: bool = False,
        worker_idx: int | None = None,
        init_fn: Callable[[], None] | None = None,
        compact_obs: bool = False,
    ) -> None:
        self.closed = True  # until the workers run
        if collector_class is None:
            collector_class = Collector
        if not (isinstance(collector_class, type) and issubclass(collector_class, Collector)):
            raise TypeError(
                "collector_class must be Collector or a subclass of it (each worker runs "
                f"one), got {collector_class!r}"
            )
        self.collector_class = collector_class
        self.update_at_each_batch = bool(update_at_each_batch)
        self.preemptive_threshold = _check_threshold(preemptive_threshold)
        self.no_cuda_sync = bool(no_cuda_sync)
        self.worker_idx = worker_idx
        self.compact_obs = bool(compact_obs)
        # as TorchRL: with weight_sync_schemes a policy may come with the policy_factory
        # (the policy stays here, the source of the weights sent; the factory builds
        # each worker's)
        if not isinstance(policy_factory, list | tuple):
            self._check_reset_and_factory(
                reset_when_done, policy if weight_sync_schemes is None else None, policy_factory
            )
        else:
            self._check_reset_and_factory(reset_when_done, None, None)
            if policy is not None and weight_sync_schemes is None:
                raise TypeError(
                    "policy and policy_factory are mutually exclusive without weight_sync_schemes"
                )
        self.policy_factory = policy_factory
        if not isinstance(track_policy_version, bool):
            raise TypeError(
                "track_policy_version of a multiprocess collector must be a bool (each worker "
                f"counts its own version), got {type(track_policy_version).__name__}"
            )
        self.track_policy_version = track_policy_version
        if worker_timeout is not None and (
            isinstance(worker_timeout, bool)
            or not isinstance(worker_timeout, int | float)
            or not worker_timeout > 0
        ):
            raise ValueError(
                "worker_timeout must be a positive number of seconds or None, got "
                f"{worker_timeout!r}"
            )
        self.worker_timeout = worker_timeout
        if _in_bootstrap():
            method = mp_start_method or "spawn"
            raise RuntimeError(_GUARD_HINT.format(name=type(self).__name__, method=method))
        if isinstance(create_env_fn, list | tuple):
            if num_workers is not None and num_workers != len(create_env_fn):
                raise ValueError(
                    f"num_workers={num_workers} but create_env_fn has {len(create_env_fn)} "
                    "entries (one per worker)"
                )
            fns = list(create_env_fn)
        else:
            if num_workers is None:
                raise ValueError("pass a list of env factories or num_workers")
            fns = [create_env_fn] * num_workers
        self.num_workers = n = len(fns)
        if n < 1:
            raise ValueError("a multiprocess collector needs at least one worker")
        if isinstance(frames_per_batch, bool) or not isinstance(frames_per_batch, int):
            raise TypeError(f"frames_per_batch must be an int, got {frames_per_batch!r}")
        if self._sync and frames_per_batch % n:
            raise ValueError(
                f"frames_per_batch={frames_per_batch} must be a multiple of the number of "
                f"workers ({n}): each worker collects frames_per_batch / {n} frames"
            )
        if cat_results is not None and cat_results != "stack" and not isinstance(cat_results, int):
            raise ValueError(f"cat_results must be 'stack' or an int dim, got {cat_results!r}")
        if cat_results not in (None, "stack") and not self._sync:
            # "stack" says nothing for batches handed over one worker at a time: TorchRL
            # accepts it there
            raise ValueError("cat_results applies to MultiSyncCollector only")
        self.frames_per_batch = frames_per_batch
        self.total_frames = total_frames
        self.frames_per_batch_worker = frames_per_batch // n if self._sync else frames_per_batch
        self.cat_results = "stack" if cat_results is None else cat_results
        self.postproc = postproc
        self.split_trajs = bool(split_trajs)
        self.replay_buffer = replay_buffer
        self.extend_buffer = extend_buffer
        self.use_buffers = use_buffers
        self.policy = policy
        self._init_base()
        self._init_trajs(trajs_per_batch, traj_format, replay_buffer, split_trajs, trajs_per_write)
        self.closed = True
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        if mp_start_method is None:
            on_linux = sys.platform.startswith("linux")
            cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
            mp_start_method = "fork" if on_linux and not cuda else "spawn"
        self.mp_start_method = mp_start_method
        ctx = mp.get_context(mp_start_method)
        kwargs_per = _per_worker(create_env_kwargs, n, "create_env_kwargs")
        devices = {
            "device": _per_worker(device, n, "device"),
            "storing_device": _per_worker(storing_device, n, "storing_device"),
            "env_device": _per_worker(env_device, n, "env_device"),
            "policy_device": _per_worker(policy_device, n, "policy_device"),
        }
        common = {
            "frames_per_batch": None,
            "max_frames_per_traj": max_frames_per_traj,
            "init_random_frames": (init_random_frames or 0) // n,
            "reset_at_each_iter": reset_at_each_iter,
            "exploration_type": exploration_type,
            "set_truncated": set_truncated,
            "trust_policy": trust_policy,
            "compile_policy": compile_policy,
            # each worker runs them around its batches (in its own process)
            "pre_collect_hook": pre_collect_hook,
            "post_collect_hook": post_collect_hook,
            "track_policy_version": track_policy_version,
            "auto_register_policy_transforms": auto_register_policy_transforms,
            "cudagraph_policy": cudagraph_policy,
            "no_cuda_sync": no_cuda_sync,
            "compact_obs": compact_obs,
            # taken out by the worker: the class it builds, what it runs first
            "collector_class": collector_class,
            "init_fn": init_fn,
        }
        factories = _per_worker(policy_factory, n, "policy_factory")
        self.worker_policy_devices = [
            torch.device(d) if d is not None else None
            for d in (
                devices["policy_device"][i]
                if devices["policy_device"][i] is not None
                else devices["device"][i]
                for i in range(n)
            )
        ]
        self._hooks = (pre_collect_hook, post_collect_hook)
        # the policy's weights, in shared memory: update_policy_weights_ writes them
        self._weights = None
        self._version = None
        self._lock = ctx.Lock()
        # the flag the workers ask after each step; 1.0 waits for every worker (never
        # cut short): no flag, no question per step
        self.interruptor = (
            Interruptor(ctx) if self._sync and self.preemptive_threshold < 1.0 else None
        )
        # with a policy_factory, one copy built here gives the weights' layout (each
        # worker builds its own policy; update_policy_weights_ then needs the weights)
        if policy_factory is None or policy is not None:
            self._policy_templates = [policy] * n
        elif isinstance(policy_factory, list | tuple):
            self._policy_templates = [factory() for factory in factories]
        else:
            self._policy_templates = [policy_factory()] * n
        template = self._policy_templates[0]
        if isinstance(template, nn.Module) and any(True for _ in template.parameters()):
            if weight_sync_schemes is None:  # rl's own path: one shared copy
                self._weights = TensorDict.from_module(template).data.clone().share_memory_()
            self._version = torch.zeros(1, dtype=torch.int64).share_memory_()
        self._init_weight_sync(weight_sync_schemes, ctx=ctx)
        schemes = self._weight_sync_schemes
        self._procs: list = []
        self._conns: list = []
        self._finalizer = multiprocessing.util.Finalize(
            self, _shutdown, args=(self._procs, self._conns, os.getpid()), exitpriority=10
        )
        seeds = torch.randint(0, 2**62, (n,)).tolist()
        self._buffers: list = [None] * n
        self._pending: dict[int, int] = {}  # worker -> steps asked
        # worker -> (when its answer is due, the limit, what it was asked): see _wait_any
        self._asked: dict[int, tuple[float, float, str]] = {}
        self._batches = [0] * n  # batches asked of each worker
        # the kernel kills a worker when the thread that forked it ends: only a thread
        # that lives as long as this process may rely on it (a fork server's does)
        death_signal = (
            mp_start_method == "forkserver" or threading.current_thread() is threading.main_thread()
        )
        try:
            for i in range(n):
                fn = fns[i]
                if kwargs_per[i]:
                    fn = _Partial(fn, kwargs_per[i])
                wkw = {**common, **{k: v[i] for k, v in devices.items()}}
                wkw["frames_per_batch"] = self.frames_per_batch_worker
                wkw["worker_idx"] = i
                wkw["policy_factory"] = factories[i]
                payload: Any = (fn, policy if factories[i] is None else None, wkw)
                if mp_start_method != "fork":
                    payload = cloudpickle.dumps(payload)
                parent_conn, child_conn = ctx.Pipe(duplex=True)
                proc = ctx.Process(
                    target=worker_main,
                    args=(
                        i, n, payload, child_conn, os.getpid(), self._weights, self._version,
                        self._lock, num_sub_threads, seeds[i], death_signal, schemes,
                        self.interruptor,
                    ),
                    name=f"{type(self).__name__}-worker-{i}",
                    daemon=False,  # a worker may run a ParallelEnv (with its own processes)
                )  # fmt: skip
                self._conns.append(parent_conn)
                self._procs.append(proc)
                try:
                    proc.start()
                finally:
                    child_conn.close()
                self._expect(i, "starting (building its env and collector)", start=True)
            self._connect_weight_sync()  # the workers wait for their first weights
            if weight_recv_schemes is not None:
                self.register_scheme_receiver(weight_recv_schemes)
            self.closed = False
            self.env_batch_sizes = [
                torch.Size(self._answer(i, "start-up", "started")) for i in range(n)
            ]
            if total_frames != -1 and total_frames <= 0:
                raise ValueError(f"total_frames={total_frames} must be -1 or a positive int")
            for i, batch_size in enumerate(self.env_batch_sizes):
                n_env = max(batch_size.numel(), 1)
                if self.frames_per_batch_worker % n_env:  # rounded up, as TorchRL
                    warnings.warn(
                        f"frames_per_batch={frames_per_batch} gives {self.frames_per_batch_worker} "
                        f"frames per worker, not a multiple of worker {i}'s env batch size "
                        f"({n_env} envs, batch_size {list(batch_size)}): the worker collects "
                        f"{self._steps_for(i, self.frames_per_batch_worker) * n_env}",
                        UserWarning,
                        stacklevel=3,
                    )
                    break  # one warning says it
            if self._sync and len(set(self.env_batch_sizes)) > 1 and self.cat_results == "stack":
                raise ValueError(
                    f"cat_results='stack' needs the same env batch size in every worker, got "
                    f"{[list(b) for b in self.env_batch_sizes]}; pass cat_results=-1"
                )
        except BaseException:
            self._close()
            raise

    # -------------------------------------------------------------- talking to workers
    def _fail(self, message: str) -> None:
        self.closed = True
        self._close()
        raise RuntimeError(message)

    def _died(self, index: int, what: str) -> None:
        proc = self._procs[index]
        proc.join(_JOIN_S)
        msg = (
            f"{type(self).__name__} worker {index} (pid {proc.pid}) died during {what} with "
            f"{_exit_description(proc.exitcode)}; all workers were shut down"
        )
        if what == "start-up" and self.mp_start_method != "fork" and _main_lacks_guard():
            msg += ". " + _GUARD_HINT.format(name=type(self).__name__, method=self.mp_start_method)
        self._fail(msg)

    def _receive(self, index: int, what: str) -> tuple:
        conn = self._conns[index]
        asked = self._asked.get(index)
        if asked is None:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                self._died(index, what)
        else:
            # the answer has begun to arrive; a worker stopped while sending it (or while
            # handing over its batch buffer's file descriptor) is killed after the limit
            watch = None
            try:
                with kill_after(self._procs[index].pid, asked[1]) as watch:
                    msg = conn.recv()
            except (EOFError, OSError):
                if watch is None or watch.state is None:
                    self._died(index, what)
                raise  # (killed: reported below)
            finally:
                if watch is not None and watch.state is not None:
                    self._hung([index], {index: watch.state})
        if msg[0] == "error":
            if what == "start-up" and msg[2] in ("ValueError", "TypeError"):
                # bad arguments: the same error as a Collector built here would raise
                self.closed = True
                self._close()
                raise {"ValueError": ValueError, "TypeError": TypeError}[msg[2]](
                    f"{msg[3]} (in {type(self).__name__} worker {index})"
                )
            self._fail(
                f"{type(self).__name__} worker {index} raised during {what} (all workers were "
                f"shut down):\n{msg[1]}"
            )
        return msg

    def _expect(self, index: int, doing: str, start: bool = False) -> None:
        """Worker ``index`` was asked ``doing``: its answer is due within ``worker_timeout``
        seconds (at start-up, ``max(worker_timeout, 600)``)."""
        limit = self.worker_timeout
        if limit is None:
            return
        if start:
            limit = max(limit, _START_S)
        self._asked[index] = (time.monotonic() + limit, limit, doing)

    def _check_answering(self, indices: list[int], got: list[int]) -> None:
        """Kills the workers of ``indices`` whose answer is overdue and raises
        :class:`~rl.core.workers.WorkerTimeoutError` (``got``: those with a message)."""
        now = time.monotonic()
        late = [
            i
            for i in indices
            if i in self._asked
            and self._asked[i][0] <= now
            and i not in got
            and not self._conns[i].poll()
            and self._procs[i].is_alive()  # a dead one is reported as such
        ]
        if late:
            self._hung(late, {i: describe_process(self._procs[i].pid) for i in late})

    def _hung(self, late: list[int], states: dict[int, str]) -> None:
        """Kills the workers ``late`` (``states``: their pid and state before), shuts the
        others down and raises :class:`~rl.core.workers.WorkerTimeoutError`."""
        name = type(self).__name__
        workers = ", ".join(f"worker {i} ({states[i]}, {self._asked[i][2]})" for i in late)
        limit = max(self._asked[i][1] for i in late)
        _stop_processes([self._procs[i] for i in late], 0.0)  # no polite request: they hang
        self.closed = True
        self._close()
        raise WorkerTimeoutError(
            f"{name} {workers} did not answer within {limit} s; "
            f"{'it was' if len(late) == 1 else 'they were'} killed and all workers shut down "
            "(worker_timeout=None lifts the limit)"
        )

    def _wait_any(self, indices: list[int], what: str) -> list[int]:
        """Indices of ``indices`` with a message; a dead worker raises within ~0.5 s, one
        whose answer is overdue (see :meth:`_expect`) when it is due."""
        if not self._conns:
            raise RuntimeError(f"the {type(self).__name__} was shut down")
        conns = {self._conns[i]: i for i in indices}
        sentinels = {self._procs[i].sentinel: i for i in indices}
        asked = self._asked
        while True:
            wait_s = _POLL_S
            due = [asked[i][0] for i in indices if i in asked]
            if due:
                wait_s = min(_POLL_S, max(0.0, min(due) - time.monotonic()))
            ready = wait([*conns, *sentinels], timeout=wait_s)
            got = sorted({conns[r] for r in ready if r in conns})
            if due:
                self._check_answering(indices, got)
            if got:
                return got
            for r in ready:
                index = sentinels[r]
                if self._conns[index].poll():
                    return [index]  # its last message (an error) comes first
                self._died(index, what)

    def _answer(self, index: int, what: str, expected: str) -> Any:
        self._wait_any([index], what)
        msg = self._receive(index, what)
        self._asked.pop(index, None)
        if msg[0] != expected:
            self._fail(f"worker {index} answered {msg[0]!r} to {what}, expected {expected!r}")
        return msg[1]

    def _send(self, index: int, msg: tuple, doing: str | None = None) -> None:
        self._expect(index, doing or msg[0])
        conn = self._conns[index]
        watch = None
        try:
            if self.worker_timeout is None:
                conn.send(msg)
            else:  # a message larger than the pipe's buffer waits for the worker to read
                with kill_after(self._procs[index].pid, self.worker_timeout) as watch:
                    conn.send(msg)
        except (OSError, ValueError):
            if watch is None or watch.state is None:
                self._died(index, msg[0])
        finally:
            if watch is not None and watch.state is not None:
                self._hung([index], {index: watch.state})

    def _call(self, index: int, *msg: Any) -> Any:
        self._check_idle()
        self._send(index, msg)
        value = self._answer(index, msg[0], "result")
        if isinstance(value, CallFailed):  # a "call" whose method raised in the worker
            value.raise_in(f"{type(self).__name__} worker {index}")
        return value

    def _check_idle(self) -> None:
        if self.closed:
            raise RuntimeError(f"the {type(self).__name__} was shut down")
        if (
            self._thread_running
            and self._pause_state != "paused"
            and threading.current_thread() is not self._thread
        ):
            # the background thread talks to the workers: a second reader of the same
            # pipes would take its answers
            raise RuntimeError(
                f"the {type(self).__name__} is collecting in the background (start()): "
                "ask its workers inside `with collector.pause():`"
            )
        for index in list(self._pending):
            self._read_batch(index)  # an async batch in flight: dropped (not counted)

    def _ask(self, index: int, steps: int) -> None:
        self._batches[index] += 1
        self._send(index, ("collect", steps), f"collecting batch {self._batches[index]}")
        self._pending[index] = steps

    def _read_batch(self, index: int, copy: bool = True) -> TensorDictBase:
        """The batch worker ``index`` announced, copied out of its shared buffer (or a
        view of it with ``copy=False``, valid until the worker is asked again)."""
        self._wait_any([index], "collect")
        msg = self._receive(index, "collect")
        self._asked.pop(index, None)
        steps = self._pending.pop(index)
        if msg[0] == "batch":  # dynamic-shape entries: the worker sent the batch itself
            return msg[1]
        if msg[0] == "buffer":
            self._buffers[index] = msg[1]
        buf = self._buffers[index]
        view = buf[..., :steps] if buf.batch_size[-1] != steps else buf
        return view.clone() if copy else view

    def _steps_for(self, index: int, frames: int) -> int:
        """Steps of worker ``index``'s envs that collect ``frames`` (rounded up)."""
        return -(-frames // max(self.env_batch_sizes[index].numel(), 1))

    # ------------------------------------------------------------------ policy weights
    def update_policy_weights_(self, policy_or_weights: Any = None, **kwargs) -> None:
        """Pushes the policy's weights (or the given ones) to the workers.

        Without ``weight_sync_schemes`` the workers take them at the start of their next
        batch (or when asked for their ``state_dict``); with schemes, each scheme's
        :meth:`~rl.collectors.WeightSyncScheme.send` delivers them (``worker_ids``,
        ``model_id``, ``weights_dict`` as TorchRL; a ``{worker_idx: weights}`` dict
        updates each worker's own copy with ``per_worker_weights``).
        """
        worker_ids = kwargs.pop("worker_ids", None)
        if "policy_weights" in kwargs:
            policy_or_weights = kwargs.pop("policy_weights")
        if self._weight_sync_schemes:
            self._send_through_schemes(
                policy_or_weights, worker_ids, kwargs.pop("model_id", None),
                kwargs.pop("weights_dict", None),
            )  # fmt: skip
            if self._version is not None:
                with self._lock:
                    self._version += 1
            return
        if self._weights is None:
            return
        if policy_or_weights is None and self.policy is None:
            raise RuntimeError(
                f"{type(self).__name__} was built with a policy_factory: its workers' "
                "policies are not here, pass the weights (update_policy_weights_(weights))"
            )
        source = self.policy if policy_or_weights is None else policy_or_weights
        with self._lock:
            load_weights_into(self._weights, source)
            self._version += 1

    # ------------------------------------------------------------------ seeds and state
    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seeds worker ``i`` with the ``i``-th seed of the chain, then resets every
        worker's env (:meth:`reset`) so that the next batch starts from the seeded
        state, as TorchRL's; returns the next seed."""
        for index in range(self.num_workers):
            new_seed = self._call(index, "seed", seed, static_seed)
            if not static_seed:
                seed = new_seed
        self.reset()
        return seed

    def reset(self, reset_idx: Sequence[bool] | None = None) -> None:
        """Makes the next batch of each worker (or of those ``reset_idx`` marks) start
        from a reset env, as TorchRL's.

        A batch a worker collected ahead is dropped; its running trajectories end (the
        next ones get new ids: ids stay unique, where TorchRL shifts the running ids
        back to start at 0), and the trajectories being assembled here for
        ``trajs_per_batch`` are dropped.

        Args:
            reset_idx: one bool per worker (default: every worker).

        Raises:
            ValueError: ``reset_idx`` does not hold one entry per worker.
        """
        if reset_idx is None:
            reset_idx = [True] * self.num_workers
        reset_idx = [bool(flag) for flag in reset_idx]
        if len(reset_idx) != self.num_workers:
            raise ValueError(
                f"reset_idx has {len(reset_idx)} entries, expected one per worker "
                f"({self.num_workers})"
            )
        self._check_idle()
        if self._trajs is not None:
            self._trajs.clear()
        for index, flag in enumerate(reset_idx):
            if flag:
                self._call(index, "call", "reset", (), {})

    #: whether a resume from :meth:`state_dict` replays the same batches (the async
    #: collector's batch order depends on the workers' timing)
    _exact_resume = True

    def state_dict(self) -> dict:
        """Frames counted and each worker's collector state (see ``Collector.state_dict``);
        ``"exact"`` says whether resuming from it gives the batches an uninterrupted run
        would have given."""
        state: dict = {
            f"worker{i}": pickle.loads(self._call(i, "state_dict")) for i in range(self.num_workers)
        }
        state.update(frames=self._frames, iter=self._iter, exact=self._exact_resume)
        return state

    def load_state_dict(self, state: Mapping) -> None:
        self._frames = int(state["frames"])
        self._iter = int(state["iter"])
        if "workers" in state:  # rl's earlier layout: a list
            workers = list(state["workers"])
        else:
            workers = [state[f"worker{i}"] for i in range(self.num_workers)]
        for index, worker_state in enumerate(workers):
            self._call(index, "load_state_dict", pickle.dumps(worker_state))

    # ----------------------------------------------------------------------- shutdown
    def _close(self) -> None:
        self.closed = True
        self._shutdown_weight_sync()
        self._pending.clear()
        self._asked.clear()
        self._finalizer()

    _pausable = True

    def _quiesce(self) -> None:
        """Pausing the background collection: the batches the workers are collecting
        are finished and written (as TorchRL's workers finish theirs), so that no worker
        runs while paused."""
        try:
            for index in sorted(self._pending):
                self._deliver(self._read_batch(index))
        except BaseException:  # as in _produce: answers left in flight cannot be trusted
            if not self.closed:
                self.closed = True
                self._close()
            raise
        self._check_idle()  # (nothing left in flight: resets the async bookkeeping)

    def _produce(self) -> TensorDictBase | None:
        try:
            return self._produce_batch()
        except BaseException:
            # an interrupted wait leaves answers in flight: no later batch could trust them
            if not self.closed:
                self.closed = True
                self._close()
            raise

    def alive(self) -> list[bool]:
        """Whether each worker process runs."""
        return [proc.is_alive() for proc in self._procs]

    # ------------------------------------------------------------ monitoring, helpers
    @property
    def policy_version(self) -> int | None:
        """The number of weight updates pushed to the workers (``None`` without
        ``track_policy_version``); each worker's batches carry the version it used."""
        if not self.track_policy_version:
            return None
        return 0 if self._version is None else int(self._version[0])

    def stats(self, workers: str = "aggregate") -> dict[str, int | float | bool]:
        """Progress snapshot (see :meth:`Collector.stats`) plus ``"workers"`` and
        ``"workers_alive"``.

        Args:
            workers: ``"aggregate"`` (this process's counts), ``"per_worker"`` (each
                worker's own stats, keys ``"worker_<i>/<key>"``; asks the workers, which
                drops an asynchronous batch in flight) or ``"both"``.
        """
        if workers not in ("aggregate", "per_worker", "both"):
            raise ValueError(
                f"workers must be one of 'aggregate', 'per_worker', 'both', got {workers!r}"
            )
        out: dict[str, int | float | bool] = {}
        if workers != "per_worker":
            out.update(super().stats())
            out["workers"] = self.num_workers
            out["workers_alive"] = sum(self.alive()) if not self.closed else 0
        if workers != "aggregate":
            for index in range(self.num_workers):
                for key, value in self._call(index, "call", "stats", (), {}).items():
                    out[f"worker_{index}/{key}"] = value
        return out

    def get_distant_attr(self, attr: str) -> list[Any]:
        """The attribute at path ``attr`` of each worker's collector (a list, in worker
        order), e.g. ``"worker_idx"`` -> ``[0, 1]``."""
        return [
            self._call(i, "call", "get_distant_attr", (attr,), {}) for i in range(self.num_workers)
        ]

    def map_fn(
        self,
        method_name: str,
        list_of_args: list[tuple] | None = None,
        list_of_kwargs: list[dict] | None = None,
    ) -> list[Any]:
        """Calls ``method_name`` of worker ``i``'s collector with the ``i``-th arguments.

        Raises:
            ValueError: an argument list does not have one entry per worker.
        """
        n = self.num_workers
        list_of_args = [()] * n if list_of_args is None else list(list_of_args)
        list_of_kwargs = [{}] * n if list_of_kwargs is None else list(list_of_kwargs)
        if len(list_of_args) != n or len(list_of_kwargs) != n:
            raise ValueError(
                f"Expected {n} argument entries (one per worker), got {len(list_of_args)} "
                f"args and {len(list_of_kwargs)} kwargs"
            )
        return [
            self._call(i, "call", method_name, tuple(a), dict(k))
            for i, (a, k) in enumerate(zip(list_of_args, list_of_kwargs, strict=True))
        ]

    def _install_profile_hooks(self, config: ProfileConfig) -> None:
        """Each profiled worker runs its own profiler as its post-collect hook."""
        payload = cloudpickle.dumps(config)
        for index in range(self.num_workers):
            if config.should_profile_worker(index):
                self._call(index, "profile", payload)

    def disable_profile(self) -> None:
        """Stops the workers' profilers and restores their post-collect hooks."""
        config = self._profile_config
        if config is None:
            return
        self._profile_config = None
        if self.closed:
            return
        for index in range(self.num_workers):
            if config.should_profile_worker(index):
                self._call(index, "profile", None)

    def worker_model(self, model_id: str, worker_idx: int) -> Any:
        """The model at ``model_id`` that worker ``worker_idx`` starts from (its policy:
        ``policy``, or what its ``policy_factory`` built here)."""
        if model_id == "policy":
            return self._policy_templates[worker_idx]
        return self.get_model(model_id)

    @property
    def worker_pids(self) -> list[int]:
        return [proc.pid for proc in self._procs]


class _Partial:
    """``fn(**kwargs)`` (picklable where ``fn`` is)."""

    def __init__(self, fn: Callable, kwargs: Mapping) -> None:
        self.fn, self.kwargs = fn, dict(kwargs)

    def __call__(self):
        return self.fn(**self.kwargs)


def load_weights_into(shared: TensorDictBase, source: Any) -> None:
    if isinstance(source, nn.Module):
        source = TensorDict.from_module(source).data
    if isinstance(source, TensorDictBase):
        shared.update_(source)
        return
    if isinstance(source, Mapping):  # a state dict: "module.0.weight" -> nested keys
        shared.update_(TensorDict(dict(source)).unflatten_keys("."))
        return
    raise TypeError(
        "policy weights must be an nn.Module, a state dict or a TensorDict of parameters, "
        f"got {type(source).__name__}"
    )


class MultiSyncCollector(MultiCollector):
    """Worker processes that each collect ``frames_per_batch / num_workers`` frames per
    batch; every batch holds one piece of each worker, stacked (``cat_results="stack"``,
    ``[num_workers, *env_batch, T]``) or concatenated along a dim (``cat_results=-1``).

    Each worker runs a :class:`~rl.collectors.Collector` over its own env (one env or a
    batched env) and returns its batches through shared memory. The workers collect a
    batch when the iterator asks for it, so weights pushed with
    :meth:`update_policy_weights_` are used from the next batch on. A worker that
    raises, or dies (e.g. killed), makes the iterator raise here within about a second
    with the worker's traceback or exit signal; one that does not answer within
    ``worker_timeout`` (stopped, stuck in its env's ``step``) is killed and raises
    :class:`~rl.core.workers.WorkerTimeoutError` naming its pid, its state and what it
    was doing (``"collecting batch 12"``); every worker is then shut down.
    :meth:`shutdown`, garbage collection, an exception or ``KeyboardInterrupt`` in the
    loop (workers leave Ctrl-C to this process, which reports it once) and interpreter
    exit stop the workers, stopped ones included; workers exit when the parent dies (on
    Linux the kernel kills them, even stopped, when this process, or the thread that
    started them, ends).

    Args:
        create_env_fn: a list with one env factory (or env instance, which each worker
            uses as its own copy) per worker, or one factory and ``num_workers``.
            Factories are sent to the workers with cloudpickle (lambdas work).
        policy: as in :class:`~rl.collectors.Collector` (a copy runs in each worker).
        frames_per_batch: frames per batch, all workers together.
        total_frames: frames in all (exact); ``-1`` until :meth:`shutdown`.
        num_workers: the number of workers when ``create_env_fn`` is one factory.
        cat_results: ``"stack"`` (default) or the dim to concatenate the pieces along.
        preemptive_threshold: the share of workers (in ``[0, 1]``) whose whole batch
            piece is waited for: once ``int(num_workers * preemptive_threshold)``
            workers have delivered theirs, the others are asked (through an
            :class:`~rl.collectors.Interruptor` they check after each env step) to stop
            after the step they are taking and deliver what they have. Their missing
            steps are marked as TorchRL marks them: ``("collector", "traj_ids")`` is
            ``-1`` there (the entries are zeros) and, with ``cat_results="stack"``, a
            boolean ``("collector", "mask")`` entry flags the valid frames of every
            worker; with a ``cat_results`` dim, the missing steps are dropped before
            the pieces are joined (``-1``: along time; another dim needs every piece
            to keep the same length). Only the valid frames count toward
            ``total_frames``, as TorchRL's (a preempted run yields more batches).
            ``None`` (default) or ``1.0``: every
            worker delivers its whole piece, nothing is asked per step. A worker that
            finishes its piece first is never cut short; a slow one delivers at least
            one step. :class:`MultiAsyncCollector` checks and keeps the value only
            (its batches are never cut short), as TorchRL.
        num_threads: torch threads of this process; num_sub_threads: of each worker.
        mp_start_method: ``"fork"`` (default on Linux without CUDA initialized: workers
            start at once), ``"spawn"`` or ``"forkserver"``. With the last two the
            workers re-import the script, which then needs an
            ``if __name__ == "__main__":`` guard (an error says so when it is missing).
        worker_timeout: seconds a worker may take to answer a command (default 60;
            ``None``: no limit): a batch (``frames_per_batch / num_workers`` frames for
            :class:`MultiSyncCollector`, ``frames_per_batch`` for
            :class:`MultiAsyncCollector`), ``set_seed``, ``state_dict``; start-up may
            take ``max(worker_timeout, 600)``. A worker that exceeds it is killed, all
            workers are shut down and :class:`~rl.core.workers.WorkerTimeoutError` (a
            ``RuntimeError`` and a ``TimeoutError``) is raised about ``worker_timeout``
            seconds after the worker was asked. Raise it when a batch may take longer
            (slow simulators, large batches). The check is the wait the answers arrive
            on: it costs nothing while workers answer. Not a TorchRL argument (TorchRL
            has no limit by default: ``MAX_IDLE_COUNT``).
        policy_factory: builds each worker's policy in the worker (instead of
            ``policy``); :meth:`update_policy_weights_` then needs the weights.
        reset_when_done, auto_register_policy_transforms: as in ``Collector`` (the
            transforms are appended to each worker's env).
        trajs_per_batch, traj_format, trajs_per_write: as in ``Collector`` (the
            trajectories of every worker are assembled here, in completion order).
        track_policy_version: each worker writes ``"policy_version"`` (as
            ``Collector``'s), bumped once per :meth:`update_policy_weights_` when it
            takes the new weights (at the start of its next batch). Each worker's
            collector also knows its index (``worker_idx``, read with
            :meth:`get_distant_attr`).
        pre_collect_hook, post_collect_hook: run in each worker process around each of
            its batches (``post_collect_hook`` gets the worker's batch); picklable with
            cloudpickle for ``spawn`` workers. Set at construction: the attributes are
            read-only once the workers run.
        device, storing_device, env_device, policy_device: as in ``Collector``, one
            value or a list with one per worker.
        collector_class: the collector each worker runs: :class:`~rl.collectors.Collector`
            (default) or a subclass (sent to the workers with cloudpickle). TorchRL also
            takes a multiprocess collector class here (workers of workers); rl raises a
            ``TypeError`` for one.
        update_at_each_batch: call :meth:`update_policy_weights_` before each batch
            (:class:`MultiSyncCollector`) or after each batch is received
            (:class:`MultiAsyncCollector`), as TorchRL.
        init_fn: called (no argument) in each worker process first, before its env is
            built (seeding, logging set-up); sent with cloudpickle.
        worker_idx: this collector's own index among several (kept as ``worker_idx``);
            each worker's collector gets its index among this collector's workers.
        no_cuda_sync, compact_obs: as in :class:`~rl.collectors.Collector` (each worker's
            collector takes them).
        create_env_kwargs, max_frames_per_traj, init_random_frames,
        reset_at_each_iter, postproc, split_trajs, exploration_type, set_truncated,
        use_buffers, replay_buffer, extend_buffer, trust_policy, compile_policy: as in
            :class:`~rl.collectors.Collector` (``postproc``, ``split_trajs`` and the
            replay buffer act in this process).

    Examples:
        >>> from rl.collectors import MultiSyncCollector
        >>> from rl.envs import EnvCreator, GymEnv, SerialEnv
        >>> env_fn = lambda: SerialEnv(3, EnvCreator(lambda: GymEnv("Pendulum-v1")))
        >>> collector = MultiSyncCollector(
        ...     [env_fn, env_fn], None, frames_per_batch=60, total_frames=240
        ... )
        >>> print([tuple(batch.shape) for batch in collector])
        [(2, 3, 10), (2, 3, 10), (2, 3, 10), (2, 3, 10)]
        >>> collector.shutdown()
    """

    _sync = True

    def _produce_batch(self) -> TensorDictBase | None:
        if self.closed:
            return None
        left = self._frames_left()
        n = self.num_workers
        frames = self.frames_per_batch_worker
        if left is not None:
            frames = min(frames, -(-left // n))
            if frames <= 0:
                return None
        if self.update_at_each_batch:  # before each collection, as TorchRL
            self.update_policy_weights_()
        interruptor = self.interruptor
        if interruptor is not None:
            # raised before any worker is asked: a fast worker must not see the previous
            # batch's stop at its first step
            interruptor.start_collection()
        for index in range(n):
            self._ask(index, self._steps_for(index, frames))
        if interruptor is None:
            pieces = [self._read_batch(index, copy=False) for index in range(n)]
        else:
            pieces = self._read_preempting(interruptor)
        if self.cat_results == "stack":
            out = torch.stack(pieces, 0)
            if out.names[-1] != "time":  # a lazy stack (dynamic shapes) drops the names
                out.names = [None] * (out.batch_dims - 1) + ["time"]
            if interruptor is not None:
                mask = out.get(("collector", "traj_ids")) != -1
                out.set(("collector", "mask"), mask)
                # the batch is counted by its size: the padded steps are no frames
                self._frames -= int(mask.numel() - mask.sum())
            return out
        if interruptor is not None:
            pieces = _valid_steps(pieces, self.cat_results)
        return torch.cat(pieces, self.cat_results) if n > 1 else pieces[0].clone()

    def _read_preempting(self, interruptor: Interruptor) -> list[TensorDictBase]:
        """Every worker's piece (views of the shared buffers), in worker order; once
        ``int(num_workers * preemptive_threshold)`` have arrived, the workers still
        collecting are told to stop after their current step."""
        n = self.num_workers
        pieces: list = [None] * n
        wait_for = int(n * self.preemptive_threshold)
        waiting = list(range(n))
        while waiting:
            if n - len(waiting) >= wait_for:
                interruptor.stop_collection()
            for index in self._wait_any(waiting, "collect"):
                pieces[index] = self._read_batch(index, copy=False)
                waiting.remove(index)
        return pieces


def _valid_steps(pieces: list[TensorDictBase], dim: int) -> list[TensorDictBase]:
    """The pieces of a preempted batch without their missing steps (``("collector",
    "traj_ids")`` ``-1`` in every env), to be concatenated along ``dim``.

    Raises:
        RuntimeError: ``dim`` is not the time dim and the pieces kept different lengths.
    """
    kept = []
    for piece in pieces:
        valid = piece.get(("collector", "traj_ids")) != -1
        if valid.ndim > 1:
            valid = valid.flatten(0, -2).any(0)
        kept.append(piece[..., valid])
    lengths = [piece.batch_size[-1] for piece in kept]
    if dim not in (-1, kept[0].batch_dims - 1) and len(set(lengths)) > 1:
        raise RuntimeError(
            f"cat_results={dim} cannot join the pieces of a preempted batch: the workers "
            f"delivered {lengths} steps; pass cat_results=-1 (along time) or 'stack'"
        )
    return kept


class MultiAsyncCollector(MultiCollector):
    """Worker processes that each collect ``frames_per_batch`` frames per batch and hand
    them over as soon as they are ready (``[*env_batch, T]``, in completion order).

    A worker starts its next batch as soon as its previous one was read, so the workers
    collect while the training loop runs; weights pushed with
    :meth:`update_policy_weights_` are used from the next batch a worker starts.
    ``("collector", "traj_ids")`` are unique across workers (a worker's own id times
    ``num_workers`` plus its index). Failure handling, shutdown and arguments as in :class:`MultiSyncCollector`
    (without ``cat_results``).

    Examples:
        >>> from rl.collectors import MultiAsyncCollector
        >>> from rl.envs import EnvCreator, GymEnv, SerialEnv
        >>> env_fn = lambda: SerialEnv(3, EnvCreator(lambda: GymEnv("Pendulum-v1")))
        >>> collector = MultiAsyncCollector(
        ...     [env_fn, env_fn], None, frames_per_batch=60, total_frames=240
        ... )
        >>> print([tuple(batch.shape) for batch in collector])
        [(3, 20), (3, 20), (3, 20), (3, 20)]
        >>> collector.shutdown()
    """

    _exact_resume = False

    _sync = False

    def _init_async(self) -> None:
        if getattr(self, "_assigned", None) is None:
            self._assigned = self._frames
            self._ready_order: list[int] = []

    def _fill(self) -> None:
        """Asks every idle worker for a batch while frames remain unassigned."""
        for index in range(self.num_workers):
            if index in self._pending:
                continue
            frames = self.frames_per_batch_worker
            if self.total_frames >= 0:
                frames = min(frames, self.total_frames - self._assigned)
            steps = self._steps_for(index, frames)
            if steps <= 0:
                continue
            self._assigned += steps * max(self.env_batch_sizes[index].numel(), 1)
            self._ask(index, steps)

    def _produce_batch(self) -> TensorDictBase | None:
        if self.closed:
            return None
        self._init_async()
        if not self._ready_order:
            self._fill()
            if not self._pending:
                return None
            self._ready_order = self._wait_any(sorted(self._pending), "collect")
        index = self._ready_order.pop(0)
        batch = self._read_batch(index)
        if self.update_at_each_batch:  # after each collection, as TorchRL
            self.update_policy_weights_()
        self._fill()  # the worker starts its next batch while this one is used
        return batch

    def _check_idle(self) -> None:
        super()._check_idle()
        if getattr(self, "_assigned", None) is not None:
            self._assigned = self._frames
            self._ready_order = []


#: TorchRL's older names
MultiSyncDataCollector = MultiSyncCollector
MultiaSyncDataCollector = MultiAsyncCollector
