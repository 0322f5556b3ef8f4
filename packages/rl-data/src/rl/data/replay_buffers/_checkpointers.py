"""Storage checkpointers: how ``ReplayBuffer(checkpointer=...)`` saves its storage."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey, unravel_key

from rl.core.files import (
    fsync_dir,
    remove_stale_temporaries,
    temporary_path,
    temporary_prefix,
)
from rl.core.trainers import CheckpointError, atomic_save, load_checkpoint
from rl.data.replay_buffers._ted import (
    DEFAULT_DONE_KEYS,
    H5Combine,
    H5Split,
    Nested2TED,
    TED2Nested,
)
from rl.data.replay_buffers._utils import (
    decode_item,
    decode_tensordict,
    encode_item,
    encode_tensordict,
)
from rl.data.replay_buffers.storages._base import Storage


class StorageCheckpointerBase:
    """Saves and restores a storage in a directory: ``dumps(storage, path)``, ``loads``.

    Subclasses choose the format; the buffer calls them from its own ``dumps``/``loads``.
    """

    def dumps(self, storage: Storage, path: str | Path) -> None:
        """Writes ``storage`` under ``path``; abstract: each checkpointer defines it."""
        raise NotImplementedError(f"{type(self).__name__} must define dumps(storage, path)")

    def loads(self, storage: Storage, path: str | Path) -> None:
        """Reads ``storage`` back from ``path``; abstract: each checkpointer defines it."""
        raise NotImplementedError(f"{type(self).__name__} must define loads(storage, path)")


class TensorStorageCheckpointer(StorageCheckpointerBase):
    """Writes the storage's ``state_dict`` atomically (tensors only, loaded with
    ``weights_only=True``); works for every storage of this package.

    Examples:
        >>> import tempfile, torch
        >>> from rl.data import LazyTensorStorage, ReplayBuffer, TensorStorageCheckpointer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), checkpointer=TensorStorageCheckpointer())
        >>> _ = rb.extend(torch.arange(4))
        >>> path = tempfile.mkdtemp()
        >>> rb.dumps(path)
        >>> rb2 = ReplayBuffer(storage=LazyTensorStorage(10), checkpointer=TensorStorageCheckpointer())
        >>> rb2.loads(path)
        >>> rb2[:]
        tensor([0, 1, 2, 3])
    """

    def dumps(self, storage: Storage, path: str | Path) -> None:
        storage.dumps(path)

    def loads(self, storage: Storage, path: str | Path) -> None:
        storage.loads(path)


ListStorageCheckpointer = TensorStorageCheckpointer

_FLAT_FILE = "storage_flat.pt"


class FlatStorageCheckpointer(TensorStorageCheckpointer):
    """Saves a TensorDict storage of transitions in TorchRL's compact "flat" form.

    A ``("next", key)`` entry whose root counterpart holds the same value one step later
    (the next observation of a step is the observation of the following step) is saved
    only where it differs: at the steps that end a trajectory, the last step, and any
    step where the two disagree; loading rebuilds it from the root entry. The entries
    named by ``done_keys`` and ``reward_keys`` (by their last key) are saved whole. Unlike
    TorchRL's, which assumes the data is laid out so and does not check, the comparison
    is made at every step, so a load gives back exactly what was saved.

    Args:
        done_keys: the names of the done entries, saved whole (default ``("done",
            "truncated", "terminated")``).
        reward_keys: the names of the reward entries, saved whole (default
            ``("reward",)``).

    Raises:
        ValueError: (``dumps``) the storage does not hold TensorDicts along one dim.

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from rl.data import FlatStorageCheckpointer, LazyTensorStorage, ReplayBuffer
        >>> obs = torch.arange(6.0).unsqueeze(-1)
        >>> done = torch.tensor([False, False, True, False, False, True]).unsqueeze(-1)
        >>> data = TensorDict(
        ...     {"obs": obs, "next": {"obs": obs + 1, "done": done}}, batch_size=[6]
        ... )
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), checkpointer=FlatStorageCheckpointer())
        >>> _ = rb.extend(data)
        >>> path = tempfile.mkdtemp()
        >>> rb.dumps(path)
        >>> rb2 = ReplayBuffer(storage=LazyTensorStorage(10), checkpointer=FlatStorageCheckpointer())
        >>> rb2.loads(path)
        >>> torch.equal(rb2[:]["next", "obs"], data["next", "obs"])
        True
    """

    def __init__(
        self,
        done_keys: tuple[NestedKey, ...] | None = None,
        reward_keys: tuple[NestedKey, ...] | None = None,
    ) -> None:
        self.done_keys = tuple(DEFAULT_DONE_KEYS if done_keys is None else done_keys)
        self.reward_keys = tuple(("reward",) if reward_keys is None else reward_keys)
        names = set()
        for key in (*self.done_keys, *self.reward_keys):
            key = unravel_key(key)
            names.add(key if isinstance(key, str) else key[-1])
        self._whole = names

    def _chronological(self, state: dict[str, Any]) -> tuple[TensorDictBase, torch.Tensor]:
        data = decode_tensordict(state["data"])
        length, max_size = int(state["len"]), int(state["max_size"])
        data = data[:length]
        if length == max_size:  # a full ring: the oldest item follows the last written
            order = torch.arange(length).roll(-(int(state["write_end"]) % max_size))
        else:
            order = torch.arange(length)
        return data[order], order

    def _compressed_keys(self, data: TensorDictBase) -> list[NestedKey]:
        if "next" not in data.keys():
            return []
        out = []
        for key in data["next"].keys(True, True):
            name = key if isinstance(key, str) else key[-1]
            if name not in self._whole and key in data.keys(True, True):
                out.append(key)
        return out

    def _compacted(self, state: dict) -> dict:
        """The filled storage's entries in time order, each ``next`` entry that repeats
        the following step's root value dropped (kept at episode ends and where it
        differs): ``order``, ``data`` and the ``sparse`` next values."""
        data, order = self._chronological(state)
        keys = self._compressed_keys(data)
        ends = torch.zeros(data.shape[0], dtype=torch.bool)
        ends[-1] = True
        for name in self.done_keys:
            done = data.get(unravel_key(("next", name)), None)
            if done is not None:
                ends |= done.reshape(data.shape[0], -1).any(-1).cpu()
        sparse = {}
        for key in keys:
            nxt, root = data[unravel_key(("next", key))], data[key]
            keep = ends.clone()
            # exact: any step whose next value is not the following root value is kept
            keep[:-1] |= (nxt[:-1] != root[1:]).reshape(data.shape[0] - 1, -1).any(-1).cpu()
            sparse[key] = (keep.nonzero().squeeze(-1), nxt[keep.to(nxt.device)])
        return {
            "order": order,
            "data": encode_tensordict(data.exclude(*[("next", k) for k in keys]) if keys else data),
            "sparse": {
                "keys": [list((k,) if isinstance(k, str) else k) for k in sparse],
                "index": [v[0] for v in sparse.values()],
                "values": [v[1].as_subclass(torch.Tensor).cpu() for v in sparse.values()],
            },
        }

    def dumps(self, storage: Storage, path: str | Path) -> None:
        state = storage.state_dict()
        if not isinstance(state.get("data"), dict) or getattr(storage, "ndim", 1) != 1:
            raise ValueError(
                f"FlatStorageCheckpointer saves a storage of TensorDicts along one dim; "
                f"{type(storage).__name__} holds {'nothing' if state.get('data') is None else 'other data'}"
                + (f" (ndim={storage.ndim})" if getattr(storage, "ndim", 1) != 1 else "")
            )
        flat: dict[str, Any] = {
            "max_size": state["max_size"],
            "len": state["len"],
            "write_end": state["write_end"],
            "layout": state.get("layout"),
        }
        if int(state["len"]) == 0:
            flat["data"] = state["data"]  # nothing to compact (the structure only)
        else:
            flat.update(self._compacted(state))
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        atomic_save(flat, path / _FLAT_FILE)

    def loads(self, storage: Storage, path: str | Path) -> None:
        file = Path(path) / _FLAT_FILE
        if not file.exists():
            raise FileNotFoundError(f"no FlatStorageCheckpointer state at '{file}'")
        flat = load_checkpoint(file)
        state = {k: flat[k] for k in ("max_size", "len", "write_end", "layout")}
        if "sparse" not in flat:
            state["data"] = flat["data"]
            storage.load_state_dict(state)
            return
        data = decode_tensordict(flat["data"])
        sparse = flat["sparse"]
        for key, index, values in zip(
            sparse["keys"], sparse["index"], sparse["values"], strict=True
        ):
            key = tuple(key)
            root = data[key]
            nxt = torch.empty_like(root)
            nxt[:-1] = root[1:]
            nxt[index.to(nxt.device)] = values.to(nxt.device)
            data["next", *key] = nxt
        slots = data.clone()
        slots[flat["order"]] = data
        state["data"] = encode_tensordict(slots)
        storage.load_state_dict(state)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _discard(path: Path) -> None:
    """Deletes ``path`` after renaming it to a temporary: a deletion cut short leaves a
    temporary the next dump removes, never a half-deleted state :func:`_readable_dir` could
    take for a whole one."""
    trash = temporary_path(path)
    try:
        os.replace(path, trash)
    except FileNotFoundError:
        return
    _remove(trash)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    """Flushes every file below ``root`` and the folders that name them to the disk."""
    for folder, _, files in os.walk(root):
        for name in files:
            _fsync_file(Path(folder, name))
        fsync_dir(folder)


@contextlib.contextmanager
def _staged_dir(path: Path) -> Iterator[Path]:
    """Yields a fresh directory beside ``path`` that replaces ``path`` once written whole.

    The directory is flushed to disk before it is renamed in, and the rename after. A
    process killed while writing leaves the previous ``path`` intact (and a temporary the
    next dump deletes); one killed between the two renames leaves the previous state as
    ``.<name>.old-<pid>``, which :func:`_readable_dir` finds.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    tmp = Path(tempfile.mkdtemp(prefix=f"{temporary_prefix(path)}{os.getpid()}-", dir=path.parent))
    try:
        yield tmp
        _fsync_tree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if path.exists():
        old = path.with_name(f".{path.name}.old-{os.getpid()}")
        _discard(old)
        os.replace(path, old)
    os.replace(tmp, path)
    fsync_dir(path.parent)
    if old is not None:
        _discard(old)
    for stale in path.parent.glob(glob.escape(f".{path.name}.old-") + "*"):
        _discard(stale)


