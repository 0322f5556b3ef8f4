"""Random sequences of operations on rl.cpp trees, checked against a numpy reference tree."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rl.cpp import MinSegmentTree, SumSegmentTree

DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
        ],
    ),
]

# Mostly valid priorities, sometimes one that must be rejected (or +inf, legal for min).
priorities = st.one_of(
    st.floats(0.0, 1e3, allow_nan=False, width=32),
    st.sampled_from([0.0, 1.0, -1.0, math.nan, math.inf]),
)


@st.composite
def programs(draw):
    capacity = draw(st.integers(1, 70))
    index = st.integers(-2, capacity + 1)  # includes a few out-of-range ones
    ops = []
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["update", "update", "fill", "get", "query", "scan", "root"]))
        if kind == "update":
            n = draw(st.integers(0, 12))
            ops.append(
                (
                    kind,
                    draw(st.lists(index, min_size=n, max_size=n)),
                    draw(st.lists(priorities, min_size=n, max_size=n)),
                )
            )
        elif kind == "fill":
            ops.append((kind, draw(st.lists(index, max_size=8)), draw(priorities)))
        elif kind == "get":
            ops.append((kind, draw(st.lists(index, max_size=8))))
        elif kind == "query":
            bound = st.integers(-1, capacity + 1)
            ops.append((kind, draw(st.lists(st.tuples(bound, bound), min_size=1, max_size=6))))
        elif kind == "scan":
            ops.append(
                (
                    kind,
                    draw(
                        st.lists(
                            st.floats(-1.0, 2.0, allow_nan=False) | st.just(math.nan), max_size=8
                        )
                    ),
                )
            )
        else:
            ops.append((kind,))
    return capacity, ops


def _on(a, device):
    return a if device == "cpu" else torch.as_tensor(a, device=device)


def _host(x):
    return x.cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def _valid(op, values):
    values = np.asarray(values, dtype=np.float64)
    if op == "sum":
        return bool(np.all(np.isfinite(values) & (values >= 0)))
    return bool(np.all(values >= 0))


def _run(program, op, dtype, device, reference_tree):
    capacity, ops = program
    dtype = np.dtype(dtype)
    tree = (SumSegmentTree if op == "sum" else MinSegmentTree)(capacity, dtype, device)
    ref = reference_tree(capacity, dtype, op)
    tol = {"rtol": 1e-5, "atol": 1e-3} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-9}
    for step in ops:
        kind = step[0]
        if kind in ("update", "fill"):
            indices = np.asarray(step[1], dtype=np.int64)
            if kind == "update":
                values = np.asarray(step[2], dtype=dtype)
                arg = _on(values, device)
            else:
                values = np.full(indices.shape, step[2], dtype=dtype)
                arg = step[2]
            in_range = bool(np.all((indices >= 0) & (indices < capacity)))
            # Checked in this order: a broadcast value, then indices, then values.
            if kind == "fill" and not _valid(op, [dtype.type(step[2])]):
                with pytest.raises(ValueError, match="is invalid for a"):
                    tree.update(_on(indices, device), arg)
            elif not in_range:
                with pytest.raises(IndexError, match="out of range"):
                    tree.update(_on(indices, device), arg)
            elif not _valid(op, values):
                with pytest.raises(ValueError, match="is invalid for a"):
                    tree.update(_on(indices, device), arg)
            else:
                tree.update(_on(indices, device), arg)
                ref.update(indices, values)
        elif kind == "get":
            indices = np.asarray(step[1], dtype=np.int64)
            if np.all((indices >= 0) & (indices < capacity)):
                got = _host(tree[_on(indices, device)])
                np.testing.assert_array_equal(got, ref.nodes[ref.size + indices])
            else:
                with pytest.raises(IndexError, match="out of range"):
                    tree[_on(indices, device)]
        elif kind == "query":
            starts = np.array([s for s, _ in step[1]], dtype=np.int64)
            ends = np.array([e for _, e in step[1]], dtype=np.int64)
            if np.all((starts >= 0) & (starts <= ends) & (ends <= capacity)):
                got = _host(tree.query(_on(starts, device), _on(ends, device)))
                want = [ref.query(s, e) for s, e in zip(starts, ends)]
                np.testing.assert_allclose(got, want, **tol)
                np.testing.assert_allclose(tree.query(int(starts[0]), int(ends[0])), want[0], **tol)
            else:
                with pytest.raises(IndexError, match="query range"):
                    tree.query(_on(starts, device), _on(ends, device))
        elif kind == "scan" and op == "sum":
            values = np.asarray(step[1], dtype=dtype) * dtype.type(ref.root())
            if not np.all(values >= 0):
                with pytest.raises(ValueError, match="scan value"):
                    tree.scan_lower_bound(_on(values, device))
            elif values.size and not ref.root() > 0:
                # every leaf zero: nothing to draw
                with pytest.raises(ValueError, match="priorities are all zero"):
                    tree.scan_lower_bound(_on(values, device))
            else:
                got = _host(tree.scan_lower_bound(_on(values, device)))
                np.testing.assert_array_equal(got, [ref.scan(v) for v in values])
        elif kind == "root":
            got = tree.total() if op == "sum" else tree.min()
            assert got == ref.root()  # same pairwise reductions in the same dtype
    # Every leaf ends equal to the reference, whatever was rejected on the way.
    np.testing.assert_array_equal(_host(tree[:]), ref.leaves)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", ["sum", "min"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=programs())
def test_random_programs_match_reference(program, op, dtype, device, reference_tree):
    _run(program, op, dtype, device, reference_tree)
