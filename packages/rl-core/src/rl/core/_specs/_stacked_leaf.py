"""The :class:`Stacked` spec: leaf specs of one kind whose shapes differ, stacked lazily."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ._base import DEVICE_TYPING, TensorSpec, _NestedSpec, _normalize_dim, _shape_args

__all__ = ["Stacked"]


class Stacked(TensorSpec):
    """Leaf specs of one kind, dtype and device but different shapes, stacked along ``dim``.

    The heterogeneous counterpart of stacking equal specs (agents whose observations differ
    in size). A dim where the members differ has size ``-1`` in ``spec.shape``. Values are
    stacked when the members' values share a shape, else (stack dim first) returned as a
    nested tensor; ``is_in`` checks each member's slice. Indexing the stack dim with an int
    gives back the member. ``torch.stack`` of leaf specs whose shapes differ builds one, as
    in TorchRL.

    Args:
        *specs: the member specs (or one list of them).
        dim: the stack dim, in ``[0, member.ndim]`` (negative values count from the end).

    Raises:
        ValueError: if members differ in kind, dtype, device or number of dims.

    Examples:
        >>> import torch
        >>> from rl.core import Stacked, Unbounded
        >>> spec = Stacked(Unbounded(shape=(3,)), Unbounded(shape=(4,)), dim=0)
        >>> type(spec).__name__, spec.shape
        ('Stacked', torch.Size([2, -1]))
        >>> value = spec.rand()
        >>> value.is_nested, [t.shape[0] for t in value.unbind(0)]
        (True, [3, 4])
        >>> spec.is_in(value), spec[1].shape
        (True, torch.Size([4]))
    """

    def __init__(self, *specs: TensorSpec | Sequence[TensorSpec], dim: int):
        if len(specs) == 1 and isinstance(specs[0], list | tuple):
            specs = tuple(specs[0])
        if not specs:
            raise ValueError("Stacked expects at least one spec, got none")
        first = specs[0]
        for i, s in enumerate(specs):
            if not isinstance(s, TensorSpec) or isinstance(s, _NestedSpec):
                raise TypeError(
                    f"Stacked members must be leaf specs (use StackedComposite for Composites), "
                    f"member {i} is a {type(s).__name__}"
                )
            for attr, what in (
                (s._canonical_type() is first._canonical_type(), "kind"),
                (s.dtype == first.dtype, "dtype"),
                (s.device == first.device, "device"),
                (s.ndim == first.ndim, "number of dims"),
            ):
                if not attr:
                    raise ValueError(
                        f"Stacked members must share kind, dtype, device and number of dims: "
                        f"member 0 is {first!r}, member {i} is {s!r} (different {what})"
                    )
        self._specs = list(specs)
        self.dim = _normalize_dim(dim, first.ndim + 1, "Stacked")
        sizes = [
            size if all(s.shape[i] == size for s in self._specs) else -1
            for i, size in enumerate(first.shape)
        ]
        sizes.insert(self.dim, len(self._specs))
        self.shape = torch.Size(sizes)
        self.dtype = first.dtype
        self.device = first.device
        self.domain = first.domain

    @property
    def stack_dim(self) -> int:
        """The dim the members are stacked along."""
        return self.dim

    # ------------------------------------------------------------------ values
    def _stack(self, values: list[torch.Tensor], lead: int) -> torch.Tensor:
        if all(v.shape == values[0].shape for v in values[1:]):
            return torch.stack(values, lead + self.dim)
        if lead + self.dim != 0:
            raise ValueError(
                f"values of Stacked members differ in shape ({[tuple(v.shape) for v in values]}); "
                "they can be returned only as a nested tensor, stacked along the first dim, "
                f"not dim {lead + self.dim}"
            )
        with warnings.catch_warnings():  # torch calls its strided nested layout a prototype
            warnings.simplefilter("ignore", UserWarning)
            return torch.nested.nested_tensor(values)

    def rand(self, shape: Sequence[int] | torch.Size | None = ()) -> torch.Tensor:
        """The members' ``rand`` stacked (a nested tensor when their shapes differ)."""
        if shape is None:
            shape = ()
        return self._stack([s.rand(shape) for s in self._specs], len(shape))

    def zero(self, shape: Sequence[int] | torch.Size | None = ()) -> torch.Tensor:
        if shape is None:
            shape = ()
        return self._stack([s.zero(shape) for s in self._specs], len(shape))

    def one(self, shape: Sequence[int] | torch.Size | None = ()) -> torch.Tensor:
        if shape is None:
            shape = ()
        return self._stack([s.one(shape) for s in self._specs], len(shape))

    def _parts(self, value: Any) -> list | str:
        if isinstance(value, torch.Tensor) and value.is_nested:
            if self.dim != 0:
                return f"is a nested tensor, expected a tensor stacked along dim {self.dim}"
            return list(value.unbind(0))
        if isinstance(value, list | tuple) and self.dim == 0:
            return list(value)
        if not isinstance(value, torch.Tensor):
            return f"is a {type(value).__name__}, expected a tensor"
        lead = value.ndim - self.ndim
        if lead < 0 or value.shape[lead + self.dim] != len(self._specs):
            return (
                f"has shape {tuple(value.shape)}, expected {len(self._specs)} members along "
                f"dim {self.dim} of (*batch, {', '.join(map(str, self.shape))})"
            )
        return list(value.unbind(lead + self.dim))

    def _mismatch(self, value: Any) -> str | None:
        parts = self._parts(value)
        if isinstance(parts, str):
            return parts
        if len(parts) != len(self._specs):
            return f"has {len(parts)} members, expected {len(self._specs)}"
        for i, (spec, part) in enumerate(zip(self._specs, parts)):
            why = spec._mismatch(part)
            if why is not None:
                return f"has a member {i} that {why}"
        return None

    def _project(self, value: Any) -> torch.Tensor:
        """Each member's slice projected onto its spec, stacked back."""
        parts = self._parts(value)
        if isinstance(parts, str):
            raise ValueError(f"cannot project a value that {parts} onto {self!r}")
        lead = 0 if isinstance(value, list | tuple) or value.is_nested else value.ndim - self.ndim
        return self._stack([s.project(p) for s, p in zip(self._specs, parts)], lead)

    def encode(self, value: Any, *, ignore_device: bool = False) -> torch.Tensor:
        """Encodes one value per member (a list, or an array stacked along ``dim``)."""
        if isinstance(value, np.ndarray | torch.Tensor) and not getattr(value, "is_nested", False):
            value = list(torch.as_tensor(value).unbind(self.dim))
        if len(value) != len(self._specs):
            raise ValueError(
                f"Stacked.encode expects {len(self._specs)} values (one per member), "
                f"got {len(value)}"
            )
        parts = [s.encode(v, ignore_device=ignore_device) for s, v in zip(self._specs, value)]
        return self._stack(parts, 0)

    def to_numpy(self, value: Any, safe: bool | None = None) -> Any:
        """A numpy array when the members' values share a shape, else a list of arrays."""
        if safe:
            self.assert_is_in(value)
        if isinstance(value, torch.Tensor) and not value.is_nested:
            return value.detach().cpu().numpy()
        return [v.detach().cpu().numpy() for v in value.unbind(0)]

    def type_check(self, value: torch.Tensor, key: Any = None) -> None:
        parts = self._parts(value)
        if isinstance(parts, str):
            raise ValueError(f"type_check: value {parts}")
        for spec, part in zip(self._specs, parts):
            spec.type_check(part, key)

    def enumerate(self, use_mask: bool | None = None) -> torch.Tensor:
        return torch.stack([s.enumerate(use_mask) for s in self._specs], self.dim + 1)

    def cardinality(self) -> int:
        raise NotImplementedError("cardinality is not defined for Stacked specs (as in TorchRL)")

    def reshape(self, *shape: int) -> TensorSpec:
        raise NotImplementedError("reshape is not defined for Stacked specs (as in TorchRL)")

    view = reshape

    def _reshape(self, new: torch.Size) -> TensorSpec:
        return self.reshape(new)

    # ------------------------------------------------------------------ shape operations
    def __getitem__(self, idx: Any) -> TensorSpec:
        """Indexes the stack dim (ints give a member, slices a smaller stack)."""
        idx = idx if isinstance(idx, tuple) else (idx,)
        if len(idx) != self.dim + 1 or any(i != slice(None) for i in idx[: self.dim]):
            raise IndexError(
                f"Stacked specs take an index on their stack dim {self.dim} only "
                f"(got {idx!r} for shape {tuple(self.shape)})"
            )
        sel = idx[self.dim]
        if isinstance(sel, int):
            return self._specs[sel]
        if isinstance(sel, slice):
            return Stacked(self._specs[sel], dim=self.dim)
        raise IndexError(f"Stacked specs take an int or a slice on the stack dim, got {sel!r}")

    def __len__(self) -> int:
        return self.shape[0]

    def unbind(self, dim: int = 0) -> tuple[TensorSpec, ...]:
        d = _normalize_dim(dim, self.ndim, "unbind of Stacked")
        if d != self.dim:
            raise ValueError(f"Stacked specs unbind along their stack dim {self.dim}, got {dim}")
        return tuple(self._specs)

    def make_neg_dim(self, dim: int) -> Stacked:
        """Makes dim ``dim`` dynamic (``-1``) in every member, in place (not the stack dim)."""
        return _stacked_make_neg_dim(self, dim)

    def expand(self, *shape: int) -> Stacked:
        """New leading dims (``-1`` keeps a size); the member dims must stay as they are."""
        shape = torch.Size(_shape_args_neg(shape))
        lead = len(shape) - self.ndim
        tail = shape[lead:]
        if lead < 0 or any(s != o and s != -1 for s, o in zip(tail, self.shape)):
            raise ValueError(
                f"cannot expand Stacked of shape {tuple(self.shape)} to {tuple(shape)}: only new "
                "leading dims can be added"
            )
        members = [s.expand(*shape[:lead], *s.shape) for s in self._specs]
        return Stacked(members, dim=self.dim + lead)

    def squeeze(self, dim: int | None = None) -> TensorSpec:
        if dim is None:
            raise ValueError("Stacked.squeeze needs a dim")
        d = _normalize_dim(dim, self.ndim, "squeeze of Stacked")
        if self.shape[d] != 1:
            return self
        if d == self.dim:
            return self._specs[0]
        md = d if d < self.dim else d - 1
        return Stacked([s.squeeze(md) for s in self._specs], dim=self.dim - (d < self.dim))

    def unsqueeze(self, dim: int) -> Stacked:
        d = _normalize_dim(dim, self.ndim + 1, "unsqueeze of Stacked")
        if d <= self.dim:
            return Stacked([s.unsqueeze(d) for s in self._specs], dim=self.dim + 1)
        return Stacked([s.unsqueeze(d - 1) for s in self._specs], dim=self.dim)

    def clone(self) -> Stacked:
        return Stacked([s.clone() for s in self._specs], dim=self.dim)

    def to(self, dest: DEVICE_TYPING | torch.dtype) -> Stacked:
        return Stacked([s.to(dest) for s in self._specs], dim=self.dim)

    # ------------------------------------------------------------------ comparison and repr
    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Stacked)
            and self.dim == other.dim
            and len(self._specs) == len(other._specs)
            and all(a == b for a, b in zip(self._specs, other._specs))
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        inner = ", ".join(repr(s) for s in self._specs)
        return f"Stacked([{inner}], dim={self.dim}, shape={self.shape})"


def _stacked_make_neg_dim(spec: Any, dim: int) -> Any:
    """``make_neg_dim`` of the stacked specs: the members' dim, as TorchRL (not the stack dim)."""
    d = _normalize_dim(dim, spec.ndim, f"make_neg_dim of {type(spec).__name__}")
    if d == spec.dim:
        raise ValueError(
            f"cannot make dim {dim} of {type(spec).__name__} dynamic: it is the stack dim"
        )
    for member in spec._specs:
        member.make_neg_dim(d if d < spec.dim else d - 1)
    spec.shape = torch.Size(-1 if i == d else s for i, s in enumerate(spec.shape))
    return spec


def _shape_args_neg(shape: tuple) -> tuple[int, ...]:
    """``expand``'s sizes, where ``-1`` (a dim that differs between members) is allowed."""
    if len(shape) == 1 and not isinstance(shape[0], int):
        shape = tuple(shape[0])
    if all(isinstance(s, int) and s >= -1 for s in shape):
        return tuple(shape)
    return tuple(_shape_args(shape))