def _readable_dir(path: Path, what: str) -> Path:
    """``path``, or where a dump killed between its renames left the previous state whole:
    the newest (by modification time) ``.<name>.old-<pid>`` beside it."""
    if path.is_dir():
        return path
    survivors = []
    for survivor in path.parent.glob(glob.escape(f".{path.name}.old-") + "*"):
        try:
            survivors.append((survivor.stat().st_mtime_ns, survivor))
        except FileNotFoundError:  # removed by a dump meanwhile
            continue
    if survivors:
        return max(survivors)[1]
    raise FileNotFoundError(f"no {what} state at '{path}'")


def _ted_source(storage: Storage, name: str) -> tuple[TensorDictBase, int, int, bool]:
    """The storage's whole TensorDict (``[T, *B]``), its filled rows, the next write
    row (TorchRL's ``shift``) and whether every row is filled."""
    data = getattr(storage, "_storage", None)
    if data is None or not hasattr(storage, "_write_end"):
        raise RuntimeError(f"Cannot save a non-initialized storage with {name}")
    if not isinstance(data, TensorDictBase) or getattr(storage, "_layout", None) is not None:
        raise ValueError(
            f"{name} saves a storage of TensorDicts of transitions; "
            f"{type(storage).__name__} holds {type(data).__name__}"
        )
    length, rows = int(storage._len), int(data.shape[0])
    if length == 0:
        raise RuntimeError(f"Cannot save an empty storage with {name}")
    is_full = length == rows
    shift = int(storage._write_end) if is_full else length
    return data, length, shift, is_full


