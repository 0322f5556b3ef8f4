"""Native torch environments, batched and vectorized over ``batch_size``."""

from ._cartpole import CartPoleEnv
from ._pendulum import PendulumEnv

__all__ = ["CartPoleEnv", "PendulumEnv"]
