"""rl.core: tensor specs, exploration type and seeding shared by every ``rl`` package."""

from tensordict.utils import NestedKey

from ._exploration import ExplorationType, exploration_type, set_exploration_type
from ._seed import seed_everything
from ._specs import *  # noqa: F403  (the spec classes and their deprecated aliases)
from ._specs import __all__ as _spec_names

__version__ = "0.1.0"

__all__ = [
    *_spec_names,
    "ExplorationType",
    "NestedKey",
    "exploration_type",
    "seed_everything",
    "set_exploration_type",
]
