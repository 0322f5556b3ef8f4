"""Native torch environments, batched and vectorized over ``batch_size``."""

from ._cartpole import CartPoleEnv
from ._mujoco import AntEnv, HopperEnv, HumanoidEnv, MujocoEnv, SatelliteEnv, Walker2dEnv
from ._pendulum import PendulumEnv
from ._tictactoe import TicTacToeEnv
from ._toy_vla import ToyVLAEnv
from ._trading import FinancialRegimeEnv

__all__ = [
    "AntEnv",
    "CartPoleEnv",
    "FinancialRegimeEnv",
    "HopperEnv",
    "HumanoidEnv",
    "MujocoEnv",
    "PendulumEnv",
    "SatelliteEnv",
    "TicTacToeEnv",
    "ToyVLAEnv",
    "Walker2dEnv",
]
