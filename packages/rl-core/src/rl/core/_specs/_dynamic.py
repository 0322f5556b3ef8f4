"""Dynamic (``-1``) dims of spec shapes: the size of the values they make, shape checks,
indexing, and ``make_neg_dim``.

A ``-1`` dim accepts any size in ``is_in``; the values a spec makes (``rand``, ``zero``)
have size 1 there, as in TorchRL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from ._base import TensorSpec


def _concrete(shape: torch.Size) -> torch.Size:
    """The shape of the tensors a spec makes: a dynamic (``-1``) dim has size 1, as in TorchRL."""
    if -1 not in shape:
        return shape
    return torch.Size(1 if s == -1 else s for s in shape)


def shape_fits(vshape: Sequence[int], shape: Sequence[int]) -> bool:
    """Whether ``vshape`` equals ``shape``, a dynamic (``-1``) dim of ``shape`` fitting any size.

    Args:
        vshape: the shape of a value.
        shape: the shape of a spec (``-1`` for a dynamic dim).

    Examples:
        >>> from rl.core import shape_fits
        >>> shape_fits((3, 7), (3, -1)), shape_fits((3, 7), (3, 4)), shape_fits((7,), (3, -1))
        (True, False, False)
    """
    return len(vshape) == len(shape) and all(s == v or s == -1 for v, s in zip(vshape, shape))


def _no_dynamic(spec: TensorSpec, op: str) -> None:
    if -1 in spec.shape:
        raise ValueError(
            f"cannot {op} {type(spec).__name__} of shape {tuple(spec.shape)}: it has dynamic "
            "(-1) dims, whose number of elements is unknown"
        )


def _dims_taken(item: Any) -> int:
    """How many dims of the indexed tensor one entry of an index tuple consumes."""
    if item is None or isinstance(item, bool):
        return 0  # a new dim
    if isinstance(item, (list, np.ndarray)):
        item = torch.as_tensor(item)
    if isinstance(item, torch.Tensor) and item.dtype == torch.bool:
        return item.ndim  # a mask over that many dims
    return 1  # an int, a slice, an integer index tensor


def _is_whole(item: slice) -> bool:
    return item.start is None and item.stop is None and item.step in (None, 1)


def _check_dynamic_slices(shape: torch.Size, full: tuple, name: str, idx: Any) -> None:
    """Raises ``IndexError`` where a slice other than ``:`` meets a dynamic (``-1``) dim.

    Its extent is unknown, so ``[:1]`` is no more defined than ``[:2]`` (as TorchRL).
    """
    ellipsis_dims = len(shape) - sum(_dims_taken(i) for i in full if i is not Ellipsis)
    dim = 0
    for item in full:
        if item is Ellipsis:
            dim += ellipsis_dims
            continue
        if isinstance(item, slice) and dim < len(shape) and shape[dim] == -1:
            if not _is_whole(item):
                raise IndexError(
                    f"cannot index {name} of shape {tuple(shape)} with {idx!r}: a dynamic (-1) "
                    f"dim can only be taken whole (:) or at an integer, its extent is unknown "
                    f"(got {item} at dim {dim})"
                )
        dim += _dims_taken(item)


def _positive_steps(shape: torch.Size, full: tuple, name: str, idx: Any) -> tuple:
    """``full`` with each slice of negative step (``[10:1:-1]``) made an index tensor.

    torch slices only forward; the positions a backward slice picks, as one index tensor,
    give the same values in the same place when no other advanced index is in ``full``.
    """
    if not any(isinstance(i, slice) and i.step is not None and i.step < 0 for i in full):
        return full
    if any(_is_advanced(i) for i in full):
        raise IndexError(
            f"cannot index {name} of shape {tuple(shape)} with {idx!r}: a slice with a "
            "negative step cannot be combined with index lists or tensors"
        )
    ellipsis_dims = len(shape) - sum(_dims_taken(i) for i in full if i is not Ellipsis)
    out = []
    dim = 0
    for item in full:
        if item is Ellipsis:
            dim += ellipsis_dims
        elif isinstance(item, slice) and item.step is not None and item.step < 0:
            if dim >= len(shape) or shape[dim] == -1:
                raise IndexError(
                    f"cannot index {name} of shape {tuple(shape)} with {idx!r}: a slice with a "
                    f"negative step needs a known size at dim {dim}"
                )
            item = torch.tensor(range(shape[dim])[item], dtype=torch.long)
        dim += 0 if item is Ellipsis else _dims_taken(item)
        out.append(item)
    return tuple(out)


def _is_advanced(item: Any) -> bool:
    return isinstance(item, list | np.ndarray | range | torch.Tensor)


def _indexed_shape(
    shape: torch.Size, full: tuple, device: Any, name: str, bn: int, idx: Any
) -> torch.Size:
    """The shape of ``spec[full]``; dynamic (``-1``) dims kept whole stay ``-1``."""

    def probe(size: int) -> torch.Size:
        sizes = [size if s == -1 else s for s in shape]
        return torch.zeros((), device=device).expand(sizes)[full].shape

    try:
        small = probe(1)
        if -1 not in shape:
            return small
        large = probe(7)
    except IndexError as err:
        raise IndexError(
            f"cannot index {name} of shape {tuple(shape)} with {idx!r} "
            f"({bn} batch dims can be indexed): {err}"
        ) from None
    _check_dynamic_slices(shape, full, name, idx)
    if len(small) != len(large) or any(a != b and (a, b) != (1, 7) for a, b in zip(small, large)):
        raise IndexError(
            f"cannot index {name} of shape {tuple(shape)} with {idx!r}: a dynamic (-1) dim "
            "can only be taken whole (:) or at an integer, its extent is unknown"
        )
    return torch.Size(-1 if a != b else a for a, b in zip(small, large))


def _make_neg_dim(spec: TensorSpec, dim: int, d: int) -> TensorSpec:
    """``spec.make_neg_dim(dim)`` of a leaf spec, in place (``d``: ``dim`` made non-negative)."""
    if d >= spec._batch_ndim:
        raise ValueError(
            f"cannot make dim {dim} of {type(spec).__name__} of shape {tuple(spec.shape)} "
            f"dynamic: it is a feature dim (only the first {spec._batch_ndim} can be)"
        )
    new = spec._copy_with(
        torch.Size(-1 if i == d else s for i, s in enumerate(spec.shape)),
        lambda t: t.narrow(d, 0, 1) if t.shape[d] != 1 else t,
    )
    spec.__dict__.update(new.__dict__)
    return spec
