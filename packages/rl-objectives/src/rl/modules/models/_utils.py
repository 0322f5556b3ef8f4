"""Small layers and construction helpers shared by the networks."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import nn

__all__ = ["SquashDims", "Squeeze2dLayer", "SqueezeLayer"]


class SqueezeLayer(nn.Module):
    """Squeezes the given singleton dimensions (all negative) of its input.

    Args:
        dims (sequence of int, optional): dimensions to squeeze, each ``< 0``.
            Defaults to ``(-1,)``.

    Raises:
        ValueError: if a dimension is not negative.
        RuntimeError: in ``forward``, if a squeezed dimension is not of size 1.
    """

    def __init__(self, dims: Sequence[int] = (-1,)) -> None:
        super().__init__()
        for dim in dims:
            if dim >= 0:
                raise ValueError(f"SqueezeLayer dims must all be < 0, got {tuple(dims)}")
        self.dims = tuple(dims)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        for dim in self.dims:
            if input.shape[dim] != 1:
                raise RuntimeError(
                    f"SqueezeLayer cannot squeeze dims {self.dims} of an input of shape "
                    f"{tuple(input.shape)}"
                )
            input = input.squeeze(dim)
        return input


class Squeeze2dLayer(SqueezeLayer):
    """Squeezes the two last (singleton) dimensions, as after a global pooling."""

    def __init__(self) -> None:
        super().__init__((-2, -1))


class SquashDims(nn.Module):
    """Flattens the ``ndims_in`` last dimensions of its input.

    Args:
        ndims_in (int, optional): number of trailing dimensions to flatten. Defaults to
            ``3`` (channels, height, width).

    Examples:
        >>> import torch
        >>> from rl.modules import SquashDims
        >>> SquashDims()(torch.zeros(2, 4, 3, 3)).shape
        torch.Size([2, 36])
    """

    def __init__(self, ndims_in: int = 3) -> None:
        super().__init__()
        self.ndims_in = ndims_in

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        return value.flatten(-self.ndims_in, -1)


class _ExecutableLayer(nn.Module):
    """Wraps a callable that is not a module (``torch.relu``) so it sits in ``nn.Sequential``."""

    def __init__(self, func: Callable) -> None:
        super().__init__()
        self.func = func

    def forward(self, *args, **kwargs):
        return self.func(*args, **kwargs)


def check_layer_factory(arg_name: str, factory, owner: str) -> None:
    """Raises a ``TypeError`` unless ``factory`` is a class or callable building a layer."""
    if factory is None or isinstance(factory, str) or not callable(factory):
        raise TypeError(
            f"{owner} {arg_name} must be an nn.Module class or a callable that builds "
            f"one (e.g. nn.ReLU), got {factory!r} of type {type(factory).__name__}"
        )


def create_on_device(
    module_class: type[nn.Module] | Callable,
    device: torch.device | str | None,
    *args,
    **kwargs,
) -> nn.Module:
    """Builds ``module_class(*args, **kwargs)`` on ``device``.

    ``device`` is passed to the constructor when it takes one, otherwise the module is
    moved. A callable that returns something else than a module (``torch.relu`` called
    with no argument fails; a factory may return a function) is wrapped so that it can
    sit in an ``nn.Sequential``.
    """
    try:
        params = inspect.signature(module_class).parameters
        takes_device = "device" in params
    except (TypeError, ValueError):
        takes_device = False
    if takes_device and device is not None:
        out = module_class(*args, device=device, **kwargs)
    else:
        out = module_class(*args, **kwargs)
    if not isinstance(out, nn.Module):
        if not callable(out):
            raise TypeError(
                f"{module_class!r} built {out!r}, which is neither a module nor callable"
            )
        out = _ExecutableLayer(out)
    if device is not None and not takes_device:
        out = out.to(device)
    return out


def iter_kwargs(
    kwargs: dict | Sequence[dict] | None, n: int, arg_name: str, owner: str
) -> Iterator[dict]:
    """Yields ``n`` copies of ``kwargs``, or its ``n`` items when it is a list of dicts."""
    if kwargs is None:
        kwargs = {}
    if isinstance(kwargs, dict):
        for _ in range(n):
            yield dict(kwargs)
        return
    kwargs = list(kwargs)
    if len(kwargs) != n:
        raise ValueError(
            f"{owner} {arg_name} is a list of {len(kwargs)} dicts, expected {n} (one per layer)"
        )
    for item in kwargs:
        yield dict(item)


def find_depth(depth: int | None, owner: str, **list_or_ints) -> int:
    """The depth given, or the length of the list arguments, which must agree."""
    lengths = {
        key: len(value) for key, value in list_or_ints.items() if isinstance(value, (list, tuple))
    }
    if depth is None:
        if not lengths:
            raise ValueError(
                f"{owner}: depth=None requires one of the input args ({', '.join(list_or_ints)}) "
                "to be a list, whose length gives the depth"
            )
        depth = list(lengths.values())[-1]  # the last list, as TorchRL
    for key, length in lengths.items():
        if length != depth:
            raise ValueError(
                f"{owner}: depth={depth} and {key}={length} length conflict, consider matching "
                f"or specifying a constant {key} argument together with a desired depth"
            )
    return depth
