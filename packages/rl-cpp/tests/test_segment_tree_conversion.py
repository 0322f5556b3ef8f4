"""Priorities and scan values of another dtype are cast to the tree's dtype, as in TorchRL.

TorchRL's ``SumSegmentTreeFp32`` takes float64 numpy arrays, python floats and ints and
casts them to float32; the trees here do the same (and take float64 torch tensors too).
Each case is compared with a tree fed the same values already cast by numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rl.cpp import MinSegmentTree, SumSegmentTree

VALUES64 = np.array([0.1, 2.5, 1e-3, 7.0, 3.3], dtype=np.float64)
INDICES = np.array([0, 2, 3, 5, 7], dtype=np.int64)


def leaves(tree) -> np.ndarray:
    return tree[np.arange(len(tree), dtype=np.int64)]


def reference(cls, dtype=np.float32):
    ref = cls(8, dtype=dtype)
    ref.update(INDICES, VALUES64.astype(dtype))
    return ref


@pytest.mark.parametrize("cls", [SumSegmentTree, MinSegmentTree])
class TestUpdateConversion:
    def test_float64_numpy_values(self, cls):
        tree = cls(8)
        tree.update(INDICES, VALUES64)
        np.testing.assert_array_equal(leaves(tree), leaves(reference(cls)))
        assert leaves(tree).dtype == np.float32
        assert leaves(tree)[0] == np.float32(0.1)  # rounded to float32, as TorchRL stores it

    def test_setitem_float64_numpy_and_non_contiguous(self, cls):
        tree = cls(8)
        doubled = np.repeat(VALUES64, 2)[::2]  # a strided float64 view: converted, no error
        tree[INDICES] = doubled
        np.testing.assert_array_equal(leaves(tree), leaves(reference(cls)))

    def test_python_floats_and_ints(self, cls):
        tree = cls(8)
        for i, v in zip(INDICES.tolist(), VALUES64.tolist()):
            tree[i] = v  # python float
        np.testing.assert_array_equal(leaves(tree), leaves(reference(cls)))
        tree[1] = 4  # python int
        tree.update(np.int64(6), np.float64(0.25))
        assert tree[1] == 4.0 and tree[6] == 0.25
        tree.update([0, 2], [1, 2])  # lists of ints
        assert tree[0] == 1.0 and tree[2] == 2.0

    def test_integer_numpy_values_and_int32_indices(self, cls):
        tree = cls(8)
        tree.update(INDICES.astype(np.int32), np.array([1, 2, 3, 4, 5]))
        np.testing.assert_array_equal(leaves(tree)[INDICES], [1, 2, 3, 4, 5])

    def test_float64_torch_values(self, cls):
        tree = cls(8)
        tree.update(torch.from_numpy(INDICES), torch.from_numpy(VALUES64))
        np.testing.assert_array_equal(leaves(tree), leaves(reference(cls)))
        tree.update(torch.tensor([1], dtype=torch.int32), torch.tensor([9], dtype=torch.int64))
        assert tree[1] == 9.0

    def test_float64_tree_takes_float32(self, cls):
        tree = cls(8, dtype="float64")
        tree.update(INDICES, VALUES64.astype(np.float32))
        expected = leaves(reference(cls, np.float32)).astype(np.float64)
        np.testing.assert_array_equal(leaves(tree), expected)
        assert leaves(tree).dtype == np.float64

    def test_bad_values_still_raise(self, cls):
        tree = cls(8)
        with pytest.raises(TypeError, match=r"values has dtype complex128, expected float32"):
            tree.update(INDICES, VALUES64.astype(np.complex128))
        with pytest.raises(TypeError, match=r"indices has dtype torch.float32, expected"):
            tree.update(torch.zeros(2), torch.ones(2))
        with pytest.raises(ValueError, match=r"values has 4 elements, expected 5"):
            tree.update(INDICES, VALUES64[:4])


class TestScanConversion:
    def setup_method(self):
        self.tree = reference(SumSegmentTree)
        self.u64 = np.linspace(0.0, self.tree.total() * 0.999, 50)
        self.expected = self.tree.scan_lower_bound(self.u64.astype(np.float32))

    def test_float64_numpy(self):
        got = self.tree.scan_lower_bound(self.u64)
        np.testing.assert_array_equal(got, self.expected)
        assert got.dtype == np.int64

    def test_float64_torch(self):
        got = self.tree.scan_lower_bound(torch.from_numpy(self.u64))
        assert isinstance(got, torch.Tensor) and got.dtype == torch.int64
        np.testing.assert_array_equal(got.numpy(), self.expected)

    def test_python_floats_and_ints(self):
        for u, e in zip(self.u64.tolist(), self.expected.tolist()):
            assert self.tree.scan_lower_bound(u) == e
        # cumulative float32 sums: 0.1, 2.6, 2.601, 9.601, 12.901 at leaves 0, 2, 3, 5, 7
        assert [self.tree.scan_lower_bound(v) for v in (0, 1, 2, 3, 12)] == [0, 2, 2, 5, 7]
        np.testing.assert_array_equal(
            self.tree.scan_lower_bound(np.array([0, 1, 3, 10])), [0, 2, 5, 7]
        )

    def test_fast_path_keeps_input_unchanged(self):
        u32 = self.u64.astype(np.float32)
        got = self.tree.scan_lower_bound(u32)
        np.testing.assert_array_equal(got, self.expected)
        assert u32.dtype == np.float32
