"""What a :class:`Composite` does with values: builds, checks, projects and converts TensorDicts.

A mixin of :class:`~rl.core.Composite` (kept apart so each module holds one concept):
``rand``/``zero``/``one`` build a TensorDict with the Composite's batch dims, ``is_in``,
``type_check`` and ``project`` walk the entries of a value, ``encode``/``to_numpy``
convert from and to nested mappings, ``cardinality``/``enumerate`` count and list the
values of discrete entries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey

from ._base import _MissingEntry, _NestedSpec, _nest_reason
from ._dynamic import _concrete

if TYPE_CHECKING:
    from ._composite import Composite

__all__ = ["_CompositeValues"]


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


class _CompositeValues(_InPlaceUpdates):
    """Mixin giving :class:`Composite` its value methods (``rand``, ``is_in``, ``encode``, ...).

    It reads the Composite's ``_specs``, ``shape``, ``device``, ``data_cls`` and ``_names``.
    """

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
            if spec is None or (isinstance(spec, _CompositeValues) and not spec._specs):
                continue  # as TorchRL: an empty Composite asks for no entry
            item = value.get(key, None)
            if item is None:
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
