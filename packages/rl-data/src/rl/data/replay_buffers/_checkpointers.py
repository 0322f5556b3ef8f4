"""Storage checkpointers: how ``ReplayBuffer(checkpointer=...)`` saves its storage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey, unravel_key

from rl.core.trainers import atomic_save, load_checkpoint
from rl.data.replay_buffers._utils import decode_tensordict, encode_tensordict
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
_DEFAULT_DONE_KEYS = ("done", "truncated", "terminated")


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
        self.done_keys = tuple(_DEFAULT_DONE_KEYS if done_keys is None else done_keys)
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


__all__: list[Any] = [
    "FlatStorageCheckpointer",
    "ListStorageCheckpointer",
    "StorageCheckpointerBase",
    "TensorStorageCheckpointer",
]
