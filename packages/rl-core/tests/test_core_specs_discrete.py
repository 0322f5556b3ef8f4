import numpy as np
import pytest
import torch

from rl.core import Binary, Categorical, CategoricalBox, MultiOneHot, OneHot


class TestCategorical:
    def test_values_cover_range(self):
        spec = Categorical(3, shape=(600,))
        x = spec.rand()
        assert set(x.tolist()) == {0, 1, 2} and x.dtype == torch.int64
        assert spec.space == CategoricalBox(3) and spec.n == 3 and spec.space.n == 3

    def test_is_in_and_project(self):
        spec = Categorical(4, shape=(3,))
        assert spec.is_in(torch.tensor([0, 3, 2]))
        assert not spec.is_in(torch.tensor([0, 4, 2]))
        assert not spec.is_in(torch.tensor([-1, 0, 0]))
        assert spec.project(torch.tensor([-3.0, 1.6, 9.0])).tolist() == [0, 2, 3]

    @pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
    def test_range_check_of_views_and_empty_values(self, dtype):
        """The range check reads strided views, expanded values, empty batches and
        inference tensors as the values they hold."""
        spec = Categorical(4, dtype=dtype)
        base = torch.tensor([[0, 9], [3, 9], [2, 9]], dtype=dtype)
        assert spec.is_in(base[:, 0])  # a strided column of in-range values
        assert not spec.is_in(base[:, 1])
        assert spec.is_in(torch.tensor(3, dtype=dtype).expand(5))
        assert not spec.is_in(torch.tensor(4, dtype=dtype).expand(5))
        assert spec.is_in(torch.empty(0, dtype=dtype))
        assert spec.is_in(torch.tensor([[1, 2], [3, 0]], dtype=dtype).t())
        with torch.inference_mode():
            assert not spec.is_in(torch.full((2,), 7, dtype=dtype))
        if dtype is not torch.uint8:
            assert not spec.is_in(torch.tensor([0, -1], dtype=dtype))

    @pytest.mark.parametrize(
        ("dtype", "n", "values", "expected"),
        [
            (torch.int64, 4, [0, 3, 2], True),
            (torch.int64, 4, [0, 4, 2], False),
            (torch.int64, 4, [-1, 0, 0], False),
            (torch.uint8, 256, [0, 17, 255], True),  # n past the dtype: no upper bound
            (torch.int8, 200, [0, 127], True),
            (torch.int8, 200, [0, -3], False),
        ],
    )
    def test_range_check_past_the_dtype(self, dtype, n, values, expected):
        """The range check compares in the values' dtype without wrapping ``n`` around:
        an ``n`` beyond the dtype's largest value bounds nothing above."""
        assert Categorical(n, dtype=dtype).is_in(torch.tensor(values, dtype=dtype)) is expected

    def test_mask_rand_is_in_project(self):
        spec = Categorical(4, shape=(2,))
        spec.update_mask(torch.tensor([[True, False, False, True], [False, True, False, False]]))
        x = spec.rand((500,))
        assert set(x[:, 0].tolist()) == {0, 3} and set(x[:, 1].tolist()) == {1}
        assert spec.is_in(x)
        assert not spec.is_in(torch.tensor([1, 1]))
        assert spec.project(torch.tensor([2, 3])).tolist() == [0, 1]
        spec.update_mask(None)
        assert spec.is_in(torch.tensor([1, 1]))

    def test_mask_broadcasts(self):
        spec = Categorical(3, shape=(4,), mask=torch.tensor([False, True, False]))
        assert spec.mask.shape == (4, 3)
        assert spec.rand().tolist() == [1, 1, 1, 1]
        assert spec[1:3].mask.shape == (2, 3)
        assert spec.expand(5, 4).rand().eq(1).all()

    def test_mask_errors(self):
        spec = Categorical(3, shape=(4,))
        with pytest.raises(
            ValueError, match=r"mask of shape \(2,\) does not broadcast to \(4, 3\)"
        ):
            spec.update_mask(torch.ones(2, dtype=torch.bool))
        spec.update_mask(torch.zeros(3, dtype=torch.bool))
        with pytest.raises(ValueError, match="mask allows none"):
            spec.rand()

    def test_enumerate(self):
        assert Categorical(3).enumerate().tolist() == [0, 1, 2]
        assert Categorical(3, mask=torch.tensor([True, False, True])).enumerate().tolist() == [0, 2]
        assert Categorical(2, shape=(2,)).enumerate().tolist() == [[0, 0], [1, 1]]

    def test_bool_dtype(self):
        spec = Categorical(2, shape=(1,), dtype="bool")
        assert spec.dtype == torch.bool and spec.is_in(torch.tensor([True]))

    def test_bad_n(self):
        with pytest.raises(
            ValueError, match=r"expects n to be a non-negative int \(the number of values\), got -3"
        ):
            Categorical(-3)
        with pytest.raises(ValueError, match="got 2.5"):
            Categorical(2.5)

    def test_empty_value_sets(self):
        # as TorchRL: n=0 builds (an empty set of values); drawing from it fails in torch
        assert Categorical(0).n == 0 and Categorical(0, shape=(5, 3))[1].shape == (3,)
        assert OneHot(0).shape == (0,) and Binary(0).shape == (0,)
        with pytest.raises(RuntimeError):
            Categorical(0).rand()

    def test_eq_depends_on_n_and_mask(self):
        assert Categorical(3) == Categorical(3)
        assert Categorical(3) != Categorical(4)
        assert Categorical(3) != Categorical(3, mask=torch.tensor([True, True, False]))
        assert Categorical(3) != OneHot(3)


