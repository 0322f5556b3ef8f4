"""Exclusive keys of stacked Composites: finding them and filling them in (TorchRL's
``consolidate_spec``, ``check_no_exclusive_keys``, ``contains_lazy_spec``).

A key is *exclusive* when some members of a :class:`StackedComposite` hold it and others do
not (agents with different observations). Consolidating gives every member every key: a
member that lacked one gets an empty spec in its place (size 0 where the members' shapes
differ, or past the batch dims), so the stack can be read as one TensorDict layout.
"""

from __future__ import annotations

from ._base import TensorSpec
from ._composite import Composite
from ._stacked import StackedComposite
from ._stacked_leaf import Stacked

__all__ = ["check_no_exclusive_keys", "consolidate_spec", "contains_lazy_spec"]


def consolidate_spec(
    spec: TensorSpec,
    recurse_through_entries: bool = True,
    recurse_through_stack: bool = True,
) -> TensorSpec:
    """A copy of ``spec`` where every member of each stacked Composite holds every key.

    Args:
        spec: the spec (anything but a Composite or a stacked Composite comes back cloned).
        recurse_through_entries: also consolidate the nested (stacked) Composites.
        recurse_through_stack: also consolidate the members of a stacked Composite first.

    Returns:
        the consolidated copy; ``spec`` is left as it is.

    Raises:
        ValueError: if members hold one key with specs of different kinds.

    Examples:
        >>> import torch
        >>> from rl.core import Composite, Unbounded, check_no_exclusive_keys, consolidate_spec
        >>> spec = torch.stack(
        ...     [Composite(a=Unbounded(shape=(3,))), Composite(b=Unbounded(shape=(2,)))], 0
        ... )
        >>> check_no_exclusive_keys(spec)
        False
        >>> full = consolidate_spec(spec)
        >>> check_no_exclusive_keys(full), full[1]["a"].shape, full["b"].shape
        (True, torch.Size([0]), torch.Size([2, -1]))
    """
    spec = spec.clone()
    if not isinstance(spec, Composite | StackedComposite):
        return spec
    if isinstance(spec, StackedComposite):
        shared = set(spec.keys())
        exclusive: list[set] = [set() for _ in spec._specs]
        examples: dict = {}  # exclusive key -> the members' specs of it
        for i, member in enumerate(spec._specs):
            if recurse_through_stack:
                member = consolidate_spec(member, recurse_through_entries, recurse_through_stack)
                spec._specs[i] = member
            for key in member.keys():
                if key not in shared:
                    exclusive[i].add(key)
                    examples.setdefault(key, []).append(member[key])
        for member, own in zip(spec._specs, exclusive):
            for key in examples.keys() - own:
                member.set(key, _empty_like(examples[key], member.shape))
    if recurse_through_entries:
        for key, value in list(spec.items()):
            if isinstance(value, Composite | StackedComposite):
                spec.set(
                    key, consolidate_spec(value, recurse_through_entries, recurse_through_stack)
                )
    return spec


def _empty_like(specs: list[TensorSpec], shape: tuple) -> TensorSpec:
    """An empty stand-in for ``specs`` (one key's specs in several members) of batch ``shape``.

    Composites give an empty Composite; leaves a spec of the same kind whose dims are 0
    where the members differ (or, when they agree, past the batch dims).
    """
    first = specs[0]
    for s in specs[1:]:
        if type(s) is not type(first):
            raise ValueError(
                "consolidate_spec: one key holds specs of different kinds in the stacked "
                f"members ({type(first).__name__} and {type(s).__name__})"
            )
    if isinstance(first, Composite | StackedComposite):
        return first.empty()
    if isinstance(first, Stacked):
        inner = tuple(shape[: first.stack_dim]) + tuple(shape[first.stack_dim + 1 :])
        return Stacked(
            [_empty_like(first._specs, inner) for _ in first._specs], dim=first.stack_dim
        )
    bn = first._batch_ndim  # trailing feature dims (one-hot size, ...) stay as they are
    sizes = [
        0 if d < bn and any(s.shape[d] != size for s in specs) else size
        for d, size in enumerate(first.shape)
    ]
    if 0 not in sizes:  # the members agree: empty past the batch dims
        sizes = [size if d < len(shape) or d >= bn else 0 for d, size in enumerate(sizes)]
    return first[(0,) * bn].expand(*sizes)


def check_no_exclusive_keys(spec: TensorSpec, recurse: bool = True) -> bool:
    """Whether every member of each stacked Composite in ``spec`` holds the same keys.

    Args:
        spec: the spec to check (leaves have no exclusive keys).
        recurse: also check the nested specs.
    """
    if isinstance(spec, StackedComposite):
        keys = set(spec.keys())
        for member in spec._specs:
            if recurse and not check_no_exclusive_keys(member):
                return False
            if set(member.keys()) != keys:
                return False
    elif isinstance(spec, Composite) and recurse:
        return all(check_no_exclusive_keys(value) for value in spec.values() if value is not None)
    return True


def contains_lazy_spec(spec: TensorSpec) -> bool:
    """Whether ``spec`` is, or holds, a lazily stacked spec (:class:`Stacked`,
    :class:`StackedComposite`)."""
    if isinstance(spec, Stacked | StackedComposite):
        return True
    if isinstance(spec, Composite):
        return any(contains_lazy_spec(value) for value in spec.values() if value is not None)
    return False
