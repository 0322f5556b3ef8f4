"""Memory-mapped storage on disk: ``LazyMemmapStorage``."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX
    fcntl = None

import numpy as np
import torch
from tensordict import MemoryMappedTensor, TensorDict, TensorDictBase, is_non_tensor

from rl.core.trainers import CheckpointError
from rl.data.replay_buffers._utils import dtype_from_name
from rl.data.replay_buffers.storages._layout import ItemLayout
from rl.data.replay_buffers.storages._tensor import LazyTensorStorage

_META = "rl_storage.json"
_COUNTER = "rl_storage_len.bin"
_COUNTER_FIELDS = 5
_TENSOR_FILE = "data.memmap"


def _check_writable(path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"scratch_dir '{path}' exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise PermissionError(
            f"scratch_dir '{path}' cannot be created ({err.strerror}); pass a writable directory"
        ) from None
    probe = path / f".rl-write-probe-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise PermissionError(
            f"scratch_dir '{path}' is not writable ({err.strerror}); pass a writable directory"
        ) from None


def _reserve_disk(stored: torch.Tensor | TensorDictBase) -> None:
    """Allocates the files' blocks now.

    Writing into a sparse memory map when the disk is full kills the process with
    SIGBUS; reserving the space turns that into an error (``ENOSPC``) at allocation.
    """
    if isinstance(stored, TensorDictBase):
        tensors = list(stored.values(include_nested=True, leaves_only=True))
    else:
        tensors = [stored]
    for tensor in tensors:
        filename = getattr(tensor, "filename", None)
        size = tensor.numel() * tensor.element_size()
        if filename is None or size == 0:
            continue
        fd = os.open(filename, os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as err:
            if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
        finally:
            os.close(fd)


def _remove_new_paths(root: Path, before: set[Path]) -> None:
    """Deletes what appeared under ``root`` since ``before`` was listed (files first)."""
    for path in sorted(set(root.rglob("*")) - before, key=lambda p: len(p.parts), reverse=True):
        try:
            if path.is_dir() and not path.is_symlink():
                path.rmdir()
            else:
                path.unlink()
        except OSError:
            pass


def _remove_dir(path: Path, owner_pid: int) -> None:
    """Removes ``path`` from the process that planned it only: a forked child inherits
    the finalizer, and its exit must not delete files its parent still uses."""
    if os.getpid() == owner_pid:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _dir_lock(path: Path):
    """An exclusive ``flock`` on the directory itself, between processes (each opens its
    own descriptor, so forked processes exclude each other too)."""
    if fcntl is None:  # pragma: no cover
        raise NotImplementedError("shared_init=True needs POSIX file locks (fcntl)")
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _human_size(nbytes: float) -> str:
    """``nbytes`` in kB, MB or GB, whichever reads best."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes / 1e3:.1f} kB"


def _free_space(path: Path) -> str:
    try:
        st = os.statvfs(path)
    except OSError:
        return "unknown"
    return _human_size(st.f_bavail * st.f_frsize)


