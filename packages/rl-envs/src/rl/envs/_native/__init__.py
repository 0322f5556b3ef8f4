"""Native torch environments, batched and vectorized over ``batch_size``."""

from ._cartpole import CartPoleEnv
from ._pendulum import PendulumEnv
from ._tictactoe import TicTacToeEnv
from ._toy_vla import ToyVLAEnv

__all__ = ["CartPoleEnv", "PendulumEnv", "TicTacToeEnv", "ToyVLAEnv"]
