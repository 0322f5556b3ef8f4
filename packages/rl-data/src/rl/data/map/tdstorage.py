"""Maps from hashed tensordict entries to stored tensordicts (TorchRL's ``TensorDictMap``)."""

from __future__ import annotations

import abc
import functools
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import torch
from tensordict import NestedKey, TensorDictBase, is_tensor_collection, lazy_stack
from tensordict.nn import TensorDictModuleBase

from rl.data.map.hash import RandomProjectionHash, SipHash
from rl.data.map.query import QueryModule
from rl.data.replay_buffers.storages import LazyTensorStorage, TensorStorage

__all__ = ["TensorDictMap", "TensorMap"]

K = TypeVar("K")
V = TypeVar("V")


class TensorMap(abc.ABC, Generic[K, V]):
    """The map interface: ``m[key]``, ``m[key] = value``, ``len(m)``, ``key in m``, ``clear``.

    ``contains`` answers for a batch of keys at once (a bool tensor); ``in`` calls it.
    """

    @abc.abstractmethod
    def clear(self) -> None: ...

    @abc.abstractmethod
    def __getitem__(self, item: K) -> V: ...

    @abc.abstractmethod
    def __setitem__(self, key: K, value: V) -> None: ...

    @abc.abstractmethod
    def __len__(self) -> int: ...

    @abc.abstractmethod
    def contains(self, item: K) -> torch.Tensor: ...

    def __contains__(self, item: K) -> torch.Tensor:
        return self.contains(item)