def _restore(
    storage: Storage,
    data: TensorDictBase,
    length: int,
    shift: int,
    dropped: list | None = None,
) -> None:
    """Loads the rebuilt ``[T, *B]`` data of a TED checkpoint into ``storage``.

    ``dropped``: the root done entries the rebuilt data has but the saved one had not
    (the layout rebuilds every root done entry as ``False``).
    """
    held = getattr(storage, "_storage", None)
    if isinstance(held, TensorDictBase):  # only the entries the storage holds
        data = data.select(*held.keys(True, True), strict=False)
    elif dropped:
        data = data.exclude(*dropped)
    storage.load_state_dict(
        {
            "max_size": data.shape.numel(),
            "len": length,
            "write_end": shift % data.shape[0],
            "data": encode_tensordict(data[:length]),
            "layout": None,
        }
    )


def _root_done_keys(hook: TED2Nested, data: TensorDictBase) -> list[list[str]]:
    """The done entries ``data`` holds at its root, as lists of names (for JSON)."""
    keys = set(data.exclude("next").keys(True, True))
    return sorted(list(_tuple_key(k)) for k in hook.done_keys if k in keys)


def _dropped(hook: Nested2TED, saved: Any) -> list | None:
    """The root done entries to drop after a load: those the save did not hold (``None``
    where the checkpoint does not say, as TorchRL's: every one is kept)."""
    if saved is None:
        return None
    kept = {tuple(k) for k in saved}
    return [k for k in hook.done_keys if _tuple_key(k) not in kept]


