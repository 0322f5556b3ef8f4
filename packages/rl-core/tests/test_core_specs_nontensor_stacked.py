import pytest
import torch
from tensordict import LazyStackedTensorDict, NonTensorData, TensorDict

from rl.core import (
    Bounded,
    Categorical,
    Composite,
    NonTensor,
    OneHot,
    Stacked,
    StackedComposite,
    Unbounded,
    stack_specs,
)


class TestNonTensor:
    def test_values(self):
        spec = NonTensor(shape=(2,), example_data={"a": 1})
        z = spec.zero((3,))
        assert isinstance(z, NonTensorData) and z.batch_size == (3, 2) and z.data == {"a": 1}
        assert spec.dtype is None

    def test_is_in(self):
        spec = NonTensor(shape=(2,))
        assert spec.is_in(NonTensorData("x", batch_size=(2,)))
        assert not spec.is_in(NonTensorData("x", batch_size=(3,)))
        assert spec.is_in("text")
        with pytest.raises(
            ValueError, match=r"is a tensor of shape \(2,\), expected non-tensor data"
        ):
            spec.assert_is_in(torch.zeros(2))

    def test_in_composite(self):
        spec = Composite(
            text=NonTensor(shape=(4,), example_data="hi"), obs=Unbounded(shape=(4, 2)), shape=(4,)
        )
        td = spec.rand()
        assert td["text"] == "hi" and spec.is_in(td)
        assert spec[0]["text"] == NonTensor(example_data="hi")

    def test_encode_to_numpy(self):
        spec = NonTensor()
        assert spec.to_numpy(spec.encode("abc")) == "abc"
        assert spec.clone() == spec and spec.expand(3).shape == (3,)


def members():
    a = Composite(obs=Unbounded(shape=(3,)), action=Categorical(2))
    b = Composite(
        obs=Unbounded(shape=(3,)), action=Categorical(2), extra=Bounded(0.0, 1.0, shape=(2,))
    )
    return a, b


