"""The shared flag that cuts a collector's batches short (preemption)."""

from __future__ import annotations

import multiprocessing as mp

__all__ = ["Interruptor"]


class Interruptor:
    """A one-byte shared-memory flag that tells collectors to end their batch early.

    The process that owns it calls :meth:`stop_collection` to ask every collector that
    holds it to end its current batch after the step it is taking, and
    :meth:`start_collection` before asking for the next batch.
    :class:`~rl.collectors.MultiSyncCollector` (``preemptive_threshold``) builds one and
    hands it to its workers; a :class:`~rl.collectors.Collector` takes one as
    ``interruptor`` and asks :meth:`collection_stopped` after each env step.

    One process writes the flag and the others only read it (a byte cannot be read
    torn), so no lock is taken. Like any ``multiprocessing`` shared value it reaches
    another process when that process is created (as an argument of the process), not
    through a pipe or a queue afterwards. TorchRL names it ``_Interruptor``.

    Args:
        ctx: the ``multiprocessing`` context to allocate the flag with (default: the
            default context).

    Examples:
        >>> from rl.collectors import Interruptor
        >>> flag = Interruptor()
        >>> flag.collection_stopped()
        False
        >>> flag.stop_collection()
        >>> flag.collection_stopped()
        True
    """

    def __init__(self, ctx=None) -> None:
        self._collect = (ctx or mp).Value("b", 1, lock=False)

    def start_collection(self) -> None:
        """Lets collectors run their batches to the end."""
        self._collect.value = 1

    def stop_collection(self) -> None:
        """Asks collectors to end their current batch after the step they are taking."""
        self._collect.value = 0

    def collection_stopped(self) -> bool:
        """Whether :meth:`stop_collection` was called since the last
        :meth:`start_collection`."""
        return not self._collect.value
