"""``rl.objectives.multiagent``: the multi-agent losses at TorchRL's import path.

TorchRL's QMIX script imports ``QMixerLoss`` from ``torchrl.objectives.multiagent``; it
lives in :mod:`rl.objectives` and is re-exported here so that path carries over. MAPPO and
IPPO use :class:`rl.objectives.ClipPPOLoss` with the group's keys, as in TorchRL.

Examples:
    >>> from rl.objectives.multiagent import QMixerLoss
    >>> from rl.objectives import QMixerLoss as same
    >>> QMixerLoss is same
    True
"""

from .._qmixer import QMixerLoss

__all__ = ["QMixerLoss"]
