import numpy as np
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

    def test_equality_includes_example_data(self):
        # as TorchRL: specs of different example data differ
        spec = NonTensor(shape=(3, 4), example_data="a")
        assert spec == NonTensor(shape=(3, 4), example_data="a") == spec.clone()
        assert spec != NonTensor(shape=(3, 4), example_data="b")
        arr = NonTensor(example_data=np.arange(3))
        assert arr == NonTensor(example_data=np.arange(3))
        assert arr != NonTensor(example_data=np.arange(4))
        assert NonTensor(example_data=torch.ones(2)) != NonTensor(example_data=torch.zeros(2))

    def test_in_composite(self):
        spec = Composite(
            text=NonTensor(shape=(4,), example_data="hi"), obs=Unbounded(shape=(4, 2)), shape=(4,)
        )
        td = spec.rand()
        assert td["text"] == "hi" and spec.is_in(td)
        assert spec[0]["text"] == NonTensor(shape=(), example_data="hi")

    def test_encode_to_numpy(self):
        spec = NonTensor(shape=())
        assert spec.to_numpy(spec.encode("abc")) == "abc"
        assert spec.clone() == spec and spec.expand(3).shape == (3,)

    def test_default_shape(self):
        # as TorchRL: shape (1,) unless given
        spec = NonTensor(example_data="x")
        assert spec.shape == (1,) and spec.zero().batch_size == (1,)
        assert spec.to_numpy(spec.encode("abc")) == ["abc"]


def members():
    a = Composite(obs=Unbounded(shape=(3,)), action=Categorical(2))
    b = Composite(
        obs=Unbounded(shape=(3,)), action=Categorical(2), extra=Bounded(0.0, 1.0, shape=(2,))
    )
    return a, b


