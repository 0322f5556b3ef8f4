"""The state-dict payload: a JSON schema beside a flat TensorDict of tensors.

A ``state_dict`` (nested dicts, lists, tuples, numbers, strings, tensors, numpy arrays,
``torch.Size``, dtypes, devices, ...) is split in two: its tensors go into a flat
TensorDict keyed ``tensor_00000000``, ``tensor_00000001``, ... (written in one of
tensordict's three layouts: a memory-mapped directory, a ``.tdz`` archive or a
consolidated file), and its structure goes to ``state.json``, where each tensor is a
reference to its key. This is TorchRL's layout, so either library reads the other's files.

Reading never imports a class or unpickles anything named in the files: the three
layouts are parsed here, each entry is checked (a ``tensor_*`` key, a torch dtype, a
shape, a byte range inside the file) and the schema only builds builtins, numpy and
torch values. A file that asks for anything else is refused with a
:class:`~rl.core.trainers.CheckpointError` naming the file and the entry.
"""

from __future__ import annotations

import base64
import json
import math
import re
import zipfile
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import tensordict
import torch

from ..trainers import CheckpointError

__all__ = [
    "decode_state",
    "encode_state",
    "read_tensors",
    "to_json_value",
    "write_tensors",
]

_TENSOR_KEY = re.compile(r"tensor_\d{8}")
# the most a JSON file of a checkpoint archive (a manifest, a meta.json) may inflate to
MAX_JSON_BYTES = 64 * 2**20
_TENSORDICT_TYPE = "<class 'tensordict._td.TensorDict'>"
_TENSORDICT_CLASS = "tensordict:TensorDict"
# keys of a directory's meta.json that describe the TensorDict itself, not a leaf
_DIRECTORY_META = frozenset(
    {"shape", "device", "names", "_type", "_format_version", "_class", "_is_locked"}
)


def to_json_value(value: Any) -> Any:
    """``value`` with tensors, numpy values and paths turned into JSON types.

    Raises:
        TypeError: a value JSON cannot hold, naming its type.
    """
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return value.item() if value.numel() == 1 else value.tolist()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {str(key): to_json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_value(item) for item in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"a value of type {type(value).__name__} is not JSON-compatible")


# --------------------------------------------------------------------------- schema
def _items(value: Any, tensors: dict[str, torch.Tensor]) -> list[Any]:
    return [encode_state(item, tensors) for item in value]


def encode_state(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """The JSON schema of ``value``; its tensors are added to ``tensors`` (on the CPU).

    Raises:
        TypeError: ``value`` holds an object the schema cannot describe (naming its type).
    """
    if isinstance(value, torch.Tensor):
        key = f"tensor_{len(tensors):08d}"
        tensors[key] = value.detach().cpu()
        return {"kind": "tensor", "key": key, "device": str(value.device)}
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise TypeError("a state-dict cannot hold a numpy array of Python objects")
        key = f"tensor_{len(tensors):08d}"
        tensors[key] = torch.from_numpy(np.ascontiguousarray(value).copy())
        return {"kind": "numpy", "key": key, "dtype": value.dtype.str}
    if isinstance(value, Mapping):
        metadata = getattr(value, "_metadata", None)  # what nn.Module.state_dict attaches
        ordered = isinstance(value, OrderedDict) or metadata is not None
        out = {
            "kind": "ordered_dict" if ordered else "dict",
            "items": [
                [encode_state(key, tensors), encode_state(item, tensors)]
                for key, item in value.items()
            ],
        }
        if metadata is not None:
            out["metadata"] = encode_state(metadata, tensors)
        return out
    if isinstance(value, torch.Size):
        return {"kind": "torch_size", "items": list(value)}
    for kind, type_ in (("tuple", tuple), ("list", list), ("frozenset", frozenset), ("set", set)):
        if isinstance(value, type_):
            return {"kind": kind, "items": _items(value, tensors)}
    if isinstance(value, slice):
        return {"kind": "slice", "items": _items((value.start, value.stop, value.step), tensors)}
    if isinstance(value, range):
        return {"kind": "range", "items": [value.start, value.stop, value.step]}
    if isinstance(value, torch.device):
        return {"kind": "torch_device", "value": str(value)}
    if isinstance(value, torch.dtype):
        return {"kind": "torch_dtype", "value": str(value).removeprefix("torch.")}
    if isinstance(value, Path):
        return {"kind": "path", "value": str(value)}
    if isinstance(value, (bytes, bytearray)):
        kind = "bytes" if isinstance(value, bytes) else "bytearray"
        return {"kind": kind, "value": base64.b64encode(value).decode("ascii")}
    if isinstance(value, complex):
        return {"kind": "complex", "real": value.real, "imag": value.imag}
    if isinstance(value, np.generic):
        return {"kind": "numpy_scalar", "dtype": value.dtype.str, "value": value.item()}
    if value is Ellipsis:
        return {"kind": "ellipsis"}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"kind": "value", "value": value}
    raise TypeError(
        f"a state-dict value of type {type(value).__name__} cannot be written as tensors "
        f"and JSON; register StateDictCheckpointAdapter(payload_format='torch') for state "
        f"dicts that torch.save can write (they are still loaded with weights_only=True)"
    )


