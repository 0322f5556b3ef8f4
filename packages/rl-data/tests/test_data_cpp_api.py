"""rl-data reaches rl-cpp through its public API only (``rl.cpp.__all__``), so that any
rl-cpp in the declared range works; the two hot-path calls it uses give what the
checked calls give."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch

import rl.cpp
from rl.cpp import (
    MinSegmentTree,
    RowGather,
    SumSegmentTree,
    prioritized_sample_rows,
    prioritized_sample_rows_into,
    prioritized_update,
    prioritized_update_at,
)

SRC = Path(__file__).resolve().parents[1] / "src"


def _uses_of_rl_cpp() -> list[str]:
    """Every private rl-cpp name the rl-data sources import or read, as 'file:line name'."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        where = f"{path.relative_to(SRC)}"
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rl.cpp"):
                if node.module != "rl.cpp":
                    found.append(f"{where}:{node.lineno} from {node.module}")
                for alias in node.names:
                    if alias.name not in rl.cpp.__all__:
                        found.append(f"{where}:{node.lineno} {node.module}.{alias.name}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("rl.cpp."):
                        found.append(f"{where}:{node.lineno} import {alias.name}")
            elif isinstance(node, ast.Attribute) and node.attr in ("_impl", "_C"):
                # the compiled handles of rl-cpp's trees and tables, its extension module
                found.append(f"{where}:{node.lineno} .{node.attr}")
    return found


def test_rl_data_uses_only_public_rl_cpp_names():
    assert _uses_of_rl_cpp() == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_update_at_tensor_addresses_matches_the_checked_update(dtype):
    name = str(dtype).removeprefix("torch.")
    index = torch.randint(0, 32, (100,), generator=torch.Generator().manual_seed(0))
    priority = torch.rand(100, dtype=dtype, generator=torch.Generator().manual_seed(1)) * 3
    fast = SumSegmentTree(32, dtype=name), MinSegmentTree(32, dtype=name)
    checked = SumSegmentTree(32, dtype=name), MinSegmentTree(32, dtype=name)
    high = prioritized_update_at(*fast, index.data_ptr(), priority.data_ptr(), 100, 0.01, 0.6)
    assert high == prioritized_update(*checked, index, priority, 0.01, 0.6)
    everything = np.arange(32)
    for a, b in zip(fast, checked):
        np.testing.assert_array_equal(a[everything], b[everything])
    with pytest.raises(IndexError, match="out of range"):
        bad = torch.tensor([1, 32])
        prioritized_update_at(*fast, bad.data_ptr(), priority.data_ptr(), 2, 0.0, 1.0)
    np.testing.assert_array_equal(fast[0][everything], checked[0][everything])


def test_sample_rows_into_matches_the_checked_draw():
    s, m = SumSegmentTree(16), MinSegmentTree(16)
    priority = np.linspace(0.1, 2.0, 16).astype(np.float32)
    prioritized_update(s, m, np.arange(16), priority, 0.0, 1.0)
    obs = np.arange(32, dtype=np.float32).reshape(16, 2)
    done = np.arange(16) % 3 == 0
    gather = RowGather([obs, done])
    uniform = np.random.default_rng(0).random(8).astype(np.float32)
    index, weight, total, rows = prioritized_sample_rows(s, m, 12, uniform, 0.5, gather)
    out_index, out_weight = np.empty(8, np.int64), np.empty(8, np.float32)
    out = gather.empty(8)
    got = prioritized_sample_rows_into(s, m, 12, uniform, 0.5, out_index, out_weight, gather, out)
    assert got == total == pytest.approx(float(priority[:12].sum()), rel=1e-6)
    np.testing.assert_array_equal(out_index, index)
    np.testing.assert_array_equal(out_weight, weight)
    for a, b in zip(out, rows):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(TypeError):  # the compiled call checks the dtypes itself
        prioritized_sample_rows_into(
            s, m, 12, uniform.astype(np.float64), 0.5, out_index, out_weight, gather, out
        )
