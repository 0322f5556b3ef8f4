"""The fused prioritized-replay steps against the trees' own calls and a plain numpy loop."""

from __future__ import annotations

import numpy as np
import pytest

from rl.cpp import (
    _C,
    MinSegmentTree,
    RowGather,
    SumSegmentTree,
    prioritized_sample,
    prioritized_sample_rows,
    prioritized_sample_rows_into,
    prioritized_update,
    prioritized_update_at,
)


def filled(priority: np.ndarray, dtype: str = "float32", capacity: int = 64):
    s, m = SumSegmentTree(capacity, dtype=dtype), MinSegmentTree(capacity, dtype=dtype)
    index = np.arange(priority.shape[0])
    s.update(index, priority.astype(dtype))
    m.update(index, priority.astype(dtype))
    return s, m


class TestPrioritizedSample:
    @pytest.mark.parametrize("dtype", ["float32", "float64"])
    def test_matches_the_separate_calls(self, dtype):
        rng = np.random.default_rng(0)
        priority = rng.random(40) + 0.05
        s, m = filled(priority, dtype)
        uniform = rng.random(256).astype(dtype)
        index, weight, total = prioritized_sample(s, m, 30, uniform, beta=0.6)
        p_sum, p_min = s.query(0, 30), m.query(0, 30)
        assert total == pytest.approx(p_sum)
        expected = np.minimum(s.scan_lower_bound(uniform * uniform.dtype.type(p_sum)), 29)
        np.testing.assert_array_equal(index, expected)
        leaves = s[expected].astype(np.float64)
        np.testing.assert_allclose(weight, (leaves / p_min) ** -0.6, rtol=1e-5)
        assert index.dtype == np.int64 and weight.dtype == np.float32 and index.max() < 30

    def test_literal_values_and_zero_minimum(self):
        s, m = filled(np.array([1.0, 0.0, 2.0, 1.0]), capacity=4)
        index, weight, total = prioritized_sample(s, m, 3, np.array([0.1, 0.5, 0.9]), beta=1.0)
        # the minimum over [0, 3) is 0: weights are normalised by the batch's largest
        assert index.tolist() == [0, 2, 2] and weight.tolist() == [1.0, 0.5, 0.5]
        assert total == 3.0

    def test_frequencies_follow_the_priorities(self):
        s, m = filled(np.array([1.0, 3.0, 0.0, 4.0]), capacity=4)
        uniform = np.random.default_rng(1).random(40_000)
        index, _, _ = prioritized_sample(s, m, 4, uniform, beta=0.5)
        freq = np.bincount(index, minlength=4) / index.size
        np.testing.assert_allclose(freq, [0.125, 0.375, 0.0, 0.5], atol=0.01)

    def test_torch_uniform_is_read_in_place(self):
        torch = pytest.importorskip("torch")
        s, m = filled(np.array([1.0, 1.0]), capacity=2)
        index, weight, _ = prioritized_sample(s, m, 2, torch.tensor([0.25, 0.75]), beta=0.5)
        assert index.tolist() == [0, 1] and weight.tolist() == [1.0, 1.0]

    def test_errors(self):
        s, m = filled(np.array([0.0, 0.0]), capacity=4)
        with pytest.raises(RuntimeError, match="the priorities of the 2 valid leaves sum to 0"):
            prioritized_sample(s, m, 2, np.array([0.5]), beta=0.5)
        with pytest.raises(IndexError, match=r"query range \[0, 5\)"):
            prioritized_sample(s, m, 5, np.array([0.5]), beta=0.5)
        s.update(np.array([0]), np.array([1.0], dtype=np.float32))
        with pytest.raises(ValueError, match="scan value -1"):
            prioritized_sample(s, m, 1, np.array([-1.0]), beta=0.5)
        with pytest.raises(TypeError, match="expected a SumSegmentTree and a MinSegmentTree"):
            prioritized_sample(m, s, 1, np.array([0.5]), beta=0.5)
        with pytest.raises(TypeError, match="the trees' dtypes differ"):
            prioritized_sample(s, MinSegmentTree(4, dtype="float64"), 1, np.array([0.5]), 0.5)
        with pytest.raises(TypeError, match="uniform has dtype complex128"):
            prioritized_sample(s, m, 1, np.array([0.5j]), beta=0.5)


