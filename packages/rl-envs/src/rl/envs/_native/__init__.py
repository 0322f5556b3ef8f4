"""Native torch environments, batched and vectorized over ``batch_size``."""

from ._cartpole import CartPoleEnv
from ._pendulum import PendulumEnv
from ._tictactoe import TicTacToeEnv

__all__ = ["CartPoleEnv", "PendulumEnv", "TicTacToeEnv"]
