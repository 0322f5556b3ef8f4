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

import os
import threading

from tensordict.nn import InteractionType as ExplorationType
from tensordict.nn import interaction_type as exploration_type
from tensordict.nn import set_interaction_type as set_exploration_type

__all__ = [
    "ExplorationType",
    "exploration_type",
    "set_exploration_type",
    "set_thread_exploration_type",
]

# the main thread's id, read once (tensor policies enter a block per step); a process
# forked from another thread has that thread as its main one
_MAIN_THREAD = threading.main_thread().ident


def _refresh_main_thread() -> None:
    global _MAIN_THREAD
    _MAIN_THREAD = threading.main_thread().ident


os.register_at_fork(after_in_child=_refresh_main_thread)


def set_thread_exploration_type(type: ExplorationType | str | None) -> set_exploration_type:
    """``set_exploration_type(type)`` that stays in its thread when called off the main
    thread.

    Off the main thread the block is thread-local (tensordict's ``thread_local=True``):
    the calling thread reads ``type``, other threads neither see it nor change it with
    blocks of their own, and the thread's previous value comes back when the block ends.
    Collectors run their rollouts in such a block, so one iterating in a background
    thread (``start()``, ``AsyncCollector``, ``Evaluator``) and a training loop setting
    its own exploration type in the main thread do not mix. In the main thread it is the
    process-wide block, as ``set_exploration_type``'s: the value the main thread's other
    blocks and compiled programs read (a program compiled under a process-wide type is
    not compiled again for a thread-local one of the same value).

    Examples:
        >>> import threading
        >>> from rl.core import ExplorationType, exploration_type, set_thread_exploration_type
        >>> seen = []
        >>> def worker():
        ...     with set_thread_exploration_type(ExplorationType.RANDOM):
        ...         seen.append(exploration_type())
        ...         ready.set(); checked.wait(5)
        >>> ready, checked = threading.Event(), threading.Event()
        >>> thread = threading.Thread(target=worker); thread.start()
        >>> _ = ready.wait(5)
        >>> exploration_type() is None  # the worker's block is its own
        True
        >>> checked.set(); thread.join()
        >>> seen
        [<InteractionType.RANDOM: 'random'>]
    """
    if threading.get_ident() == _MAIN_THREAD:
        return set_exploration_type(type)
    return set_exploration_type(type, thread_local=True)
