"""Dynamic (``-1``) dims in spec shapes, as TorchRL 0.14 accepts them.

The expected values were read from TorchRL 0.14.1 running the same calls: a ``-1`` dim
accepts any size in ``is_in``, values made by the spec have size 1 there, a full slice
keeps it, a narrower slice raises, ``make_neg_dim`` turns a dim into ``-1`` in place.
"""

import pytest
import torch
from tensordict import TensorDict

from rl.core import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    NonTensor,
    OneHot,
    Unbounded,
)


def _leaves():
    return {
        "unbounded": (Unbounded(shape=(-1, 3)), torch.zeros(5, 3)),
        "bounded": (Bounded(low=0, high=1, shape=(-1, 3)), torch.full((5, 3), 0.5)),
        "onehot": (OneHot(n=4, shape=(-1, 4)), torch.eye(4, dtype=torch.bool)[[0, 1, 3]]),
        "categorical": (Categorical(n=4, shape=(-1,)), torch.tensor([0, 1, 3])),
        "multicategorical": (
            MultiCategorical(nvec=[2, 3], shape=(-1, 2)),
            torch.tensor([[0, 1], [1, 2]]),
        ),
        "multionehot": (
            MultiOneHot(nvec=[2, 3], shape=(-1, 5)),
            torch.tensor([[1, 0, 0, 0, 1]], dtype=torch.bool),
        ),
        "binary": (Binary(n=3, shape=(-1, 3)), torch.ones(4, 3, dtype=torch.int8)),
    }


class TestDynamicLeaves:
    @pytest.mark.parametrize("name", list(_leaves()))
    def test_shape_kept_values_have_size_one(self, name):
        spec, value = _leaves()[name]
        assert spec.shape[0] == -1
        concrete = torch.Size((1, *spec.shape[1:]))
        assert spec.rand().shape == concrete
        assert spec.zero().shape == concrete
        assert spec.rand((2,)).shape == (2, *concrete)
        assert spec.is_in(spec.rand())

    @pytest.mark.parametrize("name", list(_leaves()))
    def test_is_in_any_size(self, name):
        spec, value = _leaves()[name]
        assert spec.is_in(value)
        assert spec.is_in(value[:1])
        # the static dims (or, for Categorical, the values) are still checked
        bad = value[..., :1] if value.ndim > 1 else value + 4
        assert not spec.is_in(bad)

    def test_bounded_values_and_projection(self):
        spec = Bounded(low=0, high=1, shape=(-1, 3))
        assert spec.low.shape == (1, 3) and spec.high.shape == (1, 3)
        assert spec.is_in(torch.full((7, 3), 0.5))
        assert not spec.is_in(torch.full((7, 3), 2.0))
        torch.testing.assert_close(spec.project(torch.full((4, 3), 2.0)), torch.ones(4, 3))
        per_column = Bounded(low=torch.zeros(3), high=torch.tensor([1.0, 2.0, 3.0]), shape=(-1, 3))
        assert per_column.is_in(torch.tensor([[0.5, 1.5, 2.5], [1.0, 2.0, 3.0]]))
        assert not per_column.is_in(torch.tensor([[0.5, 2.5, 2.5]]))

    def test_masked_categorical(self):
        spec = Categorical(n=3, shape=(-1,), mask=torch.tensor([True, False, True]))
        assert spec.mask.shape == (1, 3)
        draws = spec.rand((200,))
        assert draws.shape == (200, 1) and set(draws.unique().tolist()) <= {0, 2}
        assert spec.is_in(torch.tensor([0, 2, 2, 0]))
        assert not spec.is_in(torch.tensor([0, 1]))

    def test_indexing(self):
        spec = Unbounded(shape=(-1, 3))
        assert spec[0].shape == (3,)
        assert spec[:].shape == (-1, 3)
        assert spec[..., 1:].shape == (-1, 2)
        assert spec[::1].shape == (-1, 3)
        assert spec[None, :].shape == (1, -1, 3)
        assert spec[0, :1].shape == (1,)  # a static dim can be sliced
        with pytest.raises(IndexError, match=r"a dynamic \(-1\) dim can only be taken whole"):
            spec[:2]

    # TorchRL 0.14.1 raises IndexError for each: the extent of the -1 dim is unknown, so a
    # slice giving one item at any size ([:1]) is no more defined than [:2]
    @pytest.mark.parametrize(
        "idx",
        [slice(None, 1), slice(0, 1), slice(0, None), slice(None, None, 2), (None, slice(None, 1))],
        ids=["[:1]", "[0:1]", "[0:]", "[::2]", "[None, :1]"],
    )
    @pytest.mark.parametrize("kind", ["unbounded", "onehot", "composite"])
    def test_partial_slice_of_a_dynamic_dim_raises(self, idx, kind):
        spec = {
            "unbounded": Unbounded(shape=(-1, 3)),
            "onehot": OneHot(n=4, shape=(-1, 4)),
            "composite": Composite(a=Unbounded(shape=(-1, 3)), shape=(-1,)),
        }[kind]
        name = type(spec).__name__
        with pytest.raises(
            IndexError,
            match=rf"cannot index {name} of shape \(-1, ?\d*\) with .*a dynamic \(-1\) dim "
            r"can only be taken whole \(:\) or at an integer, its extent is unknown \(got slice",
        ):
            spec[idx]

    def test_shape_ops(self):
        spec = Unbounded(shape=(-1, 3))
        assert spec.expand(2, -1, 3).shape == (2, -1, 3)
        assert spec.expand(2, -1, 3).rand().shape == (2, 1, 3)
        assert spec.unsqueeze(0).shape == (1, -1, 3)
        assert Unbounded(shape=(-1, 1)).squeeze().shape == (-1,)
        assert [s.shape for s in spec.unbind(1)] == [torch.Size([-1])] * 3
        assert spec.clone() == spec
        assert spec == Unbounded(shape=(-1, 3)) and spec != Unbounded(shape=(1, 3))
        assert spec.encode(torch.zeros(2, 3)).shape == (2, 3)

    def test_shape_errors(self):
        spec = Unbounded(shape=(-1, 3))
        with pytest.raises(ValueError, match=r"cannot expand Unbounded of shape \(-1, 3\) to"):
            spec.expand(5, 3)
        with pytest.raises(ValueError, match=r"cannot unbind dim 0 .* it is dynamic \(-1\)"):
            spec.unbind(0)
        with pytest.raises(ValueError, match=r"cannot reshape Unbounded of shape \(-1, 3\)"):
            spec.reshape(3, -1)
        with pytest.raises(ValueError, match=r"non-negative sizes \(or -1 for a dynamic dim\)"):
            Unbounded(shape=(-2, 3))
        with pytest.raises(ValueError, match=r"OneHot shape must end with n=4, got \(-1,\)"):
            OneHot(n=4, shape=(-1,))

    def test_nontensor(self):
        spec = NonTensor(shape=(-1,), example_data="a")
        assert spec.shape == (-1,)
        assert spec.zero().batch_size == (1,)


