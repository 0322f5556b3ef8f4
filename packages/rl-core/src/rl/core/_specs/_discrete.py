"""Discrete specs: :class:`Categorical` (indices), :class:`OneHot` and :class:`Binary`."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ._base import (
    DEVICE_TYPING,
    TensorSpec,
    _describe,
    _normalize_dim,
    _numpy_ready,
    _to_device,
    _to_dtype,
    _to_shape,
)
from ._dynamic import _concrete
from ._spaces import CategoricalBox

__all__ = ["Categorical", "OneHot", "Binary"]


def _check_n(n: Any, cls: str) -> int:
    if isinstance(n, torch.Tensor):
        n = n.item()
    if not isinstance(n, int | np.integer) or isinstance(n, bool) or n < 0:
        raise ValueError(
            f"{cls} expects n to be a non-negative int (the number of values), got {n!r}"
        )
    return int(n)


def _in_range(value: torch.Tensor, n: int) -> bool:
    """Whether every entry of ``value`` lies in ``[0, n)`` (one read of the result); an
    ``n`` past the largest value of ``value``'s integer dtype bounds nothing above."""
    inside = value >= 0
    if value.is_floating_point() or n <= torch.iinfo(value.dtype).max:
        inside = inside & (value < n)
    return bool(inside.all())


def _sample_index(
    spec: TensorSpec, lead: Sequence[int], batch: Sequence[int], n: int, mask: torch.Tensor | None
) -> torch.Tensor:
    """Uniform indices in ``[0, n)`` of shape ``(*lead, *batch)``, among the allowed ones if masked."""
    full = (*lead, *_concrete(torch.Size(batch)))
    if mask is None:
        return torch.randint(0, n, full, device=spec.device)
    probs = mask.expand(*full, n).reshape(-1, n).to(torch.float32)
    if probs.shape[0] == 0:
        return torch.zeros(full, dtype=torch.int64, device=spec.device)
    try:
        return torch.multinomial(probs, 1).reshape(full)
    except RuntimeError:
        raise ValueError(
            f"rand() of {type(spec).__name__} needs at least one allowed value per entry, "
            "but its mask allows none for some entry"
        ) from None


class _MaskedDiscrete(TensorSpec):
    """Shared parts of the maskable discrete specs (``mask`` of shape ``_mask_shape``)."""

    _elementwise = ("mask",)
    _eq_attrs = ("n",)
    domain = "discrete"
    n: int
    mask: torch.Tensor | None

    @property
    @abc.abstractmethod
    def _mask_shape(self) -> tuple[int, ...]:
        """The shape a mask is expanded to."""

    @property
    def space(self) -> CategoricalBox:
        return CategoricalBox(self._declared_n)

    @property
    def _declared_n(self) -> int:
        """``n`` as given to the constructor (``-1`` for an undefined Categorical)."""
        return self.n

    def update_mask(self, mask: torch.Tensor | None) -> None:
        """Sets (``None``: clears) the boolean mask of allowed values; ``rand`` draws among them.

        The mask must broadcast to ``(*spec.shape, n)`` for :class:`Categorical` and to
        ``spec.shape`` for the one-hot specs.
        """
        if mask is None:
            self.mask = None
            return
        expected = self._mask_shape
        if mask.shape != expected:
            try:
                mask = mask.expand(expected)
            except RuntimeError:
                raise ValueError(
                    f"mask of shape {tuple(mask.shape)} does not broadcast to {expected}, the "
                    f"mask shape of {type(self).__name__} of shape {tuple(self.shape)} and n={self.n}"
                ) from None
        self.mask = mask.to(device=self.device, dtype=torch.bool)

    def _repr_fields(self) -> list[str]:
        fields = [f"n={self._declared_n}"]
        if self.mask is not None:
            fields.append(f"mask=Tensor(shape={tuple(self.mask.shape)})")
        return fields


