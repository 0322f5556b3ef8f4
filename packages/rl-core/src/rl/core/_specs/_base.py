"""The base class of every tensor spec and the argument parsers the specs share."""

from __future__ import annotations

import abc
import copy
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ._dynamic import (
    _concrete,
    _indexed_shape,
    _make_neg_dim,
    _no_dynamic,
    _positive_steps,
    shape_fits,
)

__all__ = [
    "SpecMismatchError",
    "SpecMissingEntryError",
    "SpecShapeError",
    "TensorSpec",
    "DEVICE_TYPING",
]

DEVICE_TYPING = torch.device | str | int
_DEFAULT_SHAPE = torch.Size((1,))  # TorchRL's default shape of Unbounded and NonTensor


def _build_dtype_names() -> dict[str, torch.dtype]:
    names: dict[str, torch.dtype] = {}
    for name in dir(torch):
        value = getattr(torch, name, None)
        if isinstance(value, torch.dtype):
            names[name] = value
            names[f"torch.{name}"] = value
    return names


_DTYPE_NAMES = _build_dtype_names()
_PY_DTYPES: dict[type, torch.dtype] = {bool: torch.bool, int: torch.int64, float: torch.float32}


def _to_dtype(dtype: Any, default: torch.dtype | None = torch.float32) -> torch.dtype | None:
    """Parses a torch dtype, a string ("float32", "torch.int64"), a numpy dtype or a python type."""
    if dtype is None:
        return default
    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str):
        out = _DTYPE_NAMES.get(dtype)
        if out is None:
            raise ValueError(
                f"unknown dtype {dtype!r}: expected a torch.dtype or a name such as "
                "'float32', 'int64', 'bool' or 'uint8'"
            )
        return out
    if dtype in _PY_DTYPES:
        return _PY_DTYPES[dtype]
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        np_dtype = None
    if np_dtype is not None and np_dtype.name in _DTYPE_NAMES:
        return _DTYPE_NAMES[np_dtype.name]
    raise ValueError(
        f"unknown dtype {dtype!r}: expected a torch.dtype, a numpy dtype or a name such as "
        "'float32', 'int64', 'bool' or 'uint8'"
    )


def _to_device(device: Any) -> torch.device:
    if device is None:
        return torch.get_default_device()
    if isinstance(device, torch.device):
        return device
    return torch.device(device)


def _to_shape(shape: Any, what: str = "shape") -> torch.Size:
    if shape is None:
        return torch.Size(())
    if isinstance(shape, int):
        shape = (shape,)
    try:
        out = torch.Size(int(s) for s in shape)
    except (TypeError, ValueError):
        raise TypeError(f"{what} must be an int or a sequence of ints, got {shape!r}") from None
    if any(s < -1 for s in out):
        raise ValueError(
            f"{what} must have non-negative sizes (or -1 for a dynamic dim), got {tuple(out)}"
        )
    return out


def _shape_args(shape: tuple) -> torch.Size:
    """Parses the ``*shape`` of ``expand(*shape)``: ``expand(2, 3)`` or ``expand((2, 3))``."""
    if len(shape) == 1 and not isinstance(shape[0], int):
        shape = shape[0]
    return _to_shape(shape)


def _normalize_dim(dim: int, ndim: int, what: str) -> int:
    if not -ndim <= dim < ndim:
        raise IndexError(f"{what}: dim {dim} is out of range for {ndim} dims")
    return dim + ndim if dim < 0 else dim


def _numpy_ready(value: Any) -> Any:
    # torch.as_tensor warns on read-only numpy arrays (gymnasium hands those out)
    if isinstance(value, np.ndarray) and not value.flags.writeable:
        return value.copy()
    return value


def _fmt_tensor(t: torch.Tensor) -> str:
    """A short readable form: a scalar when every entry is the same, the values when few."""
    if t.numel() == 0:
        return "[]"
    flat = t.reshape(-1)
    first = flat[0]
    if bool((flat == first).all()):
        return repr(first.item())
    if t.numel() <= 8:
        return repr(t.tolist())
    return f"Tensor(shape={tuple(t.shape)}, min={t.min().item()!r}, max={t.max().item()!r})"


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    return f"a {type(value).__name__}"


