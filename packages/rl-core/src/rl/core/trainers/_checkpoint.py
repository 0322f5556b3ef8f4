"""Checkpoint files: atomic writes, tensor-only loading, RNG states, configuration checks."""

from __future__ import annotations

import errno
import os
import pickle
import random
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..files import fsync_dir, remove_stale_temporaries, temporary_path

__all__ = [
    "CheckpointError",
    "atomic_save",
    "check_state_compatible",
    "from_plain",
    "get_rng_state",
    "load_checkpoint",
    "set_rng_state",
    "to_plain",
]

_NDARRAY = "__rl_ndarray__"


class CheckpointError(RuntimeError):
    """A checkpoint cannot be read or does not belong to this run's configuration.

    Args:
        message (str): what went wrong; ``str(error)`` is this message.
        result (Any, optional): the partial result of the load that failed, kept on the
            error as ``error.result`` for the caller to inspect. Defaults to ``None``.

    Examples:
        >>> error = CheckpointError("invalid checkpoint")
        >>> str(error), error.result
        ('invalid checkpoint', None)
    """

    def __init__(self, message: str, result: Any = None) -> None:
        super().__init__(message)
        self.result = result


class _KeepWriteErrors:
    """A file whose first write error is kept: torch's writer turns it into ``unexpected
    pos``, which names neither the file nor the cause."""

    def __init__(self, file: Any) -> None:
        self.file = file
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return self.file.write(data)
        except OSError as err:
            self.error = self.error or err
            raise

    def flush(self) -> None:
        try:
            self.file.flush()
        except OSError as err:
            self.error = self.error or err
            raise


def _free_space(path: Path) -> str:
    try:
        st = os.statvfs(path)
    except OSError:
        return "unknown"
    free = st.f_bavail * st.f_frsize
    for unit, scale in (("GB", 1e9), ("MB", 1e6)):
        if free >= scale:
            return f"{free / scale:.1f} {unit}"
    return f"{free / 1e3:.1f} kB"