def _hook_kwargs(done_keys: Any, reward_keys: Any, extra: dict | None = None) -> dict:
    kwargs = dict(extra or {})
    if done_keys is not None:
        kwargs["done_keys"] = tuple(done_keys)
    if reward_keys is not None:
        kwargs["reward_keys"] = tuple(reward_keys)
    return kwargs


_TED_META = "storage_metadata.json"


class NestedStorageCheckpointer(StorageCheckpointerBase):
    """Saves a storage of transitions in TorchRL's nested layout: one row per trajectory,
    each entry a memory-mapped ``torch.nested`` tensor (see :class:`~rl.data.TED2Nested`).

    Each observation is kept once (the ``"next"`` copies are dropped but for the last
    step of each trajectory), which about halves the files of pixel data. The files are
    TorchRL's: a memory-mapped TensorDict and ``storage_metadata.json``. The directory is
    written beside the previous one and renamed over it; loading reads tensors and JSON
    only (nothing is unpickled).

    The layout assumes what TorchRL's does (root done flags are ``False``; inside a
    trajectory ``("next", key)`` is ``key`` one step later); unlike TorchRL, ``dumps``
    checks it and raises instead of saving data it could not give back (use
    :class:`FlatStorageCheckpointer` or :class:`TensorStorageCheckpointer` for such data).

    Args:
        done_keys: the done entries (default ``("done", "truncated", "terminated")``).
        reward_keys: the reward entries (default ``("reward",)``).

    Raises:
        RuntimeError: (``dumps``) the storage holds no data.
        ValueError: (``dumps``) the storage does not hold TensorDicts of transitions, or
            the data breaks the layout's assumptions (the message names the key).

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from rl.data import LazyTensorStorage, NestedStorageCheckpointer, ReplayBuffer
        >>> obs = torch.arange(6.0).unsqueeze(-1)
        >>> done = torch.tensor([False, False, True, False, False, False]).unsqueeze(-1)
        >>> data = TensorDict({"obs": obs, "next": {"obs": obs + 1, "done": done}}, [6])
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), checkpointer=NestedStorageCheckpointer())
        >>> _ = rb.extend(data)
        >>> path = tempfile.mkdtemp()
        >>> rb.dumps(path)
        >>> rb2 = ReplayBuffer(storage=LazyTensorStorage(10), checkpointer=NestedStorageCheckpointer())
        >>> rb2.loads(path)
        >>> bool((rb2[:] == data).all())
        True
    """

    def __init__(self, done_keys: Any = None, reward_keys: Any = None) -> None:
        kwargs = _hook_kwargs(done_keys, reward_keys)
        self._save_hook = TED2Nested(**kwargs)
        self._load_hook = Nested2TED(**kwargs)

    def _convert(self, storage: Storage) -> tuple[TensorDictBase, int, list]:
        data, length, shift, is_full = _ted_source(storage, type(self).__name__)
        self._save_hook.shift, self._save_hook.is_full = shift, is_full
        return self._save_hook(data), length, _root_done_keys(self._save_hook, data)

    def dumps(self, storage: Storage, path: str | Path) -> None:
        out, length, root_done = self._convert(storage)
        with _staged_dir(Path(path)) as tmp:
            out.memmap_(tmp)
            # TorchRL's file; the root done entries saved let a load give back no others
            meta = {"metadata": {}, "is_pytree": False, "len": length, "root_done_keys": root_done}
            (tmp / _TED_META).write_text(json.dumps(meta))

    def loads(self, storage: Storage, path: str | Path) -> None:
        path = _readable_dir(Path(path), type(self).__name__)
        meta = _read_ted_meta(path / _TED_META)
        try:
            saved = TensorDict.load_memmap(path, allow_pickle=False)
        except (RuntimeError, KeyError, ValueError, TypeError, OSError) as err:
            raise CheckpointError(
                f"'{path}' holds no readable {type(self).__name__} state ({err})"
            ) from None
        shift = int(saved.get_non_tensor("shift"))
        data = self._load_hook(saved)
        del saved  # the loaded tensors map the files: copied into the storage below
        dropped = _dropped(self._load_hook, meta.get("root_done_keys"))
        _restore(storage, data, meta["len"], shift, dropped)