class Categorical(_MaskedDiscrete):
    """Integer indices in ``{0, ..., n - 1}``.

    Args:
        n: the number of values; ``-1`` leaves it undefined (a variable-size space, as in
            TorchRL): :meth:`set_provisional_n` must then be called before anything needs it
            (``rand``, ``n``...), while ``is_in`` checks only shape and dtype.
        shape: the spec's shape (default ``()``: one index).
        device: where values live.
        dtype: the values' dtype (``torch.int64`` by default; ``torch.bool`` for ``n=2`` flags).
        mask: optional boolean tensor broadcastable to ``(*shape, n)`` of the allowed values.

    Examples:
        >>> import torch
        >>> from rl.core import Categorical
        >>> spec = Categorical(4)
        >>> spec
        Categorical(shape=torch.Size([]), n=4, device=cpu, dtype=torch.int64)
        >>> spec.is_in(torch.tensor(3)), spec.is_in(torch.tensor(4))
        (True, False)
        >>> spec.update_mask(torch.tensor([False, False, True, False]))
        >>> spec.rand((3,))
        tensor([2, 2, 2])
        >>> spec.project(torch.tensor(7))
        tensor(2)
        >>> undefined = Categorical(-1)
        >>> undefined.set_provisional_n(5)
        >>> undefined.n, bool(undefined.rand() < 5), undefined
        (5, True, Categorical(shape=torch.Size([]), n=-1, device=cpu, dtype=torch.int64))
    """

    _eq_attrs = ("_n",)

    def __init__(
        self,
        n: int,
        shape: Sequence[int] | torch.Size | int | None = None,
        device: DEVICE_TYPING | None = None,
        dtype: torch.dtype | str | None = torch.int64,
        mask: torch.Tensor | None = None,
    ):
        self._provisional_n: int | None = None
        self.n = n
        self.shape = _to_shape(shape)
        self.device = _to_device(device)
        self.dtype = _to_dtype(dtype, torch.int64)
        self.mask = None
        if mask is not None:
            self.update_mask(mask)

    @property
    def n(self) -> int:
        """The number of values (the provisional one when ``n=-1`` was given).

        Raises:
            RuntimeError: ``n`` is undefined (``-1``) and no provisional ``n`` was set.
        """
        if self._n >= 0:
            return self._n
        if self._provisional_n is None:
            raise RuntimeError(
                f"{type(self).__name__}(n=-1) has an undefined number of values: call "
                "spec.set_provisional_n(n) first"
            )
        return self._provisional_n

    @n.setter
    def n(self, value: int) -> None:
        if isinstance(value, int | np.integer) and not isinstance(value, bool) and value == -1:
            self._n = -1
        else:
            self._n = _check_n(value, type(self).__name__)

    @property
    def _declared_n(self) -> int:
        return self._n

    @property
    def _undefined_n(self) -> bool:
        """Whether ``n`` was given as ``-1`` (TorchRL's name)."""
        return self._n < 0

    def set_provisional_n(self, n: int) -> None:
        """Sets the number of values of a ``Categorical(-1)`` until it is set again."""
        self._provisional_n = _check_n(n, type(self).__name__)

    @property
    def _mask_shape(self) -> tuple[int, ...]:
        return (*_concrete(self.shape), self.n)

    def rand(self, shape: Sequence[int] | torch.Size | None = ()) -> torch.Tensor:
        if shape is None:
            shape = ()
        if self.mask is None:
            return torch.randint(
                0, self.n, (*shape, *_concrete(self.shape)), dtype=self.dtype, device=self.device
            )
        return _sample_index(self, shape, self.shape, self.n, self.mask).to(self.dtype)

    def _allowed(self, value: torch.Tensor) -> torch.Tensor:
        mask = self.mask.expand(*value.shape, self.n)
        return mask.gather(-1, value.long().unsqueeze(-1)).squeeze(-1)

    def _values_mismatch(self, value: torch.Tensor) -> str | None:
        if self._n < 0 and self.mask is None:
            return None  # undefined n: any index of the right shape and dtype (TorchRL)
        if self.dtype != torch.bool and not _in_range(value, self.n):
            return f"has values outside [0, {self.n})"
        if self.mask is not None and not bool(self._allowed(value).all()):
            return "has values the mask does not allow"
        return None

    def _project(self, value: torch.Tensor) -> torch.Tensor:
        if value.dtype != self.dtype:
            if value.is_floating_point():
                value = value.round()
            value = value.to(self.dtype)
        if self.dtype != torch.bool:
            value = value.clamp(0, self.n - 1)
        if self.mask is not None:
            first = self.mask.to(torch.uint8).argmax(-1).to(self.dtype)
            value = torch.where(self._allowed(value), value, first)
        return value

    def to_one_hot(self, value: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """The one-hot encoding (``torch.bool``) of indices ``value``: shape ``(*value.shape, n)``."""
        if safe:
            self.assert_is_in(value)
        out = torch.zeros((*value.shape, self.n), dtype=torch.bool, device=value.device)
        return out.scatter_(-1, value.long().unsqueeze(-1), True)

    def to_one_hot_spec(self) -> OneHot:
        """The :class:`OneHot` spec of the same values (the mask carries over)."""
        return OneHot(self.n, shape=(*self.shape, self.n), device=self.device, mask=self.mask)

    def enumerate(self, use_mask: bool | None = None) -> torch.Tensor:
        """All values, stacked along a new first dim: shape ``(n, *spec.shape)``.

        Args:
            use_mask: whether a mask removes the values it forbids (spec of shape ``()``
                only). ``None`` (default) applies it; TorchRL's default is ``False``, pass
                it explicitly to get every value.
        """
        values = torch.arange(self.n, device=self.device).to(self.dtype)
        if self.mask is not None and self.ndim == 0 and use_mask is not False:
            return values[self.mask]
        return values.reshape(self.n, *[1] * self.ndim).expand(self.n, *self.shape)

    def cardinality(self) -> int:
        """``n``, the number of values (masks are ignored, as in TorchRL)."""
        return self.n

    def index(self, index: torch.Tensor, tensor_to_index: torch.Tensor) -> torch.Tensor:
        """Gathers from ``tensor_to_index`` (``[..., n]``) the entries at indices ``index``.

        Examples:
            >>> import torch
            >>> from rl.core import Categorical
            >>> Categorical(3).index(torch.tensor(1), torch.tensor([5, 6, 7]))
            tensor(6)
        """
        if not isinstance(index, torch.Tensor):
            raise ValueError(
                f"{type(self).__name__}.index expects a tensor of indices, got {_describe(index)}"
            )
        index = index.long()
        if index.ndim == 0:
            idx = index.expand(*tensor_to_index.shape[:-1], 1)
            return tensor_to_index.gather(-1, idx).squeeze(-1)
        nd = index.ndim
        idx = index.expand(*tensor_to_index.shape[: tensor_to_index.ndim - nd], *[-1] * nd)
        return tensor_to_index.gather(-1, idx)

    def to_categorical(self, value: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """Identity: the values are already indices (``safe=True`` checks them first)."""
        if safe:
            self.assert_is_in(value)
        return value

    def to_categorical_spec(self) -> Categorical:
        """The spec itself (already categorical)."""
        return self


class OneHot(_MaskedDiscrete):
    """One-hot encodings of ``n`` values: the last dim has size ``n`` and exactly one 1.

    Args:
        n: the number of values.
        shape: the spec's shape, ending with ``n`` (default ``(n,)``).
        device: where values live.
        dtype: the values' dtype (``torch.bool`` by default).
        use_register: accepted for compatibility with TorchRL, unused.
        mask: optional boolean tensor broadcastable to ``shape`` of the allowed values.

    ``encode`` takes indices (as gymnasium's ``Discrete`` returns them) and ``to_numpy``
    gives indices back. ``zero()`` is all zeros (a buffer to fill, not a valid one-hot).

    Examples:
        >>> import numpy as np
        >>> import torch
        >>> from rl.core import OneHot
        >>> spec = OneHot(3)
        >>> spec
        OneHot(shape=torch.Size([3]), n=3, device=cpu, dtype=torch.bool)
        >>> spec.encode(np.int64(1))
        tensor([False,  True, False])
        >>> spec.to_numpy(spec.encode([2, 0]))
        array([2, 0])
        >>> spec.project(torch.tensor([0.1, 0.7, 0.2]))
        tensor([False,  True, False])
    """

    _nfeat = 1
    _eq_attrs = ("n", "use_register")  # as TorchRL

    def __init__(
        self,
        n: int,
        shape: Sequence[int] | torch.Size | int | None = None,
        device: DEVICE_TYPING | None = None,
        dtype: torch.dtype | str | None = torch.bool,
        use_register: bool = False,
        mask: torch.Tensor | None = None,
    ):
        self.n = _check_n(n, type(self).__name__)
        shape = torch.Size((self.n,)) if shape is None else _to_shape(shape)
        if len(shape) == 0 or shape[-1] != self.n:
            raise ValueError(
                f"{type(self).__name__} shape must end with n={self.n}, got {tuple(shape)}"
            )
        self.shape = shape
        self.device = _to_device(device)
        self.dtype = _to_dtype(dtype, torch.bool)
        self.use_register = use_register
        self.mask = None
        if mask is not None:
            self.update_mask(mask)

    @property
    def _mask_shape(self) -> tuple[int, ...]:
        return tuple(_concrete(self.shape))

    def rand(self, shape: Sequence[int] | torch.Size | None = ()) -> torch.Tensor:
        if shape is None:
            shape = ()
        idx = _sample_index(self, shape, self.shape[:-1], self.n, self.mask)
        out = torch.zeros((*shape, *_concrete(self.shape)), dtype=self.dtype, device=self.device)
        return out.scatter_(-1, idx.unsqueeze(-1), 1)

    def _values_mismatch(self, value: torch.Tensor) -> str | None:
        if self.dtype != torch.bool and not bool(((value == 0) | (value == 1)).all()):
            return "has values other than 0 and 1"
        if not bool((value.sum(-1) == 1).all()):
            return "is not one-hot (some rows do not hold exactly one 1)"
        if self.mask is not None and bool((value.bool() & ~self.mask).any()):
            return "has values the mask does not allow"
        return None

    def _from_index(self, idx: torch.Tensor) -> torch.Tensor:
        out = torch.zeros((*idx.shape, self.n), dtype=self.dtype, device=idx.device)
        return out.scatter_(-1, idx.unsqueeze(-1), 1)

    def _project(self, value: torch.Tensor) -> torch.Tensor:
        scores = value.to(torch.float32)
        if self.mask is not None:
            scores = scores.masked_fill(~self.mask, float("-inf"))
        return self._from_index(scores.argmax(-1))

    def encode(self, value: Any, *, ignore_device: bool = False) -> torch.Tensor:
        """One-hot encodes indices (a python int, a list or array of ints, a tensor)."""
        device = None if ignore_device else self.device
        idx = torch.as_tensor(_numpy_ready(value), device=device).long()
        if idx.numel() and bool(((idx < 0) | (idx >= self.n)).any()):
            raise ValueError(
                f"{type(self).__name__}.encode expects indices in [0, {self.n}), got values from "
                f"{idx.min().item()} to {idx.max().item()}"
            )
        return self._from_index(idx)

    def to_numpy(self, value: torch.Tensor, safe: bool | None = None) -> np.ndarray:
        """The indices of the one-hot encodings, as a numpy array."""
        if safe:
            self.assert_is_in(value)
        return value.detach().to(torch.uint8).argmax(-1).cpu().numpy()

    def to_categorical(self, value: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """The indices (``torch.int64``) of one-hot encodings ``value``: shape ``value.shape[:-1]``."""
        if safe:
            self.assert_is_in(value)
        return value.to(torch.uint8).argmax(-1)

    def to_categorical_spec(self) -> Categorical:
        """The :class:`Categorical` spec of the same values (the mask carries over)."""
        return Categorical(self.n, shape=self.shape[:-1], device=self.device, mask=self.mask)

    def index(self, index: torch.Tensor, tensor_to_index: torch.Tensor) -> torch.Tensor:
        """Picks from ``tensor_to_index`` (``[..., n]``) the entries selected by one-hot ``index``.

        Examples:
            >>> import torch
            >>> from rl.core import OneHot
            >>> values = torch.tensor([[1.0, 5.0, 3.0], [7.0, 8.0, 9.0]])
            >>> OneHot(3).index(torch.tensor([[0, 1, 0], [0, 0, 1]]), values)
            tensor([[5.],
                    [9.]])
        """
        if not isinstance(index, torch.Tensor) or index.shape[-1:] != (self.n,):
            raise ValueError(
                f"{type(self).__name__}.index expects a one-hot tensor of shape (..., {self.n}), "
                f"got {_describe(index)}"
            )
        idx = index.to(torch.uint8).argmax(-1, keepdim=True)
        idx = idx.expand(*tensor_to_index.shape[:-1], 1)
        return tensor_to_index.gather(-1, idx)

    def enumerate(self, use_mask: bool | None = None) -> torch.Tensor:
        """All one-hot values, stacked along a new first dim: ``(n, *spec.shape)``.

        Args:
            use_mask: as :meth:`Categorical.enumerate` (``None``, the default, applies a mask).
        """
        eye = torch.eye(self.n, dtype=self.dtype, device=self.device)
        if self.mask is not None and self.ndim == 1 and use_mask is not False:
            return eye[self.mask]
        return eye.reshape(self.n, *[1] * (self.ndim - 1), self.n).expand(self.n, *self.shape)

    def cardinality(self) -> int:
        """``n``, the number of values (masks are ignored, as in TorchRL)."""
        return self.n

    def to_one_hot(self, value: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """Identity: the values are already one-hot (``safe=True`` checks them first)."""
        if safe:
            self.assert_is_in(value)
        return value

    def to_one_hot_spec(self) -> OneHot:
        """The spec itself (already one-hot)."""
        return self


class Binary(TensorSpec):
    """Vectors of ``n`` independent bits (values 0 or 1).

    Args:
        n: the number of bits (``shape[-1]``); taken from ``shape`` if omitted.
        shape: the spec's shape, ending with ``n`` (default ``(n,)``); ``()`` holds one bit
            (``n`` is then 0, as in TorchRL).
        device: where values live.
        dtype: the values' dtype (``torch.int8`` by default).

    Examples:
        >>> import torch
        >>> from rl.core import Binary
        >>> spec = Binary(4)
        >>> spec
        Binary(shape=torch.Size([4]), n=4, device=cpu, dtype=torch.int8)
        >>> spec.is_in(torch.tensor([0, 1, 1, 0], dtype=torch.int8))
        True
        >>> spec.project(torch.tensor([-2.0, 0.3, 0.8, 5.0]))
        tensor([0, 0, 1, 1], dtype=torch.int8)
    """

    _nfeat = 1
    _eq_attrs = ("n",)
    domain = "discrete"

    def __init__(
        self,
        n: int | None = None,
        shape: Sequence[int] | torch.Size | int | None = None,
        device: DEVICE_TYPING | None = None,
        dtype: torch.dtype | str | None = torch.int8,
    ):
        if n is None and shape is None:
            raise TypeError("Binary needs n or shape, got neither")
        shape = _to_shape(shape) if shape is not None else None
        if shape is not None and len(shape) == 0:
            # as TorchRL: a Binary of shape () holds one bit, and then n is 0
            if n not in (None, 0):
                raise ValueError(f"Binary of shape () holds one bit and takes n=0, got n={n}")
            n = 0
            self._nfeat = 0
        elif n is None:
            n = shape[-1]
        self.n = _check_n(n, "Binary")
        if shape is None:
            shape = torch.Size((self.n,))
        if self._nfeat and (len(shape) == 0 or shape[-1] != self.n):
            raise ValueError(f"Binary shape must end with n={self.n}, got {tuple(shape)}")
        self.shape = shape
        self.device = _to_device(device)
        self.dtype = _to_dtype(dtype, torch.int8)

    @property
    def space(self) -> CategoricalBox:
        return CategoricalBox(2)

    def rand(self, shape: Sequence[int] | torch.Size | None = ()) -> torch.Tensor:
        if shape is None:
            shape = ()
        return torch.randint(
            0, 2, (*shape, *_concrete(self.shape)), dtype=self.dtype, device=self.device
        )

    def _values_mismatch(self, value: torch.Tensor) -> str | None:
        if self.dtype != torch.bool and not bool(((value == 0) | (value == 1)).all()):
            return "has values other than 0 and 1"
        return None

    def _project(self, value: torch.Tensor) -> torch.Tensor:
        if value.dtype == self.dtype == torch.bool:
            return value
        if value.is_floating_point():
            value = value.round()
        return value.clamp(0, 1).to(self.dtype)

    mask = None  # Binary has no mask (TorchRL's attribute, always None)

    def cardinality(self) -> int:
        """``2**n``, the number of bit vectors (the length of :meth:`enumerate`); 2 for one bit."""
        return 2**self.n if self._nfeat else 2

    def to_categorical(self, value: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """Identity, as in TorchRL: each bit is already the index of one of two values."""
        if safe:
            self.assert_is_in(value)
        return value

    def enumerate(self, use_mask: bool | None = None) -> torch.Tensor:
        """All ``2**n`` bit vectors, stacked along a new first dim: ``(2**n, *spec.shape)``."""
        if not self._nfeat:  # one bit per entry
            values = torch.arange(2, device=self.device).to(self.dtype)
            return values.reshape(2, *[1] * self.ndim).expand(2, *self.shape)
        if self.n > 20:
            raise ValueError(f"Binary.enumerate would build 2**{self.n} values, expected n <= 20")
        codes = torch.arange(2**self.n, device=self.device).unsqueeze(-1)
        bits = codes.bitwise_right_shift(torch.arange(self.n - 1, -1, -1, device=self.device)) & 1
        bits = bits.to(self.dtype)
        count = bits.shape[0]
        return bits.reshape(count, *[1] * (self.ndim - 1), self.n).expand(count, *self.shape)

    def unsqueeze(self, dim: int) -> TensorSpec:
        """Inserts a dim of size 1 at ``dim``.

        As TorchRL: the bits are independent, so any position is allowed; unsqueezing
        after the bit dim (``dim=-1``) turns each bit into a vector of ``n=1`` bit.
        """
        d = _normalize_dim(dim, self.ndim + 1, f"unsqueeze of {type(self).__name__}")
        if d <= self._batch_ndim:
            return super().unsqueeze(dim)
        shape = list(self.shape)
        shape.insert(d, 1)
        return Binary(n=shape[-1], shape=shape, device=self.device, dtype=self.dtype)

    def _repr_fields(self) -> list[str]:
        return [f"n={self.n}"]