class TestOneHot:
    def test_rand_is_one_hot(self):
        spec = OneHot(4, shape=(10, 4))
        x = spec.rand()
        assert x.dtype == torch.bool and (x.sum(-1) == 1).all()

    def test_shape_must_end_with_n(self):
        with pytest.raises(ValueError, match=r"OneHot shape must end with n=4, got \(3,\)"):
            OneHot(4, shape=(3,))

    def test_is_in(self):
        spec = OneHot(3)
        assert spec.is_in(torch.tensor([False, True, False]))
        assert not spec.is_in(torch.tensor([True, True, False]))
        assert not spec.is_in(torch.tensor([False, False, False]))
        long_spec = OneHot(3, dtype=torch.int64)
        assert not long_spec.is_in(torch.tensor([2, -1, 0]))

    def test_encode_indices_and_to_numpy(self):
        spec = OneHot(3, shape=(2, 3), dtype=torch.int64)
        x = spec.encode(np.array([2, 0]))
        assert x.tolist() == [[0, 0, 1], [1, 0, 0]]
        assert spec.to_numpy(x).tolist() == [2, 0]
        with pytest.raises(
            ValueError, match=r"encode expects indices in \[0, 3\), got values from 0 to 3"
        ):
            spec.encode([0, 3])

    def test_mask(self):
        spec = OneHot(3)
        spec.update_mask(torch.tensor([False, False, True]))
        assert spec.rand().tolist() == [False, False, True]
        assert not spec.is_in(torch.tensor([True, False, False]))
        assert spec.project(torch.tensor([5.0, 1.0, 0.0])).tolist() == [False, False, True]
        assert spec.enumerate().tolist() == [[False, False, True]]

    def test_index_keeps_feature_dim(self):
        spec = OneHot(3, shape=(4, 2, 3))
        assert spec[..., 0].shape == (4, 3)
        assert spec[:, 1].shape == (4, 3)
        with pytest.raises(IndexError, match="cannot index OneHot"):
            spec[0, 0, 0]

    def test_feature_dim_is_protected(self):
        spec = OneHot(3, shape=(2, 3))
        with pytest.raises(
            ValueError, match="cannot squeeze dim -1 of OneHot .* it is a feature dim"
        ):
            spec.squeeze(-1)
        with pytest.raises(
            ValueError, match=r"cannot unsqueeze OneHot of shape \(2, 3\) at dim -1"
        ):
            spec.unsqueeze(-1)
        assert spec.unsqueeze(1).shape == (2, 1, 3)
        with pytest.raises(ValueError, match=r"cannot expand OneHot of shape \(2, 3\) to \(2, 4\)"):
            spec.expand(2, 4)

    def test_enumerate(self):
        assert OneHot(2, dtype=torch.int64).enumerate().tolist() == [[1, 0], [0, 1]]


def test_one_hot_equality_includes_use_register():
    # as TorchRL: use_register is part of what makes two one-hot specs equal
    assert OneHot(5) == OneHot(5) and OneHot(5) != OneHot(5, use_register=True)
    assert MultiOneHot([2, 3]) != MultiOneHot([2, 3], use_register=True)


