"""Specs whose entries vary in shape: what preallocated batched-env buffers cannot hold.

A group of agents whose spaces differ (a heterogeneous PettingZoo group, as TorchRL lays
it out) has a ``StackedComposite`` spec: a leaf whose members differ in shape has ``-1``
in its shape (TorchRL's "dynamic specs"), and members may hold entries the others lack.
``SerialEnv`` then stacks the sub-envs' outputs at each call (``use_buffers=False``);
``ParallelEnv`` cannot lay such an entry out in shared memory and says so. Non-tensor
entries (``NonTensor`` specs: strings, python objects) are handled the same way.
"""

from __future__ import annotations

from typing import Any

from rl.core import NonTensor, StackedComposite

__all__ = ["dynamic_spec_entry", "dynamic_specs_error"]

_SPEC_NAMES = ("output_spec", "input_spec")


def dynamic_spec_entry(env: Any) -> tuple[tuple, Any] | None:
    """The first entry of ``env``'s specs whose shape varies, or ``None``.

    Args:
        env: an env (or anything with ``output_spec`` and ``input_spec``).

    Returns:
        ``(key, spec)``: ``key`` starts with the spec's name (``"full_observation_spec"``,
        ...) and ``spec`` is the leaf with a ``-1`` in its shape, or the
        ``StackedComposite`` whose members hold different entries.
    """
    for name in _SPEC_NAMES:
        root = getattr(env, name)
        for key, spec in root.items(True, False):
            key = key if isinstance(key, tuple) else (key,)
            if isinstance(spec, StackedComposite):
                members = [set(member.keys(True, True)) for member in spec]
                if any(keys != members[0] for keys in members[1:]):
                    return key, spec
            elif -1 in tuple(getattr(spec, "shape", ())):
                return key, spec
            elif isinstance(spec, NonTensor):
                return key, spec  # python objects: no fixed-size buffer holds them
    return None


def _compact(spec: Any) -> str:
    text = " ".join(repr(spec).split())
    return text if len(text) <= 300 else text[:297] + "..."


def dynamic_specs_error(owner: str, key: tuple, spec: Any) -> ValueError:
    """The ``ValueError`` of a batched env that cannot hold ``key`` in its buffers."""
    entry = key[1:] if len(key) > 2 else key[-1]
    shape = tuple(spec.shape)
    if isinstance(spec, NonTensor):
        return ValueError(
            f"{owner} cannot hold the non-tensor entry {entry!r} of the sub-envs' {key[0]} "
            f"in shared memory ({_compact(spec)}); use SerialEnv, which stacks such entries "
            "(use_buffers=False, its default for such specs)"
        )
    return ValueError(
        f"{owner} cannot hold the entry {entry!r} of the sub-envs' {key[0]} in shared "
        f"memory: its spec differs across the stacked members (shape {shape}, {_compact(spec)}); "
        "use SerialEnv, which stacks such entries lazily (use_buffers=False, its default "
        "for such specs)"
    )