class TestArgumentChecks:
    """Scalars that were silently truncated (count) or let through (NaN beta, eps, alpha)."""

    @pytest.mark.parametrize("beta", [float("nan"), float("inf"), -0.5])
    def test_beta(self, beta):
        s, m = filled(np.array([1.0, 2.0]), capacity=4)
        match = rf"beta must be a finite number >= 0, got {beta}"
        gather = RowGather([np.zeros((4, 2))])
        uniform = np.array([0.1, 0.9], dtype=np.float32)
        with pytest.raises(ValueError, match=match):
            prioritized_sample(s, m, 2, uniform, beta)
        with pytest.raises(ValueError, match=match):
            prioritized_sample_rows(s, m, 2, uniform, beta, gather)
        with pytest.raises(ValueError, match=match):
            prioritized_sample_rows(s, m, 2, uniform, beta, gather, check=False)
        index, weight = np.empty(2, np.int64), np.empty(2, np.float32)
        with pytest.raises(ValueError, match=match):
            prioritized_sample_rows_into(
                s, m, 2, uniform, beta, index, weight, gather, gather.empty(2)
            )

    @pytest.mark.parametrize("count, shown", [(7.5, r"7\.5 \(float\)"), (True, r"True \(bool\)")])
    def test_count_must_be_an_int(self, count, shown):
        s, m = filled(np.array([1.0, 2.0, 3.0]), capacity=8)
        match = rf"count must be an int, got {shown}"
        with pytest.raises(TypeError, match=match):
            prioritized_sample(s, m, count, np.array([0.5]), 1.0)
        with pytest.raises(TypeError, match=match):
            prioritized_sample_rows(s, m, count, np.array([0.5]), 1.0, RowGather([np.zeros(8)]))

    def test_integer_counts(self):
        s, m = filled(np.array([1.0, 2.0, 3.0]), capacity=8)
        for count in (3, np.int64(3)):
            assert prioritized_sample(s, m, count, np.array([0.99]), 1.0)[0].tolist() == [2]

    @pytest.mark.parametrize(
        "eps, alpha, match",
        [
            (float("nan"), 1.0, r"eps must be a finite number, got nan"),
            (float("inf"), 1.0, r"eps must be a finite number, got inf"),
            (0.0, float("nan"), r"alpha must be a finite number >= 0, got nan"),
            (0.0, -1.0, r"alpha must be a finite number >= 0, got -1"),
        ],
    )
    def test_eps_and_alpha(self, eps, alpha, match):
        s, m = filled(np.array([1.0, 2.0]), capacity=4)
        index, priority = np.array([0, 1]), np.array([2.0, 3.0], dtype=np.float32)
        with pytest.raises(ValueError, match=match):
            prioritized_update(s, m, index, priority, eps, alpha)
        with pytest.raises(ValueError, match=match):
            prioritized_update_at(s, m, index, priority, eps, alpha)
        assert s.total() == 3.0 and m.min() == 1.0

    def test_update_index_checks(self):
        s, m = filled(np.array([1.0, 2.0]), capacity=4)
        big = 2**64 - 1
        with pytest.raises(IndexError, match=rf"index {big} \(at position 0\) is out of range"):
            prioritized_update(s, m, np.array([big], dtype=np.uint64), [1.0], 0.0, 1.0)
        with pytest.raises(
            ValueError, match=r"priority has shape \(4,\), expected \(2, 2\) \(the shape of index"
        ):
            prioritized_update(s, m, np.array([[0, 1], [2, 3]]), np.ones(4), 0.0, 1.0)
        assert s.total() == 3.0 and m.min() == 1.0
        prioritized_update(s, m, np.array([0, 1]), np.array([[4.0], [4.0]]), 0.0, 1.0)
        assert s.total() == 8.0


