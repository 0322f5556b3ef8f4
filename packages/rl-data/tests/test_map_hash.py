import pytest
import torch

from rl.data.map import BinaryToDecimal, RandomProjectionHash, SipHash


def test_binary_to_decimal_chunks_summed():
    mod = BinaryToDecimal(num_bits=4, device="cpu", dtype=torch.int32, convert_to_binary=True)
    x = torch.tensor([[0, 0, 1, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 0, 10, 0]], dtype=torch.float)
    out = mod(x)
    # 0010 -> 2, 0001 -> 1; 0000 -> 0, 0010 (10 > 0 -> 1) -> 2
    assert out.tolist() == [3, 2]


def test_binary_to_decimal_plain_loop():
    torch.manual_seed(0)
    x = torch.randint(0, 2, (5, 6))
    out = BinaryToDecimal(num_bits=3, device="cpu", dtype=torch.int64)(x)
    for row, val in zip(x.tolist(), out.tolist()):
        expected = sum(int("".join(map(str, row[i : i + 3])), 2) for i in (0, 3))
        assert val == expected


def test_binary_to_decimal_bad_width():
    mod = BinaryToDecimal(num_bits=4, device="cpu", dtype=torch.int32)
    with pytest.raises(ValueError, match="less than"):
        mod(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="not divisible"):
        mod(torch.zeros(2, 6))


def test_siphash_equal_rows_equal_keys():
    a = torch.rand(4, 3)
    b = torch.cat([a, a[:1]])
    h = SipHash()(b)
    assert h.shape == (5,) and h.dtype == torch.int64
    assert h[0] == h[4]
    assert len(set(h[:4].tolist())) == 4
    rows = SipHash(as_tensor=False)(a)
    assert rows == [r.numpy().tobytes() for r in a]
    assert SipHash()(a.to(torch.bfloat16)).shape == (4,)


def test_random_projection_hash():
    torch.manual_seed(0)
    mod = RandomProjectionHash(n_components=8)
    x = torch.randn(6, 20)
    h = mod(x)
    assert mod.n_components == 8
    assert mod.transform.shape == (20, 8) and mod.transform.dtype == torch.bfloat16
    assert h.shape == (6,)
    assert (mod(x.clone()) == h).all()
    assert len(set(h.tolist())) == 6


def test_hash_to_int_first_sight_order():
    from rl.data.map import HashToInt

    h2i = HashToInt()
    assert h2i(torch.tensor([7, 3, 7]), extend=True).tolist() == [0, 1, 0]
    # unseen and not extended: one past the end, not registered
    assert h2i(torch.tensor([9, 3])).tolist() == [2, 1]
    assert h2i(torch.tensor([9])).tolist() == [2]
    other = HashToInt()
    other.load_state_dict(h2i.state_dict())
    assert other(torch.tensor([3, 7])).tolist() == [1, 0]


def test_query_module_indices():
    from tensordict import TensorDict

    from rl.data.map import QueryModule

    qm = QueryModule(in_keys=["key1", "key2"], index_key="index", hash_module=SipHash())
    td = TensorDict(
        {
            "key1": torch.tensor([[1.0], [1.0], [1.0], [2.0]]),
            "key2": torch.tensor([[3.0], [3.0], [2.0], [3.0]]),
        },
        batch_size=(4,),
    )
    out = qm(td)
    assert out is td
    assert out["index"].tolist() == [0, 0, 1, 2]
    assert "_hash" in out.keys()
    out2 = qm(td.clone(), clone=True, write_hash=False)
    assert "_hash" not in out2.keys() or out2 is not td
    with pytest.raises(ValueError, match="cannot be empty"):
        QueryModule(in_keys=[])
    with pytest.raises(ValueError, match="number of hash_modules"):
        QueryModule(in_keys=["a", "b"], hash_module=[SipHash()])


def test_query_module_nested_keys_flattened():
    from rl.data.map import QueryModule

    qm = QueryModule(
        in_keys=[(("key1",),), (("another",), "key2")],
        index_key=("some", ("_index",)),
        hash_module=SipHash(),
    )
    assert qm.in_keys == ["key1", ("another", "key2")]
    assert qm.index_key == ("some", "_index")
    assert set(qm.hash_module) == {"key1", ("another", "key2")}
