"""object_state / load_object_state: an object's state as tensors and plain data, read back
with ``torch.load(weights_only=True)`` and written into the live object without creating
any object the state names."""

from __future__ import annotations

import enum
import io
import socket
from collections import deque, namedtuple
from pathlib import Path

import numpy as np
import pytest
import torch

from rl.core import load_object_state, object_state

Pair = namedtuple("Pair", "a b")


class Mode(enum.Enum):
    FAST = 1
    SLOW = 2


class Leaf:
    __slots__ = ("count", "values")

    def __init__(self):
        self.count = 0
        self.values = np.zeros(3)


class Sim:
    def __init__(self, seed=0):
        self.np_rng = np.random.default_rng(seed)
        self.legacy = np.random.RandomState(seed)
        self.torch_rng = torch.Generator().manual_seed(seed)
        self.x = np.zeros(4, dtype=np.float32)
        self.t = torch.zeros(2, 3)
        self.scalar = np.float64(0.5)
        self.history = deque([1, 2], maxlen=3)
        self.tags = {"a", "b"}
        self.table = {("k", 1): [1.0, None, "s"]}
        self.mode = Mode.FAST
        self.leaf = Leaf()
        self.pair = Pair(1, np.ones(2))
        self.shared = [0]
        self.alias = self.shared
        self.callback = print  # code: kept, never saved
        self.size = torch.Size([2, 3])
        self.dtype = torch.float16
        self.device = torch.device("cpu")

    def advance(self):
        self.np_rng.random()
        self.legacy.rand()
        torch.rand(1, generator=self.torch_rng)
        self.x += 1
        self.t += 1
        self.scalar = np.float64(3.0)
        self.history.append(7)
        self.tags.add("c")
        self.table[("k", 1)].append(2)
        self.mode = Mode.SLOW
        self.leaf.count += 1
        self.leaf.values += 1
        self.pair = Pair(5, np.zeros(2))
        self.shared.append(1)

    def draws(self):
        return (
            self.np_rng.random(),
            self.legacy.rand(),
            torch.rand(1, generator=self.torch_rng).item(),
        )


def _through_disk(state):
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


class TestRoundTrip:
    def test_every_kind_of_value_restores(self):
        sim, reference = Sim(), Sim()
        x_view = sim.x[1:]  # a view held elsewhere
        state = _through_disk(object_state(sim))
        sim.advance()
        load_object_state(sim, state)
        assert sim.draws() == reference.draws()
        np.testing.assert_array_equal(sim.x, reference.x)
        np.testing.assert_array_equal(x_view, reference.x[1:])  # restored in place
        torch.testing.assert_close(sim.t, reference.t)
        assert type(sim.scalar) is np.float64 and sim.scalar == 0.5
        assert list(sim.history) == [1, 2] and sim.history.maxlen == 3
        assert sim.tags == {"a", "b"}
        assert sim.table == {("k", 1): [1.0, None, "s"]}
        assert sim.mode is Mode.FAST
        assert sim.leaf.count == 0 and sim.leaf.values.tolist() == [0.0, 0.0, 0.0]
        assert isinstance(sim.pair, Pair) and sim.pair.a == 1
        assert sim.shared == [0] and sim.alias is sim.shared
        assert sim.callback is print
        assert sim.size == torch.Size([2, 3]) and sim.dtype is torch.float16

    def test_only_plain_types_are_written(self):
        def leaves(obj):
            if isinstance(obj, dict):
                for key, value in obj.items():
                    yield key
                    yield from leaves(value)
            elif isinstance(obj, list | tuple):
                for value in obj:
                    yield from leaves(value)
            else:
                yield obj

        kinds = {type(v) for v in leaves(object_state(Sim()))}
        assert kinds <= {torch.Tensor, int, float, bool, str, type(None)}, kinds

    def test_refuses_hidden_state_naming_the_path(self):
        sim = Sim()
        sim.leaf.values = socket.socket()
        try:
            with pytest.raises(
                TypeError,
                match=r"cannot save the state of the sim: state\.leaf\.values is a socket\.socket",
            ):
                object_state(sim, name="the sim")
        finally:
            sim.leaf.values.close()

    def test_refuses_object_arrays(self):
        sim = Sim()
        sim.x = np.array([object()], dtype=object)
        with pytest.raises(TypeError, match=r"state\.x is a numpy array of dtype object"):
            object_state(sim)

    def test_object_keys_are_found_among_the_live_keys(self):
        sim = Sim()
        sim.by_leaf = {sim.leaf: np.zeros(2), "plain": 1}
        state = _through_disk(object_state(sim))
        sim.by_leaf[sim.leaf] += 5
        sim.by_leaf["plain"] = 2
        load_object_state(sim, state)
        assert list(sim.by_leaf) == [sim.leaf, "plain"]
        assert sim.by_leaf[sim.leaf].tolist() == [0.0, 0.0] and sim.by_leaf["plain"] == 1

    def test_skip_keeps_live_values(self):
        sim = Sim()
        sim.config = [1, 2]
        state = object_state(sim, skip=lambda v: v is sim.config)
        sim.config.append(3)
        load_object_state(sim, state)
        assert sim.config == [1, 2, 3]


class TestCraftedStates:
    """A state can only assign values: names in it are never imported or called."""

    @pytest.mark.parametrize(
        "entry",
        [
            {"__rl_state__": "object", "type": "os.system", "attrs": {}},
            {
                "__rl_state__": "np_generator",
                "state": {
                    "__rl_state__": "dict",
                    "keys": ["bit_generator"],
                    "values": ["os.system"],
                },
            },  # fmt: skip
            {"__rl_state__": "np_dtype", "str": "O"},
            {"__rl_state__": "dtype", "str": "_C"},
            {"__rl_state__": "pickle", "data": "cos\nsystem\n"},
        ],
        ids=["object-type", "bit-generator", "object-dtype", "torch-attr", "unknown-kind"],
    )
    def test_crafted_entry_is_refused(self, entry):
        sim = Sim()
        state = object_state(sim)
        state["attrs"]["scalar"] = entry
        with pytest.raises(
            ValueError, match=r"cannot restore the state of the object: state\.scalar"
        ):
            load_object_state(sim, state)

    def test_pickle_payload_in_a_file_is_not_loaded(self, tmp_path: Path):
        marker = tmp_path / "pwned"
        payload = f"cos\nsystem\n(S'touch {marker}'\ntR.".encode()
        path = tmp_path / "state.pt"
        torch.save({"object": torch.frombuffer(bytearray(payload), dtype=torch.uint8)}, path)
        state = torch.load(path, weights_only=True)
        with pytest.raises(ValueError, match="expected a saved object state, got a dict"):
            load_object_state(Sim(), state)
        assert not marker.exists()

    def test_object_key_of_another_type(self):
        sim = Sim()
        sim.by_leaf = {sim.leaf: 0}
        state = object_state(sim)
        sim.by_leaf = {Sim(): 0}
        with pytest.raises(
            ValueError, match=r"state\.by_leaf has a .*Leaf key at position 0, a .*Sim here"
        ):
            load_object_state(sim, state)

    def test_state_of_another_type(self):
        with pytest.raises(ValueError, match=r"saved from a .*Sim, and this is a .*Leaf"):
            load_object_state(Leaf(), object_state(Sim()))

    def test_attribute_of_another_type(self):
        sim = Sim()
        state = object_state(sim)
        sim.leaf = Sim()
        with pytest.raises(
            ValueError, match=r"state\.leaf is a .*Leaf in the saved state and a .*Sim here"
        ):
            load_object_state(sim, state)
