"""Writer state dicts have TorchRL 0.14.1's layout (``_cursor`` / ``_write_count`` keys)."""

import pytest
import torch
from tensordict import TensorDict

from rl.data import (
    LazyTensorStorage,
    ReplayBuffer,
    RoundRobinWriter,
    TensorDictReplayBuffer,
    TensorDictRoundRobinWriter,
)

# TorchRL 0.14.1: a (TensorDict)RoundRobinWriter after extending 6 items into a storage of 4,
# ``writer.state_dict()`` (printed by ~/torchrl-ref/bin/python)
TORCHRL_STATE = {"_cursor": 2, "_write_count": 6}


@pytest.mark.parametrize("writer_cls", [RoundRobinWriter, TensorDictRoundRobinWriter])
def test_same_state_as_torchrl(writer_cls):
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(4), writer=writer_cls())
    rb.extend(TensorDict(a=torch.arange(6.0), batch_size=[6]))
    assert rb.writer.state_dict() == TORCHRL_STATE


@pytest.mark.parametrize("writer_cls", [RoundRobinWriter, TensorDictRoundRobinWriter])
def test_loads_a_torchrl_writer_state(writer_cls):
    writer = writer_cls()
    writer.load_state_dict(dict(TORCHRL_STATE))
    assert writer.state_dict() == TORCHRL_STATE
    assert writer.write_count == 6


def test_torchrl_state_resumes_writing_at_its_cursor():
    # storage content of the TorchRL buffer: items 4, 5 wrapped onto slots 0, 1
    rb = ReplayBuffer(storage=LazyTensorStorage(4))
    rb.extend(torch.tensor([4, 5, 2, 3]))
    rb.writer.load_state_dict(dict(TORCHRL_STATE))
    assert rb.extend(torch.tensor([6, 7, 8])).tolist() == [2, 3, 0]
    assert rb[:].tolist() == [8, 5, 6, 7]
    assert rb.writer.state_dict() == {"_cursor": 1, "_write_count": 9}


def test_keys_without_underscore_load():
    writer = RoundRobinWriter()
    writer.load_state_dict({"cursor": 3, "write_count": 11})
    assert writer.state_dict() == {"_cursor": 3, "_write_count": 11}


def test_missing_key_is_named():
    with pytest.raises(KeyError, match="needs the key '_cursor', got keys \\['_write_count'\\]"):
        RoundRobinWriter().load_state_dict({"_write_count": 1})


def test_write_count_is_optional():
    # as TorchRL: a state without _write_count keeps the writer's count
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(torch.arange(5))
    state = rb.state_dict()
    del state["_writer"]["_write_count"]
    other = ReplayBuffer(storage=LazyTensorStorage(10))
    other.load_state_dict(state)
    assert other.writer.state_dict() == {"_cursor": 5, "_write_count": 0}
