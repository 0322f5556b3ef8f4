"""The done entries of an env: completing its done spec and the flags ``_step`` leaves out.

As in TorchRL, an env declares ``done`` and ``terminated`` by default (``truncated`` only
when it says so: ``env.add_truncated_keys()`` or its own ``full_done_spec``), a done spec
holding one of ``done`` / ``terminated`` gets the other, and a ``_step`` / ``_reset``
output that leaves a declared flag out gets it filled in.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from rl.core import Categorical, Composite

__all__ = ["complete_done", "complete_done_spec", "default_done_spec"]


def _flag(shape, device) -> Categorical:
    return Categorical(2, shape=(*shape, 1), dtype=torch.bool, device=device)


def default_done_spec(batch_size, device=None, *, truncated: bool = False) -> Composite:
    """Boolean ``done`` / ``terminated`` (and ``truncated``) flags of shape ``[*batch, 1]``.

    Args:
        batch_size: the env batch size.
        device: the device of the flags.
        truncated: add a ``truncated`` flag (envs that report time limits).
    """
    bs = torch.Size(batch_size)
    spec = Composite(done=_flag(bs, device), terminated=_flag(bs, device), shape=bs)
    if truncated:
        spec["truncated"] = _flag(bs, device)
    return spec


def complete_done_spec(spec: Composite, device=None) -> bool:
    """Completes ``spec`` in place as TorchRL does; returns whether it changed.

    In every (sub-)Composite, a ``done`` entry without ``terminated`` gets a copy named
    ``terminated`` and the other way round; an empty Composite gets both flags.
    """
    changed = False
    keys = set(spec.keys())
    if "done" in keys and "terminated" not in keys:
        spec["terminated"] = spec["done"].clone()
        changed = True
    elif "terminated" in keys and "done" not in keys:
        spec["done"] = spec["terminated"].clone()
        changed = True
    for key in keys:
        sub = spec[key]
        if isinstance(sub, Composite):
            changed = complete_done_spec(sub, device) or changed
    if not keys:
        spec["done"] = _flag(spec.shape, device)
        spec["terminated"] = _flag(spec.shape, device)
        changed = True
    return changed


def complete_done(spec: Composite, td: TensorDictBase, nb: int) -> None:
    """Adds the entries of the done ``spec`` that ``td`` lacks, in place.

    Per group of flags (the root, or a sub-tensordict such as ``"agents"``): a missing
    ``terminated`` is ``done`` (and a ``RuntimeError`` when ``truncated`` is given too: the
    two cannot be told apart, as in TorchRL); a missing ``done`` is
    ``terminated | truncated`` of the flags given; any other missing flag is ``False``.

    TorchRL leaves ``done`` ``False`` when ``_step`` writes ``truncated`` alone; here
    ``done`` is always ``terminated | truncated`` (the contract the value estimators and
    collectors of ``rl`` rely on), so it is ``True`` where ``truncated`` is.

    Args:
        spec: the env's ``full_done_spec``.
        td: the output of ``_step`` / ``_reset`` (not nested under ``"next"``).
        nb: the number of env batch dims (``len(env.batch_size)``).
    """
    present = set(td.keys(True, True))
    declared = list(spec.keys(True, True))
    missing = [key for key in declared if key not in present]
    if not missing:
        return
    groups: dict[tuple, list[str]] = {}
    for key in missing:
        path = (key,) if isinstance(key, str) else tuple(key)
        groups.setdefault(path[:-1], []).append(path[-1])
    extra = td.batch_size[: td.batch_dims - nb]  # leading dims of envs not batch-locked
    for key in declared:
        # a flag given in another shape (a Python bool for a (1,) flag): reshaped to the
        # spec's, as TorchRL's ``_complete_done``
        if key in present:
            value, shape = td.get(key), (*extra, *spec[key].shape)
            if value.shape != shape:
                td.set(key, value.reshape(shape))
    for group, names in groups.items():

        def given(name: str, group=group) -> torch.Tensor | None:
            # a flag counts when _step returned it and the spec declares it
            key = (*group, name) if group else name
            return td.get(key) if key in present and key in declared else None

        done, terminated, truncated = given("done"), given("terminated"), given("truncated")
        for name in names:
            key = (*group, name) if group else name
            leaf = spec[key]
            if name == "terminated" and done is not None:
                if truncated is not None:
                    raise RuntimeError(
                        f"_step returned done and truncated but no {key!r} entry: "
                        "terminated cannot be inferred from them, return it too"
                    )
                value = done.clone()
            elif name == "done" and (terminated is not None or truncated is not None):
                flags = [f for f in (terminated, truncated) if f is not None]
                value = flags[0] | flags[1] if len(flags) == 2 else flags[0].clone()
            else:
                ref = next((f for f in (done, terminated, truncated) if f is not None), None)
                shape = ref.shape if ref is not None else (*extra, *leaf.shape)
                value = torch.zeros(shape, dtype=leaf.dtype, device=leaf.device)
            td.set(key, value if value.dtype == leaf.dtype else value.to(leaf.dtype))