def _device(saved: str, map_location: Any) -> torch.device:
    if map_location is None:
        return torch.device(saved)
    if isinstance(map_location, Mapping):
        target = map_location.get(saved)
        if target is None:
            target = map_location.get(torch.device(saved), saved)
        return torch.device(target)
    if callable(map_location):
        raise TypeError(
            "a callable map_location is only supported by the 'torch' state-dict payload"
        )
    return torch.device(map_location)


def _numpy_dtype(text: Any) -> np.dtype:
    dtype = np.dtype(text) if isinstance(text, str) else None
    if dtype is None or dtype.hasobject:
        raise CheckpointError(f"state.json names numpy dtype {text!r}, expected a numeric dtype")
    return dtype


def decode_state(value: Any, tensors: Mapping[str, torch.Tensor], map_location: Any) -> Any:
    """Rebuilds what :func:`encode_state` described, tensors copied to their device.

    Raises:
        CheckpointError: the schema names an unknown kind, a missing tensor or a bad dtype.
    """
    if not isinstance(value, Mapping) or not isinstance(value.get("kind"), str):
        raise CheckpointError(f"state.json holds {value!r}, expected a {{'kind': ...}} entry")
    kind = value["kind"]
    if kind in ("tensor", "numpy"):
        key = value.get("key")
        if key not in tensors:
            raise CheckpointError(f"state.json refers to tensor {key!r}, absent from the payload")
        if kind == "numpy":
            return tensors[key].numpy().astype(_numpy_dtype(value.get("dtype")), copy=True)
        return tensors[key].to(_device(value["device"], map_location), copy=True)
    if kind in ("dict", "ordered_dict"):
        mapping: dict = OrderedDict() if kind == "ordered_dict" else {}
        for key, item in value["items"]:
            key = decode_state(key, tensors, map_location)
            mapping[key] = decode_state(item, tensors, map_location)
        if value.get("metadata") is not None:
            mapping._metadata = decode_state(value["metadata"], tensors, map_location)  # type: ignore[attr-defined]
        return mapping
    containers = {"tuple": tuple, "list": list, "set": set, "frozenset": frozenset}
    if kind in containers:
        return containers[kind](
            decode_state(item, tensors, map_location) for item in value["items"]
        )
    if kind == "torch_size":
        return torch.Size([int(item) for item in value["items"]])
    if kind == "slice":
        return slice(*(decode_state(item, tensors, map_location) for item in value["items"]))
    if kind == "range":
        return range(*(int(item) for item in value["items"]))
    if kind == "torch_device":
        return torch.device(value["value"])
    if kind == "torch_dtype":
        dtype = getattr(torch, str(value["value"]), None)
        if not isinstance(dtype, torch.dtype):
            raise CheckpointError(f"state.json names torch dtype {value['value']!r}, not a dtype")
        return dtype
    if kind == "path":
        return Path(value["value"])
    if kind in ("bytes", "bytearray"):
        decoded = base64.b64decode(value["value"])
        return decoded if kind == "bytes" else bytearray(decoded)
    if kind == "complex":
        return complex(value["real"], value["imag"])
    if kind == "numpy_scalar":
        return _numpy_dtype(value.get("dtype")).type(value["value"])
    if kind == "ellipsis":
        return Ellipsis
    if kind == "value":
        item = value.get("value")
        if item is not None and not isinstance(item, (bool, int, float, str)):
            raise CheckpointError(f"state.json holds value {item!r}, expected a JSON scalar")
        return item
    raise CheckpointError(f"state.json holds an entry of kind {kind!r}, which is not a known kind")


