import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rl.core import Bounded, Categorical, Composite, NonTensor, OneHot, Unbounded


def make(batch=()):
    spec = Composite(
        observation=Unbounded(shape=(*batch, 3)),
        action=Bounded(-1.0, 1.0, shape=(*batch, 2)),
        shape=batch,
    )
    spec["next", "reward"] = Unbounded(shape=(*batch, 1))
    spec["next", "done"] = Categorical(2, shape=(*batch, 1), dtype=torch.bool)
    return spec


class TestCompositeMapping:
    def test_tuple_keys_and_intermediates(self):
        spec = make()
        assert isinstance(spec["next"], Composite)
        assert spec["next", "reward"] == Unbounded(shape=(1,))
        assert spec[("next", ("reward",))] is spec["next"]["reward"]

    def test_keys(self):
        spec = make()
        assert list(spec.keys()) == ["observation", "action", "next"]
        assert list(spec.keys(True)) == [
            "observation",
            "action",
            "next",
            ("next", "reward"),
            ("next", "done"),
        ]
        leaves = spec.keys(include_nested=True, leaves_only=True)
        assert list(leaves) == ["observation", "action", ("next", "reward"), ("next", "done")]
        assert ("next", "reward") in leaves and "next" not in leaves
        assert ("next", "reward") not in spec.keys() and "next" in spec.keys()
        assert len(leaves) == 4
        assert ("next", "reward") in spec and ("next", "nope") not in spec

    def test_items_values(self):
        spec = make()
        items = dict(spec.items(True, True))
        assert items["action"] == Bounded(-1.0, 1.0, shape=(2,))
        assert len(spec.values()) == 3 and len(spec) == 3 and list(spec) == list(spec.keys())

    def test_nested_dict_input(self):
        spec = Composite(
            {"a": Unbounded(shape=(2, 1)), "b": {"c": OneHot(3, shape=(2, 3))}}, shape=(2,)
        )
        assert isinstance(spec["b"], Composite) and spec["b"].shape == (2,)
        assert spec.rand()["b", "c"].shape == (2, 3)

    def test_del_pop_get_update(self):
        spec = make()
        del spec["next", "done"]
        assert ("next", "done") not in spec
        assert spec.pop("observation") == Unbounded(shape=(3,))
        assert spec.pop("observation", None) is None
        assert spec.get("nope", 3) == 3
        spec.update({"observation": Unbounded(shape=(4,))})
        spec.update(Composite(next=Composite(done=Unbounded(shape=(1,)))))
        assert spec["observation"].shape == (4,)
        assert set(spec["next"].keys()) == {"reward", "done"}

    def test_select_exclude_empty(self):
        spec = make()
        assert list(spec.select("action", ("next", "reward")).keys(True, True)) == [
            "action",
            ("next", "reward"),
        ]
        assert "action" not in spec.exclude("action") and "action" in spec
        assert spec.empty().is_empty() and spec.empty().shape == spec.shape

    def test_none_entries(self):
        spec = Composite(a=Unbounded(shape=(1,)), b=None)
        assert "b" in spec and spec["b"] is None
        assert list(spec.zero().keys()) == ["a"]