class TestPrioritizedUpdate:
    @pytest.mark.parametrize("alpha", [1.0, 0.6])
    def test_matches_the_separate_calls(self, alpha):
        rng = np.random.default_rng(2)
        index = rng.integers(0, 64, 100)  # repeated indices: the last one wins
        priority = rng.random(100)
        s, m = SumSegmentTree(64), MinSegmentTree(64)
        rs, rm = SumSegmentTree(64), MinSegmentTree(64)
        high = prioritized_update(s, m, index, priority, eps=0.01, alpha=alpha)
        value = ((priority.astype(np.float32) + np.float32(0.01)) ** np.float32(alpha)).astype(
            np.float32
        )
        rs.update(index, value)
        rm.update(index, value)
        everything = np.arange(64)
        np.testing.assert_allclose(s[everything], rs[everything], rtol=1e-6)
        np.testing.assert_allclose(m[everything], rm[everything], rtol=1e-6)
        assert s.total() == pytest.approx(rs.total(), rel=1e-5) and m.min() == rm.min()
        assert high == pytest.approx(priority.max(), rel=1e-6)

    def test_a_single_priority_broadcasts(self):
        s, m = SumSegmentTree(8), MinSegmentTree(8)
        assert prioritized_update(s, m, [1, 5], [2.0], eps=0.0, alpha=1.0) == 2.0
        assert s.total() == 4.0 and m.min() == 2.0

    def test_bad_input_leaves_both_trees_unchanged(self):
        s, m = filled(np.array([1.0, 2.0]), capacity=4)
        for index, priority, error, match in [
            ([0, 4], [1.0, 1.0], IndexError, "index 4 .at position 1. is out of range"),
            ([0, 1], [1.0, -2.0], ValueError, "priority -2 .at position 1. is invalid"),
            ([0, 1], [np.nan, 1.0], ValueError, "priority nan .at position 0. is invalid"),
            ([0, 1], [np.inf, 1.0], ValueError, "priority inf"),
            ([0, 1, 2], [1.0, 1.0], ValueError, "priority has 2 elements, expected 3"),
        ]:
            with pytest.raises(error, match=match):
                prioritized_update(s, m, index, priority, eps=0.0, alpha=0.5)
            assert s.total() == 3.0 and m.min() == 1.0


def tables(n: int = 50, seed: int = 0) -> list[np.ndarray]:
    """Tables of the shapes and dtypes a replay buffer stores."""
    rng = np.random.default_rng(seed)
    return [
        rng.random((n, 17), dtype=np.float32),
        rng.random((n, 2, 3)),  # float64, 2-D rows
        rng.random((n, 1)) < 0.5,  # 1-byte rows
        rng.integers(0, 100, n),  # 1-D table: one int64 per row
        np.zeros((n, 0), dtype=np.float32),  # empty rows
    ]


class TestRowGather:
    def test_matches_numpy_take(self):
        data = tables()
        gather = RowGather(data)
        assert gather.rows == 50 and len(gather) == 5
        index = np.random.default_rng(1).integers(0, 50, 300)  # repeats, any order
        out = gather(index)
        for table, rows in zip(data, out):
            assert rows.dtype == table.dtype and rows.shape == (300, *table.shape[1:])
            np.testing.assert_array_equal(rows, table.take(index, axis=0))

    def test_torch_tables_and_index_are_read_in_place(self):
        torch = pytest.importorskip("torch")
        obs = torch.arange(12.0).reshape(4, 3)
        gather = RowGather([obs, torch.tensor([True, False, True, False])])
        obs[3] = -1.0  # the gather reads the tensor's memory, not a copy
        rows, flags = gather(torch.tensor([3, 0]))
        assert rows.tolist() == [[-1.0, -1.0, -1.0], [0.0, 1.0, 2.0]]
        assert flags.tolist() == [False, True]

    def test_rows_is_the_shortest_table(self):
        gather = RowGather([np.zeros((5, 2)), np.zeros(3)])
        assert gather.rows == 3
        with pytest.raises(IndexError, match=r"row index 3 \(at position 1\) is out of range"):
            gather(np.array([0, 3]))

    def test_errors(self):
        data = tables(8)
        gather = RowGather(data)
        for index in ([0, 8], [-1, 2]):
            with pytest.raises(IndexError, match="expected 0 <= index < 8"):
                gather(np.array(index))
        with pytest.raises(TypeError, match="index has dtype float64, expected integers"):
            gather(np.array([0.5]))
        bad = gather.empty(2)
        bad[1] = np.empty((2, 2, 3), dtype=np.float32)
        with pytest.raises(ValueError, match=r"out\[1\] must hold 2 rows of 48 bytes"):
            gather(np.array([0, 1]), out=bad)
        with pytest.raises(ValueError, match="table 0 is not C-contiguous"):
            RowGather([np.zeros((4, 4))[:, ::2]])
        with pytest.raises(ValueError, match="table 0 has no rows"):
            RowGather([np.array(1.0)])
        with pytest.raises(TypeError, match="table 1 must be a numpy array or a CPU torch"):
            RowGather([np.zeros(3), [1, 2, 3]])


