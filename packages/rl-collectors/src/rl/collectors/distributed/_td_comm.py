"""The messages the torch.distributed collectors exchange between ranks.

Everything travels with ``torch.distributed`` point-to-point ops on the default process
group: a 4-integer header (``int64``), then, where the header says so, a byte string
(JSON: a batch layout, an error) or one flat ``uint8`` payload holding every tensor of a
batch (or of the policy weights). A layout is sent once and again only when it changes
(the last, shorter batch of a run); both sides compute the same offsets from it, so the
receiver writes a batch straight into a preallocated buffer and reads it through views.

Headers (``[kind, a, b, c]``):

- learner -> worker: ``COLLECT frames``, ``WEIGHTS nbytes has_layout layout_len``,
  ``SEED seed static``, ``CONFIG nbytes`` (torchrun start-up), ``CLOSE``.
- worker -> learner: ``STARTED frames_per_step pid``, ``BATCH nbytes has_layout layout_len``,
  ``RESULT value``, ``ERROR nbytes``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import torch
import torch.distributed as dist
from tensordict import TensorDict, TensorDictBase

__all__ = [
    "COLLECT",
    "WEIGHTS",
    "SEED",
    "CONFIG",
    "CLOSE",
    "STARTED",
    "BATCH",
    "RESULT",
    "ERROR",
    "KIND_NAMES",
    "Layout",
    "send_header",
    "recv_header",
    "send_bytes",
    "recv_bytes",
    "send_tensordict",
    "SendBuffer",
    "RecvBuffer",
]

COLLECT, WEIGHTS, SEED, CONFIG, CLOSE = 1, 2, 3, 4, 5
STARTED, BATCH, RESULT, ERROR = 11, 12, 13, 14
KIND_NAMES = {
    COLLECT: "COLLECT",
    WEIGHTS: "WEIGHTS",
    SEED: "SEED",
    CONFIG: "CONFIG",
    CLOSE: "CLOSE",
    STARTED: "STARTED",
    BATCH: "BATCH",
    RESULT: "RESULT",
    ERROR: "ERROR",
}

_ALIGN = 16  # every tensor starts on a 16-byte boundary of the payload


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r} in a batch layout")
    return dtype


@dataclass(frozen=True)
class Layout:
    """Where each tensor of a TensorDict sits in a flat byte payload.

    Args:
        batch_size: the TensorDict's batch size.
        leaves: ``(key, dtype, shape)`` of each tensor, keys as tuples of strings.
    """

    batch_size: tuple[int, ...]
    leaves: tuple[tuple[tuple[str, ...], torch.dtype, tuple[int, ...]], ...]

    @classmethod
    def of(cls, td: TensorDictBase) -> Layout:
        """The layout of ``td`` (its tensor leaves in sorted key order)."""
        leaves = []
        for key, value in td.items(include_nested=True, leaves_only=True, sort=True):
            if not isinstance(value, torch.Tensor):
                raise TypeError(
                    f"entry {key!r} is a {type(value).__name__}; the torch.distributed "
                    "collectors send tensors only"
                )
            key = (key,) if isinstance(key, str) else tuple(key)
            leaves.append((key, value.dtype, tuple(value.shape)))
        return cls(tuple(td.batch_size), tuple(leaves))

    @property
    def offsets(self) -> list[int]:
        out, offset = [], 0
        for _, dtype, shape in self.leaves:
            out.append(offset)
            nbytes = math.prod(shape) * dtype.itemsize
            offset += -(-nbytes // _ALIGN) * _ALIGN
        return out

    @property
    def nbytes(self) -> int:
        if not self.leaves:
            return 0
        _, dtype, shape = self.leaves[-1]
        return self.offsets[-1] + math.prod(shape) * dtype.itemsize

    def pack(self, td: TensorDictBase, out: torch.Tensor) -> None:
        """Copies the tensors of ``td`` into the ``uint8`` buffer ``out``."""
        for (key, _, _), view in zip(self.leaves, self._views(out)):
            view.copy_(td.get(key if len(key) > 1 else key[0]))

    def views(self, buffer: torch.Tensor) -> TensorDictBase:
        """A TensorDict whose tensors are views into the ``uint8`` ``buffer``."""
        out = TensorDict({}, batch_size=self.batch_size, device=buffer.device)
        for (key, _, _), view in zip(self.leaves, self._views(buffer)):
            out.set(key if len(key) > 1 else key[0], view)
        return out

    def _views(self, buffer: torch.Tensor) -> list[torch.Tensor]:
        views = []
        for (_, dtype, shape), offset in zip(self.leaves, self.offsets):
            nbytes = math.prod(shape) * dtype.itemsize
            views.append(buffer[offset : offset + nbytes].view(dtype).view(shape))
        return views

    def to_bytes(self) -> bytes:
        leaves = [[list(key), str(dtype), list(shape)] for key, dtype, shape in self.leaves]
        return json.dumps({"batch_size": list(self.batch_size), "leaves": leaves}).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Layout:
        obj = json.loads(data.decode())
        leaves = tuple(
            (tuple(key), _dtype(dtype), tuple(shape)) for key, dtype, shape in obj["leaves"]
        )
        return cls(tuple(obj["batch_size"]), leaves)


def send_header(kind: int, a: int = 0, b: int = 0, c: int = 0, *, dst: int, device) -> None:
    dist.send(torch.tensor([kind, a, b, c], dtype=torch.int64, device=device), dst=dst)


def recv_header(*, src: int, device) -> tuple[int, int, int, int]:
    header = torch.zeros(4, dtype=torch.int64, device=device)
    dist.recv(header, src=src)
    kind, a, b, c = (int(v) for v in header.tolist())
    return kind, a, b, c


def send_bytes(data: bytes, *, dst: int, device) -> None:
    if data:
        tensor = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)
        dist.send(tensor, dst=dst)


def recv_bytes(nbytes: int, *, src: int, device) -> bytes:
    if nbytes == 0:
        return b""
    tensor = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dist.recv(tensor, src=src)
    return tensor.cpu().numpy().tobytes()


class SendBuffer:
    """A growing ``uint8`` buffer a rank packs the TensorDicts it sends into."""

    def __init__(self, device) -> None:
        self.device = device
        self.buffer = torch.empty(0, dtype=torch.uint8, device=device)
        self.layout: Layout | None = None

    def pack(self, td: TensorDictBase) -> tuple[torch.Tensor, Layout | None]:
        """The payload of ``td`` and its layout when it differs from the last one."""
        layout = Layout.of(td)
        new = layout if layout != self.layout else None
        self.layout = layout
        if self.buffer.numel() < layout.nbytes:
            self.buffer = torch.empty(layout.nbytes, dtype=torch.uint8, device=self.device)
        payload = self.buffer[: layout.nbytes]
        layout.pack(td, payload)
        return payload, new


def send_tensordict(kind: int, td: TensorDictBase, buffer: SendBuffer, *, dst: int, device) -> None:
    """Sends ``td`` as a ``kind`` header, its layout when new, and its payload."""
    payload, layout = buffer.pack(td)
    layout_bytes = layout.to_bytes() if layout is not None else b""
    send_header(kind, payload.numel(), int(layout is not None), len(layout_bytes), dst=dst,
                device=device)  # fmt: skip
    send_bytes(layout_bytes, dst=dst, device=device)
    if payload.numel():
        dist.send(payload, dst=dst)


class RecvBuffer:
    """The receiving side of :func:`send_tensordict`: a preallocated buffer, its current
    layout and the TensorDict of views into it."""

    def __init__(self, device) -> None:
        self.device = device
        self.buffer = torch.empty(0, dtype=torch.uint8, device=device)
        self.layout: Layout | None = None
        self.view: TensorDictBase | None = None

    def recv(self, nbytes: int, has_layout: int, layout_len: int, *, src: int) -> TensorDictBase:
        """Receives the layout (when sent) and the payload; returns the views (valid
        until the next ``recv``)."""
        if has_layout:
            self.layout = Layout.from_bytes(recv_bytes(layout_len, src=src, device=self.device))
            if self.buffer.numel() < self.layout.nbytes:
                self.buffer = torch.empty(self.layout.nbytes, dtype=torch.uint8,
                                          device=self.device)  # fmt: skip
            self.view = self.layout.views(self.buffer)
        if self.layout is None or self.layout.nbytes != nbytes:
            raise RuntimeError(
                f"rank {src} sent a payload of {nbytes} bytes, expected "
                f"{None if self.layout is None else self.layout.nbytes} from its layout"
            )
        if nbytes:
            dist.recv(self.buffer[:nbytes], src=src)
        return self.view
