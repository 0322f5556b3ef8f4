"""The preallocated ``[*B, T, ...]`` buffers of a rollout and their per-step views."""

from __future__ import annotations

import math

import torch
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase, is_tensor_collection
from tensordict.utils import is_non_tensor

__all__ = [
    "RolloutBuffers",
    "StepViews",
    "StepWriter",
    "build_output",
    "flat_leaves",
    "non_tensor_keys",
    "numpy_or_none",
    "patched",
]


def flat_leaves(td: TensorDictBase) -> dict:
    """``{key: tensor}`` of the leaves of ``td``, keyed as ``td.keys(True, True)`` names
    them. Plain TensorDicts of tensors are walked through their dicts (a fraction of the
    cost of one ``td.get`` per key); anything else goes through ``items``."""
    out: dict = {}
    if type(td) is TensorDict and _walk(td, (), out):
        return out
    return dict(td.items(True, True))


def _walk(td: TensorDict, path: tuple, out: dict) -> bool:
    for name, value in td._tensordict.items():
        if type(value) is TensorDict:
            if not _walk(value, (*path, name), out):
                return False
        elif isinstance(value, torch.Tensor):
            out[(*path, name) if path else name] = value
        else:  # a tensorclass, a lazy stack, non-tensor data: the generic path
            return False
    return True


def non_tensor_keys(td: TensorDictBase, prefix: tuple = ()) -> list:
    """The keys of the non-tensor entries of ``td`` (``NonTensorData``, ``NonTensorStack``),
    nested ones as tuples; ``"next"`` is left out of a root."""
    found = []
    if isinstance(td, LazyStackedTensorDict):  # read without stacking (shapes may differ)
        return non_tensor_keys(td.tensordicts[0], prefix) if td.tensordicts else found
    items = td._tensordict.items() if type(td) is TensorDict else td.items()
    for name, value in items:
        if not prefix and name == "next":
            continue
        if is_non_tensor(value):
            found.append((*prefix, name) if prefix else name)
        elif is_tensor_collection(value):
            found.extend(non_tensor_keys(value, (*prefix, name)))
    return found


def patched(previous: torch.Tensor, value) -> torch.Tensor:
    """A root entry a kernel's reset returned: a tensor, or ``(rows, values)``: the
    ``previous`` value (the step's ``"next"`` one) with ``rows`` replaced by ``values``."""
    if type(value) is not tuple:
        return value
    rows, values = value
    if previous.is_cpu and not previous.requires_grad:
        if previous.dtype is not torch.bfloat16:  # numpy copies and indexes at a fraction
            array = previous.numpy().copy()
            array[rows] = values
            return torch.from_numpy(array)
    out = previous.clone()
    out[rows] = values if isinstance(values, (bool, torch.Tensor)) else torch.as_tensor(values)
    return out


class StepViews:
    """The per-step views ``buf[..., t, ...]`` of a list of ``[*B, T, ...]`` buffers, made
    in chunks of steps by ``unbind`` (one call per buffer and chunk, not one indexing per
    buffer and step); ``views[t]`` is the tuple of step ``t``'s views, in buffer order."""

    CHUNK = 32

    def __init__(self, bufs: list, nb: int, steps: int) -> None:
        self.bufs, self.nb, self.steps = bufs, nb, steps
        self.start, self.views = 0, []

    def __getitem__(self, t: int) -> tuple:
        i = t - self.start
        if not 0 <= i < len(self.views):
            size = min(self.CHUNK, self.steps - t)
            chunks = [buf.narrow(self.nb, t, size).unbind(self.nb) for buf in self.bufs]
            self.start, self.views, i = t, list(zip(*chunks)), 0
        return self.views[i]


def numpy_or_none(buf: torch.Tensor):
    """A numpy view of a CPU buffer without grad, else None."""
    if buf.device.type != "cpu" or buf.requires_grad:
        return None
    try:
        return buf.numpy()
    except (TypeError, RuntimeError):  # a dtype numpy lacks (bfloat16)
        return None


class StepWriter:
    """Copies each step's values into row ``t`` of a list of ``[*B, T, ...]`` buffers.

    CPU buffers are written through numpy views (a fraction of torch's indexing cost),
    while each value allows it; a value that needs grad, lives on another device or has a
    dtype numpy lacks sends this and later steps to torch: one ``_foreach_copy_`` into the
    step's views, unless a value needs grad (autograd cannot write views made by
    ``unbind`` in place), then ``buf[..., t] = value`` (gradients flow through the
    rollout). With ``check``, a value whose shape is not the first step's raises, naming
    its key (the entries a policy writes: numpy would broadcast them silently).
    """

    #: numpy writes a row of a ``[B, T, F]`` buffer as ``B`` strided copies; past this many
    #: (summed over the buffers whose rows are not scalars) torch's copy is cheaper
    NUMPY_CHUNKS = 512

    def __init__(self, writes: list, nb: int, max_steps: int, check: bool = False) -> None:
        self.keys = [key for key, _ in writes]
        self.bufs = [buf for _, buf in writes]
        arrays = [numpy_or_none(buf) for buf in self.bufs]
        chunks = sum(
            math.prod(buf.shape[:nb]) for buf in self.bufs if math.prod(buf.shape[nb + 1 :]) > 1
        )
        numpy_ok = all(a is not None for a in arrays) and chunks <= self.NUMPY_CHUNKS
        self.arrays = arrays if numpy_ok else None
        self.views = StepViews(self.bufs, nb, max_steps)
        self.views_ok = not any(buf.requires_grad for buf in self.bufs)
        self.prefix = (slice(None),) * nb
        self.shapes = [buf.shape[:nb] + buf.shape[nb + 1 :] for buf in self.bufs] if check else None

    def __call__(self, t: int, srcs: list) -> None:
        idx = (*self.prefix, t)
        if self.shapes is not None:
            for key, value, shape in zip(self.keys, srcs, self.shapes):
                if value.shape != shape:
                    raise ValueError(
                        f"the policy wrote {key!r} with shape {tuple(value.shape)} at step {t}, "
                        f"expected {tuple(shape)} (its shape at the first step)"
                    )
        arrays = self.arrays
        if arrays is not None:
            for value in srcs:
                if value.requires_grad or not value.is_cpu or value.dtype is torch.bfloat16:
                    self.arrays = arrays = None  # torch from now on
                    break
            else:
                for array, value in zip(arrays, srcs):
                    array[idx] = value.numpy()
                return
        if self.views_ok and torch.is_grad_enabled() and any(v.requires_grad for v in srcs):
            self.views_ok = False
        if self.views_ok:
            torch._foreach_copy_(self.views[t], srcs)
        else:
            for buf, value in zip(self.bufs, srcs):
                buf[idx] = value


