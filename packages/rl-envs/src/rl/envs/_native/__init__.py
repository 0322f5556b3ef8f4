"""Native torch environments, batched and vectorized over ``batch_size``."""

from ._cartpole import CartPoleEnv
from ._pendulum import PendulumEnv
from ._tictactoe import TicTacToeEnv
from ._toy_vla import ToyVLAEnv

__all__ = [
    "AntEnv",
    "CartPoleEnv",
    "ChessEnv",
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

# the MuJoCo tasks, the trading env and chess load on first use: ``import rl.envs`` does
# not pay for their modules (mujoco and python-chess are imported only when an env is built)
_LAZY = {
    "ChessEnv": "._chess",
    "AntEnv": "._mujoco",
    "HopperEnv": "._mujoco",
    "HumanoidEnv": "._mujoco",
    "MujocoEnv": "._mujoco",
    "SatelliteEnv": "._mujoco",
    "Walker2dEnv": "._mujoco",
    "FinancialRegimeEnv": "._trading",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
