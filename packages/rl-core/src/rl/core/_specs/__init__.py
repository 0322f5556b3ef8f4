"""Tensor specs (private: import them from :mod:`rl.core`)."""

from ._aliases import (
    BinaryDiscreteTensorSpec,
    BoundedContinuous,
    BoundedDiscrete,
    BoundedTensorSpec,
    CompositeSpec,
    DiscreteTensorSpec,
    LazyStackedCompositeSpec,
    MultiDiscreteTensorSpec,
    MultiOneHotDiscreteTensorSpec,
    NonTensorSpec,
    OneHotDiscreteTensorSpec,
    UnboundedContinuous,
    UnboundedContinuousTensorSpec,
    UnboundedDiscrete,
    UnboundedDiscreteTensorSpec,
)
from ._base import TensorSpec
from ._bounded import Bounded, Unbounded
from ._choice import Choice
from ._composite import Composite
from ._consolidate import check_no_exclusive_keys, consolidate_spec, contains_lazy_spec
from ._discrete import Binary, Categorical, OneHot
from ._dynamic import shape_fits
from ._multi import MultiCategorical, MultiOneHot
from ._nontensor import NonTensor
from ._spaces import BoxList, CategoricalBox, ContinuousBox
from ._stacked import StackedComposite, stack_specs
from ._stacked_leaf import Stacked

__all__ = [
    "Binary",
    "BinaryDiscreteTensorSpec",
    "Bounded",
    "BoundedContinuous",
    "BoundedDiscrete",
    "BoundedTensorSpec",
    "BoxList",
    "Categorical",
    "CategoricalBox",
    "Choice",
    "Composite",
    "CompositeSpec",
    "ContinuousBox",
    "DiscreteTensorSpec",
    "LazyStackedCompositeSpec",
    "MultiCategorical",
    "MultiDiscreteTensorSpec",
    "MultiOneHot",
    "MultiOneHotDiscreteTensorSpec",
    "NonTensor",
    "NonTensorSpec",
    "OneHot",
    "OneHotDiscreteTensorSpec",
    "Stacked",
    "StackedComposite",
    "TensorSpec",
    "Unbounded",
    "UnboundedContinuous",
    "UnboundedContinuousTensorSpec",
    "UnboundedDiscrete",
    "UnboundedDiscreteTensorSpec",
    "check_no_exclusive_keys",
    "consolidate_spec",
    "contains_lazy_spec",
    "shape_fits",
    "stack_specs",
]