class TestStackedComposite:
    def test_rand_zero_lazy_stack(self):
        a, b = members()
        spec = StackedComposite(a, b, dim=0)
        for method in ("rand", "zero", "one"):
            td = getattr(spec, method)((4,))
            assert isinstance(td, LazyStackedTensorDict)
            assert td.batch_size == (4, 2) and td.stack_dim == 1
            assert td[:, 1]["extra"].shape == (4, 2)
        assert spec.is_in(spec.rand()) and spec.is_in(spec.rand((3,)))

    def test_is_in_checks_each_member(self):
        a, b = members()
        spec = StackedComposite([a, b], dim=0)
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
        spec = StackedComposite(a, b, dim=0)
        assert spec[0] is a and spec[1] is b and spec[-1] is b
        assert spec[0:1] == StackedComposite(a, dim=0)
        assert spec.unbind(0) == (a, b) and len(spec) == 2

    def test_keys_are_common(self):
        spec = StackedComposite(*members(), dim=0)
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
        spec = StackedComposite(a, b, dim=0)
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
        spec = StackedComposite(*members(), dim=0)
        spec["reward"] = Unbounded(shape=(2, 1))
        assert spec[0]["reward"] == Unbounded(shape=(1,))
        with pytest.raises(
            ValueError, match=r"expected it to start with the StackedComposite's shape \(2,\)"
        ):
            spec["reward"] = Unbounded(shape=(1,))

    def test_clone_to_eq_repr(self):
        spec = StackedComposite(*members(), dim=0)
        assert spec.clone() == spec and spec.to("cpu").device == torch.device("cpu")
        assert repr(spec).startswith("StackedComposite(\n    0: Composite(")

    def test_encode_to_numpy(self):
        spec = StackedComposite(*members(), dim=0)
        td = spec.rand()
        # as TorchRL: one array per entry every member holds, stacked along the stack dim
        arrays = spec.to_numpy(td)
        assert set(arrays) == {"obs", "action"} and arrays["obs"].shape == (2, 3)
        np.testing.assert_array_equal(arrays["action"], td["action"].numpy())
        back = spec.encode(arrays)
        assert isinstance(back, LazyStackedTensorDict) and back.batch_size == (2,)
        assert (back["obs"] == td["obs"]).all() and "extra" not in back.tensordicts[1].keys()
        # one mapping per member carries the members' own entries too
        per_member = [spec[i].to_numpy(td[i]) for i in range(2)]
        back = spec.encode(per_member)
        assert (back.tensordicts[1]["extra"] == td.tensordicts[1]["extra"]).all()
        with pytest.raises(ValueError, match=r"expects 2 mappings \(one per member\), got 1"):
            spec.encode(per_member[:1])

    def test_to_numpy_heterogeneous_and_batched(self):
        a = Composite(obs=Unbounded(shape=(3,)), n=Composite(z=Bounded(0, 1, shape=(1,))))
        b = Composite(obs=Unbounded(shape=(4,)), n=Composite(z=Bounded(0, 1, shape=(1,))))
        spec = StackedComposite(a, b, dim=0)
        td = spec.rand()
        arrays = spec.to_numpy(td)
        assert [x.shape for x in arrays["obs"]] == [(3,), (4,)]
        assert arrays["n"]["z"].shape == (2, 1)
        back = spec.encode(arrays)
        assert back[1]["obs"].shape == (4,) and spec.is_in(back)
        batched = StackedComposite(
            Composite(x=Unbounded(shape=(5, 2)), shape=(5,)),
            Composite(x=Unbounded(shape=(5, 2)), shape=(5,)),
            dim=1,
        )
        td = batched.rand((3,))
        arrays = batched.to_numpy(td)
        assert arrays["x"].shape == (3, 5, 2, 2)
        assert (batched.encode(arrays)["x"] == td["x"]).all()

    def test_delitem_reaches_every_member_holding_the_key(self):
        # as TorchRL: a key held by some members is deleted from them
        a, b = members()
        spec = StackedComposite(a, b, dim=0)
        del spec["extra"]
        assert "extra" not in b.keys() and list(spec[1].keys()) == list(spec[0].keys())
        del spec["obs"]
        assert list(a.keys()) == ["action"] == list(b.keys())
        with pytest.raises(KeyError, match="key 'extra' is in no member of StackedComposite"):
            del spec["extra"]

    def test_setitem_needs_a_key(self):
        spec = StackedComposite(*members(), dim=0)
        with pytest.raises(RuntimeError, match="key should be a Sequence<NestedKey>"):
            spec[0] = Unbounded(shape=(2, 1))

    def test_is_in_missing_entry_is_a_key_error(self):
        # as TorchRL: a value missing an entry raises KeyError in is_in
        spec = StackedComposite(*members(), dim=0)
        td = spec.rand()
        del td.tensordicts[1]["extra"]
        with pytest.raises(KeyError, match=r"has a member 1 that has no entry 'extra'"):
            spec.is_in(td)
        with pytest.raises(ValueError, match=r"member 1 that has no entry 'extra', so it is not"):
            spec.assert_is_in(td)

    def test_constructor_errors(self):
        with pytest.raises(ValueError, match="expects at least one Composite, got none"):
            StackedComposite(dim=0)
        with pytest.raises(
            ValueError, match=r"share their shape: member 0 has \(\), member 1 has \(2,\)"
        ):
            StackedComposite(Composite(), Composite(shape=(2,)), dim=0)
        with pytest.raises(TypeError, match="member 0 is a Unbounded"):
            StackedComposite(Unbounded(), dim=0)

    def test_devices(self):
        # as TorchRL: members without a device do not count; different devices give None
        on_cpu = Composite(device="cpu")
        assert StackedComposite(Composite(), on_cpu, dim=0).device == torch.device("cpu")
        assert StackedComposite(Composite(), Composite(), dim=0).device is None
        mixed = StackedComposite(Composite(), on_cpu, Composite(device="meta"), dim=0)
        assert mixed.device is None and mixed.rand().batch_size == (3,)


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
