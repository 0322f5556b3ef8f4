"""Shared helpers: index normalisation, checkpoint encoding, components' dumps and loads."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from rl.core.trainers import atomic_save, load_checkpoint

_TD_TAG = "__rl_tensordict__"


def as_index_tensor(index: Any, device: torch.device | None = None) -> torch.Tensor:
    """Turns an int, a sequence, a numpy array or a tensor into a 1-D int64 tensor."""
    if isinstance(index, torch.Tensor):
        out = index.reshape(-1)
        if out.dtype != torch.int64:
            if out.dtype.is_floating_point or out.dtype == torch.bool:
                raise TypeError(f"index must hold integers, got a tensor of dtype {out.dtype}")
            out = out.long()
    elif isinstance(index, (int, np.integer)):
        out = torch.tensor([int(index)], dtype=torch.int64)
    else:
        arr = np.asarray(index)
        if arr.dtype.kind not in "iu":
            raise TypeError(f"index must hold integers, got {index!r}")
        out = torch.as_tensor(arr.astype(np.int64).reshape(-1))
    if device is not None and out.device != device:
        out = out.to(device)
    return out


def dtype_from_name(name: Any) -> torch.dtype:
    """The torch dtype named ``name`` (``"float32"`` or ``"torch.float32"``), read from a file.

    Raises:
        ValueError: ``name`` names no dtype (any other attribute of ``torch`` included).
    """
    dtype = getattr(torch, name.removeprefix("torch."), None) if isinstance(name, str) else None
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"expected the name of a torch dtype (such as 'float32'), got {name!r}")
    return dtype


def encode_tensordict(td: TensorDictBase) -> dict:
    """Encodes a TensorDict as plain containers and tensors (loadable with ``weights_only``)."""
    keys, values = [], []
    for key, value in td.items(include_nested=True, leaves_only=True):
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"cannot checkpoint the non-tensor entry {key!r} of type {type(value).__name__}"
            )
        keys.append(key if isinstance(key, tuple) else (key,))
        values.append(value.as_subclass(torch.Tensor).detach().cpu().clone())
    return {_TD_TAG: True, "batch_size": list(td.batch_size), "keys": keys, "values": values}


def decode_tensordict(state: Mapping) -> TensorDict:
    """Inverse of :func:`encode_tensordict`."""
    out = TensorDict({}, batch_size=state["batch_size"])
    for key, value in zip(state["keys"], state["values"]):
        out.set(tuple(key), value)
    return out


def encode_item(item: Any) -> Any:
    """Encodes a python object made of tensors, TensorDicts, numbers, strings and containers."""
    if isinstance(item, TensorDictBase):
        return encode_tensordict(item)
    if isinstance(item, torch.Tensor):
        return item.detach().cpu().clone()
    if isinstance(item, np.ndarray):
        return {"__rl_ndarray__": True, "value": torch.as_tensor(item).clone()}
    if item is None or isinstance(item, (bool, int, float, str, bytes)):
        return item
    if isinstance(item, np.generic):
        return item.item()
    if isinstance(item, list):
        return [encode_item(x) for x in item]
    if isinstance(item, tuple):
        return tuple(encode_item(x) for x in item)
    if isinstance(item, dict):
        return {k: encode_item(v) for k, v in item.items()}
    raise TypeError(
        f"cannot checkpoint an item of type {type(item).__name__}: only tensors, TensorDicts, "
        "numpy arrays, numbers, strings and lists/tuples/dicts of them are saved (no pickling)"
    )


def decode_item(item: Any) -> Any:
    """Inverse of :func:`encode_item`; the tensors are copies (those of a loaded state may
    be memory-mapped from its file, or changed by the caller later)."""
    if isinstance(item, torch.Tensor):
        return item.clone()
    if isinstance(item, dict):
        if item.get(_TD_TAG):
            return decode_tensordict(item).clone()
        if item.get("__rl_ndarray__"):
            return item["value"].numpy().copy()
        return {k: decode_item(v) for k, v in item.items()}
    if isinstance(item, list):
        return [decode_item(x) for x in item]
    if isinstance(item, tuple):
        return tuple(decode_item(x) for x in item)
    return item


class KeyMismatchError(KeyError):
    """A ``KeyError`` whose message prints as written (``KeyError`` quotes and escapes it)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


_COMPONENT_FILE = "state.pt"


class CheckpointAliases:
    """TorchRL's other names of ``dumps`` / ``loads``: ``dump``, ``save`` and ``load``."""

    def dump(self, path: str | Path) -> None:
        self.dumps(path)

    def save(self, path: str | Path) -> None:
        self.dumps(path)

    def load(self, path: str | Path) -> None:
        self.loads(path)


class Checkpointable(CheckpointAliases):
    """``dumps(path)`` / ``loads(path)`` of a component's ``state_dict`` in a directory.

    The state is written atomically (a temporary file renamed over the previous one, see
    :func:`rl.core.trainers.atomic_save`) and read back with ``weights_only=True``
    (:func:`rl.core.trainers.load_checkpoint`): nothing is unpickled.
    """

    def dumps(self, path: str | Path) -> None:
        """Saves :meth:`state_dict` in the directory ``path`` (created if needed)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        atomic_save(self.state_dict(), path / _COMPONENT_FILE)

    def loads(self, path: str | Path) -> None:
        """Restores a state saved by :meth:`dumps`.

        Raises:
            FileNotFoundError: ``path`` holds no saved state.
            CheckpointError: the file holds anything but tensors and plain containers
                (nothing in it is run), or is not a checkpoint.
        """
        file = Path(path) / _COMPONENT_FILE
        if not file.exists():
            raise FileNotFoundError(f"no {type(self).__name__} state at '{file}'")
        self.load_state_dict(load_checkpoint(file))


class StatelessComponent(Checkpointable):
    """Defaults of a sampler / writer without state: empty state dict, nothing to reset."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        return None

    def _empty(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
