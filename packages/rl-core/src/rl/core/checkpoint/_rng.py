"""The process-global random generators as one checkpoint component."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

__all__ = ["GlobalRNGState"]


class GlobalRNGState:
    """The process-global random generators: Python's, numpy's, torch's CPU and accelerators'.

    Register one in a :class:`Checkpoint` to make a resumed run draw the same random
    numbers as an uninterrupted one. :meth:`state_dict` captures the generators when it is
    called; CUDA / XPU / MPS states are captured only once that device has been used.
    The state holds tensors and plain values only (numpy's key is kept as an ``int64``
    tensor).

    Examples:
        >>> import torch
        >>> from rl.core import GlobalRNGState
        >>> state = GlobalRNGState().state_dict()
        >>> first = torch.rand(2)
        >>> GlobalRNGState().load_state_dict(state)
        >>> torch.equal(torch.rand(2), first)
        True
    """

    def state_dict(self) -> dict[str, Any]:
        """The current states, keyed ``python``, ``numpy``, ``torch_cpu`` and, when in
        use, ``torch_cuda`` / ``torch_xpu`` / ``torch_mps``."""
        kind, key, pos, has_gauss, gauss = np.random.get_state()
        state: dict[str, Any] = {
            "python": random.getstate(),
            "numpy": (kind, torch.from_numpy(key.astype(np.int64)), pos, has_gauss, gauss),
            "torch_cpu": torch.random.get_rng_state(),
        }
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["torch_cuda"] = torch.cuda.get_rng_state_all()
        xpu = getattr(torch, "xpu", None)
        if (
            xpu is not None
            and xpu.is_available()
            and getattr(xpu, "is_initialized", lambda: False)()
        ):
            state["torch_xpu"] = xpu.get_rng_state_all()
        mps = getattr(torch, "mps", None)
        if (
            mps is not None
            and torch.backends.mps.is_available()
            and getattr(mps, "_default_mps_generator", None) is not None
        ):
            state["torch_mps"] = mps.get_rng_state()
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restores the states :meth:`state_dict` returned.

        Raises:
            KeyError: ``state_dict`` lacks one of ``python``, ``numpy``, ``torch_cpu``.
            RuntimeError: it holds an accelerator's state and that accelerator is absent.
        """
        for key in ("python", "numpy", "torch_cpu"):
            if key not in state_dict:
                raise KeyError(
                    f"GlobalRNGState state has no {key!r} entry; it has {sorted(state_dict)}"
                )
        version, internal, gauss = state_dict["python"]
        random.setstate((version, tuple(internal), gauss))
        kind, key, pos, has_gauss, cached = state_dict["numpy"]
        if isinstance(key, torch.Tensor):
            key = key.cpu().numpy()
        np.random.set_state((kind, np.asarray(key).astype(np.uint32), pos, has_gauss, cached))
        torch.random.set_rng_state(state_dict["torch_cpu"].cpu())
        accelerators = (("torch_cuda", "cuda"), ("torch_xpu", "xpu"))
        for entry, name in accelerators:
            if entry not in state_dict:
                continue
            module = getattr(torch, name, None)
            if module is None or not module.is_available():
                raise RuntimeError(
                    f"the checkpoint holds a {name.upper()} RNG state, but {name} is unavailable"
                )
            module.set_rng_state_all([rng.cpu() for rng in state_dict[entry]])
        if "torch_mps" in state_dict:
            if not torch.backends.mps.is_available():
                raise RuntimeError("the checkpoint holds an MPS RNG state, but mps is unavailable")
            torch.mps.set_rng_state(state_dict["torch_mps"].cpu())