class TestBinary:
    def test_unsqueeze_after_bits(self):
        # as TorchRL: each bit becomes a vector of one bit
        spec = Binary(n=3, shape=(2, 3)).unsqueeze(-1)
        assert spec.shape == (2, 3, 1) and spec.n == 1
        assert spec.is_in(torch.ones(2, 3, 1, dtype=torch.int8))
        assert Binary(n=1, shape=(1,)).unsqueeze(0).shape == (1, 1)
        assert Binary(n=1, shape=(32, 2, 1)).unsqueeze(-1).expand(32, 2, 1, 1).shape == (
            32,
            2,
            1,
            1,
        )

    def test_defaults_and_shape(self):
        spec = Binary(3)
        assert spec.shape == (3,) and spec.dtype == torch.int8 and spec.space.n == 2
        assert Binary(shape=(2, 5)).n == 5

    def test_errors(self):
        with pytest.raises(ValueError, match=r"Binary shape must end with n=4, got \(3,\)"):
            Binary(4, shape=(3,))
        with pytest.raises(TypeError, match="needs n or shape"):
            Binary()

    def test_is_in_project(self):
        spec = Binary(3, dtype=torch.float32)
        assert spec.is_in(torch.tensor([0.0, 1.0, 1.0]))
        assert not spec.is_in(torch.tensor([0.0, 0.5, 1.0]))
        assert spec.project(torch.tensor([0.2, 0.7, 3.0])).tolist() == [0.0, 1.0, 1.0]

    def test_enumerate(self):
        assert Binary(2).enumerate().tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]]

    def test_one_bit_of_shape_empty(self):
        # as TorchRL: Binary(shape=()) holds one bit, its n is 0
        spec = Binary(shape=())
        assert spec.shape == () and spec.n == 0 and spec == spec.clone()
        assert spec.rand().shape == () and spec.rand((4,)).shape == (4,)
        assert spec.is_in(torch.tensor(1, dtype=torch.int8))
        assert not spec.is_in(torch.tensor(2, dtype=torch.int8))
        assert spec.cardinality() == 2 and spec.enumerate().tolist() == [0, 1]
        assert spec.expand(3).shape == (3,) and spec.unsqueeze(0).rand().shape == (1,)
        with pytest.raises(
            ValueError, match=r"Binary of shape \(\) holds one bit and takes n=0, got n=3"
        ):
            Binary(3, shape=())


class TestConversions:
    def test_categorical_one_hot_round_trip(self):
        spec = Categorical(4, shape=(3,), mask=torch.tensor([True, True, False, True]))
        oh = spec.to_one_hot_spec()
        assert oh == OneHot(4, shape=(3, 4), mask=torch.tensor([True, True, False, True]))
        assert oh.to_categorical_spec() == spec
        x = spec.rand()
        assert oh.is_in(spec.to_one_hot(x))
        assert torch.equal(oh.to_categorical(spec.to_one_hot(x)), x)

    def test_index(self):
        values = torch.arange(12.0).reshape(4, 3)
        picked = OneHot(3).index(torch.tensor([0, 0, 1]), values)
        assert picked.squeeze(-1).tolist() == [2.0, 5.0, 8.0, 11.0]
        with pytest.raises(
            ValueError,
            match=r"index expects a one-hot tensor of shape \(\.\.\., 3\), got a tensor of shape \(2,\)",
        ):
            OneHot(3).index(torch.tensor([0, 1]), values)


class TestCategoricalUndefinedN:
    """``Categorical(-1)``: a variable-size space, as TorchRL's (``set_provisional_n``)."""

    def test_undefined_until_a_provisional_n_is_set(self):
        spec = Categorical(-1, shape=(2,))
        assert spec._undefined_n and spec.space.n == -1 and "n=-1" in repr(spec)
        with pytest.raises(RuntimeError, match=r"Categorical\(n=-1\) has an undefined number"):
            spec.rand()
        with pytest.raises(RuntimeError, match="call spec.set_provisional_n"):
            _ = spec.n
        # any index of the right shape and dtype belongs to it
        assert spec.is_in(torch.tensor([7, 100])) and not spec.is_in(torch.tensor([7]))
        assert not spec.is_in(torch.tensor([1.0, 2.0]))
        assert spec.zero().tolist() == [0, 0]

    def test_provisional_n_drives_sampling(self):
        spec = Categorical(-1)
        spec.set_provisional_n(3)
        values = spec.rand((500,))
        assert spec.n == 3 and set(values.tolist()) == {0, 1, 2}
        assert spec.expand(4).n == 3 and spec.clone().n == 3
        spec.set_provisional_n(5)
        assert int(spec.rand((500,)).max()) == 4
        # equality compares the declared n, not the provisional one (as TorchRL)
        assert spec == Categorical(-1) and spec != Categorical(5)

    def test_errors(self):
        with pytest.raises(ValueError, match="expects n to be a non-negative int"):
            Categorical(-2)
        with pytest.raises(ValueError, match="expects n to be a non-negative int"):
            Categorical(-1).set_provisional_n(-1)
