"""``rl.objectives.multiagent``: the multi-agent losses at TorchRL's import path.

TorchRL's multi-agent scripts import ``QMixerLoss``, ``MAPPOLoss`` and ``IPPOLoss`` from
``torchrl.objectives.multiagent``; they live in :mod:`rl.objectives` and are re-exported
here so that path carries over.

Examples:
    >>> from rl.objectives.multiagent import QMixerLoss
    >>> from rl.objectives import QMixerLoss as same
    >>> QMixerLoss is same
    True
"""

from .._ppo import IPPOLoss, MAPPOLoss
from .._qmixer import QMixerLoss

__all__ = ["IPPOLoss", "MAPPOLoss", "QMixerLoss"]
