"""Checkpoint: named components saved atomically under one manifest, restored selectively."""

from __future__ import annotations

import glob
import json
import logging
import os
import shutil
import tempfile
import uuid
import zipfile
from collections.abc import Callable, Collection, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from importlib import metadata as _metadata
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import tensordict
import torch

from ..files import fsync_dir, pid_alive
from ..trainers import CheckpointError
from ._adapters import (
    CheckpointAdapter,
    CheckpointOptions,
    DumpLoadCheckpointAdapter,
    JSONCheckpointAdapter,
    StateDictCheckpointAdapter,
    check_weights_only,
)
from ._payload import MAX_JSON_BYTES, to_json_value

__all__ = [
    "ArchiveCompression",
    "Checkpoint",
    "CheckpointBest",
    "CheckpointFormat",
    "CheckpointLoadResult",
    "CheckpointMetricMode",
    "CheckpointStrictness",
]

_logger = logging.getLogger("rl.core.checkpoint")

CheckpointFormat = Literal["directory", "archive"]
CheckpointStrictness = Literal["error", "warn", "ignore"]
ArchiveCompression = Literal["stored", "deflate"]
CheckpointMetricMode = Literal["min", "max"]
CheckpointBest = tuple[str, CheckpointMetricMode]

_MANIFEST_NAME = "manifest.json"
# TorchRL's format name and version: the layout is TorchRL's, so each library reads the other's
_FORMAT_NAME = "torchrl.checkpoint"
_FORMAT_VERSION = 1
# temporaries next to a destination are named ".<name>.<kind>-<pid>-<hex>", kind one of
# stage / archive (being written), backup (the previous checkpoint, moved aside while the
# new one is renamed in) and delete (being removed)


@cache
def _rl_core_version() -> str:
    try:
        return _metadata.version("rl-core")
    except _metadata.PackageNotFoundError:
        return "unknown"


def _runtime_versions() -> dict[str, str]:
    return {
        "rl-core": _rl_core_version(),
        "tensordict": tensordict.__version__,
        "torch": str(torch.__version__),
    }


def _temporary(destination: Path, kind: str) -> Path:
    return destination.parent / f".{destination.name}.{kind}-{os.getpid()}-{uuid.uuid4().hex}"


def _temporaries(destination: Path, kind: str) -> list[tuple[Path, bool]]:
    """The ``kind`` temporaries of ``destination``, each with whether its writer is alive."""
    prefix = f".{destination.name}.{kind}-"
    out = []
    if destination.parent.is_dir():
        for path in destination.parent.glob(glob.escape(prefix) + "*"):
            pid = path.name[len(prefix) :].split("-", 1)[0]
            out.append((path, pid.isdigit() and pid_alive(int(pid))))
    return out


def _remove_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def _fsync_tree(root: Path) -> None:
    """Flushes every file below ``root`` and the folders that name them to the disk."""
    for folder, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(folder))


def _recover_interrupted_publish(destination: Path) -> None:
    """Puts back the previous checkpoint a writer moved aside and died before replacing.

    Publishing a directory moves the old one to a backup, then the new one in; a process
    killed between the two renames leaves only the backup. Backups of live writers are
    left to them; liveness is checked per host (by process id), so a writer on another
    machine sharing the folder counts as dead. It renames and deletes files: only
    :meth:`Checkpoint.save`, and :meth:`Checkpoint.load` when ``destination`` is missing,
    call it.
    """
    dead = [path for path, alive in _temporaries(destination, "backup") if not alive]
    if not dead:
        return
    if not (destination.exists() or destination.is_symlink()):
        newest = max(dead, key=lambda path: path.stat().st_mtime)
        os.replace(newest, destination)
        _logger.warning(
            "restored checkpoint %s, which an interrupted save had moved aside", destination
        )
        dead.remove(newest)
    for path in dead:
        _remove_path(path)


