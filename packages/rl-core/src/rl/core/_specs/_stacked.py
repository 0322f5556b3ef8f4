"""Stacking specs: :func:`stack_specs` and :class:`StackedComposite` for heterogeneous batches."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from tensordict import LazyStackedTensorDict, TensorDictBase
from tensordict.utils import unravel_key

from ._base import (
    DEVICE_TYPING,
    TensorSpec,
    _nest_reason,
    _NestedSpec,
    _normalize_dim,
    _shape_args,
    _to_device,
)
from ._composite import Composite, _InPlaceUpdates
from ._discrete import Binary, OneHot
from ._keys import _NO_DEFAULT, _expand_ellipsis, _is_key, _unravel
from ._lock import _Lockable
from ._multi import MultiOneHot
from ._stacked_leaf import Stacked, _stacked_make_neg_dim

__all__ = ["StackedComposite", "stack_specs"]


def stack_specs(specs: Sequence[TensorSpec], dim: int = 0) -> TensorSpec:
    """Stacks specs along a new batch dim ``dim`` (also reached through ``torch.stack``).

    Equal specs give that spec with a new dim; specs of one kind and shape that differ in
    their bounds or masks give one spec holding the stacked bounds or masks; Composites with
    different entries give a :class:`StackedComposite`; leaf specs whose shapes differ (or
    stacked past their batch dims) give a lazy :class:`Stacked`, as in TorchRL.

    Raises:
        ValueError: for an empty list, or specs of different kinds, dtypes, devices or
            numbers of dims.

    Examples:
        >>> import torch
        >>> from rl.core import Bounded, stack_specs
        >>> spec = torch.stack([Bounded(0.0, 1.0, shape=(2,)), Bounded(0.0, 3.0, shape=(2,))])
        >>> spec.shape, spec.high[:, 0]
        (torch.Size([2, 2]), tensor([1., 3.]))
    """
    specs = list(specs)
    if not specs:
        raise ValueError("stack_specs expects at least one spec, got an empty list")
    first = specs[0]
    d = _normalize_dim(dim, first.ndim + 1, "stack of specs")
    if all(s == first for s in specs[1:]):
        u = first.unsqueeze(d)
        return u.expand(*u.shape[:d], len(specs), *u.shape[d + 1 :])
    if all(isinstance(s, _NestedSpec) for s in specs):
        return StackedComposite(specs, dim=d)
    kind = first._canonical_type()
    if getattr(first, "_choices", None) is not None:
        raise ValueError(
            "cannot stack Choice specs that differ: a Choice is stacked only with equal ones"
        )
    same = all(
        s._canonical_type() is kind
        and s.shape == first.shape
        and s.dtype == first.dtype
        and s.device == first.device
        and all(getattr(s, a) == getattr(first, a) for a in s._eq_attrs)
        and all((getattr(s, n) is None) == (getattr(first, n) is None) for n in s._elementwise)
        for s in specs
    )
    if not same or d > first._batch_ndim:
        # as TorchRL: a lazy Stacked of the members (same kind, dtype, device and number of
        # dims; Stacked names what differs otherwise)
        if any(isinstance(s, _NestedSpec) for s in specs):
            raise ValueError(
                f"cannot stack specs {[type(s).__name__ for s in specs]} along dim {dim}: "
                "Composite specs stack only with Composite specs"
            )
        return Stacked(*specs, dim=d)
    out = copy.copy(first)
    out.shape = torch.Size((*first.shape[:d], len(specs), *first.shape[d:]))
    for name in first._elementwise:
        if getattr(first, name) is not None:
            setattr(out, name, torch.stack([getattr(s, name) for s in specs], d))
    return out


def _index_select(spec: TensorSpec, dim: int, index: torch.Tensor) -> TensorSpec:
    """``torch.index_select(spec, dim, index)``: the spec of the selected slices along ``dim``.

    Raises:
        ValueError: if ``dim`` is the one-hot (or bit) dim of OneHot, MultiOneHot or Binary.
    """
    d = _normalize_dim(dim, spec.ndim, f"index_select of {type(spec).__name__}")
    if d == spec.ndim - 1 and isinstance(spec, OneHot | MultiOneHot | Binary):
        raise ValueError(
            f"Cannot index_select along the last dimension of {type(spec).__name__} of shape "
            f"{tuple(spec.shape)}: it holds the encoding of a value, not a batch dim"
        )
    return spec[(slice(None),) * d + (torch.as_tensor(index, dtype=torch.long),)]


def _squeeze(spec: TensorSpec, dim: int | None = None) -> TensorSpec:
    return spec.squeeze(dim)


def _unsqueeze(spec: TensorSpec, dim: int) -> TensorSpec:
    return spec.unsqueeze(dim)


# the torch functions TorchRL 0.14 lets specs take (``torch.stack(specs)``, ...)
_TORCH_FUNCTIONS = {
    torch.stack: stack_specs,
    torch.squeeze: _squeeze,
    torch.unsqueeze: _unsqueeze,
    torch.index_select: _index_select,
}


def _torch_function(cls, func, types, args=(), kwargs=None):
    impl = _TORCH_FUNCTIONS.get(func)
    if impl is None:
        return NotImplemented
    return impl(*args, **(kwargs or {}))


def _implements_for_spec(cls, torch_function):
    """Registers ``func`` as what ``torch_function`` does when given specs (TorchRL's API).

    Examples:
        >>> import torch
        >>> from rl.core import TensorSpec, Unbounded
        >>> @TensorSpec.implements_for_spec(torch.flatten)
        ... def _flatten(spec, start_dim=0, end_dim=-1):
        ...     return spec.flatten(start_dim, end_dim)
        >>> torch.flatten(Unbounded(shape=(2, 3))).shape
        torch.Size([6])
        >>> del TensorSpec.SPEC_HANDLED_FUNCTIONS[torch.flatten]
    """

    def decorator(func):
        _TORCH_FUNCTIONS[torch_function] = func
        return func

    return decorator


TensorSpec.__torch_function__ = classmethod(_torch_function)  # type: ignore[attr-defined]
TensorSpec.SPEC_HANDLED_FUNCTIONS = _TORCH_FUNCTIONS  # type: ignore[attr-defined]
TensorSpec.implements_for_spec = classmethod(_implements_for_spec)  # type: ignore[attr-defined]


class StackedComposite(_InPlaceUpdates, _Lockable, _NestedSpec):
    """Composites with different entries, stacked along a batch dim (heterogeneous batches).

    Think of agents or envs whose observations differ: each member Composite keeps its own
    entries; ``rand``/``zero``/``one`` return a ``LazyStackedTensorDict`` of the members'
    TensorDicts. Indexing the stack dim with an int gives back the member; a key present in
    every member gives the stacked spec of that entry.

    Args:
        *specs: the member Composites (or one list of them), all of the same shape; the
            stack's ``device`` is theirs (members without a device do not count, members on
            different devices give ``None``).
        dim: the stack dim, in ``[0, member.ndim]`` (negative values count from the end).

    Raises:
        ValueError: if members differ in shape, or there is none.

    Examples:
        >>> import torch
        >>> from rl.core import Composite, StackedComposite, Unbounded
        >>> a = Composite(obs=Unbounded(shape=(3,)))
        >>> b = Composite(obs=Unbounded(shape=(3,)), extra=Unbounded(shape=(2,)))
        >>> spec = StackedComposite(a, b, dim=0)
        >>> spec.shape
        torch.Size([2])
        >>> td = spec.rand()
        >>> type(td).__name__, td.batch_size, td[1]["extra"].shape
        ('LazyStackedTensorDict', torch.Size([2]), torch.Size([2]))
        >>> spec[1] is b, spec["obs"].shape
        (True, torch.Size([2, 3]))
        >>> spec.is_in(td)
        True
    """

    domain = "composite"

    def __init__(self, *specs: Composite | Sequence[Composite], dim: int):
        if len(specs) == 1 and isinstance(specs[0], list | tuple):
            specs = tuple(specs[0])
        if not specs:
            raise ValueError("StackedComposite expects at least one Composite, got none")
        first = specs[0]
        for i, s in enumerate(specs):
            if not isinstance(s, _NestedSpec):
                raise TypeError(
                    f"StackedComposite members must be Composite specs, member {i} is a "
                    f"{type(s).__name__}"
                )
            if s.shape != first.shape:
                raise ValueError(
                    f"StackedComposite members must share their shape: member 0 has "
                    f"{tuple(first.shape)}, member {i} has {tuple(s.shape)}"
                )
        self._specs = list(specs)
        self.dim = _normalize_dim(dim, first.ndim + 1, "StackedComposite")
        self.shape = torch.Size((*first.shape[: self.dim], len(specs), *first.shape[self.dim :]))
        # as TorchRL: the members' device, where members without one (None) do not count;
        # None when members sit on different devices
        devices = {s.device for s in specs if s.device is not None}
        self.device = devices.pop() if len(devices) == 1 else None

    @classmethod
    def _new(cls, specs: list, dim: int) -> StackedComposite:
        return cls(specs, dim=dim)

    def _lock_children(self) -> Iterator[_Lockable]:
        return (s for s in self._specs if isinstance(s, _Lockable))

    @property
    def stack_dim(self) -> int:
        """The dim the members are stacked along (``dim`` of the constructor)."""
        return self.dim

    @property
    def batch_size(self) -> torch.Size:
        """Alias of :attr:`shape`."""
        return self.shape

    @property
    def dtype(self) -> torch.dtype | None:  # type: ignore[override]
        dtypes = {s.dtype for s in self._specs}
        return dtypes.pop() if len(dtypes) == 1 else None

    # ------------------------------------------------------------------ values
    def _stack(self, tds: list[TensorDictBase], lead: int) -> LazyStackedTensorDict:
        if any(td.device != self.device for td in tds):
            # members without a device (or on different ones) stack on the stack's device
            tds = [td.clear_device_() if self.device is None else td.to(self.device) for td in tds]
        return LazyStackedTensorDict(*tds, stack_dim=lead + self.dim)

    def rand(self, shape: Sequence[int] | torch.Size | None = ()) -> LazyStackedTensorDict:
        """A lazy stack of the members' random TensorDicts."""
        if shape is None:
            shape = ()
        return self._stack([s.rand(shape) for s in self._specs], len(shape))

    def zero(self, shape: Sequence[int] | torch.Size | None = ()) -> LazyStackedTensorDict:
        if shape is None:
            shape = ()
        return self._stack([s.zero(shape) for s in self._specs], len(shape))

    def one(self, shape: Sequence[int] | torch.Size | None = ()) -> LazyStackedTensorDict:
        if shape is None:
            shape = ()
        return self._stack([s.one(shape) for s in self._specs], len(shape))

    def _parts(self, value: TensorDictBase) -> tuple[int, tuple[TensorDictBase, ...]] | str:
        if not isinstance(value, TensorDictBase):
            return f"is a {type(value).__name__}, expected a TensorDict"
        lead = value.batch_dims - self.ndim
        if lead < 0 or value.batch_size[lead:] != self.shape:
            return f"has batch size {tuple(value.batch_size)}, expected (*batch, {', '.join(map(str, self.shape))})"
        return lead, value.unbind(lead + self.dim)

    def _mismatch(self, value: Any) -> str | None:
        parts = self._parts(value)
        if isinstance(parts, str):
            return parts
        for i, (spec, part) in enumerate(zip(self._specs, parts[1])):
            why = spec._mismatch(part)
            if why is not None:
                return _nest_reason(f"has a member {i} that ", why)
        return None

    def project(self, value: TensorDictBase) -> LazyStackedTensorDict:
        parts = self._parts(value)
        if isinstance(parts, str):
            raise ValueError(f"cannot project a value that {parts} onto {self!r}")
        lead, tds = parts
        return self._stack([s.project(td) for s, td in zip(self._specs, tds)], lead)

    def encode(
        self, value: Mapping[str, Any] | Sequence[Mapping[str, Any]], *, ignore_device: bool = False
    ) -> LazyStackedTensorDict:
        """A lazy stack of TensorDicts from numpy arrays / python values.

        Args:
            value: what :meth:`to_numpy` returns (a mapping of the entries every member
                holds, each stacked along the stack dim), or one mapping per member (which
                may hold the members' own entries too).
            ignore_device: leave the values where they are.
        """
        if isinstance(value, Mapping):
            value = self._member_mappings(value, ignore_device)
        if len(value) != len(self._specs):
            raise ValueError(
                f"StackedComposite.encode expects {len(self._specs)} mappings (one per member), "
                f"got {len(value)}"
            )
        tds = [s.encode(v, ignore_device=ignore_device) for s, v in zip(self._specs, value)]
        return self._stack(tds, tds[0].batch_dims - self._specs[0].ndim)

    def _member_mappings(self, value: Mapping[str, Any], ignore_device: bool) -> list[dict]:
        """Splits a mapping of stacked entries into one mapping of encoded values per member."""
        out: list[dict] = [{} for _ in self._specs]
        for key, item in value.items():
            spec = self[key]
            encoded = spec.encode(item, ignore_device=ignore_device)
            ndim = encoded.batch_dims if isinstance(encoded, TensorDictBase) else encoded.ndim
            dim = 0 if getattr(encoded, "is_nested", False) else ndim - spec.ndim + self.dim
            for member, part in zip(out, encoded.unbind(dim)):
                member[key] = part
        return out

    def to_numpy(self, value: TensorDictBase, safe: bool | None = None) -> dict[str, Any]:
        """A dict of numpy arrays, one per entry every member holds, stacked (as TorchRL).

        An entry whose members differ in shape gives a list of arrays (see
        :meth:`Stacked.to_numpy`); :meth:`encode` takes the dict back.
        """
        if safe:
            self.assert_is_in(value)
        parts = self._parts(value)
        if isinstance(parts, str):
            raise ValueError(f"cannot convert a value that {parts} with {self!r}")
        lead, members = parts
        out: dict[str, Any] = {}
        for key in self.keys():
            values = [m.get(key, None) for m in members]
            if any(v is None for v in values):
                continue
            if isinstance(values[0], TensorDictBase):
                stacked = LazyStackedTensorDict(*values, stack_dim=lead + self.dim)
            elif all(v.shape == values[0].shape for v in values[1:]):
                stacked = torch.stack(values, lead + self.dim)
            else:  # members' entries differ in shape: one array per member
                out[key] = [s[key].to_numpy(v) for s, v in zip(self._specs, values)]
                continue
            out[key] = self[key].to_numpy(stacked)
        return out

    # ------------------------------------------------------------------ keys
    def _iter_keys(self, include_nested: bool, leaves_only: bool) -> Iterator[Any]:
        others = [set(s.keys(include_nested, leaves_only)) for s in self._specs[1:]]
        for key in self._specs[0].keys(include_nested, leaves_only):
            if all(key in o for o in others):
                yield key

    def _iter_items(self, include_nested: bool, leaves_only: bool) -> Iterator[tuple[Any, Any]]:
        for key in self._iter_keys(include_nested, leaves_only):
            yield key, self[key]

    def keys(self, include_nested: bool = False, leaves_only: bool = False) -> list:
        """The keys every member holds (in the first member's order)."""
        return list(self._iter_keys(include_nested, leaves_only))

    def items(self, include_nested: bool = False, leaves_only: bool = False) -> list:
        return list(self._iter_items(include_nested, leaves_only))

    def values(self, include_nested: bool = False, leaves_only: bool = False) -> list:
        return [v for _, v in self._iter_items(include_nested, leaves_only)]

    def __contains__(self, key: object) -> bool:
        return all(key in s for s in self._specs)

    def get(self, key: Any, default: Any = _NO_DEFAULT) -> Any:
        """The stacked spec at ``key``, or ``default`` if given and some member lacks it."""
        try:
            return self[key]
        except KeyError:
            if default is _NO_DEFAULT:
                raise
            return default

    def set(self, key: Any, value: TensorSpec) -> StackedComposite:
        """Sets ``key`` in every member (``value`` is unbound along the stack dim)."""
        self[key] = value
        return self

    def update(self, other: Any) -> StackedComposite:
        """Sets every entry of ``other`` (a mapping or Composite of stacked specs)."""
        for key, value in other.items():
            self[key] = value
        return self

    def pop(self, key: Any, default: Any = _NO_DEFAULT) -> Any:
        """Removes ``key`` from every member and returns its stacked spec."""
        if key not in self:
            if default is _NO_DEFAULT:
                raise KeyError(f"key {key!r} is not in every member of StackedComposite")
            return default
        self._check_unlocked(f"deleting key {key!r}")
        out = self[key]
        for s in self._specs:
            del s[key]
        return out

    def __delitem__(self, key: Any) -> None:
        """Deletes ``key`` from every member that holds it (as TorchRL).

        Raises:
            KeyError: if no member holds ``key``.
        """
        holders = [s for s in self._specs if key in s]
        if not holders:
            raise KeyError(f"key {key!r} is in no member of StackedComposite")
        self._check_unlocked(f"deleting key {key!r}")
        for s in holders:
            del s[key]

    def is_empty(self, recurse: bool = False) -> bool:
        """Whether every member is empty."""
        return all(s.is_empty(recurse) for s in self._specs)

    def empty(self) -> StackedComposite:
        """The stack of the members' empty copies."""
        return StackedComposite([s.empty() for s in self._specs], dim=self.dim)

    def type_check(self, value: Any, selected_keys: Any = None) -> None:
        """Checks the dtype of each entry of each member (``value`` unbound along the stack dim)."""
        if isinstance(value, torch.Tensor) and isinstance(selected_keys, str):
            self[selected_keys].type_check(value, selected_keys)
            return
        parts = self._parts(value)
        if isinstance(parts, str):
            raise ValueError(f"type_check: value {parts}")
        for s, part in zip(self._specs, parts[1]):
            s.type_check(part, selected_keys)

    def clear_device_(self) -> StackedComposite:
        """Forgets the device of the stack and of every member."""
        for s in self._specs:
            s.clear_device_()
        self.device = None
        return self

    def memoize_encode(self, mode: bool = True) -> None:
        super().memoize_encode(mode)
        for s in self._specs:
            s.memoize_encode(mode)

    def erase_memoize_cache(self) -> None:
        for s in self._specs:
            s.erase_memoize_cache()

    def __len__(self) -> int:
        return len(self._specs)

    def __iter__(self) -> Iterator[Composite]:
        return iter(self._specs)

    # ------------------------------------------------------------------ indexing
    def __getitem__(self, idx: Any) -> TensorSpec:
        if _is_key(idx):
            values = []
            for i, s in enumerate(self._specs):
                if idx not in s:
                    raise KeyError(
                        f"key {idx!r} not found in member {i} of StackedComposite; keys of every "
                        f"member: {self.keys(True)}"
                    )
                values.append(s[idx])
            return stack_specs(values, self.dim)
        idx = _expand_ellipsis(idx, self.ndim)
        if any(not isinstance(i, int | slice) for i in idx) or len(idx) > self.ndim:
            raise IndexError(
                f"StackedComposite of shape {tuple(self.shape)} takes int and slice indices on "
                f"its {self.ndim} dims, got {idx!r}"
            )
        idx = idx + (slice(None),) * (self.ndim - len(idx))
        rest = idx[: self.dim] + idx[self.dim + 1 :]
        full = slice(None)
        members = self._specs
        if any(r != full for r in rest):
            members = [s[rest] for s in members]
        sel = idx[self.dim]
        if isinstance(sel, int):
            return members[sel]
        new_dim = self.dim - sum(isinstance(i, int) for i in idx[: self.dim])
        return StackedComposite(members[sel], dim=new_dim)

    def __setitem__(self, key: Any, value: TensorSpec) -> None:
        unravel_key(key)  # tensordict's check of a nested key (RuntimeError otherwise, as TorchRL)
        self._check_unlocked(f"key {key!r}")
        if value.shape[: self.ndim] != self.shape:
            raise ValueError(
                f"spec for key {key!r} has shape {tuple(value.shape)}, expected it to start with "
                f"the StackedComposite's shape {tuple(self.shape)}"
            )
        for s, part in zip(self._specs, value.unbind(self.dim)):
            s[_unravel(key)] = part

    def make_neg_dim(self, dim: int) -> StackedComposite:
        """Makes dim ``dim`` dynamic (``-1``) in every member, in place (not the stack dim)."""
        return _stacked_make_neg_dim(self, dim)

    def unbind(self, dim: int = 0) -> tuple[TensorSpec, ...]:
        d = _normalize_dim(dim, self.ndim, "unbind of StackedComposite")
        if d == self.dim:
            return tuple(self._specs)
        return tuple(self[(slice(None),) * d + (i,)] for i in range(self.shape[d]))

    # ------------------------------------------------------------------ copies and shapes
    def clone(self) -> StackedComposite:
        return StackedComposite([s.clone() for s in self._specs], dim=self.dim)

    def to(self, dest: DEVICE_TYPING | torch.dtype) -> StackedComposite:
        if not isinstance(dest, torch.dtype) and _to_device(dest) == self.device:
            return self
        return StackedComposite([s.to(dest) for s in self._specs], dim=self.dim)

    def expand(self, *shape: int) -> StackedComposite:
        shape = _shape_args(shape)
        lead = len(shape) - self.ndim
        if (
            lead < 0
            or shape[lead + self.dim] != len(self._specs)
            or any(s != o and o != 1 for s, o in zip(shape[lead:], self.shape))
        ):
            raise ValueError(
                f"cannot expand StackedComposite of shape {tuple(self.shape)} to {tuple(shape)}: "
                f"the new shape must end with the old one and keep {len(self._specs)} at the "
                "stack dim"
            )
        d = lead + self.dim
        member_shape = (*shape[:d], *shape[d + 1 :])
        return StackedComposite([s.expand(*member_shape) for s in self._specs], dim=d)

    def squeeze(self, dim: int | None = None) -> TensorSpec:
        if dim is None:
            out: TensorSpec = self
            for d in reversed(range(self.ndim)):
                if self.shape[d] == 1:
                    out = out.squeeze(d)
            return out
        d = _normalize_dim(dim, self.ndim, "squeeze of StackedComposite")
        if self.shape[d] != 1:
            return self
        if d == self.dim:
            return self._specs[0]
        md = d if d < self.dim else d - 1
        new_dim = self.dim - 1 if d < self.dim else self.dim
        return StackedComposite([s.squeeze(md) for s in self._specs], dim=new_dim)

    def unsqueeze(self, dim: int) -> StackedComposite:
        d = _normalize_dim(dim, self.ndim + 1, "unsqueeze of StackedComposite")
        if d <= self.dim:
            return StackedComposite([s.unsqueeze(d) for s in self._specs], dim=self.dim + 1)
        return StackedComposite([s.unsqueeze(d - 1) for s in self._specs], dim=self.dim)

    # ------------------------------------------------------------------ comparison and repr
    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, StackedComposite)
            and self.dim == other.dim
            and len(self._specs) == len(other._specs)
            and all(a == b for a, b in zip(self._specs, other._specs))
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        lines = [
            f"    {i}: " + repr(s).replace("\n", "\n    ") + "," for i, s in enumerate(self._specs)
        ]
        lines.append(f"    dim={self.dim}, shape={self.shape}, device={self.device})")
        return "StackedComposite(\n" + "\n".join(lines)
