"""``rl.envs.custom``: the native environments TorchRL lists under ``torchrl.envs.custom``.

The classes live in ``rl.envs`` (``rl.envs.TicTacToeEnv``); this module lets code that
imports them from ``torchrl.envs.custom`` carry over.
"""

from ._native import PendulumEnv, TicTacToeEnv, ToyVLAEnv

__all__ = ["PendulumEnv", "TicTacToeEnv", "ToyVLAEnv"]
