"""``rl.modules.models.multiagent``: the multi-agent networks at TorchRL's import path.

TorchRL's multi-agent scripts import ``MultiAgentMLP`` and the mixers from
``torchrl.modules.models.multiagent``; they live in :mod:`rl.modules.models` and are
re-exported here so that path carries over.

Examples:
    >>> from rl.modules.models.multiagent import MultiAgentMLP, QMixer, VDNMixer
    >>> from rl.modules import MultiAgentMLP as same
    >>> MultiAgentMLP is same
    True
"""

from ._mixers import Mixer, QMixer, VDNMixer
from ._multiagent import MultiAgentConvNet, MultiAgentMLP, MultiAgentNetBase

__all__ = ["Mixer", "MultiAgentConvNet", "MultiAgentMLP", "MultiAgentNetBase", "QMixer", "VDNMixer"]