def _publish(source: Path, destination: Path) -> None:
    """Renames ``source`` to ``destination``, replacing what is there.

    A file over a file is one atomic rename. A directory cannot be renamed over a
    non-empty one, so the old one is moved aside first, and put back if the second rename
    fails (or, after a crash between the two, by the next save or load).
    """
    replaces_dir = destination.is_dir() and not destination.is_symlink()
    if not (replaces_dir or source.is_dir()) or not (
        destination.exists() or destination.is_symlink()
    ):
        os.replace(source, destination)
        fsync_dir(destination.parent)
        return
    backup = _temporary(destination, "backup")
    os.replace(destination, backup)
    try:
        os.replace(source, destination)
    except BaseException:
        if not destination.exists() and backup.exists():
            os.replace(backup, destination)
        raise
    fsync_dir(destination.parent)
    # renamed before it is deleted: a half-deleted backup is never taken for one to restore
    trash = _temporary(destination, "delete")
    os.replace(backup, trash)
    _remove_path(trash)


@dataclass
class CheckpointLoadResult:
    """What :meth:`Checkpoint.load` restored, and what it did not.

    Args:
        loaded (set[str]): components restored.
        missing (set[str]): requested components the checkpoint does not hold.
        incompatible (dict[str, str]): components that could not be restored, with why.
        unrequested (set[str]): components in the checkpoint that were not requested.
        values (dict[str, Any]): values the adapters returned (a JSON number or string
            registered as a component comes back here).
        manifest (dict[str, Any]): the checkpoint's manifest.
        comparison (dict[str, Any]): when the manifest records library versions,
            ``comparison["versions"]`` maps each known library to its ``checkpoint`` and
            ``runtime`` versions and whether they ``matches``; ``comparison["version_skew"]``
            is whether any differ.

    Examples:
        >>> from rl.core import CheckpointLoadResult
        >>> CheckpointLoadResult().loaded
        set()
    """

    loaded: set[str] = field(default_factory=set)
    missing: set[str] = field(default_factory=set)
    incompatible: dict[str, str] = field(default_factory=dict)
    unrequested: set[str] = field(default_factory=set)
    values: dict[str, Any] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)
    comparison: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Component:
    value: Any
    adapter: CheckpointAdapter | None
    options: CheckpointOptions


def _is_json_value(value: Any) -> bool:
    try:
        json.dumps(to_json_value(value))
    except (TypeError, ValueError, OverflowError):
        return False
    return True


def _check_format(format: Any) -> None:
    if format not in ("directory", "archive"):
        raise ValueError(f"checkpoint format must be 'directory' or 'archive', got {format!r}")


def _check_strict(strict: Any) -> None:
    if strict not in ("error", "warn", "ignore"):
        raise ValueError(
            f"checkpoint strictness must be 'error', 'warn' or 'ignore', got {strict!r}"
        )


def _check_member(path: Path, where: str) -> None:
    if path.is_absolute() or ".." in path.parts or (path.parts and ":" in path.parts[0]):
        raise CheckpointError(f"{where}: unsafe path {path.as_posix()!r} (absolute or with '..')")


def _record_path(text: str) -> Path:
    return Path(text.replace("\\", "/"))


