"""Dtype and device casts."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase

from ._base import Transform
from ._spec_utils import NestedKey, leaf_keys, spec_with

__all__ = ["DTypeCastTransform", "DoubleToFloat", "DeviceCastTransform"]


class DTypeCastTransform(Transform):
    """Casts entries from ``dtype_in`` to ``dtype_out`` (actions back with ``inv``).

    Without any keys, every observation / reward entry of dtype ``dtype_in`` is cast, and
    every action / state entry of the inner env with dtype ``dtype_in`` is exposed as
    ``dtype_out`` (and cast back before reaching the env). On data without specs, all
    leaves of dtype ``dtype_in`` are cast.

    Args:
        dtype_in: the inner dtype.
        dtype_out: the outer dtype.
        in_keys / out_keys: forward keys (observations, rewards).
        in_keys_inv / out_keys_inv: inverse keys (actions, states).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> t = DTypeCastTransform(torch.int64, torch.float32, in_keys=["count"])
        >>> t(TensorDict({"count": torch.tensor([3])}, []))["count"]
        tensor([3.])
    """

    _elementwise = True

    invertible = True

    def __init__(
        self,
        dtype_in: torch.dtype,
        dtype_out: torch.dtype,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        in_keys_inv: Sequence[NestedKey] | None = None,
        out_keys_inv: Sequence[NestedKey] | None = None,
    ):
        for name, dt in (("dtype_in", dtype_in), ("dtype_out", dtype_out)):
            if not isinstance(dt, torch.dtype):
                raise TypeError(f"DTypeCastTransform {name} must be a torch.dtype, got {dt!r}")
        self.dtype_in = dtype_in
        self.dtype_out = dtype_out
        self._auto = in_keys is None and in_keys_inv is None
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)

    def _set_pairs(self, attr: str, keys: list) -> None:
        # set without invalidating the env's spec cache (we are inside its computation)
        self.__dict__[attr] = [(k, k) for k in keys]

    @property
    def has_step(self) -> bool:
        return bool(self._io_pairs)

    @property
    def has_inverse(self) -> bool:
        return bool(self._io_pairs_inv)

    def _apply_transform(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.to(self.dtype_out)

    def _inv_apply_transform(self, state: torch.Tensor) -> torch.Tensor:
        return state.to(self.dtype_in)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._auto and not self._io_pairs:
            for key in list(tensordict.keys(True, True)):
                value = tensordict.get(key)
                if isinstance(value, torch.Tensor) and value.dtype == self.dtype_in:
                    tensordict.set(key, value.to(self.dtype_out))
            return tensordict
        return self._call(tensordict)

    def _leaf_spec(self, spec, in_key):
        return spec_with(spec, dtype=self.dtype_out)

    def _leaf_spec_inv(self, spec, in_key):
        return spec_with(spec, dtype=self.dtype_out)

    def _matching(self, composite) -> list:
        return [k for k in leaf_keys(composite) if composite[k].dtype == self.dtype_in]

    def transform_output_spec(self, output_spec):
        if self._auto:
            keys = self._matching(output_spec["full_observation_spec"])
            keys += self._matching(output_spec["full_reward_spec"])
            self._set_pairs("_io_pairs", keys)
        return super().transform_output_spec(output_spec)

    def transform_input_spec(self, input_spec):
        if self._auto:
            keys = self._matching(input_spec["full_action_spec"])
            if "full_state_spec" in input_spec.keys():
                keys += self._matching(input_spec["full_state_spec"])
            self._set_pairs("_io_pairs_inv", keys)
        return super().transform_input_spec(input_spec)

    def _repr_args(self) -> str:
        keys = self._repr_keys()
        return f"dtype_in={self.dtype_in}, dtype_out={self.dtype_out}{keys}"

    def _repr_keys(self) -> str:
        if self._auto:
            return ""
        return ", " + super()._repr_args()


class DoubleToFloat(DTypeCastTransform):
    """Casts float64 entries to float32 (and float32 actions back to float64 for the env).

    Args:
        in_keys / in_keys_inv: as in :class:`DTypeCastTransform` (default: every float64
            entry found in the specs).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> DoubleToFloat()(TensorDict({"x": torch.zeros(2, dtype=torch.float64)}, []))["x"].dtype
        torch.float32
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        in_keys_inv: Sequence[NestedKey] | None = None,
        out_keys_inv: Sequence[NestedKey] | None = None,
    ):
        super().__init__(torch.float64, torch.float32, in_keys, out_keys, in_keys_inv, out_keys_inv)

    def _repr_args(self) -> str:
        return self._repr_keys().lstrip(", ")


class DeviceCastTransform(Transform):
    """Moves the data (all of it, or the given keys) to ``device``; actions back with ``inv``.

    Args:
        device: the outer device.
        orig_device: the inner env's device (default: found from its specs, else CPU).
        in_keys / out_keys / in_keys_inv / out_keys_inv: restrict the move to these keys.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> DeviceCastTransform("cpu")(TensorDict({"x": torch.zeros(2)}, [])).device
        device(type='cpu')
    """

    invertible = True

    def __init__(
        self,
        device: torch.device | str,
        orig_device: torch.device | str | None = None,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        in_keys_inv: Sequence[NestedKey] | None = None,
        out_keys_inv: Sequence[NestedKey] | None = None,
    ):
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        self.device = torch.device(device)
        self.orig_device = torch.device(orig_device) if orig_device is not None else None
        self._whole = in_keys is None and in_keys_inv is None

    @property
    def has_step(self) -> bool:
        return True

    @property
    def has_inverse(self) -> bool:
        return self._whole or bool(self._io_pairs_inv)

    def _apply_transform(self, obs):
        return obs.to(self.device, non_blocking=True)

    def _inv_apply_transform(self, state):
        return state.to(self.orig_device or torch.device("cpu"), non_blocking=True)

    def _call(self, next_tensordict):
        if self._whole:
            return next_tensordict.to(self.device)
        return super()._call(next_tensordict)

    def _inv_call(self, tensordict):
        if self._whole:
            return tensordict.to(self.orig_device or torch.device("cpu"))
        return super()._inv_call(tensordict)

    def inv(self, tensordict):
        if self._whole:
            return self._inv_call(tensordict)
        return super().inv(tensordict)

    def _leaf_spec(self, spec, in_key):
        return spec.to(self.device)

    def _leaf_spec_inv(self, spec, in_key):
        return spec.to(self.device)

    def transform_output_spec(self, output_spec):
        if self.orig_device is None:
            self.orig_device = output_spec.device
        if self._whole:
            return output_spec.to(self.device)
        return super().transform_output_spec(output_spec)

    def transform_input_spec(self, input_spec):
        if self._whole:
            return input_spec.to(self.device)
        return super().transform_input_spec(input_spec)

    def _repr_args(self) -> str:
        return f"device={self.device}, orig_device={self.orig_device}"
