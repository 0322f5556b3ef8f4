"""EnvMetaData / get_env_metadata / env_creator / make_tensordict / get_available_libraries."""

from __future__ import annotations

import doctest
import importlib
import importlib.util

import pytest
import torch
from tensordict import TensorDict

from rl.envs import (
    EnvCreator,
    EnvMetaData,
    PendulumEnv,
    env_creator,
    get_available_libraries,
    get_env_metadata,
    make_tensordict,
)


class _ClosingPendulum(PendulumEnv):
    closed: list[bool] = []

    def close(self, *, raise_if_closed: bool = True) -> None:
        type(self).closed.append(True)
        super().close(raise_if_closed=raise_if_closed)


class TestEnvMetaData:
    def test_metadata_of_an_env(self):
        env = PendulumEnv()
        meta = get_env_metadata(env)
        assert isinstance(meta, EnvMetaData)
        assert meta.batch_size == () and meta.batch_locked and not meta.has_dynamic_specs
        specs = env.specs.to("cpu")  # (stored on the CPU)
        assert meta.specs == specs
        assert meta.output_spec == specs["output_spec"]
        assert meta.input_spec == specs["input_spec"]
        td = meta.tensordict
        assert set(td.keys()) == {
            "_reset",
            "action",
            "done",
            "next",
            "observation",
            "terminated",
            "truncated",
        }
        assert all((v == 0).all() for v in td.values(True, True))
        assert meta.device_map["observation"] == torch.device("cpu")
        assert not env.is_closed  # an env given is not closed

    def test_expand_index_clone_to(self):
        meta = get_env_metadata(PendulumEnv)
        batch = meta.expand(4)
        assert batch.batch_size == (4,) and batch.tensordict.shape == (4,)
        assert batch.specs.shape == (4,)
        assert batch[1:3].batch_size == (2,) and batch[1:3].tensordict.shape == (2,)
        copy = meta.clone()
        copy.tensordict["observation"].fill_(1.0)  # (a copy of the stored one)
        copy._tensordict["observation"].fill_(1.0)
        assert (meta.tensordict["observation"] == 0).all()
        moved = meta.to("cpu")
        assert moved.device == torch.device("cpu")
        assert set(moved.device_map.values()) == {torch.device("cpu")}

    def test_factory_env_is_closed_even_on_error(self):
        _ClosingPendulum.closed.clear()
        get_env_metadata(_ClosingPendulum)
        assert _ClosingPendulum.closed == [True]

        def refuse(env):
            raise ValueError("transform not allowed in a worker")

        with pytest.raises(ValueError, match="not allowed in a worker"):
            get_env_metadata(_ClosingPendulum, env_validator=refuse)
        assert _ClosingPendulum.closed == [True, True]

    def test_creator_kwargs_and_bad_input(self):
        creator = EnvCreator(PendulumEnv, {"seed": 3})
        assert get_env_metadata(creator, {"seed": 3}).batch_size == ()
        with pytest.raises(RuntimeError, match="kwargs mismatch between EnvCreator"):
            get_env_metadata(creator, {"seed": 4})
        with pytest.raises(TypeError, match="an env or a callable returning one, got int"):
            get_env_metadata(3)
        made = env_creator(PendulumEnv)
        assert isinstance(made, EnvCreator) and isinstance(made(), PendulumEnv)


class TestMakeTensordict:
    def test_zero_transition_with_policy_entries(self):
        def policy(td):
            return td.set("action", torch.ones(1)).set("logits", torch.full((2,), 3.0))

        td = make_tensordict(PendulumEnv(), policy)
        assert {"logits", "action", "next"} <= set(td.keys())
        assert set(td["next"].keys()) == {
            "observation",
            "reward",
            "done",
            "terminated",
            "truncated",
        }
        for value in td.values(True, True):
            assert not value.any()

    def test_without_policy(self):
        td = make_tensordict(PendulumEnv())
        assert td["action"].shape == (1,) and td["next", "reward"].shape == (1,)
        assert isinstance(td, TensorDict)


def test_get_available_libraries():
    libraries = get_available_libraries()
    assert {"gymnasium", "gym[atari]", "dm_control", "envpool"} <= set(libraries)
    assert libraries["gymnasium"] is True  # a dependency of rl-envs
    assert libraries["dm_control"] == (importlib.util.find_spec("dm_control") is not None)
    from rl.envs.utils import get_available_libraries as from_utils  # TorchRL's path

    assert from_utils is get_available_libraries


@pytest.mark.parametrize("name", ["rl.envs._metadata", "rl.envs._libraries"])
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
