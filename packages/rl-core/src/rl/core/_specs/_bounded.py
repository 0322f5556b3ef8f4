"""Continuous (and integer-valued) box specs: :class:`Bounded` and :class:`Unbounded`."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch

from ._base import (
    _DEFAULT_SHAPE,
    DEVICE_TYPING,
    TensorSpec,
    _fmt_tensor,
    _numpy_ready,
    _to_device,
    _to_dtype,
    _to_shape,
)
from ._dynamic import _concrete
from ._spaces import ContinuousBox

__all__ = ["Bounded", "Unbounded"]


def _domain(dtype: torch.dtype) -> str:
    return "continuous" if dtype.is_floating_point or dtype.is_complex else "discrete"


def _check_domain(domain: str, cls: str) -> str:
    if domain not in ("continuous", "discrete"):
        raise ValueError(f"{cls} domain must be 'continuous' or 'discrete', got {domain!r}")
    return domain


def _as_bound(value: Any, name: str, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if value is None:
        raise TypeError(f"Bounded needs {name}, got None")
    return torch.as_tensor(_numpy_ready(value), dtype=dtype, device=device)


def _checked_bounds(
    low: torch.Tensor, high: torch.Tensor, shape: torch.Size
) -> tuple[torch.Tensor, torch.Tensor]:
    """``low`` and ``high`` expanded to ``shape`` (copies), after checking they make a box.

    Raises:
        ValueError: if they do not broadcast to ``shape``, hold NaN, or ``low > high``.
    """
    tshape = _concrete(shape)
    for name, t in (("low", low), ("high", high)):
        try:
            ok = torch.broadcast_shapes(t.shape, tshape) == tshape
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(
                f"Bounded {name} of shape {tuple(t.shape)} does not broadcast to the spec "
                f"shape {tuple(shape)}"
            )
    low = low.expand(tshape).clone()
    high = high.expand(tshape).clone()
    if low.is_floating_point() and bool((low.isnan() | high.isnan()).any()):
        # NaN compares false both ways: the box would contain nothing and rand NaN
        raise ValueError(
            f"Bounded expects low and high without NaN (numbers or +-inf), got "
            f"low={_fmt_tensor(low)} and high={_fmt_tensor(high)}"
        )
    if bool((low > high).any()):
        raise ValueError(
            f"Bounded expects low <= high everywhere, got low={_fmt_tensor(low)} and "
            f"high={_fmt_tensor(high)}"
        )
    return low, high


class Bounded(TensorSpec):
    """A tensor whose values lie in the box ``[low, high]`` (inclusive).

    Args:
        low: lower bound, a number or a tensor broadcastable to ``shape``.
        high: upper bound, a number or a tensor broadcastable to ``shape``.
        shape: the spec's shape; by default the broadcast shape of ``low`` and ``high``.
        device: where values live (default: ``low``'s device if a tensor, else the default).
        dtype: the values' dtype (by default ``torch.get_default_dtype()``, float32 unless
            changed, as TorchRL; an integer dtype makes a
            discrete box whose ``rand`` draws integers in ``[low, high]``). A string such as
            ``"float64"`` is accepted.
        minimum, maximum: deprecated names of ``low`` and ``high``.
        domain: ``"continuous"`` or ``"discrete"``, overriding the label the dtype gives
            (``spec.domain``); as in TorchRL, values still follow the dtype.

    ``low`` and ``high`` are stored expanded to ``shape`` (``spec.low``, ``spec.high``,
    also ``spec.space.low``/``spec.space.high``).

    Raises:
        ValueError: if ``low > high`` somewhere, ``low`` or ``high`` holds NaN, or
            ``low``/``high`` do not broadcast to ``shape``.

    Examples:
        >>> import torch
        >>> from rl.core import Bounded
        >>> spec = Bounded(low=-2.0, high=2.0, shape=(1,))
        >>> spec
        Bounded(shape=torch.Size([1]), low=-2.0, high=2.0, device=cpu, dtype=torch.float32)
        >>> spec.rand((5,)).shape
        torch.Size([5, 1])
        >>> spec.is_in(torch.tensor([3.0]))
        False
        >>> spec.project(torch.tensor([3.0]))
        tensor([2.])
        >>> Bounded(0, 9, shape=(2,), dtype=torch.int64).rand().dtype
        torch.int64
    """

    _elementwise = ("low", "high")
    _value_tensors = ("low", "high")

    def __init__(
        self,
        low: float | torch.Tensor | None = None,
        high: float | torch.Tensor | None = None,
        shape: Sequence[int] | torch.Size | int | None = None,
        device: DEVICE_TYPING | None = None,
        dtype: torch.dtype | str | None = None,
        *,
        minimum: float | torch.Tensor | None = None,
        maximum: float | torch.Tensor | None = None,
        domain: str | None = None,
    ):
        if minimum is not None or maximum is not None:
            warnings.warn(
                "Bounded(minimum=..., maximum=...) is deprecated, use low=... and high=...",
                DeprecationWarning,
                stacklevel=2,
            )
            if minimum is not None:
                if low is not None:
                    raise TypeError("Bounded got both low and its deprecated name minimum")
                low = minimum
            if maximum is not None:
                if high is not None:
                    raise TypeError("Bounded got both high and its deprecated name maximum")
                high = maximum
        dtype = _to_dtype(dtype, torch.get_default_dtype())
        if device is None and isinstance(low, torch.Tensor):
            device = low.device
        device = _to_device(device)
        low_t = _as_bound(low, "low", dtype, device)
        high_t = _as_bound(high, "high", dtype, device)
        if shape is None:
            try:
                shape = torch.broadcast_shapes(low_t.shape, high_t.shape)
            except RuntimeError:
                raise ValueError(
                    f"Bounded low of shape {tuple(low_t.shape)} and high of shape "
                    f"{tuple(high_t.shape)} do not broadcast together"
                ) from None
        else:
            shape = _to_shape(shape)
        self.shape = shape
        self.dtype = dtype
        self.device = device
        self.low, self.high = _checked_bounds(low_t, high_t, shape)
        self._on_dtype_change()
        if domain is not None:
            self.domain = _check_domain(domain, "Bounded")

    def _on_dtype_change(self) -> None:
        self.domain = _domain(self.dtype)
        self._float = self.domain == "continuous"
        self._finite = bool(torch.isfinite(self.low).all() and torch.isfinite(self.high).all())

    @property
    def space(self) -> ContinuousBox:
        """The box ``[low, high]`` (its tensors are the spec's own: in-place edits reach it).

        Setting it (as TorchRL allows) replaces ``low`` and ``high``, checked and expanded
        to ``spec.shape`` as in the constructor.
        """
        return ContinuousBox(self.low, self.high)

    @space.setter
    def space(self, box: ContinuousBox) -> None:
        if not isinstance(box, ContinuousBox):
            raise TypeError(
                f"Bounded.space takes a ContinuousBox (low and high), got {type(box).__name__}"
            )
        low = torch.as_tensor(box.low, dtype=self.dtype, device=self.device)
        high = torch.as_tensor(box.high, dtype=self.dtype, device=self.device)
        self.low, self.high = _checked_bounds(low, high, self.shape)
        self._on_dtype_change()

    def rand(self, shape: Sequence[int] | torch.Size | None = ()) -> torch.Tensor:
        if shape is None:
            shape = ()
        full = (*shape, *_concrete(self.shape))
        low, high = self.low, self.high
        if self._float:
            r = torch.rand(full, dtype=self.dtype, device=self.device)
            if self._finite:
                return r.mul_(high - low).add_(low)
            return self._rand_infinite(r)
        if self.dtype == torch.bool:
            # clamp has no bool kernel; for bools low <= high makes (r | low) & high the clamp
            bits = torch.randint(0, 2, full, device=self.device, dtype=torch.bool)
            return bits.logical_or_(low).logical_and_(high)
        r = torch.rand(full, dtype=torch.float64, device=self.device)
        span = high.double() - low.double() + 1
        out = (r * span).floor_().add_(low.double())
        return torch.minimum(out.to(self.dtype), high)

    def _rand_infinite(self, uniform: torch.Tensor) -> torch.Tensor:
        low, high = self.low, self.high
        lf, hf = torch.isfinite(low), torch.isfinite(high)
        gauss = torch.randn_like(uniform).abs_()
        box = uniform * (high - low).nan_to_num(0.0, 0.0, 0.0) + low.nan_to_num(0.0, 0.0, 0.0)
        out = torch.where(lf & hf, box, torch.randn_like(uniform))
        out = torch.where(lf & ~hf, low + gauss, out)
        return torch.where(~lf & hf, high - gauss, out)

    def _bounds_on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """``(low, high)`` on ``device``: as TorchRL, a value on another device than the
        spec's is checked and projected there (the bounds copied to it)."""
        if self.low.device == device:
            return self.low, self.high
        return self.low.to(device), self.high.to(device)

    def _values_mismatch(self, value: torch.Tensor) -> str | None:
        low, high = self._bounds_on(value.device)
        if bool(((value >= low) & (value <= high)).all()):
            return None
        return f"has values outside [low, high] (min {value.min().item()!r}, max {value.max().item()!r})"

    def _project(self, value: torch.Tensor) -> torch.Tensor:
        if value.dtype != self.dtype:
            if not self._float and value.is_floating_point():
                value = value.round()
            value = value.to(self.dtype)
        low, high = self.low, self.high
        # as TorchRL, the bounds follow a value on another device (is_cpu first: the
        # common case without building two device objects per env step)
        if not (value.is_cpu and low.is_cpu) and value.device != low.device:
            low, high = low.to(value.device), high.to(value.device)
        return torch.clamp(value, low, high)

    def cardinality(self) -> float:
        """``inf``, as in TorchRL (a box is not enumerated, even with an integer dtype)."""
        return float("inf")

    def _spans_dtype(self) -> bool:
        """Whether the box is every value of the dtype (``+-inf`` or the dtype's limits)."""
        if self.dtype.is_complex:
            return False
        if self.dtype == torch.bool:
            limits = [(False, True)]
        elif self.dtype.is_floating_point:
            info = torch.finfo(self.dtype)
            limits = [(float("-inf"), float("inf")), (info.min, info.max)]
        else:
            info = torch.iinfo(self.dtype)
            limits = [(info.min, info.max)]
        return any(
            bool((self.low == lo).all()) and bool((self.high == hi).all()) for lo, hi in limits
        )

    def __eq__(self, other: object) -> bool:
        """Equal specs; a box spanning its whole dtype also equals that :class:`Unbounded`.

        TorchRL counts an ``Unbounded`` and a ``Bounded`` at the dtype's limits as the same
        spec; here the equality holds both ways.
        """
        if isinstance(other, Unbounded):
            return (
                self.shape == other.shape
                and self.dtype == other.dtype
                and self.device == other.device
                and self._spans_dtype()
            )
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def _repr_fields(self) -> list[str]:
        return [f"low={_fmt_tensor(self.low)}", f"high={_fmt_tensor(self.high)}"]


class Unbounded(TensorSpec):
    """A tensor of a given shape and dtype with any value.

    Args:
        shape: the spec's shape (default ``(1,)``, as TorchRL: one value, like a reward).
        device: where values live.
        dtype: the values' dtype (by default ``torch.get_default_dtype()``, float32 unless
            changed, as TorchRL; strings such as ``"int64"`` are accepted).
        domain: ``"continuous"`` or ``"discrete"``, overriding the label the dtype gives
            (``spec.domain``); values still follow the dtype.

    ``rand`` draws standard normal values for floating dtypes and integers in ``[-100, 100)``
    (``[0, 100)`` for unsigned, ``{0, 1}`` for bool) otherwise.

    Examples:
        >>> import torch
        >>> from rl.core import Unbounded
        >>> spec = Unbounded(shape=(3,))
        >>> spec
        Unbounded(shape=torch.Size([3]), device=cpu, dtype=torch.float32)
        >>> spec.zero((2,))
        tensor([[0., 0., 0.],
                [0., 0., 0.]])
        >>> spec.is_in(torch.randn(4, 3)), spec.is_in(torch.randn(4, 2))
        (True, False)
        >>> spec.encode([1, 2, 3])
        tensor([1., 2., 3.])
    """

    def __init__(
        self,
        shape: Sequence[int] | torch.Size | int | None = _DEFAULT_SHAPE,
        device: DEVICE_TYPING | None = None,
        dtype: torch.dtype | str | None = None,
        domain: str | None = None,
    ):
        self.shape = _to_shape(shape)
        self.device = _to_device(device)
        self.dtype = _to_dtype(dtype, torch.get_default_dtype())
        self._on_dtype_change()
        if domain is not None:
            self.domain = _check_domain(domain, "Unbounded")

    def _on_dtype_change(self) -> None:
        self.domain = _domain(self.dtype)
        self._float = self.domain == "continuous"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Bounded):
            return other == self  # equal to a box spanning the whole dtype
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def _limits(self) -> tuple[float, float]:
        if self.dtype.is_floating_point:
            return float("-inf"), float("inf")
        if self.dtype == torch.bool:
            return False, True
        if self.dtype.is_complex:
            raise AttributeError("a complex Unbounded spec has no low/high")
        info = torch.iinfo(self.dtype)
        return info.min, info.max

    @property
    def low(self) -> torch.Tensor:
        return torch.full(
            _concrete(self.shape), self._limits()[0], dtype=self.dtype, device=self.device
        )

    @property
    def high(self) -> torch.Tensor:
        return torch.full(
            _concrete(self.shape), self._limits()[1], dtype=self.dtype, device=self.device
        )

    @property
    def space(self) -> ContinuousBox:
        return ContinuousBox(self.low, self.high)

    def rand(self, shape: Sequence[int] | torch.Size | None = ()) -> torch.Tensor:
        if shape is None:
            shape = ()
        full = (*shape, *_concrete(self.shape))
        if self._float:
            return torch.randn(full, dtype=self.dtype, device=self.device)
        if self.dtype == torch.bool:
            return torch.randint(0, 2, full, dtype=torch.bool, device=self.device)
        low = 0 if self.dtype == torch.uint8 else -100
        return torch.randint(low, 100, full, dtype=self.dtype, device=self.device)
