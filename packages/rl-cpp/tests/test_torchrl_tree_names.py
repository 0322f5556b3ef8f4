"""TorchRL's SumSegmentTreeFp32/Fp64 and MinSegmentTreeFp32/Fp64 names, checked against
values printed by TorchRL 0.14.1 (``torchrl._torchrl``) on the same small example."""

import pickle

import numpy as np
import pytest
import torch

from rl.cpp import (
    MinSegmentTree,
    MinSegmentTreeFp32,
    MinSegmentTreeFp64,
    SumSegmentTree,
    SumSegmentTreeFp32,
    SumSegmentTreeFp64,
)

INDEX = torch.tensor([0, 1, 2, 4])
VALUES = torch.tensor([1.0, 2.0, 3.5, 0.25])
FLT_MAX = 3.4028234663852886e38
DBL_MAX = 1.7976931348623157e308


@pytest.mark.parametrize(
    "cls, base, dtype",
    [
        (SumSegmentTreeFp32, SumSegmentTree, np.float32),
        (SumSegmentTreeFp64, SumSegmentTree, np.float64),
        (MinSegmentTreeFp32, MinSegmentTree, np.float32),
        (MinSegmentTreeFp64, MinSegmentTree, np.float64),
    ],
)
def test_fixed_dtype_and_size(cls, base, dtype):
    tree = cls(5)
    assert isinstance(tree, base)
    assert tree.dtype == np.dtype(dtype)
    assert tree.size == len(tree) == 5
    with pytest.raises(ValueError, match=f"holds {np.dtype(dtype).name} priorities"):
        cls(5, dtype="float16" if dtype is np.float64 else "float64")


def test_sum_tree_matches_torchrl():
    tree = SumSegmentTreeFp32(5)
    assert tree.identity_element == 0.0
    tree[INDEX] = VALUES
    # TorchRL: query(0, 5)=6.75, query(1, 3)=5.5, scan_lower_bound(3.2)=2, [2]=3.5
    assert tree.query(0, 5) == 6.75
    assert tree.query(1, 3) == 5.5
    assert tree.scan_lower_bound(3.2) == 2
    assert tree[2] == 3.5
    found = tree.scan_lower_bound(torch.tensor([0.5, 6.0, 6.7]))
    assert found.tolist() == [0, 2, 4]
    leaves = tree.at(torch.arange(5))
    assert leaves.dtype == torch.float32
    assert leaves.tolist() == [1.0, 2.0, 3.5, 0.0, 0.25]
    ranges = tree.query(torch.tensor([0, 1]), torch.tensor([2, 3]))
    assert ranges.tolist() == [3.0, 5.5]


def test_sum_tree_fp64_matches_torchrl():
    tree = SumSegmentTreeFp64(3)
    tree[0] = 0.1
    tree[1] = 0.2
    assert tree.query(0, 3) == 0.30000000000000004
    assert tree.at(torch.arange(3)).dtype == torch.float64


def test_min_tree_matches_torchrl():
    tree = MinSegmentTreeFp32(5)
    assert tree.identity_element == FLT_MAX
    tree[INDEX] = VALUES
    # TorchRL: query(0, 5)=0.25, query(0, 3)=1.0, an unset leaf holds FLT_MAX
    assert tree.query(0, 5) == 0.25
    assert tree.query(0, 3) == 1.0
    assert tree[3] == FLT_MAX
    assert tree.at(torch.arange(5)).tolist() == [1.0, 2.0, 3.5, FLT_MAX, 0.25]
    fresh = MinSegmentTreeFp64(3)
    assert fresh.identity_element == fresh[0] == fresh.query(0, 3) == DBL_MAX


def test_pickle_round_trip_keeps_class_and_leaves():
    tree = MinSegmentTreeFp32(5)
    tree[INDEX] = VALUES
    copy = pickle.loads(pickle.dumps(tree))
    assert type(copy) is MinSegmentTreeFp32
    assert copy.at(torch.arange(5)).tolist() == [1.0, 2.0, 3.5, FLT_MAX, 0.25]
