"""List storages with a twist: ``LazyStackStorage`` and ``CompressedListStorage``."""

from __future__ import annotations

import sys
import zlib
from collections.abc import Callable
from typing import Any

import torch
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase

from rl.data.replay_buffers._utils import dtype_from_name, encode_item
from rl.data.replay_buffers.storages._base import ListStorage


class LazyStackStorage(ListStorage):
    """A :class:`ListStorage` whose batches are lazy stacks of the stored TensorDicts.

    Items may differ in their shapes (a ragged observation, a string entry): a batch is a
    :class:`~tensordict.LazyStackedTensorDict` that stacks them along ``stack_dim``
    without copying.

    Args:
        max_size: the number of items held; unlimited when ``None``.
        compilable: accepted for TorchRL compatibility.
        stack_dim: the dim of the batch along which items are stacked.
        device: where the items are moved when written (``None``: left where they are).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import LazyStackStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyStackStorage(max_size=100))
        >>> _ = rb.add(TensorDict(a=torch.zeros(10), b=torch.ones(4)))
        >>> _ = rb.add(TensorDict(a=torch.zeros(11), b=torch.ones(4)))
        >>> batch = rb.sample(6)
        >>> type(batch).__name__, batch["b"].shape
        ('LazyStackedTensorDict', torch.Size([6, 4]))
    """

    def __init__(
        self,
        max_size: int | None = None,
        *,
        compilable: bool = False,
        stack_dim: int = 0,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(
            sys.maxsize if max_size is None else max_size, compilable=compilable, device=device
        )
        self.stack_dim = stack_dim

    def get(self, index: Any) -> Any:
        out = super().get(index)
        if isinstance(out, list):
            if not out:
                raise IndexError("cannot stack an empty selection of items")
            stack_dim = self.stack_dim
            if stack_dim < 0:
                stack_dim = out[0].ndim + 1 + stack_dim
            return LazyStackedTensorDict.lazy_stack(out, stack_dim)
        return out


def _zlib_compress(tensor: torch.Tensor, level: int) -> torch.Tensor:
    raw = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    return torch.frombuffer(bytearray(zlib.compress(raw, level)), dtype=torch.uint8)


def _zlib_decompress(blob: torch.Tensor, meta: dict) -> torch.Tensor:
    raw = bytearray(zlib.decompress(blob.numpy().tobytes()))
    dtype = dtype_from_name(meta["dtype"])
    if not raw:
        return torch.empty(meta["shape"], dtype=dtype)
    return torch.frombuffer(raw, dtype=dtype).reshape(meta["shape"])


class CompressedListStorage(ListStorage):
    """A :class:`ListStorage` that keeps every tensor compressed (images, long frames).

    Each tensor (each leaf of a TensorDict) is compressed on write and decompressed on
    read; other python objects are kept as they are. The default codec is ``zlib``
    from the standard library.

    Args:
        max_size: the number of items held.
        compression_fn: ``fn(tensor) -> uint8 tensor``; zlib when omitted.
        decompression_fn: ``fn(uint8 tensor, metadata) -> tensor``, where ``metadata``
            holds ``"shape"`` (a list) and ``"dtype"`` (its name, e.g. ``"float32"``).
        compression_level: the zlib level (0-9) of the default codec.
        device: where decompressed tensors are sent.
        compilable: accepted for TorchRL compatibility.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import CompressedListStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=CompressedListStorage(max_size=100), batch_size=3)
        >>> images = torch.zeros(10, 3, 84, 84)
        >>> _ = rb.extend(TensorDict({"obs": images}, batch_size=[10]))
        >>> rb.sample()["obs"].shape
        torch.Size([3, 3, 84, 84])
        >>> rb.storage.compressed_bytes() < images.numel() * 4 // 100
        True
    """

    def __init__(
        self,
        max_size: int,
        *,
        compression_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
        decompression_fn: Callable[[torch.Tensor, dict], torch.Tensor] | None = None,
        compression_level: int = 3,
        device: torch.device | str = "cpu",
        compilable: bool = False,
    ) -> None:
        super().__init__(max_size, compilable=compilable)
        if not 0 <= compression_level <= 9 and compression_fn is None:
            raise ValueError(
                f"compression_level must be in [0, 9] for zlib, got {compression_level}"
            )
        self.compression_level = compression_level
        self.compression_fn = compression_fn or (lambda t: _zlib_compress(t, compression_level))
        self.decompression_fn = decompression_fn or _zlib_decompress
        self._out_device = torch.device(device)

    def _compress(self, item: Any) -> Any:
        if isinstance(item, torch.Tensor):
            meta = {"shape": list(item.shape), "dtype": str(item.dtype).removeprefix("torch.")}
            return ("tensor", self.compression_fn(item), meta)
        if isinstance(item, TensorDictBase):
            fields = {k: self._compress(v) for k, v in item.items()}
            return ("tensordict", fields, list(item.batch_size))
        return ("other", item, None)

    def _decompress(self, packed: Any) -> Any:
        kind, payload, meta = packed
        if kind == "tensor":
            return self.decompression_fn(payload, meta).to(self._out_device)
        if kind == "tensordict":
            fields = {k: self._decompress(v) for k, v in payload.items()}
            return TensorDict(fields, batch_size=meta, device=self._out_device)
        return payload

    def _set_one(self, i: int, item: Any) -> None:
        super()._set_one(i, self._compress(item))

    def get(self, index: Any) -> Any:
        out = super().get(index)
        if isinstance(out, list):
            return [self._decompress(x) for x in out]
        return self._decompress(out)

    def __iter__(self):
        for packed in self._storage:
            yield self._decompress(packed)

    def compressed_bytes(self) -> int:
        """The bytes held by the compressed tensors."""

        def size(packed: Any) -> int:
            kind, payload, _ = packed
            if kind == "tensor":
                return payload.numel()
            if kind == "tensordict":
                return sum(size(v) for v in payload.values())
            return 0

        return sum(size(p) for p in self._storage)

    def state_dict(self) -> dict[str, Any]:
        items = [encode_item(self._decompress(p)) for p in self._storage]
        return {"max_size": self.max_size, "_storage": items}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._storage = [self._compress(x) for x in self._storage]