# --------------------------------------------------------------------------- tensors
def write_tensors(
    tensors: dict[str, torch.Tensor], path: Path, layout: str, compression: Any
) -> None:
    """Writes the flat ``tensors`` at ``path`` as a directory, ``.tdz`` archive or consolidated file."""
    data = tensordict.TensorDict(tensors, batch_size=[])
    if layout == "directory":
        tensordict.save(data, path)
    elif layout == "archive":
        data.save(path, archive=True, compression=compression)
    else:
        data.consolidate(path)


def _dtype(text: Any, where: str) -> torch.dtype:
    name = text.removeprefix("torch.") if isinstance(text, str) else ""
    dtype = getattr(torch, name, None) if name.isidentifier() else None
    try:
        torch.empty((), dtype=dtype).element_size()
    except (TypeError, RuntimeError):
        raise CheckpointError(f"{where} names dtype {text!r}, expected a torch dtype") from None
    return dtype


def _shape(shape: Any, where: str) -> list[int]:
    if not isinstance(shape, list) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape
    ):
        raise CheckpointError(f"{where} has shape {shape!r}, expected a list of sizes")
    return shape


def _nbytes(size: int, dtype: torch.dtype, shape: list[int], where: str) -> int:
    """The bytes a tensor of ``shape`` needs, checked against the ``size`` available."""
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    if size < nbytes:
        raise CheckpointError(f"{where} holds {size} bytes, expected {nbytes} (truncated?)")
    return nbytes


def _from_bytes(
    data: bytes | memoryview, dtype: torch.dtype, shape: list[int], where: str
) -> torch.Tensor:
    nbytes = _nbytes(len(data), dtype, shape, where)
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(data[:nbytes]), dtype=dtype).reshape(shape)


def _memmap_leaves(meta: Any, where: str) -> dict[str, tuple[torch.dtype, list[int]]]:
    """The leaves of a directory's or ``.tdz``'s ``meta.json``: a flat TensorDict only."""
    if not isinstance(meta, dict):
        raise CheckpointError(f"{where} holds {type(meta).__name__}, expected a JSON object")
    kind = meta.get("_type", _TENSORDICT_TYPE), meta.get("_class", _TENSORDICT_CLASS)
    if kind != (_TENSORDICT_TYPE, _TENSORDICT_CLASS):
        raise CheckpointError(
            f"{where} describes a {kind[0]!r}, expected a plain TensorDict: checkpoints "
            f"never import a class named in their files"
        )
    leaves = {}
    for key, entry in meta.items():
        if key in _DIRECTORY_META:
            continue
        if not _TENSOR_KEY.fullmatch(key) or not isinstance(entry, dict):
            raise CheckpointError(f"{where} has entry {key!r}, expected tensor_<8 digits> leaves")
        if entry.get("is_nested", False) is not False:
            raise CheckpointError(f"{where} entry {key!r} is a nested tensor, which is not read")
        leaves[key] = (
            _dtype(entry.get("dtype"), f"{where} entry {key!r}"),
            _shape(entry.get("shape"), f"{where} entry {key!r}"),
        )
    return leaves


def _read_json(data: bytes, where: str) -> Any:
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{where} is not valid JSON: {err}") from None


def _read_directory(path: Path) -> dict[str, torch.Tensor]:
    leaves = _memmap_leaves(
        _read_json((path / "meta.json").read_bytes(), f"{path}/meta.json"), f"{path}/meta.json"
    )
    expected = {"meta.json", *(f"{key}.memmap" for key in leaves)}
    for file in path.iterdir():
        if file.name not in expected:
            raise CheckpointError(
                f"{path} holds {file.name!r}, which is not a tensor of meta.json (a "
                f"pickled or nested entry?); refusing to read it"
            )
    out = {}
    for key, (dtype, shape) in leaves.items():
        file = path / f"{key}.memmap"
        size = file.stat().st_size if file.exists() else 0
        if _nbytes(size, dtype, shape, str(file)) == 0:
            out[key] = torch.empty(shape, dtype=dtype)
        else:  # read straight from the file into a private tensor
            numel = math.prod(shape)
            out[key] = torch.from_file(str(file), shared=False, size=numel, dtype=dtype).reshape(
                shape
            )
    return out


