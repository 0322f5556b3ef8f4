"""CheckpointRotation: a folder of step-numbered checkpoints, the last N and the best kept."""

from __future__ import annotations

import glob
import math
import os
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from numbers import Real
from pathlib import Path
from typing import Any

from ..files import pid_alive
from ..trainers import CheckpointError
from ._adapters import CheckpointOptions
from ._checkpoint import (
    Checkpoint,
    CheckpointBest,
    CheckpointFormat,
    CheckpointLoadResult,
    CheckpointStrictness,
    _remove_path,
)
from ._payload import to_json_value

__all__ = ["CheckpointRotation"]

_ARCHIVE_SUFFIX = ".torchrl"


@dataclass(frozen=True)
class _Entry:
    path: Path
    step: int
    metric: float | None
    created_at: datetime


def _metric_value(value: Any, key: str) -> float:
    value = to_json_value(value)
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"checkpoint metric {key!r} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"checkpoint metric {key!r} must be finite, got {value}")
    return value


class CheckpointRotation:
    """A folder of checkpoints named by step, of which the last ``keep_last`` are kept,
    and the best by a metric when ``keep_best`` is given.

    Checkpoints are ``<prefix>-<step, 12 digits>`` (a directory) or the same name with
    ``.torchrl`` (an archive). Each :meth:`save` writes atomically, then prunes; a save that
    fails prunes nothing. Saving a step again replaces its checkpoint. Entries that are not
    readable checkpoints of this prefix are ignored and never deleted.

    Args:
        directory (str or Path): the folder of checkpoints.

    Keyword Args:
        keep_last (int): how many of the newest checkpoints to keep (at least 1).
        keep_best (tuple[str, str], optional): ``(metadata_key, "min" | "max")``: the
            checkpoint whose ``metadata[metadata_key]`` is the lowest / highest is kept
            too (the latest of equal ones). Every save must then give that metric.
            Defaults to ``None``.
        prefix (str, optional): the name prefix. Defaults to ``"checkpoint"``.

    Raises:
        TypeError: ``keep_last`` is not an int, ``prefix`` not a string or ``keep_best``
            not a pair.
        ValueError: ``keep_last < 1``, a prefix with a path separator, an empty metric
            key or a mode other than ``"min"`` / ``"max"``.

    Examples:
        >>> import tempfile
        >>> from rl.core import Checkpoint, CheckpointRotation
        >>> with tempfile.TemporaryDirectory() as tmpdir:
        ...     rotation = CheckpointRotation(tmpdir, keep_last=2, keep_best=("loss", "min"))
        ...     for step, loss in enumerate([0.5, 0.9, 0.8, 0.7]):
        ...         _ = rotation.save(Checkpoint(step={"step": step}), step=step, metadata={"loss": loss})
        ...     [path.name for path in rotation.checkpoints()], rotation.best().name
        (['checkpoint-000000000000', 'checkpoint-000000000002', 'checkpoint-000000000003'], 'checkpoint-000000000000')
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        keep_last: int,
        keep_best: CheckpointBest | None = None,
        prefix: str = "checkpoint",
    ) -> None:
        if isinstance(keep_last, bool) or not isinstance(keep_last, int):
            raise TypeError(f"keep_last must be an integer, got {keep_last!r}")
        if keep_last < 1:
            raise ValueError(f"keep_last must be at least 1, got {keep_last}")
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a string, got {prefix!r}")
        if not prefix or prefix in (".", "..") or "/" in prefix or "\\" in prefix:
            raise ValueError(
                f"prefix must be a file name prefix without path separators, got {prefix!r}"
            )
        if keep_best is not None:
            if not isinstance(keep_best, tuple) or len(keep_best) != 2:
                raise TypeError(
                    f"keep_best must be a (metadata_key, mode) tuple, got {keep_best!r}"
                )
            key, mode = keep_best
            if not isinstance(key, str) or not key:
                raise ValueError(
                    f"the keep_best metadata key must be a non-empty string, got {key!r}"
                )
            if mode not in ("min", "max"):
                raise ValueError(f"the keep_best mode must be 'min' or 'max', got {mode!r}")
        self.directory = Checkpoint._local_path(directory)
        self.keep_last = keep_last
        self.keep_best = keep_best
        self.prefix = prefix

    def save(
        self,
        checkpoint: Checkpoint,
        *,
        step: int,
        metadata: Mapping[str, Any] | None = None,
        components: Collection[str] | None = None,
        component_options: Mapping[str, CheckpointOptions] | None = None,
    ) -> Path:
        """Saves ``checkpoint`` as the one of ``step``, then applies the retention policy.

        Returns:
            The path written.

        Raises:
            TypeError: ``checkpoint`` is not a :class:`Checkpoint`, ``step`` not an int, or
                the ``keep_best`` metric not a number.
            ValueError: a negative ``step`` or a metric that is not finite.
            KeyError: ``metadata`` lacks the ``keep_best`` metric.
        """
        if not isinstance(checkpoint, Checkpoint):
            raise TypeError(f"checkpoint must be a Checkpoint, got {type(checkpoint).__name__}")
        if isinstance(step, bool) or not isinstance(step, int):
            raise TypeError(f"step must be an integer, got {step!r}")
        if step < 0:
            raise ValueError(f"step must be non-negative, got {step}")
        metadata = dict(metadata or {})
        if self.keep_best is not None:
            key = self.keep_best[0]
            if key not in metadata:
                raise KeyError(
                    f"checkpoint metadata has no keep_best metric {key!r}; it has {sorted(metadata)}"
                )
            _metric_value(metadata[key], key)
        self.directory.mkdir(parents=True, exist_ok=True)
        destination = self._checkpoint_path(step, checkpoint.format)
        checkpoint.save(
            destination,
            components=components,
            component_options=component_options,
            metadata=metadata,
        )
        other = self._checkpoint_path(
            step, "archive" if checkpoint.format == "directory" else "directory"
        )
        if other.exists():
            self._remove_atomically(other)
        self.prune()
        return destination

    def checkpoints(self) -> tuple[Path, ...]:
        """The readable checkpoints, by step (one per step: the newest)."""
        return tuple(entry.path for entry in self._entries())

    def latest(self) -> Path | None:
        """The checkpoint of the highest step, or ``None``."""
        entries = self._entries()
        return entries[-1].path if entries else None

    def best(self) -> Path | None:
        """The best checkpoint by the ``keep_best`` metric, or ``None``."""
        entry = self._select_best(self._entries())
        return entry.path if entry is not None else None

    def prune(self) -> tuple[Path, ...]:
        """Deletes the checkpoints the policy does not keep; returns their paths.

        Two checkpoints of one step (a directory and an archive left by an interrupted
        save) count once, the newer; the older is deleted.
        """
        self._remove_dead_tombstones()
        every = self._all_entries()
        entries = self._latest_per_step(every)
        kept = {entry.path for entry in entries[-self.keep_last :]}
        best = self._select_best(entries)
        if best is not None:
            kept.add(best.path)
        removed = []
        for entry in every:
            if entry.path not in kept:
                self._remove_atomically(entry.path)
                removed.append(entry.path)
        return tuple(removed)

    def load_latest(
        self,
        checkpoint: Checkpoint,
        *,
        components: Collection[str] | None = None,
        component_options: Mapping[str, CheckpointOptions] | None = None,
        map_location: Any = None,
        tensor_load_kwargs: Mapping[str, Any] | None = None,
        strict: CheckpointStrictness | None = None,
    ) -> CheckpointLoadResult:
        """Restores the latest checkpoint into ``checkpoint`` (see :meth:`Checkpoint.load`).

        Raises:
            FileNotFoundError: the folder holds no checkpoint.
        """
        if not isinstance(checkpoint, Checkpoint):
            raise TypeError(f"checkpoint must be a Checkpoint, got {type(checkpoint).__name__}")
        latest = self.latest()
        if latest is None:
            raise FileNotFoundError(
                f"No checkpoints were found in rotation directory {self.directory}"
            )
        return checkpoint.load(
            latest,
            components=components,
            component_options=component_options,
            map_location=map_location,
            tensor_load_kwargs=tensor_load_kwargs,
            strict=strict,
        )

    # ------------------------------------------------------------------ helpers
    def _entries(self) -> list[_Entry]:
        return self._latest_per_step(self._all_entries())

    def _all_entries(self) -> list[_Entry]:
        if not self.directory.exists():
            return []
        if not self.directory.is_dir():
            raise NotADirectoryError(
                f"the checkpoint rotation path is not a directory: {self.directory}"
            )
        entries = []
        name_prefix = f"{self.prefix}-"
        for path in self.directory.iterdir():
            name = path.name.removesuffix(_ARCHIVE_SUFFIX)
            step = name[len(name_prefix) :]
            if not name.startswith(name_prefix) or not step.isdigit():
                continue
            try:
                manifest = Checkpoint.manifest(path)
            except (CheckpointError, OSError, TypeError, ValueError):
                continue
            entries.append(
                _Entry(
                    path, int(step), self._read_metric(manifest), self._created_at(manifest, path)
                )
            )
        entries.sort(key=lambda entry: (entry.step, entry.created_at, entry.path.name))
        return entries

    @staticmethod
    def _latest_per_step(entries: Collection[_Entry]) -> list[_Entry]:
        latest = {}
        for entry in entries:  # sorted by (step, created_at): the last of a step wins
            latest[entry.step] = entry
        return list(latest.values())

    @staticmethod
    def _created_at(manifest: Mapping[str, Any], path: Path) -> datetime:
        created_at = manifest.get("created_at")
        if isinstance(created_at, str):
            try:
                parsed = datetime.fromisoformat(created_at)
            except ValueError:
                pass
            else:
                return (
                    parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
                )
        return datetime.fromtimestamp(path.stat().st_mtime, UTC)

    def _checkpoint_path(self, step: int, format: CheckpointFormat) -> Path:
        suffix = _ARCHIVE_SUFFIX if format == "archive" else ""
        return self.directory / f"{self.prefix}-{step:012d}{suffix}"

    def _select_best(self, entries: Collection[_Entry]) -> _Entry | None:
        if self.keep_best is None:
            return None
        scored = [entry for entry in entries if entry.metric is not None]
        if not scored:
            return None
        if self.keep_best[1] == "max":
            return max(scored, key=lambda entry: (entry.metric, entry.step))
        return min(scored, key=lambda entry: (entry.metric, -entry.step))

    def _read_metric(self, manifest: Mapping[str, Any]) -> float | None:
        if self.keep_best is None:
            return None
        metadata = manifest.get("metadata")
        key = self.keep_best[0]
        if not isinstance(metadata, Mapping) or key not in metadata:
            return None
        try:
            return _metric_value(metadata[key], key)
        except (TypeError, ValueError):
            return None

    def _remove_atomically(self, path: Path) -> None:
        """Renames ``path`` out of the rotation (one atomic step), then deletes it."""
        tombstone = path.with_name(f".{path.name}.delete-{os.getpid()}-{uuid.uuid4().hex}")
        os.replace(path, tombstone)
        _remove_path(tombstone)

    def _remove_dead_tombstones(self) -> None:
        """Finishes deleting what a killed process had renamed out of the rotation."""
        if not self.directory.is_dir():
            return
        for path in self.directory.glob(glob.escape(f".{self.prefix}-") + "*.delete-*"):
            pid = path.name.rsplit(".delete-", 1)[1].split("-", 1)[0]
            if pid.isdigit() and not pid_alive(int(pid)):
                _remove_path(path)