class RolloutBuffers:
    """The root and ``"next"`` buffers of one rollout, ``[*B, T, ...]`` each.

    A kernel that knows its outputs before the first step allocates its ``"next"``
    buffers with :meth:`next_buffer` and writes row ``t`` of them at step ``t``; the
    engine allocates the others from the first step's values.

    Args:
        batch_size: the rollout's batch size ``B`` (the env's, or more for an env that is
            not batch-locked).
        max_steps: ``T``.
        device: where the buffers live.
    """

    def __init__(self, batch_size: torch.Size, max_steps: int, device=None) -> None:
        self.batch_size = torch.Size(batch_size)
        self.nb = len(self.batch_size)
        self.max_steps = max_steps
        self.device = device
        self.root: dict = {}
        self.next: dict = {}

    def empty(self, shape, dtype: torch.dtype, device=None) -> torch.Tensor:
        """A ``[*B, T, *shape]`` buffer."""
        full = (*self.batch_size, self.max_steps, *shape)
        return torch.empty(full, dtype=dtype, device=self.device if device is None else device)

    def like(self, value: torch.Tensor) -> torch.Tensor:
        """A buffer for a ``[*B, ...]`` value (its trailing dims, dtype and device)."""
        nb = self.nb
        shape = (*value.shape[:nb], self.max_steps, *value.shape[nb:])
        return torch.empty(shape, dtype=value.dtype, device=value.device)

    def next_buffer(self, key, shape, dtype: torch.dtype, zero: bool = False) -> torch.Tensor:
        """Allocates (once) and returns the ``"next"`` buffer of ``key``."""
        buf = self.next.get(key)
        if buf is None:
            buf = self.empty(shape, dtype)
            if zero:
                buf.zero_()
            self.next[key] = buf
        return buf

    def output(self, steps: int) -> TensorDictBase:
        """The ``[*B, steps]`` rollout TensorDict over the buffers."""
        return build_output(
            self.root, self.next, self.batch_size, steps, self.device, time_dim=self.nb
        )


def build_output(
    root: dict,
    nxt: dict,
    batch_size: torch.Size,
    steps: int,
    device,
    time_dim: int,
) -> TensorDictBase:
    """Assembles ``{key: buffer}`` dicts into the ``[*B, T]`` rollout TensorDict.

    ``time_dim`` is where the buffers hold time: ``0`` (time-first buffers, moved to
    ``len(batch_size)`` here) or ``len(batch_size)`` (already laid out ``[*B, T]``).
    """
    nb = len(batch_size)

    def layout(buf: torch.Tensor) -> torch.Tensor:
        if buf.shape[time_dim] != steps:
            buf = buf.narrow(time_dim, 0, steps)
        if time_dim != nb:
            buf = buf.movedim(time_dim, nb).contiguous()
        return buf

    out = TensorDict({}, batch_size=(*batch_size, steps), device=device)
    for key, buf in root.items():
        out.set(key, layout(buf))
    next_td = TensorDict({}, batch_size=(*batch_size, steps), device=device)
    for key, buf in nxt.items():
        next_td.set(key, layout(buf))
    out.set("next", next_td)
    return out


def nested_batch_dims(td: TensorDictBase, nb: int, prefix: tuple = ()) -> dict:
    """``{path: extra batch dims}`` of the sub-tensordicts batched beyond ``[*B]``."""
    found = {}
    for name, value in td.items():
        if isinstance(value, TensorDictBase):
            path = (*prefix, name)
            if value.batch_dims > nb:
                found[path] = value.batch_size[nb:]
            found.update(nested_batch_dims(value, nb, path))
    return found


def restore_nested_batch(out: TensorDictBase, nested: dict, nb: int) -> None:
    """Gives the rollout's groups (``("agents", ...)``) their ``[*B, T, n_agents]`` batch."""
    for path, extra in sorted(nested.items(), key=lambda item: len(item[0])):
        sub = out.get(path, None)
        if sub is not None:
            sub.batch_size = (*sub.batch_size[: nb + 1], *extra)
