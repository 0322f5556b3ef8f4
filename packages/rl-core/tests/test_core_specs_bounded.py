import math

import numpy as np
import pytest
import torch

from rl.core import Bounded, CategoricalBox, ContinuousBox, Unbounded


class TestBounded:
    def test_shape_from_bounds_and_space(self):
        spec = Bounded(-torch.ones(3), torch.ones(3))
        assert spec.shape == (3,) and spec.dtype == torch.float32 and spec.domain == "continuous"
        assert isinstance(spec.space, ContinuousBox)
        torch.testing.assert_close(spec.space.low, -torch.ones(3))
        torch.testing.assert_close(spec.high, torch.ones(3))

    def test_scalar_bounds_broadcast(self):
        spec = Bounded(0.0, torch.tensor([1.0, 2.0]), shape=(4, 2))
        assert spec.low.shape == (4, 2)
        torch.testing.assert_close(spec.high[3], torch.tensor([1.0, 2.0]))

    def test_rand_within_per_element_bounds(self):
        spec = Bounded(torch.tensor([0.0, 10.0]), torch.tensor([1.0, 10.5]))
        x = spec.rand((1000,))
        assert bool((x[:, 0] >= 0).all() and (x[:, 0] <= 1).all())
        assert bool((x[:, 1] >= 10).all() and (x[:, 1] <= 10.5).all())
        assert x[:, 0].std() > 0.2  # spread over the box, not a constant

    def test_integer_bounds_inclusive(self):
        spec = Bounded(2, 4, shape=(2000,), dtype=torch.int64)
        assert spec.domain == "discrete"
        assert set(spec.rand().tolist()) == {2, 3, 4}

    def test_infinite_bounds(self):
        spec = Bounded(
            torch.tensor([0.0, -math.inf, -math.inf]), torch.tensor([math.inf, 1.0, math.inf])
        )
        x = spec.rand((500,))
        assert torch.isfinite(x).all()
        assert spec.is_in(x)

    def test_is_in_and_project(self):
        spec = Bounded(-2.0, 2.0, shape=(1,))
        assert spec.is_in(torch.tensor([2.0])) and spec.is_in(torch.tensor([-2.0]))
        assert not spec.is_in(torch.tensor([2.01]))
        assert not spec.is_in(torch.tensor([float("nan")]))
        torch.testing.assert_close(
            spec.project(torch.tensor([[5.0], [-3.0], [0.5]])), torch.tensor([[2.0], [-2.0], [0.5]])
        )
        # project casts to the spec dtype
        assert spec.project(torch.tensor([1], dtype=torch.int64)).dtype == torch.float32

    def test_bool_rand_within_bounds(self):
        # bool boxes: low=-1 and high=1 both cast to True, so every draw is True
        spec = Bounded(-torch.ones(10), torch.ones(()), dtype=torch.bool)
        assert spec.rand().tolist() == [True] * 10
        assert spec.expand(5, 10).rand().shape == (5, 10)
        free = Bounded(False, True, shape=(2000,), dtype=torch.bool).rand()
        assert free.dtype == torch.bool and 0 < int(free.sum()) < 2000
        low = torch.tensor([True, False, False])
        high = torch.tensor([True, True, False])
        draws = Bounded(low, high, dtype=torch.bool).rand((200,))
        assert draws[:, 0].all() and not draws[:, 2].any() and draws[:, 1].any()

    def test_space_setter(self):
        # as TorchRL: spec.space can be replaced; the box is checked and expanded to shape
        spec = Bounded(0.0, 1.0, shape=(3,))
        spec.space = ContinuousBox(torch.zeros(()), torch.tensor([1.0, 2.0, 3.0]))
        assert spec.low.tolist() == [0.0] * 3 and spec.high.tolist() == [1.0, 2.0, 3.0]
        assert bool((spec.rand((100,)) <= spec.high).all())
        with pytest.raises(ValueError, match=r"expects low <= high everywhere, got low=1.0"):
            spec.space = ContinuousBox(torch.ones(3), torch.zeros(3))
        with pytest.raises(ValueError, match=r"high of shape \(2,\) does not broadcast to"):
            spec.space = ContinuousBox(torch.zeros(3), torch.ones(2))
        with pytest.raises(TypeError, match="takes a ContinuousBox"):
            spec.space = CategoricalBox(2)
        assert spec.high.tolist() == [1.0, 2.0, 3.0]

    @pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.int32, torch.bool])
    def test_equals_unbounded_when_it_spans_the_dtype(self, dtype):
        # TorchRL: an Unbounded and a Bounded at the dtype's limits are the same spec
        unbounded = Unbounded(shape=(2, 3), dtype=dtype)
        whole = Bounded(unbounded.low, unbounded.high, dtype=dtype)
        assert whole == unbounded and unbounded == whole
        if dtype.is_floating_point:
            info = torch.finfo(dtype)
            assert Bounded(info.min, info.max, shape=(2, 3), dtype=dtype) == unbounded
        part = Bounded(1, 1, shape=(2, 3), dtype=dtype)
        assert part != unbounded and unbounded != part
        assert whole != Unbounded(shape=(2, 2), dtype=dtype)

    def test_project_integer_rounds(self):
        spec = Bounded(0, 3, shape=(3,), dtype=torch.int32)
        assert spec.project(torch.tensor([-1.2, 1.6, 9.0])).tolist() == [0, 2, 3]

    def test_encode_numpy_and_python(self):
        spec = Bounded(-2.0, 2.0, shape=(1,))
        ro = np.array([0.5], dtype=np.float64)
        ro.flags.writeable = False
        out = spec.encode(ro)
        assert out.dtype == torch.float32 and out.tolist() == [0.5]
        assert spec.encode(1.5).shape == (1,)
        assert spec.to_numpy(torch.tensor([1.0])).dtype == np.float32

    def test_dtype_strings(self):
        assert Bounded(0, 1, shape=(1,), dtype="float64").dtype == torch.float64
        assert Bounded(0, 1, shape=(1,), dtype="torch.int16").dtype == torch.int16
        assert Bounded(0, 1, shape=(1,), dtype=np.float16).dtype == torch.float16

    def test_to_dtype_casts_bounds(self):
        spec = Bounded(-1.5, 1.5, shape=(2,)).to(torch.float64)
        assert spec.dtype == torch.float64 and spec.low.dtype == torch.float64
        assert spec.is_in(spec.rand())

    def test_deprecated_minimum_maximum(self):
        with pytest.warns(DeprecationWarning, match="use low=... and high=..."):
            spec = Bounded(minimum=-1.0, maximum=1.0, shape=(2,))
        assert spec == Bounded(-1.0, 1.0, shape=(2,))

    def test_repr_readable(self):
        assert repr(Bounded(-2.0, 2.0, shape=(1,))) == (
            "Bounded(shape=torch.Size([1]), low=-2.0, high=2.0, device=cpu, dtype=torch.float32)"
        )
        assert "low=[0.0, 1.0]" in repr(Bounded(torch.tensor([0.0, 1.0]), 2.0))

    def test_low_above_high(self):
        with pytest.raises(
            ValueError, match=r"expects low <= high everywhere, got low=1.0 and high=0.0"
        ):
            Bounded(1.0, 0.0, shape=(1,))
        with pytest.raises(ValueError, match=r"low <= high .* low=\[0.0, 3.0\] and high=2.0"):
            Bounded(torch.tensor([0.0, 3.0]), 2.0)

    @pytest.mark.parametrize(
        "low, high, shown",
        [
            (float("nan"), 1.0, r"low=\[nan\] and high=1.0"),
            (0.0, float("nan"), r"low=0.0 and high=\[nan\]"),
            (torch.tensor([0.0, float("nan")]), 1.0, r"low=\[0.0, nan\] and high=1.0"),
        ],
    )
    def test_nan_bound(self, low, high, shown):
        with pytest.raises(
            ValueError,
            match=rf"Bounded expects low and high without NaN \(numbers or \+-inf\), got {shown}",
        ):
            Bounded(
                low=low, high=high, shape=torch.broadcast_shapes(torch.as_tensor(low).shape, (1,))
            )

    def test_infinite_bounds_stay_valid(self):
        spec = Bounded(low=float("-inf"), high=float("inf"), shape=(2,))
        assert spec.is_in(torch.tensor([1e30, -1e30]))

    def test_shape_does_not_broadcast(self):
        with pytest.raises(
            ValueError, match=r"low of shape \(3,\) does not broadcast to the spec shape \(4,\)"
        ):
            Bounded(torch.zeros(3), 1.0, shape=(4,))
        with pytest.raises(
            ValueError, match=r"low of shape \(3,\) and high of shape \(2,\) do not broadcast"
        ):
            Bounded(torch.zeros(3), torch.ones(2))

    def test_unknown_dtype(self):
        with pytest.raises(
            ValueError, match=r"unknown dtype 'float33': expected a torch.dtype or a name"
        ):
            Bounded(0, 1, shape=(1,), dtype="float33")
        with pytest.raises(ValueError, match=r"unknown dtype <class 'object'>"):
            Bounded(0, 1, shape=(1,), dtype=object)

    def test_bad_shape_values(self):
        with pytest.raises(
            ValueError,
            match=r"shape must have non-negative sizes \(or -1 for a dynamic dim\), got \(-2,\)",
        ):
            Bounded(0, 1, shape=(-2,))
        with pytest.raises(
            TypeError, match=r"shape must be an int or a sequence of ints, got 'ab'"
        ):
            Unbounded(shape="ab")

    def test_assert_is_in_names_values(self):
        with pytest.raises(
            ValueError,
            match=r"value has values outside \[low, high\] \(min -3.0, max 0.0\), so it is not in Bounded",
        ):
            Bounded(-1.0, 1.0, shape=(2,)).assert_is_in(torch.tensor([-3.0, 0.0]))


