"""Shared helpers of the rl-cpp tests: a plain numpy reference segment tree."""

from __future__ import annotations

import numpy as np
import pytest


class ReferenceTree:
    """The same implicit binary tree as rl.cpp, one element at a time in numpy.

    Node sums are computed pairwise in the tree's dtype, exactly as the C++ tree does,
    so sums and prefix searches match bit for bit; range queries are checked against a
    direct reduction of the leaves.
    """

    def __init__(self, capacity: int, dtype: np.dtype, op: str) -> None:
        self.capacity = capacity
        self.dtype = np.dtype(dtype)
        self.op = op
        self.size = 1
        while self.size < capacity:
            self.size *= 2
        self.identity = self.dtype.type(0 if op == "sum" else np.inf)
        self.nodes = np.full(2 * self.size, self.identity, dtype=self.dtype)

    @property
    def leaves(self) -> np.ndarray:
        return self.nodes[self.size : self.size + self.capacity]

    def _combine(self, a, b):
        return a + b if self.op == "sum" else min(a, b)

    def update(self, indices, values) -> None:
        values = np.broadcast_to(np.asarray(values, dtype=self.dtype), np.shape(indices))
        for i, v in zip(np.ravel(indices), np.ravel(values)):
            node = self.size + int(i)
            self.nodes[node] = v
            while node > 1:
                node //= 2
                self.nodes[node] = self._combine(self.nodes[2 * node], self.nodes[2 * node + 1])

    def root(self) -> float:
        return float(self.nodes[1])

    def query(self, start: int, end: int) -> float:
        part = self.leaves[start:end].astype(np.float64)
        if self.op == "sum":
            return float(part.sum())
        return float(part.min()) if part.size else float("inf")

    def scan(self, value) -> int:
        value = self.dtype.type(value)
        node = 1
        while node < self.size:
            left = 2 * node
            if self.nodes[left] > value or not self.nodes[left + 1] > 0:
                node = left
            else:
                value = self.dtype.type(value - self.nodes[left])
                node = left + 1
        return node - self.size


@pytest.fixture(scope="session")
def reference_tree():
    return ReferenceTree
