"""Replay buffers: a storage, a sampler and a writer composed behind one lock."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from tensordict import NestedKey, TensorDictBase

from rl.core.trainers import atomic_save, load_checkpoint
from rl.data.replay_buffers._conditional_update import (
    ConditionalUpdateResult,
    update_if_present,
)
from rl.data.replay_buffers._query import Trajectory, query_trajectories, storage_content
from rl.data.replay_buffers._sample_units import SampleUnit
from rl.data.replay_buffers._transform_chain import InvertedTransform, TransformChain
from rl.data.replay_buffers._utils import CheckpointAliases, decode_item, encode_item
from rl.data.replay_buffers.samplers._consuming import ConsumingSampler
from rl.data.replay_buffers.samplers._random import RandomSampler
from rl.data.replay_buffers.samplers._sampler import Sampler
from rl.data.replay_buffers.storages._base import ListStorage, Storage, _check_checkpointer
from rl.data.replay_buffers.writers._writers import (
    RoundRobinWriter,
    Writer,
    _batch_len,
)

_CHECKPOINT_FILE = "replay_buffer.pt"
_CHECKPOINT_VERSION = 2  # 2: TorchRL's state_dict layout ("_storage", "_sampler", ...)


class MissingBatchSizeError(ValueError, RuntimeError):
    """``sample()`` without a batch size, here or at construction (a ``ValueError``, and
    the ``RuntimeError`` TorchRL raises)."""


def _consuming_sampler(sampler: Sampler, count: Any) -> ConsumingSampler:
    """The sampler of ``consume_after_n_samples=count``: a :class:`ConsumingSampler` in
    place of a plain :class:`RandomSampler`, or the one given if it agrees."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        error = ValueError if isinstance(count, int) and not isinstance(count, bool) else TypeError
        raise error(f"consume_after_n_samples must be a positive integer, got {count!r}")
    if isinstance(sampler, ConsumingSampler):
        if sampler.max_sample_count != count:
            raise ValueError(
                f"consume_after_n_samples={count} conflicts with the given ConsumingSampler's "
                f"max_sample_count={sampler.max_sample_count}"
            )
        return sampler
    if type(sampler) is not RandomSampler:
        raise ValueError(
            f"consume_after_n_samples only supports the default RandomSampler or a "
            f"ConsumingSampler, got {type(sampler).__name__}"
        )
    return ConsumingSampler(max_sample_count=count)


def _clone_result(result: Any) -> Any:
    """A copy of a sampled ``(data, info)`` that shares no memory with it: tensors are
    detached copies that keep ``requires_grad`` (a checkpoint holds values, not graphs)."""
    if isinstance(result, torch.Tensor):
        out = result.detach().clone()
        return out.requires_grad_() if result.requires_grad else out
    if isinstance(result, TensorDictBase):
        return result.apply(_clone_result)
    if isinstance(result, dict):
        return {k: _clone_result(v) for k, v in result.items()}
    if isinstance(result, (list, tuple)):
        return type(result)(_clone_result(v) for v in result)
    return result


def _check_batch_size(batch_size: Any, name: str = "batch_size") -> int | None:
    if batch_size is None:
        return None
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"{name} must be a positive int, got {batch_size!r}")
    return batch_size


def _check_direct_service(
    service_backend: str,
    service_backend_options: Mapping[str, Any] | None,
    transport: str,
    transport_options: Mapping[str, Any] | None,
) -> None:
    """The arguments a buffer built in this process (``service_backend="direct"``) takes."""
    if service_backend != "direct":
        raise ValueError(
            f"ReplayBuffer supports service_backend='direct' or 'ray', not {service_backend!r}"
        )
    if transport not in ("auto", "direct"):
        raise ValueError(
            f"A direct ReplayBuffer only supports transport='auto' or 'direct', got {transport!r}"
        )
    if transport_options:
        raise ValueError(
            "transport_options are only valid for a remote ReplayBuffer "
            f"(service_backend='ray'), got {dict(transport_options)!r}"
        )
    if service_backend_options:
        raise ValueError(
            "service_backend_options configure a remote ReplayBuffer (service_backend='ray'), "
            f"got {dict(service_backend_options)!r} for a direct one"
        )


