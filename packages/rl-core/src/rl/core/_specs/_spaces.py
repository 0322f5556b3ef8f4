"""The spaces of the specs (``spec.space``): a continuous box, a set of categories, a list of sets."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ._base import _fmt_tensor

__all__ = ["ContinuousBox", "CategoricalBox", "BoxList"]


class ContinuousBox:
    """The box ``[low, high]`` of a :class:`~rl.core.Bounded` spec (``spec.space``)."""

    def __init__(self, low: torch.Tensor, high: torch.Tensor):
        self.low = low
        self.high = high

    def __repr__(self) -> str:
        return f"ContinuousBox(low={_fmt_tensor(self.low)}, high={_fmt_tensor(self.high)})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ContinuousBox)
            and torch.equal(self.low, other.low)
            and torch.equal(self.high, other.high)
        )


class CategoricalBox:
    """The set ``{0, ..., n - 1}`` of a discrete spec (``spec.space``)."""

    def __init__(self, n: int):
        self.n = n

    def __repr__(self) -> str:
        return f"CategoricalBox(n={self.n})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CategoricalBox) and self.n == other.n


class BoxList:
    """A list of :class:`CategoricalBox`, the space of the multi-discrete specs."""

    def __init__(self, boxes: Sequence[CategoricalBox]):
        self.boxes = list(boxes)

    @classmethod
    def from_nvec(cls, nvec: Sequence[int]) -> BoxList:
        return cls([CategoricalBox(int(n)) for n in nvec])

    def __getitem__(self, i: int) -> CategoricalBox:
        return self.boxes[i]

    def __len__(self) -> int:
        return len(self.boxes)

    def __repr__(self) -> str:
        return f"BoxList(n={[b.n for b in self.boxes]})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BoxList) and [b.n for b in self.boxes] == [
            b.n for b in other.boxes
        ]
