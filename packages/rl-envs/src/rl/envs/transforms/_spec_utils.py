"""Key normalisation and small spec helpers shared by the transforms."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from tensordict import TensorDict

from rl.core import Bounded, Composite, Unbounded

NestedKey = str | tuple[str, ...]

__all__ = [
    "NestedKey",
    "normalize_key",
    "normalize_keys",
    "batch_ndim",
    "find_spec",
    "spec_with",
    "replace_spec",
    "leaf_keys",
    "tget",
    "tset",
]


def tget(td, key):
    """``td.get(key, None)`` without the public method's overhead (hot paths)."""
    if type(key) is str and type(td) is TensorDict:
        return td._get_str(key, None)
    return td.get(key, None)


def tset(td, key, value) -> None:
    """``td.set(key, value)`` (validated) without the public method's overhead."""
    if type(key) is str and type(td) is TensorDict:
        td._set_str(key, value, inplace=False, validated=False)
    else:
        td.set(key, value)


def _unravel(key) -> list[str] | None:
    """The strings of a key whose parts are strings or keys themselves (``("a", ("b",))``,
    as tensordict's ``unravel_key`` reads it); None when a part is neither."""
    out = []
    for part in key:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, tuple) and part:
            inner = _unravel(part)
            if inner is None:
                return None
            out.extend(inner)
        else:
            return None
    return out


def normalize_key(key) -> NestedKey:
    """``"a"`` stays ``"a"``, ``("a",)`` becomes ``"a"``, ``["a", "b"]`` becomes ``("a", "b")``;
    a part that is itself a key is unravelled: ``("a", (("b",),))`` becomes ``("a", "b")``."""
    if isinstance(key, str):
        return key
    if isinstance(key, (tuple, list)) and key:
        if all(isinstance(k, str) for k in key):
            return key[0] if len(key) == 1 else tuple(key)
        flat = _unravel(key)
        if flat:
            return flat[0] if len(flat) == 1 else tuple(flat)
    raise TypeError(f"a key must be a str or a tuple of str, got {key!r}")


def normalize_keys(keys) -> list[NestedKey]:
    """``None`` -> ``[]``; a single key -> ``[key]``; a list of keys -> list of keys."""
    if keys is None:
        return []
    if isinstance(keys, str) or (
        isinstance(keys, tuple) and keys and all(isinstance(k, str) for k in keys)
    ):
        return [normalize_key(keys)]
    if isinstance(keys, Sequence):
        return [normalize_key(k) for k in keys]
    raise TypeError(f"keys must be a key or a list of keys, got {keys!r}")


def leaf_keys(spec: Composite) -> list[NestedKey]:
    return [normalize_key(k) for k in spec.keys(include_nested=True, leaves_only=True)]


def batch_ndim(spec: Composite) -> int:
    """Number of batch dims of a Composite (its shape)."""
    return len(spec.shape)


def find_spec(output_or_input_spec: Composite, key: NestedKey):
    """Returns ``(sub_name, leaf)`` for the first ``full_*_spec`` holding ``key`` (else None)."""
    for name in output_or_input_spec.keys():
        sub = output_or_input_spec[name]
        if key in sub.keys(include_nested=True):
            return name, sub[key]
    return None


def spec_with(spec, *, shape=None, dtype=None, device=None, low=None, high=None):
    """A copy of a leaf spec with another shape / dtype / bounds (Bounded or Unbounded kept).

    Discrete specs keep their class when only the device changes; otherwise a spec whose
    dtype or shape changes becomes ``Unbounded`` (or ``Bounded`` when bounds are known).
    """
    shape = torch.Size(spec.shape if shape is None else shape)
    dtype = spec.dtype if dtype is None else dtype
    device = spec.device if device is None else device
    if low is None and high is None and isinstance(spec, Bounded):
        low, high = spec.low, spec.high
        if low.shape != shape:
            low = _resize_bound(low, shape, reduce=torch.amin)
            high = _resize_bound(high, shape, reduce=torch.amax)
    if low is not None and high is not None:
        low = torch.as_tensor(low, device=device).to(dtype).expand(shape).clone()
        high = torch.as_tensor(high, device=device).to(dtype).expand(shape).clone()
        return Bounded(low, high, shape=shape, device=device, dtype=dtype)
    if shape == spec.shape and dtype == spec.dtype:
        return spec.clone().to(device) if device is not None else spec.clone()
    return Unbounded(shape=shape, device=device, dtype=dtype)


def _resize_bound(bound: torch.Tensor, shape: torch.Size, reduce) -> torch.Tensor:
    if bound.numel() == 1:
        return bound.reshape(()).expand(shape)
    # bounds that cannot follow a shape change are widened to a scalar envelope
    return reduce(bound).expand(shape)


def replace_spec(composite: Composite, keys: Sequence[NestedKey], fn: Callable) -> Composite:
    """Applies ``fn(leaf_spec, key)`` to every present key of ``composite`` (in place)."""
    present = set(composite.keys(include_nested=True, leaves_only=True))
    for key in keys:
        if key in present:
            composite[key] = fn(composite[key], key)
    return composite
