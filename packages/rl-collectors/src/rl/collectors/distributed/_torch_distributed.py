"""``DistributedCollector`` and ``DistributedSyncCollector``: collectors on the other
ranks of a ``torch.distributed`` process group (gloo on CPU, nccl on GPU).

Rank 0 is the learner: it iterates over the batches. Ranks ``1..N`` each run a local
collector and send their batches to rank 0 with point-to-point ops into preallocated
buffers (see ``_td_comm``). The workers are started here (``launcher="mp"``) or were
started by ``torchrun`` (``launcher="torchrun"``: every other rank calls
:meth:`DistributedCollector.run_worker`).
"""

from __future__ import annotations

import multiprocessing.util
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import torch
import torch.distributed as dist
from tensordict import TensorDictBase

from rl.core import ExplorationType

from .._base import CollectorBase
from .._single import Collector
from . import _td_comm as comm
from ._common import check_frames, policy_weights
from ._td_config import check_arguments, worker_configs
from ._td_launch import (
    default_start_method,
    exit_description,
    join_torchrun,
    launch_mp,
    stop_processes,
)
from ._td_links import Links
from ._td_worker import comm_device, torchrun_worker

__all__ = [
    "DistributedCollector",
    "DistributedSyncCollector",
    "DistributedDataCollector",
    "DistributedSyncDataCollector",
]

_GRACE_S = 2.0  # how long a dead worker may take to exit once its link failed