class Checkpoint:
    """Named components (modules, optimizers, replay buffers, JSON values, RNG states)
    saved together under one manifest and restored, all or some, into live objects.

    Each component is written by an adapter: the one given to :meth:`register`, else one
    registered for its type with :meth:`register_adapter`, else
    :class:`DumpLoadCheckpointAdapter` for objects with ``dump`` / ``load``,
    :class:`StateDictCheckpointAdapter` for objects with ``state_dict`` /
    ``load_state_dict`` and :class:`JSONCheckpointAdapter` for JSON values. A checkpoint is
    a directory (``manifest.json`` and ``components/<nnnn>-<name>/``) or the same tree in
    one ZIP archive.

    Saving is atomic: the checkpoint is written beside the destination, flushed to disk and
    renamed into place, so a save that fails or is killed leaves the previous checkpoint as
    it was. Loading never unpickles: tensors are read from tensor files, structures from
    JSON, and ``torch.save`` payloads with ``weights_only=True``; a crafted file is refused
    with a :class:`CheckpointError`.

    Args:
        format (str, optional): ``"directory"`` or ``"archive"``. Defaults to ``"directory"``.
        strict (str, optional): what :meth:`load` does with missing or incompatible
            components: ``"error"`` raises :class:`CheckpointError`, ``"warn"`` logs a
            warning, ``"ignore"`` only reports them. Defaults to ``"error"``.
        archive_compression (str, optional): ``"stored"`` (no compression) or
            ``"deflate"``. Defaults to ``"stored"``.
        save_components (Collection[str], optional): the components :meth:`save` writes
            when it is not given ``components`` (e.g. to leave a large buffer out of
            frequent saves). Defaults to ``None``: all.
        **components: the components to register, by name.

    Raises:
        ValueError: an unknown ``format``, ``strict`` or ``archive_compression``.

    Examples:
        >>> import tempfile
        >>> import torch
        >>> from rl.core import Checkpoint
        >>> source, target = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
        >>> config = {}
        >>> with tempfile.TemporaryDirectory() as tmpdir:
        ...     _ = Checkpoint(policy=source, config={"lr": 0.1}).save(f"{tmpdir}/ckpt")
        ...     result = Checkpoint(policy=target, config=config).load(f"{tmpdir}/ckpt")
        >>> sorted(result.loaded), config, torch.equal(source.weight, target.weight)
        (['config', 'policy'], {'lr': 0.1}, True)
    """

    _format_migrations: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}

    def __init__(
        self,
        *,
        format: CheckpointFormat = "directory",
        strict: CheckpointStrictness = "error",
        archive_compression: ArchiveCompression = "stored",
        save_components: Collection[str] | None = None,
        **components: Any,
    ) -> None:
        _check_format(format)
        _check_strict(strict)
        if archive_compression not in ("stored", "deflate"):
            raise ValueError(
                f"archive_compression must be 'stored' or 'deflate', got {archive_compression!r}"
            )
        self.format = format
        self.strict = strict
        self.archive_compression = archive_compression
        self.save_components = None if save_components is None else frozenset(save_components)
        self._components: dict[str, _Component] = {}
        self._adapter_registry: list[tuple[type, CheckpointAdapter]] = []
        for name, component in components.items():
            self.register(name, component)

    @property
    def components(self) -> Mapping[str, Any]:
        """The registered components by name (a copy)."""
        return {name: component.value for name, component in self._components.items()}

    def __contains__(self, name: object) -> bool:
        return name in self._components

    def register(
        self,
        name: str,
        component: Any,
        *,
        adapter: CheckpointAdapter | None = None,
        options: CheckpointOptions | None = None,
    ) -> Checkpoint:
        """Registers ``component`` under ``name``; returns ``self`` to chain calls.

        Args:
            name (str): the component's name in the manifest (no path separator).
            component: a live object or a JSON value.
            adapter (CheckpointAdapter, optional): how to write it; inferred when ``None``.
            options (CheckpointOptions, optional): arguments for its save / load methods.

        Raises:
            ValueError: an empty name or one with a path separator.
            KeyError: ``name`` is already registered.
            TypeError: ``adapter`` is not a :class:`CheckpointAdapter`.
        """
        if not isinstance(name, str) or not name or name in (".", ".."):
            raise ValueError(f"checkpoint component names must be non-empty strings, got {name!r}")
        if "/" in name or "\\" in name:
            raise ValueError(
                f"checkpoint component names cannot contain path separators, got {name!r}"
            )
        if name in self._components:
            raise KeyError(f"checkpoint component {name!r} is already registered")
        if adapter is not None and not isinstance(adapter, CheckpointAdapter):
            raise TypeError(f"adapter must be a CheckpointAdapter, got {type(adapter).__name__}")
        self._components[name] = _Component(component, adapter, options or CheckpointOptions())
        return self

    def register_adapter(self, component_type: type, adapter: CheckpointAdapter) -> Checkpoint:
        """Uses ``adapter`` for this checkpoint's components of ``component_type`` (the
        latest registration wins); returns ``self``."""
        if not isinstance(component_type, type):
            raise TypeError(f"component_type must be a type, got {component_type!r}")
        if not isinstance(adapter, CheckpointAdapter):
            raise TypeError(f"adapter must be a CheckpointAdapter, got {type(adapter).__name__}")
        self._adapter_registry.insert(0, (component_type, adapter))
        return self

    # ------------------------------------------------------------------ save
    def save(
        self,
        path: str | Path,
        *,
        components: Collection[str] | None = None,
        component_options: Mapping[str, CheckpointOptions] | None = None,
        format: CheckpointFormat | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Path:
        """Writes the selected components to ``path``, atomically.

        First puts back a checkpoint that a killed save left moved aside and deletes the
        temporaries of dead writers (liveness is checked by process id on this host).

        Args:
            path (str or Path): the checkpoint, a local path (replaced if it exists).
            components (Collection[str], optional): the names to save. Defaults to
                ``save_components``, or all.
            component_options (Mapping[str, CheckpointOptions], optional): options for this
                save, merged over those given at registration.
            format (str, optional): ``"directory"`` or ``"archive"`` for this save.
            metadata (Mapping, optional): JSON values stored in the manifest.

        Returns:
            The absolute checkpoint path.

        Raises:
            KeyError: an unregistered name in ``components`` or ``component_options``.
            TypeError: ``metadata`` is not JSON, or no adapter fits a component.
        """
        destination = self._local_path(path)
        output_format = self.format if format is None else format
        _check_format(output_format)
        selected = self._selection(self.save_components if components is None else components)
        options = dict(component_options or {})
        unknown = set(options) - selected
        if unknown:
            raise KeyError(
                f"options were given for checkpoint components that are not saved: {sorted(unknown)}"
            )
        if not _is_json_value(metadata or {}):
            raise TypeError(f"checkpoint metadata must be JSON-compatible, got {metadata!r}")
        destination.parent.mkdir(parents=True, exist_ok=True)
        _recover_interrupted_publish(destination)
        for kind in ("stage", "archive", "delete"):
            for stale, alive in _temporaries(destination, kind):
                if not alive:
                    _remove_path(stale)
        stage = _temporary(destination, "stage")
        stage.mkdir()
        try:
            records = {}
            for index, name in enumerate(sorted(selected)):
                registration = self._components[name]
                adapter = self._resolve_adapter(name, registration)
                relative = Path("components") / f"{index:04d}-{quote(name, safe='._-')}"
                folder = stage / relative
                resolved = registration.options.merged(options.get(name))
                adapter.save(
                    registration.value,
                    folder,
                    args=tuple(resolved.save_args or ()),
                    kwargs=dict(resolved.save_kwargs or {}),
                )
                records[name] = {
                    "adapter": adapter.adapter_id,
                    "adapter_version": adapter.format_version,
                    "path": relative.as_posix(),
                    "files": sorted(
                        f.relative_to(folder).as_posix() for f in folder.rglob("*") if f.is_file()
                    ),
                }
            manifest = {
                "format": _FORMAT_NAME,
                "format_version": _FORMAT_VERSION,
                "container": output_format,
                "checkpoint_id": uuid.uuid4().hex,
                "created_at": datetime.now(UTC).isoformat(),
                "versions": _runtime_versions(),
                "metadata": to_json_value(metadata or {}),
                "components": records,
            }
            with (stage / _MANIFEST_NAME).open("w", encoding="utf-8") as file:
                json.dump(manifest, file, indent=2, sort_keys=True)
                file.write("\n")
            if output_format == "directory":
                _fsync_tree(stage)
                _publish(stage, destination)
            else:
                self._publish_archive(stage, destination)
            return destination
        finally:
            _remove_path(stage)

    def _publish_archive(self, stage: Path, destination: Path) -> None:
        archive = _temporary(destination, "archive")
        compression = (
            zipfile.ZIP_STORED if self.archive_compression == "stored" else zipfile.ZIP_DEFLATED
        )
        try:
            with zipfile.ZipFile(archive, "w", compression=compression) as file:
                for source in sorted(stage.rglob("*")):
                    if source.is_file():
                        file.write(source, source.relative_to(stage).as_posix())
            fd = os.open(archive, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            _publish(archive, destination)
        finally:
            _remove_path(archive)

    # ------------------------------------------------------------------ load
    def load(
        self,
        path: str | Path,
        *,
        components: Collection[str] | None = None,
        component_options: Mapping[str, CheckpointOptions] | None = None,
        map_location: Any = None,
        tensor_load_kwargs: Mapping[str, Any] | None = None,
        strict: CheckpointStrictness | None = None,
    ) -> CheckpointLoadResult:
        """Restores the selected components from the checkpoint at ``path``.

        When ``path`` is missing because a save was killed between its two renames, the
        previous checkpoint it had moved aside is put back first, if its writer is dead;
        liveness is checked by process id on this host, so writers on other machines
        sharing the folder must not save to the same path.

        Args:
            path (str or Path): a checkpoint directory or archive.
            components (Collection[str], optional): the registered names to restore.
                Defaults to all.
            component_options (Mapping[str, CheckpointOptions], optional): options for this
                load, merged over those given at registration.
            map_location (optional): a device, or a mapping from saved device to device,
                for the tensors read.
            tensor_load_kwargs (Mapping, optional): keyword arguments of :func:`torch.load`
                for ``"torch"`` state-dict payloads (``mmap``, ...). ``weights_only`` is
                always ``True``.
            strict (str, optional): overrides the checkpoint's ``strict`` for this load.

        Returns:
            A :class:`CheckpointLoadResult`.

        Raises:
            CheckpointError: with ``strict="error"``, a requested component that is missing,
                was written by another adapter, or fails to load (a crafted or damaged file
                included); the partial result is ``error.result``. Also: ``path`` is not a
                checkpoint.
            KeyError: an unregistered name in ``components`` or ``component_options``.
            ValueError: ``tensor_load_kwargs`` asks for ``weights_only=False``.
        """
        source = self._local_path(path)
        load_strict = self.strict if strict is None else strict
        _check_strict(load_strict)
        tensor_kwargs = dict(tensor_load_kwargs or {})
        check_weights_only(tensor_kwargs)
        if not (source.exists() or source.is_symlink()):
            _recover_interrupted_publish(source)
        manifest = self.manifest(source)
        requested = self._selection(components)
        records: Mapping[str, Any] = manifest["components"]
        result = CheckpointLoadResult(
            missing=requested - set(records),
            unrequested=set(records) - requested,
            manifest=manifest,
            comparison=self._compare_versions(manifest.get("versions")),
        )
        if result.comparison.get("version_skew", False):
            skew = ", ".join(
                f"{name} (checkpoint={cmp['checkpoint']!r}, runtime={cmp['runtime']!r})"
                for name, cmp in result.comparison["versions"].items()
                if not cmp["matches"]
            )
            _logger.warning(
                "Checkpoint dependency version skew detected: %s. The mismatch is non-fatal, "
                "but restored state may be incompatible.",
                skew,
            )
        options = dict(component_options or {})
        unknown = set(options) - requested
        if unknown:
            raise KeyError(
                f"options were given for checkpoint components that are not loaded: {sorted(unknown)}"
            )
        adapters: dict[str, CheckpointAdapter] = {}
        for name in sorted(requested & set(records)):
            try:
                adapter = self._resolve_adapter(name, self._components[name])
            except TypeError as err:
                result.incompatible[name] = str(err)
                continue
            record = records[name]
            if record["adapter"] != adapter.adapter_id:
                result.incompatible[name] = (
                    f"manifest adapter is {record['adapter']!r}, target adapter is {adapter.adapter_id!r}"
                )
            elif record["adapter_version"] != adapter.format_version:
                result.incompatible[name] = (
                    f"manifest adapter version is {record['adapter_version']}, target adapter "
                    f"version is {adapter.format_version}"
                )
            else:
                adapters[name] = adapter
        self._handle_load_issues(result, load_strict)
        with self._materialize(source, {name: records[name] for name in adapters}) as root:
            for name in sorted(adapters):
                registration = self._components[name]
                resolved = registration.options.merged(options.get(name))
                try:
                    value = adapters[name].load(
                        registration.value,
                        root / _record_path(records[name]["path"]),
                        map_location=map_location,
                        tensor_load_kwargs=tensor_kwargs,
                        args=tuple(resolved.load_args or ()),
                        kwargs=dict(resolved.load_kwargs or {}),
                    )
                    if root != source:
                        adapters[name]._detach_from_load_path(registration.value)
                except Exception as err:
                    result.incompatible[name] = str(err)
                    if load_strict == "error":
                        raise CheckpointError(
                            f"failed to load checkpoint component {name!r}: {err}", result
                        ) from err
                    if load_strict == "warn":
                        _logger.warning("Failed to load checkpoint component %r: %s", name, err)
                    continue
                result.loaded.add(name)
                if value is not None:
                    result.values[name] = value
        return result

    @staticmethod
    def _compare_versions(saved: object) -> dict[str, Any]:
        if not isinstance(saved, Mapping):
            return {}
        versions = {
            name: {"checkpoint": saved[name], "runtime": runtime, "matches": saved[name] == runtime}
            for name, runtime in _runtime_versions().items()
            if isinstance(saved.get(name), str)
        }
        return {
            "versions": versions,
            "version_skew": any(not v["matches"] for v in versions.values()),
        }

    @staticmethod
    def _handle_load_issues(result: CheckpointLoadResult, strict: CheckpointStrictness) -> None:
        if not result.missing and not result.incompatible:
            return
        parts = []
        if result.missing:
            parts.append(f"missing={sorted(result.missing)}")
        if result.incompatible:
            parts.append(f"incompatible={result.incompatible}")
        message = "Checkpoint restore issues: " + ", ".join(parts)
        if strict == "error":
            raise CheckpointError(message, result)
        if strict == "warn":
            _logger.warning(message)

    @staticmethod
    @contextmanager
    def _materialize(source: Path, records: Mapping[str, Mapping[str, Any]]):
        """The folder the components are read from: the checkpoint directory itself, or the
        selected components' files extracted from the archive to a temporary folder."""
        if source.is_dir():
            yield source
            return
        temporary = Path(tempfile.mkdtemp(prefix="rl-checkpoint-load-"))
        try:
            with zipfile.ZipFile(source) as archive:
                members = set(archive.namelist())
                selected = []
                for record in records.values():
                    root = _record_path(record["path"])
                    for relative in record["files"]:
                        member = (root / _record_path(relative)).as_posix()
                        if member not in members:
                            raise CheckpointError(
                                f"{source} lists {member!r} in its manifest but does not hold it"
                            )
                        selected.append((root, member))
                # the sizes the archive declares, checked before anything is inflated (a
                # small compressed member can declare gigabytes); zipfile never inflates a
                # member past its declared size
                free = shutil.disk_usage(temporary).free
                total = 0
                for _, member in selected:
                    total += archive.getinfo(member).file_size
                    if total > free:
                        raise CheckpointError(
                            f"{source}: extracting up to entry {member!r} needs {total} bytes, "
                            f"more than the {free} free in {temporary.parent}; refusing to "
                            f"inflate it"
                        )
                for root, member in selected:
                    (temporary / root).mkdir(parents=True, exist_ok=True)
                    target = temporary / member
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with archive.open(member) as reader, target.open("wb") as writer:
                        shutil.copyfileobj(reader, writer)
            yield temporary
        finally:
            _remove_path(temporary)

    # ------------------------------------------------------------------ manifest
    @classmethod
    def is_checkpoint(cls, path: str | Path) -> bool:
        """Whether ``path`` holds a readable checkpoint manifest (read-only, as
        :meth:`manifest`)."""
        try:
            cls.manifest(path)
        except (CheckpointError, OSError, TypeError, ValueError):
            return False
        return True

    @classmethod
    def register_migration(
        cls, from_version: int, migration: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> None:
        """Registers ``migration``, which turns a manifest of format ``from_version`` into
        one of ``from_version + 1`` (component payloads are the adapters' business)."""
        if isinstance(from_version, bool) or not isinstance(from_version, int) or from_version < 0:
            raise ValueError(f"from_version must be a non-negative integer, got {from_version!r}")
        if not callable(migration):
            raise TypeError(f"migration must be callable, got {type(migration).__name__}")
        cls._format_migrations[from_version] = migration

    @classmethod
    def manifest(cls, path: str | Path) -> dict[str, Any]:
        """Reads and checks the manifest of the checkpoint at ``path``, migrating an older
        format, without reading any component.

        Read-only: a checkpoint that an interrupted save left moved aside is not put back
        here (``save`` and ``load`` do that), so ``path`` must exist.

        Raises:
            FileNotFoundError: nothing at ``path``.
            CheckpointError: not a checkpoint, a newer or unknown format version, or a
                manifest whose entries are malformed or point outside the checkpoint.
        """
        source = cls._local_path(path)
        if not source.exists():
            raise FileNotFoundError(f"checkpoint path does not exist: {source}")
        try:
            if source.is_dir():
                manifest = json.loads((source / _MANIFEST_NAME).read_text(encoding="utf-8"))
            elif zipfile.is_zipfile(source):
                with zipfile.ZipFile(source) as archive:
                    size = archive.getinfo(_MANIFEST_NAME).file_size
                    if size > MAX_JSON_BYTES:
                        raise CheckpointError(
                            f"{source}: entry {_MANIFEST_NAME!r} declares {size} bytes, expected "
                            f"at most {MAX_JSON_BYTES}; refusing to inflate it"
                        )
                    manifest = json.loads(archive.read(_MANIFEST_NAME))
            else:
                raise CheckpointError(
                    f"{source} is neither a checkpoint directory nor a checkpoint archive"
                )
        except (
            FileNotFoundError,
            KeyError,
            UnicodeDecodeError,
            json.JSONDecodeError,
            zipfile.BadZipFile,
        ) as err:
            raise CheckpointError(f"invalid checkpoint manifest at {source}: {err}") from None
        if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT_NAME:
            raise CheckpointError(
                f"{source} does not hold a checkpoint (no {_FORMAT_NAME!r} manifest)"
            )
        version = manifest.get("format_version")
        while (
            isinstance(version, int)
            and not isinstance(version, bool)
            and 0 <= version < _FORMAT_VERSION
        ):
            migration = cls._format_migrations.get(version)
            if migration is None:
                raise CheckpointError(
                    f"unsupported older checkpoint format version {version}; no migration to "
                    f"version {version + 1} is registered"
                )
            manifest = migration(dict(manifest))
            following = manifest.get("format_version")
            if following != version + 1 or isinstance(following, bool):
                raise CheckpointError(
                    f"checkpoint migration from version {version} returned version {following!r}; "
                    f"expected {version + 1}"
                )
            version = following
        if version != _FORMAT_VERSION or isinstance(version, bool):
            newer = (
                isinstance(version, int)
                and not isinstance(version, bool)
                and version > _FORMAT_VERSION
            )
            direction = "newer" if newer else "invalid"
            raise CheckpointError(
                f"unsupported {direction} checkpoint format version {version!r}; this build "
                f"supports version {_FORMAT_VERSION}"
            )
        if not isinstance(manifest.get("components"), dict):
            raise CheckpointError(f"the manifest of {source} has no component mapping")
        for name, record in manifest["components"].items():
            cls._check_record(name, record, source)
        return manifest

    @staticmethod
    def _check_record(name: Any, record: Any, source: Path) -> None:
        where = f"{source}: component {name!r}"
        if not isinstance(name, str) or not isinstance(record, Mapping):
            raise CheckpointError(f"{where} has an invalid manifest entry")
        version = record.get("adapter_version")
        if (
            not isinstance(record.get("adapter"), str)
            or not isinstance(version, int)
            or isinstance(version, bool)
        ):
            raise CheckpointError(f"{where} has invalid adapter metadata")
        relative, files = record.get("path"), record.get("files")
        if (
            not isinstance(relative, str)
            or not isinstance(files, list)
            or not all(isinstance(f, str) for f in files)
        ):
            raise CheckpointError(f"{where} has an invalid file inventory")
        _check_member(_record_path(relative), where)
        for file in files:
            _check_member(_record_path(file), where)

    # ------------------------------------------------------------------ helpers
    def _resolve_adapter(self, name: str, component: _Component) -> CheckpointAdapter:
        if component.adapter is not None:
            return component.adapter
        for component_type, adapter in self._adapter_registry:
            if isinstance(component.value, component_type):
                return adapter
        value = component.value
        if callable(getattr(value, "dump", None)) and callable(getattr(value, "load", None)):
            return DumpLoadCheckpointAdapter()
        if callable(getattr(value, "state_dict", None)) and callable(
            getattr(value, "load_state_dict", None)
        ):
            return StateDictCheckpointAdapter()
        if _is_json_value(value):
            return JSONCheckpointAdapter()
        raise TypeError(
            f"no checkpoint adapter fits component {name!r} of type {type(value).__name__}: give "
            f"an adapter, or implement dump/load or state_dict/load_state_dict"
        )

    def _selection(self, components: Collection[str] | None) -> set[str]:
        if isinstance(components, str):
            raise TypeError(
                f"components must be a collection of names, got the string {components!r}"
            )
        selected = set(self._components) if components is None else set(components)
        unknown = selected - set(self._components)
        if unknown:
            raise KeyError(
                f"unregistered checkpoint components: {sorted(unknown)}; registered: {sorted(self._components)}"
            )
        return selected

    @staticmethod
    def _local_path(path: str | Path) -> Path:
        if "://" in str(path):
            raise ValueError(f"Only local checkpoint paths are supported, got {str(path)!r}")
        return Path(path).expanduser().absolute()
