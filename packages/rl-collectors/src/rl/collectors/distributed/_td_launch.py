"""Starting the worker ranks of a torch.distributed collector.

``launch_mp`` spawns the workers from the learner and joins them in a fresh process
group that rendezvous on a TCP store bound to a free loopback port; ``join_torchrun``
uses (or creates) the process group torchrun set up and sends each worker rank its
configuration.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

import cloudpickle
import torch
import torch.distributed as dist

from .._multi import _exit_description as exit_description
from .._multi import stop_processes as _stop_processes
from . import _td_comm as comm
from ._td_worker import comm_device, mp_worker_main, ready_key

__all__ = [
    "launch_mp",
    "join_torchrun",
    "stop_processes",
    "exit_description",
    "default_start_method",
]

_POLL_S = 0.05
_JOIN_S = 3.0


def stop_processes(procs: list, join_s: float = _JOIN_S) -> None:
    """Waits ``join_s`` for the processes to exit, then terminates and kills the rest."""
    _stop_processes(procs, join_s, _JOIN_S)


def default_start_method() -> str:
    """``"fork"`` on Linux while CUDA is not initialized (workers start at once),
    ``"spawn"`` otherwise, as the local multiprocess collectors choose."""
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    return "fork" if sys.platform.startswith("linux") and not cuda else "spawn"


def launch_mp(
    *,
    num_workers: int,
    configs: list[Mapping[str, Any]],
    backend: str,
    tcp_port: int | None,
    timeout: float,
    start_method: str,
    num_threads: int | None,
    name: str,
) -> tuple[list, Any]:
    """Starts ``num_workers`` worker processes (ranks ``1..N``) and makes this process
    rank 0 of a new process group with them.

    Returns:
        the worker processes and the TCP store (kept alive while the group lives).

    Raises:
        RuntimeError: a worker died before it joined (with its exit code).
    """
    world_size = num_workers + 1
    host = "127.0.0.1"
    store = dist.TCPStore(host, tcp_port or 0, world_size, is_master=True,
                          timeout=timedelta(seconds=timeout), wait_for_workers=False)  # fmt: skip
    ctx = mp.get_context(start_method)
    procs: list = []
    try:
        for rank in range(1, world_size):
            config: Any = configs[rank - 1]
            if start_method != "fork":
                config = cloudpickle.dumps(config)
            proc = ctx.Process(
                target=mp_worker_main,
                args=(
                    rank,
                    world_size,
                    host,
                    store.port,
                    backend,
                    timeout,
                    config,
                    os.getpid(),
                    num_threads,
                ),  # fmt: skip
                name=f"{name}-rank-{rank}",
                daemon=False,  # a worker may run a multiprocess collector (its own children)
            )
            if start_method == "fork":
                # the child must never collect (and finalize) the learner's garbage, e.g.
                # an old collector whose __del__ would shut down what is not its own
                gc.freeze()
            try:
                proc.start()
            finally:
                gc.unfreeze()
            procs.append(proc)
        keys = [ready_key(rank) for rank in range(1, world_size)]
        deadline = time.monotonic() + timeout
        while not store.check(keys):
            for rank, proc in enumerate(procs, 1):
                if not proc.is_alive():
                    proc.join(_JOIN_S)
                    raise RuntimeError(
                        f"{name} worker rank {rank} (pid {proc.pid}) died during start-up "
                        f"with {exit_description(proc.exitcode)}"
                    )
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} workers did not start within {timeout} s")
            time.sleep(_POLL_S)
        hook = sys.excepthook  # init_process_group chains a "[rank0]" hook per group
        try:
            dist.init_process_group(backend, store=store, rank=0, world_size=world_size,
                                    timeout=timedelta(seconds=timeout))  # fmt: skip
        finally:
            sys.excepthook = hook
    except BaseException:
        stop_processes(procs)
        raise
    return procs, store


def join_torchrun(
    *, backend: str, timeout: float, make_configs: Callable[[int], list[Mapping[str, Any]]],
    name: str,
) -> tuple[bool, int]:  # fmt: skip
    """Makes this process (rank 0 under torchrun) the learner: joins the process group
    (created here unless it exists) and sends each other rank its configuration.

    Returns:
        whether the group was created here, and the number of worker ranks.
    """
    own = not dist.is_initialized()
    if own:
        missing = [k for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")
                   if k not in os.environ]  # fmt: skip
        if missing:
            raise ValueError(
                f"launcher='torchrun' reads the process group from torchrun's environment, "
                f"but {', '.join(missing)} is not set: start the script with `torchrun "
                "--nproc-per-node N script.py` (or use launcher='mp')"
            )
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout))
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if rank != 0 or world_size < 2:
        if own:
            dist.destroy_process_group()
        if rank != 0:
            raise RuntimeError(
                f"the {name} is built on rank 0 (the learner), this is rank {rank}: call "
                f"{name}.run_worker() on the other ranks"
            )
        raise ValueError(f"launcher='torchrun' needs at least 2 ranks, got world size {world_size}")
    try:
        configs = make_configs(world_size - 1)
    except BaseException:
        if own:
            dist.destroy_process_group()
        raise
    device = comm_device(backend)
    sends = []
    for worker_rank, config in enumerate(configs, 1):
        data = cloudpickle.dumps(config)
        header = torch.tensor([comm.CONFIG, len(data), 0, 0], dtype=torch.int64, device=device)
        payload = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)
        sends.append((dist.isend(header, dst=worker_rank), header))
        sends.append((dist.isend(payload, dst=worker_rank), payload))
    for work, _ in sends:
        work.wait()
    return own, world_size - 1
