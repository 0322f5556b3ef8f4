"""MuJoCo tasks on the official ``mujoco`` bindings (``pip install "rl-envs[mujoco]"``)."""

from ._env import MujocoEnv
from ._locomotion import AntEnv, HopperEnv, HumanoidEnv, Walker2dEnv

__all__ = ["AntEnv", "HopperEnv", "HumanoidEnv", "MujocoEnv", "Walker2dEnv"]