class TestMakeNegDim:
    def test_leaf(self):
        spec = Bounded(low=torch.zeros(2, 3), high=torch.ones(2, 3))
        out = spec.make_neg_dim(0)
        assert out is spec
        assert spec.shape == (-1, 3)
        assert spec.rand().shape == (1, 3)
        assert spec.is_in(torch.full((6, 3), 0.5))
        with pytest.raises(IndexError, match=r"its extent is unknown \(got slice\(None, 1, None\)"):
            spec[:1]  # size 2 before: [:1] no longer takes one known item
        neg_last = Unbounded(shape=(2, 3))
        neg_last.make_neg_dim(-1)
        assert neg_last.shape == (2, -1)

    def test_feature_dim_refused(self):
        with pytest.raises(ValueError, match=r"cannot make dim -1 of OneHot .* feature dim"):
            OneHot(n=4, shape=(2, 4)).make_neg_dim(-1)
        with pytest.raises(IndexError, match=r"make_neg_dim of Unbounded: dim 2 is out of range"):
            Unbounded(shape=(2, 3)).make_neg_dim(2)

    def test_composite(self):
        spec = Composite(
            obs=Unbounded(shape=(4, 3)),
            sub=Composite(x=Unbounded(shape=(4,)), shape=(4,)),
            shape=(4,),
        )
        spec.make_neg_dim(0)
        assert spec.shape == (-1,)
        assert spec["obs"].shape == (-1, 3)
        assert spec["sub", "x"].shape == (-1,)
        td = spec.zero()
        assert td.batch_size == (1,) and td["obs"].shape == (1, 3)
        with pytest.raises(IndexError, match=r"cannot index Composite of shape \(-1,\) with"):
            spec[0:1]
        assert spec.is_in(
            TensorDict(obs=torch.zeros(5, 3), sub={"x": torch.zeros(5)}, batch_size=[5])
        )

    def test_stacked(self):
        stacked = torch.stack([Unbounded(shape=(2, 3)), Unbounded(shape=(2, 4))], 0)
        stacked.make_neg_dim(1)
        assert stacked.shape == (2, -1, -1)
        assert [s.shape for s in stacked.unbind(0)] == [torch.Size([-1, 3]), torch.Size([-1, 4])]
        with pytest.raises(ValueError, match="it is the stack dim"):
            stacked.make_neg_dim(0)


class TestDynamicComposite:
    def test_values_and_is_in(self):
        spec = Composite(a=Unbounded(shape=(-1, 3)), shape=(-1,))
        assert spec.rand().batch_size == (1,)
        assert spec.zero()["a"].shape == (1, 3)
        assert spec.is_in(TensorDict(a=torch.zeros(4, 3), batch_size=[4]))
        assert not spec.is_in(TensorDict(a=torch.zeros(4, 2), batch_size=[4]))

    def test_entries_must_be_dynamic_too(self):
        spec = Composite(shape=(-1,))
        spec["b"] = Unbounded(shape=(-1,))
        assert spec["b"].shape == (-1,)
        with pytest.raises(ValueError, match=r"'c' has shape \(3,\), expected it to start with"):
            spec["c"] = Unbounded(shape=(3,))

    def test_shape_ops(self):
        spec = Composite(a=Unbounded(shape=(-1, 3)), shape=(-1,))
        big = spec.expand(4, -1)
        assert big.shape == (4, -1) and big["a"].shape == (4, -1, 3)
        assert big.zero().batch_size == (4, 1)
        assert spec[:].shape == (-1,)
        assert spec[0]["a"].shape == (3,)
        with pytest.raises(ValueError, match=r"cannot unbind dim 0 of Composite of shape \(-1,\)"):
            spec.unbind(0)

    def test_encode_takes_the_value_size(self):
        spec = Composite(a=Unbounded(shape=(-1, 3)), shape=(-1,))
        td = spec.encode({"a": torch.zeros(5, 3).numpy()})
        assert td.batch_size == (5,) and td["a"].shape == (5, 3)