class TestPrioritizedSampleRows:
    @pytest.mark.parametrize("dtype", ["float32", "float64"])
    def test_matches_sample_then_take(self, dtype):
        rng = np.random.default_rng(3)
        s, m = filled(rng.random(40) + 0.05, dtype)
        data = tables(40)
        uniform = rng.random(256).astype(dtype)
        index, weight, total, rows = prioritized_sample_rows(
            s, m, 30, uniform, 0.6, RowGather(data)
        )
        ref_index, ref_weight, ref_total = prioritized_sample(s, m, 30, uniform, 0.6)
        np.testing.assert_array_equal(index, ref_index)
        np.testing.assert_array_equal(weight, ref_weight)
        assert total == ref_total
        for table, out in zip(data, rows):
            np.testing.assert_array_equal(out, table.take(ref_index, axis=0))

    def test_unchecked_call_gives_the_same_draw(self):
        s, m = filled(np.array([1.0, 0.0, 2.0, 1.0]), capacity=4)
        gather = RowGather([np.arange(8.0).reshape(4, 2)])
        uniform = np.array([0.1, 0.5, 0.9], dtype=np.float32)
        checked = prioritized_sample_rows(s, m, 3, uniform, 1.0, gather)
        fast = prioritized_sample_rows(s, m, 3, uniform, 1.0, gather, check=False)
        assert checked[0].tolist() == fast[0].tolist() == [0, 2, 2]
        assert fast[3][0].tolist() == [[0.0, 1.0], [4.0, 5.0], [4.0, 5.0]]
        with pytest.raises(TypeError):  # the compiled call still checks the dtype
            prioritized_sample_rows(s, m, 3, uniform.astype(np.float64), 1.0, gather, check=False)

    def test_errors(self):
        s, m = filled(np.array([1.0, 1.0, 1.0]), capacity=4)
        with pytest.raises(IndexError, match="table 0 holds 2 rows, fewer than the 3 leaves"):
            prioritized_sample_rows(s, m, 3, np.array([0.5]), 0.5, RowGather([np.zeros(2)]))
        with pytest.raises(TypeError, match="gather must be a RowGather"):
            prioritized_sample_rows(s, m, 3, np.array([0.5]), 0.5, [np.zeros(3)])
        empty_s, empty_m = filled(np.zeros(2), capacity=4)
        with pytest.raises(RuntimeError, match="sum to 0"):
            prioritized_sample_rows(empty_s, empty_m, 2, [0.5], 0.5, RowGather([np.zeros(4)]))


def sorted_pair(a, b):
    """(sum tree, min tree) from two trees given in any order."""
    return (a, b) if isinstance(a, SumSegmentTree) else (b, a)


