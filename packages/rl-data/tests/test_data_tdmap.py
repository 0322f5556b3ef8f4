"""TensorDictMap: writes, reads, membership and write_fn against a plain dict."""

import pytest
import torch
from tensordict import TensorDict

from rl.data import LazyTensorStorage, ListStorage
from rl.data.map import QueryModule, SipHash, TensorDictMap, TensorMap


def keys(*pairs):
    k1 = torch.tensor([[float(a)] for a, _ in pairs])
    k2 = torch.tensor([[float(b)] for _, b in pairs])
    return TensorDict(key1=k1, key2=k2, batch_size=[len(pairs)])


def make(storage=None, **kwargs):
    query = QueryModule(in_keys=["key1", "key2"], index_key="index", hash_module=SipHash())
    return TensorDictMap(query_module=query, storage=storage or LazyTensorStorage(100), **kwargs)


class TestTensorDictMap:
    def test_is_a_tensor_map(self):
        assert isinstance(make(), TensorMap)

    def test_write_read_against_dict(self):
        tdmap = make()
        plain = {}
        for step in range(3):
            pairs = [(i, i + step) for i in range(4)]
            vals = torch.arange(4.0).unsqueeze(-1) * 10 + step
            tdmap[keys(*pairs)] = TensorDict(out=vals, batch_size=[4])
            plain.update({p: v.item() for p, v in zip(pairs, vals)})
        assert len(tdmap) == len(plain)
        for pair, v in plain.items():
            assert tdmap[keys(pair)]["out"].item() == v

    def test_overwrite_and_extra_entries_ignored(self):
        tdmap = make()
        k = keys((1, 2), (3, 4))
        tdmap[k] = TensorDict(out=torch.tensor([[1.0], [2.0]]), batch_size=[2])
        tdmap[k[:1]] = TensorDict(out=torch.tensor([[5.0]]), batch_size=[1])
        query = k.clone()
        query["other"] = torch.zeros(2, 1)
        torch.testing.assert_close(tdmap[query]["out"], torch.tensor([[5.0], [2.0]]))
        assert len(tdmap) == 2

    def test_contains_and_unbatched(self):
        tdmap = make()
        tdmap[keys((1, 2))] = TensorDict(out=torch.ones(1, 1), batch_size=[1])
        assert tdmap.contains(keys((1, 2), (2, 1))).tolist() == [True, False]
        single = keys((1, 2))[0]
        assert bool(tdmap.contains(single)) and single in tdmap
        assert tdmap[single]["out"].shape == (1,)

    def test_missing_key_raises(self):
        tdmap = make()
        tdmap[keys((1, 2))] = TensorDict(out=torch.ones(1, 1), batch_size=[1])
        with pytest.raises(KeyError, match="no value stored for the keys"):
            tdmap[keys((9, 9))]

    def test_out_keys_lazy_and_explicit(self):
        tdmap = make()
        assert not hasattr(tdmap, "out_keys")
        tdmap[keys((1, 2))] = TensorDict(a=torch.ones(1, 1), b=torch.zeros(1, 1), batch_size=[1])
        assert sorted(tdmap.out_keys) == ["a", "b"] and tdmap._has_lazy_out_keys()
        only_a = make(out_keys=["a"])
        only_a[keys((1, 2))] = TensorDict(a=torch.ones(1, 1), b=torch.zeros(1, 1), batch_size=[1])
        assert list(only_a[keys((1, 2))].keys()) == ["a"]

    def test_write_fn_accumulates(self):
        def add(new, old=None):
            return new if old is None else new + old

        tdmap = make(write_fn=add)
        for _ in range(3):
            tdmap[keys((1, 1), (2, 2))] = TensorDict(n=torch.ones(2, 1), batch_size=[2])
        tdmap[keys((1, 1), (3, 3))] = TensorDict(n=torch.ones(2, 1), batch_size=[2])
        torch.testing.assert_close(
            tdmap[keys((1, 1), (2, 2), (3, 3))]["n"], torch.tensor([[4.0], [3.0], [1.0]])
        )

    def test_repeated_key_in_one_write(self):
        tdmap = make()
        tdmap[keys((1, 1), (1, 1))] = TensorDict(out=torch.tensor([[1.0], [2.0]]), batch_size=[2])
        assert len(tdmap) == 1 and tdmap[keys((1, 1))]["out"].item() == 2.0

    def test_list_storage(self):
        tdmap = make(storage=ListStorage(10))
        tdmap[keys((1, 2), (3, 4))] = TensorDict(out=torch.tensor([[1.0], [2.0]]), batch_size=[2])
        torch.testing.assert_close(tdmap[keys((3, 4))]["out"], torch.tensor([[2.0]]))

    def test_from_tensordict_pair_and_clear(self):
        source = TensorDict(obs=torch.randn(5, 3), action=torch.arange(5), batch_size=[5])
        dest = TensorDict(reward=torch.arange(5.0).unsqueeze(-1), batch_size=[5])
        tdmap = TensorDictMap.from_tensordict_pair(
            source, dest, in_keys=["obs", "action"], max_size=10
        )
        tdmap[source] = dest
        assert tdmap.max_size == 10
        torch.testing.assert_close(tdmap[source[[3, 1]]]["reward"], torch.tensor([[3.0], [1.0]]))
        tdmap.clear()
        assert len(tdmap) == 0 and not tdmap.contains(source).any()


def test_contains_with_a_list_storage():
    tdmap = make(storage=ListStorage(10))
    tdmap[keys((1, 2))] = TensorDict(out=torch.ones(1, 1), batch_size=[1])
    assert tdmap.contains(keys((1, 2), (5, 5))).tolist() == [True, False]


def test_get_with_default():
    tdmap = make()
    assert tdmap.get(keys((1, 2))) is None  # empty map
    tdmap[keys((1, 2), (3, 4))] = TensorDict(out=torch.tensor([[1.0], [2.0]]), batch_size=[2])
    assert tdmap.get(keys((3, 4)))["out"].tolist() == [[2.0]]
    assert tdmap.get(keys((3, 4), (9, 9)), default="none") == "none"  # one row missing
    assert tdmap.get(keys((1, 2))[0])["out"].tolist() == [1.0]  # unbatched
