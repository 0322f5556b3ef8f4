"""File-system helpers for writers that must survive a crash (the trainers' checkpoints,
``rl.core.checkpoint``, rl-data's storage checkpointers): directory fsync and whether a
temporary file's writer still runs."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["fsync_dir", "pid_alive"]


def fsync_dir(path: str | os.PathLike) -> None:
    """Flushes a directory's entries (a rename into it) to disk; a no-op where it cannot be
    opened or synced (some file systems refuse a directory fsync)."""
    try:
        fd = os.open(Path(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def pid_alive(pid: int) -> bool:
    """Whether a process with this id runs (one of another user counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
