"""The :class:`Composite` spec: named (and nested) specs sharing leading batch dims.

One class: its entries (a mapping of keys to specs, nested keys as tuples), the values it
describes (``rand``/``zero``/``one`` build a TensorDict with its batch dims; ``is_in``,
``type_check`` and ``project`` walk the entries of a value; ``encode``/``to_numpy`` convert
from and to nested mappings), its shape operations and the names of its batch dims (as a
TensorDict's ``names``). Locking lives in :mod:`._lock`, shared with the stacked form.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey

from ._base import (
    DEVICE_TYPING,
    TensorSpec,
    _MissingEntry,
    _nest_reason,
    _NestedSpec,
    _normalize_dim,
    _shape_args,
    _to_device,
    _to_shape,
)
from ._dynamic import _concrete, _indexed_shape, _positive_steps
from ._keys import _NO_DEFAULT, _CompositeKeys, _expand_ellipsis, _is_key, _key_out, _unravel
from ._lock import _Lockable
from ._nontensor import NonTensor

__all__ = ["Composite", "NestedKey", "_InPlaceUpdates"]


class _InPlaceUpdates:
    """``rand_update`` / ``zeros_update`` / ``ones_update`` of the composite specs
    (``Composite``, ``StackedComposite``): their ``rand`` / ``zero`` / ``one`` written into
    an existing TensorDict."""

    def rand_update(self, value: TensorDictBase) -> TensorDictBase:
        """Updates ``value`` in place with :meth:`rand` and returns it."""
        return value.update(self.rand())

    def zeros_update(self, value: TensorDictBase) -> TensorDictBase:
        """Updates ``value`` in place with :meth:`zero` and returns it."""
        return value.update(self.zero())

    def ones_update(self, value: TensorDictBase) -> TensorDictBase:
        """Updates ``value`` in place with :meth:`one` and returns it."""
        return value.update(self.one())


class Composite(_Lockable, _InPlaceUpdates, _NestedSpec):
    """A dictionary of specs (possibly nested) describing a TensorDict.

    Leaf shapes include the composite's batch dims: in ``Composite(obs=..., shape=(4,))``
    the spec of ``"obs"`` has a shape starting with ``4``. ``rand``, ``zero`` and ``one``
    return a TensorDict with ``batch_size = (*shape_arg, *spec.shape)``.

    Args:
        *args: an optional mapping (or Composite) of key to spec; nested mappings become
            nested Composites.
        shape: the batch dims shared by every entry (default ``()``); ``batch_size`` is an
            alias.
        device: the device of every entry (entries are moved to it); ``None`` allows mixed
            devices.
        data_cls: the TensorDict class (a tensorclass, ...) ``rand``/``zero``/``one`` and
            ``encode`` return and ``is_in`` expects (default: ``TensorDict``).
        step_mdp_static: whether the whole entry is copied as is by ``step_mdp`` (TorchRL's
            flag, kept as ``spec.step_mdp_static``).
        names: names of the batch dims (``spec.names``), given to the TensorDicts it builds.
        **kwargs: more key/spec pairs. Entries named like the arguments (``"shape"``,
            ``"device"``, ...) go in the mapping or through ``spec["shape"] = ...``; the
            attributes (``spec.shape``) and the entries (``spec["shape"]``) never mix.

    Raises:
        ValueError: if an entry's shape does not start with ``shape``.
        KeyError: when reading a key it does not hold.

    Examples:
        >>> import torch
        >>> from rl.core import Bounded, Composite, Unbounded
        >>> spec = Composite(
        ...     observation=Unbounded(shape=(4, 3)),
        ...     action=Bounded(-1.0, 1.0, shape=(4, 1)),
        ...     shape=(4,),
        ... )
        >>> spec["next", "reward"] = Unbounded(shape=(4, 1))
        >>> list(spec.keys(include_nested=True, leaves_only=True))
        ['observation', 'action', ('next', 'reward')]
        >>> td = spec.zero()
        >>> td.batch_size, td["next", "reward"].shape
        (torch.Size([4]), torch.Size([4, 1]))
        >>> spec.is_in(spec.rand())
        True
        >>> spec[0]["action"].shape
        torch.Size([1])
    """

    domain = "composite"
    _is_composite = True  # what the keys view tests (it cannot import this module)
    data_cls: type | None = None
    step_mdp_static: bool = False
    _names: list | None = None  # names of the batch dims (None: all unnamed)

    def __init__(
        self,
        *args: Mapping[str, Any],
        shape: Sequence[int] | torch.Size | int | None = None,
        device: DEVICE_TYPING | None = None,
        batch_size: Sequence[int] | torch.Size | int | None = None,
        data_cls: type | None = None,
        step_mdp_static: bool = False,
        names: Sequence[str | None] | None = None,
        **kwargs: Any,
    ):
        if shape is not None and batch_size is not None:
            raise TypeError("Composite got both shape and its alias batch_size")
        if len(args) > 1:
            raise TypeError(f"Composite takes at most one mapping positionally, got {len(args)}")
        self.shape = _to_shape(shape if shape is not None else batch_size)
        self.device = None if device is None else _to_device(device)
        self._specs: dict[str, TensorSpec | None] = {}
        self.data_cls = data_cls
        self.step_mdp_static = step_mdp_static
        if args:
            if not isinstance(args[0], Mapping | Composite):
                raise TypeError(
                    f"Composite expects a mapping of key to spec, got {type(args[0]).__name__}"
                )
            for key, value in args[0].items():
                self[key] = value
        for key, value in kwargs.items():
            self[key] = value
        if names is not None:
            self.names = names

    @classmethod
    def _new(cls, specs: dict, shape: torch.Size, device: torch.device | None) -> Composite:
        out = cls.__new__(cls)
        out._specs = specs
        out.shape = torch.Size(shape)
        out.device = device
        return out

    def _lock_children(self) -> Iterator[_Lockable]:
        return (s for s in self._specs.values() if isinstance(s, _Lockable))

    # ------------------------------------------------------------------ mapping
    @property
    def dtype(self) -> torch.dtype | None:  # type: ignore[override]
        """The dtype shared by all leaves, or None when they differ."""
        dtypes = {s.dtype for s in self._specs.values() if s is not None}
        return dtypes.pop() if len(dtypes) == 1 else None

    def _iter_keys(self, include_nested: bool, leaves_only: bool) -> Iterator[NestedKey]:
        for key, spec in self._specs.items():
            if isinstance(spec, _NestedSpec):
                if not leaves_only:
                    yield key
                if include_nested:
                    for sub in spec._iter_keys(True, leaves_only):
                        yield (key, *_unravel(sub))
            else:
                yield key

    def _iter_items(
        self, include_nested: bool, leaves_only: bool
    ) -> Iterator[tuple[NestedKey, Any]]:
        for key, spec in self._specs.items():
            if isinstance(spec, _NestedSpec):
                if not leaves_only:
                    yield key, spec
                if include_nested:
                    for sub, sub_spec in spec._iter_items(True, leaves_only):
                        yield (key, *_unravel(sub)), sub_spec
            else:
                yield key, spec

    def _iter_items_is_leaf(
        self, include_nested: bool, leaves_only: bool, is_leaf: Callable[[type], bool]
    ) -> Iterator[tuple[NestedKey, Any]]:
        # TorchRL's ``is_leaf``: with ``leaves_only``, only entries whose type it accepts;
        # nested specs are still walked into with ``include_nested``.
        for key, spec in self._specs.items():
            if not leaves_only or is_leaf(type(spec)):
                yield key, spec
            if include_nested and isinstance(spec, _NestedSpec):
                if isinstance(spec, Composite):
                    subs = spec._iter_items_is_leaf(True, leaves_only, is_leaf)
                else:
                    subs = (
                        (k, v)
                        for k, v in spec._iter_items(True, False)
                        if not leaves_only or is_leaf(type(v))
                    )
                for sub, sub_spec in subs:
                    yield (key, *_unravel(sub)), sub_spec

    def keys(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        *,
        is_leaf: Callable[[type], bool] | None = None,
    ) -> _CompositeKeys:
        """The keys; nested keys (tuples) with ``include_nested``, no Composites with ``leaves_only``.

        Args:
            include_nested: also yield the keys of nested specs, as tuples.
            leaves_only: leave out the nested Composites themselves.
            is_leaf: a function of an entry's type saying whether it counts as a leaf for
                ``leaves_only`` (default: every spec but the Composites), as in TorchRL.
        """
        return _CompositeKeys(self, include_nested, leaves_only, is_leaf)

    def items(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        *,
        is_leaf: Callable[[type], bool] | None = None,
    ) -> list[tuple[NestedKey, TensorSpec | None]]:
        """``(key, spec)`` pairs, with the same options as :meth:`keys`."""
        if is_leaf is not None:
            return list(self._iter_items_is_leaf(include_nested, leaves_only, is_leaf))
        return list(self._iter_items(include_nested, leaves_only))

    def values(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        *,
        is_leaf: Callable[[type], bool] | None = None,
    ) -> list[TensorSpec | None]:
        """The specs, with the same options as :meth:`keys`."""
        return [s for _, s in self.items(include_nested, leaves_only, is_leaf=is_leaf)]

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def __contains__(self, key: object) -> bool:
        return key in self.keys(include_nested=True)

    def _missing(self, key: NestedKey) -> KeyError:
        available = list(self.keys(include_nested=True))
        return KeyError(f"key {key!r} not found in Composite; available keys: {available}")

    def __getitem__(self, idx: Any) -> Any:
        if _is_key(idx):
            path = _unravel(idx)
            node: Any = self
            for i, k in enumerate(path):
                if isinstance(node, _NestedSpec) and not isinstance(node, Composite):
                    return node[path[i:]]  # a stacked spec resolves the rest of the key
                if not isinstance(node, Composite) or k not in node._specs:
                    raise self._missing(idx)
                node = node._specs[k]
            return node
        return self._index(idx)

    def get(self, key: NestedKey, default: Any = _NO_DEFAULT) -> Any:
        """The spec at ``key``, or ``default`` if given and the key is missing."""
        try:
            return self[key]
        except KeyError:
            if default is _NO_DEFAULT:
                raise
            return default

    def __setitem__(self, key: NestedKey, value: TensorSpec | Mapping | None) -> None:
        if not _is_key(key):
            raise TypeError(f"Composite keys are strings or tuples of strings, got {key!r}")
        path = _unravel(key)
        node = self
        for i, k in enumerate(path[:-1]):
            sub = node._specs.get(k)
            if isinstance(sub, _NestedSpec) and not isinstance(sub, Composite):
                sub[path[i + 1 :]] = value
                return
            if sub is None:
                node._check_unlocked(f"key {key!r}")
                sub = Composite(shape=node.shape, device=node.device)
                node._specs[k] = sub
            elif not isinstance(sub, Composite):
                raise KeyError(
                    f"cannot set {key!r}: {path[: i + 1]!r} holds a {type(sub).__name__}, "
                    "expected a Composite"
                )
            node = sub
        node._set_local(path[-1], value)

    def _set_local(self, key: str, value: Any) -> None:
        self._check_unlocked(f"key {key!r}")
        if isinstance(value, Mapping):
            value = Composite(value, shape=self.shape, device=self.device)
        if value is not None:
            if not isinstance(value, TensorSpec):
                raise TypeError(
                    f"Composite entry {key!r} must be a spec (or None), got {type(value).__name__}"
                )
            n = len(self.shape)
            if value.shape[:n] != self.shape and self._takes_batch_shape(value):
                # as TorchRL: a Composite (or NonTensor) whose batch dims are a prefix of
                # ours is given our batch dims (a copy: the caller's spec is left as it was)
                value = value.clone()
                value.shape = self.shape
            if value.shape[:n] != self.shape:
                raise ValueError(
                    f"spec for key {key!r} has shape {tuple(value.shape)}, expected it to start "
                    f"with the Composite's batch shape {tuple(self.shape)}"
                )
            if self.device is not None and value.device != self.device:
                value = value.to(self.device)
        self._specs[key] = value

    def _takes_batch_shape(self, value: TensorSpec) -> bool:
        """Whether ``value`` can be given this Composite's batch dims when set as an entry.

        Composites and NonTensor specs whose shape is a strict prefix of ours can (their
        shape is only batch dims); other leaves cannot (their trailing dims are data).
        """
        return (
            isinstance(value, Composite | NonTensor)
            and value.ndim < self.ndim
            and self.shape[: value.ndim] == value.shape
        )

    def set(self, key: NestedKey, value: TensorSpec | None) -> Composite:
        """Sets ``key`` (like ``spec[key] = value``) and returns the Composite."""
        self[key] = value
        return self

    def __delitem__(self, key: NestedKey) -> None:
        path = _unravel(key) if _is_key(key) else None
        if path is None:
            raise TypeError(f"Composite keys are strings or tuples of strings, got {key!r}")
        parent = self[path[:-1]] if len(path) > 1 else self
        if not isinstance(parent, Composite) or path[-1] not in parent._specs:
            raise self._missing(key)
        parent._check_unlocked(f"deleting key {key!r}")
        del parent._specs[path[-1]]

    def pop(self, key: NestedKey, default: Any = _NO_DEFAULT) -> Any:
        """Removes ``key`` and returns its spec (or ``default`` if given and missing)."""
        try:
            out = self[key]
        except KeyError:
            if default is _NO_DEFAULT:
                raise
            return default
        del self[key]
        return out

    def update(self, other: Mapping | Composite) -> Composite:
        """Sets every entry of ``other``; nested Composites are updated recursively."""
        for key, value in other.items():
            mine = self._specs.get(key) if isinstance(key, str) else self.get(key, None)
            if isinstance(mine, Composite) and isinstance(value, Composite):
                mine.update(value)
            else:
                self[key] = value
        return self

    def select(self, *keys: NestedKey, strict: bool = True) -> Composite:
        """A new Composite with only ``keys`` (missing keys raise unless ``strict=False``)."""
        out = self.empty()
        for key in keys:
            value = self.get(key, _NO_DEFAULT if strict else None)
            if value is not None or key in self:
                out[key] = value
        return out

    def exclude(self, *keys: NestedKey) -> Composite:
        """A copy without ``keys`` (missing keys are ignored)."""
        out = self.clone()
        for key in keys:
            if key in out:
                del out[key]
        return out

    def is_empty(self, recurse: bool = False) -> bool:
        """Whether there is no entry (with ``recurse``: no entry but empty Composites or None)."""
        if recurse:
            return all(
                s is None or (isinstance(s, Composite) and s.is_empty(recurse=True))
                for s in self._specs.values()
            )
        return not self._specs

    def empty(self) -> Composite:
        """A Composite with the same shape and device and no entries."""
        return self._map(None, self.shape, keys=())

    def separates(self, *keys: NestedKey, default: Any = None) -> Composite | None:
        """Removes ``keys`` and returns them in a new Composite (``None`` if none was present)."""
        out = None
        for key in keys:
            value = self.pop(key, default)
            if value is not None:
                if out is None:
                    out = self.empty()
                out[key] = value
        return out

    # ------------------------------------------------------------------ values
    def _build(self, method: str, shape: Sequence[int]) -> TensorDict:
        source = {k: getattr(s, method)(shape) for k, s in self._specs.items() if s is not None}
        batch_size = torch.Size((*shape, *_concrete(self.shape)))
        if self.data_cls is not None:
            return self.data_cls.from_dict(source, batch_size=batch_size, device=self.device)
        names = None if self._names is None else [*([None] * len(shape)), *self._names]
        return TensorDict._new_unsafe(
            source, batch_size=batch_size, device=self.device, names=names
        )

    def rand(self, shape: Sequence[int] | torch.Size | None = ()) -> TensorDict:
        """A TensorDict of random values, batch size ``(*shape, *spec.shape)``."""
        if shape is None:
            shape = ()
        return self._build("rand", shape)

    def zero(self, shape: Sequence[int] | torch.Size | None = ()) -> TensorDict:
        """A TensorDict of zeros, batch size ``(*shape, *spec.shape)`` (cheap: preallocation)."""
        if shape is None:
            shape = ()
        return self._build("zero", shape)

    def one(self, shape: Sequence[int] | torch.Size | None = ()) -> TensorDict:
        """A TensorDict of ones, batch size ``(*shape, *spec.shape)``."""
        if shape is None:
            shape = ()
        return self._build("one", shape)

    def _mismatch(self, value: Any) -> str | None:
        if self.data_cls is not None:
            if type(value) is not self.data_cls:
                name = self.data_cls.__name__
                return f"is a {type(value).__name__}, expected a {name} (data_cls)"
        elif not isinstance(value, TensorDictBase | Mapping):
            return f"is a {type(value).__name__}, expected a TensorDict"
        for key, spec in self._specs.items():
            if spec is None:
                continue
            item = value.get(key, None)
            if item is None:
                if isinstance(spec, Composite) and not spec._specs:
                    continue  # as TorchRL: an empty Composite asks for no entry
                return _MissingEntry(f"has no entry {key!r}")
            why = spec._mismatch(item)
            if why is not None:
                return _nest_reason(f"has an entry {key!r} that ", why)
        return None

    def project(self, value: TensorDictBase) -> TensorDictBase:
        """Projects every entry of ``value`` the spec describes (in place), returns ``value``."""
        for key, spec in self._specs.items():
            if spec is None:
                continue
            item = value.get(key, None)
            if item is not None:
                value[key] = spec.project(item)
        return value

    def encode(self, value: Mapping[str, Any], *, ignore_device: bool = False) -> TensorDict:
        """A TensorDict from a (nested) mapping of numpy arrays / python values.

        Every key of ``value`` must be in the spec; spec entries absent from ``value`` are left out.
        """
        out = {}
        batch: tuple[int, ...] = tuple(self.shape)
        for i, (key, item) in enumerate(value.items()):
            spec = self[key]
            if spec is None:
                raise KeyError(f"cannot encode key {key!r}: its spec is None")
            out[key] = encoded = spec.encode(item, ignore_device=ignore_device)
            if i == 0:  # leading dims beyond the spec's shape: a batch of values
                shape = encoded.shape if isinstance(encoded, torch.Tensor) else encoded.batch_size
                # the value's own sizes stand in for the dynamic (-1) dims
                batch = tuple(shape[: len(shape) - spec.ndim + self.ndim])
        if self.data_cls is not None:
            return self.data_cls.from_dict(out, batch_size=batch, device=self.device)
        return TensorDict(out, batch_size=batch, device=self.device)

    def to_numpy(self, value: TensorDictBase, safe: bool | None = None) -> dict[str, Any]:
        """A nested dict of numpy arrays, one per entry of the spec."""
        if safe:
            self.assert_is_in(value)
        out: dict[str, np.ndarray | dict] = {}
        for key, spec in self._specs.items():
            if spec is not None and key in value.keys():
                out[key] = spec.to_numpy(value.get(key))
        return out

    def type_check(
        self, value: Any, selected_keys: NestedKey | Sequence[str] | None = None
    ) -> None:
        """Checks the dtype of each entry of ``value`` (nested Composites recursively).

        Args:
            value: a TensorDict or mapping; or one tensor when ``selected_keys`` is a key.
            selected_keys: the top-level keys to check (default: all).

        Raises:
            TypeError: naming the first entry whose dtype differs from its spec's.
            KeyError: if ``value`` lacks a checked entry.
        """
        if isinstance(value, torch.Tensor) and isinstance(selected_keys, str):
            value = {selected_keys: value}
            selected_keys = [selected_keys]
        for key, spec in self._specs.items():
            if spec is None or (selected_keys is not None and key not in selected_keys):
                continue
            item = value.get(key, None)
            if item is None:
                raise KeyError(f"type_check: value has no entry {key!r} (spec keys: {list(self)})")
            if isinstance(spec, _NestedSpec):
                spec.type_check(item)
            else:
                spec.type_check(item, key)

    def clear_device_(self) -> Composite:
        """Forgets the device of this Composite and nested ones (leaves keep theirs); returns it."""
        self.device = None
        for spec in self._specs.values():
            if spec is not None:
                spec.clear_device_()
        return self

    def memoize_encode(self, mode: bool = True) -> None:
        """Sets :meth:`TensorSpec.memoize_encode` on this Composite and every entry."""
        super().memoize_encode(mode)
        for spec in self._specs.values():
            if spec is not None:
                spec.memoize_encode(mode)

    def erase_memoize_cache(self) -> None:
        for spec in self._specs.values():
            if spec is not None:
                spec.erase_memoize_cache()

    def cardinality(self) -> int:
        """The product of the entries' cardinalities (0 without entries)."""
        out = None
        for spec in self._specs.values():
            if spec is not None:
                out = (1 if out is None else out) * spec.cardinality()
        return 0 if out is None else out

    def enumerate(self, use_mask: bool | None = None) -> TensorDictBase:
        """Every combination of the entries' values: a TensorDict of batch ``(N, *spec.shape)``.

        Examples:
            >>> from rl.core import Categorical, Composite
            >>> td = Composite(a=Categorical(2), b=Categorical(3)).enumerate()
            >>> td.batch_size, td["a"].tolist(), td["b"].tolist()
            (torch.Size([6]), [0, 0, 0, 1, 1, 1], [0, 1, 2, 0, 1, 2])
        """
        inner: Any = self
        while inner.ndim:
            inner = inner[0]
        values = {k: s.enumerate(use_mask) for k, s in inner._specs.items() if s is not None}
        if not values:
            return self.zero()
        grids = torch.meshgrid(*(torch.arange(v.shape[0]) for v in values.values()), indexing="ij")
        source = {k: v[g.reshape(-1)] for (k, v), g in zip(values.items(), grids)}
        count = grids[0].numel()
        td = TensorDict(source, batch_size=(count,), device=self.device)
        if self.ndim:
            td = td.reshape(count, *[1] * self.ndim).expand(count, *self.shape)
        if self.data_cls is not None:
            td = self.data_cls.from_dict(td.to_dict(), batch_size=td.batch_size, device=self.device)
        return td

    def index(self, index: Any, tensor_to_index: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("index is not defined for Composite specs (as in TorchRL)")

    # ------------------------------------------------------------------ dim names
    def _has_names(self) -> bool:
        """Whether some batch dim is named (TorchRL's name)."""
        return self._names is not None

    def _erase_names(self) -> None:
        """Forgets the names of this spec's batch dims (TorchRL's name; ``names = None``)."""
        self._names = None

    @property
    def names(self) -> list[str | None]:
        """The names of the batch dims (``None`` for an unnamed dim), as a TensorDict's.

        The TensorDicts ``rand``/``zero``/``one`` build carry them. Setting names also names
        the leading dims of nested Composites (their extra dims get ``None``). Copies keep
        them; ``expand`` and ``unsqueeze`` add unnamed dims; indexing with ints and
        ``squeeze`` drop the named dims they remove; other indexing and ``reshape`` clear them.
        """
        if not self._has_names():
            return [None] * len(self.shape)
        return list(self._names)

    @names.setter
    def names(self, value: Sequence[str | None] | None) -> None:
        if value is None:
            self._erase_names()
            return
        value = list(value)
        ndim = len(self.shape)
        if len(value) != ndim:
            raise ValueError(
                f"Composite of shape {tuple(self.shape)} takes {ndim} names, got "
                f"{len(value)}: {value}"
            )
        self._names = value if any(n is not None for n in value) else None
        for spec in self._specs.values():
            if isinstance(spec, Composite) and spec.ndim >= ndim:
                spec.names = value + [None] * (spec.ndim - ndim)

    def refine_names(self, *names: str | None) -> Any:
        """Names unnamed dims (``...`` stands for the dims left as they are); returns the spec.

        Raises:
            RuntimeError: if a dim already has another name.

        Examples:
            >>> from rl.core import Composite
            >>> spec = Composite({}, shape=[3, 4, 5, 6])
            >>> spec.refine_names(None, None, None, "d").names
            [None, None, None, 'd']
            >>> spec.refine_names("a", ..., "d").names
            ['a', None, None, 'd']
        """
        current = self.names
        if any(n is Ellipsis for n in names):
            pos = names.index(Ellipsis)
            fill = len(current) - len(names) + 1
            names = (*names[:pos], *current[pos : pos + fill], *names[pos + 1 :])
        if len(names) != len(current):
            raise RuntimeError(
                f"refine_names: {len(current)} names expected for shape "
                f"{tuple(self.shape)}, got {list(names)}"
            )
        for have, want in zip(current, names):
            if have is not None and have != want:
                raise RuntimeError(
                    f"refine_names: cannot rename dims named {current} to {list(names)}"
                )
        self.names = list(names)
        return self

    def _names_after_index(self, idx: tuple) -> list | None:
        """The names left by an int/slice index (``None`` for any other index)."""
        if not self._has_names() or not all(isinstance(i, int | slice) for i in idx):
            return None
        return [n for n, i in zip(self._names, idx) if not isinstance(i, int)] + self._names[
            len(idx) :
        ]

    # ------------------------------------------------------------------ copies and shapes
    def _map(
        self,
        fn: Any,
        shape: Sequence[int],
        device: Any = _NO_DEFAULT,
        keys: Any = None,
        names: Any = _NO_DEFAULT,
    ) -> Composite:
        items = self._specs.items() if keys is None else ()
        specs = {k: (None if s is None else fn(s)) for k, s in items}
        out = Composite._new(specs, shape, self.device if device is _NO_DEFAULT else device)
        out.data_cls = self.data_cls
        out.step_mdp_static = self.step_mdp_static
        if names is _NO_DEFAULT:  # same batch dims keep their names
            names = self._names if len(shape) == self.ndim else None
        out._names = names
        return out

    def _reshape(self, new: torch.Size) -> Composite:
        n = self.ndim
        return self._map(lambda s: s.reshape(*new, *s.shape[n:]), new, names=None)

    def clone(self) -> Composite:
        return self._map(lambda s: s.clone(), self.shape)

    def to(self, dest: DEVICE_TYPING | torch.dtype) -> Composite:
        if isinstance(dest, torch.dtype):
            return self._map(lambda s: s.to(dest), self.shape)
        dest = _to_device(dest)
        if dest == self.device:
            return self
        return self._map(lambda s: s.to(dest), self.shape, dest)

    def _index(self, idx: Any) -> Composite:
        idx = _expand_ellipsis(idx, self.ndim)
        full = idx if isinstance(idx, tuple) else (idx,)
        idx = full = _positive_steps(self.shape, full, "Composite", idx)
        shape = _indexed_shape(self.shape, full, self.device, "Composite", self.ndim, idx)
        return self._map(lambda s: s[idx], shape, names=self._names_after_index(idx))

    def expand(self, *shape: int) -> Composite:
        """The Composite with batch dims ``shape``; every entry keeps its own trailing dims."""
        shape = _shape_args(shape)
        lead = len(shape) - self.ndim
        if (
            lead < 0
            or -1 in shape[:lead]
            or any(s != o and o != 1 for s, o in zip(shape[lead:], self.shape))
        ):
            raise ValueError(
                f"cannot expand Composite of shape {tuple(self.shape)} to {tuple(shape)}: the "
                "new shape must end with the old one (dims of size 1 may grow, dynamic -1 "
                "dims stay -1)"
            )
        n = self.ndim
        names = None if self._names is None else [*([None] * lead), *self._names]
        return self._map(lambda s: s.expand(*shape, *s.shape[n:]), shape, names=names)

    def squeeze(self, dim: int | None = None) -> Composite:
        if dim is None:
            out = self
            for d in reversed(range(self.ndim)):
                if self.shape[d] == 1:
                    out = out.squeeze(d)
            return out
        d = _normalize_dim(dim, self.ndim, "squeeze of Composite")
        if self.shape[d] != 1:
            return self
        shape = self.shape[:d] + self.shape[d + 1 :]
        names = None if self._names is None else [*self._names[:d], *self._names[d + 1 :]]
        return self._map(lambda s: s.squeeze(d), shape, names=names)

    def unsqueeze(self, dim: int) -> Composite:
        d = _normalize_dim(dim, self.ndim + 1, "unsqueeze of Composite")
        shape = (*self.shape[:d], 1, *self.shape[d:])
        names = None if self._names is None else [*self._names[:d], None, *self._names[d:]]
        return self._map(lambda s: s.unsqueeze(d), shape, names=names)

    def unbind(self, dim: int = 0) -> tuple[Composite, ...]:
        d = _normalize_dim(dim, self.ndim, "unbind of Composite")
        if self.shape[d] == -1:
            raise ValueError(
                f"cannot unbind dim {dim} of Composite of shape {tuple(self.shape)}: it is "
                "dynamic (-1), its number of slices is unknown"
            )
        return tuple(self[(slice(None),) * d + (i,)] for i in range(self.shape[d]))

    def make_neg_dim(self, dim: int) -> Composite:
        """Makes batch dim ``dim`` dynamic (``-1``), in place, in every entry and in the Composite.

        Args:
            dim: the batch dim (negative values count from the end of the batch dims).

        Returns:
            the Composite itself.

        Examples:
            >>> from rl.core import Composite, Unbounded
            >>> spec = Composite(obs=Unbounded(shape=(4, 3)), shape=(4,))
            >>> _ = spec.make_neg_dim(0)
            >>> spec.shape, spec["obs"].shape, spec.zero().batch_size
            (torch.Size([-1]), torch.Size([-1, 3]), torch.Size([1]))
        """
        d = _normalize_dim(dim, self.ndim, "make_neg_dim of Composite")
        self._check_unlocked("shape")
        for spec in self._specs.values():
            if spec is not None:
                spec.make_neg_dim(d)
        self._shape = torch.Size(-1 if i == d else s for i, s in enumerate(self._shape))
        return self

    @property
    def shape(self) -> torch.Size:  # type: ignore[override]
        return self._shape

    @shape.setter
    def shape(self, value: Sequence[int]) -> None:
        """Sets the batch dims; as TorchRL, nested Composites take the new shape when theirs
        does not start with it, and every other entry must already start with it."""
        self._check_unlocked("shape")
        value = _to_shape(value)
        specs = getattr(self, "_specs", None)
        if specs:
            self._check_new_shape(value, ())
            for spec in specs.values():
                if isinstance(spec, Composite) and spec.shape[: len(value)] != value:
                    spec.shape = value
        self._shape = value

    def _check_new_shape(self, value: torch.Size, prefix: tuple) -> None:
        """Raises (changing nothing) when some entry cannot take batch dims ``value``."""
        for key, spec in self._specs.items():
            if spec is None or spec.shape[: len(value)] == value:
                continue
            if isinstance(spec, Composite):
                spec._check_unlocked("shape")
                spec._check_new_shape(value, (*prefix, key))
                continue
            path = _key_out((*prefix, key))
            raise ValueError(
                f"cannot set Composite shape to {tuple(value)}: entry {path!r} has shape "
                f"{tuple(spec.shape)}, which does not start with it"
            )

    @property
    def batch_size(self) -> torch.Size:
        """Alias of :attr:`shape` (as a TensorDict's ``batch_size``)."""
        return self._shape

    @batch_size.setter
    def batch_size(self, value: Sequence[int]) -> None:
        self.shape = value

    # ------------------------------------------------------------------ comparison and repr
    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Composite)
            and self.shape == other.shape
            and self.device == other.device
            and self.data_cls == other.data_cls
            and self._specs.keys() == other._specs.keys()
            and all(self._specs[k] == other._specs[k] for k in self._specs)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        lines = []
        for key, spec in self._specs.items():
            text = repr(spec).replace("\n", "\n    ")
            lines.append(f"    {key}: {text},")
        lines.append(f"    shape={self.shape}, device={self.device})")
        return "Composite(\n" + "\n".join(lines)
