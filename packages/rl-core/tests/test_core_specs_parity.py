"""TorchRL 0.14 spec features: entries named like attributes, Composite shape setting,
locking, ``project``/``type_check``/``clear_device_``/``memoize_encode`` and the smaller
methods (``cardinality``, ``enumerate``, ``reshape``, ``index``, ...).

Expected values were checked against TorchRL 0.14.1 where TorchRL defines them; where
this library deliberately differs (see each test), the test says so.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from tensordict import TensorDict, tensorclass

from rl.core import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    NonTensor,
    OneHot,
    StackedComposite,
    Unbounded,
)

RESERVED = ["shape", "dtype", "device"]


def _reserved_spec(shape=(2,)):
    spec = Composite(shape=shape)
    spec["shape"] = Unbounded(shape=(*shape, 3))
    spec["dtype"] = Categorical(4, shape=(*shape, 1))
    spec["device"] = Bounded(-1.0, 1.0, shape=(*shape, 2))
    return spec


class TestReservedEntryNames:
    def test_set_get_and_attributes_stay_apart(self):
        spec = _reserved_spec()
        assert spec.shape == torch.Size([2])
        assert spec.device is None
        assert spec["shape"].shape == (2, 3)
        assert isinstance(spec["dtype"], Categorical)
        assert spec.get("device").high.max().item() == 1.0
        assert list(spec.keys()) == RESERVED
        assert "shape" in spec and ("shape",) in spec.keys(True)

    def test_constructor_mapping_and_keyword(self):
        spec = Composite({"shape": Unbounded(shape=(1,)), "device": Unbounded(shape=(1,))})
        assert spec.shape == () and spec["shape"].shape == (1,)
        assert Composite(dtype=Unbounded(shape=(1,)))["dtype"].shape == (1,)
        assert Composite({"next": {"shape": Unbounded(())}})["next", "shape"].shape == ()

    def test_values_keep_the_entries(self):
        spec = _reserved_spec()
        for td in (spec.rand(), spec.zero(), spec.one(), spec.rand((5,))):
            assert set(td.keys()) == set(RESERVED)
            assert spec.is_in(td)
        td = spec.rand()
        assert td["shape"].shape == (2, 3) and td["dtype"].dtype == torch.int64
        bad = td.clone()
        bad["dtype"] = torch.full((2, 1), 9)
        assert not spec.is_in(bad)
        enc = spec.encode({"shape": np.zeros((2, 3)), "dtype": [[1], [2]], "device": [[0, 0]] * 2})
        assert enc["dtype"].tolist() == [[1], [2]] and enc["shape"].dtype == torch.float32

    def test_copies_and_shape_ops_keep_the_entries(self):
        spec = _reserved_spec()
        assert spec.clone() == spec and list(spec.clone().keys()) == RESERVED
        assert spec.expand(4, 2)["shape"].shape == (4, 2, 3)
        assert spec[0]["device"].shape == (2,)
        assert spec.unsqueeze(0)["dtype"].shape == (1, 2, 1)
        assert pickle.loads(pickle.dumps(spec)) == spec
        stacked = torch.stack([spec, spec], 0)
        assert stacked["shape"].shape == (2, 2, 3)
        hetero = spec.clone()
        hetero["extra"] = Unbounded(shape=(2,))
        het = torch.stack([spec, hetero], 0)
        assert isinstance(het, StackedComposite)
        assert het["dtype"].shape == (2, 2, 1) and het.is_in(het.rand())
        assert spec.to("cpu")["device"].device == torch.device("cpu")
        assert list(spec.select("shape").keys()) == ["shape"]
        assert list(spec.exclude("shape").keys()) == ["dtype", "device"]

    def test_delete_and_pop(self):
        spec = _reserved_spec()
        del spec["shape"]
        assert spec.pop("device").shape == (2, 2)
        assert list(spec.keys()) == ["dtype"] and spec.shape == (2,)


class TestCompositeShapeSetter:
    def spec(self):
        return Composite(
            a=Unbounded(shape=(4, 3)),
            b=Composite(c=Unbounded(shape=(4, 5, 2)), shape=(4, 5)),
            shape=(4,),
        )

    def test_shrinking_keeps_nested_shapes(self):
        spec = self.spec()
        spec.shape = ()
        assert spec.shape == () and spec["b"].shape == (4, 5)
        assert spec.rand().batch_size == ()

    def test_nested_composite_takes_the_new_shape(self):
        # TorchRL 0.14: a nested Composite whose shape does not start with the new one is
        # given the new shape (its own entries must allow it).
        spec = Composite(b=Composite(c=Unbounded(shape=(4, 5, 2)), shape=(4,)), shape=(4,))
        spec.shape = (4, 5)
        assert spec.shape == (4, 5) and spec["b"].shape == (4, 5)
        empty = Composite(b=Composite(shape=(4,)), shape=(4,))
        empty.shape = (3,)
        assert empty["b"].shape == (3,)

    def test_leaf_mismatch_raises_and_changes_nothing(self):
        spec = self.spec()
        with pytest.raises(
            ValueError,
            match=r"cannot set Composite shape to \(4, 5\): entry 'a' has shape \(4, 3\)",
        ):
            spec.shape = (4, 5)
        assert spec.shape == (4,)
        nested = Composite(
            b=Composite(c=Unbounded(shape=(4, 5, 2)), shape=(4,)),
            d=Composite(shape=(4,)),
            shape=(4,),
        )
        with pytest.raises(ValueError, match=r"entry \('b', 'c'\) has shape \(4, 5, 2\)"):
            nested.shape = (4, 6)
        # validated before any change
        assert nested["b"].shape == (4,) and nested["d"].shape == (4,)
        with pytest.raises(ValueError, match=r"entry 'a' has shape \(4,\)"):
            Composite(a=Unbounded(shape=(4,))).shape = (3,)

    def test_batch_size_alias(self):
        spec = self.spec()
        assert spec.batch_size == (4,)
        spec.batch_size = ()
        assert spec.shape == ()


class TestLocking:
    def test_lock_recurse_and_unlock(self):
        spec = Composite(a=Unbounded(shape=(4,)), b=Composite(c=Unbounded(shape=(4,))))
        assert spec.lock_() is spec
        assert spec.is_locked and spec.locked and spec["b"].is_locked
        for action, match in [
            (lambda: spec.__setitem__("z", Unbounded(())), r"locked Composite \(key 'z'\)"),
            (lambda: spec.__delitem__("a"), r"deleting key 'a'"),
            (lambda: spec.pop("a"), r"deleting key 'a'"),
            (lambda: spec.update({"y": Unbounded(())}), r"key 'y'"),
            (lambda: setattr(spec, "shape", ()), r"\(shape\)"),
            (lambda: spec.__setitem__(("b", "d"), Unbounded(())), r"key 'd'"),
            (lambda: spec.__setitem__(("new", "d"), Unbounded(())), r"key \('new', 'd'\)"),
        ]:
            with pytest.raises(RuntimeError, match=match):
                action()
        assert list(spec.keys(True)) == ["a", "b", ("b", "c")]
        spec.unlock_()
        assert not spec.is_locked and not spec["b"].is_locked
        spec["z"] = Unbounded(())
        assert "z" in spec

    def test_lock_without_recurse(self):
        spec = Composite(a=Composite(b=Composite()))
        spec.lock_(recurse=False)
        with pytest.raises(RuntimeError, match="locked"):
            spec["a"] = spec["a"].clone()
        spec["a", "b"] = spec["a", "b"].clone()  # the nested spec is not locked
        spec.lock_(recurse=False)  # already locked: a no-op
        assert not spec["a"].is_locked
        spec.lock_(recurse=True)  # reaches the nested specs (TorchRL's documented behaviour)
        assert spec["a"].is_locked and spec["a", "b"].is_locked
        with pytest.raises(RuntimeError, match="locked"):
            spec["a", "b"] = Composite()
        spec.unlock_()
        assert not spec["a", "b"].is_locked

    def test_child_of_locked_parent_cannot_unlock(self):
        spec = Composite(b=Composite(c=Unbounded(shape=(4,))))
        spec.lock_()
        with pytest.raises(RuntimeError, match="Cannot unlock a Composite that a locked parent"):
            spec["b"].unlock_()
        assert spec["b"].is_locked
        spec.is_locked = False
        assert not spec["b"].is_locked
        spec["b"].is_locked = True
        spec["b"].unlock_()  # locked on its own: unlocks

    def test_copies_are_unlocked_and_pickle_keeps_the_lock(self):
        spec = Composite(a=Unbounded(shape=(2, 1)), b=Composite(shape=(2,)), shape=(2,))
        spec.lock_()
        for copy in (spec.clone(), spec[0], spec.expand(3, 2), spec.to(torch.float64)):
            assert not copy.is_locked
        loaded = pickle.loads(pickle.dumps(spec))
        assert loaded.is_locked and loaded["b"].is_locked and loaded == spec
        with pytest.raises(RuntimeError, match="locked parent"):
            loaded["b"].unlock_()

    def test_stacked_composite_locks_members(self):
        a = Composite(x=Unbounded(()))
        stacked = torch.stack([a, Composite(x=Unbounded(()), y=Unbounded(()))])
        stacked.lock_()
        assert stacked.is_locked and a.is_locked
        with pytest.raises(RuntimeError, match="locked StackedComposite"):
            stacked["z"] = Unbounded(shape=(2,))
        stacked.unlock_()
        stacked["z"] = Unbounded(shape=(2,))
        assert a["z"].shape == ()

    def test_leaves_have_no_lock(self):
        assert not hasattr(Unbounded(()), "lock_")  # as TorchRL: only Composites lock


class TestProjectTypeCheckClearDevice:
    def test_project_values(self):
        # TorchRL 0.14 gives the same values (it returns float dtypes for Categorical and
        # Binary and leaves 1.6 in an integer Bounded; here the spec's dtype is kept).
        cases = [
            (Bounded(0.0, 1.0, shape=(2,)), torch.tensor([2.0, -1.0]), [1.0, 0.0]),
            (Categorical(3), torch.tensor(5), 2),
            (Categorical(3), torch.tensor(-2), 0),
            (Categorical(3), torch.tensor(1.7), 2),
            (OneHot(3), torch.tensor([0.2, 0.9, 0.1]), [False, True, False]),
            (Binary(3), torch.tensor([0.2, 0.9, -3.0]), [0, 1, 0]),
            (MultiCategorical([2, 3]), torch.tensor([5, -1]), [1, 0]),
            (MultiOneHot([2, 3]), torch.tensor([0.2, 0.9, 0.1, 0.5, 0.3]), [0, 1, 0, 1, 0]),
            (Bounded(0, 5, shape=(2,), dtype=torch.int64), torch.tensor([1.6, 7.0]), [2, 5]),
        ]
        for spec, value, expected in cases:
            out = spec.project(value)
            assert torch.equal(out, torch.tensor(expected, dtype=spec.dtype)), (spec, out)
            assert spec.is_in(out)
        assert NonTensor(example_data="a").project("b") == "b"

    def test_composite_project_in_place(self):
        spec = Composite(a=Bounded(0.0, 1.0, shape=(2,)), b=Composite(c=Categorical(2)))
        td = spec.zero()
        td["a"] = torch.tensor([2.0, -1.0])
        td["b", "c"] = torch.tensor(3)
        out = spec.project(td)
        assert out is td and td["a"].tolist() == [1.0, 0.0] and td["b", "c"].item() == 1

    def test_type_check(self):
        Unbounded(shape=(2,)).type_check(torch.zeros(3))  # shape is not checked
        with pytest.raises(
            TypeError, match=r"value has dtype torch.float64, expected torch.float32"
        ):
            Unbounded(shape=(2,)).type_check(torch.zeros(2, dtype=torch.float64))
        spec = Composite(a=Unbounded(shape=(2,)), b=Categorical(3), n=Composite(m=Binary(2)))
        spec.type_check(torch.zeros(2, dtype=torch.int64), "b")
        with pytest.raises(TypeError, match=r"value for key 'a' has dtype torch.int64"):
            spec.type_check(torch.zeros(2, dtype=torch.int64), "a")
        good = spec.zero()
        spec.type_check(good)
        bad = good.clone()
        bad["n", "m"] = torch.zeros(2)
        with pytest.raises(
            TypeError, match=r"key 'm' has dtype torch.float32, expected torch.int8"
        ):
            spec.type_check(bad)
        spec.type_check(bad, selected_keys=["a", "b"])
        with pytest.raises(KeyError, match=r"type_check: value has no entry 'b'"):
            spec.type_check({"a": torch.zeros(2)})

    def test_clear_device(self):
        leaf = Unbounded(shape=(2,))
        assert leaf.clear_device_() is leaf and leaf.device == torch.device("cpu")
        spec = Composite(a=Unbounded(shape=(4,)), b=Composite(c=Unbounded(())), device="cpu")
        assert spec.clear_device_() is spec
        assert spec.device is None and spec["b"].device is None
        assert spec["a"].device == torch.device("cpu")  # leaves keep a device
        assert spec.rand().device is None

    def test_memoize_encode_gives_the_same_values(self):
        spec = Composite(a=Unbounded(shape=(2,)), b=Composite(c=OneHot(3)))
        spec.memoize_encode()
        assert spec["b", "c"]._memoize_encode
        first = spec.encode({"a": [1, 2], "b": {"c": 2}})
        second = spec.encode({"a": np.array([3.0, 4.0]), "b": {"c": 0}})
        assert first["a"].tolist() == [1.0, 2.0] and second["a"].tolist() == [3.0, 4.0]
        assert second["b", "c"].tolist() == [True, False, False]
        spec.erase_memoize_cache()
        spec.memoize_encode(False)
        assert not spec["a"]._memoize_encode
        assert spec.encode({"a": [5, 6]})["a"].tolist() == [5.0, 6.0]


class TestSmallerMethods:
    def test_cardinality(self):
        # values from TorchRL 0.14 (Binary: 2**n here, the length of enumerate(), where
        # TorchRL 0.14 says 2)
        assert Bounded(0.0, 1.0, shape=(2,)).cardinality() == float("inf")
        assert Categorical(3, shape=(2,)).cardinality() == 3
        assert OneHot(3).cardinality() == 3
        assert MultiOneHot([2, 3]).cardinality() == 6
        assert MultiCategorical([2, 3]).cardinality() == 6
        assert Binary(3).cardinality() == 8
        assert Composite(a=Categorical(2), b=OneHot(3)).cardinality() == 6
        assert Composite().cardinality() == 0
        with pytest.raises(NotImplementedError, match="cardinality is not defined for Unbounded"):
            Unbounded(()).cardinality()

    def test_enumerate(self):
        assert MultiCategorical([2, 3]).enumerate().tolist() == [
            [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]
        ]  # fmt: skip
        moh = MultiOneHot([2, 2]).enumerate().int().tolist()
        assert moh == [[1, 0, 1, 0], [1, 0, 0, 1], [0, 1, 1, 0], [0, 1, 0, 1]]
        mask = torch.tensor([True, False, True])
        assert Categorical(3, mask=mask).enumerate(use_mask=False).tolist() == [0, 1, 2]
        assert Categorical(3, mask=mask).enumerate(use_mask=True).tolist() == [0, 2]
        assert OneHot(3, mask=mask).enumerate(use_mask=False).shape == (3, 3)
        td = Composite(a=Categorical(2, shape=(2,)), shape=(2,)).enumerate()
        assert td.batch_size == (2, 2) and td["a"].tolist() == [[0, 0], [1, 1]]
        td = Composite(a=Categorical(2), b=OneHot(3)).enumerate()
        assert td.batch_size == (6,) and td["b"].int().argmax(-1).tolist() == [0, 1, 2] * 2
        with pytest.raises(NotImplementedError, match="only defined for discrete specs"):
            Bounded(0.0, 1.0, shape=(1,)).enumerate()

    def test_contains_and_index(self):
        spec = Categorical(3, shape=(2,))
        assert spec.contains(torch.tensor([0, 2])) and not spec.contains(torch.tensor([0, 3]))
        assert Categorical(3).index(torch.tensor(1), torch.tensor([5, 6, 7])).item() == 6
        out = spec.index(torch.tensor([1, 2]), torch.tensor([[5, 6, 7], [1, 2, 3]]))
        assert out.tolist() == [[6, 7], [2, 3]]  # TorchRL 0.14's value
        assert OneHot(3).index(torch.tensor([0, 1, 0]), torch.tensor([5, 6, 7])).tolist() == [6]
        mc = MultiCategorical([2, 3])
        assert mc.index(torch.tensor([1, 2]), torch.arange(5)).tolist() == [1, 2]
        with pytest.raises(NotImplementedError, match="index is not defined for Composite"):
            Composite().index(0, torch.zeros(1))
        with pytest.raises(ValueError, match="expects a tensor of indices, got a list"):
            Categorical(3).index([1], torch.zeros(3))

    def test_reshape_flatten_unflatten(self):
        spec = Bounded(torch.zeros(6, 2), torch.arange(1.0, 13.0).reshape(6, 2))
        out = spec.reshape(2, 3, 2)
        assert out.shape == (2, 3, 2) and out.high[1, 2].tolist() == [11.0, 12.0]
        assert spec.view(-1).shape == (12,)
        assert spec.expand(3, 4, 6, 2).flatten(0, 1).shape == (12, 6, 2)
        assert spec.unflatten(0, (3, 2)).shape == (3, 2, 2)
        oh = OneHot(3).expand(4, 3)
        assert oh.reshape(2, 2, 3).shape == (2, 2, 3)
        with pytest.raises(ValueError, match=r"its last 1 dim\(s\) \(3,\) are feature dims"):
            oh.reshape(3, 4)
        with pytest.raises(ValueError, match=r"cannot reshape OneHot of shape \(4, 3\) to \(5,\)"):
            oh.reshape(5)
        comp = Composite(a=Unbounded(shape=(6, 2)), b=OneHot(3, shape=(6, 3)), shape=(6,))
        r = comp.reshape(2, 3)
        assert r.shape == (2, 3) and r["a"].shape == (2, 3, 2) and r["b"].shape == (2, 3, 3)
        assert comp.unflatten(0, (3, 2))["b"].shape == (3, 2, 3)
        assert r.flatten(0, 1) == comp

    def test_conversion_identities(self):
        cat, oh = Categorical(3), OneHot(3)
        v = torch.tensor(2)
        assert cat.to_categorical(v) is v and cat.to_categorical_spec() is cat
        w = torch.tensor([False, True, False])
        assert oh.to_one_hot(w) is w and oh.to_one_hot_spec() is oh
        assert oh.to_categorical(w, safe=True).item() == 1
        with pytest.raises(ValueError, match="not in"):
            cat.to_one_hot(torch.tensor(5), safe=True)
        mc = MultiCategorical([2, 3])
        assert mc.to_categorical_spec() is mc
        assert MultiOneHot([2, 3]).to_one_hot_spec().nvec == [2, 3]
        b = torch.tensor([0, 1, 1], dtype=torch.int8)
        assert Binary(3).to_categorical(b) is b and Binary(3).mask is None

    def test_attributes(self):
        assert OneHot(3).use_register is False and MultiOneHot([2]).use_register is False
        assert MultiCategorical([2, 3]).remove_singleton is True
        nt = NonTensor(shape=(2,), example_data="a")
        assert (nt.batched, nt.feature_dims, nt.space) == (False, 1, None)
        assert NonTensor(shape=(2,), batched=True).feature_dims == 0
        with pytest.raises(ValueError, match="batched or feature_dims, not both"):
            NonTensor(batched=True, feature_dims=1)
        assert Composite(shape=(2,)).step_mdp_static is False

    def test_composite_helpers(self):
        spec = Composite(
            a=Unbounded(()), b=Composite(c=Unbounded(()), d=Unbounded(())), e=Unbounded(())
        )
        out = spec.separates("a", ("b", "c"), "missing")
        assert list(out.keys(True)) == ["a", "b", ("b", "c")]
        assert list(spec.keys(True)) == ["b", ("b", "d"), "e"]
        assert spec.separates("missing") is None
        assert Composite(a=Composite(), b=None).is_empty(recurse=True)
        assert not Composite(a=Composite()).is_empty()
        td = TensorDict(b=torch.ones(3))
        assert Composite(a=Unbounded((2,))).zeros_update(td) is td
        assert td["a"].tolist() == [0.0, 0.0] and td["b"].tolist() == [1.0] * 3
        assert Composite(a=Unbounded((2,))).ones_update(td)["a"].tolist() == [1.0, 1.0]
        assert Composite(a=Bounded(2.0, 3.0, (2,))).rand_update(td)["a"].min() >= 2.0

    def test_data_cls(self):
        @tensorclass
        class Obs:
            x: torch.Tensor

        spec = Composite(x=Unbounded(shape=(3, 2)), shape=(3,), data_cls=Obs)
        value = spec.rand()
        assert type(value) is Obs and value.batch_size == (3,) and value.x.shape == (3, 2)
        assert spec.is_in(value) and not spec.is_in(TensorDict(x=value.x, batch_size=[3]))
        assert type(spec.clone().zero()) is Obs and type(spec[0].one()) is Obs
        assert type(spec.encode({"x": np.zeros((3, 2))})) is Obs

    def test_stacked_composite_mapping_methods(self):
        a = Composite(x=Unbounded(()))
        b = Composite(x=Unbounded(()), y=Unbounded(()))
        stacked = torch.stack([a, b])
        assert stacked.stack_dim == 0 and stacked.batch_size == (2,)
        assert stacked.get("x").shape == (2,) and stacked.get("y", None) is None
        stacked.set("z", Unbounded(shape=(2, 4)))
        stacked.update({"w": Unbounded(shape=(2,))})
        assert a["z"].shape == (4,) and b["w"].shape == ()
        assert stacked.pop("w").shape == (2,) and "w" not in a
        assert stacked.empty().is_empty() and not stacked.is_empty()
        stacked.type_check(stacked.zero())
        with pytest.raises(TypeError, match=r"key 'x' has dtype torch.int64"):
            stacked.type_check(torch.zeros(2, dtype=torch.int64), "x")
        assert stacked.clear_device_().device is None
        td = stacked.zero()
        assert stacked.ones_update(td)["x"].tolist() == [1.0, 1.0]


class TestDomainOverride:
    def test_domain_is_a_label_values_follow_the_dtype(self):
        # TorchRL 0.14: ``domain=`` overrides spec.domain; rand still follows the dtype.
        spec = Bounded(low=-1, high=1, shape=(), dtype=torch.int, domain="continuous")
        assert spec.domain == "continuous" and spec.dtype == torch.int32
        values = spec.rand((200,))
        assert values.dtype == torch.int32 and set(values.tolist()) == {-1, 0, 1}
        assert spec.project(torch.tensor(0.6)).item() == 1
        un = Unbounded(shape=(3,), dtype=torch.float32, domain="discrete")
        assert un.domain == "discrete" and un.rand().dtype == torch.float32
        assert un.to(torch.int64).domain == "discrete"
        with pytest.raises(ValueError, match="domain must be 'continuous' or 'discrete', got 'x'"):
            Unbounded(domain="x")


class TestTorchRLCallForms:
    def test_shape_none_means_no_extra_dims(self):
        # TorchRL's signature is rand(shape=None); code passes None explicitly
        specs = [Bounded(0.0, 1.0, (2,)), Unbounded((2,)), Categorical(3), OneHot(3)]
        specs += [Binary(2), MultiOneHot([2, 3]), MultiCategorical([2, 3])]
        for spec in specs:
            for method in ("rand", "zero", "one", "sample", "zeros", "ones"):
                assert getattr(spec, method)(None).shape == spec.shape, (spec, method)
        comp = Composite(a=OneHot(3), t=NonTensor(example_data="x"))
        assert comp.rand(None).batch_size == () and comp.zero(shape=None)["t"] == "x"
        stacked = torch.stack([Composite(a=Unbounded(())), Composite(b=Unbounded(()))])
        assert stacked.rand(None).batch_size == (2,)

    def test_assert_is_in_raises_what_both_libraries_catch(self):
        spec = Bounded(0.0, 1.0, (1,))
        for cls in (AssertionError, ValueError):
            with pytest.raises(cls, match=r"value has values outside \[low, high\]"):
                spec.assert_is_in(torch.tensor([2.0]))

    def test_torch_functions(self):
        b = Bounded(torch.zeros(4, 2), torch.arange(1.0, 9.0).reshape(4, 2))
        assert torch.index_select(b, 0, torch.tensor([0, 3])).high.tolist() == [
            [1.0, 2.0],
            [7.0, 8.0],
        ]
        assert torch.squeeze(Unbounded(shape=(1, 3)), 0).shape == (3,)
        assert torch.unsqueeze(OneHot(3), 0).shape == (1, 3)
        c = Composite(a=b, shape=(4,))
        picked = torch.index_select(c, 0, torch.tensor([1, 2]))
        assert picked.shape == (2,) and picked["a"].high.tolist() == [[3.0, 4.0], [5.0, 6.0]]
        assert torch.squeeze(torch.unsqueeze(c, 0)).shape == (4,)

    @pytest.mark.parametrize(
        "spec",
        [OneHot(3, shape=(5, 3)), Binary(4, shape=(5, 4)), MultiOneHot([2, 3, 4], shape=(5, 9))],
        ids=["onehot", "binary", "multionehot"],
    )
    def test_encoding_dim_stays_whole(self, spec):
        # as TorchRL: the one-hot (or bit) dim can be neither unbound nor index-selected
        with pytest.raises(
            ValueError, match=r"cannot unbind dim -1 of \w+ of shape \(5, \d\): it is a feature dim"
        ):
            spec.unbind(-1)
        with pytest.raises(ValueError, match="Cannot index_select along the last dimension of"):
            torch.index_select(spec, -1, torch.tensor([0, 1]))
        assert torch.stack(spec.unbind(0), 0) == spec
        assert torch.index_select(spec, 0, torch.tensor([0, 4])).shape == (2, spec.shape[-1])

    def test_unbind_counts_dims_from_the_last(self):
        # a negative dim counts from the spec's last dim, as torch.unbind
        assert [s.shape for s in Unbounded(shape=(2, 3)).unbind(-1)] == [(2,)] * 3
        assert len(Categorical(4, shape=(5, 6)).unbind(-1)) == 6
        with pytest.raises(ValueError, match=r"cannot unbind dim 1 of MultiCategorical .* feature"):
            MultiCategorical([4, 5, 6], shape=(5, 3)).unbind(1)

    def test_keys_is_leaf(self):
        c = Composite(
            a=Unbounded(()),
            b=Composite(c=Unbounded(()), d=Composite(e=Unbounded(()))),
            f=NonTensor(()),
        )
        # the key sets TorchRL 0.14 gives (it lists nested keys before their parent)
        composite_or_text = lambda t: issubclass(t, (Composite, NonTensor))  # noqa: E731
        assert set(c.keys(True, True, is_leaf=composite_or_text)) == {"b", ("b", "d"), "f"}
        not_text = lambda t: not issubclass(t, NonTensor)  # noqa: E731
        assert list(c.keys(False, True, is_leaf=not_text)) == ["a", "b"]
        assert ("b", "d") in c.keys(True, True, is_leaf=lambda t: True)
        assert len(c.items(True, True, is_leaf=lambda t: True)) == 6
        assert list(c.keys(True, True)) == ["a", ("b", "c"), ("b", "d", "e"), "f"]


class TestCompositeNames:
    def spec(self):
        return Composite(
            a=Unbounded((2, 3, 4)),
            n=Composite(b=Unbounded((2, 3, 5)), shape=(2, 3)),
            shape=(2, 3),
            names=["x", "y"],
        )

    def test_names_reach_nested_specs_and_values(self):
        spec = self.spec()
        assert spec.names == ["x", "y"] and spec["n"].names == ["x", "y"]
        assert spec.rand().names == ["x", "y"] and spec.zero()["n"].names == ["x", "y"]
        assert spec.rand((5,)).names == [None, "x", "y"]  # TorchRL 0.14 raises here
        assert Composite(shape=(2,)).names == [None]

    def test_shape_operations(self):
        spec = self.spec()
        assert spec[0].names == ["y"] and spec[:, 1].names == ["x"]
        assert spec.expand(7, 2, 3).names == [None, "x", "y"]
        assert spec.unsqueeze(1).names == ["x", None, "y"]
        assert spec.unsqueeze(0).squeeze(0).names == ["x", "y"]
        assert spec.clone().names == ["x", "y"] and spec.to(torch.float64).names == ["x", "y"]
        assert spec.reshape(6).names == [None]

    def test_refine_names(self):
        spec = Composite({}, shape=[3, 4, 5, 6])  # TorchRL's docstring example
        assert spec.refine_names(None, None, None, "d").names == [None, None, None, "d"]
        assert spec.refine_names("a", None, None, "d").names == ["a", None, None, "d"]
        assert spec.refine_names(..., "d").names == ["a", None, None, "d"]
        with pytest.raises(
            RuntimeError, match=r"cannot rename dims named \['a', None, None, 'd'\]"
        ):
            spec.refine_names("b", None, None, "d")
        with pytest.raises(ValueError, match=r"takes 4 names, got 1: \['a'\]"):
            spec.names = ["a"]

    def test_has_and_erase_names(self):
        # TorchRL's private helpers, which its users and tests call
        spec = self.spec()
        assert spec._has_names() and not Composite(shape=(2,))._has_names()
        assert Composite({}, shape=(10,), names=["batch"])._has_names()
        spec._erase_names()
        assert not spec._has_names() and spec.names == [None, None]
        assert spec.refine_names(None, "y")._has_names()


class TestExtensionAPI:
    def test_implements_for_spec(self):
        from rl.core import TensorSpec

        @TensorSpec.implements_for_spec(torch.flatten)
        def _flatten(spec, start_dim=0, end_dim=-1):
            return spec.flatten(start_dim, end_dim)

        try:
            assert torch.flatten(Unbounded(shape=(2, 3))).shape == (6,)
            assert torch.stack in TensorSpec.SPEC_HANDLED_FUNCTIONS
        finally:
            del TensorSpec.SPEC_HANDLED_FUNCTIONS[torch.flatten]
        with pytest.raises(TypeError):
            torch.flatten(Unbounded(shape=(2, 3)))  # unregistered again: torch refuses

    def test_data_cls_takes_part_in_equality(self):
        @tensorclass
        class Obs:
            x: torch.Tensor

        assert Composite(x=Unbounded((1,))) != Composite(x=Unbounded((1,)), data_cls=Obs)
        assert Composite(x=Unbounded((1,)), data_cls=Obs).clone() == Composite(
            x=Unbounded((1,)), data_cls=Obs
        )