class TestCompositeValues:
    @pytest.mark.parametrize("batch", [(), (4,), (2, 3)])
    def test_rand_zero_one(self, batch):
        spec = make(batch)
        for method in ("rand", "zero", "one"):
            td = getattr(spec, method)((5,))
            assert isinstance(td, TensorDict)
            assert td.batch_size == (5, *batch)
            assert td["next", "reward"].shape == (5, *batch, 1)
        assert spec.is_in(spec.rand())
        assert not spec.zero().any() and spec.one()["observation"].eq(1).all()

    def test_is_in(self):
        spec = make()
        td = spec.rand()
        td["action"] = torch.tensor([3.0, 0.0])
        assert not spec.is_in(td)
        with pytest.raises(
            ValueError, match=r"has an entry 'action' that has values outside \[low, high\]"
        ):
            spec.assert_is_in(td)
        td["action"] = torch.zeros(2)
        del td["next", "reward"]
        with pytest.raises(ValueError, match="entry 'next' that has no entry 'reward'"):
            spec.assert_is_in(td)
        assert not spec.is_in(torch.zeros(3))

    def test_is_in_missing_entry_raises_key_error(self):
        # as TorchRL: is_in raises KeyError for a value that lacks an entry of the spec
        spec = make()
        td = spec.rand()
        del td["next", "reward"]
        with pytest.raises(KeyError, match=r"value has an entry 'next' that has no entry 'reward'"):
            spec.is_in(td)
        with pytest.raises(KeyError, match="has no entry 'action'"):
            spec.assert_is_in(spec.rand().exclude("action"))
        # an empty nested Composite asks for no entry; a None entry neither
        spec = Composite(a=Unbounded(shape=(1,)), empty=Composite(), free=None)
        assert spec.is_in(TensorDict(a=torch.zeros(1)))

    def test_project(self):
        spec = make()
        td = spec.rand()
        td["action"] = torch.tensor([3.0, -3.0])
        out = spec.project(td)
        assert out["action"].tolist() == [1.0, -1.0] and spec.is_in(out)

    def test_encode_to_numpy(self):
        spec = make()
        td = spec.rand()
        arrays = spec.to_numpy(td)
        assert isinstance(arrays["next"]["reward"], np.ndarray)
        back = spec.encode(arrays)
        assert (back == td).all()
        batched = make((2,))
        assert batched.encode({"observation": np.zeros((2, 3))}).batch_size == (2,)
        assert batched.encode({"observation": np.zeros((5, 2, 3))}).batch_size == (5, 2)
        with pytest.raises(KeyError, match="key 'nope' not found in Composite"):
            spec.encode({"nope": 1.0})


class TestCompositeShapes:
    def test_index(self):
        spec = make((4, 2))
        assert spec[0] == make((2,))
        assert spec[1:3].shape == (2, 2) and spec[1:3]["next", "reward"].shape == (2, 2, 1)
        assert spec[..., 0] == make((4,))
        with pytest.raises(IndexError, match=r"cannot index Composite of shape \(4, 2\)"):
            spec[0, 0, 0]

    def test_expand_squeeze_unsqueeze(self):
        spec = make((1,))
        e = spec.expand(3, 4)
        assert e.shape == (3, 4) and e["observation"].shape == (3, 4, 3)
        assert e.is_in(e.rand())
        assert spec.squeeze() == make() and spec.squeeze(0) == make()
        assert make().unsqueeze(0) == spec
        assert make((2,)).unsqueeze(-1)["action"].shape == (2, 1, 2)
        with pytest.raises(ValueError, match=r"cannot expand Composite of shape \(1,\) to \(\)"):
            spec.expand(())

    def test_unbind(self):
        parts = make((3,)).unbind(0)
        assert len(parts) == 3 and all(p == make() for p in parts)

    def test_shape_setter(self):
        spec = make((4,))
        spec.shape = ()
        assert spec.shape == () and spec.zero().batch_size == ()
        with pytest.raises(
            ValueError,
            match=r"cannot set Composite shape to \(5,\): entry 'observation' has shape \(4, 3\)",
        ):
            spec.shape = (5,)

    def test_index_backward_slice(self):
        spec = Composite(a=Bounded(torch.arange(5.0), 10.0), b=OneHot(7, shape=(5, 7)), shape=(5,))
        rev = spec[10:1:-1]
        assert rev.shape == (3,) and rev["b"].shape == (3, 7)
        assert rev["a"].low.tolist() == [4.0, 3.0, 2.0]

    def test_entry_with_fewer_batch_dims_takes_ours(self):
        # as TorchRL: a Composite (or NonTensor) entry whose shape is a prefix of the batch
        # shape is set as a copy with the Composite's batch dims
        inner = Composite(obs=Unbounded(shape=(2, 3, 4)), shape=(2,))
        spec = Composite(shape=(2, 3))
        spec["inner"] = inner
        assert spec["inner"].shape == (2, 3) and inner.shape == (2,)
        assert spec["inner", "obs"].shape == (2, 3, 4)
        nested = Composite(a=Composite(b=Composite(c=Unbounded(shape=(2, 3)))), shape=(2, 3))
        assert nested["a"].shape == (2, 3) and nested["a", "b"].shape == (2, 3)
        spec["text"] = NonTensor(shape=(), example_data="hi")
        assert spec["text"].shape == (2, 3)
        with pytest.raises(ValueError, match=r"key 'leaf' has shape \(2,\), expected it to start"):
            spec["leaf"] = Unbounded(shape=(2,))
        with pytest.raises(ValueError, match=r"cannot set Composite shape to \(2, 3\): entry"):
            spec["bad"] = Composite(x=Unbounded(shape=(2, 5)), shape=(2,))

    def test_clone_to_eq(self):
        spec = make((2,))
        c = spec.clone()
        assert c == spec and c["next"] is not spec["next"]
        c["next", "reward"] = Unbounded(shape=(2, 2))
        assert c != spec
        on_cpu = spec.to("cpu")
        assert on_cpu.device == torch.device("cpu") and on_cpu.to("cpu") is on_cpu
        assert on_cpu["next", "reward"] == spec["next", "reward"]
        assert spec.to(torch.float64)["observation"].dtype == torch.float64

    def test_device_moves_entries(self):
        spec = Composite(a=Unbounded(shape=(1,)), device="cpu")
        assert spec.device == torch.device("cpu") and spec["a"].device == torch.device("cpu")
        assert spec.zero().device == torch.device("cpu")
        spec["b", "c"] = Unbounded(shape=(1,))
        assert spec["b"].device == torch.device("cpu")

    def test_dtype(self):
        assert Composite(a=Unbounded(shape=(1,))).dtype == torch.float32
        assert make().dtype is None


