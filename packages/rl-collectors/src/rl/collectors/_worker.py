"""The body of a multiprocess collector's worker process.

Each worker builds its env and a :class:`~rl.collectors.Collector` around it, then
answers commands from the parent on its pipe. Batches go through shared memory: the
worker allocates a shared ``[*env_batch, T]`` TensorDict once (again only if the keys or
shapes of the batches change, e.g. after ``init_random_frames``) and sends it to the
parent once; after that, each batch is copied into it and announced with a small
``("ready", steps)`` message. Nothing else is pickled per batch.

Policy weights: the parent keeps a shared-memory copy of the policy's parameters and a
version counter; a worker copies the weights (under a lock) into its own policy at the
start of a batch when the version changed, so a batch runs with one set of weights.

Commands (parent -> worker): ``("collect", steps)``, ``("seed", seed, static)``,
``("state_dict",)``, ``("load_state_dict", state)``, ``("close",)``. Answers:
``("started", batch_size)``, ``("ready", steps)``, ``("buffer", td, steps)``,
``("batch", lazy_td, steps)`` (a lazily stacked batch of dynamic-shape entries),
``("result", value)``, ``("error", traceback, type name, message)``.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
import time
import traceback
from typing import Any

import torch
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase

from rl.core.workers import die_with_parent, ignore_interrupts
from rl.envs import EnvBase
from rl.envs.engine import non_tensor_keys

from ._profile import _ProfilerHook

__all__ = ["worker_main"]


class CallFailed:
    """What a worker answers to a ``"call"`` whose method raised: the error's type name,
    message and traceback. The worker keeps running (an inspection call with a wrong name
    must not stop the collection); the parent raises it (:meth:`raise_in`)."""

    BUILTIN = (AttributeError, KeyError, NotImplementedError, TypeError, ValueError)

    def __init__(self, err: Exception) -> None:
        self.kind, self.message = type(err).__name__, str(err)
        self.trace = traceback.format_exc()

    def raise_in(self, where: str) -> None:
        kinds = {cls.__name__: cls for cls in self.BUILTIN}
        cls = kinds.get(self.kind, RuntimeError)
        raise cls(f"{self.kind}: {self.message} (in {where}; the workers keep running)")


def _watch_parent(parent_pid: int) -> None:
    """Exits the worker when its parent is gone (e.g. killed by SIGKILL); the distributed
    workers' fallback (these workers use :func:`rl.core.workers.die_with_parent`)."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent_pid:
            os._exit(1)


def _structure(td: TensorDictBase) -> list:
    nb = td.batch_dims
    return [
        (key, value.dtype, tuple(value.shape[: nb - 1]), tuple(value.shape[nb:]))
        for key, value in td.items(True, True)
    ]


