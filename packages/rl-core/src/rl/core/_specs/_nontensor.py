"""The :class:`NonTensor` spec: entries holding python objects (strings, dicts, ...)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tensordict import NonTensorData, NonTensorStack

from ._base import _DEFAULT_SHAPE, DEVICE_TYPING, TensorSpec, _to_device, _to_shape
from ._dynamic import _concrete, shape_fits

__all__ = ["NonTensor"]


def _same_data(a: Any, b: Any) -> bool:
    """``a == b`` for example data of any type (arrays and tensors compare whole)."""
    if a is b:
        return True
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    try:
        return bool(np.all(a == b)) if isinstance(a, np.ndarray) else bool(a == b)
    except (TypeError, ValueError):  # objects whose == does not give one truth value
        return False


class NonTensor(TensorSpec):
    """Non-tensor data (text, python objects) carried in a TensorDict as ``NonTensorData``.

    Args:
        shape: the batch shape of the data (default ``(1,)``, as TorchRL).
        device: the device of the TensorDict entries.
        dtype: unused (non-tensor data has none), kept for TorchRL compatibility.
        example_data: the value ``rand``/``zero``/``one`` return (wrapped in ``NonTensorData``).
        batched: whether the data is batched (TorchRL's flag, kept as ``spec.batched``);
            exclusive with ``feature_dims``.
        feature_dims: how many trailing dims are features (``spec.feature_dims``; default
            all of them, none when ``batched``). Values are ``NonTensorData`` of the full
            batch size either way, so ``tolist()`` repeats ``example_data`` over every dim.

    Examples:
        >>> from rl.core import Composite, NonTensor
        >>> spec = NonTensor(example_data="hello")
        >>> spec.zero()
        NonTensorData(data=hello, batch_size=torch.Size([1]), device=cpu)
        >>> spec.is_in("any python object")
        True
        >>> Composite(text=NonTensor(shape=(), example_data="hello")).rand()["text"]
        'hello'
    """

    domain = ""

    def __init__(
        self,
        shape: Sequence[int] | torch.Size | int | None = _DEFAULT_SHAPE,
        device: DEVICE_TYPING | None = None,
        dtype: Any = None,
        example_data: Any = None,
        batched: bool | None = None,
        feature_dims: int | None = None,
        **kwargs: Any,
    ):
        if kwargs:
            raise TypeError(f"NonTensor got unexpected arguments {sorted(kwargs)}")
        if batched is not None and feature_dims is not None:
            raise ValueError(
                f"NonTensor takes batched or feature_dims, not both (got batched={batched}, "
                f"feature_dims={feature_dims})"
            )
        self.shape = _to_shape(shape)
        self.device = _to_device(device)
        self.dtype = None
        self.example_data = example_data
        self.batched = bool(batched)
        if feature_dims is None:
            feature_dims = 0 if batched else len(self.shape)
        self.feature_dims = feature_dims

    space = None  # non-tensor data has no box

    def _data(self, shape: Sequence[int]) -> NonTensorData:
        return NonTensorData(
            data=self.example_data, batch_size=(*shape, *_concrete(self.shape)), device=self.device
        )

    def rand(self, shape: Sequence[int] | torch.Size | None = ()) -> NonTensorData:
        if shape is None:
            shape = ()
        return self._data(shape)

    def zero(self, shape: Sequence[int] | torch.Size | None = ()) -> NonTensorData:
        if shape is None:
            shape = ()
        return self._data(shape)

    def one(self, shape: Sequence[int] | torch.Size | None = ()) -> NonTensorData:
        if shape is None:
            shape = ()
        return self._data(shape)

    def _mismatch(self, value: Any) -> str | None:
        if isinstance(value, NonTensorData | NonTensorStack):
            vshape, n = value.batch_size, len(self.shape)
            if len(vshape) < n or not shape_fits(vshape[len(vshape) - n :], self.shape):
                return (
                    f"has batch size {tuple(vshape)}, expected (*batch, "
                    f"{', '.join(map(str, self.shape))})"
                )
            return None
        if isinstance(value, torch.Tensor):
            return f"is a tensor of shape {tuple(value.shape)}, expected non-tensor data"
        return None

    def _project(self, value: Any) -> Any:
        return value

    def encode(self, value: Any, *, ignore_device: bool = False) -> NonTensorData:
        """Wraps ``value`` in ``NonTensorData`` of the spec's batch shape."""
        if isinstance(value, NonTensorData | NonTensorStack):
            return value
        return NonTensorData(
            data=value,
            batch_size=_concrete(self.shape),
            device=None if ignore_device else self.device,
        )

    def to_numpy(self, value: Any, safe: bool | None = None) -> Any:
        """The python data (``tolist()`` of ``NonTensorData``/``NonTensorStack``)."""
        if safe:
            self.assert_is_in(value)
        if isinstance(value, NonTensorData | NonTensorStack):
            return value.tolist()
        return value

    def to(self, dest: DEVICE_TYPING | torch.dtype) -> NonTensor:
        if isinstance(dest, torch.dtype):
            return self
        return super().to(dest)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, NonTensor)
            and self.shape == other.shape
            and self.device == other.device
            and _same_data(self.example_data, other.example_data)
        )

    __hash__ = None  # type: ignore[assignment]

    def _repr_fields(self) -> list[str]:
        return [f"example_data={self.example_data!r}"]
