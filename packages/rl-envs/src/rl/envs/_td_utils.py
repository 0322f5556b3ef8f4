"""TensorDict helpers of ``torchrl.envs.utils``: specs from data, end-of-trajectory flags.

``mark_truncated`` is this library's: the ``set_truncated=True`` marking that TorchRL
writes twice (in ``EnvBase.rollout`` and in the collector), written once.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase, is_tensor_collection
from tensordict.utils import is_non_tensor

from rl.core import Composite, NonTensor, Unbounded

__all__ = [
    "make_composite_from_td",
    "mark_truncated",
    "terminated_or_truncated",
    "truncated_keys",
]

NestedKey = str | tuple[str, ...]
_EOT_KEYS = ("done", "terminated", "truncated")


def make_composite_from_td(
    data: TensorDictBase, *, unsqueeze_null_shapes: bool = True, dynamic_shape: bool = False
) -> Composite:
    """A Composite spec laid out as ``data``, every tensor an ``Unbounded`` entry.

    Args:
        data: the tensordict to describe (nested tensordicts become nested Composites of
            the same batch size).
        unsqueeze_null_shapes: give scalar entries (shape ``()``) the shape ``(1,)``.
        dynamic_shape: mark the last dim of every entry as dynamic (``-1``).

    Returns:
        a Composite of shape ``data.batch_size`` with the dtype, device and shape of each
        entry; non-tensor entries become ``NonTensor`` specs.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.envs.utils import make_composite_from_td
        >>> data = TensorDict(obs=torch.zeros(3), count=torch.tensor(2), next={"r": torch.ones(1)})
        >>> spec = make_composite_from_td(data)
        >>> spec["obs"].shape, spec["count"].shape, spec["count"].dtype, spec["next", "r"].shape
        (torch.Size([3]), torch.Size([1]), torch.int64, torch.Size([1]))
        >>> make_composite_from_td(data, unsqueeze_null_shapes=False)["count"].shape
        torch.Size([])
    """

    def make_shape(shape: torch.Size) -> torch.Size:
        if not shape and unsqueeze_null_shapes:
            return torch.Size([1])
        if dynamic_shape and shape:
            return torch.Size((*shape[:-1], -1))
        return shape

    entries = {}
    for key, value in data.items():
        if is_non_tensor(value):
            entries[key] = NonTensor(shape=value.shape, device=value.device)
        elif is_tensor_collection(value):
            entries[key] = make_composite_from_td(
                value, unsqueeze_null_shapes=unsqueeze_null_shapes, dynamic_shape=dynamic_shape
            )
        else:
            entries[key] = Unbounded(
                shape=make_shape(value.shape), dtype=value.dtype, device=value.device
            )
    return Composite(entries, shape=data.batch_size, device=data.device)


def terminated_or_truncated(
    data: TensorDictBase,
    full_done_spec: Composite | None = None,
    key: str | None = "_reset",
    write_full_false: bool = False,
) -> torch.Tensor | bool:
    """Aggregates the done / terminated / truncated flags of each level of ``data``.

    At every level (the root and each nested group such as ``"agents"``) holding done
    flags, their ``or`` is written under ``key`` (``"_reset"`` by default: the mask that
    resets the sub-environments that ended). In place.

    Args:
        data: the tensordict to read (typically the ``"next"`` of a step).
        full_done_spec: where the flags are (an env's ``full_done_spec``); ``None`` looks
            for ``"done"``, ``"terminated"`` and ``"truncated"`` entries at every level.
        key: the name of the aggregated entry; ``None`` writes nothing.
        write_full_false: also write the entries when no flag is set (else they are
            removed again when every flag is ``False``).

    Returns:
        whether any flag was ``True``: a 0-d bool tensor on ``data``'s device, as TorchRL
        (use ``bool(...)`` or ``if ...:`` for a Python bool); the Python ``False`` when
        ``data`` holds no flag at all (TorchRL's value there too).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.envs.utils import terminated_or_truncated
        >>> data = TensorDict(
        ...     done=torch.tensor([True]), truncated=torch.tensor([False]),
        ...     nested=TensorDict(done=torch.tensor([False]), truncated=torch.tensor([True])),
        ... )
        >>> terminated_or_truncated(data)
        tensor(True)
        >>> data["_reset"], data["nested", "_reset"]
        (tensor([True]), tensor([True]))
    """
    written: list[tuple[str, ...]] = []

    def visit(
        td: TensorDictBase, spec: Composite | None, path: tuple[str, ...]
    ) -> torch.Tensor | bool:
        any_eot: torch.Tensor | bool = False
        aggregate = None
        names = spec.keys() if spec is not None else list(td.keys())
        for name in names:
            sub_spec = spec[name] if spec is not None else None
            if isinstance(sub_spec, Composite) or (
                spec is None and name not in _EOT_KEYS and is_tensor_collection(td.get(name))
            ):
                sub = td.get(name, None)
                if sub is not None:
                    any_eot = visit(sub, sub_spec, (*path, name)) | any_eot
                continue
            if spec is None and name not in _EOT_KEYS:
                continue
            flag = td.get(name, None)
            if flag is None:
                flag = torch.zeros((*td.batch_size, 1), dtype=torch.bool, device=td.device)
            aggregate = flag.clone() if aggregate is None else aggregate | flag
        if aggregate is not None:
            if key is not None:
                td.set(key, aggregate)
                written.append((*path, key))
            any_eot = any_eot | aggregate.any()
        return any_eot

    any_eot = visit(data, full_done_spec, ())
    if not any_eot and not write_full_false:
        for path in written:
            data.del_(path if len(path) > 1 else path[0])
    return any_eot


def mark_truncated(rollout: TensorDictBase, done_keys: list[NestedKey]) -> TensorDictBase:
    """Marks the last time step of ``rollout`` truncated: ``set_truncated=True``.

    Every done key whose last name is ``"truncated"`` is set ``True`` at the last index of
    the time dim (the last batch dim), and its ``"done"`` sibling (when present) becomes
    ``done | truncated``, as TorchRL 0.14.1's ``EnvBase.rollout`` and collectors do. In
    place.

    Args:
        rollout: a ``[*batch, T]`` rollout holding the flags under ``"next"``.
        done_keys: the env's done keys (``env.done_keys``).

    Returns:
        ``rollout``.

    Raises:
        RuntimeError: no done key is a ``truncated`` flag (``env.add_truncated_keys()``
            declares one).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.envs.utils import mark_truncated
        >>> false = torch.zeros(3, 1, dtype=torch.bool)
        >>> rollout = TensorDict(
        ...     next=TensorDict(done=false, truncated=false.clone(), batch_size=[3]),
        ...     batch_size=[3],
        ... )
        >>> out = mark_truncated(rollout, ["done", "truncated"])
        >>> out["next", "truncated"][:, 0], out["next", "done"][:, 0]
        (tensor([False, False,  True]), tensor([False, False,  True]))
    """
    truncated = truncated_keys(done_keys)
    last = (slice(None),) * (rollout.batch_dims - 1) + (-1,)
    present = set(rollout.keys(True, True))
    for key in truncated:
        trunc_key = ("next", *_as_tuple(key))
        flag = rollout.get(trunc_key)
        flag[last] = True
        rollout.set(trunc_key, flag)  # written back: a lazy stack's get is a copy
        done_key = ("next", *_as_tuple(key)[:-1], "done")
        if done_key in present:
            done = rollout.get(done_key)
            rollout.set(done_key, done | flag)
    return rollout


def truncated_keys(done_keys: list[NestedKey], *, when: str = "first") -> list[NestedKey]:
    """The done keys that ``set_truncated=True`` marks: those whose last name is
    ``"truncated"``.

    The one check behind ``mark_truncated`` (``env.rollout(set_truncated=True)``) and
    ``Collector(set_truncated=True)``, which runs it at construction as TorchRL 0.14.1
    does.

    Args:
        done_keys: the env's done keys (``env.done_keys``).
        when: how the error ends its advice to call ``env.add_truncated_keys()``
            (``"first"``; the collector says ``"before passing the env to the
            collector"``).

    Returns:
        the ``truncated`` keys, in the order of ``done_keys``.

    Raises:
        RuntimeError: no done key is a ``truncated`` flag.

    Examples:
        >>> from rl.envs import truncated_keys
        >>> truncated_keys(["done", "terminated", "truncated", ("agents", "truncated")])
        ['truncated', ('agents', 'truncated')]
    """
    keys = [key for key in done_keys if _as_tuple(key)[-1] == "truncated"]
    if not keys:
        raise RuntimeError(
            "set_truncated=True needs a 'truncated' entry in the done spec, got done keys "
            f"{list(done_keys)}: call env.add_truncated_keys() {when}"
        )
    return keys


def _as_tuple(key: NestedKey) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)
