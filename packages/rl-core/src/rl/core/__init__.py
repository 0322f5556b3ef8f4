"""rl.core: tensor specs, exploration type and seeding shared by every ``rl`` package."""

from tensordict.utils import NestedKey

from ._exploration import ExplorationType, exploration_type, set_exploration_type
from ._seed import seed_everything
from ._specs import (
    Binary,
    Bounded,
    BoxList,
    Categorical,
    CategoricalBox,
    Composite,
    ContinuousBox,
    OneHot,
    TensorSpec,
    Unbounded,
)

__version__ = "0.1.0"

__all__ = [
    "Binary",
    "Bounded",
    "BoxList",
    "Categorical",
    "CategoricalBox",
    "Composite",
    "ContinuousBox",
    "ExplorationType",
    "NestedKey",
    "OneHot",
    "TensorSpec",
    "Unbounded",
    "exploration_type",
    "seed_everything",
    "set_exploration_type",
]