class DistributedCollector(CollectorBase):
    """Collectors on the other ranks of a ``torch.distributed`` process group.

    Rank 0 (this process, the learner) iterates; each worker rank runs a local
    ``collector_class`` over its own env and sends its batches to rank 0 with
    point-to-point ops (one flat payload per batch, received into a preallocated
    buffer). With ``sync=False`` (default) each batch is one worker's
    ``frames_per_batch`` frames (``[*env_batch, T]``), yielded as soon as it arrives;
    with ``sync=True`` every batch stacks ``frames_per_batch / num_workers`` frames of
    each worker (``[num_workers, *env_batch, T]``). ``total_frames`` is exact (the last
    requests are shortened). ``("collector", "traj_ids")`` are unique across workers
    (a worker's own id times ``num_workers`` plus its index).

    A worker is released for its next batch when the iterator asks for the next batch
    (after the loop body), so weights sent with :meth:`update_policy_weights_` in the
    loop body are used by every batch a worker starts afterwards. A worker that raises
    is reported with its traceback; a worker rank that dies (e.g. killed) is reported
    within seconds; every worker is then shut down. :meth:`shutdown` stops the workers
    and destroys the process group (when this collector created it).

    Args:
        create_env_fn: one env factory (or env) per worker (a list), or one for every
            worker (``num_workers`` of them with ``launcher="mp"``, one per worker rank
            with ``launcher="torchrun"``). Sent to the workers with cloudpickle.
        policy: as in :class:`~rl.collectors.Collector` (a copy runs on each worker);
            ``None`` acts at random.
        policy_factory: builds the policy on the worker instead (exclusive with
            ``policy``; weights then reach workers only when given to
            :meth:`update_policy_weights_`).
        frames_per_batch: frames per yielded batch (with ``sync=True``, all workers
            together, a multiple of ``num_workers``).
        total_frames: frames in all (exact); ``-1`` collects until :meth:`shutdown`.
        device, storing_device, env_device, policy_device: the workers' devices (one
            value, or one per worker); the batches reach the learner on the
            communication device (CPU for gloo).
        max_frames_per_traj, init_random_frames, reset_at_each_iter, exploration_type:
            as in :class:`~rl.collectors.Collector` (``init_random_frames`` is split
            among the workers).
        postproc, split_trajs: applied here, to each batch.
        collector_class: the workers' collector: :class:`~rl.collectors.Collector`
            (``"single"``, default), :class:`~rl.collectors.MultiSyncCollector`
            (``"sync"``) or :class:`~rl.collectors.MultiAsyncCollector` (``"async"``).
        collector_kwargs: more keyword arguments of the workers' collectors (one dict,
            or one per worker); they override the arguments above.
        num_workers_per_collector: envs (sub-processes) of a multiprocess
            ``collector_class`` on each worker.
        sync: stack one piece of every worker per batch (see above).
        slurm_kwargs: submitit's SLURM options; not supported (``ValueError``).
        backend: ``"gloo"`` (CPU) or ``"nccl"`` (GPU tensors between GPU ranks).
        update_after_each_batch: send the learner's weights to the worker(s) of a batch
            before they collect their next one.
        max_weight_update_interval: send the weights to a worker that collected more
            than this many batches since its last update (``-1``: never forced).
        update_interval: send the weights every ``update_interval`` batches.
        launcher: ``"mp"`` (default: the workers are processes started here, on this
            machine, in a process group on a free loopback port) or ``"torchrun"``
            (this is rank 0 of the group torchrun launched; the other ranks call
            :meth:`run_worker`). TorchRL's ``"submitit"`` launchers are not supported.
        tcp_port: the port of the ``"mp"`` rendezvous (default: a free port).
        num_workers: the number of workers when ``create_env_fn`` is one factory
            (``launcher="mp"``; default 1).
        timeout: seconds before an operation of the process group fails (a worker
            that hangs that long is reported); a batch must take less than this.
        mp_start_method: ``"fork"`` (default on Linux without CUDA initialized) or
            ``"spawn"`` (the script then needs an ``if __name__ == "__main__":``
            guard); ``launcher="mp"`` only.
        num_threads: torch threads of each ``"mp"`` worker (default 1).
        weight_updater, weight_sync_schemes, weight_recv_schemes: TorchRL's weight-sync
            plug-ins; not supported (``ValueError``).

    Raises:
        ValueError: bad arguments (an unknown backend or launcher, ``slurm_kwargs``,
            frames that cannot be split exactly among the workers, conflicting update
            options); TypeError: a wrong argument type.

    Examples:
        >>> from rl.collectors.distributed import DistributedDataCollector
        >>> from rl.envs import CartPoleEnv
        >>> collector = DistributedDataCollector(
        ...     [CartPoleEnv, CartPoleEnv], None, frames_per_batch=50, total_frames=200
        ... )
        >>> [batch.numel() for batch in collector]
        [50, 50, 50, 50]
        >>> collector.shutdown()
    """

    _push_first = False

    def __init__(
        self,
        create_env_fn: Sequence[Callable] | Callable,
        policy: Callable[[TensorDictBase], TensorDictBase] | None = None,
        *,
        policy_factory: Callable[[], Callable] | Sequence[Callable[[], Callable]] | None = None,
        frames_per_batch: int,
        total_frames: int = -1,
        device=None,
        storing_device=None,
        env_device=None,
        policy_device=None,
        max_frames_per_traj: int = -1,
        init_random_frames: int = -1,
        reset_at_each_iter: bool = False,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        split_trajs: bool = False,
        exploration_type: ExplorationType = ExplorationType.RANDOM,
        collector_class: type | Literal["single", "sync", "async"] = Collector,
        collector_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        num_workers_per_collector: int = 1,
        sync: bool = False,
        slurm_kwargs: Mapping[str, Any] | None = None,
        backend: Literal["gloo", "nccl"] = "gloo",
        update_after_each_batch: bool = False,
        max_weight_update_interval: int = -1,
        update_interval: int | None = None,
        launcher: Literal["mp", "torchrun"] = "mp",
        tcp_port: int | None = None,
        num_workers: int | None = None,
        timeout: float = 1800.0,
        mp_start_method: str | None = None,
        num_threads: int | None = 1,
        weight_updater: Any = None,
        weight_sync_schemes: Any = None,
        weight_recv_schemes: Any = None,
    ) -> None:
        self.closed = True  # until the workers run
        self._owner_pid = os.getpid()
        self._procs: list = []
        self._own_group = False
        name = type(self).__name__
        collector_class = check_arguments(
            name, weight_updater=weight_updater, weight_sync_schemes=weight_sync_schemes,
            weight_recv_schemes=weight_recv_schemes, launcher=launcher,
            slurm_kwargs=slurm_kwargs, backend=backend, frames_per_batch=frames_per_batch,
            total_frames=total_frames, update_after_each_batch=update_after_each_batch,
            max_weight_update_interval=max_weight_update_interval,
            update_interval=update_interval, policy=policy, policy_factory=policy_factory,
            collector_class=collector_class, mp_start_method=mp_start_method,
        )  # fmt: skip
        self.launcher = launcher
        self.backend = backend
        self.collector_class = collector_class
        self.frames_per_batch = frames_per_batch
        self.total_frames = total_frames
        self.postproc = postproc
        self.split_trajs = bool(split_trajs)
        self.replay_buffer = None
        self.policy = policy
        self.update_after_each_batch = update_after_each_batch
        self.max_weight_update_interval = max_weight_update_interval
        self.update_interval = update_interval
        self.timeout = float(timeout)
        self._sync = bool(sync)
        self._init_base()
        self.closed = True

        def configs(n: int) -> list[dict]:
            self._frames_per_batch_worker, out = worker_configs(
                n, sync=self._sync, frames_per_batch=frames_per_batch,
                create_env_fn=create_env_fn, policy=policy, policy_factory=policy_factory,
                collector_class=collector_class, collector_kwargs=collector_kwargs,
                num_workers_per_collector=num_workers_per_collector,
                devices={"device": device, "storing_device": storing_device,
                         "env_device": env_device, "policy_device": policy_device},
                common={"max_frames_per_traj": max_frames_per_traj,
                        "init_random_frames": init_random_frames,
                        "reset_at_each_iter": reset_at_each_iter,
                        "exploration_type": exploration_type},
            )  # fmt: skip
            return out

        self._device = comm_device(backend)
        if launcher == "mp":
            if isinstance(create_env_fn, list | tuple):
                if num_workers is not None and num_workers != len(create_env_fn):
                    raise ValueError(
                        f"num_workers={num_workers} but create_env_fn has "
                        f"{len(create_env_fn)} entries (one per worker)"
                    )
                n = len(create_env_fn)
            else:
                n = 1 if num_workers is None else num_workers
            if n < 1:
                raise ValueError(f"a {name} needs at least one worker, got {n}")
            mp_configs = configs(n)  # checks the arguments before starting anything
            self.mp_start_method = mp_start_method or default_start_method()
            self._procs, self._store = launch_mp(
                num_workers=n, configs=mp_configs, backend=backend, tcp_port=tcp_port,
                timeout=self.timeout, start_method=self.mp_start_method,
                num_threads=num_threads, name=name,
            )  # fmt: skip
            self._own_group = True
        else:
            self.mp_start_method = None
            self._store = None
            self._own_group, n = join_torchrun(
                backend=backend, timeout=self.timeout, make_configs=configs, name=name
            )
        self.num_workers = n
        self._ranks = list(range(1, n + 1))
        self._finalizer = multiprocessing.util.Finalize(
            self, stop_processes, args=(self._procs, 0.0), exitpriority=10
        )
        self._links = Links(self._ranks, self._device, self._procs, self._lost, self._raised)
        self._pending: dict[int, int] = {}  # rank -> frames of the batch it collects
        self._since_update = dict.fromkeys(self._ranks, 0)
        self._weights_layout: dict[int, comm.Layout | None] = dict.fromkeys(self._ranks)
        self._assigned = 0
        self.closed = False
        try:
            self.frames_per_step: dict[int, int] = {}
            self.worker_pids: list[int] = []
            for rank in self._ranks:
                self._links.expect(rank)
            for _ in self._ranks:
                rank, (per_step, pid) = self._links.wait_one("start-up")
                self.frames_per_step[rank] = per_step
            self.worker_pids = [p.pid for p in self._procs] if self._procs else []
            check_frames(
                self.frames_per_step, frames_per_batch=frames_per_batch, sync=self._sync,
                total_frames=total_frames,
            )  # fmt: skip
        except BaseException:
            if not self.closed:
                self.closed = True
                self._close()
            raise

    # -------------------------------------------------------------- failures
    def _raised(self, rank: int, what: str, info: Mapping) -> None:
        self._fail(
            f"{type(self).__name__} worker rank {rank} raised during {what} (all workers "
            f"were shut down):\n{info['traceback']}",
            info if what == "start-up" else None,
        )

    def _lost(self, rank: int, what: str, exc: BaseException | None) -> None:
        name = type(self).__name__
        if self._procs:
            proc = self._procs[rank - 1]
            proc.join(_GRACE_S)
            if not proc.is_alive():
                self._fail(
                    f"{name} worker rank {rank} (pid {proc.pid}) died during {what} with "
                    f"{exit_description(proc.exitcode)}; all workers were shut down"
                )
        self._fail(
            f"{name} lost worker rank {rank} during {what}: it died or hung longer than "
            f"timeout={self.timeout} s ({exc}); all workers were shut down"
        )

    def _fail(self, message: str, start_error: Mapping | None = None) -> None:
        self.closed = True
        self._close(failed=True)
        if start_error is not None and start_error["type"] in ("ValueError", "TypeError"):
            # bad arguments: the error a local collector built with them raises
            error = ValueError if start_error["type"] == "ValueError" else TypeError
            raise error(f"{start_error['message']} (in {type(self).__name__} worker)")
        raise RuntimeError(message)

    # ---------------------------------------------------------------- weights
    def update_policy_weights_(
        self, policy_or_weights: Any = None, *, worker_ids: int | Sequence[int] | None = None,
        **kwargs: Any,
    ) -> None:  # fmt: skip
        """Sends the learner's policy weights (or the given module, state dict or
        TensorDict of parameters) to the workers (all, or the ranks ``worker_ids``).

        Each worker loads them before the next batch it starts: every batch requested
        after this call is collected with them.
        """
        if self.closed:
            raise RuntimeError(f"the {type(self).__name__} was shut down")
        weights = policy_weights(self.policy if policy_or_weights is None else policy_or_weights)
        if weights is None:
            return
        ranks = self._ranks if worker_ids is None else (
            [worker_ids] if isinstance(worker_ids, int) else list(worker_ids))  # fmt: skip
        for rank in ranks:
            if rank not in self._since_update:
                raise ValueError(f"worker_ids are worker ranks {self._ranks}, got {rank}")
        layout = comm.Layout.of(weights)
        payload = torch.empty(layout.nbytes, dtype=torch.uint8, device=self._device)
        layout.pack(weights, payload)
        layout_bytes = layout.to_bytes()
        encoded = torch.frombuffer(bytearray(layout_bytes), dtype=torch.uint8).to(self._device)
        for rank in ranks:
            new = self._weights_layout[rank] != layout
            header = torch.tensor([comm.WEIGHTS, layout.nbytes, int(new), len(layout_bytes)],
                                  dtype=torch.int64, device=self._device)  # fmt: skip
            self._links.isend(rank, header, "weight update")
            if new:
                self._links.isend(rank, encoded, "weight update")
                self._weights_layout[rank] = layout
            if layout.nbytes:
                self._links.isend(rank, payload, "weight update")
            self._since_update[rank] = 0

    def _weights_due(self, rank: int) -> bool:
        if self.update_after_each_batch:
            return self._since_update[rank] > 0
        if self.update_interval is not None:
            if self._iter == 0:
                return self._push_first and self._since_update[rank] == 0
            return self._iter % self.update_interval == 0 and self._since_update[rank] > 0
        if self.max_weight_update_interval > -1:
            return self._since_update[rank] > self.max_weight_update_interval
        return False

    def _release(self, rank: int, frames: int) -> None:
        if self._weights_due(rank):
            self.update_policy_weights_(worker_ids=rank)
        self._links.command(rank, comm.COLLECT, frames, what="collect")
        self._links.expect(rank)
        self._pending[rank] = frames

    # ---------------------------------------------------------------- batches
    def _produce(self) -> TensorDictBase | None:
        if self.closed:
            return None
        try:
            return self._produce_sync() if self._sync else self._produce_async()
        except BaseException:
            if not self.closed:  # an interrupted wait leaves answers in flight
                self.closed = True
                self._close(failed=True)
            raise

    def _produce_sync(self) -> TensorDictBase | None:
        n = self.num_workers
        frames = self._frames_per_batch_worker
        left = self._frames_left()
        if left is not None:
            frames = min(frames, left // n)
            if frames <= 0:
                return None
        for rank in self._ranks:
            self._release(rank, frames)
        views = {}
        for _ in self._ranks:
            rank, view = self._links.wait_one("collect")
            views[rank] = view
            del self._pending[rank]
            self._since_update[rank] += 1
        pieces = [views[rank] for rank in self._ranks]
        layouts = [self._links.layout(rank) for rank in self._ranks]
        if len(set(layouts)) > 1:
            self._fail(
                f"sync=True stacks one piece per worker, but the workers' batches differ: {layouts}"
            )
        return torch.stack(pieces, 0)

    def _produce_async(self) -> TensorDictBase | None:
        for rank in self._ranks:
            if rank in self._pending:
                continue
            frames = self.frames_per_batch
            if self.total_frames >= 0:
                per_step = self.frames_per_step[rank]
                frames = min(frames, (self.total_frames - self._assigned) // per_step * per_step)
            if frames <= 0:
                continue
            self._assigned += frames
            self._release(rank, frames)
        if not self._pending:
            return None
        rank, view = self._links.wait_one("collect")
        del self._pending[rank]
        self._since_update[rank] += 1
        return view.clone()

    def _drain(self) -> None:
        """Reads (and drops, uncounted) the batches the workers are collecting."""
        while self._pending:
            rank, _ = self._links.wait_one("collect")
            self._assigned -= self._pending.pop(rank)

    # ---------------------------------------------------------------- seeds, state
    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seeds worker ``i`` with the ``i``-th seed of the chain; returns the next one."""
        if self.closed:
            raise RuntimeError(f"the {type(self).__name__} was shut down")
        self._drain()
        for rank in self._ranks:
            self._links.command(rank, comm.SEED, int(seed), int(static_seed))
            self._links.expect(rank)
            _, new_seed = self._links.wait_one("set_seed")
            if not static_seed:
                seed = new_seed
        return seed

    def state_dict(self) -> dict:
        """Not supported, by design (TorchRL 0.14's distributed collectors raise too).

        Raises:
            NotImplementedError: always; the workers' envs live in other processes or on
                other nodes, so checkpoint the policy and start a new collector instead.
        """
        raise NotImplementedError(
            f"{type(self).__name__} has no state_dict: its workers' envs live on other "
            "ranks; checkpoint the policy and restart collection instead"
        )

    def load_state_dict(self, state_dict: Mapping) -> None:
        """Not supported, by design: see :meth:`state_dict`.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError(
            f"{type(self).__name__} has no load_state_dict: its workers' envs live on other "
            "ranks; load the policy's weights and start a new collector instead"
        )

    # ---------------------------------------------------------------- workers
    @staticmethod
    def run_worker(backend: Literal["gloo", "nccl"] = "gloo", timeout: float = 1800.0) -> None:
        """Serves as a collector worker on this rank (``1..N``) of a ``torchrun`` job
        whose rank 0 builds the collector with ``launcher="torchrun"``; returns when
        the learner shuts the collector down.

        Examples:
            >>> import os  # doctest: +SKIP
            >>> if int(os.environ["RANK"]) > 0:  # doctest: +SKIP
            ...     DistributedDataCollector.run_worker()
        """
        torchrun_worker(backend, timeout)

    def alive(self) -> list[bool]:
        """Whether each worker process (``launcher="mp"``) runs."""
        return [proc.is_alive() for proc in self._procs]

    def shutdown(self, timeout: float | None = None, close_env: bool = True) -> None:
        """Stops the workers (after the batches in flight) and destroys the process
        group when this collector created it (idempotent)."""
        if getattr(self, "_owner_pid", None) != os.getpid():
            self.closed = True  # a copy in a forked child: the workers are not its own
            return
        super().shutdown(timeout, close_env)

    def _close(self, failed: bool = False) -> None:
        self.closed = True
        procs = self._procs
        if failed and procs:
            stop_processes(procs, 0.0)  # the receivers' recvs fail and their threads end
        links = getattr(self, "_links", None)
        for rank in getattr(self, "_ranks", []) if links is not None and not failed else []:
            try:
                links.command(rank, comm.CLOSE)
            except RuntimeError:
                pass
        if not failed and getattr(self, "_pending", None):
            try:
                self._drain()
            except RuntimeError:
                pass
        if links is not None and not failed:
            links.settle()  # delivered before the group goes: the last weights, CLOSE
        if links is not None:
            links.stop()
        if procs:
            stop_processes(procs)
        if links is not None:
            links.join(1.0)
        if self._own_group and dist.is_initialized():
            dist.destroy_process_group()
        self._own_group = False
        self._store = None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_workers={getattr(self, 'num_workers', None)}, "
            f"launcher={getattr(self, 'launcher', None)!r}, sync={self._sync}, "
            f"frames_per_batch={self.frames_per_batch}, total_frames={self.total_frames}, "
            f"frames={getattr(self, '_frames', 0)})"
        )


class DistributedSyncCollector(DistributedCollector):
    """A :class:`DistributedCollector` with ``sync=True`` that sends the learner's
    weights to every worker every ``update_interval`` batches (from the first batch).

    Every batch stacks ``frames_per_batch / num_workers`` frames of each worker rank
    (``[num_workers, *env_batch, T]``); ``total_frames`` must split exactly among the
    workers. Arguments, failure handling and shutdown as in
    :class:`DistributedCollector`.

    Examples:
        >>> import functools
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.collectors.distributed import DistributedSyncDataCollector
        >>> from rl.envs import CartPoleEnv
        >>> make_env = functools.partial(CartPoleEnv, categorical_action_encoding=True)
        >>> policy = TensorDictModule(
        ...     lambda obs: (obs[..., 2] > 0).long(), in_keys=["observation"], out_keys=["action"]
        ... )
        >>> collector = DistributedSyncDataCollector(
        ...     make_env, policy, num_workers=2, frames_per_batch=40, total_frames=120
        ... )
        >>> [tuple(batch.shape) for batch in collector]
        [(2, 20), (2, 20), (2, 20)]
        >>> collector.shutdown()
    """

    _push_first = True

    def __init__(
        self,
        create_env_fn: Sequence[Callable] | Callable,
        policy: Callable[[TensorDictBase], TensorDictBase] | None = None,
        *,
        policy_factory: Callable[[], Callable] | Sequence[Callable[[], Callable]] | None = None,
        frames_per_batch: int,
        total_frames: int = -1,
        device=None,
        storing_device=None,
        env_device=None,
        policy_device=None,
        max_frames_per_traj: int = -1,
        init_random_frames: int = -1,
        reset_at_each_iter: bool = False,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        split_trajs: bool = False,
        exploration_type: ExplorationType = ExplorationType.RANDOM,
        collector_class: type | Literal["single", "sync", "async"] = Collector,
        collector_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        num_workers_per_collector: int = 1,
        slurm_kwargs: Mapping[str, Any] | None = None,
        backend: Literal["gloo", "nccl"] = "gloo",
        max_weight_update_interval: int = -1,
        update_interval: int = 1,
        launcher: Literal["mp", "torchrun"] = "mp",
        tcp_port: int | None = None,
        update_after_each_batch: bool = False,
        num_workers: int | None = None,
        timeout: float = 1800.0,
        mp_start_method: str | None = None,
        num_threads: int | None = 1,
        weight_updater: Any = None,
        weight_sync_schemes: Any = None,
        weight_recv_schemes: Any = None,
    ) -> None:
        # TorchRL's arguments, spelled out (no **kwargs); sync=True is this class
        super().__init__(
            create_env_fn, policy, policy_factory=policy_factory,
            frames_per_batch=frames_per_batch, total_frames=total_frames, device=device,
            storing_device=storing_device, env_device=env_device, policy_device=policy_device,
            max_frames_per_traj=max_frames_per_traj, init_random_frames=init_random_frames,
            reset_at_each_iter=reset_at_each_iter, postproc=postproc, split_trajs=split_trajs,
            exploration_type=exploration_type, collector_class=collector_class,
            collector_kwargs=collector_kwargs,
            num_workers_per_collector=num_workers_per_collector, sync=True,
            slurm_kwargs=slurm_kwargs, backend=backend,
            update_after_each_batch=update_after_each_batch,
            max_weight_update_interval=max_weight_update_interval,
            update_interval=update_interval, launcher=launcher, tcp_port=tcp_port,
            num_workers=num_workers, timeout=timeout, mp_start_method=mp_start_method,
            num_threads=num_threads, weight_updater=weight_updater,
            weight_sync_schemes=weight_sync_schemes, weight_recv_schemes=weight_recv_schemes,
        )  # fmt: skip


#: TorchRL's older names
DistributedDataCollector = DistributedCollector
DistributedSyncDataCollector = DistributedSyncCollector