class TestFusedUpdate:
    def test_overflow_to_infinity_is_refused(self):
        s, m = filled(np.array([1.0, 2.0]), capacity=4)
        big = np.finfo(np.float32).max
        with pytest.raises(ValueError, match="priority inf .at position 0. is invalid"):
            prioritized_update(s, m, [0], [big], eps=0.0, alpha=2.0)
        assert s.total() == 3.0 and m.min() == 1.0

    def test_trees_of_different_capacities(self):
        s, m = SumSegmentTree(8), MinSegmentTree(16)
        prioritized_update(s, m, [1, 7], [2.0, 4.0], eps=0.0, alpha=1.0)
        assert s.total() == 6.0 and m.min() == 2.0 and m.query(0, 16) == 2.0
        # an index only the larger tree holds changes neither tree
        for small, large in [(s, m), (SumSegmentTree(16), MinSegmentTree(8))]:
            before = (small.query(0, small.capacity), large.query(0, large.capacity))
            with pytest.raises(IndexError, match="index 12 .at position 0. is out of range"):
                prioritized_update(*sorted_pair(small, large), [12], [3.0], eps=0.0, alpha=1.0)
            assert (small.query(0, small.capacity), large.query(0, large.capacity)) == before

    def test_unchecked_call(self):
        s, m = SumSegmentTree(8), MinSegmentTree(8)
        index, priority = np.array([1, 7]), np.array([2.0, 4.0], dtype=np.float32)
        assert prioritized_update(s, m, index, priority, 0.0, 1.0, check=False) == 4.0
        assert s.total() == 6.0 and m.min() == 2.0
        with pytest.raises(TypeError):  # a list is not converted without the checks
            prioritized_update(s, m, [1], [2.0], 0.0, 1.0, check=False)


class TestPrioritizedUpdateAt:
    """The update on raw addresses (for callers holding CPU tensors)."""

    @pytest.mark.parametrize("dtype", ["float32", "float64"])
    def test_matches_the_array_call(self, dtype):
        rng = np.random.default_rng(3)
        index = rng.integers(0, 64, 300)
        priority = rng.random(300).astype(dtype)
        s, m = SumSegmentTree(64, dtype=dtype), MinSegmentTree(64, dtype=dtype)
        rs, rm = SumSegmentTree(64, dtype=dtype), MinSegmentTree(64, dtype=dtype)
        high = _C.prioritized_update_at(
            s._impl, m._impl, index.ctypes.data, priority.ctypes.data, 300, 0.01, 0.6
        )
        assert high == prioritized_update(rs, rm, index, priority, eps=0.01, alpha=0.6)
        everything = np.arange(64)
        np.testing.assert_array_equal(s[everything], rs[everything])
        np.testing.assert_array_equal(m[everything], rm[everything])
        assert s.total() == rs.total() and m.min() == rm.min()

    def test_errors_leave_the_trees_unchanged(self):
        s, m = filled(np.array([1.0, 2.0, 3.0]), capacity=8)
        before = (s.total(), m.min())
        index = np.array([1, 8])
        priority = np.array([1.0, 1.0], dtype=np.float32)
        with pytest.raises(IndexError, match="index 8 .* out of range"):
            _C.prioritized_update_at(
                s._impl, m._impl, index.ctypes.data, priority.ctypes.data, 2, 0, 1
            )
        index[1] = 2
        priority[0] = np.nan
        with pytest.raises(ValueError, match="priority nan"):
            _C.prioritized_update_at(
                s._impl, m._impl, index.ctypes.data, priority.ctypes.data, 2, 0, 1
            )
        with pytest.raises(ValueError, match="n must be >= 0, got -1"):
            _C.prioritized_update_at(
                s._impl, m._impl, index.ctypes.data, priority.ctypes.data, -1, 0, 1
            )
        with pytest.raises(ValueError, match="null address"):
            _C.prioritized_update_at(s._impl, m._impl, 0, priority.ctypes.data, 2, 0, 1)
        assert (s.total(), m.min()) == before
        # an empty update is a no-op, whatever the addresses
        assert _C.prioritized_update_at(s._impl, m._impl, 0, 0, 0, 0, 1) == 0.0


