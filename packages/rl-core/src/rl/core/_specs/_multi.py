"""Multi-discrete specs: :class:`MultiOneHot` and :class:`MultiCategorical`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ._base import DEVICE_TYPING, _numpy_ready, _to_device, _to_dtype, _to_shape
from ._discrete import Categorical, _check_n, _MaskedDiscrete, _sample_index
from ._dynamic import _concrete
from ._spaces import BoxList

__all__ = ["MultiOneHot", "MultiCategorical"]


def _combinations(nvec: Sequence[int], device: torch.device) -> torch.Tensor:
    """Every index combination of ``nvec``, shape ``(prod(nvec), len(nvec))``, first entry slowest."""
    if math.prod(nvec) > 2**20:
        raise ValueError(
            f"enumerate would build prod(nvec)={math.prod(nvec)} values, expected <= 2**20"
        )
    grids = torch.meshgrid(*(torch.arange(n, device=device) for n in nvec), indexing="ij")
    return torch.stack([g.reshape(-1) for g in grids], -1)


def _check_nvec(nvec: Any, cls: str) -> list[int]:
    values = torch.as_tensor(nvec).reshape(-1).tolist() if not isinstance(nvec, list) else nvec
    if not values:
        raise ValueError(f"{cls} expects a non-empty nvec, got {nvec!r}")
    return [_check_n(n, cls) for n in values]


class MultiOneHot(_MaskedDiscrete):
    """Concatenated one-hot encodings of several discrete variables.

    Args:
        nvec: the number of values of each variable; the last dim has size ``sum(nvec)``.
        shape: the spec's shape, ending with ``sum(nvec)`` (default ``(sum(nvec),)``).
        device: where values live.
        dtype: the values' dtype (``torch.bool`` by default).
        use_register: accepted for compatibility with TorchRL, unused.
        mask: optional boolean tensor broadcastable to ``shape`` of the allowed values.

    ``encode`` takes indices of shape ``(..., len(nvec))`` and ``to_numpy`` gives them back.

    Examples:
        >>> import torch
        >>> from rl.core import MultiOneHot
        >>> spec = MultiOneHot([2, 3])
        >>> spec
        MultiOneHot(shape=torch.Size([5]), nvec=[2, 3], device=cpu, dtype=torch.bool)
        >>> spec.encode([1, 0]).int()
        tensor([0, 1, 1, 0, 0], dtype=torch.int32)
        >>> spec.to_numpy(spec.encode([1, 2]))
        array([1, 2])
        >>> spec.is_in(torch.tensor([True, False, False, True, True]))
        False
    """

    _nfeat = 1
    _eq_attrs = ("nvec", "use_register")  # as TorchRL

    def __init__(
        self,
        nvec: Sequence[int] | torch.Tensor,
        shape: Sequence[int] | torch.Size | int | None = None,
        device: DEVICE_TYPING | None = None,
        dtype: torch.dtype | str | None = torch.bool,
        use_register: bool = False,
        mask: torch.Tensor | None = None,
    ):
        self.nvec = _check_nvec(nvec, type(self).__name__)
        self.n = sum(self.nvec)
        shape = torch.Size((self.n,)) if shape is None else _to_shape(shape)
        if len(shape) == 0 or shape[-1] != self.n:
            raise ValueError(
                f"{type(self).__name__} shape must end with sum(nvec)={self.n}, got {tuple(shape)}"
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

    @property
    def space(self) -> BoxList:  # type: ignore[override]
        return BoxList.from_nvec(self.nvec)

    def _segments(self, t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return t.split(self.nvec, dim=-1)

    def rand(self, shape: Sequence[int] | torch.Size | None = ()) -> torch.Tensor:
        if shape is None:
            shape = ()
        out = torch.zeros((*shape, *_concrete(self.shape)), dtype=self.dtype, device=self.device)
        masks = self._segments(self.mask) if self.mask is not None else [None] * len(self.nvec)
        for part, k, m in zip(self._segments(out), self.nvec, masks):
            idx = _sample_index(self, shape, self.shape[:-1], k, m)
            part.scatter_(-1, idx.unsqueeze(-1), 1)
        return out

    def _values_mismatch(self, value: torch.Tensor) -> str | None:
        if self.dtype != torch.bool and not bool(((value == 0) | (value == 1)).all()):
            return "has values other than 0 and 1"
        sums = torch.stack([p.sum(-1) for p in self._segments(value)], -1)
        if not bool((sums == 1).all()):
            return f"is not a concatenation of one-hot encodings of sizes {self.nvec}"
        if self.mask is not None and bool((value.bool() & ~self.mask).any()):
            return "has values the mask does not allow"
        return None

    def _from_indices(self, idx: torch.Tensor) -> torch.Tensor:
        out = torch.zeros((*idx.shape[:-1], self.n), dtype=self.dtype, device=idx.device)
        offsets = torch.as_tensor(np.cumsum([0, *self.nvec[:-1]]), device=idx.device)
        return out.scatter_(-1, idx + offsets, 1)

    def _indices(self, value: torch.Tensor) -> torch.Tensor:
        return torch.stack([p.argmax(-1) for p in self._segments(value)], -1)

    def _project(self, value: torch.Tensor) -> torch.Tensor:
        scores = value.to(torch.float32)
        if self.mask is not None:
            scores = scores.masked_fill(~self.mask, float("-inf"))
        return self._from_indices(self._indices(scores))

    def encode(self, value: Any, *, ignore_device: bool = False) -> torch.Tensor:
        """One-hot encodes indices of shape ``(..., len(nvec))``."""
        device = None if ignore_device else self.device
        idx = torch.as_tensor(_numpy_ready(value), device=device).long()
        nvec = torch.as_tensor(self.nvec, device=idx.device)
        if idx.ndim == 0 or idx.shape[-1] != len(self.nvec):
            raise ValueError(
                f"{type(self).__name__}.encode expects indices of shape (..., {len(self.nvec)}), "
                f"got shape {tuple(idx.shape)}"
            )
        if bool(((idx < 0) | (idx >= nvec)).any()):
            raise ValueError(
                f"{type(self).__name__}.encode expects indices below nvec={self.nvec}, got "
                f"{idx.tolist() if idx.numel() <= 8 else 'larger values'}"
            )
        return self._from_indices(idx)

    def cardinality(self) -> int:
        """``prod(nvec)``, the number of combinations (masks are ignored, as in TorchRL)."""
        return math.prod(self.nvec)

    def enumerate(self, use_mask: bool | None = None) -> torch.Tensor:
        """Every combination, stacked along a new first dim: ``(prod(nvec), *spec.shape)``.

        Args:
            use_mask: accepted for TorchRL compatibility; a mask is not applied.
        """
        combos = _combinations(self.nvec, self.device)
        values = self._from_indices(combos)
        count = values.shape[0]
        return values.reshape(count, *[1] * (self.ndim - 1), self.n).expand(count, *self.shape)

    def to_one_hot(self, value: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """Identity: the values are already one-hot (``safe=True`` checks them first)."""
        if safe:
            self.assert_is_in(value)
        return value

    def to_one_hot_spec(self) -> MultiOneHot:
        """The spec itself (already one-hot)."""
        return self

    def to_numpy(self, value: torch.Tensor, safe: bool | None = None) -> np.ndarray:
        """The index of each variable, shape ``(..., len(nvec))``."""
        if safe:
            self.assert_is_in(value)
        return self._indices(value.detach().to(torch.uint8)).cpu().numpy()

    def to_categorical(self, value: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """The index of each variable (``torch.int64``), shape ``(..., len(nvec))``."""
        if safe:
            self.assert_is_in(value)
        return self._indices(value.to(torch.uint8))

    def to_categorical_spec(self) -> MultiCategorical:
        """The :class:`MultiCategorical` spec of the same values (the mask carries over)."""
        return MultiCategorical(
            self.nvec,
            shape=(*self.shape[:-1], len(self.nvec)),
            device=self.device,
            mask=self.mask,
        )

    def _repr_fields(self) -> list[str]:
        fields = [f"nvec={self.nvec}"]
        if self.mask is not None:
            fields.append(f"mask=Tensor(shape={tuple(self.mask.shape)})")
        return fields


class MultiCategorical(_MaskedDiscrete):
    """Several integer indices, entry ``i`` in ``{0, ..., nvec[i] - 1}``.

    Args:
        nvec: the number of values of each entry (a list or a tensor; its shape gives the
            spec's trailing dims).
        shape: the spec's shape, ending with ``nvec``'s shape (default ``nvec``'s shape).
        device: where values live.
        dtype: the values' dtype (``torch.int64`` by default).
        mask: optional boolean tensor of the allowed values, broadcastable to
            ``(*batch, sum(nvec))`` (one-dimensional ``nvec`` only).
        remove_singleton: for a spec of shape ``(1,)`` (one entry, no batch), ``rand``
            drops that dim (a value of shape ``(*shape,)``) and ``is_in``/``project``
            accept values without it, as TorchRL (default ``True``).

    Examples:
        >>> import torch
        >>> from rl.core import MultiCategorical
        >>> spec = MultiCategorical([2, 3])
        >>> spec
        MultiCategorical(shape=torch.Size([2]), nvec=[2, 3], device=cpu, dtype=torch.int64)
        >>> spec.is_in(torch.tensor([1, 2])), spec.is_in(torch.tensor([2, 0]))
        (True, False)
        >>> spec.project(torch.tensor([5, -1]))
        tensor([1, 0])
    """

    _elementwise = ("nvec", "mask")
    _eq_attrs = ()

    def __init__(
        self,
        nvec: Sequence[int] | torch.Tensor,
        shape: Sequence[int] | torch.Size | int | None = None,
        device: DEVICE_TYPING | None = None,
        dtype: torch.dtype | str | None = torch.int64,
        mask: torch.Tensor | None = None,
        remove_singleton: bool = True,
    ):
        self.device = _to_device(device)
        nvec_t = torch.as_tensor(nvec, dtype=torch.int64, device=self.device)
        if nvec_t.ndim == 0:
            nvec_t = nvec_t.reshape(1)
        self._nvec_list = _check_nvec(nvec_t, type(self).__name__)
        shape = nvec_t.shape if shape is None else _to_shape(shape)
        k = nvec_t.ndim
        if len(shape) < k or shape[len(shape) - k :] != nvec_t.shape:
            raise ValueError(
                f"{type(self).__name__} shape must end with nvec's shape {tuple(nvec_t.shape)}, "
                f"got {tuple(shape)}"
            )
        self._nfeat = k
        self.shape = shape
        self.dtype = _to_dtype(dtype, torch.int64)
        self.nvec = nvec_t.expand(_concrete(shape))
        self.n = sum(self._nvec_list)
        self.remove_singleton = remove_singleton
        self.mask = None
        if mask is not None:
            self.update_mask(mask)

    @property
    def _mask_shape(self) -> tuple[int, ...]:
        if self._nfeat != 1:
            raise ValueError(
                f"{type(self).__name__} masks need a one-dimensional nvec, got nvec of shape "
                f"{tuple(self.shape[-self._nfeat :])}"
            )
        return (*_concrete(self.shape[:-1]), self.n)

    @property
    def space(self) -> BoxList:  # type: ignore[override]
        return BoxList.from_nvec(self._nvec_list)

    def _mask_segments(self) -> tuple[torch.Tensor, ...]:
        return self.mask.split(self._nvec_list, dim=-1)

    def _singleton_removed(self, value: torch.Tensor) -> bool:
        """Whether ``value`` lacks the single entry dim that ``remove_singleton`` drops."""
        return (
            self.remove_singleton
            and self.shape == (1,)
            and (value.ndim == 0 or value.shape[-1] != 1)
        )

    def rand(self, shape: Sequence[int] | torch.Size | None = ()) -> torch.Tensor:
        if shape is None:
            shape = ()
        full = (*shape, *_concrete(self.shape))
        if self.mask is None:
            r = torch.rand(full, device=self.device, dtype=torch.float64)
            out = (r * self.nvec).floor_().long()
            out = torch.minimum(out, self.nvec - 1).to(self.dtype)
        else:
            parts = [
                _sample_index(self, shape, self.shape[:-1], k, m)
                for k, m in zip(self._nvec_list, self._mask_segments())
            ]
            out = torch.stack(parts, -1).to(self.dtype)
        if self.remove_singleton and self.shape == (1,):
            out = out.squeeze(-1)
        return out

    def _allowed(self, value: torch.Tensor) -> torch.Tensor:
        offsets = torch.as_tensor(np.cumsum([0, *self._nvec_list[:-1]]), device=value.device)
        mask = self.mask.expand(*value.shape[:-1], self.n)
        return mask.gather(-1, value.long() + offsets)

    def _mismatch(self, value: Any) -> str | None:
        if isinstance(value, torch.Tensor) and self._singleton_removed(value):
            value = value.unsqueeze(-1)
        return super()._mismatch(value)

    def _values_mismatch(self, value: torch.Tensor) -> str | None:
        if not bool(((value >= 0) & (value < self.nvec)).all()):
            return f"has values outside [0, nvec) for nvec={self._nvec_list}"
        if self.mask is not None and not bool(self._allowed(value).all()):
            return "has values the mask does not allow"
        return None

    def _project(self, value: torch.Tensor) -> torch.Tensor:
        squeezed = self._singleton_removed(value)
        if squeezed:
            value = value.unsqueeze(-1)
        if value.is_floating_point():
            value = value.round()
        value = torch.minimum(value.long().clamp_min(0), self.nvec - 1)
        if self.mask is not None:
            first = torch.stack([m.to(torch.uint8).argmax(-1) for m in self._mask_segments()], -1)
            value = torch.where(self._allowed(value), value, first)
        value = value.to(self.dtype)
        return value.squeeze(-1) if squeezed else value

    def cardinality(self) -> int:
        """``prod(nvec)``, the number of combinations (masks are ignored, as in TorchRL)."""
        return math.prod(self._nvec_list)

    def enumerate(self, use_mask: bool | None = None) -> torch.Tensor:
        """Every combination, stacked along a new first dim: ``(prod(nvec), *spec.shape)``.

        Args:
            use_mask: accepted for TorchRL compatibility; a mask is not applied.
        """
        feat = self.shape[self._batch_ndim :]
        values = _combinations(self._nvec_list, self.device).to(self.dtype)
        count = values.shape[0]
        values = values.reshape(count, *[1] * self._batch_ndim, *feat)
        return values.expand(count, *self.shape)

    def index(self, index: torch.Tensor, tensor_to_index: torch.Tensor) -> torch.Tensor:
        """Gathers from ``tensor_to_index`` the entries at indices ``index`` (as TorchRL)."""
        return Categorical.index(self, index, tensor_to_index)  # type: ignore[arg-type]

    def to_categorical(self, value: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """Identity: the values are already indices (``safe=True`` checks them first)."""
        if safe:
            self.assert_is_in(value)
        return value

    def to_categorical_spec(self) -> MultiCategorical:
        """The spec itself (already categorical)."""
        return self

    def to_one_hot(self, value: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """The concatenated one-hot encodings (``torch.bool``), shape ``(..., sum(nvec))``."""
        if safe:
            self.assert_is_in(value)
        if self._singleton_removed(value):
            value = value.unsqueeze(-1)
        return self.to_one_hot_spec()._from_indices(value.long())

    def to_one_hot_spec(self) -> MultiOneHot:
        """The :class:`MultiOneHot` spec of the same values (one-dimensional ``nvec`` only)."""
        self._mask_shape  # noqa: B018 - raises for a multi-dimensional nvec
        return MultiOneHot(
            self._nvec_list,
            shape=(*self.shape[:-1], self.n),
            device=self.device,
            mask=self.mask,
        )

    def __eq__(self, other: object) -> bool:
        return super().__eq__(other) and self._nvec_list == other._nvec_list  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]

    def _repr_fields(self) -> list[str]:
        fields = [f"nvec={self._nvec_list}"]
        if self.mask is not None:
            fields.append(f"mask=Tensor(shape={tuple(self.mask.shape)})")
        return fields
