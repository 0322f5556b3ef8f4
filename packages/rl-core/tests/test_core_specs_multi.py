import numpy as np
import pytest
import torch

from rl.core import BoxList, MultiCategorical, MultiOneHot


class TestMultiOneHot:
    def test_rand_one_hot_per_segment(self):
        spec = MultiOneHot([2, 3], shape=(100, 5))
        x = spec.rand()
        assert (x[:, :2].sum(-1) == 1).all() and (x[:, 2:].sum(-1) == 1).all()
        assert spec.space == BoxList.from_nvec([2, 3]) and spec.n == 5

    def test_is_in(self):
        spec = MultiOneHot([2, 3])
        assert spec.is_in(torch.tensor([False, True, False, False, True]))
        assert not spec.is_in(torch.tensor([True, True, False, False, True]))
        assert not spec.is_in(torch.tensor([False, True, False, False, False]))

    def test_encode_to_numpy_project(self):
        spec = MultiOneHot([2, 3], shape=(2, 5), dtype=torch.int64)
        x = spec.encode(np.array([[1, 0], [0, 2]]))
        assert x.tolist() == [[0, 1, 1, 0, 0], [1, 0, 0, 0, 1]]
        assert spec.to_numpy(x).tolist() == [[1, 0], [0, 2]]
        assert spec.project(torch.tensor([0.3, 0.1, 0.0, 2.0, 1.0])).tolist() == [1, 0, 0, 1, 0]

    def test_mask(self):
        spec = MultiOneHot([2, 2], mask=torch.tensor([True, False, False, True]))
        assert spec.rand().tolist() == [True, False, False, True]
        assert not spec.is_in(torch.tensor([False, True, False, True]))

    def test_errors(self):
        with pytest.raises(ValueError, match=r"shape must end with sum\(nvec\)=5, got \(4,\)"):
            MultiOneHot([2, 3], shape=(4,))
        with pytest.raises(
            ValueError, match=r"encode expects indices of shape \(\.\.\., 2\), got shape \(3,\)"
        ):
            MultiOneHot([2, 3]).encode([0, 0, 0])
        with pytest.raises(
            ValueError, match=r"encode expects indices below nvec=\[2, 3\], got \[2, 0\]"
        ):
            MultiOneHot([2, 3]).encode([2, 0])
        with pytest.raises(ValueError, match="expects a non-empty nvec"):
            MultiOneHot([])
        with pytest.raises(ValueError, match="expects n to be a non-negative int .* got -1"):
            MultiOneHot([2, -1])


class TestMultiCategorical:
    def test_per_entry_range(self):
        spec = MultiCategorical([2, 5], shape=(500, 2))
        x = spec.rand()
        assert set(x[:, 0].tolist()) == {0, 1} and set(x[:, 1].tolist()) == set(range(5))

    def test_is_in_project(self):
        spec = MultiCategorical([2, 3])
        assert spec.is_in(torch.tensor([1, 2])) and not spec.is_in(torch.tensor([1, 3]))
        assert spec.project(torch.tensor([7.2, -4.0])).tolist() == [1, 0]

    def test_mask(self):
        spec = MultiCategorical([2, 3])
        spec.update_mask(torch.tensor([False, True, True, False, True]))
        x = spec.rand((200,))
        assert set(x[:, 0].tolist()) == {1} and set(x[:, 1].tolist()) == {0, 2}
        assert spec.is_in(x) and not spec.is_in(torch.tensor([1, 1]))
        assert spec.project(torch.tensor([0, 1])).tolist() == [1, 0]
        with pytest.raises(ValueError, match=r"mask of shape \(3,\) does not broadcast to \(5,\)"):
            spec.update_mask(torch.ones(3, dtype=torch.bool))

    def test_2d_nvec(self):
        spec = MultiCategorical(torch.tensor([[2, 3], [4, 5]]))
        assert spec.shape == (2, 2) and spec.expand(3, 2, 2).rand().shape == (3, 2, 2)
        with pytest.raises(ValueError, match="masks need a one-dimensional nvec"):
            spec.update_mask(torch.ones(14, dtype=torch.bool))

    def test_shape_errors_and_eq(self):
        with pytest.raises(
            ValueError, match=r"shape must end with nvec's shape \(2,\), got \(3,\)"
        ):
            MultiCategorical([2, 3], shape=(3,))
        assert MultiCategorical([2, 3]) == MultiCategorical([2, 3])
        assert MultiCategorical([2, 3]) != MultiCategorical([2, 4])

    @pytest.mark.parametrize("nvec", [5, [5]])
    def test_remove_singleton(self, nvec):
        # TorchRL: a spec of shape (1,) draws values without that dim, and accepts and
        # projects values with or without it
        spec = MultiCategorical(nvec)
        assert spec.shape == (1,) and spec.zero().shape == (1,)
        assert spec.rand().shape == () and spec.rand((3,)).shape == (3,)
        assert spec.is_in(torch.tensor(4)) and spec.is_in(torch.tensor([4]))
        assert spec.is_in(torch.tensor([0, 3, 4])) and not spec.is_in(torch.tensor([0, 5]))
        assert spec.project(torch.tensor(9)).tolist() == 4
        assert spec.project(torch.tensor([7.0, 2.0, -1.0])).tolist() == [4, 2, 0]
        assert spec.project(torch.tensor([7])).tolist() == [4]
        assert spec.to_one_hot(torch.tensor([1, 4])).int().tolist() == [
            [0, 1, 0, 0, 0],
            [0, 0, 0, 0, 1],
        ]
        kept = MultiCategorical(nvec, remove_singleton=False)
        assert kept.rand().shape == (1,) and kept.rand((3,)).shape == (3, 1)
        assert not kept.is_in(torch.tensor(4))
        # only the (1,) shape: batched or longer specs keep every dim
        assert MultiCategorical([5], shape=(4, 1)).rand().shape == (4, 1)
        assert MultiCategorical([5, 2]).rand().shape == (2,)


def test_multi_conversions():
    spec = MultiCategorical([2, 3], shape=(4, 2))
    oh = spec.to_one_hot_spec()
    assert oh == MultiOneHot([2, 3], shape=(4, 5))
    assert oh.to_categorical_spec() == spec
    x = spec.rand()
    assert oh.is_in(spec.to_one_hot(x)) and torch.equal(oh.to_categorical(spec.to_one_hot(x)), x)