class TestStackedComposite:
    def test_rand_zero_lazy_stack(self):
        a, b = members()
        spec = StackedComposite(a, b)
        for method in ("rand", "zero", "one"):
            td = getattr(spec, method)((4,))
            assert isinstance(td, LazyStackedTensorDict)
            assert td.batch_size == (4, 2) and td.stack_dim == 1
            assert td[:, 1]["extra"].shape == (4, 2)
        assert spec.is_in(spec.rand()) and spec.is_in(spec.rand((3,)))

    def test_is_in_checks_each_member(self):
        a, b = members()
        spec = StackedComposite([a, b])
        td = spec.rand()
        td.tensordicts[1]["extra"] = torch.full((2,), 5.0)
        with pytest.raises(
            ValueError, match=r"has a member 1 that has an entry 'extra' that has values outside"
        ):
            spec.assert_is_in(td)
        projected = spec.project(td)
        assert projected.tensordicts[1]["extra"].tolist() == [1.0, 1.0]
        assert not spec.is_in(TensorDict({}, batch_size=[3]))

    def test_index_returns_member(self):
        a, b = members()
        spec = StackedComposite(a, b)
        assert spec[0] is a and spec[1] is b and spec[-1] is b
        assert spec[0:1] == StackedComposite(a)
        assert spec.unbind(0) == (a, b) and len(spec) == 2

    def test_keys_are_common(self):
        spec = StackedComposite(*members())
        assert spec.keys() == ["obs", "action"]
        assert "obs" in spec and "extra" not in spec
        assert spec["obs"] == Unbounded(shape=(2, 3))
        assert spec["action"].shape == (2,)
        with pytest.raises(
            KeyError, match=r"key 'extra' not found in member 0 of StackedComposite"
        ):
            spec["extra"]

    def test_heterogeneous_leaf(self):
        # as TorchRL: the entry is a lazy Stacked of the members' entries
        a = Composite(obs=Unbounded(shape=(3,)))
        b = Composite(obs=Unbounded(shape=(4,)))
        spec = StackedComposite(a, b)
        obs = spec["obs"]
        assert isinstance(obs, Stacked) and obs.shape == (2, -1)
        assert obs[0] == a["obs"] and obs[1] == b["obs"]
        td = spec.rand()
        assert td[0]["obs"].shape == (3,) and td[1]["obs"].shape == (4,) and spec.is_in(td)

    def test_nested_in_composite(self):
        spec = Composite(agents=StackedComposite(*members(), dim=0), shape=())
        assert ("agents", "obs") in spec.keys(True, True)
        assert ("agents", "extra") not in spec.keys(True, True)
        assert spec["agents", "obs"].shape == (2, 3)
        td = spec.rand()
        assert isinstance(td["agents"], LazyStackedTensorDict) and spec.is_in(td)

    def test_batched_members_and_dims(self):
        a = Composite(obs=Unbounded(shape=(5, 3)), shape=(5,))
        b = Composite(obs=Unbounded(shape=(5, 3)), x=Unbounded(shape=(5,)), shape=(5,))
        spec = StackedComposite(a, b, dim=1)
        assert spec.shape == (5, 2)
        assert spec.rand().batch_size == (5, 2)
        assert spec[:, 0] == a and spec[2, 1] == b[2]
        assert spec[1:3].shape == (2, 2)
        e = spec.expand(4, 5, 2)
        assert e.shape == (4, 5, 2) and e.is_in(e.rand())
        u = spec.unsqueeze(0)
        assert u.shape == (1, 5, 2) and u.squeeze(0) == spec
        with pytest.raises(ValueError, match=r"keep 2 at the stack dim"):
            spec.expand(5, 3)

    def test_setitem_distributes(self):
        spec = StackedComposite(*members())
        spec["reward"] = Unbounded(shape=(2, 1))
        assert spec[0]["reward"] == Unbounded(shape=(1,))
        with pytest.raises(
            ValueError, match=r"expected it to start with the StackedComposite's shape \(2,\)"
        ):
            spec["reward"] = Unbounded(shape=(1,))

    def test_clone_to_eq_repr(self):
        spec = StackedComposite(*members())
        assert spec.clone() == spec and spec.to("cpu").device == torch.device("cpu")
        assert repr(spec).startswith("StackedComposite(\n    0: Composite(")

    def test_encode_to_numpy(self):
        spec = StackedComposite(*members())
        td = spec.rand()
        arrays = spec.to_numpy(td)
        assert len(arrays) == 2 and set(arrays[1]) == {"obs", "action", "extra"}
        back = spec.encode(arrays)
        assert (back.tensordicts[1]["extra"] == td.tensordicts[1]["extra"]).all()
        with pytest.raises(ValueError, match=r"expects 2 mappings \(one per member\), got 1"):
            spec.encode(arrays[:1])

    def test_constructor_errors(self):
        with pytest.raises(ValueError, match="expects at least one Composite, got none"):
            StackedComposite()
        with pytest.raises(
            ValueError, match=r"member 0 has \(\) on None, member 1 has \(2,\) on None"
        ):
            StackedComposite(Composite(), Composite(shape=(2,)))
        with pytest.raises(TypeError, match="member 0 is a Unbounded"):
            StackedComposite(Unbounded())


class TestStackSpecs:
    def test_equal_specs(self):
        spec = torch.stack([OneHot(3), OneHot(3)], 0)
        assert spec == OneHot(3, shape=(2, 3))

    def test_different_bounds(self):
        spec = stack_specs([Bounded(0.0, 1.0, shape=(2,)), Bounded(-1.0, 1.0, shape=(2,))], dim=1)
        assert spec.shape == (2, 2) and spec.low.tolist() == [[0.0, -1.0], [0.0, -1.0]]

    def test_composites(self):
        a, b = members()
        assert isinstance(torch.stack([a, b]), StackedComposite)
        same = torch.stack([a, a.clone()])
        assert isinstance(same, Composite) and same.shape == (2,) and same["obs"].shape == (2, 3)

    def test_errors(self):
        with pytest.raises(ValueError, match="expects at least one spec"):
            stack_specs([])
        with pytest.raises(ValueError, match=r"must share kind, dtype, device and number of dims"):
            stack_specs([Unbounded(shape=(1,)), Categorical(2, shape=(1,))])
        with pytest.raises(ValueError, match=r"\(different number of dims\)"):
            torch.stack([Unbounded(shape=(1,)), Unbounded(shape=(1, 2))])
        with pytest.raises(ValueError, match="Composite specs stack only with Composite specs"):
            stack_specs([Composite(), Unbounded(shape=(1,))])
