"""The torch trees (rl-data's fallback without rl-cpp) refuse what rl-cpp's trees refuse,
with the same exception and message: both are checked on the same bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rl.data.replay_buffers._torch_trees import TorchMinSegmentTree, TorchSumSegmentTree

BIG = 2**64 - 1  # wraps to -1 in an int64 conversion


def _pair(kind: str = "sum", capacity: int = 8):
    cpp = pytest.importorskip("rl.cpp", reason="compares with rl-cpp, not installed")
    if kind == "sum":
        return TorchSumSegmentTree(capacity), cpp.SumSegmentTree(capacity)
    return TorchMinSegmentTree(capacity), cpp.MinSegmentTree(capacity)


def _error(call, tree) -> tuple[type, str]:
    with pytest.raises(Exception) as info:
        call(tree)
    return type(info.value), str(info.value)


_BAD_UPDATES = {
    "uint64 numpy": (np.array([0, BIG], dtype=np.uint64), np.ones(2, np.float32)),
    "uint64 torch": (torch.tensor([0, BIG], dtype=torch.uint64), torch.ones(2)),
    "uint64 list": ([0, BIG], [1.0, 1.0]),
    "int scalar": (BIG, 1.0),
    "negative": (torch.tensor([3, -1]), torch.ones(2)),
    "past the end": (np.array([0, 8]), np.ones(2, np.float32)),
    "(2, 2) with (4,)": (torch.tensor([[0, 1], [2, 3]]), torch.ones(4)),
    "one value for two": (torch.tensor([0, 1]), torch.ones(1)),
    "float indices numpy": (np.array([0.0, 1.0]), np.ones(2, np.float32)),
    "float indices torch": (torch.tensor([0.0, 1.0]), torch.ones(2)),
    "float indices list": ([0.0, 1.5], [1.0, 1.0]),
    "huge int list": ([2**70, 0], [1.0, 1.0]),
    "array for an int": (1, np.ones(1, np.float32)),
    "nan": (torch.tensor([0, 1]), torch.tensor([1.0, float("nan")])),
}


@pytest.mark.parametrize("case", sorted(_BAD_UPDATES))
@pytest.mark.parametrize("kind", ["sum", "min"])
def test_bad_updates_raise_as_rl_cpp(case, kind):
    indices, values = _BAD_UPDATES[case]
    ours, ref = _pair(kind)
    got = _error(lambda tree: tree.update(indices, values), ours)
    want = _error(lambda tree: tree.update(indices, values), ref)
    assert got == want
    assert torch.equal(torch.as_tensor(ours[:]), torch.as_tensor(ref[:]))  # both unchanged


def test_uint64_index_names_its_value():
    ours, _ = _pair()
    with pytest.raises(
        IndexError,
        match=rf"index {BIG} \(at position 1\) is out of range for a tree of capacity 8; "
        r"expected 0 <= index < 8",
    ):
        ours.update(torch.tensor([0, BIG], dtype=torch.uint64), torch.ones(2))
    with pytest.raises(IndexError, match=rf"index {BIG} is out of range for a tree of capacity"):
        ours[BIG]


def test_values_have_the_layout_of_indices():
    ours, ref = _pair()
    with pytest.raises(
        ValueError,
        match=r"values has shape \(4,\), expected \(2, 2\) \(the shape of indices, up to "
        r"trailing dims of size 1\)",
    ):
        ours.update(torch.tensor([[0, 1], [2, 3]]), torch.ones(4))
    for tree in (ours, ref):  # [B] with [B, 1] (TorchRL's priorities) is the same layout
        tree.update(torch.tensor([0, 1]), torch.tensor([[1.0], [2.0]]))
        tree.update(np.array([[2, 3]]), np.array([[3.0, 4.0]], np.float32))
    assert torch.equal(torch.as_tensor(ours[:4]), torch.as_tensor(ref[:4]))


@pytest.mark.parametrize(
    "values", [torch.tensor([0.0, 0.5]), 0.0, [0.25], np.array([0.5], np.float32)]
)
def test_all_zero_tree_refuses_to_scan_as_rl_cpp(values):
    ours, ref = _pair()
    got = _error(lambda tree: tree.scan_lower_bound(values), ours)
    assert got == _error(lambda tree: tree.scan_lower_bound(values), ref)
    assert got == (
        ValueError,
        "cannot scan a sum tree whose priorities are all zero (total 0); expected at least "
        "one priority > 0",
    )


def test_all_zero_tree_scan_edge_cases_as_rl_cpp():
    ours, ref = _pair()
    for tree in (ours, ref):  # no value: an empty result, nothing drawn
        assert np.asarray(tree.scan_lower_bound(np.array([], np.float32))).shape == (0,)
    # an invalid value is named first, as on a tree with mass
    bad = torch.tensor([0.5, -1.0])
    assert _error(lambda t: t.scan_lower_bound(bad), ours) == _error(
        lambda t: t.scan_lower_bound(bad), ref
    )


@pytest.mark.parametrize("bounds", [(3, 2), (0, 9), (-1, 2)])
def test_bad_query_range_as_rl_cpp(bounds):
    ours, ref = _pair("min")
    assert _error(lambda t: t.query(*bounds), ours) == _error(lambda t: t.query(*bounds), ref)
