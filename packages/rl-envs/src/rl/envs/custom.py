"""``rl.envs.custom``: the native environments TorchRL lists under ``torchrl.envs.custom``.

The classes live in ``rl.envs`` (``rl.envs.TicTacToeEnv``); this module lets code that
imports them from ``torchrl.envs.custom`` carry over. ``LLMHashingEnv`` lives in
``rl.envs.llm`` (it needs ``rl-envs[llm]``) and is imported from there on first use;
``ChessEnv``'s module loads on first use too (python-chess, ``rl-envs[chess]``, only when an
env is built).
"""

import importlib.util

from ._native import (
    AntEnv,
    FinancialRegimeEnv,
    HopperEnv,
    HumanoidEnv,
    MujocoEnv,
    PendulumEnv,
    SatelliteEnv,
    TicTacToeEnv,
    ToyVLAEnv,
    Walker2dEnv,
)

__all__ = [
    "AntEnv",
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
__all__.append("ChessEnv")  # its module loads on first use (see __getattr__)
if importlib.util.find_spec("rl.data") is not None:
    __all__.append("LLMHashingEnv")


def __getattr__(name: str):
    if name == "ChessEnv":
        from ._native._chess import ChessEnv

        globals()[name] = ChessEnv
        return ChessEnv
    if name == "LLMHashingEnv":
        from .llm._hashing import LLMHashingEnv

        globals()[name] = LLMHashingEnv
        return LLMHashingEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
