"""The Choice spec (TorchRL 0.14's ``torchrl.data.Choice``)."""

from __future__ import annotations

import pickle

import pytest
import torch
from tensordict import NonTensorData, NonTensorStack

from rl.core import Bounded, Categorical, Choice, Composite, OneHot, Unbounded


def two_boxes():
    return Choice([Bounded(0.0, 1.0, shape=(1,)), Bounded(10.0, 11.0, shape=(1,))])


class TestChoiceOfSpecs:
    def test_attributes(self):
        spec = two_boxes()
        assert spec.num_choices == 2
        assert spec.shape == (1,) and spec.dtype == torch.float32
        assert spec.device == torch.device("cpu") and spec.domain == "continuous"

    def test_rand_draws_from_every_choice(self):
        torch.manual_seed(0)
        spec = two_boxes()
        values = torch.stack([spec.rand() for _ in range(200)])
        low = (values >= 0) & (values <= 1)
        high = (values >= 10) & (values <= 11)
        assert bool((low | high).all())
        assert 40 < int(low.sum()) < 160  # both picked, about evenly
        batch = spec.rand((5,))
        assert batch.shape == (5, 1)
        # one choice for the whole batch, as TorchRL draws it
        assert bool((batch < 2).all()) or bool((batch > 9).all())

    def test_zero_one_is_in(self):
        spec = two_boxes()
        assert spec.zero().tolist() == [0.0] and spec.zero((2,)).shape == (2, 1)
        assert spec.one().tolist() == [1.0]  # the second choice's one()
        assert spec.is_in(torch.tensor([0.5])) and spec.is_in(torch.tensor([10.5]))
        assert not spec.is_in(torch.tensor([5.0]))
        assert spec.contains(torch.tensor([[0.5], [10.5]])) is False  # one batch, two choices
        with pytest.raises(ValueError, match=r"is in none of the 2 choices"):
            spec.assert_is_in(torch.tensor([5.0]))

    def test_project_encode_cardinality_enumerate(self):
        spec = two_boxes()
        v = torch.tensor([10.2])
        assert spec.project(v) is v
        with pytest.raises(NotImplementedError, match="Choice cannot project a value outside"):
            spec.project(torch.tensor([5.0]))
        assert spec.encode([0.25]).tolist() == [0.25]
        cats = Choice([Categorical(2), Categorical(3)])
        assert cats.cardinality() == 5
        assert [int(x) for x in cats.enumerate()] == [0, 1, 0, 1, 2]
        assert cats.is_in(torch.tensor(2)) and not cats.is_in(torch.tensor(3))
        assert cats.project(torch.tensor(1)).item() == 1

    def test_shape_operations(self):
        spec = two_boxes()
        e = spec.expand(3, 1)
        assert isinstance(e, Choice) and e.shape == (3, 1)
        assert e.rand().shape == (3, 1) and e.is_in(torch.full((3, 1), 10.5))
        assert e[0].shape == (1,) and e.unsqueeze(0).shape == (1, 3, 1)
        assert e.unsqueeze(0).squeeze(0).shape == (3, 1)
        assert [c.shape for c in e.unbind(0)] == [(1,)] * 3
        assert e.reshape(3).shape == (3,)
        assert spec.to(torch.float64).dtype == torch.float64
        assert spec.clone() == spec and spec.clone() is not spec
        assert spec != Choice([Bounded(0.0, 1.0, shape=(1,)), Bounded(10.0, 12.0, shape=(1,))])
        assert pickle.loads(pickle.dumps(spec)) == spec
        assert torch.stack([spec, spec]).shape == (2, 1)
        with pytest.raises(ValueError, match="cannot stack Choice specs that differ"):
            torch.stack([spec, Choice([Bounded(0.0, 2.0, shape=(1,))] * 2)])

    def test_choices_are_copies(self):
        box = Bounded(0.0, 1.0, shape=(1,))
        spec = Choice([box, Bounded(10.0, 11.0, shape=(1,))])
        box.high.fill_(100.0)
        assert spec.choices[0].high.item() == 1.0

    def test_composite_choices_inside_a_composite(self):
        a = Composite(x=Bounded(0.0, 1.0, shape=(2,)))
        b = Composite(x=Bounded(5.0, 6.0, shape=(2,)))
        outer = Composite(obs=Choice([a, b]), act=OneHot(2))
        td = outer.rand()
        assert td["obs", "x"].shape == (2,) and outer.is_in(td)
        assert outer.zero()["obs", "x"].tolist() == [0.0, 0.0]


class TestChoiceOfData:
    def test_rand_returns_one_of_the_values(self):
        torch.manual_seed(0)
        spec = Choice([NonTensorData(s) for s in ["a", "b", "c", "d"]])
        drawn = {spec.rand().data for _ in range(100)}
        assert drawn == {"a", "b", "c", "d"}
        assert spec.zero().data == "a" and spec.one().data == "b"
        assert spec.cardinality() == 4 and len(spec.enumerate()) == 4
        assert spec.dtype is None and spec.shape == ()

    def test_is_in_and_encode(self):
        spec = Choice([NonTensorData(s) for s in ["a", "b"]])
        assert spec.is_in(NonTensorData("b")) and spec.is_in("a")
        assert not spec.is_in(NonTensorData("z"))
        with pytest.raises(ValueError, match=r"is 'z', none of the 2 choices"):
            spec.assert_is_in("z")
        assert spec.encode("b").data == "b"
        assert spec.to_numpy(NonTensorData("a")) == "a"
        assert spec == Choice([NonTensorData("a"), NonTensorData("b")])
        assert spec != Choice([NonTensorData("a"), NonTensorData("c")])

    def test_stacks(self):
        spec = Choice([NonTensorStack(NonTensorData("a"), NonTensorData("b"))] * 2)
        assert spec.shape == (2,) and spec.rand().tolist() == ["a", "b"]

    def test_in_a_composite(self):
        spec = Composite(text=Choice([NonTensorData("x"), NonTensorData("y")]))
        td = spec.rand()
        assert td["text"] in ("x", "y") and spec.is_in(td)


class TestChoiceErrors:
    def test_bad_choices(self):
        with pytest.raises(TypeError, match="Choice expects a list of choices, got tuple"):
            Choice((Categorical(2), Categorical(3)))
        with pytest.raises(TypeError, match="non-empty list"):
            Choice([])
        with pytest.raises(
            TypeError, match="must be a TensorSpec, NonTensorData or NonTensorStack"
        ):
            Choice(["a", "b"])
        with pytest.raises(TypeError, match="choice 0 is a Categorical, choice 1 is a OneHot"):
            Choice([Categorical(2), OneHot(2)])
        with pytest.raises(ValueError, match=r"same shape: choice 0 has torch.Size\(\[1\]\)"):
            Choice([Unbounded(shape=(1,)), Unbounded(shape=(2,))])
        with pytest.raises(ValueError, match="same dtype: choice 0 has torch.float32"):
            Choice([Unbounded(shape=(1,)), Unbounded(shape=(1,), dtype=torch.float64)])
