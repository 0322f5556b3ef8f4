"""Memory-mapped storage on disk: ``LazyMemmapStorage``."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import MemoryMappedTensor, TensorDict, TensorDictBase

from rl.data.replay_buffers.storages._tensor import LazyTensorStorage

_META = "rl_storage.json"
_COUNTER = "rl_storage_len.bin"
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


class LazyMemmapStorage(LazyTensorStorage):
    """A storage of memory-mapped tensors on disk, allocated on the first write.

    The data lives in ``scratch_dir`` as tensordict memory-mapped files. The number of valid
    items is kept in a small memory-mapped counter next to them, so constructing a storage on
    the same directory again (after a process restart) gives back the data written so far.

    Args:
        max_size: the capacity.
        scratch_dir: the directory of the files; a temporary directory (deleted with the
            storage) when omitted.
        device: where sampled batches are sent; the data itself stays on disk.
        existsok: when ``False``, a directory that already holds a storage is an error
            instead of being reopened.

    Raises:
        PermissionError: ``scratch_dir`` cannot be created or written to.
        ValueError: ``scratch_dir`` holds a storage of another ``max_size``.

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

    def __init__(
        self,
        max_size: int,
        *,
        scratch_dir: str | os.PathLike | None = None,
        device: torch.device | str = "cpu",
        existsok: bool = True,
        ndim: int = 1,
        compilable: bool = False,
    ) -> None:
        super().__init__(max_size, device="cpu", ndim=ndim, compilable=compilable)
        self._out_device = torch.device(device)
        self._finalizer: weakref.finalize | None = None
        if scratch_dir is None:
            self._own_temp_dir()
        else:
            self.scratch_dir = Path(scratch_dir)
            _check_writable(self.scratch_dir)
        self._counter: np.memmap | None = None
        if (self.scratch_dir / _META).exists():
            if not existsok:
                raise FileExistsError(
                    f"scratch_dir '{self.scratch_dir}' already holds a storage and existsok=False"
                )
            self._reopen()

    # -- files -----------------------------------------------------------------------------------
    def _own_temp_dir(self) -> None:
        """Makes a new temporary directory, deleted with this storage, the scratch dir."""
        self.scratch_dir = Path(tempfile.mkdtemp(prefix="rl-memmap-"))
        self._finalizer = weakref.finalize(self, shutil.rmtree, self.scratch_dir, True)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        # a finalizer does not copy (the copy's would be dead): record the ownership instead
        state["_finalizer"] = None
        state["_owns_temp_dir"] = self._finalizer is not None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        owns_temp_dir = state.pop("_owns_temp_dir", False)
        super().__setstate__(state)
        if owns_temp_dir and self._storage is None:
            # not allocated yet: the copy gets its own files (the original allocates its
            # own later in the directory they would otherwise share)
            self._own_temp_dir()

    def _open_counter(self, create: bool) -> None:
        path = self.scratch_dir / _COUNTER
        if create:
            np.zeros(2, dtype=np.int64).tofile(path)
        # [number of valid items, position after the last item written]
        self._counter = np.memmap(path, dtype=np.int64, mode="r+", shape=(2,))

    def _reopen(self) -> None:
        meta = json.loads((self.scratch_dir / _META).read_text())
        if int(meta["max_size"]) != self.max_size:
            raise ValueError(
                f"scratch_dir '{self.scratch_dir}' holds a storage of max_size {meta['max_size']}, "
                f"got max_size={self.max_size}"
            )
        if meta["kind"] == "tensordict":
            stored = TensorDict.load_memmap(self.scratch_dir, allow_pickle=False)
        else:
            stored = MemoryMappedTensor.from_filename(
                self.scratch_dir / _TENSOR_FILE,
                dtype=getattr(torch, meta["dtype"]),
                shape=torch.Size(meta["shape"]),
            )
        self._adopt(stored)
        self._open_counter(create=False)
        self._len = int(self._counter[0])
        self._write_end = int(self._counter[1])

    def _allocate(self, template: torch.Tensor | TensorDictBase) -> torch.Tensor | TensorDictBase:
        if (self.scratch_dir / _META).exists():
            # another storage (e.g. a copy of this one made before its first write) has
            # allocated its files here since this one was made: never write over them
            raise FileExistsError(
                f"scratch_dir '{self.scratch_dir}' already holds a storage written by another "
                "LazyMemmapStorage; give each storage its own scratch_dir"
            )
        if isinstance(template, TensorDictBase):
            stored = template.expand(self._rows, *template.batch_size).memmap_like(
                prefix=self.scratch_dir, existsok=True
            )
            meta = {"kind": "tensordict", "max_size": self.max_size}
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
        self._reserve_disk(stored)
        self._open_counter(create=True)
        tmp = self.scratch_dir / (_META + ".tmp")
        tmp.write_text(json.dumps(meta))
        os.replace(tmp, self.scratch_dir / _META)
        return stored

    def _reserve_disk(self, stored: torch.Tensor | TensorDictBase) -> None:
        """Allocates the files' blocks now.

        Writing into a sparse memory map when the disk is full kills the process with
        SIGBUS; reserving the space turns that into an error here, at allocation.
        """
        if isinstance(stored, TensorDictBase):
            tensors = list(stored.values(include_nested=True, leaves_only=True))
        else:
            tensors = [stored]
        needed = sum(t.numel() * t.element_size() for t in tensors)
        for tensor in tensors:
            filename = getattr(tensor, "filename", None)
            size = tensor.numel() * tensor.element_size()
            if filename is None or size == 0:
                continue
            fd = os.open(filename, os.O_RDWR)
            try:
                os.posix_fallocate(fd, 0, size)
            except OSError as err:
                if err.errno == errno.ENOSPC:
                    raise OSError(
                        errno.ENOSPC,
                        f"scratch_dir '{self.scratch_dir}' has not enough free space for "
                        f"max_size={self.max_size} items ({needed / 1e9:.2f} GB)",
                    ) from None
                if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                    raise
            finally:
                os.close(fd)

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

    def _record_write(self, new_len: int, write_end: int) -> None:
        super()._record_write(new_len, write_end)
        # after the data: a process killed in between loses the last write, nothing else
        self._counter[1] = self._write_end
        self._counter[0] = self._len

    def _empty(self) -> None:
        super()._empty()
        if self._counter is not None:
            self._counter[:] = 0

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
