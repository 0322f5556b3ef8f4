"""TorchRL's ``torchrl.envs.utils`` path: env helpers and the exploration type.

``step_mdp``, ``check_env_specs``, ``RandomPolicy``, ``make_composite_from_td``,
``terminated_or_truncated``, ``MarlGroupMapType`` and ``check_marl_grouping`` are those
of :mod:`rl.envs` (``mark_truncated`` and ``truncated_keys`` too, this library's;
``missing_policy_transforms`` / ``append_policy_transforms``: the ``InitTracker`` and
``TensorDictPrimer`` a recurrent policy needs, which ``EnvBase(..., policy=...)`` and the
collectors append);
``get_available_libraries`` (the simulator libraries rl-envs wraps, installed or not);
``ExplorationType``, ``exploration_type`` and ``set_exploration_type`` those of
:mod:`rl.core` (tensordict's interaction type). The module exists so that code written
for ``torchrl.envs.utils`` carries over.

Examples:
    >>> from rl.envs.utils import ExplorationType, exploration_type, set_exploration_type
    >>> with set_exploration_type(ExplorationType.MODE):
    ...     exploration_type()
    <InteractionType.MODE: 'mode'>
"""

from rl.core import ExplorationType, exploration_type, set_exploration_type
from rl.envs._libraries import get_available_libraries
from rl.envs._marl import MarlGroupMapType, check_marl_grouping
from rl.envs._policy_transforms import append_policy_transforms, missing_policy_transforms
from rl.envs._td_utils import (
    make_composite_from_td,
    mark_truncated,
    terminated_or_truncated,
    truncated_keys,
)
from rl.envs._utils import RandomPolicy, check_env_specs, step_mdp

__all__ = [
    "ExplorationType",
    "MarlGroupMapType",
    "RandomPolicy",
    "append_policy_transforms",
    "check_env_specs",
    "check_marl_grouping",
    "exploration_type",
    "get_available_libraries",
    "make_composite_from_td",
    "mark_truncated",
    "missing_policy_transforms",
    "set_exploration_type",
    "step_mdp",
    "terminated_or_truncated",
    "truncated_keys",
]