def atomic_save(obj: Any, path: str | os.PathLike) -> Path:
    """Writes ``obj`` with :func:`torch.save` to a temporary file, fsyncs it and renames it.

    A process killed at any point leaves either the previous file or the new one, whole;
    the temporaries of killed writers are removed by the next save.

    Args:
        obj: tensors and plain containers (see :func:`to_plain`).
        path: the checkpoint file.

    Returns:
        The path written.

    Raises:
        OSError: the file could not be written (a full disk: ``errno.ENOSPC``), naming the
            file and the cause; the temporary file is removed and the previous file is
            left as it was.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(final)
    tmp = temporary_path(final)
    writer = None
    try:
        with open(tmp, "wb") as f:
            writer = _KeepWriteErrors(f)
            torch.save(obj, writer)
            writer.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException as err:
        try:
            tmp.unlink()
        except OSError:
            pass
        cause = writer.error if writer is not None and writer.error is not None else err
        failed_io = isinstance(err, (OSError, RuntimeError))  # torch: "unexpected pos"
        if failed_io and isinstance(cause, OSError) and cause.errno is not None:
            reason = os.strerror(cause.errno).lower()
            if cause.errno in (errno.ENOSPC, errno.EDQUOT):
                free = _free_space(final.parent)
                reason += f" (the disk is full; {free} free once the partial file was removed)"
            raise OSError(
                cause.errno,
                f"cannot write '{final}': {reason}; the previous file, if any, is unchanged",
            ) from None
        raise
    fsync_dir(final.parent)
    return final


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Reads a checkpoint with ``torch.load(weights_only=True)``: tensors and plain containers.

    Raises:
        FileNotFoundError: there is no file at ``path``.
        CheckpointError: the file holds anything else (a pickled class or callable), or is
            not a checkpoint at all.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at '{path}'")
    if not zipfile.is_zipfile(path):
        raise CheckpointError(
            f"'{path}' is not a readable checkpoint: not a torch.save archive (truncated or "
            f"another format)"
        )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        reason = str(err).strip().splitlines()
        detail = next((line for line in reason if "GLOBAL" in line or "Unsupported" in line), "")
        raise CheckpointError(
            f"refusing to load '{path}': it holds objects other than tensors and plain "
            f"containers, which checkpoints are loaded without unpickling ({detail.strip()})"
        ) from None
    except (RuntimeError, EOFError, OSError) as err:
        raise CheckpointError(f"'{path}' is not a readable checkpoint: {err}") from None
    if not isinstance(state, dict):
        raise CheckpointError(
            f"'{path}' is not a checkpoint: expected a dict of tensors and plain containers, "
            f"it holds a {type(state).__name__}"
        )
    return state


def to_plain(obj: Any) -> Any:
    """Converts numpy arrays and scalars in nested containers to tensors and Python numbers.

    What comes out is readable by ``torch.load(weights_only=True)``; :func:`from_plain`
    turns the arrays back.
    """
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            raise TypeError("a checkpoint cannot hold a numpy array of Python objects")
        return {_NDARRAY: torch.from_numpy(np.ascontiguousarray(obj).copy())}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Mapping):
        return {k: to_plain(v) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return tuple(to_plain(v) for v in obj)
    if isinstance(obj, list):
        return [to_plain(v) for v in obj]
    return obj


def from_plain(obj: Any) -> Any:
    """Inverse of :func:`to_plain`."""
    if isinstance(obj, Mapping):
        if len(obj) == 1 and _NDARRAY in obj:
            return obj[_NDARRAY].numpy()
        return {k: from_plain(v) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return tuple(from_plain(v) for v in obj)
    if isinstance(obj, list):
        return [from_plain(v) for v in obj]
    return obj


def get_rng_state() -> dict[str, Any]:
    """The states of torch's (CPU and CUDA), numpy's global and Python's generators."""
    state = {
        "torch": torch.get_rng_state(),
        "numpy": to_plain(np.random.get_state()),
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restores :func:`get_rng_state`."""
    torch.set_rng_state(state["torch"])
    np.random.set_state(from_plain(state["numpy"]))
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    if isinstance(value, Mapping):
        return "a mapping"
    return f"a {type(value).__name__}"


def check_state_compatible(saved: Any, current: Any, where: str) -> None:
    """Checks that a saved ``state_dict`` has the keys and tensor shapes of ``current``.

    Only structure is compared (keys, tensor shapes and dtypes), not values.

    Raises:
        CheckpointError: naming the first key that is missing on one side or whose tensor
            shape or dtype differs.
    """
    if isinstance(current, torch.Tensor) or isinstance(saved, torch.Tensor):
        if not (isinstance(current, torch.Tensor) and isinstance(saved, torch.Tensor)):
            raise CheckpointError(
                f"checkpoint does not match this configuration: {where} is "
                f"{_describe(saved)} in the checkpoint, {_describe(current)} here"
            )
        if saved.shape != current.shape:
            raise CheckpointError(
                f"checkpoint does not match this configuration: {where} has shape "
                f"{tuple(saved.shape)} in the checkpoint, {tuple(current.shape)} here"
            )
        if saved.dtype != current.dtype:
            raise CheckpointError(
                f"checkpoint does not match this configuration: {where} has dtype "
                f"{saved.dtype} in the checkpoint, {current.dtype} here"
            )
        return
    if isinstance(current, Mapping) and isinstance(saved, Mapping):
        for key in current:
            if key not in saved:
                raise CheckpointError(
                    f"checkpoint does not match this configuration: {where}[{key!r}] is "
                    f"missing from the checkpoint"
                )
        for key in saved:
            if key not in current:
                raise CheckpointError(
                    f"checkpoint does not match this configuration: the checkpoint has "
                    f"{where}[{key!r}], which this run does not have"
                )
        for key in current:
            check_state_compatible(saved[key], current[key], f"{where}[{key!r}]")
