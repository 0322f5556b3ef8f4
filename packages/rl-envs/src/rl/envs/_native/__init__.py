"""Native torch environments, batched and vectorized over ``batch_size``."""

from ._cartpole import CartPoleEnv
from ._pendulum import PendulumEnv
from ._tictactoe import TicTacToeEnv
from ._toy_vla import ToyVLAEnv

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

# the MuJoCo tasks and the trading env load on first use: ``import rl.envs`` does not pay
# for their modules (the mujoco library itself is imported only when an env is built)
_LAZY = {
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