class TestCompositeErrors:
    def test_missing_key(self):
        spec = make()
        with pytest.raises(
            KeyError,
            match=r"key \('next', 'obs'\) not found in Composite; available keys: \['observation'",
        ):
            spec["next", "obs"]
        with pytest.raises(KeyError, match="key 'nope' not found"):
            del spec["nope"]
        with pytest.raises(KeyError, match="key 'nope' not found"):
            spec.pop("nope")

    def test_shape_must_start_with_batch(self):
        spec = Composite(shape=(4,))
        with pytest.raises(
            ValueError,
            match=r"spec for key 'obs' has shape \(3,\), expected it to start with the Composite's batch shape \(4,\)",
        ):
            spec["obs"] = Unbounded(shape=(3,))
        with pytest.raises(ValueError, match=r"key 'obs' has shape \(2, 3\)"):
            Composite(obs=Unbounded(shape=(2, 3)), shape=(4,))

    def test_set_through_a_leaf(self):
        spec = make()
        with pytest.raises(
            KeyError,
            match=r"cannot set \('action', 'x'\): \('action',\) holds a Bounded, expected a Composite",
        ):
            spec["action", "x"] = Unbounded()

    def test_bad_values(self):
        spec = Composite()
        with pytest.raises(
            TypeError, match="Composite entry 'a' must be a spec \\(or None\\), got Tensor"
        ):
            spec["a"] = torch.zeros(1)
        with pytest.raises(
            TypeError, match="Composite keys are strings or tuples of strings, got 3"
        ):
            spec[3] = Unbounded()
        with pytest.raises(TypeError, match="got both shape and its alias batch_size"):
            Composite(shape=(1,), batch_size=(1,))

    def test_repr(self):
        text = repr(make())
        assert text.startswith("Composite(\n    observation: Unbounded(")
        assert "    next: Composite(\n        reward: Unbounded(" in text
        assert text.endswith("shape=torch.Size([]), device=None)")