class SpecMismatchError(ValueError, AssertionError):
    """A value is not in a spec (:meth:`TensorSpec.assert_is_in`).

    A ``ValueError``, and an ``AssertionError`` as TorchRL raises there, so code catching
    either carries over.
    """


class SpecShapeError(ValueError, RuntimeError):
    """A value's shape fits neither the spec's shape nor a batch of it (``encode``).

    A ``ValueError``, and a ``RuntimeError`` as TorchRL raises there.
    """


class SpecMissingEntryError(KeyError, SpecMismatchError):
    """A value lacks an entry its Composite spec describes (``is_in``, ``assert_is_in``).

    A ``KeyError``, as TorchRL raises there, and a :class:`SpecMismatchError`.
    """

    def __str__(self) -> str:  # KeyError would show the message quoted
        return str(self.args[0]) if self.args else ""


class _MissingEntry(str):
    """A mismatch reason (see ``TensorSpec._mismatch``) saying an entry is missing."""


def _nest_reason(prefix: str, why: str | None) -> str | None:
    """``why`` behind ``prefix``, still marked as a missing entry when it was one."""
    if why is None:
        return None
    return type(why)(f"{prefix}{why}") if isinstance(why, _MissingEntry) else f"{prefix}{why}"


class TensorSpec(abc.ABC):
    """Base class of the tensor specs: what a tensor must look like (shape, dtype, device, values).

    Subclasses set ``_elementwise`` (names of tensor attributes whose leading dims are the
    spec's batch dims, such as ``low``/``high`` or a mask) and ``_nfeat`` (how many trailing
    dims of ``shape`` are feature dims that indexing and ``expand`` must leave alone, 1 for
    one-hot encodings). Shape operations (indexing, ``expand``, ``squeeze``, ``unsqueeze``)
    are written once here on top of these two attributes.
    """

    _elementwise: tuple[str, ...] = ()
    _value_tensors: tuple[str, ...] = ()  # elementwise tensors that follow the spec's dtype
    _eq_attrs: tuple[str, ...] = ()
    _nfeat: int = 0
    _alias_of_parent: bool = False

    shape: torch.Size
    dtype: torch.dtype | None
    device: torch.device | None
    domain: str = ""

    # ------------------------------------------------------------------ basics
    @property
    def ndim(self) -> int:
        return len(self.shape)

    def ndimension(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return self.shape.numel()

    @property
    def _batch_ndim(self) -> int:
        return len(self.shape) - self._nfeat

    def _canonical_type(self) -> type:
        cls = type(self)
        while cls._alias_of_parent:
            cls = cls.__mro__[1]
        return cls

    # ------------------------------------------------------------------ values
    @abc.abstractmethod
    def rand(self, shape: Sequence[int] | torch.Size | None = ()) -> torch.Tensor:
        """A random value in the spec, with ``shape`` extra leading dims (``None``: none)."""

    def sample(self, shape: Sequence[int] | torch.Size | None = ()) -> torch.Tensor:
        """Alias of :meth:`rand`."""
        return self.rand(shape)

    def zero(self, shape: Sequence[int] | torch.Size | None = ()) -> torch.Tensor:
        """A tensor of zeros of shape ``(*shape, *spec.shape)`` (preallocation; see the class)."""
        if shape is None:
            shape = ()
        return torch.zeros((*shape, *_concrete(self.shape)), dtype=self.dtype, device=self.device)

    def one(self, shape: Sequence[int] | torch.Size | None = ()) -> torch.Tensor:
        """A tensor of ones of shape ``(*shape, *spec.shape)``."""
        if shape is None:
            shape = ()
        return torch.ones((*shape, *_concrete(self.shape)), dtype=self.dtype, device=self.device)

    def zeros(self, shape: Sequence[int] | torch.Size | None = ()) -> torch.Tensor:
        """Alias of :meth:`zero`."""
        return self.zero(shape)

    def ones(self, shape: Sequence[int] | torch.Size | None = ()) -> torch.Tensor:
        """Alias of :meth:`one`."""
        return self.one(shape)

    def _mismatch(self, value: Any) -> str | None:
        """Why ``value`` is not in the spec, or None when it is. Shape and dtype checks here."""
        if not isinstance(value, torch.Tensor):
            return f"got {_describe(value)}, expected a tensor"
        vshape = value.shape
        n = len(self.shape)
        if len(vshape) < n or not shape_fits(vshape[len(vshape) - n :], self.shape):
            return (
                f"has shape {tuple(vshape)}, expected (*batch, {', '.join(map(str, self.shape))})"
            )
        if value.dtype != self.dtype:
            return f"has dtype {value.dtype}, expected {self.dtype}"
        return self._values_mismatch(value)

    def _values_mismatch(self, value: torch.Tensor) -> str | None:
        return None

    def is_in(self, value: Any) -> bool:
        """Whether ``value`` has the spec's trailing shape, its dtype and allowed values.

        Leading dims beyond ``spec.shape`` are accepted (a batch of values).

        Raises:
            SpecMissingEntryError: a ``KeyError``, when ``value`` lacks an entry of a
                Composite spec (as TorchRL: a missing entry is an error, not a mismatch).
        """
        why = self._mismatch(value)
        if why is None:
            return True
        if isinstance(why, _MissingEntry):
            raise SpecMissingEntryError(f"value {why}, which {type(self).__name__}.is_in needs")
        return False

    def assert_is_in(self, value: Any) -> None:
        """Raises ``ValueError`` naming the spec and the value when ``value`` is not in the spec.

        The error is also an ``AssertionError``, what TorchRL raises, so ``except`` clauses
        written for either catch it.
        """
        why = self._mismatch(value)
        if why is not None:
            cls = SpecMissingEntryError if isinstance(why, _MissingEntry) else SpecMismatchError
            raise cls(f"value {why}, so it is not in {self!r}")

    def project(self, value: torch.Tensor) -> torch.Tensor:
        """The closest value in the spec (clamped, rounded, re-encoded).

        A value already in the spec comes back with the same values (TorchRL returns it
        unchanged). Each spec defines the mapping in :meth:`_project`.
        """
        return self._project(value)

    def _project(self, value: torch.Tensor) -> torch.Tensor:
        """Maps ``value`` into the spec; the identity on values already in it (TorchRL's hook)."""
        if value.dtype != self.dtype:
            value = value.to(self.dtype)
        return value

    def encode(self, value: Any, *, ignore_device: bool = False) -> torch.Tensor:
        """Turns a numpy array, a python number or list, or a tensor into a tensor of the spec.

        The result has the spec's dtype and device. A value whose number of elements equals the
        spec's is reshaped to ``spec.shape`` (a python float for a spec of shape ``(1,)``); a
        value of shape ``(*batch, *spec.shape)`` is a batch of values and keeps its shape.

        Raises:
            SpecShapeError: a ``ValueError`` (and the ``RuntimeError`` TorchRL raises) when
                the value is neither.
        """
        device = None if ignore_device else self.device
        out = torch.as_tensor(_numpy_ready(value), dtype=self.dtype, device=device)
        if out.shape == self.shape:
            return out
        if -1 not in self.shape and out.numel() == self.shape.numel():
            return out.reshape(self.shape)
        n = self.ndim
        if out.ndim < n or not shape_fits(out.shape[out.ndim - n :], self.shape):
            raise SpecShapeError(
                f"Shape mismatch: {type(self).__name__}.encode got a value of shape "
                f"{tuple(out.shape)}, expected {tuple(self.shape)} (or (*batch, "
                f"{', '.join(map(str, self.shape))}) for a batch of values)"
            )
        return out

    def to_numpy(self, value: torch.Tensor, safe: bool | None = None) -> np.ndarray:
        """The value as a numpy array (``safe=True`` checks it is in the spec first)."""
        if safe:
            self.assert_is_in(value)
        return value.detach().cpu().numpy()

    def contains(self, item: Any) -> bool:
        """Alias of :meth:`is_in`."""
        return self.is_in(item)

    def type_check(self, value: torch.Tensor, key: Any = None) -> None:
        """Raises ``TypeError`` when ``value``'s dtype is not the spec's (shape and values unchecked).

        Args:
            value: the tensor to check.
            key: the entry's name, for the message (specs with entries use it to pick one).
        """
        if value.dtype is not self.dtype:
            where = f" for key {key!r}" if key is not None else ""
            raise TypeError(
                f"value{where} has dtype {value.dtype}, expected {self.dtype} from "
                f"{type(self).__name__}"
            )

    def clear_device_(self) -> TensorSpec:
        """A no-op on leaf specs, which always have a device; a Composite forgets its own."""
        return self

    def memoize_encode(self, mode: bool = True) -> None:
        """Accepted for TorchRL compatibility: :meth:`encode` is one conversion here already.

        TorchRL caches the chain of conversions ``encode`` applies to speed up later calls
        with inputs of the same kind; here ``encode`` is a single ``torch.as_tensor`` (plus a
        reshape when needed), so the flag is kept (``spec._memoize_encode``) and the results
        are the same with or without it.
        """
        self._memoize_encode = bool(mode)

    def erase_memoize_cache(self) -> None:  # noqa: B027 - nothing cached, same on every spec
        """Clears the :meth:`memoize_encode` cache (there is nothing cached here)."""

    def cardinality(self) -> int:
        """The number of distinct values (``inf`` for a continuous box).

        Raises:
            NotImplementedError: for specs whose values cannot be counted (unbounded, non-tensor).
        """
        raise NotImplementedError(f"cardinality is not defined for {type(self).__name__} specs")

    def enumerate(self, use_mask: bool | None = None) -> Any:
        """All the values of a discrete spec, stacked along a new first dim.

        Raises:
            NotImplementedError: for continuous and non-tensor specs.
        """
        raise NotImplementedError(
            f"enumerate is only defined for discrete specs, not for {type(self).__name__}"
        )

    def index(self, index: Any, tensor_to_index: torch.Tensor) -> torch.Tensor:
        """Picks entries of ``tensor_to_index`` with a value of the spec (discrete specs only).

        Raises:
            NotImplementedError: for specs that do not define it (continuous, non-tensor,
                composite), as in TorchRL.
        """
        raise NotImplementedError(f"index is not defined for {type(self).__name__} specs")

    # ------------------------------------------------------------------ copies and devices
    def _copy_with(self, shape: torch.Size, fn: Callable[[torch.Tensor], torch.Tensor]):
        new = copy.copy(self)
        new.shape = torch.Size(shape)
        for name in self._elementwise:
            t = getattr(self, name)
            if t is not None:
                setattr(new, name, fn(t))
        return new

    def clone(self) -> TensorSpec:
        """A deep copy."""
        return self._copy_with(self.shape, torch.Tensor.clone)

    def to(self, dest: DEVICE_TYPING | torch.dtype) -> TensorSpec:
        """The spec on another device (or with another dtype when ``dest`` is a dtype)."""
        if isinstance(dest, torch.dtype):
            if dest == self.dtype:
                return self
            new = self._copy_with(self.shape, lambda t: t)
            new.dtype = dest
            for name in self._value_tensors:
                setattr(new, name, getattr(self, name).to(dest))
            new._on_dtype_change()
            return new
        dest = _to_device(dest)
        if dest == self.device:
            return self
        new = self._copy_with(self.shape, lambda t: t.to(dest))
        new.device = dest
        return new

    def _on_dtype_change(self) -> None:  # noqa: B027 - optional hook
        """Hook: refreshes attributes derived from the dtype (``domain``)."""

    def cpu(self) -> TensorSpec:
        return self.to("cpu")

    def cuda(self, device: int | None = None) -> TensorSpec:
        return self.to("cuda" if device is None else f"cuda:{device}")

    # ------------------------------------------------------------------ shape operations
    def _new_shape(self, batch: Sequence[int]) -> torch.Size:
        return torch.Size((*batch, *self.shape[self._batch_ndim :]))

    def __getitem__(self, idx: Any) -> TensorSpec:
        """Indexes the leading (batch) dims; feature dims (one-hot, ...) are kept.

        A dynamic (``-1``) dim can be taken whole (``:``) or at an integer; a narrower
        slice of it raises ``IndexError`` (its extent is unknown), as in TorchRL.
        """
        bn = self._batch_ndim
        full = (idx if isinstance(idx, tuple) else (idx,)) + (slice(None),) * self._nfeat
        full = _positive_steps(self.shape, full, type(self).__name__, idx)
        shape = _indexed_shape(self.shape, full, self.device, type(self).__name__, bn, idx)

        def index(t: torch.Tensor) -> torch.Tensor:
            return t[full + (slice(None),) * (t.ndim - len(self.shape))]

        return self._copy_with(shape, index)

    def expand(self, *shape: int) -> TensorSpec:
        """The spec with its batch dims expanded to ``shape`` (which ends with ``spec.shape``).

        Dims of size 1 can grow, new leading dims can be added, feature dims must not change.
        """
        shape = _shape_args(shape)
        n = self.ndim
        bn = self._batch_ndim
        lead = len(shape) - n
        if (
            lead < 0
            or -1 in shape[:lead]
            or any(s != o and o != 1 for s, o in zip(shape[lead : lead + bn], self.shape[:bn]))
            or shape[lead + bn :] != self.shape[bn:]
        ):
            raise ValueError(
                f"cannot expand {type(self).__name__} of shape {tuple(self.shape)} to "
                f"{tuple(shape)}: the new shape must end with the old one (dims of size 1 may "
                "grow, dynamic -1 dims stay -1)"
            )
        batch = _concrete(shape[: lead + bn])
        return self._copy_with(shape, lambda t: t.expand(*batch, *t.shape[bn:]))

    def squeeze(self, dim: int | None = None) -> TensorSpec:
        """Removes batch dims of size 1 (all of them, or ``dim``)."""
        bn = self._batch_ndim
        batch = list(self.shape[:bn])
        if dim is None:
            batch = [s for s in batch if s != 1]
        else:
            d = _normalize_dim(dim, self.ndim, f"squeeze of {type(self).__name__}")
            if d >= bn:
                raise ValueError(
                    f"cannot squeeze dim {dim} of {type(self).__name__} of shape "
                    f"{tuple(self.shape)}: it is a feature dim, only the first {bn} can be squeezed"
                )
            if batch[d] == 1:
                del batch[d]
        if len(batch) == bn:
            return self
        tb = _concrete(torch.Size(batch))
        return self._copy_with(self._new_shape(batch), lambda t: t.reshape(*tb, *t.shape[bn:]))

    def unsqueeze(self, dim: int) -> TensorSpec:
        """Inserts a batch dim of size 1 at ``dim``."""
        bn = self._batch_ndim
        d = _normalize_dim(dim, self.ndim + 1, f"unsqueeze of {type(self).__name__}")
        if d > bn:
            raise ValueError(
                f"cannot unsqueeze {type(self).__name__} of shape {tuple(self.shape)} at dim "
                f"{dim}: only positions 0 to {bn} are before its feature dims"
            )
        batch = list(self.shape[:bn])
        batch.insert(d, 1)
        tb = _concrete(torch.Size(batch))
        return self._copy_with(self._new_shape(batch), lambda t: t.reshape(*tb, *t.shape[bn:]))

    def unbind(self, dim: int = 0) -> tuple[TensorSpec, ...]:
        """The specs of the slices along batch dim ``dim`` (negative: counted from the last dim).

        Raises:
            ValueError: if ``dim`` is a feature dim (the one-hot or bit dim, ...), which
                must stay whole, as in TorchRL, or a dynamic (``-1``) dim.
        """
        d = _normalize_dim(dim, self.ndim, f"unbind of {type(self).__name__}")
        if d >= self._batch_ndim:
            raise ValueError(
                f"cannot unbind dim {dim} of {type(self).__name__} of shape "
                f"{tuple(self.shape)}: it is a feature dim, only the first {self._batch_ndim} "
                "can be unbound"
            )
        if self.shape[d] == -1:
            raise ValueError(
                f"cannot unbind dim {dim} of {type(self).__name__} of shape "
                f"{tuple(self.shape)}: it is dynamic (-1), its number of slices is unknown"
            )
        return tuple(self[(slice(None),) * d + (i,)] for i in range(self.shape[d]))

    def reshape(self, *shape: int) -> TensorSpec:
        """The spec with its batch dims reshaped (``-1`` is inferred; feature dims stay).

        Args:
            *shape: the new shape, ints or one sequence, ending with the feature dims of
                the spec (the one-hot size of :class:`OneHot`, ...).

        Raises:
            ValueError: if the number of elements changes or the feature dims do not match.
        """
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = tuple(shape[0])
        _no_dynamic(self, "reshape")
        try:
            new = torch.empty(self.shape, device="meta").reshape(shape).shape
        except RuntimeError as err:
            raise ValueError(
                f"cannot reshape {type(self).__name__} of shape {tuple(self.shape)} to "
                f"{tuple(shape)}: {err}"
            ) from None
        return self._reshape(new)

    view = reshape

    def _reshape(self, new: torch.Size) -> TensorSpec:
        nf = self._nfeat
        feat = self.shape[len(self.shape) - nf :]
        if nf and (len(new) < nf or new[len(new) - nf :] != feat):
            raise ValueError(
                f"cannot reshape {type(self).__name__} of shape {tuple(self.shape)} to "
                f"{tuple(new)}: its last {nf} dim(s) {tuple(feat)} are feature dims and must stay"
            )
        batch = new[: len(new) - nf]
        bn = self._batch_ndim
        return self._copy_with(new, lambda t: t.reshape(*batch, *t.shape[bn:]))

    def flatten(self, start_dim: int, end_dim: int) -> TensorSpec:
        """Flattens dims ``start_dim`` to ``end_dim`` (as :func:`torch.flatten`)."""
        _no_dynamic(self, "flatten")
        return self._reshape(
            torch.empty(self.shape, device="meta").flatten(start_dim, end_dim).shape
        )

    def unflatten(self, dim: int, sizes: Sequence[int]) -> TensorSpec:
        """Splits dim ``dim`` into ``sizes`` (as :func:`torch.unflatten`)."""
        _no_dynamic(self, "unflatten")
        return self._reshape(torch.empty(self.shape, device="meta").unflatten(dim, sizes).shape)

    def make_neg_dim(self, dim: int) -> TensorSpec:
        """Makes dim ``dim`` dynamic (``-1``: any size), in place, as TorchRL.

        Values made by the spec (``rand``, ``zero``) then have size 1 along that dim and
        ``is_in`` accepts any size there. The spec's per-entry tensors (``low``/``high``,
        a mask) keep their first slice along ``dim``.

        Args:
            dim: the dim to make dynamic (negative values count from the end).

        Returns:
            the spec itself (TorchRL returns ``None``).

        Examples:
            >>> from rl.core import Unbounded
            >>> spec = Unbounded(shape=(2, 3))
            >>> _ = spec.make_neg_dim(0)
            >>> spec.shape, spec.rand().shape, spec.is_in(torch.zeros(5, 3))
            (torch.Size([-1, 3]), torch.Size([1, 3]), True)
        """
        d = _normalize_dim(dim, self.ndim, f"make_neg_dim of {type(self).__name__}")
        return _make_neg_dim(self, dim, d)

    # ------------------------------------------------------------------ comparison and repr
    def __eq__(self, other: object) -> bool:
        if (
            not isinstance(other, TensorSpec)
            or self._canonical_type() is not other._canonical_type()
        ):
            return False
        if (
            self.shape != other.shape
            or self.dtype != other.dtype
            or self.device != other.device
            or any(getattr(self, a) != getattr(other, a) for a in self._eq_attrs)
        ):
            return False
        for name in self._elementwise:
            a, b = getattr(self, name), getattr(other, name)
            if (a is None) != (b is None):
                return False
            if a is not None and (a.shape != b.shape or not torch.equal(a, b)):
                return False
        return True

    __hash__ = None  # type: ignore[assignment]

    def _repr_fields(self) -> list[str]:
        return []

    def __repr__(self) -> str:
        fields = [f"shape={self.shape}", *self._repr_fields()]
        fields += [f"device={self.device}", f"dtype={self.dtype}"]
        return f"{type(self).__name__}({', '.join(fields)})"


class _NestedSpec(TensorSpec):
    """Marker base of the specs holding named entries (:class:`Composite`, stacked form)."""

    def _project(self, value: Any) -> Any:
        """A projected shallow copy of ``value`` (:meth:`project` writes into ``value``)."""
        return self.project(value.copy())

    @abc.abstractmethod
    def _iter_keys(self, include_nested: bool, leaves_only: bool):
        """Yields the keys (nested keys as tuples) like ``keys()`` iterates them."""


def _warn_deprecated(old: str, new: str) -> None:
    warnings.warn(
        f"{old} is deprecated, use {new} instead (same arguments)",
        DeprecationWarning,
        stacklevel=3,
    )