class LazyMemmapStorage(LazyTensorStorage):
    """A storage of memory-mapped tensors on disk, allocated on the first write.

    The data lives in ``scratch_dir`` as tensordict memory-mapped files. The number of valid
    items is kept in a small memory-mapped counter next to them, so constructing a storage on
    the same directory again (after a process restart) gives back the data written so far.

    A process killed at any instant (``SIGKILL`` included) leaves every item the storage
    counts as valid whole: before a write overwrites valid items (a full ring), the counter
    records their rows as in flight, and reopening the directory drops those rows (the
    oldest items, which the write was replacing) and keeps the others in ring order. This
    costs a few stores into the counter per write. (Power loss is another matter: nothing
    is fsynced.)

    Non-tensor entries (strings, paths...) are saved as tensordict's memory-mapped
    TensorDicts save them, as TorchRL's storage does: the values of all rows in one JSON
    file per entry (``<key>/meta.json``), rewritten by each write that changes them (a cost
    that grows with ``max_size``). Values JSON cannot hold are pickled by tensordict; a
    directory holding such a file is refused on reopening (nothing is unpickled). Items
    with batch dims (``ndim > 1``) cannot hold them: tensordict cannot write the rows of a
    memory-mapped stack of stacks (a ``NotImplementedError`` at the first write).

    Args:
        max_size: the capacity.
        scratch_dir: the directory of the files; a temporary directory when omitted.
        device: where sampled batches are sent; the data itself stays on disk.
        existsok: when ``False``, a directory that already holds a storage is an error
            instead of being reopened.
        shared_init: coordinate the first write of several processes that share
            ``scratch_dir`` (forked after construction, or each building the storage on
            the same directory): the first one to write allocates the files, under a
            lock on the directory; the others then open those files instead of
            allocating their own, so all write into and read from the same rows. Only
            the allocation is shared: each process keeps its own length and write
            cursor (as TorchRL's storage without a shared writer), so processes that
            write should write to their own rows (``set`` with explicit indices).
            Non-tensor entries (strings...) are refused: their values live in each
            process's memory. Without it a second allocation in the same directory is an error. When
            ``scratch_dir`` is omitted, pickled copies keep the original's temporary
            directory (instead of making their own).
        auto_cleanup: remove ``scratch_dir`` and its files when the storage is garbage
            collected or the interpreter exits. ``None`` (default): only a temporary
            directory this storage made (``scratch_dir`` omitted); ``True``: also a
            directory you gave; ``False``: never (a temporary directory is kept too).
            Unlike TorchRL, no ``SIGINT`` / ``SIGTERM`` handler is installed: a library
            does not take over a process's signals (``KeyboardInterrupt`` still exits
            through the normal path, which cleans up). Copies (pickling, ``deepcopy``)
            never remove the files; call :meth:`cleanup` on one to do so.

    Raises:
        PermissionError: ``scratch_dir`` cannot be created or written to.
        ValueError: ``scratch_dir`` holds a storage of another ``max_size``.
        OSError: (at the first write, which creates the files) the disk cannot hold
            ``max_size`` items (``errno.ENOSPC``); the files created are removed.

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from rl.data import LazyMemmapStorage
        >>> path = tempfile.mkdtemp()
        >>> storage = LazyMemmapStorage(100, scratch_dir=path)
        >>> storage.set(slice(0, 3), TensorDict({"obs": torch.arange(3.0)}, batch_size=[3]))
        >>> reopened = LazyMemmapStorage(100, scratch_dir=path)
        >>> len(reopened), reopened.get(torch.tensor([2]))["obs"]
        (3, tensor([2.]))
    """

    _adds_entries = False  # its files are made once, at the first write

    def __init__(
        self,
        max_size: int,
        *,
        scratch_dir: str | os.PathLike | None = None,
        device: torch.device | str = "cpu",
        existsok: bool = True,
        ndim: int = 1,
        compilable: bool = False,
        shared_init: bool = False,
        auto_cleanup: bool | None = None,
    ) -> None:
        if auto_cleanup is not None and not isinstance(auto_cleanup, bool):
            raise TypeError(f"auto_cleanup must be None, True or False, got {auto_cleanup!r}")
        if shared_init and compilable:
            raise ValueError(
                "LazyMemmapStorage(shared_init=True) cannot be compilable=True: a compiled "
                "storage is not shared between processes"
            )
        super().__init__(max_size, device="cpu", ndim=ndim, compilable=compilable)
        self.shared_init = bool(shared_init)
        self._out_device = torch.device(device)
        self._finalizer: weakref.finalize | None = None
        self._auto_cleanup = scratch_dir is None if auto_cleanup is None else auto_cleanup
        self._temp_dir = scratch_dir is None
        if scratch_dir is None:
            self.scratch_dir = Path(tempfile.mkdtemp(prefix="rl-memmap-"))
        else:
            self.scratch_dir = Path(scratch_dir)
            _check_writable(self.scratch_dir)
        self._counter: np.ndarray | None = None
        if (self.scratch_dir / _META).exists():
            if not existsok:
                raise FileExistsError(
                    f"scratch_dir '{self.scratch_dir}' already holds a storage and existsok=False"
                )
            self._reopen()
        # planned last: a constructor that raised above (a storage it refuses to reopen)
        # leaves the directory and its data as they were
        if self._auto_cleanup:
            self._remove_at_exit()

    # -- files -----------------------------------------------------------------------------------
    def _remove_at_exit(self) -> None:
        """Removes ``scratch_dir`` when this storage is collected or at interpreter exit
        (``weakref.finalize`` runs its pending callbacks from ``atexit``)."""
        self._finalizer = weakref.finalize(self, _remove_dir, self.scratch_dir, os.getpid())

    def cleanup(self) -> bool:
        """Removes ``scratch_dir`` and the files in it now.

        The storage is unusable afterwards (its data is gone); an automatic removal
        planned by ``auto_cleanup`` is cancelled.

        Returns:
            ``True`` if files were removed, ``False`` if there was nothing to remove
            (already cleaned up, never written, or the directory no longer exists); an
            empty directory is removed all the same.

        Examples:
            >>> import os, torch
            >>> from rl.data import LazyMemmapStorage
            >>> storage = LazyMemmapStorage(10)
            >>> storage.set(0, torch.zeros(3))
            >>> storage.cleanup(), os.path.exists(storage.scratch_dir), storage.cleanup()
            (True, False, False)
        """
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if not self.scratch_dir.is_dir():
            return False
        held_files = any(self.scratch_dir.iterdir())
        shutil.rmtree(self.scratch_dir, ignore_errors=True)
        return held_files and not self.scratch_dir.exists()

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        # a finalizer does not copy (the copy's would be dead): record the ownership instead
        state["_finalizer"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        if self._temp_dir and self._storage is None and not self.shared_init:
            # not allocated yet: the copy gets its own files (the original allocates its
            # own later in the directory they would otherwise share)
            self.scratch_dir = Path(tempfile.mkdtemp(prefix="rl-memmap-"))
            if self._auto_cleanup:
                self._remove_at_exit()

    def _open_counter(self, create: bool) -> None:
        path = self.scratch_dir / _COUNTER
        if create:
            np.zeros(_COUNTER_FIELDS, dtype=np.int64).tofile(path)
        elif path.stat().st_size < _COUNTER_FIELDS * 8:
            # written by a version that kept [len, write_end] only: no write in flight
            old = np.fromfile(path, dtype=np.int64)
            tmp = path.with_name(path.name + ".tmp")
            np.concatenate([old, np.zeros(_COUNTER_FIELDS - old.size, np.int64)]).tofile(tmp)
            os.replace(tmp, path)
        # [valid rows, row after the last written, in-flight start, in-flight count,
        #  write_end after the recovery under way + 1]
        mapping = np.memmap(path, dtype=np.int64, mode="r+", shape=(_COUNTER_FIELDS,))
        self._counter = mapping.view(np.ndarray)  # same bytes; plain ndarray stores are cheaper
        self._in_flight = False

    def _reopen(self, recover: bool = True) -> None:
        """Adopts the files of ``scratch_dir``: JSON and raw tensor data, nothing unpickled
        (tensordict refuses pickled entries and classes it does not know)."""
        meta = self._read_meta()
        if meta["max_size"] != self.max_size:
            raise ValueError(
                f"scratch_dir '{self.scratch_dir}' holds a storage of max_size {meta['max_size']}, "
                f"got max_size={self.max_size}"
            )
        # the sizes before loading: tensordict extends a file shorter than its shape
        sizes = {os.path.realpath(f): f.stat().st_size for f in self.scratch_dir.rglob("*.memmap")}
        try:
            if meta["kind"] == "tensordict":
                stored = TensorDict.load_memmap(self.scratch_dir, allow_pickle=False)
            else:
                stored = MemoryMappedTensor.from_filename(
                    self.scratch_dir / _TENSOR_FILE,
                    dtype=dtype_from_name(meta["dtype"]),
                    shape=torch.Size(meta["shape"]),
                )
        except (RuntimeError, KeyError, ValueError, TypeError, OSError) as err:
            raise self._unreadable(f"its tensors cannot be loaded ({err})") from None
        self._check_files(stored, sizes)
        self._adopt(stored)
        layout = meta.get("layout")
        if isinstance(layout, dict) and isinstance(layout.get("pytree"), str):
            # pytrees come back as they were written; tensorclasses as TensorDicts (their
            # class is never imported from the files)
            try:
                self._layout = ItemLayout.from_state(layout, None)
            except (ValueError, TypeError, KeyError, NotImplementedError) as err:
                raise self._unreadable(f"its item structure cannot be read ({err})") from None
        self._open_counter(create=False)
        self._check_counter()
        if recover:  # not while a sibling process may be writing (shared_init)
            self._recover()

    def _unreadable(self, reason: str) -> CheckpointError:
        return CheckpointError(
            f"scratch_dir '{self.scratch_dir}' does not hold a readable LazyMemmapStorage: {reason}"
        )

    def _read_meta(self) -> dict[str, Any]:
        try:
            meta = json.loads((self.scratch_dir / _META).read_text())
        except (ValueError, UnicodeDecodeError) as err:
            raise self._unreadable(f"{_META} is not JSON ({err})") from None
        if not isinstance(meta, dict) or meta.get("kind") not in ("tensordict", "tensor"):
            raise self._unreadable(
                f"{_META} has kind {meta.get('kind') if isinstance(meta, dict) else meta!r}, "
                "expected 'tensordict' or 'tensor'"
            )
        if not _is_count(meta.get("max_size")):
            raise self._unreadable(f"{_META} has max_size {meta.get('max_size')!r}")
        if meta["kind"] == "tensor":
            shape = meta.get("shape")
            if not isinstance(shape, list) or not all(_is_count(n) for n in shape):
                raise self._unreadable(f"{_META} has shape {shape!r}, expected a list of sizes")
        return meta

    def _check_files(self, stored: torch.Tensor | TensorDictBase, sizes: dict[str, int]) -> None:
        """Each tensor's file holds all its bytes (a map past the end of a file kills the
        process with SIGBUS on the first read there)."""
        if isinstance(stored, TensorDictBase):
            tensors = dict(stored.items(include_nested=True, leaves_only=True))
            rows = stored.batch_size[0] if stored.batch_size else None
        else:
            tensors, rows = {_TENSOR_FILE: stored}, None
        for key, tensor in tensors.items():
            if not isinstance(tensor, torch.Tensor):
                raise self._unreadable(f"the entry {key!r} is a {type(tensor).__name__}")
            if rows is not None and (tensor.ndim == 0 or tensor.shape[0] != rows):
                raise self._unreadable(
                    f"the entry {key!r} has shape {tuple(tensor.shape)}, expected {rows} rows"
                )
            filename = getattr(tensor, "filename", None)
            if filename is None:
                continue
            size = sizes.get(os.path.realpath(filename), os.path.getsize(filename))
            needed = tensor.numel() * tensor.element_size()
            if size < needed:
                raise self._unreadable(
                    f"the file of {key!r} holds {size} bytes, its shape {tuple(tensor.shape)} "
                    f"needs {needed}"
                )

    def _check_counter(self) -> None:
        length, end, start, count, target = (int(v) for v in self._counter)
        rows = self._rows
        if not (
            0 <= length <= rows
            and 0 <= end <= rows
            and 0 <= start < max(rows, 1)
            and 0 <= count <= rows
            and 0 <= target <= rows + 1
        ):
            raise self._unreadable(
                f"{_COUNTER} holds {[length, end, start, count, target]}, out of range for "
                f"{rows} rows"
            )

    def _init(self, data: Any, batched: bool = False) -> None:
        if not self.shared_init:
            super()._init(data, batched)
            return
        if isinstance(data, TensorDictBase):
            for key, value in data.items(include_nested=True):
                if is_non_tensor(value):
                    # its values live in each process's memory (the JSON file holds the
                    # last writer's): the processes would silently disagree
                    raise TypeError(
                        f"shared_init=True shares tensors only: entry {key!r} holds "
                        f"non-tensor data ({type(value).__name__}), which each process "
                        "would keep its own copy of; store it as a tensor, or use a "
                        "storage without shared_init"
                    )
        with _dir_lock(self.scratch_dir):
            if (self.scratch_dir / _META).exists():
                # a sibling process wrote first: open its files (the structure of
                # ``data`` is checked by the write that follows). Its write in flight
                # is not a crash to repair: no recovery here
                self._reopen(recover=False)
            else:
                super()._init(data, batched)

    def _open_shared(self) -> bool:
        """Opens the files a sibling process allocated in ``scratch_dir`` (``shared_init``);
        ``False`` when none has written yet."""
        with _dir_lock(self.scratch_dir):
            if not (self.scratch_dir / _META).exists():
                return False
            self._reopen(recover=False)
        return True

    def _allocate(self, template: torch.Tensor | TensorDictBase) -> torch.Tensor | TensorDictBase:
        if isinstance(template, TensorDictBase) and template.batch_dims:
            for key, value in template.items(include_nested=True):
                if is_non_tensor(value):
                    # tensordict cannot write rows of a memory-mapped stack of stacks
                    raise NotImplementedError(
                        f"LazyMemmapStorage keeps non-tensor data of items without batch "
                        f"dims only: entry {key!r} ({type(value).__name__}) is in items of "
                        f"batch_size {list(template.batch_size)} (ndim > 1, or items with "
                        "a batch dim); use LazyTensorStorage, or store the entry as a tensor"
                    )
        if (self.scratch_dir / _META).exists():
            # another storage (e.g. a copy of this one made before its first write) has
            # allocated its files here since this one was made: never write over them
            raise FileExistsError(
                f"scratch_dir '{self.scratch_dir}' already holds a storage written by another "
                "LazyMemmapStorage; give each storage its own scratch_dir"
            )
        before = set(self.scratch_dir.rglob("*"))
        try:
            return self._create_files(template)
        except BaseException as err:
            # nothing half-made stays behind: a full disk would otherwise keep what the
            # files got before it filled
            self._counter = None
            _remove_new_paths(self.scratch_dir, before)
            if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
                leaves = (
                    template.values(include_nested=True, leaves_only=True)
                    if isinstance(template, TensorDictBase)
                    else [template]
                )
                needed = self._rows * sum(t.numel() * t.element_size() for t in leaves)
                raise OSError(
                    err.errno,
                    f"scratch_dir '{self.scratch_dir}' has not enough free space for "
                    f"max_size={self.max_size} items: {_human_size(needed)} needed, "
                    f"{_free_space(self.scratch_dir)} free (the disk is full); the files "
                    "created for them were removed",
                ) from None
            raise

    def _create_files(
        self, template: torch.Tensor | TensorDictBase
    ) -> torch.Tensor | TensorDictBase:
        if isinstance(template, TensorDictBase):
            stored = template.expand(self._rows, *template.batch_size).memmap_like(
                prefix=self.scratch_dir, existsok=True
            )
            meta = {"kind": "tensordict", "max_size": self.max_size}
            if self._layout is not None:
                meta["layout"] = self._layout.state()
        else:
            shape = torch.Size((self._rows, *template.shape))
            stored = MemoryMappedTensor.empty(
                shape, dtype=template.dtype, filename=self.scratch_dir / _TENSOR_FILE
            )
            meta = {
                "kind": "tensor",
                "max_size": self.max_size,
                "dtype": str(template.dtype).removeprefix("torch."),
                "shape": list(shape),
            }
        _reserve_disk(stored)
        self._open_counter(create=True)
        tmp = self.scratch_dir / (_META + ".tmp")
        tmp.write_text(json.dumps(meta))
        os.replace(tmp, self.scratch_dir / _META)
        return stored

    def _leaf_view(self, tensor: torch.Tensor) -> torch.Tensor:
        # Reads and writes go through a numpy mapping of the same file: copying into it is
        # ~1.4x faster than into the torch.from_file mapping (same bytes, same page cache).
        filename = getattr(tensor, "filename", None)
        try:
            np_dtype = torch.empty((), dtype=tensor.dtype).numpy().dtype
        except TypeError:  # no numpy equivalent (bfloat16...)
            np_dtype = None
        if filename is None or np_dtype is None or tensor.numel() == 0:
            return tensor.as_subclass(torch.Tensor)
        array = np.memmap(filename, dtype=np_dtype, mode="r+", shape=tuple(tensor.shape))
        return torch.from_numpy(array)

    # -- crash safety ----------------------------------------------------------------------------
    # The counter file is a shared memory map: each store below reaches the page cache when
    # it executes, so a process killed at any instant leaves the stores made before the
    # kill and none after. Before a write overwrites valid rows, the rows it covers are
    # recorded as in flight (start, then count: the record is in effect once count is
    # set); the valid rows are [0, len) minus the rows in flight. Reopening the directory
    # (or an exception in the middle of the copy) drops the rows in flight: see _recover.
    _journals_writes = True

    def _mark_in_flight(self, cursor: int | slice | torch.Tensor, lo: int, end: int) -> None:
        if lo >= self._len or end <= lo:
            return  # past the valid rows: a kill leaves them past len
        start, count = lo, end - lo
        if isinstance(cursor, torch.Tensor) and cursor.numel() > 1:
            # a write that wraps around the end (a full ring): the ring span from the
            # first index covers it exactly, where [lo, end) covers the whole storage
            index = cursor.numpy()
            first = int(index[0])
            ring = int(((index - first) % self._rows).max()) + 1
            if ring < count:
                start, count = first, ring
        counter = self._counter
        counter[2] = start
        counter[3] = count
        self._in_flight = True

    def _record_write(self, new_len: int, write_end: int) -> None:
        super()._record_write(new_len, write_end)
        # after the data: a process killed in between loses the last write, nothing else
        counter = self._counter
        counter[1] = self._write_end
        counter[0] = self._len
        if self._in_flight:
            counter[3] = 0
            self._in_flight = False

    def _write_interrupted(self) -> None:
        self._recover()

    def _move_rows(self, source: int, dest: int, count: int) -> None:
        """Copies the rows ``[source, source + count)`` to ``[dest, dest + count)``
        (the two ranges do not overlap)."""
        tensors = [t for _, t in self._leaves] if self._is_td else [self._tensor]
        for t in tensors:
            t.narrow(0, dest, count).copy_(t.narrow(0, source, count))
        for key in self._objects:
            stack = self._storage.get(key)
            stack[dest : dest + count] = stack[source : source + count]

    def _recover(self) -> None:
        """Drops the rows of a write left in flight, keeping the others whole and in order.

        A round-robin writer overwrites the oldest items: those in flight. What is left is
        made contiguous again, ``[0, len)``, keeping the order of the ring:

        - rows in flight at the end of the valid rows: ``len`` shrinks to their start;
        - at the start (``[0, k)``, or a write that wrapped around the end) where they
          held the oldest items: the last ``k`` valid rows move there, a rotation of the
          ring (``write_end = k`` points at the oldest item);
        - otherwise (``[s, s + k)``): the rows after them move down by ``k``, ``k`` rows
          at a time, and ``write_end`` follows the item it pointed at.

        Every copy goes into rows in flight, and the in-flight record moves with the
        copies: a process killed during the recovery leaves a state that the next
        reopening recovers the same way. (Killed in the few stores that end it, the
        next reopening may drop more rows; it never counts a torn one.)
        """
        counter, rows = self._counter, self._rows
        length, start, count = int(counter[0]), int(counter[2]), int(counter[3])
        if count:
            if start + count > rows:  # wrapped around the end: [start, rows) and [0, head)
                head = start + count - rows
                if start < length:
                    counter[0] = length = start
                counter[2] = 0  # (0, count) covers [0, head): still a superset
                counter[3] = count = head
                start = 0
            count = min(count, length - start)
            if count > 0:
                position = int(counter[1])
                kept = length - count
                # the rows in flight held the oldest items when write_end pointed at them
                rotate = start == 0 and kept > 0 and (position <= count or position >= length)
                target = int(counter[4]) - 1  # decided by an earlier, interrupted recovery
                if target < 0:
                    if rotate:
                        target = min(count, kept)
                    elif position < start:
                        target = position
                    else:
                        target = max(start, position - count)
                    counter[4] = target + 1
                if rotate:
                    self._move_rows(max(count, kept), 0, min(count, kept))
                    new_len = kept
                else:
                    h = start
                    while h + count < length:
                        step = min(count, length - h - count)
                        self._move_rows(h + count, h, step)
                        counter[2] = h = h + step
                    new_len = h
                counter[1] = target
                counter[0] = new_len
            counter[3] = 0
        counter[4] = 0
        self._in_flight = False
        self._len = int(counter[0])
        self._write_end = int(counter[1]) % rows

    def _empty(self) -> None:
        super()._empty()
        if self._counter is not None:
            self._counter[:] = 0
            self._in_flight = False

    # -- reads -----------------------------------------------------------------------------------
    @property
    def out_device(self) -> torch.device:
        return self._out_device

    def _row_plan(self, skip: frozenset = frozenset()) -> Any:
        # batches that go to another device take the general path (gather, then move)
        if self._out_device.type != "cpu":
            return None
        return super()._row_plan(skip)

    def _gather(self, index: torch.Tensor, extra: dict | None = None) -> Any:
        if index.device.type != "cpu":
            index = index.cpu()
        if self._out_device.type == "cpu":
            return super()._gather(index, extra)
        out = super()._gather(index, None).to(self._out_device, non_blocking=True)
        if extra:
            out.update({k: v.to(self._out_device) for k, v in extra.items()})
        return out

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(max_size={self.max_size}, len={len(self)}, "
            f"scratch_dir='{self.scratch_dir}')"
        )
