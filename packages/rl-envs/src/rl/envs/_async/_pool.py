"""``AsyncEnvPool``: envs stepped and reset one by one, their results collected as they come.

The pool is an :class:`~rl.envs.EnvBase` of batch size ``[num_envs, *sub_batch]`` whose
sub-environments can also be driven one at a time: ``async_*_send`` starts an operation
on some sub-envs (named by the ``"env_index"`` entry or the ``env_index`` argument) and
returns at once; ``async_*_recv`` returns the results of those that have finished,
sorted by env index, each carrying its ``"env_index"``. The synchronous ``reset`` /
``step`` / ``step_and_maybe_reset`` send to every sub-env and wait for all of them.

The back-ends only say how one operation runs and how to wait for finished ones
(``_submit`` / ``_wait``): :class:`ThreadingAsyncEnvPool` (a thread per sub-env) and
:class:`ProcessorAsyncEnvPool` (``ParallelEnv``'s worker processes and shared buffers).
"""

from __future__ import annotations

import os
import threading
import time
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import torch
from tensordict import TensorDictBase, lazy_stack, maybe_dense_stack
from tensordict.tensorclass import NonTensorData, NonTensorStack

from rl.core import Composite, NonTensor

from .._env_base import EnvBase, _EnvMeta

__all__ = ["AsyncEnvPool"]

#: seconds a per-env receive waits for results before letting other threads in
_TURN_S = 0.01


def _stack_function(stack: str) -> Callable:
    if stack == "dense":
        return torch.stack
    if stack == "maybe_dense":
        return maybe_dense_stack
    if stack == "lazy":
        return lazy_stack
    raise ValueError(f"stack must be 'dense', 'maybe_dense' or 'lazy', got {stack!r}")


def _first_item(value: Any) -> Any:
    """The first element of a nested list (an index expanded over a sub-env's batch)."""
    while isinstance(value, list | tuple):
        if not value:
            return None
        value = value[0]
    return value


def _check_int(value: Any, num_envs: int) -> int:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"env_index must hold ints, got {value!r} ({type(value).__name__})")
    if not 0 <= value < num_envs:
        raise IndexError(f"env_index {value} is out of range for a pool of {num_envs} envs")
    return value


def _is_one_index(env_index: Any) -> bool:
    """An ``env_index`` naming one sub-env (an int, a 0-d tensor): its data has no pool
    dim and its result is received with ``env_index=`` too."""
    if isinstance(env_index, torch.Tensor):
        return env_index.ndim == 0
    return isinstance(env_index, int)


class _AsyncEnvMeta(_EnvMeta):
    """``AsyncEnvPool(..., backend=...)`` builds the back-end's subclass (as TorchRL)."""

    def __call__(cls, *args, **kwargs):
        if cls is AsyncEnvPool:
            backend = kwargs.get("backend", "threading")
            if backend == "threading":
                from ._threading import ThreadingAsyncEnvPool

                return ThreadingAsyncEnvPool(*args, **kwargs)
            if backend == "multiprocessing":
                from ._processes import ProcessorAsyncEnvPool

                return ProcessorAsyncEnvPool(*args, **kwargs)
            raise ValueError(
                f"AsyncEnvPool backend must be 'threading' or 'multiprocessing', got "
                f"{backend!r} (TorchRL's 'asyncio' is not implemented there either)"
            )
        return super().__call__(*args, **kwargs)


