"""The ``Examples:`` blocks of the public classes run and print what they show."""

import doctest
import importlib

import pytest

MODULES = [
    "rl.data.datasets._dataset",
    "rl.data.datasets._lerobot",
    "rl.data.datasets._lerobot_replay",
    "rl.data.datasets._minari",
    "rl.data.datasets._registry",
    "rl.data._video",
    "rl.data.postprocs._densify",
    "rl.data.postprocs._multistep",
    "rl.data.replay_buffers._buffers",
    "rl.data.replay_buffers._td_buffers",
    "rl.data.replay_buffers._checkpointers",
    "rl.data.replay_buffers._ensemble",
    "rl.data.replay_buffers._scheduler",
    "rl.data.replay_buffers._trajectories",
    "rl.data.replay_buffers._torch_trees",
    "rl.data.replay_buffers.storages._list",
    "rl.data.replay_buffers.samplers._prioritized",
    "rl.data.replay_buffers.samplers._random",
    "rl.data.replay_buffers.samplers._slice",
    "rl.data.replay_buffers.samplers._streaming_slice",
    "rl.data.replay_buffers.storages._base",
    "rl.data.replay_buffers.storages._memmap",
    "rl.data.replay_buffers.storages._tensor",
    "rl.data.replay_buffers.writers._writers",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    from rl.data.datasets import _registry

    module = importlib.import_module(name)
    # register_dataset's example registers "toy": the registry is restored afterwards, so
    # that the registry tests that run later in this process start from the built-ins
    before = dict(_registry._DATASET_REGISTRY)
    try:
        result = doctest.testmod(
            module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
        )
    finally:
        _registry._DATASET_REGISTRY.clear()
        _registry._DATASET_REGISTRY.update(before)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
