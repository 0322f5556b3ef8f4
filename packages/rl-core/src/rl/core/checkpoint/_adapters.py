"""Adapters: how one checkpoint component is written to and read from its folder."""

from __future__ import annotations

import abc
import json
import pickle
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from ..trainers import CheckpointError, atomic_save
from ._payload import decode_state, encode_state, read_tensors, to_json_value, write_tensors

__all__ = [
    "CheckpointAdapter",
    "CheckpointOptions",
    "DumpLoadCheckpointAdapter",
    "JSONCheckpointAdapter",
    "StateDictCheckpointAdapter",
    "StateDictFormat",
]

StateDictFormat = Literal["directory", "archive", "consolidated", "torch"]


def check_weights_only(tensor_load_kwargs: Mapping[str, Any]) -> None:
    """Refuses ``tensor_load_kwargs`` that would let ``torch.load`` unpickle objects.

    Raises:
        ValueError: ``weights_only`` is given and is not ``True``.
    """
    weights_only = tensor_load_kwargs.get("weights_only", True)
    if weights_only is not True:
        raise ValueError(
            f"tensor_load_kwargs has weights_only={weights_only!r}, expected True: "
            "checkpoints are loaded without unpickling arbitrary objects"
        )


@dataclass(frozen=True)
class CheckpointOptions:
    """Arguments passed to a component's save and load methods.

    Options given to one :meth:`Checkpoint.save` / :meth:`Checkpoint.load` call are merged
    over those given at registration: keyword arguments key by key, positional arguments
    replaced as a whole when the call gives them.

    Args:
        save_args (tuple, optional): positional arguments after the path for ``dump``,
            or the arguments of ``state_dict``. Defaults to ``None``.
        save_kwargs (Mapping, optional): keyword arguments when saving. Defaults to ``None``.
        load_args (tuple, optional): positional arguments after the path for ``load``,
            or after the state for ``load_state_dict``. Defaults to ``None``.
        load_kwargs (Mapping, optional): keyword arguments when loading. Defaults to ``None``.

    Examples:
        >>> from rl.core import CheckpointOptions
        >>> base = CheckpointOptions(save_args=("a",), save_kwargs={"x": 1, "y": 2})
        >>> merged = base.merged(CheckpointOptions(save_kwargs={"y": 3}))
        >>> merged.save_args, merged.save_kwargs
        (('a',), {'x': 1, 'y': 3})
    """

    save_args: tuple[Any, ...] | None = None
    save_kwargs: Mapping[str, Any] | None = None
    load_args: tuple[Any, ...] | None = None
    load_kwargs: Mapping[str, Any] | None = None

    def merged(self, override: CheckpointOptions | None) -> CheckpointOptions:
        """These options with ``override`` applied over them."""
        if override is None:
            return self
        return CheckpointOptions(
            save_args=self.save_args if override.save_args is None else override.save_args,
            save_kwargs={**(self.save_kwargs or {}), **(override.save_kwargs or {})},
            load_args=self.load_args if override.load_args is None else override.load_args,
            load_kwargs={**(self.load_kwargs or {}), **(override.load_kwargs or {})},
        )