class TestPrioritizedUpdateAtPublic:
    """The public update on tensors or arrays: checked arguments, never a raw address."""

    @pytest.mark.parametrize("dtype", ["float32", "float64"])
    def test_tensors_and_arrays_match_the_checked_update(self, dtype):
        torch = pytest.importorskip("torch")
        index = torch.randint(0, 32, (100,), generator=torch.Generator().manual_seed(0))
        priority = torch.rand(100, dtype=getattr(torch, dtype)) * 3
        checked = SumSegmentTree(32, dtype=dtype), MinSegmentTree(32, dtype=dtype)
        expected = prioritized_update(*checked, index.numpy(), priority.numpy(), 0.01, 0.6)
        everything = np.arange(32)
        for args in ((index, priority), (index.numpy(), priority.numpy())):
            trees = SumSegmentTree(32, dtype=dtype), MinSegmentTree(32, dtype=dtype)
            assert prioritized_update_at(*trees, *args, 0.01, 0.6) == expected
            for a, b in zip(trees, checked):
                np.testing.assert_array_equal(a[everything], b[everything])
        empty = torch.empty(0, dtype=torch.int64), torch.empty(0, dtype=getattr(torch, dtype))
        assert prioritized_update_at(*checked, *empty, 0.0, 1.0) == 0.0

    def test_bad_arguments_raise_and_leave_the_trees_unchanged(self):
        torch = pytest.importorskip("torch")
        s, m = filled(np.array([1.0, 2.0, 3.0]), capacity=8)
        index, priority = torch.tensor([1, 2]), torch.tensor([1.0, 4.0])
        cases = [
            # an address where a tensor is expected (it crashed the interpreter before)
            ((index, 4096), TypeError, "priority must be a torch.Tensor or a numpy.ndarray"),
            ((index.numpy().ctypes.data, priority), TypeError, "index must be a torch.Tensor"),
            (([1, 2], priority), TypeError, "index must be a torch.Tensor or a numpy.ndarray"),
            ((index.int(), priority), TypeError, "index must have dtype torch.int64"),
            ((index, priority.double()), TypeError, "priority must have dtype torch.float32"),
            ((index.numpy(), priority.numpy().astype(np.float64)), TypeError, "float32"),
            ((torch.tensor([[1, 2]]), priority), ValueError, "1-D contiguous tensor"),
            ((torch.tensor([1, 0, 2])[::2], priority), ValueError, "contiguous=False"),
            ((np.array([1, 0, 2])[::2], priority.numpy()), ValueError, "contiguous=False"),
            ((index, torch.tensor([1.0, 2.0, 3.0])), ValueError, "priority has 3 values for 2"),
            ((index.to("meta"), priority), ValueError, "dense CPU tensor"),
            ((index.to_sparse(), priority), ValueError, "dense CPU tensor"),
            ((torch.tensor([1, 8]), priority), IndexError, "index 8 .* out of range"),
            ((index, torch.tensor([1.0, float("nan")])), ValueError, "priority nan"),
        ]
        before = (s.total(), m.min())
        for args, error, match in cases:
            with pytest.raises(error, match=match):
                prioritized_update_at(s, m, *args, 0.0, 1.0)
        assert (s.total(), m.min()) == before
        with pytest.raises(TypeError, match="a CPU pair of one dtype"):
            prioritized_update_at(s, MinSegmentTree(8, dtype="float64"), index, priority, 0, 1)
        with pytest.raises(TypeError, match="SumSegmentTree and MinSegmentTree"):
            prioritized_update_at(m, s, index, priority, 0.0, 1.0)

    def test_a_raw_address_raises_in_a_child_process_instead_of_crashing(self):
        import subprocess
        import sys

        code = (
            "import numpy as np\n"
            "from rl.cpp import MinSegmentTree, SumSegmentTree, prioritized_update_at\n"
            "s, m = SumSegmentTree(4), MinSegmentTree(4)\n"
            "try:\n"
            "    prioritized_update_at(s, m, np.array([0]), 4096, 0.0, 1.0)\n"
            "except TypeError as err:\n"
            "    print('TypeError', err)\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stdout.startswith("TypeError priority must be")


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


def test_docstring_examples_run():
    import doctest

    import rl.cpp._gather
    import rl.cpp._prioritized

    for module in (rl.cpp._gather, rl.cpp._prioritized):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.attempted >= 3 and result.failed == 0
