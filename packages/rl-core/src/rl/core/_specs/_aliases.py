"""Older and dtype-specific names of the specs.

The ``*TensorSpec`` names (``BoundedTensorSpec``, ``CompositeSpec``, ...) are TorchRL's
names before its 0.6 rename; tutorials still use them. They build the same spec and warn
with a ``DeprecationWarning``. ``BoundedContinuous``, ``UnboundedDiscrete`` etc. are
TorchRL's current dtype-specific names and do not warn.

Examples:
    >>> import warnings
    >>> from rl.core import Bounded, BoundedTensorSpec
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     spec = BoundedTensorSpec(-1.0, 1.0, shape=(2,))
    >>> caught[0].category.__name__, spec == Bounded(-1.0, 1.0, shape=(2,))
    ('DeprecationWarning', True)
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch

from ._base import _DEFAULT_SHAPE, DEVICE_TYPING, TensorSpec, _warn_deprecated
from ._bounded import Bounded, Unbounded
from ._composite import Composite
from ._discrete import Binary, Categorical, OneHot
from ._multi import MultiCategorical, MultiOneHot
from ._nontensor import NonTensor
from ._stacked import StackedComposite


def _alias(parent: type, name: str, deprecated: bool, **defaults: Any) -> type:
    """A subclass of ``parent`` named ``name``: same spec, other defaults, maybe a warning."""
    signature = inspect.signature(parent.__init__)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if deprecated:
            _warn_deprecated(name, parent.__name__)
        if defaults:
            given = signature.bind_partial(self, *args, **kwargs).arguments
            for key, value in defaults.items():
                if key not in given:
                    kwargs[key] = value
        parent.__init__(self, *args, **kwargs)

    # introspection (help(), IDEs) shows the parent's arguments, with this name's defaults
    __init__.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[
            p.replace(default=defaults[p.name]) if p.name in defaults else p
            for p in signature.parameters.values()
        ]
    )
    doc = (
        f"Deprecated name of :class:`{parent.__name__}` (warns on construction)."
        if deprecated
        else f":class:`{parent.__name__}` with defaults {defaults}."
    )
    return type(
        name,
        (parent,),
        {"__init__": __init__, "_alias_of_parent": True, "__doc__": doc, "__module__": __name__},
    )


class BoundedContinuous(Bounded):
    """:class:`Bounded` in the continuous domain, with TorchRL's arguments.

    Args:
        low, high, shape, device: as :class:`Bounded`.
        dtype: the dtype of the values; ``None`` (default): as :class:`Bounded`
            (``torch.float32``).
        domain: ``"continuous"`` (default): the spec's domain whatever its dtype, as in
            TorchRL.

    Examples:
        >>> import torch
        >>> from rl.core import BoundedContinuous
        >>> spec = BoundedContinuous(-1.0, 1.0, shape=(2,))
        >>> spec.dtype, spec.domain
        (torch.float32, 'continuous')
        >>> BoundedContinuous(0, 3, (1,), None, torch.int64).domain
        'continuous'
    """

    _alias_of_parent = True

    def __init__(
        self,
        low: float | torch.Tensor | None = None,
        high: float | torch.Tensor | None = None,
        shape: Sequence[int] | torch.Size | int | None = None,
        device: DEVICE_TYPING | None = None,
        dtype: torch.dtype | str | None = None,
        domain: str = "continuous",
    ) -> None:
        Bounded.__init__(self, low, high, shape, device, dtype, domain=domain)


BoundedDiscrete = _alias(Bounded, "BoundedDiscrete", False, dtype=torch.int64)


class UnboundedContinuous(Unbounded):
    """:class:`Unbounded` with TorchRL's arguments for continuous values.

    Args:
        shape, device: as :class:`Unbounded`.
        dtype: the dtype of the values; ``None`` (default): as :class:`Unbounded`
            (``torch.float32``).
        **kwargs: the other arguments of :class:`Unbounded` (``domain``).

    Examples:
        >>> from rl.core import UnboundedContinuous
        >>> spec = UnboundedContinuous(shape=(3,))
        >>> spec.dtype, spec.domain
        (torch.float32, 'continuous')
    """

    _alias_of_parent = True

    def __init__(
        self,
        shape: Sequence[int] | torch.Size | int | None = _DEFAULT_SHAPE,
        device: DEVICE_TYPING | None = None,
        dtype: torch.dtype | str | None = None,
        **kwargs: Any,
    ) -> None:
        Unbounded.__init__(self, shape, device, dtype, **kwargs)


UnboundedDiscrete = _alias(Unbounded, "UnboundedDiscrete", False, dtype=torch.int64)

BoundedTensorSpec = _alias(Bounded, "BoundedTensorSpec", True)
UnboundedContinuousTensorSpec = _alias(
    Unbounded, "UnboundedContinuousTensorSpec", True, dtype=torch.float32
)
UnboundedDiscreteTensorSpec = _alias(
    Unbounded, "UnboundedDiscreteTensorSpec", True, dtype=torch.int64
)
CompositeSpec = _alias(Composite, "CompositeSpec", True)
OneHotDiscreteTensorSpec = _alias(OneHot, "OneHotDiscreteTensorSpec", True)
DiscreteTensorSpec = _alias(Categorical, "DiscreteTensorSpec", True)
MultiOneHotDiscreteTensorSpec = _alias(MultiOneHot, "MultiOneHotDiscreteTensorSpec", True)
MultiDiscreteTensorSpec = _alias(MultiCategorical, "MultiDiscreteTensorSpec", True)
BinaryDiscreteTensorSpec = _alias(Binary, "BinaryDiscreteTensorSpec", True)
NonTensorSpec = _alias(NonTensor, "NonTensorSpec", True)
LazyStackedCompositeSpec = _alias(StackedComposite, "LazyStackedCompositeSpec", True)

DEPRECATED = {
    "BoundedTensorSpec": Bounded,
    "UnboundedContinuousTensorSpec": Unbounded,
    "UnboundedDiscreteTensorSpec": Unbounded,
    "CompositeSpec": Composite,
    "OneHotDiscreteTensorSpec": OneHot,
    "DiscreteTensorSpec": Categorical,
    "MultiOneHotDiscreteTensorSpec": MultiOneHot,
    "MultiDiscreteTensorSpec": MultiCategorical,
    "BinaryDiscreteTensorSpec": Binary,
    "NonTensorSpec": NonTensor,
    "LazyStackedCompositeSpec": StackedComposite,
}

__all__ = [
    "BoundedContinuous",
    "BoundedDiscrete",
    "UnboundedContinuous",
    "UnboundedDiscrete",
    *DEPRECATED,
]

assert all(issubclass(globals()[n], TensorSpec) for n in __all__)
