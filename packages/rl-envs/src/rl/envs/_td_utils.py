"""TensorDict helpers of ``torchrl.envs.utils``: specs from data, end-of-trajectory flags."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase, is_tensor_collection
from tensordict.utils import is_non_tensor

from rl.core import Composite, NonTensor, Unbounded

__all__ = ["make_composite_from_td", "terminated_or_truncated"]

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
