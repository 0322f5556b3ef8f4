"""Tensor specs (private: import them from :mod:`rl.core`)."""

from ._base import BoxList, CategoricalBox, ContinuousBox, TensorSpec
from ._bounded import Bounded, Unbounded
from ._composite import Composite
from ._discrete import Binary, Categorical, OneHot

__all__ = [
    "Binary",
    "Bounded",
    "BoxList",
    "Categorical",
    "CategoricalBox",
    "Composite",
    "ContinuousBox",
    "OneHot",
    "TensorSpec",
    "Unbounded",
]
