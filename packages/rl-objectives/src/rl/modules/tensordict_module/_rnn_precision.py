"""The recurrent matmul precision setting (TorchRL's ``set_recurrent_matmul_precision``).

TorchRL's triton GRU/LSTM kernels run their hidden-to-hidden matmul at a precision
chosen here: ``"ieee"`` (full FP32), ``"tf32"`` (TF32 tensor cores) or ``"tf32x3"``
(three TF32 products, about FP32 accuracy), or a GPU-aware preset resolved per call:
``"fast"`` (``"tf32"`` on compute capability 8.0 and newer, else ``"ieee"``) and
``"high-prec"`` (``"tf32x3"``, else ``"ieee"``). ``"auto"`` defers to the global setting,
then the ``RL_RNN_PRECISION`` (or TorchRL's ``TORCHRL_RNN_PRECISION``) environment
variable, then :func:`torch.get_float32_matmul_precision` (``"highest"`` -> ``"ieee"``,
``"high"`` -> ``"high-prec"``, ``"medium"`` -> ``"fast"``).

rl ships no triton kernels: its ``"pad"`` and ``"scan"`` backends, like TorchRL's, run at
torch's own matmul precision. The setting is kept, validated and resolved as in TorchRL
so that code and configurations written for TorchRL carry over.
"""

from __future__ import annotations

import os

import torch

__all__ = ["get_recurrent_matmul_precision", "set_recurrent_matmul_precision"]

_CONCRETE = ("ieee", "tf32", "tf32x3")
_PRESETS = ("fast", "high-prec")
_USER_MODES = ("auto", *_PRESETS, *_CONCRETE)
_FROM_TORCH = {"highest": "ieee", "high": "high-prec", "medium": "fast"}
_ENV_VARS = ("RL_RNN_PRECISION", "TORCHRL_RNN_PRECISION")


def _env_default() -> str | None:
    for var in _ENV_VARS:
        raw = os.environ.get(var)
        if raw is None:
            continue
        raw = raw.strip().lower()
        if raw in ("", "auto"):
            return None
        if raw not in (*_CONCRETE, *_PRESETS):
            raise ValueError(
                f"{var}={raw!r} is not a valid recurrent matmul precision; expected one of "
                f"{sorted(_USER_MODES)}"
            )
        return raw
    return None


_GLOBAL: list[str | None] = [_env_default()]


def _tensor_cores() -> bool:
    """Whether the current CUDA device has TF32 tensor cores (NVIDIA, capability >= 8)."""
    if not torch.cuda.is_available() or getattr(torch.version, "hip", None) is not None:
        return False
    try:
        major, _ = torch.cuda.get_device_capability(torch.cuda.current_device())
    except (RuntimeError, AssertionError):
        return False
    return major >= 8


def _resolve(mode: str | None) -> str:
    if mode is None or mode == "auto":
        if _GLOBAL[0] is not None:
            return _resolve(_GLOBAL[0])
        return _resolve(_FROM_TORCH[torch.get_float32_matmul_precision()])
    if mode in _PRESETS:
        if not _tensor_cores():
            return "ieee"
        return "tf32" if mode == "fast" else "tf32x3"
    return mode


def set_recurrent_matmul_precision(mode: str | None) -> None:
    """Sets the process-wide recurrent matmul precision (see the module notes).

    Args:
        mode: ``"ieee"``, ``"tf32"``, ``"tf32x3"``, ``"fast"``, ``"high-prec"``;
            ``"auto"`` or ``None`` clear the setting (back to the environment variable,
            then torch's float32 matmul precision). A module's
            ``recurrent_matmul_precision`` other than ``"auto"`` takes precedence.

    Raises:
        ValueError: for any other mode.

    Examples:
        >>> from rl.modules import get_recurrent_matmul_precision, set_recurrent_matmul_precision
        >>> set_recurrent_matmul_precision("tf32x3")
        >>> get_recurrent_matmul_precision()
        'tf32x3'
        >>> set_recurrent_matmul_precision(None)
    """
    if mode is None or mode == "auto":
        _GLOBAL[0] = _env_default()
        return
    if mode not in (*_CONCRETE, *_PRESETS):
        raise ValueError(
            f"Invalid recurrent matmul precision {mode!r}; expected one of {sorted(_USER_MODES)}"
        )
    _GLOBAL[0] = mode


def get_recurrent_matmul_precision() -> str:
    """The effective precision, resolved to ``"ieee"``, ``"tf32"`` or ``"tf32x3"``.

    Presets resolve for the current CUDA device (``"ieee"`` without tensor cores, on a
    CPU or an AMD GPU).
    """
    return _resolve(None)
