"""Ensembles: sample from several replay buffers at once (``ReplayBufferEnsemble``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey, unravel_key

from rl.data.replay_buffers._buffers import ReplayBuffer
from rl.data.replay_buffers.samplers._sampler import Sampler
from rl.data.replay_buffers.storages._base import Storage
from rl.data.replay_buffers.writers._writers import Writer

_WRITE_ERROR = (
    "an ensemble cannot be written to directly; write to one of its members: rb[i].extend(data)"
)


class StorageEnsemble(Storage):
    """The storages of the members of a :class:`ReplayBufferEnsemble`.

    Args:
        *storages: the storages.
        transforms: one transform (or ``None``) per storage, applied to what it returns.
    """

    def __init__(self, *storages: Storage, transforms: Sequence[Callable | None] | None = None):
        if not storages:
            raise ValueError("StorageEnsemble needs at least one storage")
        if transforms is not None and len(transforms) != len(storages):
            raise TypeError(
                f"got {len(transforms)} transforms for {len(storages)} storages; pass one per "
                "storage (None for no transform)"
            )
        super().__init__(sum(s.max_size for s in storages))
        self._storages = tuple(storages)
        self._transforms = None if transforms is None else list(transforms)

    def set(self, cursor: Any, data: Any) -> None:
        raise RuntimeError(_WRITE_ERROR)

    def get(self, index: Any) -> Any:
        return self._storages[index] if isinstance(index, int) else self[index]

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, int):
            return self._storages[index]
        if isinstance(index, tuple):
            return self._storages[index[0]][index[1:] if len(index) > 2 else index[1]]
        raise IndexError(f"index a StorageEnsemble with an int or (int, index), got {index!r}")

    def __len__(self) -> int:
        return sum(len(s) for s in self._storages)

    def _empty(self) -> None:
        for storage in self._storages:
            storage._empty()

    def state_dict(self) -> dict[str, Any]:
        return {str(i): s.state_dict() for i, s in enumerate(self._storages)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for i, storage in enumerate(self._storages):
            storage.load_state_dict(state_dict[str(i)])

    def __repr__(self) -> str:
        return f"StorageEnsemble(storages={self._storages}, transforms={self._transforms})"


class SamplerEnsemble(Sampler):
    """Chooses which members of a :class:`ReplayBufferEnsemble` a batch comes from.

    Args:
        *samplers: the members' samplers.
        p: the probability of each member (normalised); uniform when omitted.
        sample_from_all: take every member once per batch (exclusive with ``p``).
        num_buffer_sampled: how many members (with replacement) a batch draws; the number
            of members by default.
    """

    def __init__(
        self,
        *samplers: Sampler,
        p: Sequence[float] | torch.Tensor | None = None,
        sample_from_all: bool = False,
        num_buffer_sampled: int | None = None,
    ) -> None:
        if sample_from_all and p is not None:
            raise RuntimeError("pass p or sample_from_all=True, not both")
        self._samplers = tuple(samplers)
        self.sample_from_all = bool(sample_from_all)
        if p is not None:
            p = torch.as_tensor(p, dtype=torch.float)
            if p.shape != (len(samplers),) or bool((p < 0).any()) or not float(p.sum()) > 0:
                raise ValueError(
                    f"p must hold {len(samplers)} non-negative weights with a positive sum, "
                    f"got {p.tolist()}"
                )
            p = p / p.sum()
        self.p = p
        self.num_buffer_sampled = (
            len(samplers) if num_buffer_sampled is None or sample_from_all else num_buffer_sampled
        )
        self._rng_value: torch.Generator | None = None

    @property
    def _rng(self) -> torch.Generator | None:
        return self._rng_value

    @_rng.setter
    def _rng(self, generator: torch.Generator | None) -> None:
        self._rng_value = generator
        for sampler in getattr(self, "_samplers", ()):
            sampler._rng = generator

    def buffer_ids(self) -> torch.Tensor:
        """The members a batch is drawn from (one per sub-batch)."""
        n = len(self._samplers)
        if self.sample_from_all:
            return torch.arange(n)
        if self.p is None:
            return torch.randint(n, (self.num_buffer_sampled,), generator=self._rng)
        return torch.multinomial(self.p, self.num_buffer_sampled, True, generator=self._rng)

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict]:
        raise RuntimeError("SamplerEnsemble is driven by its ReplayBufferEnsemble")

    def state_dict(self) -> dict[str, Any]:
        return {str(i): s.state_dict() for i, s in enumerate(self._samplers)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for i, sampler in enumerate(self._samplers):
            sampler.load_state_dict(state_dict[str(i)])

    def __repr__(self) -> str:
        return f"SamplerEnsemble(samplers={self._samplers}, p={self.p})"


class WriterEnsemble(Writer):
    """The writers of the members of a :class:`ReplayBufferEnsemble` (read-only as a whole)."""

    def __init__(self, *writers: Writer) -> None:
        super().__init__()
        self._writers = tuple(writers)

    def register_storage(self, storage: Storage) -> None:
        self._storage = storage

    def add(self, data: Any) -> int:
        raise RuntimeError(_WRITE_ERROR)

    def extend(self, data: Any) -> torch.Tensor:
        raise RuntimeError(_WRITE_ERROR)

    @property
    def write_count(self) -> int:
        return sum(w.write_count for w in self._writers)

    def state_dict(self) -> dict[str, Any]:
        return {str(i): w.state_dict() for i, w in enumerate(self._writers)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for i, writer in enumerate(self._writers):
            writer.load_state_dict(state_dict[str(i)])

    def __repr__(self) -> str:
        return f"WriterEnsemble(writers={self._writers})"


class ReplayBufferEnsemble(ReplayBuffer):
    """Samples batches made of sub-batches of several replay buffers.

    A batch of ``batch_size`` draws ``num_buffer_sampled`` members (with probabilities
    ``p``, or every member once with ``sample_from_all=True``); each gives
    ``batch_size // num_buffer_sampled`` items, sampled with its own sampler and
    transformed by its own transforms. TensorDict sub-batches are stacked into a
    ``[num_buffer_sampled, batch_size // num_buffer_sampled]`` batch whose ``"index"``
    holds ``"buffer_ids"`` and the members' ``"index"``; the ensemble's ``transform``
    then applies to it. Write through the members (``rb[i].extend(data)``), or, with
    ``routing_key`` or ``routing_dim``, through the ensemble, which routes each record to
    its member (as TorchRL).

    Args:
        *rbs: the member buffers (or pass ``storages``/``samplers``/``writers``).
        storages, samplers, writers: a :class:`StorageEnsemble`, :class:`SamplerEnsemble`
            and :class:`WriterEnsemble` to build the members from.
        transform: applied to every stacked batch.
        batch_size: the default batch size.
        collate_fn: turns the list of sub-batches into the batch (``torch.stack``).
        collate_fns: one collate function per member (built from storages only).
        p, sample_from_all, num_buffer_sampled: see :class:`SamplerEnsemble`.
        routing_key: the key holding each record's member id: ``extend``/``add`` then
            write every record into that member (exclusive with ``routing_dim``).
        routing_dim: the batch dim whose entries are the members (its size is the number
            of members): ``extend`` writes entry ``i`` along it into member ``i``.
        generator: the generator of every draw (members' samplers included).
        shared: as in :class:`ReplayBuffer`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import LazyTensorStorage, ReplayBufferEnsemble, TensorDictReplayBuffer
        >>> rb0 = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        >>> rb1 = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        >>> rb = ReplayBufferEnsemble(rb0, rb1, sample_from_all=True)
        >>> _ = rb[0].extend(TensorDict({"x": torch.zeros(10)}, batch_size=[10]))
        >>> _ = rb[1].extend(TensorDict({"x": torch.ones(10)}, batch_size=[10]))
        >>> sample = rb.sample(6)
        >>> sample["x"].tolist(), sample["index", "buffer_ids"][:, 0].tolist()
        ([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]], [0, 1])
    """

    def __init__(
        self,
        *rbs: ReplayBuffer,
        storages: StorageEnsemble | None = None,
        samplers: SamplerEnsemble | None = None,
        writers: WriterEnsemble | None = None,
        transform: Callable | Sequence[Callable] | None = None,
        batch_size: int | None = None,
        collate_fn: Callable | None = None,
        collate_fns: Sequence[Callable] | None = None,
        p: Sequence[float] | torch.Tensor | None = None,
        sample_from_all: bool = False,
        num_buffer_sampled: int | None = None,
        routing_key: NestedKey | None = None,
        routing_dim: int | None = None,
        generator: torch.Generator | None = None,
        shared: bool = False,
        **kwargs: Any,
    ) -> None:
        if routing_key is not None and routing_dim is not None:
            raise ValueError("routing_key and routing_dim are mutually exclusive")
        if routing_dim is not None and (
            isinstance(routing_dim, bool) or not isinstance(routing_dim, int)
        ):
            raise TypeError(f"routing_dim must be an integer, got {routing_dim!r}")
        self.routing_key = None if routing_key is None else unravel_key(routing_key)
        self.routing_dim = routing_dim
        if rbs:
            if storages is not None or samplers is not None or writers is not None:
                raise TypeError("pass replay buffers or storages/samplers/writers, not both")
            for rb in rbs:
                if not isinstance(rb, ReplayBuffer):
                    raise TypeError(f"members must be replay buffers, got {type(rb).__name__}")
            members = list(rbs)
        else:
            if storages is None or samplers is None or writers is None:
                raise TypeError("pass replay buffers, or all of storages, samplers and writers")
            n = len(storages._storages)
            if len(samplers._samplers) != n or len(writers._writers) != n:
                raise ValueError(
                    f"got {n} storages, {len(samplers._samplers)} samplers and "
                    f"{len(writers._writers)} writers; pass one of each per member"
                )
            transforms = storages._transforms or [None] * n
            members = [
                ReplayBuffer(
                    storage=s,
                    sampler=sa,
                    writer=w,
                    transform=t,
                    collate_fn=None if collate_fns is None else collate_fns[i],
                )
                for i, (s, sa, w, t) in enumerate(
                    zip(storages._storages, samplers._samplers, writers._writers, transforms)
                )
            ]
            p = samplers.p if p is None else p
            sample_from_all = sample_from_all or samplers.sample_from_all
            num_buffer_sampled = num_buffer_sampled or samplers.num_buffer_sampled
        self._rbs = members
        storage = StorageEnsemble(*(rb.storage for rb in members))
        sampler = SamplerEnsemble(
            *(rb.sampler for rb in members),
            p=p,
            sample_from_all=sample_from_all,
            num_buffer_sampled=num_buffer_sampled,
        )
        writer = WriterEnsemble(*(rb.writer for rb in members))
        super().__init__(
            storage=storage,
            sampler=sampler,
            writer=writer,
            transform=transform,
            batch_size=batch_size,
            collate_fn=collate_fn if collate_fn is not None else torch.stack,
            generator=generator,
            shared=shared,
            **kwargs,
        )

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, tuple):
            return self._rbs[index[0]][index[1] if len(index) == 2 else index[1:]]
        return self._rbs[index]

    def __len__(self) -> int:
        return len(self._rbs)

    def _route(self, data: Any) -> tuple[TensorDictBase, torch.Tensor]:
        """The flattened records and the member id of each (``routing_key``/``routing_dim``)."""
        if self.routing_key is None and self.routing_dim is None:
            raise RuntimeError(_WRITE_ERROR)
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"routed ensemble writes take a TensorDict, got {type(data).__name__}")
        if len(self._transform):
            data = self._transform.inv(data)
        flat = data.reshape(-1)
        n = len(self._rbs)
        if self.routing_key is not None:
            ids = flat.get(self.routing_key)
            while ids.ndim > 1 and ids.shape[-1] == 1:
                ids = ids.squeeze(-1)
            if ids.shape != flat.batch_size:
                raise ValueError(
                    f"routing_key {self.routing_key!r} must hold one member id per record, "
                    f"got shape {tuple(ids.shape)} for {flat.numel()} records"
                )
        else:
            if not data.ndim:
                raise ValueError("routing_dim needs a batched TensorDict")
            dim = self.routing_dim % data.ndim
            if data.shape[dim] != n:
                raise ValueError(
                    f"routing_dim {self.routing_dim} has size {data.shape[dim]}, expected {n} "
                    "(one entry per ensemble member)"
                )
            shape = [1] * data.ndim
            shape[dim] = n
            ids = torch.arange(n).reshape(shape).expand(data.batch_size).reshape(-1)
        if ids.dtype == torch.bool or ids.is_floating_point():
            raise TypeError(f"ensemble member ids must be integers, got dtype {ids.dtype}")
        ids = ids.long()
        if ids.numel() and ((ids < 0).any() or (ids >= n).any()):
            raise ValueError(f"ensemble member ids must lie in [0, {n - 1}], got {ids.tolist()}")
        return flat, ids

    def add(self, data: Any) -> TensorDictBase:
        """Writes one record into the member its ``routing_key`` entry names.

        Returns:
            a TensorDict with the record's ``"buffer_ids"`` and member ``"index"``.
        """
        if self.routing_dim is not None:
            raise RuntimeError("Use extend() for routing_dim writes")
        if self.routing_key is None:
            raise RuntimeError(_WRITE_ERROR)
        if not isinstance(data, TensorDictBase) or data.ndim:
            raise ValueError("add() expects one record: a TensorDict with an empty batch size")
        return self.extend(data.unsqueeze(0))[0]

    def extend(self, data: Any) -> TensorDictBase:
        """Writes each record into the member it is routed to (``routing_key``: the id it
        holds; ``routing_dim``: its position along that dim), members in order, records in
        their order within each member.

        Returns:
            a TensorDict aligned with ``data.reshape(-1)``: ``"buffer_ids"`` and the
            member-local ``"index"`` of every record.

        Raises:
            RuntimeError: the ensemble was built without ``routing_key``/``routing_dim``.
        """
        flat, ids = self._route(data)
        index: torch.Tensor | None = None
        with self._lock:
            for member_id, member in enumerate(self._rbs):
                positions = (ids == member_id).nonzero().flatten()
                if not positions.numel():
                    continue
                local = member.extend(flat[positions])
                if isinstance(local, tuple):
                    local = torch.stack(local, -1)
                local = torch.as_tensor(local).reshape(positions.numel(), -1).squeeze(-1)
                if index is None:
                    index = torch.empty(
                        (ids.numel(), *local.shape[1:]), dtype=local.dtype, device=ids.device
                    )
                elif local.shape[1:] != index.shape[1:]:
                    raise RuntimeError(
                        "routed ensemble members must have index shapes that agree, got "
                        f"{tuple(index.shape[1:])} and {tuple(local.shape[1:])}"
                    )
                index[positions] = local.to(ids.device)
        if index is None:
            index = torch.empty(0, dtype=torch.long)
        return TensorDict({"buffer_ids": ids, "index": index}, batch_size=[ids.numel()])

    def _sample(self, batch_size: int) -> tuple[Any, dict]:
        sampler = self._sampler
        k = sampler.num_buffer_sampled
        if batch_size % k:
            raise ValueError(f"batch_size={batch_size} is not divisible by num_buffer_sampled={k}")
        sub = batch_size // k
        ids = sampler.buffer_ids()
        parts, infos = [], []
        for i in ids.tolist():
            data, info = self._rbs[i]._sample(sub)
            if isinstance(data, TensorDictBase):
                index = data.get("index", info["index"])
                data = data.exclude("index")
                ident = torch.full((sub,), i, dtype=torch.int64)
                data.set("index", TensorDict({"buffer_ids": ident, "index": index}, [sub]))
            parts.append(data)
            infos.append(info)
        data = self._collate_fn(parts)
        info = {"buffer_ids": ids, "index": [inf["index"] for inf in infos]}
        return self._postprocess(data), info

    def __repr__(self) -> str:
        return f"ReplayBufferEnsemble(buffers={self._rbs}, sampler={self._sampler})"
