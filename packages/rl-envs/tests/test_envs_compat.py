"""TorchRL's module paths ``torchrl.envs.utils`` and ``torchrl.envs.libs.gym`` under ``rl.envs``."""

from __future__ import annotations

import doctest
import importlib

import pytest

import rl.core
import rl.envs


class TestModulePaths:
    def test_libs_gym(self):
        from rl.envs.libs import GymEnv as LibsGymEnv
        from rl.envs.libs.gym import GymEnv, GymWrapper

        assert GymEnv is LibsGymEnv is rl.envs.GymEnv
        assert GymWrapper is rl.envs.GymWrapper

    def test_utils(self):
        from rl.envs import utils

        assert utils.step_mdp is rl.envs.step_mdp
        assert utils.check_env_specs is rl.envs.check_env_specs
        assert utils.RandomPolicy is rl.envs.RandomPolicy
        assert utils.ExplorationType is rl.core.ExplorationType
        assert utils.set_exploration_type is rl.core.set_exploration_type
        assert utils.exploration_type is rl.core.exploration_type

    @pytest.mark.parametrize("module", ["rl.envs.utils", "rl.envs.libs", "rl.envs.libs.gym"])
    def test_all_names_exist(self, module):
        mod = importlib.import_module(module)
        assert mod.__all__ and all(getattr(mod, name) is not None for name in mod.__all__)


@pytest.mark.parametrize("module", ["rl.envs.utils", "rl.envs._td_utils", "rl.envs.libs.gym"])
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
