"""MuJoCo tasks on the official ``mujoco`` bindings (``pip install "rl-envs[mujoco]"``)."""

from ._env import MujocoEnv
from ._locomotion import AntEnv, HopperEnv, HumanoidEnv, Walker2dEnv
from ._satellite import SatelliteEnv

__all__ = ["AntEnv", "HopperEnv", "HumanoidEnv", "MujocoEnv", "SatelliteEnv", "Walker2dEnv"]
