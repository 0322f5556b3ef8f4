"""File-system helpers for writers that must survive a crash (the trainers' checkpoints,
``rl.core.checkpoint``, rl-data's storage checkpointers): directory fsync and whether a
temporary file's writer still runs."""

from __future__ import annotations

import glob
import os
import shutil
import uuid
from pathlib import Path

__all__ = [
    "fsync_dir",
    "pid_alive",
    "remove_stale_temporaries",
    "temporary_path",
    "temporary_prefix",
]


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


def temporary_prefix(final: str | os.PathLike) -> str:
    """The name prefix of ``final``'s temporaries, to which a writer appends
    ``<pid>-<random>`` (``tempfile.mkdtemp(prefix=temporary_prefix(final) + f"{pid}-")``
    or :func:`temporary_path`)."""
    return f".{Path(final).name}.tmp-"


def temporary_path(final: str | os.PathLike) -> Path:
    """A temporary name beside ``final``: ``.<name>.tmp-<pid>-<random>``, the writer's
    process id telling a later writer whether it may delete it."""
    final = Path(final)
    return final.parent / f"{temporary_prefix(final)}{os.getpid()}-{uuid.uuid4().hex}"


def remove_stale_temporaries(final: str | os.PathLike) -> None:
    """Deletes the :func:`temporary_path` files or folders of ``final`` whose writers are
    gone (killed before they could rename or delete them); those of live writers on this
    host are theirs to finish. The liveness check is per host."""
    final = Path(final)
    prefix = temporary_prefix(final)
    for stale in final.parent.glob(glob.escape(prefix) + "*"):
        pid = stale.name[len(prefix) :].split("-", 1)[0]
        if pid.isdigit() and pid_alive(int(pid)):
            continue
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            try:
                stale.unlink()
            except OSError:
                pass
