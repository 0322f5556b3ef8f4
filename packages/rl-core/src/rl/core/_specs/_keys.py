"""Nested keys of the specs with entries: parsing, flattening and the ``keys()`` view."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from tensordict.utils import NestedKey

from ._base import _NestedSpec

if TYPE_CHECKING:
    from ._composite import Composite

__all__ = ["_CompositeKeys", "_expand_ellipsis", "_is_key", "_key_out", "_unravel", "_NO_DEFAULT"]

_NO_DEFAULT = object()


def _is_key(key: Any) -> bool:
    if isinstance(key, str):
        return True
    return isinstance(key, tuple) and len(key) > 0 and all(_is_key(k) for k in key)


def _unravel(key: NestedKey) -> tuple[str, ...]:
    """``"a"`` -> ``("a",)``; ``("a", ("b", "c"))`` -> ``("a", "b", "c")``."""
    if isinstance(key, str):
        return (key,)
    out: list[str] = []
    for k in key:
        out.extend(_unravel(k))
    return tuple(out)


def _key_out(key: tuple[str, ...]) -> NestedKey:
    return key[0] if len(key) == 1 else key


def _expand_ellipsis(idx: Any, ndim: int) -> tuple:
    """An index on ``ndim`` batch dims with its ``...`` replaced by explicit slices."""
    idx = idx if isinstance(idx, tuple) else (idx,)
    if not any(i is Ellipsis for i in idx):
        return idx
    used = 0
    for i in idx:
        if i is None or i is Ellipsis:
            continue
        used += i.ndim if isinstance(i, torch.Tensor) and i.dtype == torch.bool else 1
    pos = next(p for p, i in enumerate(idx) if i is Ellipsis)
    fill = (slice(None),) * max(ndim - used, 0)
    return idx[:pos] + fill + tuple(i for i in idx[pos + 1 :] if i is not Ellipsis)


class _CompositeKeys:
    """The keys view of :meth:`Composite.keys`: iterable, sized, supports ``in`` with nested keys."""

    def __init__(
        self, spec: Composite, include_nested: bool, leaves_only: bool, is_leaf: Any = None
    ):
        self._spec = spec
        self._nested = include_nested
        self._leaves = leaves_only
        self._is_leaf = is_leaf

    def __iter__(self) -> Iterator[NestedKey]:
        if self._is_leaf is not None:
            items = self._spec._iter_items_is_leaf(self._nested, self._leaves, self._is_leaf)
            return (k for k, _ in items)
        return self._spec._iter_keys(self._nested, self._leaves)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, key: object) -> bool:
        if not _is_key(key):
            return False
        if self._is_leaf is not None:
            target = _key_out(_unravel(key))  # type: ignore[arg-type]
            return any(k == target for k in self)
        path = _unravel(key)  # type: ignore[arg-type]
        if len(path) > 1 and not self._nested:
            return False
        node: Any = self._spec
        for i, k in enumerate(path):
            composite = getattr(node, "_is_composite", False)
            if isinstance(node, _NestedSpec) and not composite:
                return _key_out(path[i:]) in node.keys(self._nested, self._leaves)
            if not composite or k not in node._specs:
                return False
            node = node._specs[k]
        return not (self._leaves and isinstance(node, _NestedSpec))

    def __repr__(self) -> str:
        return f"_CompositeKeys({list(self)})"
