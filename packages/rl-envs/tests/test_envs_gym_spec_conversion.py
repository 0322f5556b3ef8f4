"""register_gym_spec_conversion: user conversions of gym spaces to specs, their lookup
through the space's MRO, their use by GymWrapper, and errors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import rl.envs
from rl.core import Bounded, Unbounded
from rl.envs import GymWrapper, _gym_spaces, check_env_specs, register_gym_spec_conversion
from rl.envs._gym_spaces import space_leaves


@pytest.fixture(autouse=True)
def _clean_registry():
    saved = dict(_gym_spaces._CONVERSIONS)
    yield
    _gym_spaces._CONVERSIONS.clear()
    _gym_spaces._CONVERSIONS.update(saved)


class Parent(gym.spaces.Space):
    def __init__(self):
        super().__init__(shape=(2,), dtype=np.float32)

    def sample(self, mask=None, probability=None):
        return np.zeros(2, np.float32)

    def contains(self, x):
        return True


class Child(Parent):
    pass


class Ring(gym.spaces.Box):
    """A Box subclass: the built-in Box conversion applies unless one is registered."""


class RingEnv(gym.Env):
    """Observation ``[t, -t]`` in a ``Ring`` space; ends after 4 steps."""

    def __init__(self):
        self.observation_space = Ring(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0, 0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.array([self.t, -self.t], np.float32)
        return obs, 1.0, self.t >= 4, False, {}


def _unbounded(space, **kwargs):
    return Unbounded(shape=space.shape, dtype=torch.float32)


class TestRegisterGymSpecConversion:
    def test_exported(self):
        from rl.envs.libs.gym import register_gym_spec_conversion as from_libs

        assert from_libs is register_gym_spec_conversion
        assert "register_gym_spec_conversion" in rl.envs.__all__

    def test_closest_class_wins_whatever_the_order(self):
        # the child first, then the parent: each space still gets its own
        @register_gym_spec_conversion(Child)
        def child(space, **kwargs):
            return Unbounded(shape=(3,))

        @register_gym_spec_conversion(Parent)
        def parent(space, **kwargs):
            return Unbounded(shape=(5,))

        assert space_leaves(Parent(), key=("x",))[0].spec.shape == (5,)
        assert space_leaves(Child(), key=("x",))[0].spec.shape == (3,)

    def test_subclass_uses_parent_conversion(self):
        register_gym_spec_conversion(Parent)(lambda space, **kw: Unbounded(shape=(7,)))
        assert space_leaves(Child(), key=("x",))[0].spec.shape == (7,)

    def test_returns_the_function_and_gets_arguments(self):
        seen = {}

        def conversion(space, **kwargs):
            seen.update(kwargs)
            return Unbounded(shape=(2,))

        assert register_gym_spec_conversion(Parent)(conversion) is conversion
        leaf = space_leaves(Parent(), batch=(3,), categorical=True, key=("x",))[0]
        assert leaf.spec.shape == (3, 2)  # the batch dims are prepended
        assert seen["categorical_action_encoding"] is True and seen["batch_size"] == ()

    def test_built_in_box_subclass_until_registered(self):
        assert isinstance(GymWrapper(RingEnv()).observation_spec["observation"], Bounded)
        register_gym_spec_conversion(Ring)(_unbounded)
        env = GymWrapper(RingEnv())
        assert isinstance(env.observation_spec["observation"], Unbounded)
        rollout = env.rollout(10)
        assert rollout["next", "observation"][:, 0].tolist() == [1.0, 2.0, 3.0, 4.0]
        check_env_specs(env)

    def test_string_path(self):
        register_gym_spec_conversion("box.Box")(_unbounded)
        spec = space_leaves(gym.spaces.Box(0.0, 1.0, (2,), np.float32), key=("x",))[0].spec
        assert isinstance(spec, Unbounded)
        # a path gymnasium does not have is ignored
        register_gym_spec_conversion("NoSuchSpace")(_unbounded)
        spec = space_leaves(gym.spaces.Discrete(3), key=("x",))[0].spec
        assert spec.shape == (3,)

    def test_unregistered_space_error(self):
        with pytest.raises(
            TypeError, match="Parent.* is not supported.*register_gym_spec_conversion"
        ):
            space_leaves(Parent(), key=("x",))

    def test_bad_key(self):
        with pytest.raises(TypeError, match="gym space class or its path.*got int"):
            register_gym_spec_conversion(3)


def test_docstring_examples():
    import doctest
    import importlib

    result = doctest.testmod(
        importlib.import_module("rl.envs._gym_spaces"), optionflags=doctest.ELLIPSIS
    )
    assert result.attempted > 0 and result.failed == 0
