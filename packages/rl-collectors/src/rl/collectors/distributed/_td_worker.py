"""The collector worker of a torch.distributed collector (ranks ``1..N``).

A worker builds one local collector (``rl.collectors.Collector`` by default) over its
env, tells the learner (rank 0) how many frames one time step holds, then serves the
learner's commands until ``CLOSE``: ``COLLECT frames`` (one batch, sent back as a flat
payload; see ``_td_comm``), ``WEIGHTS`` (new policy weights, used from the next batch
on) and ``SEED``. Any exception is sent to the learner with its traceback.

Workers are started by the learner (:func:`mp_worker_main`, ``launcher="mp"``) or run
under ``torchrun`` (:func:`torchrun_worker`), where they receive their configuration
from rank 0 over the process group.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import sys
import threading
import traceback
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from tensordict import TensorDict, TensorDictBase

from .._single import Collector
from .._worker import _watch_parent
from . import _td_comm as comm
from ._common import frames_per_step, unique_traj_ids

__all__ = ["mp_worker_main", "torchrun_worker", "comm_device", "ready_key"]

logger = logging.getLogger(__name__)


def comm_device(backend: str) -> torch.device:
    """Where the tensors a rank sends live: the CPU for gloo, this rank's GPU for nccl."""
    if backend == "nccl":
        local_rank = int(
            os.environ.get("LOCAL_RANK", dist.get_rank() if dist.is_initialized() else 0)
        )
        return torch.device("cuda", local_rank % max(torch.cuda.device_count(), 1))
    return torch.device("cpu")


def ready_key(rank: int) -> str:
    return f"rl_collector_ready_{rank}"


def _build(config: Mapping[str, Any]) -> Any:
    cls = config["collector_class"]
    policy = config["policy"]
    if config.get("policy_factory") is not None:
        policy = config["policy_factory"]()
    kwargs = dict(config["collector_kwargs"])
    env_fn = config["env_fn"]
    fpb = config["frames_per_batch"]
    if isinstance(cls, type) and issubclass(cls, Collector):
        if config["num_workers_per_collector"] != 1:
            raise ValueError(
                f"num_workers_per_collector={config['num_workers_per_collector']} needs a "
                "multiprocess collector_class (MultiSyncCollector / MultiAsyncCollector, or "
                "'sync' / 'async'); a Collector runs one env"
            )
        return cls(env_fn, policy, frames_per_batch=fpb, total_frames=-1, **kwargs)
    env_fns = [env_fn] * config["num_workers_per_collector"]
    return cls(env_fns, policy, frames_per_batch=fpb, total_frames=-1, **kwargs)


def _collect(collector: Any, frames: int, frames_per_step: int, index: int, n: int):
    steps = frames // frames_per_step
    if isinstance(collector, Collector):
        batch = collector.rollout(steps)
        collector._frames += batch.numel()
        collector._iter += 1
    else:
        batch = collector.next()
        if batch.shape[-1] > steps:
            batch = batch[..., :steps]
    return unique_traj_ids(batch, index, n)


def _report(exc: BaseException, device) -> None:
    """Sends ``exc`` and its traceback to the learner (best effort)."""
    message = json.dumps(
        {"type": type(exc).__name__, "message": str(exc), "traceback": traceback.format_exc()}
    ).encode()
    try:
        comm.send_header(comm.ERROR, len(message), dst=0, device=device)
        comm.send_bytes(message, dst=0, device=device)
    except Exception:  # the learner is gone: nobody to tell
        pass