def _read_ted_meta(file: Path) -> dict:
    if not file.exists():
        raise FileNotFoundError(f"no storage metadata at '{file}'")
    try:
        meta = json.loads(file.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise CheckpointError(f"'{file}' is not JSON ({err})") from None
    length = meta.get("len") if isinstance(meta, dict) else None
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise CheckpointError(f"'{file}' has len {length!r}, expected a count")
    return meta


class H5StorageCheckpointer(NestedStorageCheckpointer):
    """Saves a storage of transitions as an HDF5 file in TorchRL's layout: one group
    ``traj_<i>`` per trajectory (see :class:`~rl.data.H5Split`), the metadata (``shift``,
    ``is_full``, ``_storage_shape``, ``_len``) as attributes of the file's root.

    Needs ``h5py`` (``pip install "rl-data[h5]"``). The file is written beside the
    previous one and renamed over it; loading reads datasets and attributes only. The
    layout's assumptions and checks are those of :class:`NestedStorageCheckpointer`.

    Keyword Args:
        checkpoint_file: the file name inside the directory given to ``dumps``/``loads``
            (ignored when that path itself ends with ``.h5``). Defaults to
            ``"checkpoint.h5"``.
        done_keys: the done entries (default ``("done", "truncated", "terminated")``).
        reward_keys: the reward entries (default ``("reward",)``).
        h5_kwargs: keyword arguments of ``h5py.Group.create_dataset`` (``compression``...).
        **kwargs: more arguments of :class:`~rl.data.TED2Flat` (``done_key``...).

    Raises:
        ModuleNotFoundError: (``dumps``/``loads``) h5py is not installed.

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from rl.data import H5StorageCheckpointer, LazyTensorStorage, ReplayBuffer
        >>> obs = torch.arange(6.0).unsqueeze(-1)
        >>> done = torch.tensor([False, False, True, False, False, False]).unsqueeze(-1)
        >>> data = TensorDict({"obs": obs, "next": {"obs": obs + 1, "done": done}}, [6])
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), checkpointer=H5StorageCheckpointer())
        >>> _ = rb.extend(data)
        >>> path = tempfile.mkdtemp()
        >>> rb.dumps(path)
        >>> rb2 = ReplayBuffer(storage=LazyTensorStorage(10), checkpointer=H5StorageCheckpointer())
        >>> rb2.loads(path)
        >>> bool((rb2[:] == data).all())
        True
    """

    def __init__(
        self,
        *,
        checkpoint_file: str = "checkpoint.h5",
        done_keys: Any = None,
        reward_keys: Any = None,
        h5_kwargs: Any = None,
        **kwargs: Any,
    ) -> None:
        hook_kwargs = _hook_kwargs(done_keys, reward_keys, kwargs)
        self._save_hook = TED2Nested(**hook_kwargs)
        load_kwargs = {k: v for k, v in hook_kwargs.items() if k != "done_key"}
        self._load_hook = Nested2TED(**load_kwargs)
        self.kwargs = {} if h5_kwargs is None else dict(h5_kwargs)
        self.checkpoint_file = checkpoint_file

    def _get_path(self, path: str | Path) -> Path:
        path = Path(path)
        if path.suffix == ".h5":
            return path.absolute()
        path.mkdir(parents=True, exist_ok=True)
        return (path / self.checkpoint_file).absolute()

    def dumps(self, storage: Storage, path: str | Path) -> None:
        h5py = _import_h5py()
        nested, length, root_done = self._convert(storage)
        split = H5Split()(nested)
        file = self._get_path(path)
        remove_stale_temporaries(file)
        fd, tmp = tempfile.mkstemp(
            prefix=f"{temporary_prefix(file)}{os.getpid()}-", dir=file.parent
        )
        os.close(fd)
        try:
            with h5py.File(tmp, "w") as h5:
                for key, value in split.items(True, True):
                    if isinstance(value, torch.Tensor):
                        name = "/".join(_tuple_key(key))
                        if value.dtype == torch.bfloat16:
                            raise TypeError(f"HDF5 has no bfloat16: entry {key!r} cannot be saved")
                        h5.create_dataset(name, data=value.detach().cpu().numpy(), **self.kwargs)
                for key in ("shift", "is_full", "_storage_shape"):
                    h5.attrs[key] = split.get_non_tensor(key)
                h5.attrs["_len"] = length
                h5.attrs["root_done_keys"] = json.dumps(root_done)
            _fsync_file(Path(tmp))
            os.replace(tmp, file)
            fsync_dir(file.parent)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def loads(self, storage: Storage, path: str | Path) -> None:
        h5py = _import_h5py()
        file = self._get_path(path)
        if not file.exists():
            raise FileNotFoundError(f"no H5StorageCheckpointer file at '{file}'")
        data = TensorDict({}, batch_size=[])
        with h5py.File(file, "r") as h5:

            def read(name: str, node: Any) -> None:
                if isinstance(node, h5py.Dataset):
                    data.set(tuple(name.split("/")), torch.as_tensor(node[()]))

            h5.visititems(read)
            try:
                shift, is_full = int(h5.attrs["shift"]), bool(h5.attrs["is_full"])
                shape = tuple(int(n) for n in h5.attrs["_storage_shape"])
                length = int(h5.attrs["_len"])
                saved_done = h5.attrs.get("root_done_keys")
                saved_done = None if saved_done is None else json.loads(saved_done)
            except (KeyError, TypeError, ValueError) as err:
                raise CheckpointError(f"'{file}' lacks the checkpoint's metadata ({err})") from None
        data.set_non_tensor("shift", shift)
        data.set_non_tensor("is_full", is_full)
        data.set_non_tensor("_storage_shape", shape)
        dropped = _dropped(self._load_hook, saved_done)
        _restore(storage, self._load_hook(H5Combine()(data)), length, shift, dropped)


def _tuple_key(key: Any) -> tuple:
    return (key,) if isinstance(key, str) else tuple(key)


def _import_h5py() -> Any:
    try:
        import h5py
    except ImportError as err:
        raise ModuleNotFoundError(
            'H5StorageCheckpointer needs h5py: pip install "rl-data[h5]"'
        ) from err
    return h5py


_COMPRESSED_FILE = "compressed_storage.pt"


class CompressedListStorageCheckpointer(StorageCheckpointerBase):
    """Saves a :class:`~rl.data.CompressedListStorage` as it holds its items: compressed.

    The compressed bytes of each tensor are written (atomically, loaded with
    ``weights_only=True``) without decompressing them; the storage that loads them must
    use the same codec (the default zlib one, or the same ``decompression_fn``).

    Raises:
        RuntimeError: (``dumps``) the storage is empty.
        TypeError: (``dumps``) the storage is not a ``CompressedListStorage``.

    Examples:
        >>> import tempfile, torch
        >>> from rl.data import CompressedListStorage, CompressedListStorageCheckpointer, ReplayBuffer
        >>> rb = ReplayBuffer(
        ...     storage=CompressedListStorage(10), checkpointer=CompressedListStorageCheckpointer()
        ... )
        >>> _ = rb.extend([torch.zeros(3), torch.ones(3)])
        >>> path = tempfile.mkdtemp()
        >>> rb.dumps(path)
        >>> rb2 = ReplayBuffer(
        ...     storage=CompressedListStorage(10), checkpointer=CompressedListStorageCheckpointer()
        ... )
        >>> rb2.loads(path)
        >>> rb2[1]
        tensor([1., 1., 1.])
    """

    def dumps(self, storage: Storage, path: str | Path) -> None:
        items = _compressed_items(storage)
        if not items:
            raise RuntimeError("Cannot save an empty or non-initialized CompressedListStorage.")
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        atomic_save(
            {"max_size": storage.max_size, "items": [_encode_packed(p) for p in items]},
            path / _COMPRESSED_FILE,
        )

    def loads(self, storage: Storage, path: str | Path) -> None:
        _compressed_items(storage)
        file = Path(path) / _COMPRESSED_FILE
        if not file.exists():
            raise FileNotFoundError(f"no CompressedListStorageCheckpointer state at '{file}'")
        state = load_checkpoint(file)
        if int(state["max_size"]) != storage.max_size:
            raise ValueError(
                f"checkpoint has max_size {state['max_size']}, this storage {storage.max_size}"
            )
        storage._storage = [
            _decode_packed(p, file, f"item {i}") for i, p in enumerate(state["items"])
        ]
        storage._bump_mutation_revision()


def _compressed_items(storage: Storage) -> list:
    # imported here: the storages import this module's base class
    from rl.data.replay_buffers.storages._list import CompressedListStorage

    if not isinstance(storage, CompressedListStorage):
        raise TypeError(
            f"CompressedListStorageCheckpointer saves a CompressedListStorage, got "
            f"{type(storage).__name__}"
        )
    return storage._storage


def _encode_packed(packed: tuple) -> list:
    kind, payload, meta = packed
    if kind == "tensor":
        return ["tensor", payload.cpu(), dict(meta)]
    if kind == "tensordict":
        return ["tensordict", {k: _encode_packed(v) for k, v in payload.items()}, list(meta)]
    return ["other", encode_item(payload), None]


def _decode_packed(packed: Any, file: Path, where: str) -> tuple:
    """One saved item (``where`` names it: ``item 3``, ``item 3 key 'obs'``) as the
    storage holds it."""
    if not isinstance(packed, list) or len(packed) != 3:
        raise CheckpointError(f"'{file}' {where} is not a compressed entry")
    kind, payload, meta = packed
    if kind == "tensor":
        if not isinstance(payload, torch.Tensor) or payload.dtype != torch.uint8:
            found = (
                f"a {payload.dtype} tensor"
                if isinstance(payload, torch.Tensor)
                else type(payload).__name__
            )
            raise CheckpointError(
                f"'{file}' {where} is a compressed tensor whose bytes should be a torch.uint8 "
                f"tensor, got {found}"
            )
        return ("tensor", payload, meta)
    if kind == "tensordict" and isinstance(payload, dict):
        return (
            "tensordict",
            {k: _decode_packed(v, file, f"{where} key {k!r}") for k, v in payload.items()},
            meta,
        )
    if kind == "other":
        return ("other", decode_item(payload), None)
    raise CheckpointError(f"'{file}' {where} is a compressed entry of unknown kind {kind!r}")


class StorageEnsembleCheckpointer(StorageCheckpointerBase):
    """Saves each storage of a :class:`~rl.data.StorageEnsemble` in ``path/<i>`` (with
    its own checkpointer, if it has one) and each transform's ``state_dict`` in
    ``path/<i>_transform.pt`` (atomically; loaded with ``weights_only=True``).

    Examples:
        >>> import tempfile, torch
        >>> from rl.data import LazyTensorStorage, StorageEnsemble, StorageEnsembleCheckpointer
        >>> ens = StorageEnsemble(LazyTensorStorage(4), LazyTensorStorage(4))
        >>> ens[0].set(slice(0, 2), torch.tensor([1, 2]))
        >>> ens[1].set(slice(0, 1), torch.tensor([7]))
        >>> path = tempfile.mkdtemp()
        >>> StorageEnsembleCheckpointer().dumps(ens, path)
        >>> ens2 = StorageEnsemble(LazyTensorStorage(4), LazyTensorStorage(4))
        >>> StorageEnsembleCheckpointer().loads(ens2, path)
        >>> ens2[0].get(slice(None)), ens2[1].get(slice(None))
        (tensor([1, 2]), tensor([7]))
    """

    def dumps(self, storage: Storage, path: str | Path) -> None:
        path = Path(path).absolute()
        for i, member in enumerate(_members(storage)):
            _member_dumps(member, path / str(i))
        for i, transform in enumerate(storage._transforms or ()):
            if transform is not None and hasattr(transform, "state_dict"):
                atomic_save(transform.state_dict(), path / f"{i}_transform.pt")

    def loads(self, storage: Storage, path: str | Path) -> None:
        path = Path(path).absolute()
        for i, member in enumerate(_members(storage)):
            _member_loads(member, path / str(i))
        for i, transform in enumerate(storage._transforms or ()):
            file = path / f"{i}_transform.pt"
            if transform is not None and hasattr(transform, "load_state_dict"):
                if not file.exists():
                    raise FileNotFoundError(f"no state for transform {i} at '{file}'")
                transform.load_state_dict(load_checkpoint(file))


def _members(storage: Storage) -> tuple:
    members = getattr(storage, "_storages", None)
    if members is None:
        raise TypeError(
            f"StorageEnsembleCheckpointer saves a StorageEnsemble, got {type(storage).__name__}"
        )
    return members


def _member_dumps(member: Storage, path: Path) -> None:
    if member.checkpointer is not None:
        member.checkpointer.dumps(member, path)
    else:
        member.dumps(path)


def _member_loads(member: Storage, path: Path) -> None:
    if member.checkpointer is not None:
        member.checkpointer.loads(member, path)
    else:
        member.loads(path)


__all__: list[Any] = [
    "CompressedListStorageCheckpointer",
    "FlatStorageCheckpointer",
    "H5StorageCheckpointer",
    "NestedStorageCheckpointer",
    "StorageEnsembleCheckpointer",
    "ListStorageCheckpointer",
    "StorageCheckpointerBase",
    "TensorStorageCheckpointer",
]