class TestUnbounded:
    def test_defaults(self):
        # as TorchRL: one value of shape (1,) by default (the shape of a reward)
        spec = Unbounded()
        assert (
            spec.shape == (1,)
            and spec.dtype == torch.float32
            and spec.device == torch.device("cpu")
        )
        assert spec.rand().shape == (1,) and Unbounded(shape=()).rand().shape == ()

    def test_default_dtype_follows_torch(self):
        # as TorchRL: without a dtype, the specs take torch's default float dtype
        old = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            assert Unbounded(shape=(2,)).dtype == torch.float64
            assert Bounded(-1, 1, shape=(2,)).dtype == torch.float64
            assert Bounded(-1, 1, shape=(2,)).rand().dtype == torch.float64
            assert Bounded(-1, 1, shape=(2,), dtype=torch.float32).dtype == torch.float32
        finally:
            torch.set_default_dtype(old)
        assert Unbounded(shape=(2,)).dtype == torch.float32

    @pytest.mark.parametrize("dtype", [torch.float64, torch.int64, torch.uint8, torch.bool])
    def test_dtypes(self, dtype):
        spec = Unbounded(shape=(50,), dtype=dtype)
        x = spec.rand()
        assert x.dtype == dtype and spec.is_in(x)
        assert spec.domain == ("continuous" if dtype.is_floating_point else "discrete")

    def test_space_limits(self):
        assert Unbounded(shape=(2,)).space.low.tolist() == [-math.inf, -math.inf]
        assert Unbounded(shape=(1,), dtype=torch.int8).high.tolist() == [127]

    def test_encode_reshapes_same_numel(self):
        spec = Unbounded(shape=(1,))
        assert spec.encode(3.0).tolist() == [3.0]
        assert spec.encode(np.array([[1.0], [2.0]])).shape == (2, 1)

    def test_encode_shape_mismatch(self):
        # a value that is neither the spec's shape (after a reshape) nor a batch of it
        spec = Unbounded(shape=(3,))
        for cls in (ValueError, RuntimeError):  # RuntimeError is what TorchRL raises
            with pytest.raises(
                cls, match=r"Shape mismatch: Unbounded.encode got a value of shape \(2,\)"
            ):
                spec.encode([1.0, 2.0])
        with pytest.raises(ValueError, match=r"expected \(3,\) \(or \(\*batch, 3\)"):
            spec.encode(np.zeros((4, 2)))
        assert spec.encode(np.zeros((4, 3))).shape == (4, 3)

    def test_project_casts(self):
        assert Unbounded(shape=(2,), dtype=torch.int64).project(
            torch.tensor([1.7, -2.0])
        ).tolist() == [1, -2]

    def test_index_errors(self):
        spec = Unbounded(shape=(2, 3))
        with pytest.raises(
            IndexError, match=r"cannot index Unbounded of shape \(2, 3\) with \(0, 0, 0\)"
        ):
            spec[0, 0, 0]
        with pytest.raises(IndexError, match=r"dim 5 is out of range for 2 dims"):
            spec.squeeze(5)

    def test_unbind(self):
        parts = Bounded(torch.tensor([0.0, 1.0]), 2.0).unbind(0)
        assert [p.low.item() for p in parts] == [0.0, 1.0] and parts[0].shape == ()
