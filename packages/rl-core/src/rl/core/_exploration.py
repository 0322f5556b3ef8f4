"""Exploration type: thin aliases of tensordict's interaction type.

``ExplorationType`` *is* :class:`tensordict.nn.InteractionType`, so a module reading
tensordict's ``interaction_type()`` sees what ``set_exploration_type`` set, and back.

Examples:
    >>> from rl.core import ExplorationType, exploration_type, set_exploration_type
    >>> with set_exploration_type(ExplorationType.DETERMINISTIC):
    ...     exploration_type()
    <InteractionType.DETERMINISTIC: 'deterministic'>
"""

from tensordict.nn import InteractionType as ExplorationType
from tensordict.nn import interaction_type as exploration_type
from tensordict.nn import set_interaction_type as set_exploration_type

__all__ = ["ExplorationType", "exploration_type", "set_exploration_type"]