class AsyncEnvPool(EnvBase, metaclass=_AsyncEnvMeta):
    """A pool of environments that can be stepped and reset asynchronously, env by env.

    ``AsyncEnvPool(env_makers, backend="threading")`` returns a
    :class:`ThreadingAsyncEnvPool` (each sub-env runs in a thread of this process),
    ``backend="multiprocessing"`` a :class:`ProcessorAsyncEnvPool` (each in a worker
    process, exchanging data through shared memory, as :class:`~rl.envs.ParallelEnv`).

    Besides the ``EnvBase`` API (``reset``, ``step``, ``rollout``... over all sub-envs,
    batch size ``[num_envs, *sub_batch]``), the pool runs operations on some sub-envs
    without waiting for them:

    - ``async_step_send(td)``, ``async_reset_send(td)``,
      ``async_step_and_maybe_reset_send(td)`` start the operation on the sub-envs whose
      indices the ``"env_index"`` entry of ``td`` holds (one row of ``td`` per index, in
      that order) and return at once. With ``env_index=`` a list, it names them instead;
      with ``env_index=`` an int, ``td`` is that one sub-env's data (no pool dim) and the
      result is received with ``async_*_recv(env_index=i)``, apart from the others.
    - ``async_*_recv(min_get)`` waits until at least ``min_get`` of the sub-envs sent to
      have finished and returns the results of every finished one (at most ``max_get``;
      with ``timeout`` it waits up to that many seconds for more, up to ``max_get``),
      stacked along a first dim and sorted by env index, each with its ``"env_index"``.

    A sub-env takes one operation at a time: sending to a busy one raises. The
    synchronous methods need every sub-env idle.

    Args:
        env_makers: a callable returning an env (or an env), or a list of them, one per
            sub-env.
        backend: ``"threading"`` or ``"multiprocessing"`` (TorchRL's ``"asyncio"`` is
            not implemented there either).
        stack: how results are stacked: ``"dense"`` (``torch.stack``), ``"maybe_dense"``
            or ``"lazy"`` (``lazy_stack``, for sub-envs whose entries differ in shape).
        exchange: TorchRL's choice of transport for the multiprocessing back-end,
            ``"queue"``, ``"shm"`` or ``"auto"`` (``None``: ``"auto"``); here the workers
            always exchange data through shared memory (no tensordict is pickled per
            step), so all work the same. ``"shm"`` with the threading back-end raises,
            as in TorchRL.
        worker_affinity: the CPUs the worker processes may run on (multiprocessing
            back-end): one sequence of CPU ids for every worker, or one sequence per
            worker (``os.sched_setaffinity``; Linux).
        envs_per_worker: sub-envs per worker process. TorchRL can run several in one
            worker (each in a thread); here each sub-env has its own worker process (the
            ``ParallelEnv`` workers), so only ``1`` is accepted.
        create_env_kwargs: keyword arguments of the env makers (a dict, or one dict per
            sub-env).

    Attributes:
        num_envs: the number of sub-envs.
        min_get: the default ``min_get`` of the ``async_*_recv`` methods (1).

    Raises:
        ValueError: an unknown ``backend``, ``stack`` or ``exchange``,
            ``create_env_kwargs`` without one dict per sub-env, or a ``worker_affinity``
            that names unknown CPUs or is given to the threading back-end.
        NotImplementedError: ``envs_per_worker`` other than 1.

    Examples:
        >>> import torch
        >>> from rl.envs import AsyncEnvPool, PendulumEnv
        >>> env = AsyncEnvPool([PendulumEnv, PendulumEnv], backend="threading")
        >>> env.batch_size
        torch.Size([2])
        >>> reset = env.reset()
        >>> list(reset["env_index"])
        [0, 1]
        >>> one = reset[1]
        >>> one["action"] = torch.zeros(1)
        >>> env.async_step_send(one)
        >>> out = env.async_step_recv()
        >>> list(out["env_index"]), out["next", "observation"].shape
        ([1], torch.Size([1, 3]))
        >>> env.close()
    """

    _env_idx_key = "env_index"

    def __init__(
        self,
        env_makers: Callable[[], EnvBase] | EnvBase | list[EnvBase] | list[Callable[[], EnvBase]],
        *,
        backend: Literal["threading", "multiprocessing", "asyncio"] = "threading",
        stack: Literal["dense", "maybe_dense", "lazy"] = "dense",
        exchange: Literal["queue", "shm", "auto"] | None = None,
        worker_affinity: Sequence[int] | Sequence[Sequence[int]] | None = None,
        envs_per_worker: int = 1,
        create_env_kwargs: dict | list[dict] | None = None,
    ) -> None:
        if not isinstance(env_makers, Sequence):
            env_makers = [env_makers]
        if not len(env_makers):
            raise ValueError("AsyncEnvPool needs at least one env maker, got an empty list")
        self.env_makers = list(env_makers)
        self.num_envs = len(self.env_makers)
        self.min_get = 1
        if exchange is None:
            exchange = "auto"
        if exchange not in ("queue", "shm", "auto"):
            raise ValueError(f"exchange must be 'queue', 'shm' or 'auto', got {exchange!r}")
        if exchange == "shm" and backend != "multiprocessing":
            raise ValueError("exchange='shm' is only supported with backend='multiprocessing'")
        self.exchange = exchange
        self.backend = backend
        if isinstance(envs_per_worker, bool) or not isinstance(envs_per_worker, int):
            raise TypeError(f"envs_per_worker must be an int, got {envs_per_worker!r}")
        if envs_per_worker != 1:
            raise NotImplementedError(
                f"envs_per_worker={envs_per_worker}: each sub-env of an rl AsyncEnvPool runs "
                "in its own worker process (or thread); only envs_per_worker=1 is supported"
            )
        self.envs_per_worker = envs_per_worker
        self.worker_affinity = self._check_affinity(worker_affinity, backend)
        # what pickling sends (the copy builds its own threads or workers)
        self._init_kwargs = {
            "backend": backend,
            "stack": stack,
            "exchange": exchange,
            "worker_affinity": worker_affinity,
            "envs_per_worker": envs_per_worker,
        }
        if create_env_kwargs is None:
            create_env_kwargs = {}
        if isinstance(create_env_kwargs, Mapping):
            create_env_kwargs = [dict(create_env_kwargs) for _ in range(self.num_envs)]
        if len(create_env_kwargs) != self.num_envs:
            raise ValueError(
                f"create_env_kwargs must be a dict or a list of {self.num_envs} dicts (one "
                f"per env), got a list of {len(create_env_kwargs)}"
            )
        self.create_env_kwargs = list(create_env_kwargs)
        self.stack = stack
        self._stack_func = _stack_function(stack)
        # per env: (operation, sent with an int env_index) while it runs or waits
        self._inflight: dict[int, tuple[str, bool]] = {}
        self._ready: dict[int, Any] = {}
        self._lock = threading.RLock()
        self._stats = _BatchStats()
        child_specs, device = self._setup()
        self._child_specs = child_specs
        specs = torch.stack(list(child_specs), 0)
        super().__init__(device=device, batch_size=specs.shape)
        self.output_spec = specs["output_spec"].clone()
        input_spec = specs["input_spec"].clone()
        input_spec["full_state_spec"][self._env_idx_key] = NonTensor(
            shape=input_spec.shape, example_data=0
        )
        self.input_spec = input_spec

    def _check_affinity(
        self, affinity: Sequence[int] | Sequence[Sequence[int]] | None, backend: str
    ) -> list[set[int]] | None:
        """One CPU set per sub-env (``None``: no affinity)."""
        if affinity is None:
            return None
        if backend != "multiprocessing":
            raise ValueError(
                "worker_affinity sets the CPUs of worker processes: it needs "
                f"backend='multiprocessing', got backend={backend!r}"
            )
        if not hasattr(os, "sched_setaffinity"):
            raise NotImplementedError("worker_affinity needs os.sched_setaffinity (Linux)")
        items = list(affinity)
        per_worker = bool(items) and all(isinstance(i, Sequence) for i in items)
        sets = [set(i) for i in items] if per_worker else [set(items)] * self.num_envs
        if len(sets) != self.num_envs:
            raise ValueError(
                f"worker_affinity has {len(sets)} CPU sets, expected one per env "
                f"({self.num_envs}) or a single sequence of CPU ids"
            )
        allowed = os.sched_getaffinity(0)
        for cpus in sets:
            bad = sorted(c for c in cpus if isinstance(c, bool) or not isinstance(c, int))
            unknown = sorted(c for c in cpus if c not in allowed)
            if not cpus or bad or unknown:
                raise ValueError(
                    f"worker_affinity needs non-empty sets of the CPU ids this process may "
                    f"use {sorted(allowed)}, got {sorted(cpus, key=str)}"
                )
        return sets

    # ----------------------------------------------------------- back-end interface
    @abstractmethod
    def _setup(self) -> tuple[list[Composite], torch.device | None]:
        """Builds the sub-envs (workers); returns each one's ``specs`` and the device."""

    @abstractmethod
    def _submit(self, index: int, op: str, tensordict: TensorDictBase | None) -> None:
        """Starts ``op`` on sub-env ``index`` with its (un-batched) ``tensordict``."""

    @abstractmethod
    def _wait(self, indices: list[int], wait_s: float | None) -> dict[int, Any]:
        """The results of the finished operations among ``indices`` (the envs in flight):
        waits up to ``wait_s`` seconds (``None``: until one finishes; ``0``: no wait)."""

    @abstractmethod
    def shutdown(self) -> None:
        """Stops the threads or worker processes (idempotent)."""

    def _check_open(self) -> None:
        """Raises if the pool can no longer run operations (why it was shut down), so
        that a receive finding nothing in flight names the cause (default: no check)."""

    @property
    def env_batch_sizes(self) -> list[torch.Size]:
        """The batch size of each sub-env."""
        return [spec.shape for spec in self._child_specs]

    # ------------------------------------------------------------------ dispatching
    def _indices(
        self, tensordict: TensorDictBase | None, env_index: int | Sequence[int] | None
    ) -> tuple[list[int], list[TensorDictBase | None]]:
        """The sub-envs an ``async_*_send`` call names, and the data of each."""
        key = self._env_idx_key
        if _is_one_index(env_index):
            index = _check_int(env_index, self.num_envs)
            # a shallow copy: results are written into it, never into the caller's
            return [index], [None if tensordict is None else tensordict.exclude(key)]
        if env_index is None:
            if tensordict is None:
                raise ValueError(
                    f"async sends need the sub-envs to address: an {key!r} entry in the "
                    "tensordict or the env_index argument"
                )
            value = tensordict.get(key, None)
            if value is None:
                raise KeyError(
                    f"the tensordict has no {key!r} entry naming the sub-envs to address, "
                    "and no env_index was given"
                )
            if tensordict.batch_size == self._child_specs[0].shape:
                # one sub-env's data (no pool dim)
                tensordict = tensordict.unsqueeze(0)
                value = tensordict.get(key)
            indices = self._index_values(value, tensordict.shape[0])
        else:
            indices = [_check_int(i, self.num_envs) for i in list(env_index)]
            if tensordict is not None and tensordict.shape[:1] != (len(indices),):
                raise ValueError(
                    f"the tensordict has batch size {tuple(tensordict.shape)}, expected a "
                    f"first dim of {len(indices)} (one row per env in env_index={indices})"
                )
        if len(set(indices)) != len(indices):
            raise ValueError(f"env_index names a sub-env more than once: {indices}")
        if tensordict is None:
            return indices, [None] * len(indices)
        rows = tensordict.exclude(key).unbind(0)
        return indices, list(rows)

    def _index_values(self, value: Any, rows: int) -> list[int]:
        if isinstance(value, torch.Tensor) and not isinstance(value, NonTensorData):
            flat = value.reshape(value.shape[0], -1)[:, 0] if value.ndim else value.reshape(1)
            values = flat.tolist()
        elif isinstance(value, NonTensorStack | NonTensorData):
            values = value.tolist()
            values = [_first_item(v) for v in values] if isinstance(values, list) else [values]
        else:
            values = [value] if not isinstance(value, list) else [_first_item(v) for v in value]
        if len(values) != rows:
            raise ValueError(
                f"{self._env_idx_key!r} holds {len(values)} indices for {rows} rows of data"
            )
        return [_check_int(v, self.num_envs) for v in values]

    def _send(
        self,
        op: str,
        tensordict: TensorDictBase | None,
        env_index: int | Sequence[int] | None,
    ) -> None:
        indices, rows = self._indices(tensordict, env_index)
        per_env = _is_one_index(env_index)
        with self._lock:
            busy = sorted(set(indices).intersection(self._inflight))
            if busy:
                raise RuntimeError(
                    f"cannot start {op} on env(s) {busy} of {type(self).__name__}: they are "
                    "still processing an operation (receive its result first)"
                )
            for index, row in zip(indices, rows, strict=True):
                self._submit(index, op, row)
                self._inflight[index] = (op, per_env)
            if op != "reset":
                self._stats.acted(indices)

    def _pump(self, wait_s: float | None) -> None:
        """Moves finished results into ``_ready`` (waits as :meth:`_wait`)."""
        running = [i for i in self._inflight if i not in self._ready]
        if not running:
            return
        finished = self._wait(running, wait_s)
        self._ready.update(finished)
        self._stats.arrived(finished)

    def _recv(
        self,
        op: str,
        min_get: int | None,
        env_index: int | None,
        max_get: int | None,
        timeout: float | None,
    ) -> Any:
        if env_index is not None:
            index = _check_int(env_index, self.num_envs)
            while True:
                # the lock is let go between short waits: threads that each drive their
                # own env (collector threads) take turns at gathering the results
                with self._lock:
                    if self._inflight.get(index) != (op, True):
                        self._check_open()
                        raise RuntimeError(
                            f"no {op} was sent to env {index} with env_index={index} "
                            f"(pending: {self._describe_inflight()})"
                        )
                    if index in self._ready:
                        del self._inflight[index]
                        self._stats.batch([index], 1, None)
                        return self._finish(index, self._ready.pop(index), batched=False)
                    self._pump(_TURN_S)
        if min_get is None:
            min_get = self.min_get
        if min_get < 1:
            raise ValueError(f"min_get must be positive, got {min_get}")
        if max_get is not None and max_get < min_get:
            raise ValueError(
                f"max_get must be greater than or equal to min_get, got min_get={min_get} "
                f"and max_get={max_get}"
            )
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout must be non-negative, got {timeout}")
        with self._lock:
            sent = [i for i, (o, per_env) in self._inflight.items() if o == op and not per_env]
            if min_get > len(sent):
                self._check_open()
                raise RuntimeError(
                    f"cannot wait for {min_get} {op} result(s): only {len(sent)} env(s) are "
                    f"processing a {op} (pending: {self._describe_inflight()})"
                )
            limit = len(sent) if max_get is None else min(max_get, len(sent))
            started = time.monotonic()
            while sum(i in self._ready for i in sent) < min_get:
                self._pump(None)
            if timeout is None:  # whatever has finished comes along
                self._pump(0)
                take = limit
            else:  # what finishes within ``timeout`` of the first min_get comes along
                take = min_get
                deadline = time.monotonic() + timeout
                while take < limit:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    ready = sum(i in self._ready for i in sent)
                    if ready > take:
                        take = min(ready, limit)
                    else:
                        self._pump(left)
            chosen = sorted(i for i in sent if i in self._ready)[:take]
            results = []
            for index in chosen:
                del self._inflight[index]
                results.append(self._finish(index, self._ready.pop(index), batched=True))
            self._stats.batch(chosen, limit, started)
        if op == "step_and_maybe_reset":
            return (
                self._stack_func([r[0] for r in results]),
                self._stack_func([r[1] for r in results]),
            )
        return self._stack_func(results)

    def _finish(self, index: int, result: Any, batched: bool) -> Any:
        """Tags a result with its ``"env_index"`` (one value per entry of the sub-batch)."""
        if isinstance(result, tuple):
            return tuple(self._finish(index, r, batched) for r in result)
        result.set(
            self._env_idx_key,
            NonTensorData(index, batch_size=result.batch_size, device=result.device),
        )
        return result

    def _describe_inflight(self) -> str:
        if not self._inflight:
            return "none"
        return ", ".join(
            f"env {i}: {op}{' (per env)' if per_env else ''}"
            for i, (op, per_env) in sorted(self._inflight.items())
        )

    # -------------------------------------------------------------------- async API
    def async_step_send(
        self, tensordict: TensorDictBase, env_index: int | list[int] | None = None
    ) -> None:
        """Starts a step of the sub-envs that ``tensordict["env_index"]`` (or
        ``env_index``) names, with the matching rows of ``tensordict``.

        Raises:
            KeyError: no ``"env_index"`` entry and no ``env_index``.
            IndexError: an index outside ``[0, num_envs)``.
            ValueError: an index named twice, or rows that do not match the indices.
            RuntimeError: a named sub-env is still processing an operation.
        """
        self._send("step", tensordict, env_index)

    def async_step_recv(
        self,
        min_get: int | None = None,
        env_index: int | None = None,
        *,
        max_get: int | None = None,
        timeout: float | None = None,
    ) -> TensorDictBase:
        """The results (root and ``"next"``) of finished steps, sorted by env index.

        Args:
            min_get: wait until this many have finished (default ``self.min_get``).
            env_index: receive the step sent with ``env_index=`` this int (its result
                has no pool dim).
            max_get: return at most this many (the others are kept for a later call).
            timeout: after ``min_get``, wait up to this many seconds for more.

        Raises:
            ValueError: ``min_get < 1``, ``max_get < min_get`` or ``timeout < 0``.
            RuntimeError: fewer steps in flight than ``min_get``, or none for
                ``env_index``.
        """
        return self._recv("step", min_get, env_index, max_get, timeout)

    def async_reset_send(
        self,
        tensordict: TensorDictBase | None = None,
        env_index: int | list[int] | None = None,
    ) -> None:
        """Starts a reset of the sub-envs named as in :meth:`async_step_send`
        (``tensordict`` may be ``None`` when ``env_index`` names them)."""
        self._send("reset", tensordict, env_index)

    def async_reset_recv(
        self,
        min_get: int | None = None,
        env_index: int | None = None,
        *,
        max_get: int | None = None,
        timeout: float | None = None,
    ) -> TensorDictBase:
        """The results of finished resets (see :meth:`async_step_recv`)."""
        return self._recv("reset", min_get, env_index, max_get, timeout)

    def async_step_and_maybe_reset_send(
        self, tensordict: TensorDictBase, env_index: int | list[int] | None = None
    ) -> None:
        """Starts ``step_and_maybe_reset`` on the sub-envs named as in
        :meth:`async_step_send`."""
        self._send("step_and_maybe_reset", tensordict, env_index)

    def async_step_and_maybe_reset_recv(
        self,
        min_get: int | None = None,
        env_index: int | None = None,
        *,
        max_get: int | None = None,
        timeout: float | None = None,
    ) -> tuple[TensorDictBase, TensorDictBase]:
        """``(tensordict, root_next)`` of finished ``step_and_maybe_reset`` operations
        (see :meth:`async_step_recv` and :meth:`EnvBase.step_and_maybe_reset`)."""
        return self._recv("step_and_maybe_reset", min_get, env_index, max_get, timeout)

    def stats(self, *, reset: bool = False) -> dict[str, float | int]:
        """Counters of the results the ``async_*_recv`` calls returned.

        ``batches`` (calls), ``items`` (results), ``avg_batch_size``,
        ``batch_fill_ratio`` (results over the most each call could return: ``max_get``
        or the envs in flight), ``partial_batch_fraction`` (calls that returned fewer),
        ``avg_observation_to_batch_ms`` (from a result's arrival to its return),
        ``avg_batch_to_action_ms`` (from a result's return to the next step sent to
        that env) and ``consumer_busy_fraction`` (the share of time since the counters
        started spent between a batch's return and the first action sent after it).
        TorchRL reports them for its shared-memory exchange only.

        Args:
            reset: clear the counters after reading them.
        """
        with self._lock:
            return self._stats.snapshot(reset)

    # ------------------------------------------------------------------ sync API
    def _all(self, tensordict: TensorDictBase | None) -> list[int]:
        if self._inflight:
            raise RuntimeError(
                f"{type(self).__name__}: some envs are still processing an operation "
                f"({self._describe_inflight()}); receive their results first"
            )
        return list(range(self.num_envs))

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        indices = self._all(tensordict)
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if mask is not None:
            mask = mask.reshape(self.num_envs, -1).any(-1)
            indices = [i for i in indices if bool(mask[i])]
        rows = None
        if tensordict is not None:
            rows = tensordict.exclude(self._env_idx_key, "_reset").unbind(0)
            rows = [rows[i] for i in indices]
        self._send("reset", None if rows is None else self._stack_func(rows), indices)
        results = self._take_all("reset", indices)
        if len(indices) < self.num_envs:  # rows kept: EnvBase.reset restores their values
            filler = {i: r for i, r in zip(indices, results, strict=True)}
            results = [
                filler[i] if i in filler else self._zero_reset(i) for i in range(self.num_envs)
            ]
        return self._stack_func(results)

    def _zero_reset(self, index: int) -> TensorDictBase:
        spec = self._child_specs[index]["output_spec"]
        out = spec["full_observation_spec"].zero()
        out.update(spec["full_done_spec"].zero())
        return self._finish(index, out, batched=True)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        indices = self._all(tensordict)
        self._send("step", tensordict.exclude(self._env_idx_key, "next"), indices)
        results = self._take_all("step", indices)
        return self._stack_func([r.get("next") for r in results])

    def step_and_maybe_reset(
        self, tensordict: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        """Steps every sub-env and resets the done ones, each in its thread or worker.

        Returns:
            ``(tensordict, root_next)``, both with the ``"env_index"`` entry.
        """
        self._check_batch(tensordict, "step_and_maybe_reset()")
        indices = self._all(tensordict)
        self._send("step_and_maybe_reset", tensordict.exclude(self._env_idx_key), indices)
        results = self._take_all("step_and_maybe_reset", indices)
        return (
            self._stack_func([r[0] for r in results]),
            self._stack_func([r[1] for r in results]),
        )

    def _take_all(self, op: str, indices: list[int]) -> list[Any]:
        """Waits for ``op`` on ``indices`` (sent with a list) and returns the results in
        index order."""
        with self._lock:
            while any(i not in self._ready for i in indices):
                self._pump(None)
            results = []
            for index in indices:
                del self._inflight[index]
                results.append(self._finish(index, self._ready.pop(index), batched=True))
        return results

    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int | None:
        """Seeds sub-env ``i`` with the ``i``-th seed of the chain each sub-env's
        ``set_seed`` returns (as :class:`~rl.envs.SerialEnv`, so both give the same
        episodes); returns the seed that follows.

        Raises:
            RuntimeError: some sub-envs are processing an operation.
        """
        self._all(None)
        return self._seed(seed, static_seed)

    @abstractmethod
    def _seed(self, seed: int | None, static_seed: bool) -> int | None:
        """Seeds the sub-envs in turn (see :meth:`set_seed`)."""

    def _set_seed(self, seed: int | None) -> None:
        self.set_seed(seed)

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Stops the threads or worker processes (idempotent)."""
        self.shutdown()
        self.is_closed = True

    def _maybe_shutdown(self) -> None:
        """Shuts down, ignoring errors (TorchRL's helper, used by finalizers)."""
        try:
            self.shutdown()
        except Exception:  # noqa: BLE001  (a finalizer must not raise)
            pass

    def __reduce__(self):
        """Pickles the construction arguments (the makers must pickle): the copy starts
        its own threads or worker processes."""
        kwargs = {**self._init_kwargs, "create_env_kwargs": self.create_env_kwargs}
        return _rebuild_pool, (type(self), self.env_makers, kwargs)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_envs={self.num_envs}, batch_size={self.batch_size}, "
            f"stack={self.stack!r})"
        )


def _rebuild_pool(cls: type, env_makers: list, kwargs: dict) -> AsyncEnvPool:
    return cls(env_makers, **kwargs)


class _BatchStats:
    """The counters :meth:`AsyncEnvPool.stats` reports (times from ``time.monotonic``)."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.start = time.monotonic()
        self.batches = 0
        self.items = 0
        self.capacity = 0
        self.partial = 0
        self.arrival_to_batch_s = 0.0
        self.batch_to_action_s = 0.0
        self.actions = 0
        self.busy_s = 0.0
        self.arrived_at: dict[int, float] = {}
        self.returned_at: dict[int, float] = {}
        self.last_batch: float | None = None

    def arrived(self, indices) -> None:
        now = time.monotonic()
        for index in indices:
            self.arrived_at[index] = now

    def batch(self, indices: list[int], capacity: int, started: float | None) -> None:
        now = time.monotonic()
        self.batches += 1
        self.items += len(indices)
        self.capacity += capacity
        self.partial += len(indices) < capacity
        for index in indices:
            self.arrival_to_batch_s += now - self.arrived_at.pop(index, now)
            self.returned_at[index] = now
        self.last_batch = now

    def acted(self, indices: list[int]) -> None:
        now = time.monotonic()
        for index in indices:
            returned = self.returned_at.pop(index, None)
            if returned is not None:
                self.batch_to_action_s += now - returned
                self.actions += 1
        if self.last_batch is not None:
            self.busy_s += now - self.last_batch
            self.last_batch = None

    def snapshot(self, reset: bool) -> dict[str, float | int]:
        batches, items = self.batches, self.items
        elapsed = time.monotonic() - self.start
        out = {
            "batches": batches,
            "items": items,
            "avg_batch_size": items / batches if batches else 0.0,
            "batch_fill_ratio": items / self.capacity if self.capacity else 0.0,
            "partial_batch_fraction": self.partial / batches if batches else 0.0,
            "avg_observation_to_batch_ms": 1e3 * self.arrival_to_batch_s / items if items else 0.0,
            "avg_batch_to_action_ms": (
                1e3 * self.batch_to_action_s / self.actions if self.actions else 0.0
            ),
            "consumer_busy_fraction": self.busy_s / elapsed if elapsed > 0 else 0.0,
        }
        if reset:
            self.clear()
        return out