def serve(config: Mapping[str, Any], device) -> None:
    """Builds the worker's collector and answers the learner's commands until CLOSE."""
    rank = dist.get_rank()
    index, n = rank - 1, config["num_workers"]
    collector = None
    try:
        collector = _build(config)
        per_step, _ = frames_per_step(collector)
        comm.send_header(comm.STARTED, per_step, os.getpid(), dst=0, device=device)
        send_buffer = comm.SendBuffer(device)
        weights = comm.RecvBuffer(device)
        while True:
            kind, a, b, c = comm.recv_header(src=0, device=device)
            if kind == comm.COLLECT:
                batch = _collect(collector, a, per_step, index, n)
                comm.send_tensordict(comm.BATCH, batch, send_buffer, dst=0, device=device)
            elif kind == comm.WEIGHTS:
                received = weights.recv(a, b, c, src=0)
                collector.update_policy_weights_(_as_cpu(received, collector))
            elif kind == comm.SEED:
                new_seed = collector.set_seed(a, static_seed=bool(b))
                comm.send_header(comm.RESULT, int(new_seed), dst=0, device=device)
            elif kind == comm.CLOSE:
                break
            else:
                raise RuntimeError(
                    f"collector worker rank {rank} got an unknown command "
                    f"{comm.KIND_NAMES.get(kind, kind)!r}"
                )
    except Exception as exc:
        logger.error("collector worker rank %d failed", rank, exc_info=True)
        _report(exc, device)
    finally:
        if collector is not None:
            try:
                collector.shutdown()
            except Exception:
                logger.warning("collector worker rank %d: shutdown failed", rank, exc_info=True)


def _as_cpu(weights: TensorDictBase, collector: Any) -> TensorDictBase:
    """The received weights, copied where the worker's policy reads them from."""
    if weights.device is not None and weights.device.type == "cpu":
        return weights
    target = getattr(collector, "policy", None)
    if isinstance(target, torch.nn.Module):
        return weights.to(TensorDict.from_module(target).device or "cpu")
    return weights


def mp_worker_main(
    rank: int,
    world_size: int,
    host: str,
    port: int,
    backend: str,
    timeout_s: float,
    payload: bytes | Mapping[str, Any],
    parent_pid: int,
    num_threads: int | None,
) -> None:
    """A worker started by the learner (``launcher="mp"``): joins the process group
    through the learner's TCP store, serves, then exits without interpreter teardown."""
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    code = 0
    try:
        config = pickle.loads(payload) if isinstance(payload, bytes) else payload
        timeout = timedelta(seconds=timeout_s)
        store = dist.TCPStore(host, port, world_size, is_master=False, timeout=timeout)
        store.set(ready_key(rank), b"1")
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                timeout=timeout)  # fmt: skip
        serve(config, comm_device(backend))
    except BaseException:
        logger.error("collector worker rank %d could not start", rank, exc_info=True)
        code = 1
    finally:
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)  # skip the interpreter teardown (seconds with torch loaded)


def torchrun_worker(backend: str = "gloo", timeout: float = 1800.0) -> None:
    """Runs this rank as a collector worker of a learner on rank 0 (under ``torchrun``).

    Joins the process group (from torchrun's ``MASTER_ADDR`` / ``MASTER_PORT`` / ``RANK``
    / ``WORLD_SIZE``) unless it already exists, receives the collector configuration
    from rank 0, serves batches until the learner shuts the collector down, then
    destroys the process group it created.
    """
    own = not dist.is_initialized()
    if own:
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout))
    try:
        rank = dist.get_rank()
        if rank == 0:
            raise RuntimeError(
                "rank 0 is the learner: build the DistributedDataCollector there and call "
                "run_worker() on the other ranks"
            )
        device = comm_device(dist.get_backend())
        kind, nbytes, _, _ = comm.recv_header(src=0, device=device)
        if kind != comm.CONFIG:
            raise RuntimeError(
                f"rank {rank} expected the collector configuration from rank 0, got "
                f"{comm.KIND_NAMES.get(kind, kind)!r}"
            )
        data = comm.recv_bytes(nbytes, src=0, device=device)
        try:
            config = pickle.loads(data)
        except Exception as exc:  # e.g. a class rank 0 has and this rank cannot import
            logger.error("rank %d could not load the collector configuration", rank, exc_info=True)
            _report(exc, device)
            return
        serve(config, device)
    finally:
        if own and dist.is_initialized():
            dist.destroy_process_group()
