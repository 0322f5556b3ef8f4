"""Shape and value transforms of observations: clip, flatten, unsqueeze, squeeze."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rl.core import Bounded

from ._base import Transform
from ._spec_utils import NestedKey, spec_with

__all__ = ["ClipTransform", "FlattenObservation", "UnsqueezeTransform", "SqueezeTransform"]


class ClipTransform(Transform):
    """Clips entries to ``[low, high]`` (observations forward, actions with ``inv``).

    Args:
        in_keys / out_keys: forward keys.
        in_keys_inv / out_keys_inv: inverse keys (clipped before reaching the env).
        low: lower bound (``None``: none).
        high: upper bound (``None``: none).

    Raises:
        ValueError: both bounds are ``None`` or ``low >= high``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> t = ClipTransform(in_keys=["observation"], low=-1.0, high=1.0)
        >>> t(TensorDict({"observation": torch.tensor([-3.0, 0.5, 2.0])}, []))["observation"]
        tensor([-1.0000,  0.5000,  1.0000])
    """

    _elementwise = True

    invertible = True

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        in_keys_inv: Sequence[NestedKey] | None = None,
        out_keys_inv: Sequence[NestedKey] | None = None,
        low: float | None = None,
        high: float | None = None,
    ):
        if low is None and high is None:
            raise ValueError("ClipTransform needs low or high, got neither")
        if low is not None and high is not None and not low < high:
            raise ValueError(f"ClipTransform needs low < high, got low={low} and high={high}")
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        self.low = low
        self.high = high

    def _apply_transform(self, obs):
        return obs.clamp(self.low, self.high)

    def _inv_apply_transform(self, state):
        return state.clamp(self.low, self.high)

    def _clipped_spec(self, spec):
        if isinstance(spec, Bounded):
            low = spec.low if self.low is None else spec.low.clamp_min(self.low)
            high = spec.high if self.high is None else spec.high.clamp_max(self.high)
            return spec_with(spec, low=low, high=high)
        if self.low is not None and self.high is not None:
            return spec_with(spec, low=self.low, high=self.high)
        return spec_with(spec)

    def _leaf_spec(self, spec, in_key):
        return self._clipped_spec(spec)

    def _leaf_spec_inv(self, spec, in_key):
        return self._clipped_spec(spec)

    def _repr_args(self) -> str:
        return f"low={self.low}, high={self.high}, {super()._repr_args()}"


def _check_negative(dim: int, who: str, allow_positive_dim: bool) -> None:
    if not isinstance(dim, int):
        raise TypeError(f"{who} dim must be an int, got {dim!r}")
    if dim >= 0 and not allow_positive_dim:
        raise ValueError(
            f"{who} dims count from the end of the feature shape: got dim={dim}, expected a "
            "negative int (or pass allow_positive_dim=True)"
        )


class FlattenObservation(Transform):
    """Flattens dims ``first_dim..last_dim`` (negative, counted from the end) of entries.

    Args:
        first_dim: first dim to flatten (negative).
        last_dim: last dim to flatten (negative, ``>= first_dim``).
        in_keys: keys (default ``["pixels"]``).
        out_keys: where to write (default ``in_keys``).
        allow_positive_dim: accept non-negative dims (counted from the start of the full
            tensor, batch dims included).

    Raises:
        ValueError: positive dims without ``allow_positive_dim``, or ``first_dim > last_dim``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> t = FlattenObservation(-3, -1, in_keys=["pixels"])
        >>> t(TensorDict({"pixels": torch.zeros(4, 3, 8, 8)}, [4]))["pixels"].shape
        torch.Size([4, 192])
    """

    _elementwise = True

    def __init__(
        self,
        first_dim: int,
        last_dim: int,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        allow_positive_dim: bool = False,
    ):
        _check_negative(first_dim, "FlattenObservation", allow_positive_dim)
        _check_negative(last_dim, "FlattenObservation", allow_positive_dim)
        if first_dim > last_dim and (first_dim < 0) == (last_dim < 0):
            raise ValueError(
                f"FlattenObservation needs first_dim <= last_dim, got {first_dim} and {last_dim}"
            )
        super().__init__(["pixels"] if in_keys is None else in_keys, out_keys)
        self.first_dim = first_dim
        self.last_dim = last_dim

    def _apply_transform(self, obs):
        return obs.flatten(self.first_dim, self.last_dim)

    def _leaf_spec(self, spec, in_key):
        shape = torch.zeros(spec.shape, device="meta").flatten(self.first_dim, self.last_dim).shape
        if isinstance(spec, Bounded):
            return spec_with(
                spec,
                shape=shape,
                low=spec.low.flatten(self.first_dim, self.last_dim),
                high=spec.high.flatten(self.first_dim, self.last_dim),
            )
        return spec_with(spec, shape=shape)

    def _repr_args(self) -> str:
        return f"first_dim={self.first_dim}, last_dim={self.last_dim}, keys={self.in_keys}"


class UnsqueezeTransform(Transform):
    """Inserts a size-1 dim at ``dim`` (negative: counted from the end); ``inv`` removes it.

    Args:
        dim: where to insert (negative).
        in_keys / out_keys: forward keys.
        in_keys_inv / out_keys_inv: inverse keys (squeezed before reaching the env).
        allow_positive_dim: accept a non-negative ``dim`` (full-tensor index).

    Raises:
        TypeError: ``dim`` is not given.
        ValueError: non-negative ``dim`` without ``allow_positive_dim``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> t = UnsqueezeTransform(-1, in_keys=["x"])
        >>> t(TensorDict({"x": torch.zeros(3)}, []))["x"].shape
        torch.Size([3, 1])
    """

    _elementwise = True

    invertible = True

    def __init__(
        self,
        dim: int | None = None,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        in_keys_inv: Sequence[NestedKey] | None = None,
        out_keys_inv: Sequence[NestedKey] | None = None,
        allow_positive_dim: bool = False,
    ):
        if dim is None:
            # TorchRL 0.14 also defaults ``dim`` to None and requires it
            raise TypeError(f"dim must be passed to {type(self).__name__} constructor")
        _check_negative(dim, type(self).__name__, allow_positive_dim)
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        self.dim = dim

    def _apply_transform(self, obs):
        return obs.unsqueeze(self.dim)

    def _inv_apply_transform(self, state):
        return state.squeeze(self.dim)

    def _unsqueezed(self, spec):
        like = torch.zeros(spec.shape, device="meta").unsqueeze(self.dim)
        if isinstance(spec, Bounded):
            return spec_with(
                spec,
                shape=like.shape,
                low=spec.low.expand(spec.shape).unsqueeze(self.dim),
                high=spec.high.expand(spec.shape).unsqueeze(self.dim),
            )
        return _reshaped(spec, like.shape)

    def _squeezed(self, spec, key):
        if spec.shape[self.dim] != 1:
            raise ValueError(
                f"{type(self).__name__} cannot squeeze dim {self.dim} of {key!r}: spec shape "
                f"{tuple(spec.shape)} has size {spec.shape[self.dim]} there, expected 1"
            )
        like = torch.zeros(spec.shape, device="meta").squeeze(self.dim)
        if isinstance(spec, Bounded):
            return spec_with(
                spec,
                shape=like.shape,
                low=spec.low.expand(spec.shape).squeeze(self.dim),
                high=spec.high.expand(spec.shape).squeeze(self.dim),
            )
        return _reshaped(spec, like.shape)

    def _leaf_spec(self, spec, in_key):
        return self._unsqueezed(spec)

    def _leaf_spec_inv(self, spec, in_key):
        return self._unsqueezed(spec)

    def _repr_args(self) -> str:
        return f"dim={self.dim}, {super()._repr_args()}"


class SqueezeTransform(UnsqueezeTransform):
    """Removes the size-1 dim at ``dim`` (negative); ``inv`` puts it back.

    Args:
        dim: the dim to remove (negative).
        in_keys / out_keys / in_keys_inv / out_keys_inv: as in :class:`UnsqueezeTransform`.

    Raises:
        TypeError: ``dim`` is not given.
        ValueError: non-negative ``dim``; at spec time, the dim does not have size 1.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> SqueezeTransform(-1, in_keys=["x"])(TensorDict({"x": torch.zeros(3, 1)}, []))["x"].shape
        torch.Size([3])
    """

    def _apply_transform(self, obs):
        return obs.squeeze(self.dim)

    def _inv_apply_transform(self, state):
        return state.unsqueeze(self.dim)

    def _leaf_spec(self, spec, in_key):
        return self._squeezed(spec, in_key)

    def _leaf_spec_inv(self, spec, in_key):
        return self._squeezed(spec, in_key)


def _reshaped(spec, shape):
    """A leaf spec with a new shape of the same number of elements (discrete kept)."""
    if hasattr(spec, "n") and not isinstance(spec, Bounded):
        try:
            return type(spec)(spec.n, shape=shape, device=spec.device, dtype=spec.dtype)
        except TypeError:
            pass
    return spec_with(spec, shape=shape)
