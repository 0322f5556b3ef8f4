"""Exploration type: thin aliases of tensordict's interaction type.

``ExplorationType`` *is* :class:`tensordict.nn.InteractionType`, so a module reading
tensordict's ``interaction_type()`` sees what ``set_exploration_type`` set, and back.

:func:`set_thread_exploration_type` is the block for code that runs in a thread of its
own (a collector iterating in the background, an evaluator thread): tensordict's block
sets a process-wide value by default, so a background collector's ``RANDOM`` would reach
the main thread's loss, and two threads' blocks ending out of order would leave one
thread's value set for good.

Examples:
    >>> from rl.core import ExplorationType, exploration_type, set_exploration_type
    >>> with set_exploration_type(ExplorationType.DETERMINISTIC):
    ...     exploration_type()
    <InteractionType.DETERMINISTIC: 'deterministic'>
"""

from __future__ import annotations

from tensordict.nn import InteractionType as ExplorationType
from tensordict.nn import interaction_type as exploration_type
from tensordict.nn import set_interaction_type as set_exploration_type

__all__ = [
    "ExplorationType",
    "exploration_type",
    "set_exploration_type",
    "set_thread_exploration_type",
]


def set_thread_exploration_type(type: ExplorationType | str | None) -> set_exploration_type:
    """``set_exploration_type(type)`` for the calling thread only.

    Inside the block the calling thread reads ``type``; other threads neither see it nor
    change it with blocks of their own, and when the block ends the thread's previous
    value comes back. Collectors run their rollouts in such a block, so one iterating in
    a background thread (``start()``, ``AsyncCollector``, ``Evaluator``) and a training
    loop setting its own exploration type in the main thread do not mix (tensordict's
    ``thread_local=True``, from tensordict 0.15, the version rl-core requires).

    Examples:
        >>> import threading
        >>> from rl.core import ExplorationType, exploration_type, set_thread_exploration_type
        >>> seen = []
        >>> def other_thread():
        ...     seen.append(exploration_type())
        >>> with set_thread_exploration_type(ExplorationType.RANDOM):
        ...     thread = threading.Thread(target=other_thread)
        ...     thread.start(); thread.join()
        ...     exploration_type()
        <InteractionType.RANDOM: 'random'>
        >>> seen
        [None]
    """
    return set_exploration_type(type, thread_local=True)