class CheckpointAdapter(abc.ABC):
    """Writes one checkpoint component into a folder and restores it from there.

    The folder is a real local directory even when the checkpoint is an archive, so an
    adapter may write any files. ``adapter_id`` and ``format_version`` are recorded in the
    manifest; loading with an adapter of another id or version is reported as incompatible.

    Examples:
        >>> import json
        >>> from rl.core import CheckpointAdapter
        >>> class Text(CheckpointAdapter):
        ...     adapter_id = "example.text"
        ...     def save(self, component, path, *, args, kwargs):
        ...         path.mkdir(parents=True, exist_ok=True)
        ...         (path / "text.json").write_text(json.dumps(component["text"]))
        ...     def load(self, component, path, *, map_location, tensor_load_kwargs, args, kwargs):
        ...         component["text"] = json.loads((path / "text.json").read_text())
        >>> Text().format_version
        1
    """

    adapter_id: str
    format_version: int = 1

    @abc.abstractmethod
    def save(
        self, component: Any, path: Path, *, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> Any:
        """Writes ``component`` below ``path``."""

    @abc.abstractmethod
    def load(
        self,
        component: Any,
        path: Path,
        *,
        map_location: Any,
        tensor_load_kwargs: Mapping[str, Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
    ) -> Any:
        """Restores ``component`` from ``path``; a value returned lands in
        :attr:`CheckpointLoadResult.values`."""

    def _detach_from_load_path(self, component: Any) -> None:
        """Called after loading from an archive, whose extracted files are then deleted."""
        del component


class DumpLoadCheckpointAdapter(CheckpointAdapter):
    """For objects with ``dump(path)`` and ``load(path)`` (replay buffers, storages).

    Examples:
        >>> from rl.core import DumpLoadCheckpointAdapter
        >>> DumpLoadCheckpointAdapter().adapter_id
        'torchrl.dump_load'
    """

    adapter_id = "torchrl.dump_load"

    def save(
        self, component: Any, path: Path, *, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> Any:
        path.mkdir(parents=True, exist_ok=True)
        return component.dump(path, *args, **kwargs)

    def load(
        self,
        component: Any,
        path: Path,
        *,
        map_location: Any,
        tensor_load_kwargs: Mapping[str, Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
    ) -> Any:
        del map_location, tensor_load_kwargs
        component.load(path, *args, **kwargs)
        return None


class StateDictCheckpointAdapter(CheckpointAdapter):
    """For objects with ``state_dict()`` and ``load_state_dict(state)`` (modules, optimizers).

    The state's tensors are written as a TensorDict and its structure as ``state.json``
    (no pickle); ``payload_format`` picks the TensorDict layout, or ``"torch"`` for
    :func:`torch.save`. Loading recognises all four, and reads ``"torch"`` payloads with
    ``torch.load(weights_only=True)``: a file that holds anything but tensors and plain
    containers is refused, never unpickled.

    Args:
        payload_format (str, optional): ``"directory"`` (memory-mapped files),
            ``"archive"`` (one ``.tdz`` file), ``"consolidated"`` (one ``.tdc`` file) or
            ``"torch"`` (``state.pt``). Defaults to ``"directory"``.

    Keyword Args:
        archive_compression (str or int, optional): compression of the ``"archive"``
            payload, passed to tensordict. Defaults to ``None``.

    Raises:
        ValueError: an unknown ``payload_format``.

    Examples:
        >>> from rl.core import StateDictCheckpointAdapter
        >>> StateDictCheckpointAdapter().payload_format
        'directory'
        >>> StateDictCheckpointAdapter(payload_format="torch").payload_format
        'torch'
    """

    adapter_id = "torchrl.state_dict"
    state_directory = "state"
    state_archive = "state.tdz"
    state_consolidated = "state.tdc"
    state_torch = "state.pt"
    schema_filename = "state.json"

    def __init__(
        self,
        payload_format: StateDictFormat = "directory",
        *,
        archive_compression: str | int | None = None,
    ) -> None:
        if payload_format not in ("directory", "archive", "consolidated", "torch"):
            raise ValueError(
                f"payload_format must be 'directory', 'archive', 'consolidated' or 'torch', "
                f"got {payload_format!r}"
            )
        self.payload_format = payload_format
        self.archive_compression = archive_compression

    def save(
        self, component: Any, path: Path, *, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> Any:
        path.mkdir(parents=True, exist_ok=True)
        state = component.state_dict(*args, **kwargs)
        if self.payload_format == "torch":
            atomic_save(state, path / self.state_torch)
            return state
        tensors: dict[str, torch.Tensor] = {}
        schema = encode_state(state, tensors)
        files = {
            "directory": self.state_directory,
            "archive": self.state_archive,
            "consolidated": self.state_consolidated,
        }
        write_tensors(
            tensors,
            path / files[self.payload_format],
            self.payload_format,
            self.archive_compression,
        )
        with (path / self.schema_filename).open("w", encoding="utf-8") as file:
            json.dump(schema, file, separators=(",", ":"))
            file.write("\n")
        return state

    def load(
        self,
        component: Any,
        path: Path,
        *,
        map_location: Any,
        tensor_load_kwargs: Mapping[str, Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
    ) -> Any:
        torch_path = path / self.state_torch
        if torch_path.exists():
            state = self._torch_load(torch_path, map_location, tensor_load_kwargs)
        else:
            unsupported = set(tensor_load_kwargs) - {"mmap", "weights_only"}
            if unsupported:
                raise TypeError(
                    f"tensor_load_kwargs {sorted(unsupported)} are only accepted by 'torch' "
                    f"state-dict payloads; {path} holds a TensorDict payload"
                )
            for layout, name in (
                ("directory", self.state_directory),
                ("archive", self.state_archive),
                ("consolidated", self.state_consolidated),
            ):
                if (path / name).exists():
                    tensors = read_tensors(path / name, layout)
                    break
            else:
                raise FileNotFoundError(f"no state-dict payload below {path}")
            schema_path = path / self.schema_filename
            try:
                schema = json.loads(schema_path.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as err:
                raise CheckpointError(f"{schema_path} is not valid JSON: {err}") from None
            try:
                state = decode_state(schema, tensors, map_location)
            except (KeyError, IndexError, TypeError, ValueError) as err:
                raise CheckpointError(
                    f"{schema_path} is malformed: {type(err).__name__}: {err}"
                ) from None
        component.load_state_dict(state, *args, **kwargs)
        return None

    @staticmethod
    def _torch_load(path: Path, map_location: Any, tensor_load_kwargs: Mapping[str, Any]) -> Any:
        check_weights_only(tensor_load_kwargs)
        load_kwargs: dict[str, Any] = {"weights_only": True}
        load_kwargs.update(tensor_load_kwargs)
        if map_location is not None:
            load_kwargs["map_location"] = map_location
        try:
            return torch.load(path, **load_kwargs)
        except pickle.UnpicklingError as err:
            lines = str(err).strip().splitlines()
            detail = next((line for line in lines if "GLOBAL" in line or "Unsupported" in line), "")
            raise CheckpointError(
                f"refusing to load '{path}': it holds objects other than tensors and plain "
                f"containers, which checkpoints are loaded without unpickling ({detail.strip()})"
            ) from None


class JSONCheckpointAdapter(CheckpointAdapter):
    """For JSON values: configurations, metrics, counters.

    A registered dict or list is updated in place on load; any other value (a number, a
    string) is returned in :attr:`CheckpointLoadResult.values`.

    Examples:
        >>> from rl.core import JSONCheckpointAdapter
        >>> JSONCheckpointAdapter().adapter_id
        'torchrl.json'
    """

    adapter_id = "torchrl.json"
    state_filename = "value.json"

    def save(
        self, component: Any, path: Path, *, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> Any:
        if args or kwargs:
            raise TypeError(
                f"JSON checkpoint components take no save options, got {args!r} {dict(kwargs)!r}"
            )
        path.mkdir(parents=True, exist_ok=True)
        with (path / self.state_filename).open("w", encoding="utf-8") as file:
            json.dump(to_json_value(component), file, indent=2, sort_keys=True)
        return component

    def load(
        self,
        component: Any,
        path: Path,
        *,
        map_location: Any,
        tensor_load_kwargs: Mapping[str, Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
    ) -> Any:
        del map_location, tensor_load_kwargs
        if args or kwargs:
            raise TypeError(
                f"JSON checkpoint components take no load options, got {args!r} {dict(kwargs)!r}"
            )
        file = path / self.state_filename
        try:
            value = json.loads(file.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise CheckpointError(f"{file} is not valid JSON: {err}") from None
        if isinstance(component, MutableMapping) and isinstance(value, Mapping):
            component.clear()
            component.update(value)
            return component
        if isinstance(component, list) and isinstance(value, list):
            component[:] = value
            return component
        return value
