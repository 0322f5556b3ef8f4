"""Where a service runs: TorchRL's ``service_backend`` selector and its scoped default.

A collector built as ``Collector(...)`` (and, in TorchRL, other services) picks its
execution back-end from its ``backend=`` argument, else from the innermost enclosing
:func:`service_backend` context of this process, else its own default.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator

__all__ = ["current_service_backend", "normalize_service_backend", "service_backend"]

#: TorchRL 0.14.1's service back-ends (not every service runs on every one)
SERVICE_BACKENDS = frozenset(
    {"direct", "thread", "process", "ray", "rpc", "submitit", "monarch", "distributed"}
)
_ALIASES = {"threading": "thread", "multiprocessing": "process"}

# (pid, backend): a forked worker inherits the context but must not act on its owner's
_CONTEXT: contextvars.ContextVar[tuple[int, str] | None] = contextvars.ContextVar(
    "rl_service_backend", default=None
)


def normalize_service_backend(backend: str) -> str:
    """The canonical name of a service back-end (``"threading"`` -> ``"thread"``,
    ``"multiprocessing"`` -> ``"process"``).

    Raises:
        ValueError: an unknown back-end (the message lists the known ones).
    """
    canonical = _ALIASES.get(backend, backend)
    if canonical not in SERVICE_BACKENDS:
        known = sorted(SERVICE_BACKENDS | set(_ALIASES))
        raise ValueError(f"Unsupported service backend {backend!r}. Expected one of {known}.")
    return canonical


@contextlib.contextmanager
def service_backend(backend: str) -> Iterator[str]:
    """Makes ``backend`` the default back-end of the services built inside the block.

    Args:
        backend: one of ``"direct"``, ``"thread"``, ``"process"``, ``"ray"``, ``"rpc"``,
            ``"submitit"``, ``"monarch"``, ``"distributed"`` (or the aliases
            ``"threading"`` / ``"multiprocessing"``).

    Examples:
        >>> from rl.core import current_service_backend, service_backend
        >>> with service_backend("multiprocessing"):
        ...     current_service_backend()
        'process'
        >>> current_service_backend() is None
        True
    """
    canonical = normalize_service_backend(backend)
    token = _CONTEXT.set((os.getpid(), canonical))
    try:
        yield canonical
    finally:
        _CONTEXT.reset(token)


def current_service_backend() -> str | None:
    """The back-end of the innermost enclosing :func:`service_backend` block of this
    process, or ``None``."""
    value = _CONTEXT.get()
    if value is None or value[0] != os.getpid():
        return None
    return value[1]