def _read_member(archive: zipfile.ZipFile, name: str, limit: int, where: str) -> bytes:
    """The bytes of member ``name``, refused before anything is inflated when the archive
    declares more than ``limit`` of them (a small compressed member can inflate to
    gigabytes)."""
    size = archive.getinfo(name).file_size
    if size > limit:
        raise CheckpointError(
            f"{where} declares {size} bytes, expected at most {limit}; refusing to inflate it"
        )
    with archive.open(name) as reader:
        return reader.read(limit)


def _read_tdz(path: Path) -> dict[str, torch.Tensor]:
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            if "meta.json" not in names:
                raise CheckpointError(f"{path} has no meta.json")
            where = f"{path}:meta.json"
            leaves = _memmap_leaves(
                _read_json(_read_member(archive, "meta.json", MAX_JSON_BYTES, where), where), where
            )
            extra = names - {"meta.json", *(f"{key}.memmap" for key in leaves)}
            if extra:
                raise CheckpointError(
                    f"{path} holds {sorted(extra)}, which are not tensors of meta.json"
                )
            out = {}
            for key, (dtype, shape) in leaves.items():
                name, where = f"{key}.memmap", f"{path}:{key}.memmap"
                nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
                data = _read_member(archive, name, nbytes, where) if name in names else b""
                out[key] = _from_bytes(data, dtype, shape, where)
            return out
    except zipfile.BadZipFile as err:
        raise CheckpointError(f"{path} is not a readable archive: {err}") from None


def _read_consolidated(path: Path) -> dict[str, torch.Tensor]:
    """A consolidated file: the tensors' bytes, their JSON metadata, its length (int64)."""
    data = memoryview(path.read_bytes())
    if len(data) < 8:
        raise CheckpointError(f"{path} has {len(data)} bytes, too short for a consolidated file")
    size = int.from_bytes(data[-8:], "little", signed=True)
    if not 0 < size <= len(data) - 8:
        raise CheckpointError(
            f"{path} declares {size} bytes of metadata in a {len(data)}-byte file"
        )
    storage = data[: len(data) - 8 - size]
    meta = _read_json(bytes(data[len(storage) : len(data) - 8]), f"{path} metadata")
    if not isinstance(meta, dict) or meta.get("cls") != "TensorDict" or meta.get("non_tensors"):
        raise CheckpointError(
            f"{path} describes {meta.get('cls') if isinstance(meta, dict) else meta!r} with "
            f"non-tensor entries or another class, expected a plain TensorDict of tensors"
        )
    leaves = meta.get("leaves")
    if not isinstance(leaves, dict) or set(meta) - {"cls", "non_tensors", "leaves", "cls_metadata"}:
        raise CheckpointError(
            f"{path} metadata has keys {sorted(meta)}, expected a flat TensorDict"
        )
    out = {}
    for key, leaf in leaves.items():
        where = f"{path} entry {key!r}"
        if not _TENSOR_KEY.fullmatch(key) or not isinstance(leaf, list) or len(leaf) < 4:
            raise CheckpointError(f"{where} is not a [dtype, shape, start, stop, ...] tensor leaf")
        dtype, shape = _dtype(leaf[0], where), _shape(leaf[1], where)
        start, stop = leaf[2], leaf[3]
        if not (
            isinstance(start, int) and isinstance(stop, int) and 0 <= start <= stop <= len(storage)
        ):
            raise CheckpointError(f"{where} spans bytes {start!r}..{stop!r} of {len(storage)}")
        out[key] = _from_bytes(storage[start:stop], dtype, shape, where)
    return out


def read_tensors(path: Path, layout: str) -> dict[str, torch.Tensor]:
    """Reads what :func:`write_tensors` wrote, without importing or unpickling anything.

    Raises:
        CheckpointError: the files hold anything but a flat TensorDict of ``tensor_*``
            leaves (naming the file and the entry).
    """
    if layout == "directory":
        return _read_directory(path)
    if layout == "archive":
        return _read_tdz(path)
    return _read_consolidated(path)
