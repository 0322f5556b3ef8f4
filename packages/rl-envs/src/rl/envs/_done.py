"""Completing the done entries an env's ``_step`` / ``_reset`` leaves out (as TorchRL does)."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from rl.core import Composite

__all__ = ["complete_done"]


def complete_done(spec: Composite, td: TensorDictBase, nb: int) -> None:
    """Adds the entries of the done ``spec`` that ``td`` lacks, as TorchRL does.

    ``terminated`` defaults to ``done``, ``done`` to ``terminated | truncated`` and
    ``truncated`` (or a lone missing flag) to ``False``.
    """
    keys = td.keys(True, True)
    missing = [key for key in spec.keys(True, True) if key not in keys]
    if not missing:
        return
    lead = td.batch_size
    for key in missing:
        *group, name = (key,) if isinstance(key, str) else key
        group = tuple(group)
        leaf = spec[key]
        done_key = (*group, "done") if group else "done"
        if name == "terminated" and done_key in keys:
            value = td.get(done_key).clone()
        elif name == "done":
            value = None
            for flag in ("terminated", "truncated"):
                fkey = group + (flag,) if group else flag
                if fkey in td.keys(True, True):
                    value = td.get(fkey) if value is None else value | td.get(fkey)
            if value is None:
                value = torch.zeros((*lead, *leaf.shape[nb:]), dtype=leaf.dtype, device=leaf.device)
            else:
                value = value.clone()
        else:
            shape = (*lead, *leaf.shape[nb:]) if not group else leaf.shape
            ref = td.get(group + ("done",), None) if group else td.get("done", None)
            if ref is not None:
                shape = ref.shape
            value = torch.zeros(shape, dtype=leaf.dtype, device=leaf.device)
        td.set(key, value)
