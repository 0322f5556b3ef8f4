"""Behaviour of rl.cpp.SumSegmentTree and MinSegmentTree, on the CPU and (marked) CUDA."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest
import torch

from rl.cpp import (
    MinSegmentTree,
    SumSegmentTree,
    cuda_compiled,
    cuda_device_count,
    prioritized_update,
)

GPU = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
DEVICES = ["cpu", pytest.param("cuda", marks=GPU)]
DTYPES = [np.float32, np.float64]


def arr(values, dtype, device):
    """numpy on the CPU, torch on CUDA (the library a caller on that device would use)."""
    a = np.asarray(values, dtype=dtype)
    return a if device == "cpu" else torch.as_tensor(a, device=device)


def idx(values, device):
    return arr(values, np.int64, device)


def host(x):
    return x.cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
class TestSumSegmentTree:
    def test_literal_values(self, dtype, device):
        t = SumSegmentTree(5, dtype=dtype, device=device)
        t.update(idx([0, 1, 4], device), arr([1, 2, 3], dtype, device))
        assert t.total() == 6.0
        np.testing.assert_array_equal(host(t[idx(range(5), device)]), [1, 2, 0, 0, 3])
        assert t.query(1, 5) == 5.0 and t.query(2, 4) == 0.0 and t.query(3, 3) == 0.0
        found = t.scan_lower_bound(arr([0, 0.99, 1, 2.5, 3, 5.99], dtype, device))
        np.testing.assert_array_equal(host(found), [0, 0, 1, 1, 4, 4])

    def test_values_at_or_above_total_map_to_last_nonzero_leaf(self, dtype, device):
        t = SumSegmentTree(8, dtype=dtype, device=device)
        t.update(idx([1, 5], device), arr([2, 3], dtype, device))
        np.testing.assert_array_equal(
            host(t.scan_lower_bound(arr([5, 7, 1e9], dtype, device))), [5, 5, 5]
        )
        assert t.scan_lower_bound(5.0) == 5

    def test_all_zero_tree_refuses_to_scan(self, dtype, device):
        # nothing can be drawn: an index 0 returned without a word would be a silent draw
        t = SumSegmentTree(6, dtype=dtype, device=device)
        assert t.total() == 0.0
        match = (
            r"cannot scan a sum tree whose priorities are all zero \(total 0\); expected at "
            r"least one priority > 0"
        )
        with pytest.raises(ValueError, match=match):
            t.scan_lower_bound(arr([0, 1], dtype, device))
        with pytest.raises(ValueError, match=match):
            t.scan_lower_bound(0.0)
        # no value: nothing to draw, an empty result
        assert host(t.scan_lower_bound(arr([], dtype, device))).shape == (0,)
        # an invalid value is reported first, as on a tree with mass
        with pytest.raises(ValueError, match=r"scan value -1 \(at position 1\) is invalid"):
            t.scan_lower_bound(arr([0, -1], dtype, device))
        t.update(3, 2.0)
        np.testing.assert_array_equal(host(t.scan_lower_bound(arr([0, 1], dtype, device))), [3, 3])
        t.update(3, 0.0)  # back to all zero
        with pytest.raises(ValueError, match=match):
            t.scan_lower_bound(arr([0.5], dtype, device))

    def test_scalar_api(self, dtype, device):
        t = SumSegmentTree(10, dtype=dtype, device=device)
        t.update(3, 1.5)
        t[7] = 2
        assert t[3] == 1.5 and isinstance(t[3], float)
        assert t.query(0, 10) == 3.5 and isinstance(t.query(0, 10), float)
        assert t.scan_lower_bound(1.6) == 7 and isinstance(t.scan_lower_bound(1.6), int)
        assert t.total() == 3.5 and isinstance(t.total(), float)

    def test_broadcast_scalar_value(self, dtype, device):
        t = SumSegmentTree(6, dtype=dtype, device=device)
        t.update(idx([0, 2, 4], device), 0.5)
        np.testing.assert_array_equal(host(t[idx(range(6), device)]), [0.5, 0, 0.5, 0, 0.5, 0])

    def test_duplicate_indices_last_occurrence_wins(self, dtype, device):
        t = SumSegmentTree(4, dtype=dtype, device=device)
        t.update(idx([1, 2, 1, 1, 2], device), arr([5, 6, 7, 8, 9], dtype, device))
        np.testing.assert_array_equal(host(t[idx([1, 2], device)]), [8, 9])
        assert t.total() == 17.0

    def test_output_keeps_library_and_shape(self, dtype, device):
        t = SumSegmentTree(10, dtype=dtype, device=device)
        t.update(idx(range(10), device), arr(np.arange(10) + 1, dtype, device))
        got = t[idx([[0, 1, 2], [7, 8, 9]], device)]
        assert got.shape == (2, 3) and type(got) is type(idx([0], device))
        np.testing.assert_array_equal(host(got), [[1, 2, 3], [8, 9, 10]])
        drawn = t.scan_lower_bound(arr([[0.5], [54.5]], dtype, device))
        assert drawn.shape == (2, 1)
        np.testing.assert_array_equal(host(drawn), [[0], [9]])
        assert host(drawn).dtype == np.int64

    def test_slices_and_lists(self, dtype, device):
        t = SumSegmentTree(6, dtype=dtype, device=device)
        t.update([1, 3, 5], [1.0, 3.0, 5.0])
        np.testing.assert_array_equal(host(t[:]), [0, 1, 0, 3, 0, 5])
        np.testing.assert_array_equal(host(t[1::2]), [1, 3, 5])
        np.testing.assert_array_equal(host(t[[5, 1]]), [5, 1])

    def test_batched_query(self, dtype, device):
        t = SumSegmentTree(7, dtype=dtype, device=device)
        t.update(idx(range(7), device), arr([1, 2, 3, 4, 5, 6, 7], dtype, device))
        got = t.query(idx([0, 2, 6, 3], device), idx([7, 5, 7, 3], device))
        np.testing.assert_array_equal(host(got), [28, 12, 7, 0])

    def test_capacity_one(self, dtype, device):
        t = SumSegmentTree(1, dtype=dtype, device=device)
        t.update(0, 2.0)
        assert t.total() == 2.0 and t.scan_lower_bound(1.0) == 0 and t.query(0, 1) == 2.0

    def test_random_updates_match_reference(self, dtype, device, reference_tree):
        rng = np.random.default_rng(0)
        t = SumSegmentTree(1000, dtype=dtype, device=device)
        ref = reference_tree(1000, dtype, "sum")
        for _ in range(20):
            i = rng.integers(0, 1000, size=64)
            v = rng.random(64).astype(dtype)
            t.update(idx(i, device), arr(v, dtype, device))
            ref.update(i, v)
        assert t.total() == ref.root()  # same pairwise sums in the same dtype: bit exact
        u = (rng.random(500) * ref.root()).astype(dtype)
        got = host(t.scan_lower_bound(arr(u, dtype, device)))
        np.testing.assert_array_equal(got, [ref.scan(x) for x in u])
        np.testing.assert_array_equal(host(t[idx(range(1000), device)]), ref.leaves)

    def test_sampling_follows_priorities(self, dtype, device):
        p = np.array([1, 0, 3, 0, 4], dtype=dtype)
        t = SumSegmentTree(5, dtype=dtype, device=device)
        t.update(idx(range(5), device), arr(p, dtype, device))
        u = np.random.default_rng(1).random(200_000).astype(dtype) * dtype(t.total())
        drawn = host(t.scan_lower_bound(arr(u, dtype, device)))
        freq = np.bincount(drawn, minlength=5) / drawn.size
        np.testing.assert_allclose(freq, p / p.sum(), atol=0.005)
        assert freq[1] == 0 and freq[3] == 0

    def test_large_batch(self, dtype, device, reference_tree):
        # 20,000 elements: the CUDA tree switches from one fused block to a kernel per level.
        rng = np.random.default_rng(2)
        t = SumSegmentTree(5000, dtype=dtype, device=device)
        ref = reference_tree(5000, dtype, "sum")
        i = rng.integers(0, 5000, size=20_000)
        v = rng.integers(0, 100, size=20_000).astype(dtype)
        t.update(idx(i, device), arr(v, dtype, device))
        ref.update(i, v)
        np.testing.assert_array_equal(host(t[idx(range(5000), device)]), ref.leaves)
        assert t.total() == ref.root()
        u = rng.random(20_000).astype(dtype) * dtype(ref.root())
        got = host(t.scan_lower_bound(arr(u, dtype, device)))
        np.testing.assert_array_equal(got, [ref.scan(x) for x in u])

    def test_empty_batches(self, dtype, device):
        t = SumSegmentTree(4, dtype=dtype, device=device)
        t.update(idx([], device), arr([], dtype, device))
        assert host(t[idx([], device)]).shape == (0,)
        assert host(t.scan_lower_bound(arr([], dtype, device))).shape == (0,)
        assert t.total() == 0.0

    def test_pickle_round_trip(self, dtype, device):
        t = SumSegmentTree(9, dtype=dtype, device=device)
        t.update(idx([0, 4, 8], device), arr([1, 2, 3], dtype, device))
        u = pickle.loads(pickle.dumps(t))
        assert (u.capacity, u.dtype, u.device) == (t.capacity, t.dtype, t.device)
        assert u.total() == 6.0
        np.testing.assert_array_equal(
            host(u[idx(range(9), device)]), host(t[idx(range(9), device)])
        )
        assert u.scan_lower_bound(1.5) == 4


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
class TestMinSegmentTree:
    def test_starts_empty_at_inf(self, dtype, device):
        t = MinSegmentTree(5, dtype=dtype, device=device)
        assert t.min() == float("inf") and t.query(0, 5) == float("inf")
        assert t.query(2, 2) == float("inf")

    def test_literal_values(self, dtype, device):
        t = MinSegmentTree(6, dtype=dtype, device=device)
        t.update(idx([0, 2, 5], device), arr([3, 1, 2], dtype, device))
        assert t.min() == 1.0
        assert t.query(3, 6) == 2.0 and t.query(0, 2) == 3.0
        got = t.query(idx([0, 3, 1], device), idx([6, 5, 2], device))
        np.testing.assert_array_equal(host(got), [1, np.inf, np.inf])

    def test_inf_clears_a_leaf(self, dtype, device):
        t = MinSegmentTree(4, dtype=dtype, device=device)
        t.update(idx([0, 1], device), arr([0.5, 0.25], dtype, device))
        t.update(1, float("inf"))
        assert t.min() == 0.5

    def test_random_updates_match_reference(self, dtype, device, reference_tree):
        rng = np.random.default_rng(3)
        t = MinSegmentTree(777, dtype=dtype, device=device)
        ref = reference_tree(777, dtype, "min")
        for _ in range(10):
            i = rng.integers(0, 777, size=100)
            v = rng.random(100).astype(dtype)
            t.update(idx(i, device), arr(v, dtype, device))
            ref.update(i, v)
            assert t.min() == ref.root()
        s = rng.integers(0, 777, size=50)
        e = np.minimum(s + rng.integers(0, 200, size=50), 777)
        got = host(t.query(idx(s, device), idx(e, device)))
        np.testing.assert_array_equal(got, [ref.query(a, b) for a, b in zip(s, e)])

    def test_pickle_round_trip(self, dtype, device):
        t = MinSegmentTree(3, dtype=dtype, device=device)
        t.update(1, 0.5)
        u = pickle.loads(pickle.dumps(t))
        assert u.min() == 0.5 and u[0] == float("inf")


class TestInterop:
    def test_torch_cpu_in_torch_out(self):
        t = SumSegmentTree(8, dtype=torch.float32)
        t.update(torch.arange(4), torch.tensor([1.0, 2.0, 3.0, 4.0]))
        got = t[torch.tensor([3, 0])]
        assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
        torch.testing.assert_close(got, torch.tensor([4.0, 1.0]))
        drawn = t.scan_lower_bound(torch.tensor([0.5, 9.5]))
        assert drawn.dtype == torch.int64
        torch.testing.assert_close(drawn, torch.tensor([0, 3]))

    def test_numpy_in_numpy_out(self):
        t = SumSegmentTree(8, dtype="float64")
        t.update(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
        got = t.query(np.array([0, 1]), np.array([4, 2]))
        assert isinstance(got, np.ndarray) and got.dtype == np.float64
        np.testing.assert_array_equal(got, [10.0, 2.0])

    def test_tensor_requiring_grad_is_accepted(self):
        t = SumSegmentTree(4)
        priorities = torch.tensor([0.5, 1.5], requires_grad=True)
        t.update(torch.tensor([0, 3]), priorities * 2)
        assert t.total() == 4.0

    def test_inputs_are_used_in_place(self):
        # A read-only numpy array works: the tree only reads its inputs.
        i = np.arange(3)
        i.flags.writeable = False
        t = SumSegmentTree(3)
        t.update(i, np.ones(3, np.float32))
        assert t.total() == 3.0

    @pytest.mark.parametrize("dtype", ["float32", np.float32, np.dtype("float32"), torch.float32])
    def test_dtype_spellings(self, dtype):
        t = MinSegmentTree(2, dtype=dtype)
        assert t.dtype == np.dtype(np.float32)

    def test_properties_and_repr(self):
        t = SumSegmentTree(12, dtype=torch.float64)
        assert len(t) == 12 and t.capacity == 12 and t.device == "cpu"
        assert t.dtype == np.float64
        assert repr(t) == "SumSegmentTree(capacity=12, dtype=float64, device='cpu')"

    def test_concurrent_updates_from_threads(self):
        # Batched calls release the GIL; each tree serializes its own operations.
        t = SumSegmentTree(40_000, dtype="float64")

        def work(k):
            for start in range(k * 10_000, (k + 1) * 10_000, 500):
                t.update(np.arange(start, start + 500), 1.0)
                t.scan_lower_bound(np.linspace(0, t.total(), 256))

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert t.total() == 40_000.0
        np.testing.assert_array_equal(t[:], np.ones(40_000))


@pytest.mark.parametrize("device", DEVICES)
class TestErrors:
    def test_index_out_of_range(self, device):
        t = SumSegmentTree(5, device=device)
        with pytest.raises(
            IndexError, match=r"index 5 \(at position 1\) is out of range .* capacity 5"
        ):
            t.update(idx([0, 5], device), arr([1, 1], np.float32, device))
        with pytest.raises(IndexError, match=r"index -1 \(at position 0\) is out of range"):
            t[idx([-1], device)]
        with pytest.raises(IndexError, match=r"index 7 is out of range for a tree of capacity 5"):
            t[7]
        with pytest.raises(IndexError, match=r"index -2 is out of range"):
            t.update(-2, 1.0)

    def test_failed_update_leaves_the_tree_unchanged(self, device):
        t = SumSegmentTree(5, device=device)
        t.update(idx([0, 1], device), arr([1, 2], np.float32, device))
        with pytest.raises(IndexError):
            t.update(idx([2, 3, 99], device), arr([5, 5, 5], np.float32, device))
        with pytest.raises(ValueError):
            t.update(idx([2, 3, 4], device), arr([5, np.nan, 5], np.float32, device))
        np.testing.assert_array_equal(host(t[idx(range(5), device)]), [1, 2, 0, 0, 0])
        assert t.total() == 3.0

    @pytest.mark.parametrize("bad", [-1.0, np.nan, np.inf])
    def test_invalid_sum_priority(self, device, bad):
        t = SumSegmentTree(5, device=device)
        with pytest.raises(
            ValueError, match=r"priority .* \(at position 1\) is invalid for a sum tree"
        ):
            t.update(idx([0, 1], device), arr([1.0, bad], np.float32, device))
        with pytest.raises(
            ValueError, match=r"is invalid for a sum tree; expected a finite value >= 0"
        ):
            t.update(2, bad)
        with pytest.raises(ValueError, match=r"invalid for a sum tree"):
            t.update(idx([0, 1], device), bad)

    @pytest.mark.parametrize("bad", [-0.5, np.nan])
    def test_invalid_min_priority(self, device, bad):
        t = MinSegmentTree(5, device=device)
        with pytest.raises(
            ValueError, match=r"priority (-0.5|nan) \(at position 0\) is invalid for a min tree"
        ):
            t.update(idx([3], device), arr([bad], np.float32, device))

    @pytest.mark.parametrize("bad", [-1.0, np.nan])
    def test_invalid_scan_value(self, device, bad):
        t = SumSegmentTree(5, device=device)
        t.update(0, 1.0)
        with pytest.raises(ValueError, match=r"scan value (-1|nan) \(at position 2\) is invalid"):
            t.scan_lower_bound(arr([0.1, 0.2, bad], np.float32, device))
        with pytest.raises(ValueError, match=r"scan value (-1|nan) \(at position 0\) is invalid"):
            t.scan_lower_bound(bad)

    def test_invalid_query_range(self, device):
        t = MinSegmentTree(4, device=device)
        with pytest.raises(IndexError, match=r"query range \[3, 2\) is invalid .* capacity 4"):
            t.query(3, 2)
        with pytest.raises(IndexError, match=r"query range \[0, 5\) \(at position 1\) is invalid"):
            t.query(idx([0, 0], device), idx([1, 5], device))

    def test_wrong_dtype(self, device):
        t = SumSegmentTree(4, device=device)
        with pytest.raises(
            TypeError,
            match=r"indices has dtype (torch\.)?float64, expected (torch\.)?int64 or an integer",
        ):
            t[arr([0], np.float64, device)]
        with pytest.raises(
            TypeError,
            match=r"values has dtype (torch\.)?complex64, expected (torch\.)?float32 or a real",
        ):
            t.update(idx([0], device), arr([1.0], np.complex64, device))
        with pytest.raises(TypeError, match=r"values has dtype (torch\.)?complex64, expected"):
            t.scan_lower_bound(arr([1.0], np.complex64, device))
        if device == "cpu":
            with pytest.raises(TypeError, match=r"values has dtype <U3, expected float32"):
                t.update(idx([0], device), np.array(["1.0"]))

    def test_non_contiguous(self, device):
        t = SumSegmentTree(8, device=device)
        with pytest.raises(TypeError, match=r"indices is not contiguous"):
            t[idx(range(8), device)[::2]]
        with pytest.raises(TypeError, match=r"values is not contiguous"):
            t.update(idx([0, 1], device), arr([[1, 2], [3, 4]], np.float32, device).T[0])

    def test_length_mismatch(self, device):
        t = SumSegmentTree(8, device=device)
        with pytest.raises(
            ValueError, match=r"values has 2 elements, expected 3 \(one per index\)"
        ):
            t.update(idx([0, 1, 2], device), arr([1, 2], np.float32, device))
        with pytest.raises(ValueError, match=r"end has 1 elements, expected 2"):
            t.query(idx([0, 1], device), idx([3], device))

    def test_uint64_index_is_reported_not_wrapped(self, device):
        # 2**64 - 1 would wrap to -1 in an int64 conversion: the message names the value
        t = SumSegmentTree(8, device=device)
        big = 2**64 - 1
        match = (
            rf"index {big} \(at position 1\) is out of range for a tree of capacity 8; "
            r"expected 0 <= index < 8"
        )
        index = torch.tensor([0, big], dtype=torch.uint64, device=device)
        with pytest.raises(IndexError, match=match):
            t.update(index, torch.ones(2, device=device))
        with pytest.raises(IndexError, match=match):
            t[index]
        if device == "cpu":
            with pytest.raises(IndexError, match=match):
                t.update(np.array([0, big], dtype=np.uint64), np.ones(2, np.float32))
            with pytest.raises(IndexError, match=match):
                t.update([0, big], [1.0, 1.0])
        with pytest.raises(IndexError, match=rf"index {big} is out of range for a tree"):
            t.update(np.uint64(big), 1.0)
        assert t.total() == 0.0
        if device == "cpu":
            t.update(np.array([0, 7], dtype=np.uint64), 1.0)  # in range: converted
            assert t.total() == 2.0
        else:  # a CUDA tree takes tensors on its device, and says so
            with pytest.raises(ValueError, match="numpy array .on cpu., expected a torch"):
                t.update(np.array([0, 7], dtype=np.uint64), 1.0)

    def test_values_have_the_layout_of_indices(self, device):
        t = SumSegmentTree(8, device=device)
        with pytest.raises(
            ValueError,
            match=r"values has shape \(4,\), expected \(2, 2\) \(the shape of indices, up to "
            r"trailing dims of size 1\)",
        ):
            t.update(idx([[0, 1], [2, 3]], device), arr([1, 2, 3, 4], np.float32, device))
        assert t.total() == 0.0
        # [B] indices with TorchRL's [B, 1] priorities: the same layout
        t.update(idx([0, 1], device), arr([[1], [2]], np.float32, device))
        t.update(idx([[2, 3]], device), arr([[3, 4]], np.float32, device))
        np.testing.assert_array_equal(host(t[idx(range(4), device)]), [1, 2, 3, 4])

    def test_unsupported_types(self, device):
        t = SumSegmentTree(8, device=device)
        with pytest.raises(TypeError, match=r"indices must be a numpy array, a torch tensor"):
            t[{0, 1}]
        with pytest.raises(TypeError, match=r"values must be a number when the index is an int"):
            t.update(0, "1.0")


class TestConstructionErrors:
    def test_bad_capacity(self):
        with pytest.raises(ValueError, match=r"capacity must be >= 1, got 0"):
            SumSegmentTree(0)
        with pytest.raises(TypeError, match=r"capacity must be an int, got str"):
            MinSegmentTree("10")

    def test_bad_dtype(self):
        with pytest.raises(TypeError, match=r"dtype must be float32 or float64, got 'int64'"):
            SumSegmentTree(4, dtype="int64")
        with pytest.raises(TypeError, match=r"dtype must be float32 or float64, got torch.float16"):
            SumSegmentTree(4, dtype=torch.float16)

    def test_bad_device(self):
        with pytest.raises(
            ValueError, match=r"device must be 'cpu', 'cuda' or 'cuda:<index>', got 'tpu'"
        ):
            SumSegmentTree(4, device="tpu")

    def test_missing_cuda_device(self):
        if cuda_compiled():
            with pytest.raises(
                ValueError, match=r"device cuda:99 is not available; this process sees"
            ):
                SumSegmentTree(4, device="cuda:99")
            if cuda_device_count() == 0:
                with pytest.raises(ValueError, match=r"cuda:0 is not available; .* sees 0 CUDA"):
                    MinSegmentTree(4, device=torch.device("cuda"))
            else:
                assert MinSegmentTree(4, device=torch.device("cuda")).device.startswith("cuda:")
        else:
            with pytest.raises(RuntimeError, match=r"has no CUDA kernels"):
                SumSegmentTree(4, device="cuda:99")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
class TestCuda:
    def test_cpu_arrays_rejected_by_cuda_tree(self):
        t = SumSegmentTree(4, device="cuda")
        with pytest.raises(
            ValueError,
            match=r"indices is a numpy array \(on cpu\), expected a torch tensor on cuda:0",
        ):
            t[np.array([0])]
        with pytest.raises(ValueError, match=r"indices is on cpu, expected cuda:0"):
            t[torch.tensor([0])]

    def test_cuda_tensors_rejected_by_cpu_tree(self):
        t = SumSegmentTree(4)
        with pytest.raises(ValueError, match=r"indices is on cuda:0, expected cpu"):
            t[torch.tensor([0], device="cuda")]

    def test_runs_on_the_current_stream(self, reference_tree):
        rng = np.random.default_rng(4)
        t = SumSegmentTree(10_000, device="cuda")
        ref = reference_tree(10_000, np.float32, "sum")
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for _ in range(5):
                i = rng.integers(0, 10_000, size=256)
                v = rng.random(256).astype(np.float32)
                # Inputs produced on the side stream, consumed by the tree on it too.
                t.update(torch.as_tensor(i).cuda(non_blocking=True), torch.as_tensor(v).cuda() * 1)
                ref.update(i, v)
            u = torch.rand(4096, device="cuda") * t.total()
            drawn = t.scan_lower_bound(u)
        stream.synchronize()
        u_host = u.cpu().numpy()
        np.testing.assert_array_equal(drawn.cpu().numpy(), [ref.scan(x) for x in u_host])

    def test_matches_cpu_tree(self):
        rng = np.random.default_rng(5)
        cpu, gpu = SumSegmentTree(3000, "float64"), SumSegmentTree(3000, "float64", "cuda:0")
        for _ in range(10):
            i = rng.integers(0, 3000, size=300)
            v = rng.random(300)
            cpu.update(i, v)
            gpu.update(torch.as_tensor(i, device="cuda"), torch.as_tensor(v, device="cuda"))
        assert cpu.total() == gpu.total()
        u = rng.random(10_000) * cpu.total()
        np.testing.assert_array_equal(
            cpu.scan_lower_bound(u), gpu.scan_lower_bound(torch.as_tensor(u, device="cuda")).cpu()
        )


def _rebuilt(leaves: np.ndarray, size: int, op) -> list[np.ndarray]:
    """Every level of the binary tree over ``leaves``, rebuilt pairwise in their dtype
    (the values any sequence of updates must end with), from the leaves up."""
    identity = 0 if op is np.add else np.inf
    level = np.full(size, identity, dtype=leaves.dtype)
    level[: leaves.size] = leaves
    levels = [level]
    while level.size > 1:
        level = op(level[0::2], level[1::2])
        levels.append(level)
    return levels


def _descend(levels: list[np.ndarray], value) -> int:
    """The reference descent over rebuilt levels (as ReferenceTree.scan)."""
    node = 0
    for level in reversed(levels[:-1]):
        left, right = level[2 * node], level[2 * node + 1]
        if left > value or not right > 0:
            node = 2 * node
        else:
            value = level.dtype.type(value - left)
            node = 2 * node + 1
    return node


@pytest.mark.parametrize("dtype", DTYPES)
class TestBatchedPaths:
    """Batched updates climb shared paths together and rebuild the top levels once; the
    nodes must end as a rebuild from the leaves gives them, whatever the batch size."""

    @pytest.mark.parametrize("n", [1, 2, 3, 5, 64, 65, 300, 3000])
    def test_any_batch_size_ends_exact(self, dtype, n):
        rng = np.random.default_rng(n)
        capacity, size = 1500, 2048
        s, m = SumSegmentTree(capacity, dtype=dtype), MinSegmentTree(capacity, dtype=dtype)
        fused_s = SumSegmentTree(capacity, dtype=dtype)
        fused_m = MinSegmentTree(capacity, dtype=dtype)
        for _ in range(3):
            index = rng.integers(0, capacity, n)
            value = (rng.random(n) + 0.01).astype(dtype)
            s.update(index, value)
            m.update(index, value)
            prioritized_update(fused_s, fused_m, index, value, eps=0.0, alpha=1.0)
        leaves = s[np.arange(capacity)]
        min_leaves = m[np.arange(capacity)]  # +inf where never written
        sums, mins = _rebuilt(leaves, size, np.add), _rebuilt(min_leaves, size, np.minimum)
        for tree in (s, fused_s):
            np.testing.assert_array_equal(tree[np.arange(capacity)], leaves)
            assert tree.total() == sums[-1][0]
            u = (rng.random(200) * sums[-1][0]).astype(dtype)
            np.testing.assert_array_equal(tree.scan_lower_bound(u), [_descend(sums, x) for x in u])
            # a range query reads the inner nodes too
            assert tree.query(1, 1025) == pytest.approx(float(leaves[1:1025].sum()), rel=1e-5)
        for tree in (m, fused_m):
            assert tree.min() == mins[-1][0]
            np.testing.assert_array_equal(tree[np.arange(capacity)], min_leaves)
            assert tree.query(700, 1400) == min_leaves[700:1400].min()


def test_docstring_examples_run():
    import doctest

    import rl.cpp._segment_tree as module

    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 10 and result.failed == 0