def worker_main(
    index: int,
    num_workers: int,
    payload: bytes | tuple,
    conn: Any,
    parent_pid: int,
    weights: TensorDictBase | None,
    version: torch.Tensor | None,
    lock: Any,
    num_threads: int,
    torch_seed: int,
    parent_death_signal: bool = True,
    weight_schemes: dict | None = None,
    interruptor: Any = None,
) -> None:
    """Runs worker ``index`` until the parent sends ``("close",)`` or goes away.

    The worker exits with its parent (``parent_death_signal``: whether the kernel may kill
    it when the parent thread that started it ends, see
    :func:`rl.core.workers.die_with_parent`) and leaves Ctrl-C to the parent.
    ``weight_schemes`` (``{model_id: WeightSyncScheme}`` set up on the parent) become the
    worker collector's receivers. ``interruptor``: the parent's
    :class:`~rl.collectors.Interruptor` (preemption), handed to the worker's collector.
    """
    die_with_parent(parent_pid, parent_death_signal)
    ignore_interrupts()
    torch.set_num_threads(num_threads)
    torch.manual_seed(torch_seed)
    collector = None
    try:
        from ._single import Collector  # noqa: PLC0415  (after the thread settings)

        env_fn, policy, kwargs = pickle.loads(payload) if isinstance(payload, bytes) else payload
        kwargs = dict(kwargs)
        collector_class = kwargs.pop("collector_class", None) or Collector
        init_fn = kwargs.pop("init_fn", None)
        if interruptor is not None:  # (inherited at process creation, not pickled)
            kwargs["interruptor"] = interruptor
        if init_fn is not None:
            init_fn()
        # an env instance (TorchRL accepts one per worker, e.g. an unstarted SerialEnv)
        # is used as is: the worker owns its copy (forked or unpickled)
        env = env_fn if isinstance(env_fn, EnvBase) else env_fn()
        collector = collector_class(
            env, policy, total_frames=-1, weight_recv_schemes=weight_schemes, **kwargs
        )
        policy = collector.policy  # built by the policy_factory, when one was given
        local = TensorDict.from_module(policy).data if weights is not None else None
        seen = -1
        updates = 0  # weight updates applied (the parent's counter starts at 0)

        def take_weights() -> None:
            """Copies the parent's shared weights in when they changed (rl's own path)."""
            nonlocal seen, updates
            if weights is not None and int(version[0]) != seen:
                with lock:
                    local.update_(weights)
                    seen = int(version[0])
                for _ in range(seen - updates):  # one bump per update pushed
                    collector.increment_version()
                updates = seen

        batch_lock = collector.receive_lock or contextlib.nullcontext()
        conn.send(("started", tuple(collector.env.batch_size)))
        shared: TensorDictBase | None = None
        layout = None
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                break
            op = msg[0]
            if op == "collect":
                steps = msg[1]
                take_weights()
                with batch_lock:  # weights from a scheme are applied between batches
                    batch = collector.rollout(steps)  # runs the pre-collect hook
                collector._frames += batch.numel()
                collector._iter += 1
                if collector.track_traj_ids:
                    ids = batch.get(("collector", "traj_ids"))
                    if interruptor is None:
                        ids.mul_(num_workers).add_(index)  # unique across workers
                    else:  # the steps an interruption left out keep their -1
                        valid = ids != -1
                        ids[valid] = ids[valid] * num_workers + index
                if collector.post_collect_hook is not None:  # on the ids the learner gets
                    collector.post_collect_hook(batch)
                if isinstance(batch, LazyStackedTensorDict) or non_tensor_keys(batch):
                    # entries whose shape changes from step to step (dynamic specs) or
                    # that are no tensors (strings): no fixed shared buffer holds them,
                    # the batch itself is sent
                    conn.send(("batch", batch, steps))
                    continue
                structure = _structure(batch)
                if shared is None or structure != layout or shared.batch_size[-1] < steps:
                    shared = batch.clone().share_memory_()
                    layout = structure
                    conn.send(("buffer", shared, steps))
                else:
                    shared[..., :steps].update_(batch)
                    conn.send(("ready", steps))
            elif op == "seed":
                conn.send(("result", collector.set_seed(msg[1], static_seed=msg[2])))
            elif op == "state_dict":
                take_weights()  # the state holds the weights last pushed
                conn.send(("result", pickle.dumps(collector.state_dict())))
            elif op == "load_state_dict":
                collector.load_state_dict(pickle.loads(msg[1]))
                if weights is not None:
                    # the restored policy weights stand until the parent pushes new ones;
                    # without this the next batch took the shared (pre-restore) weights
                    seen = updates = int(version[0])
                conn.send(("result", None))
            elif op == "call":  # a method of the worker's collector (stats, map_fn, ...)
                try:
                    value = getattr(collector, msg[1])(*msg[2], **msg[3])
                except Exception as err:  # reported to the caller; the worker goes on
                    value = CallFailed(err)
                conn.send(("result", value))
            elif op == "profile":  # a profiler as the post-collect hook, or the old hook back
                hook = collector.post_collect_hook
                if isinstance(hook, _ProfilerHook):  # the hook it wraps comes back
                    hook.stop()
                    collector.post_collect_hook = hook = hook.previous
                if msg[1] is not None:
                    config = pickle.loads(msg[1])
                    collector.post_collect_hook = _ProfilerHook(config, index, previous=hook)
                conn.send(("result", None))
            elif op == "close":
                break
            else:
                raise RuntimeError(f"collector worker {index} got an unknown command {op!r}")
    except BaseException as err:
        try:
            conn.send(("error", traceback.format_exc(), type(err).__name__, str(err)))
        except Exception:
            pass
    finally:
        try:
            if collector is not None:
                hook = collector.post_collect_hook
                if isinstance(hook, _ProfilerHook):  # a trace cut short is still written
                    hook.stop()
                collector.shutdown()
        finally:
            try:
                conn.close()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                # skip the interpreter teardown (seconds with torch loaded)
                os._exit(0)