class ReplayBuffer(CheckpointAliases):
    """A replay buffer: a storage holds the items, a writer places them, a sampler picks them.

    Writes and reads take one lock, so a collector thread may ``extend`` while a learner
    thread samples: a batch never holds a half-written item.

    Args:
        storage: where the items live (default ``ListStorage(1000)``).
        sampler: which items a batch holds (default :class:`RandomSampler`).
        writer: where new items go (default :class:`RoundRobinWriter`).
        collate_fn: turns what the storage returns into a batch (default: stack lists of
            tensors/TensorDicts, return tensor storages' batches as they are).
        pin_memory: pin sampled batches (when CUDA is available).
        prefetch: the number of batches sampled ahead, in order, by a background thread
            (a seeded buffer returns the batches it would return without prefetching). The
            queued batches travel with :meth:`state_dict`, :meth:`dumps` and pickling; with
            an epoch-based sampler no batch is sampled past the end of the epoch.
        transform: a callable (or a list of them) applied to every sampled batch, e.g. an
            rl-envs transform; a transform with an ``inv`` method is also applied, inverted,
            to the data given to ``add``/``extend``.
        batch_size: the default batch size of ``sample()`` and of iteration.
        dim_extend: the dim of the data that ``extend`` writes along (default: the last
            of the storage's ``ndim`` dims, i.e. time for a ``[B, T]`` batch in a
            ``ndim=2`` storage); reads through ``rb[...]`` put it back in place.
        checkpointer: an object with ``dumps(storage, path)`` and ``loads(storage, path)``
            used by :meth:`dumps`/:meth:`loads` for the storage (e.g.
            :class:`TensorStorageCheckpointer`); ``None`` keeps the storage's own (see
            :class:`Storage`).
        generator: the ``torch.Generator`` of every random draw of the sampler (seeded
            buffers give the same batches, independently of torch's global seed).
        shared: keep the data of tensor storages in shared memory (for buffers handed to
            other processes); not with ``prefetch``.
        compilable: accepted for TorchRL compatibility (no process-shared counters are
            used here, so the buffer can always be compiled around).
        transform_factory: builds the transform (instead of ``transform``).
        delayed_init: accepted for TorchRL compatibility; components are built at once.
        sample_unit: what each item the sampler draws expands into (a
            :class:`SampleUnit`: :class:`Sequence` gives windows of records around it);
            by default, the item itself (:class:`Transition`).
        consume_after_n_samples: items leave the buffer after being sampled this many
            times (``1``: each is used once); their slots are written first. Builds a
            :class:`ConsumingSampler` in place of the default sampler; ``len(rb)`` counts
            the items left. Needs a 1-D storage and no prefetching.
        service_backend: where the buffer lives: ``"direct"`` (default, this object) or
            ``"ray"``: the call then returns a :class:`~rl.data.RayReplayBuffer` holding a
            buffer of this class (built with the other arguments) in a Ray actor, as
            TorchRL does.
        service_backend_options: with ``"ray"``, ``ray_init_config`` (arguments of
            ``ray.init``) and ``remote_config`` (the actor's Ray options); none apply to
            ``"direct"``.
        transport: how a remote buffer moves data: ``"auto"`` (default) or, for
            ``"direct"``, ``"direct"``; see :class:`~rl.data.RayReplayBuffer` for Ray.
        transport_options: options of a remote buffer's transport (a direct buffer takes
            none).

    Raises:
        ValueError: an unknown ``service_backend``; a ``transport`` other than
            ``"auto"``/``"direct"``, ``transport_options`` or ``service_backend_options``
            for a direct buffer.

    Examples:
        >>> import torch
        >>> from rl.data import ReplayBuffer
        >>> rb = ReplayBuffer(collate_fn=lambda x: x)
        >>> rb.add(1)
        0
        >>> rb.sample(1)
        [1]
        >>> _ = rb.extend([2, 3])
        >>> len(rb), sorted(set(rb.sample(16))) <= [1, 2, 3]
        (3, True)
    """

    def __new__(
        cls,
        *args: Any,
        service_backend: str = "direct",
        service_backend_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        # TorchRL's service selector: a "ray" buffer is a RayReplayBuffer whose actor holds
        # a buffer of this class (Python then skips this class's __init__)
        if service_backend != "ray":
            return super().__new__(cls)
        from rl.data.replay_buffers._ray import RayReplayBuffer

        options = dict(service_backend_options or {})
        ray_init_config = options.pop("ray_init_config", None)
        remote_config = options.pop("remote_config", None)
        if options:
            raise TypeError(f"Unexpected Ray replay-buffer service options: {sorted(options)}")
        return RayReplayBuffer(
            *args,
            replay_buffer_cls=cls,
            ray_init_config=ray_init_config,
            remote_config=remote_config,
            **kwargs,
        )

    @property
    def service_backend(self) -> str:
        """Where this buffer lives: ``"direct"`` (this process)."""
        return "direct"

    def __init__(
        self,
        *,
        storage: Storage | None = None,
        sampler: Sampler | None = None,
        writer: Writer | None = None,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Callable | Sequence[Callable] | None = None,
        batch_size: int | None = None,
        dim_extend: int | None = None,
        checkpointer: Any = None,
        generator: torch.Generator | None = None,
        shared: bool = False,
        compilable: bool | None = None,
        transform_factory: Callable[[], Callable] | None = None,
        delayed_init: bool | None = None,
        sample_unit: SampleUnit | None = None,
        consume_after_n_samples: int | None = None,
        service_backend: str = "direct",
        service_backend_options: dict[str, Any] | None = None,
        transport: str = "auto",
        transport_options: dict[str, Any] | None = None,
    ) -> None:
        _check_direct_service(
            service_backend, service_backend_options, transport, transport_options
        )
        if sample_unit is not None and not isinstance(sample_unit, SampleUnit):
            raise TypeError(
                f"sample_unit must be a SampleUnit (Transition, Sequence), got "
                f"{type(sample_unit).__name__}"
            )
        self._sample_unit = sample_unit
        if transform_factory is not None:
            if transform is not None:
                raise TypeError("pass transform or transform_factory, not both")
            transform = transform_factory()
        self._storage = storage if storage is not None else ListStorage(1000)
        if not isinstance(self._storage, Storage):
            raise TypeError(f"storage must be a Storage, got {type(self._storage).__name__}")
        self._sampler = sampler if sampler is not None else self._default_sampler()
        if consume_after_n_samples is not None:
            self._sampler = _consuming_sampler(self._sampler, consume_after_n_samples)
        if not isinstance(self._sampler, Sampler):
            raise TypeError(f"sampler must be a Sampler, got {type(self._sampler).__name__}")
        self._writer = writer if writer is not None else self._default_writer()
        if not isinstance(self._writer, Writer):
            raise TypeError(f"writer must be a Writer, got {type(self._writer).__name__}")
        self._writer.register_storage(self._storage)
        self._sampler._attach_storage(self._storage)
        if dim_extend is None:
            dim_extend = self._storage.ndim - 1
        if isinstance(dim_extend, bool) or not isinstance(dim_extend, int) or dim_extend < 0:
            raise ValueError(f"dim_extend must be a non-negative int, got {dim_extend!r}")
        self.dim_extend = dim_extend
        if checkpointer is not None:
            _check_checkpointer(checkpointer)
            self._storage.checkpointer = checkpointer
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        self.set_rng(generator)
        if shared and prefetch:
            raise ValueError(
                f"Cannot share prefetched replay buffers: the batches sampled ahead live in "
                f"this process's threads, not in shared memory; got prefetch={prefetch} and "
                f"shared=True: pass prefetch=0 or shared=False"
            )
        self.shared = bool(shared)
        if self.shared:
            self._storage._shared = True
            stored = getattr(self._storage, "_storage", None)
            if isinstance(stored, (torch.Tensor, TensorDictBase)) and stored.device.type == "cpu":
                stored.share_memory_()
                # sharing moves the data to new memory: views of the old one are rebuilt
                adopt = getattr(self._storage, "_adopt", None)
                if adopt is not None:
                    adopt(stored)
        self._compilable = bool(compilable)
        if len(self._storage):
            # items already stored (a reopened memmap storage): announce them to the
            # sampler, oldest first, so priorities and trajectory bounds cover them
            n, end = len(self._storage), getattr(self._storage, "_write_end", 0)
            self._sampler.extend(
                torch.arange(end, end + n) % n if n == self._storage.max_size else torch.arange(n)
            )
        self._custom_collate = collate_fn is not None
        self._collate_fn = collate_fn if collate_fn is not None else self._storage._default_collate
        self._pin_memory = bool(pin_memory)
        if prefetch is not None and (isinstance(prefetch, bool) or not isinstance(prefetch, int)):
            raise TypeError(f"prefetch must be an int, got {prefetch!r}")
        if prefetch is not None and prefetch < 0:
            raise ValueError(f"prefetch must be non-negative, got {prefetch}")
        self._prefetch = prefetch or 0
        self._executor: ThreadPoolExecutor | None = None
        # the batches sampled ahead, oldest first, and the batch size they were sampled with
        self._prefetch_queue: deque[Future] = deque()
        self._prefetch_batch_size: int | None = None
        self._batch_size = _check_batch_size(batch_size)
        if transform is None:
            transform = ()
        elif isinstance(transform, TransformChain):
            transform = transform.transforms
        elif callable(transform):
            transform = (transform,)
        self._transform = TransformChain(transform)
        self._lock = threading.RLock()
        self._futures_lock = threading.RLock()
        if isinstance(self._sampler, ConsumingSampler):
            self._check_consumption()
        if getattr(self._sampler, "drop_last", False) and self._batch_size is None:
            raise ValueError(
                "Samplers with drop_last=True must work with a predictable batch-size: pass "
                "batch_size to the buffer's constructor (the sampler drops the last, smaller "
                "batch of an epoch)"
            )

    _sample_unit: SampleUnit | None = None

    def _check_consumption(self) -> None:
        """A buffer whose items are consumed reuses their slots: it needs a 1-D storage, a
        writer that writes at given positions, and no batch sampled ahead."""
        if self._prefetch:
            raise ValueError(
                "Prefetching is not supported when sampled items are consumed "
                "(consume_after_n_samples / ConsumingSampler): a batch sampled ahead "
                "would consume items early"
            )
        if self._storage.ndim != 1:
            raise ValueError(
                f"consuming sampled items supports 1-dimensional storages, got "
                f"ndim={self._storage.ndim}"
            )
        if not callable(getattr(self._writer, "write_at", None)) or not hasattr(
            self._writer, "_next_positions"
        ):
            raise TypeError(
                f"consuming sampled items requires a writer with a callable write_at (a "
                f"RoundRobinWriter), got {type(self._writer).__name__}"
            )

    def set_rng(self, generator: torch.Generator | None) -> None:
        """Makes the sampler draw from ``generator`` (``None``: torch's global generator)."""
        self._rng = generator
        self._sampler._rng = generator

    @property
    def initialized(self) -> bool:
        return True

    def set_storage(self, storage: Storage, collate_fn: Callable | None = None) -> None:
        """Replaces the storage (the writer and the sampler follow it)."""
        if not isinstance(storage, Storage):
            raise TypeError(f"storage must be a Storage, got {type(storage).__name__}")
        with self._lock:
            self._storage = storage
            self._writer.register_storage(storage)
            self._sampler._attach_storage(storage)
            if collate_fn is not None:
                self._collate_fn, self._custom_collate = collate_fn, True
            elif not self._custom_collate:
                self._collate_fn = storage._default_collate

    def set_sampler(self, sampler: Sampler) -> None:
        if not isinstance(sampler, Sampler):
            raise TypeError(f"sampler must be a Sampler, got {type(sampler).__name__}")
        with self._lock:
            self._sampler = sampler
            sampler._attach_storage(self._storage)
            sampler._rng = self._rng

    def set_writer(self, writer: Writer) -> None:
        if not isinstance(writer, Writer):
            raise TypeError(f"writer must be a Writer, got {type(writer).__name__}")
        with self._lock:
            self._writer = writer
            writer.register_storage(self._storage)

    def can_sample(self, batch_size: int | None = None) -> bool:
        """Whether :meth:`sample` would find items to draw."""
        return len(self._storage) > 0

    def mark_update(self, index: Any) -> None:
        """Tells the sampler that the items at ``index`` were rewritten."""
        with self._lock:
            self._sampler.mark_update(index)

    def next(self) -> Any:
        """A batch of the constructor's ``batch_size`` (as ``next(iter(rb))``)."""
        return self.sample()

    @property
    def write_count(self) -> int:
        """The number of items written through this buffer's writer."""
        return self._writer.write_count

    def _default_sampler(self) -> Sampler:
        return RandomSampler()

    def _default_writer(self) -> Writer:
        return RoundRobinWriter()

    # -- properties ------------------------------------------------------------------------------
    @property
    def storage(self) -> Storage:
        return self._storage

    @property
    def sampler(self) -> Sampler:
        return self._sampler

    @property
    def writer(self) -> Writer:
        return self._writer

    @property
    def batch_size(self) -> int | None:
        return self._batch_size

    @property
    def transform(self) -> TransformChain:
        """The transforms, in the order sampled batches go through them."""
        return self._transform

    def append_transform(self, transform: Callable, *, invert: bool = False) -> ReplayBuffer:
        """Adds ``transform`` after the others.

        Args:
            transform: a callable run on sampled batches (its ``inv`` method, if any, on
                written data).
            invert: run it the other way round: on written data, and its ``inv`` (if any)
                on sampled batches.
        """
        self._transform.append(InvertedTransform(transform) if invert else transform)
        return self

    def insert_transform(
        self, index: int, transform: Callable, *, invert: bool = False
    ) -> ReplayBuffer:
        """Inserts ``transform`` before position ``index`` (see :meth:`append_transform`).

        Raises:
            ValueError: ``index`` is not between ``-len(rb.transform)`` and
                ``len(rb.transform)``.
        """
        self._transform.insert(index, InvertedTransform(transform) if invert else transform)
        return self

    def __len__(self) -> int:
        """The stored items (those not consumed yet, with a :class:`ConsumingSampler`)."""
        if isinstance(self._sampler, ConsumingSampler):
            return self._sampler._num_sampleable(self._storage)
        return len(self._storage)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(storage={self._storage}, sampler={self._sampler}, "
            f"writer={self._writer}, batch_size={self._batch_size})"
        )

    # -- writes ----------------------------------------------------------------------------------
    def add(self, data: Any) -> int:
        """Writes one item and returns its index."""
        if len(self._transform):
            data = self._transform.inv(data)
        with self._lock:
            if isinstance(self._sampler, ConsumingSampler):
                slots = self._sampler._pop_consumed_indices(self._storage, 1)
                if slots.numel():
                    index = self._writer.write_at(int(slots[0]), data)
                    self._sampler.add(index)
                    return index
            index = self._writer.add(data)
            self._sampler.add(index)
        return index

    def _move_dim_extend(self, data: Any, inverse: bool = False) -> Any:
        if not self.dim_extend or not isinstance(data, (torch.Tensor, TensorDictBase)):
            return data
        if len(data.shape) <= self.dim_extend:
            raise ValueError(
                f"dim_extend={self.dim_extend} needs data with more than {self.dim_extend} "
                f"batch dims, got shape {list(data.shape)}"
            )
        return data.transpose(0, self.dim_extend)

    def extend(self, data: Any) -> torch.Tensor:
        """Writes a batch of items (along ``dim_extend``) and returns their indices."""
        if len(self._transform):
            data = self._transform.inv(data)
            if data is None:  # the transform holds the batch back (e.g. MultiStepTransform)
                return torch.zeros(
                    (0, self._storage.ndim) if self._storage.ndim > 1 else (0,), dtype=torch.long
                )
        data = self._move_dim_extend(data)
        with self._lock:
            if isinstance(self._sampler, ConsumingSampler):
                index = self._consumed_slots(data)
                if index is not None:
                    index = self._writer.write_at(index, data)
                    self._sampler.extend(index)
                    return index
            index = self._writer.extend(data)
            self._sampler.extend(index)
        return index

    def _consumed_slots(self, data: Any) -> torch.Tensor | None:
        """Where a batch goes when items are consumed: consumed slots first, then the
        writer's next positions (skipping those slots); ``None`` when no slot is free."""
        n = _batch_len(data)
        slots = self._sampler._pop_consumed_indices(self._storage, n)
        if not slots.numel():
            return None
        if slots.numel() < n:
            rest = self._writer._next_positions(n - slots.numel(), skip=slots)
            slots = torch.cat([slots, rest])
        return slots

    def update_priority(self, index: Any, priority: Any) -> None:
        """Sets the priorities of the items at ``index`` (prioritized samplers only)."""
        with self._lock:
            self._sampler.update_priority(index, priority)

    def empty(self, empty_write_count: bool = True) -> None:
        """Forgets every item, the sampler's state and the writer's cursor.

        Args:
            empty_write_count: also reset :attr:`write_count` (``False`` keeps counting
                the items written since construction).
        """
        with self._futures_lock:
            self._drain_prefetch()
        with self._lock:
            # the writer first: a writer that refuses (an immutable dataset) leaves all as is
            if empty_write_count:
                self._writer._empty()
            else:
                self._writer._empty(empty_write_count=False)
            self._sampler._empty()
            self._storage._empty()

    # -- in-place rewrites -----------------------------------------------------------------------
    def __setitem__(self, index: Any, value: Any) -> None:
        """Rewrites stored items in place, as TorchRL: ``rb[index] = value``.

        ``index`` takes what ``rb[index]`` reads: storage positions (an int, slice, tensor
        or list), through the buffer's inverted transforms as :meth:`extend` writes; a
        tuple of them (one per dim of what ``rb[:]`` returns); or a key, which rewrites
        that entry of every item. A TensorDict holding a part of the stored entries
        rewrites those only; one holding new entries adds them to the storage (zeros for
        the other items; not to a memory-mapped one). The writer's cursor does not move
        and the buffer's length only grows when positions past it are written.
        """
        if isinstance(index, str) or (
            isinstance(index, tuple) and index and all(isinstance(k, str) for k in index)
        ):
            self.set_(index, value)
            return
        if isinstance(index, tuple) and len(index) == 1:
            index = index[0]
        if len(self._transform):
            value = self._transform.inv(value)
        if isinstance(value, TensorDictBase) and getattr(self._storage, "_is_td", False):
            # a rewrite may add entries (zeros elsewhere), as TorchRL
            with self._lock:
                self._storage._add_entries(value)
        partial = self._is_partial(value)
        if partial and not isinstance(index, tuple) and not self.dim_extend:
            if getattr(self._storage, "_objects", None):
                # non-tensor entries: tensordict cannot write into a view of a memory-mapped
                # stack; the items are read, updated and written back through the storage
                with self._lock:
                    # positions count over the filled items (negative ones from their end),
                    # as in the view the other rewrites go through
                    filled = torch.arange(self._storage._len_along_dim0)
                    if isinstance(index, (list, range)):
                        index = torch.as_tensor(index)
                    index = filled[index]
                    if index.ndim == 0:  # one item
                        index = int(index)
                    items = self._storage.get(index).clone()
                    items.update(value)
                    self._storage.set(index, items)
                return
        if isinstance(index, tuple) or self.dim_extend or partial:
            with self._lock:
                view = self._move_dim_extend(self._storage.get(slice(None)))
                view[index] = value
                self._storage._bump_mutation_revision()
            return
        if isinstance(index, list):
            index = torch.as_tensor(index)
        with self._lock:
            self._storage.set(index, value)

    def _is_partial(self, value: Any) -> bool:
        """Whether ``value`` holds a part of the stored entries (those alone are rewritten)."""
        storage = self._storage
        if not (isinstance(value, TensorDictBase) and getattr(storage, "_is_td", False)):
            return False
        given = set(value.keys(include_nested=True, leaves_only=True))
        return given < set(storage._sig)

    def _stored_tensordict(self, method: str) -> TensorDictBase:
        """The stored items as one TensorDict of views (writes reach the storage)."""
        data = self._storage.get(slice(None))
        if not isinstance(data, TensorDictBase):
            raise TypeError(
                f"{method} rewrites the entries of stored TensorDicts; this buffer's storage "
                f"holds {type(data).__name__}"
            )
        return data

    def set_(self, key: Any, value: torch.Tensor) -> ReplayBuffer:
        """Overwrites the entry ``key`` of every stored item in place (``value`` has one
        row per item)."""
        with self._lock:
            self._stored_tensordict("set_").set_(key, value)
            self._storage._bump_mutation_revision()
        return self

    def set_at_(self, key: Any, value: torch.Tensor, index: Any) -> ReplayBuffer:
        """Overwrites the entry ``key`` of the stored items at ``index`` in place."""
        with self._lock:
            self._stored_tensordict("set_at_").set_at_(key, value, torch.as_tensor(index))
            self._storage._bump_mutation_revision()
        return self

    def update_(
        self, input_dict_or_td: Any, clone: bool = False, *, keys_to_update: Any = None
    ) -> ReplayBuffer:
        """Overwrites, in place, the entries of every stored item that ``input_dict_or_td``
        holds (one row per item)."""
        with self._lock:
            self._stored_tensordict("update_").update_(
                input_dict_or_td, clone=clone, keys_to_update=keys_to_update
            )
            self._storage._bump_mutation_revision()
        return self

    def update_if_present(
        self,
        *,
        index: torch.Tensor,
        generation: torch.Tensor,
        patch: Mapping[Any, torch.Tensor] | TensorDictBase,
        version_key: Any = None,
        version: int | torch.Tensor | None = None,
        require_newer: bool = False,
    ) -> ConditionalUpdateResult:
        """Patches stored records that are still the ones sampled, as TorchRL.

        A slot is reused when the writer wraps around, so an index sampled earlier may
        now hold another record. A record is patched only while its slot's generation
        (``writer.generations_of``) is the one taken with its index (``"index_generation"``
        in a sample); other records are left untouched. The same handle works again
        after a patch (a patch changes what a record holds, not which record it is).
        With ``version_key``, a live record is patched only when ``version`` beats the
        one stored there (``>=``, or ``>`` with ``require_newer``), and ``version`` is
        written with the patch; among several rows for one record, the highest version
        (the last on ties) is the one applied. Needs a tensor storage and
        ``RoundRobinWriter(track_generations=True)``.

        Args:
            index: storage positions (``[N]``, or ``[N, ndim]`` coordinates), as
                :meth:`extend` returns them or a sample's ``"index"``.
            generation: ``[N]`` generations taken with them.
            patch: new values of stored entries, ``N`` rows each (every entry is checked
                before anything is written).
            version_key: a stored entry of one number per record.
            version: the incoming version: a number, or one per record.
            require_newer: reject equal versions.

        Returns:
            a :class:`ConditionalUpdateResult` (``updated``, ``version_rejected``,
            ``updated_count``, ``stale_count``, ``version_rejected_count``).

        Raises:
            RuntimeError: the storage or the writer cannot tell live records.
            KeyError: a patched entry (or ``version_key``) is not stored.
            ValueError: a patch of the wrong shape or dtype; ``version_key`` without
                ``version`` (or the reverse), in the patch, or not one number per record.
        """
        return update_if_present(
            self._storage,
            self._writer,
            self._lock,
            index=index,
            generation=generation,
            patch=patch,
            version_key=version_key,
            version=version,
            require_newer=require_newer,
        )

    def read_all_in_order(self, end: int | None = None) -> Any:
        """The stored items in storage order, ``rb[:end]`` (``rb[:]`` by default)."""
        return self[:] if end is None else self[:end]

    def write_all(self, data: Any, end: int | None = None) -> None:
        """Writes ``data`` back over the first stored items, ``rb[:end] = data`` (``end``:
        the number of items in ``data`` by default)."""
        if end is None:
            end = data.shape[0] if isinstance(data, (torch.Tensor, TensorDictBase)) else len(data)
        self[:end] = data

    def stats(self) -> dict[str, int | float | bool]:
        """A cheap snapshot of the buffer's counters, made of plain numbers (JSON-ready).

        Returns:
            ``size`` (``len(rb)``), ``write_count``, ``prefetch_queue_size`` (batches
            sampled ahead), ``initialized`` and, for a storage with a capacity,
            ``capacity`` and ``utilization`` (``size / capacity``).
        """
        with self._lock:
            size = len(self._storage)
            write_count = self._writer.write_count
            queued = len(self._prefetch_queue)
        stats: dict[str, int | float | bool] = {
            "size": int(size),
            "write_count": int(write_count),
            "prefetch_queue_size": int(queued),
            "initialized": True,
        }
        capacity = getattr(self._storage, "max_size", None)
        if capacity is not None:
            stats["capacity"] = int(capacity)
            stats["utilization"] = float(size) / capacity if capacity else 0.0
        return stats

    # -- reads -----------------------------------------------------------------------------------
    def __getitem__(self, index: Any) -> Any:
        """The items at ``index`` (an int, slice, tensor or array of storage positions; a
        key or nested key reads that entry of every item), through the buffer's
        transforms as :meth:`sample` returns them, as in TorchRL. The storage itself is
        not changed."""
        if isinstance(index, str) or (
            isinstance(index, tuple) and index and all(isinstance(k, str) for k in index)
        ):
            return self[:][index]
        with self._lock:
            data = self._storage[index]
        if isinstance(data, list):
            data = self._collate_fn(data)
        if self.dim_extend and isinstance(index, slice):
            data = self._move_dim_extend(data)
        if len(self._transform):
            if isinstance(data, TensorDictBase):
                # a shallow copy: the transforms replace its entries, never the storage's
                # (a memmap storage returns locked views)
                data = data.copy()
            data = self._postprocess(data)
        return data

    def _postprocess(self, data: Any) -> Any:
        if len(self._transform):
            data = self._transform(data)
        if self._pin_memory and torch.cuda.is_available():
            data = data.pin_memory()
        return data

    def _sample(self, batch_size: int) -> tuple[Any, dict]:
        with self._lock:
            index, info = self._sampler.sample(self._storage, batch_size)
            if self._sample_unit is not None:
                index, info = self._sample_unit.expand(index, info, self._storage)
            data = self._storage.get(index)
            if self._writer.tracks_generations:
                info["index_generation"] = self._writer.generations_of(index)
        info["index"] = index
        data = self._collate_fn(data)
        return self._postprocess(data), info

    def _drain_prefetch(self) -> None:
        while self._prefetch_queue:
            future = self._prefetch_queue.popleft()
            future.cancel()
            try:
                future.result()
            except BaseException:  # noqa: BLE001 - the batch is thrown away anyway
                pass

    def _sample_ahead(self, batch_size: int) -> tuple[Any, dict] | None:
        """One prefetched batch; ``None`` past the end of an epoch-based sampler's epoch
        (the consumer has not reached that end yet: a new epoch starts when it asks)."""
        with self._lock:
            if self._sampler._epoch_based and self._sampler.ran_out:
                return None
            return self._sample(batch_size)

    def _sample_prefetched(self, batch_size: int) -> tuple[Any, dict]:
        if self._executor is None:
            # one thread: the batches are drawn in the order they are queued, so that the
            # generator gives the same batches as without prefetching
            self._executor = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="rl-replay-prefetch"
            )
        if self._prefetch_queue and self._prefetch_batch_size != batch_size:
            self._drain_prefetch()
        result = None
        if self._prefetch_queue:
            future = self._prefetch_queue.popleft()
            try:
                result = future.result()
            except BaseException:
                self._drain_prefetch()
                raise
        if result is None:  # nothing queued, or the epoch ended: sample now
            self._drain_prefetch()
            result = self._sample(batch_size)
        self._prefetch_batch_size = batch_size
        while len(self._prefetch_queue) < self._prefetch:
            self._prefetch_queue.append(self._executor.submit(self._sample_ahead, batch_size))
        return result

    def _queued_results(self) -> list[tuple[Any, dict]]:
        """The prefetched batches, waited for (the caller holds ``_futures_lock``)."""
        results = []
        for future in self._prefetch_queue:
            result = future.result()
            if result is None:  # the end of the epoch: nothing after it
                break
            results.append(result)
        return results

    def _prefetch_state(self, results: list[tuple[Any, dict]]) -> dict[str, Any]:
        return {
            "version": 1,
            "capacity": self._prefetch,
            "queue": [_clone_result(result) for result in results],
            "batch_size": self._prefetch_batch_size,
        }

    def _check_prefetch_state(self, state: Mapping[str, Any] | None) -> None:
        if state is None:
            return
        if state.get("version") != 1:
            raise RuntimeError(f"Unsupported prefetch state version: {state.get('version')!r}")
        capacity, queue = state.get("capacity"), state.get("queue")
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            raise ValueError(
                f"the saved prefetch capacity must be a non-negative int, got {capacity!r}"
            )
        if capacity != self._prefetch:
            raise RuntimeError(
                f"Cannot restore a prefetch queue with capacity {capacity} into a replay "
                f"buffer with capacity {self._prefetch} (prefetch={self._prefetch})"
            )
        if not isinstance(queue, (list, tuple)) or len(queue) > capacity:
            raise ValueError(
                f"the saved prefetch queue must be a list of at most {capacity} batches, "
                f"got {queue!r:.80}"
            )

    def _restore_prefetch(self, state: Mapping[str, Any] | None) -> None:
        """Replaces the queue (the caller holds ``_futures_lock`` and drained it)."""
        if not state or not state["queue"]:
            return
        self._prefetch_batch_size = state.get("batch_size", self._batch_size)
        for result in state["queue"]:
            future: Future = Future()
            future.set_result(_clone_result(result))
            self._prefetch_queue.append(future)

    def query(
        self,
        predicate: Callable[[Trajectory], bool] | None = None,
        *,
        trajectory_key: NestedKey | None = None,
    ) -> list[Trajectory]:
        """The stored trajectories that ``predicate`` accepts, oldest first.

        Trajectories are cut as :class:`~rl.data.SliceSampler` cuts them (by trajectory ids,
        else by end-of-episode flags; see :func:`~rl.data.iter_trajectories`), following a
        trajectory through the wrap point of a full buffer; the oldest one may have lost
        its first steps to overwriting. Each comes back with the buffer's transforms
        applied, as a sample would. A predicate made from :data:`~rl.data.traj` is decided
        on the entries it reads only, after the transforms that can change them.

        Args:
            predicate (callable, optional): a :class:`~rl.data.TrajectoryPredicate` or any
                ``Trajectory -> bool``. Defaults to every trajectory.

        Keyword Args:
            trajectory_key (NestedKey, optional): the entry of trajectory ids (default:
                ``("collector", "traj_ids")``, ``"traj_ids"`` or ``"episode"``).

        Raises:
            TypeError: the storage holds something other than tensordicts.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> from rl.data import LazyTensorStorage, ReplayBuffer, traj
            >>> rb = ReplayBuffer(storage=LazyTensorStorage(10))
            >>> _ = rb.extend(TensorDict(
            ...     episode=torch.tensor([0, 0, 0, 1, 1]),
            ...     next=TensorDict(reward=torch.tensor([[1.], [1.], [1.], [0.], [5.]]),
            ...                     batch_size=[5]),
            ...     batch_size=[5]))
            >>> [t.length for t in rb.query()], [t.length for t in rb.query(traj.reward.max() > 2)]
            ([3, 2], [2])
        """
        storage = self._storage
        with self._lock:
            content = storage_content(storage)
            if content is None:
                return []
            rows = storage._max_size_along_dim0()
            full = storage._len_along_dim0 >= rows
            # the next row to write: the storage's own record, else the writer's
            following = getattr(storage, "_write_end", None)
            if following is None:
                following = getattr(self._writer, "_cursor", storage._len_along_dim0)
            cursor = (int(following) - 1) % rows
        return query_trajectories(
            content,
            predicate,
            transforms=list(self._transform),
            trajectory_key=trajectory_key,
            at_capacity=full,
            cursor=cursor,
        )

    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        """Samples a batch.

        Args:
            batch_size: the number of items; the constructor's ``batch_size`` when omitted.
            return_info: also return the sampler's info (``"index"``, importance weights).

        Raises:
            RuntimeError: the buffer is empty.
            ValueError: no batch size was given here nor at construction (also a
                ``RuntimeError``, as TorchRL raises).
        """
        if batch_size is None:
            batch_size = self._batch_size
            if batch_size is None:
                raise MissingBatchSizeError(
                    "sample() needs a batch_size (batch_size not specified): pass one here or "
                    "to the buffer's constructor"
                )
        else:
            _check_batch_size(batch_size)
        if self._prefetch:
            with self._futures_lock:
                data, info = self._sample_prefetched(batch_size)
        else:
            data, info = self._sample(batch_size)
        return (data, info) if return_info else data

    def __iter__(self) -> Iterator[Any]:
        if self._batch_size is None:
            raise RuntimeError(
                "Cannot iterate over the replay buffer. Batch_size was not specified: "
                "iterating over a replay buffer needs batch_size at construction"
            )
        sampler = self._sampler
        if sampler._epoch_based and self._prefetch:
            # the batches sampled ahead belong to this epoch; it ends when the sampler ran
            # out and none of them is left
            with self._futures_lock:
                if sampler.ran_out and not self._queued_results():
                    sampler.ran_out = False
            while True:
                yield self.sample()
                with self._futures_lock:
                    if sampler.ran_out and not self._queued_results():
                        return
        if sampler._epoch_based:
            # an epoch ends exactly where the sampler says
            if sampler.ran_out:
                sampler.ran_out = False
            while True:
                data, _ = self._sample(self._batch_size)
                yield data
                if sampler.ran_out:
                    return
        while True:
            yield self.sample()

    # -- checkpoints -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The buffer's state, made of plain containers and tensors, laid out as TorchRL's:
        ``_storage``, ``_sampler``, ``_writer``, ``_transforms`` (the states of the
        transforms that have one), ``_batch_size`` and ``_rng`` (the generator's state and
        device, ``None`` without a generator) and ``_prefetch_state`` (the batches sampled
        ahead, waited for, copied: ``version``, ``capacity``, ``queue`` of ``(data, info)``)."""
        # the queued batches take the buffer's lock to sample: wait for them before taking it
        with self._futures_lock:
            results = self._queued_results()
            with self._lock:
                rng = self._rng
                return {
                    "_storage": self._storage.state_dict(),
                    "_sampler": self._sampler.state_dict(),
                    "_writer": self._writer.state_dict(),
                    "_transforms": self._transform.state_dict(),
                    "_batch_size": self._batch_size,
                    "_rng": None if rng is None else (rng.get_state().clone(), str(rng.device)),
                    "_prefetch_state": self._prefetch_state(results),
                }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores a :meth:`state_dict`; a saved generator state replaces the buffer's, and
        the saved prefetched batches replace the queued ones (a state without any, as older
        ones, leaves the queue empty).

        Raises:
            RuntimeError: the state's prefetch queue was saved with another ``prefetch``
                (nothing is changed).
        """
        prefetch_state = state_dict.get("_prefetch_state")
        self._check_prefetch_state(prefetch_state)
        with self._futures_lock:
            self._drain_prefetch()
            with self._lock:
                self._storage.load_state_dict(state_dict["_storage"])
                self._load_components(state_dict)
                self._restore_prefetch(prefetch_state)

    def _load_components(self, state_dict: dict[str, Any]) -> None:
        """Everything but the storage (which a checkpointer may restore instead)."""
        self._sampler.load_state_dict(state_dict["_sampler"])
        self._writer.load_state_dict(state_dict["_writer"])
        self._transform.load_state_dict(state_dict.get("_transforms", {}))
        self._batch_size = state_dict["_batch_size"]
        rng = state_dict.get("_rng")
        if rng is not None:
            state, device = rng
            generator = torch.Generator(device=device)
            generator.set_state(state)
            self.set_rng(generator)

    def dumps(self, path: str | Path) -> None:
        """Saves the buffer in the directory ``path``, atomically.

        The checkpoint is written to a temporary file in ``path`` and renamed over the
        previous one: a process killed during the dump leaves the previous checkpoint intact.
        A buffer built with a ``checkpointer`` hands the storage to it (``path/storage``).

        Raises:
            OSError: the file could not be written (a full disk: ``errno.ENOSPC``), naming
                the file and the cause; the partial file is removed.
        """
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        checkpointer = self._storage.checkpointer
        # the queued batches take the buffer's lock to sample: they are waited for before it
        # is taken (holding the futures' lock, no batch is queued meanwhile)
        with self._futures_lock:
            self._queued_results()
            with self._lock:
                state = self.state_dict()
                state["version"] = _CHECKPOINT_VERSION
                prefetch = state["_prefetch_state"]
                prefetch["queue"] = [encode_item(result) for result in prefetch["queue"]]
                if checkpointer is not None:
                    state["_storage"] = None
                    checkpointer.dumps(self._storage, path / "storage")
        atomic_save(state, path / _CHECKPOINT_FILE)

    def loads(self, path: str | Path) -> None:
        """Restores a buffer saved by :meth:`dumps` (tensors only: nothing is unpickled).

        Raises:
            FileNotFoundError: ``path`` holds no checkpoint.
            CheckpointError: the file holds anything but tensors and plain containers
                (nothing in it is run), or is not a checkpoint.
        """
        file = Path(path) / _CHECKPOINT_FILE
        if not file.exists():
            raise FileNotFoundError(f"no replay-buffer checkpoint at '{file}'")
        state = load_checkpoint(file)
        if state.get("version") != _CHECKPOINT_VERSION:
            raise ValueError(
                f"'{file}' has checkpoint version {state.get('version')}, "
                f"expected {_CHECKPOINT_VERSION}"
            )
        prefetch = state.get("_prefetch_state")
        if prefetch is not None and isinstance(prefetch.get("queue"), list):
            prefetch["queue"] = [decode_item(result) for result in prefetch["queue"]]
        if state["_storage"] is None:
            checkpointer = self._storage.checkpointer
            if checkpointer is None:
                raise ValueError(
                    f"'{file}' was saved with a storage checkpointer; build this buffer with "
                    "the same checkpointer to load it"
                )
            self._check_prefetch_state(prefetch)
            with self._futures_lock:
                self._drain_prefetch()
                with self._lock:
                    checkpointer.loads(self._storage, Path(path) / "storage")
                    self._load_components(state)
                    self._restore_prefetch(prefetch)
            return
        self.load_state_dict(state)

    # -- pickling --------------------------------------------------------------------------------
    # what a copy rebuilds instead of pickling: the locks, the prefetch threads and their
    # futures (a subclass adds its own caches)
    _UNPICKLED: tuple[str, ...] = ("_lock", "_futures_lock", "_executor", "_prefetch_queue")

    def __getstate__(self) -> dict[str, Any]:
        """The buffer's state for ``pickle`` and ``copy.deepcopy``, as TorchRL 0.14.

        The locks and the prefetch threads are not copied: the copy makes new ones. Batches
        already prefetched are waited for and travel with the state, so that the copy
        returns the same batches as the original (a prefetch that failed is dropped).
        A memory-mapped storage pickles as a reference to its files (so that processes
        can share it): a pickled copy writes to the original's files, a deep copy to its
        own. A copy made before the storage's first write gets its own temporary
        directory (or, sharing a given ``scratch_dir``, raises on its second allocation).
        """
        with self._futures_lock:
            try:
                results = self._queued_results()
            except Exception:  # noqa: BLE001 - a failed prefetch: the copy samples again
                results = []
            with self._lock:
                state = self.__dict__.copy()
                state["_prefetch_state"] = self._prefetch_state(results)
        for name in self._UNPICKLED:
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        prefetch = state.pop("_prefetch_state", None)
        self.__dict__.update(state)
        self._lock = threading.RLock()
        self._futures_lock = threading.RLock()
        self._executor = None
        self._prefetch_queue = deque()
        self._restore_prefetch(prefetch)

    def __del__(self) -> None:
        executor = getattr(self, "_executor", None)
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