class TensorDictMap(TensorDictModuleBase, TensorMap[TensorDictBase, TensorDictBase]):
    """A storage indexed by the values of some entries of a tensordict.

    The ``query_module`` hashes the ``in_keys`` entries of each row to an integer index
    (new keys get the next free index when writing); the rows of the value are stored at
    those indices in ``storage``. Reading with a tensordict that holds the same key
    entries (other entries are ignored) returns the stored rows.

    Args:
        query_module: a :class:`~rl.data.map.QueryModule` (keyword only).
        storage: a storage of the values, e.g. ``LazyTensorStorage(max_size)``.
        collate_fn: applied to what the storage returns. Defaults to the storage's own
            collate (identity for tensor storages, stacking for list storages).
        out_keys: the value entries to keep (others are not stored). Defaults to all,
            read from the storage once it holds data.
        write_fn: ``write_fn(new)`` for a new key, ``write_fn(new, old)`` for a known
            one: what is stored (e.g. a running sum). Defaults to storing ``new``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import LazyTensorStorage
        >>> from rl.data.map import QueryModule, TensorDictMap
        >>> query = QueryModule(in_keys=["key1", "key2"], index_key="index")
        >>> tdmap = TensorDictMap(query_module=query, storage=LazyTensorStorage(1000))
        >>> keys = TensorDict(key1=torch.tensor([[-1.0], [1.0], [3.0]]),
        ...                   key2=torch.tensor([[0.0], [2.0], [4.0]]), batch_size=[3])
        >>> tdmap[keys] = TensorDict(out=torch.tensor([[10.0], [20.0], [30.0]]), batch_size=[3])
        >>> tdmap[keys[1:]]["out"]
        tensor([[20.],
                [30.]])
        >>> tdmap.contains(keys).tolist(), len(tdmap)
        ([True, True, True], 3)
    """

    def __init__(
        self,
        *,
        query_module: QueryModule,
        storage: Any,
        collate_fn: Callable[[Any], Any] | None = None,
        out_keys: list[NestedKey] | None = None,
        write_fn: Callable[..., Any] | None = None,
    ) -> None:
        super().__init__()
        self.in_keys = query_module.in_keys
        if out_keys is not None:
            self.out_keys = out_keys
        self.query_module = query_module
        self.index_key = query_module.index_key
        self.storage = storage
        self.batch_added = False
        if collate_fn is None:
            collate_fn = getattr(storage, "_default_collate", None) or (lambda x: x)
        self.collate_fn = collate_fn
        self.write_fn = write_fn

    @property
    def max_size(self) -> int:
        return self.storage.max_size

    @property
    def out_keys(self) -> list[NestedKey]:
        known = self.__dict__.get("_out_keys_and_lazy")
        if known is not None:
            return known[0]
        stored = getattr(self.storage, "_storage", None)
        if isinstance(self.storage, TensorStorage) and is_tensor_collection(stored):
            keys = list(stored.keys(True, True))
            self.__dict__["_out_keys_and_lazy"] = (keys, True)
            return keys
        raise AttributeError(
            f"No out-keys found in the storage of type {type(self.storage).__name__}: pass "
            "out_keys=, or write a value first into a tensordict storage"
        )

    @out_keys.setter
    def out_keys(self, value: list[NestedKey]) -> None:
        self.__dict__["_out_keys_and_lazy"] = (value, False)

    def _has_lazy_out_keys(self) -> bool:
        known = self.__dict__.get("_out_keys_and_lazy")
        return known is None or known[1]

    @classmethod
    def from_tensordict_pair(
        cls,
        source: TensorDictBase,
        dest: TensorDictBase,
        in_keys: list[NestedKey],
        out_keys: list[NestedKey] | None = None,
        max_size: int = 1000,
        storage_constructor: Callable[[], Any] | None = None,
        hash_module: Callable | list[Callable] | None = None,
        collate_fn: Callable[[Any], Any] | None = None,
        write_fn: Callable[..., Any] | None = None,
        consolidated: bool | None = None,
    ) -> TensorDictMap:
        """A map from the ``in_keys`` entries of tensordicts like ``source`` to ones like ``dest``.

        Each key entry gets a :class:`SipHash`, or a :class:`RandomProjectionHash` when it
        has more features than that hash projects to; the values go to a
        ``LazyTensorStorage(max_size)`` unless ``storage_constructor`` builds another.
        ``consolidated`` (when given) goes to the storage: ``True`` keeps the stored
        entries in one contiguous block.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> from rl.data.map import TensorDictMap
            >>> source = TensorDict(obs=torch.arange(6.0).view(3, 2), batch_size=[3])
            >>> dest = TensorDict(reward=torch.ones(3, 1), batch_size=[3])
            >>> tdmap = TensorDictMap.from_tensordict_pair(source, dest, in_keys=["obs"])
            >>> tdmap[source] = dest
            >>> tdmap[source[:1]]["reward"]
            tensor([[1.]])
        """
        if hash_module is None:
            hash_module = []
            for key in in_keys:
                entry = source[key]
                n_feat = 0 if entry.ndim == source.ndim else entry.shape[-1]
                large = n_feat > RandomProjectionHash._N_COMPONENTS_DEFAULT
                hash_module.append(RandomProjectionHash() if large else SipHash())
        query_module = QueryModule(in_keys, hash_module=hash_module)
        if storage_constructor is None:
            storage_constructor = functools.partial(
                LazyTensorStorage, max_size, consolidated=bool(consolidated)
            )
        elif consolidated is not None:
            storage_constructor = functools.partial(storage_constructor, consolidated=consolidated)
        return cls(
            query_module=query_module,
            storage=storage_constructor(),
            collate_fn=collate_fn,
            out_keys=out_keys,
            write_fn=write_fn,
        )

    def clear(self) -> None:
        """Forgets every stored value and every known key."""
        self.storage._empty()
        self.query_module.hash_to_int = type(self.query_module.hash_to_int)()

    def _to_index(
        self, item: TensorDictBase, extend: bool, clone: bool | None = None
    ) -> torch.Tensor:
        return self.query_module(item, extend=extend, clone=clone)[self.index_key]

    def _maybe_add_batch(self, item: TensorDictBase, value: TensorDictBase | None):
        self.batch_added = item.batch_dims == 0
        if self.batch_added:
            item = item.unsqueeze(0)
            if value is not None:
                value = value.unsqueeze(0)
        return item, value

    def _maybe_remove_batch(self, item: Any) -> Any:
        return item.squeeze(0) if self.batch_added else item

    def _read(self, item: TensorDictBase) -> tuple[TensorDictBase | None, TensorDictBase, int]:
        """``(value, keyed item, first row without a value)``; the value is ``None`` unless
        every row of ``item`` has one (the row is then -1)."""
        item, _ = self._maybe_add_batch(item.copy(), None)
        index = self._to_index(item, extend=False, clone=False)
        stored = self._filled(index) if len(self) else None
        if stored is None or not stored.all():
            return None, item, 0 if stored is None else int((~stored).nonzero()[0])
        return self._maybe_remove_batch(self.collate_fn(self.storage[index])), item, -1

    def __getitem__(self, item: TensorDictBase) -> TensorDictBase:
        value, item, missing = self._read(item)
        if value is None:
            keys = item[missing].select(*self.in_keys)
            raise KeyError(f"no value stored for the keys {keys.to_dict()}")
        return value

    def get(self, item: TensorDictBase, default: Any = None) -> TensorDictBase | Any:
        """``self[item]``, or ``default`` when a row of ``item`` has no value stored."""
        value, _, _ = self._read(item)
        return default if value is None else value

    def __setitem__(self, item: TensorDictBase, value: TensorDictBase) -> None:
        if not self._has_lazy_out_keys():
            value = value.select(*self.out_keys, strict=False)
        item, value = self._maybe_add_batch(item, value)
        index = self._to_index(item, extend=True)
        if index.unique().numel() < index.numel():
            # a key twice in one write: the rows go in order, each seeing the previous one
            rows = []
            for it, val in zip(item.split(1), value.split(1)):
                self[it] = val
                rows.append(val)
            value.update(lazy_stack(rows))
            return
        if self.write_fn is not None:
            value = self._apply_write_fn(item, value)
        self.storage.set(index, value)

    def _apply_write_fn(self, item: TensorDictBase, value: TensorDictBase) -> TensorDictBase:
        if not len(self):
            return self.write_fn(value)
        known = self.contains(item)
        if not known.any():
            return self.write_fn(value)
        result = value.empty()
        result[known] = self.write_fn(value[known], self[item[known]])
        if (~known).any():
            result[~known] = self.write_fn(value[~known])
        return result

    def __len__(self) -> int:
        return len(self.storage)

    def contains(self, item: TensorDictBase) -> torch.Tensor:
        """A bool per row of ``item``: whether a value is stored for its keys."""
        item, _ = self._maybe_add_batch(item, None)
        index = self._to_index(item, extend=False, clone=True)
        return self._maybe_remove_batch(self._filled(index))

    def _filled(self, index: torch.Tensor) -> torch.Tensor:
        """Whether each storage index holds an item (storages without ``contains``: the
        first ``len(storage)`` indices do, as the map writes new keys in order)."""
        contains = getattr(self.storage, "contains", None)
        if contains is not None:
            return torch.as_tensor(contains(index))
        return (index >= 0) & (index < len(self.storage))
