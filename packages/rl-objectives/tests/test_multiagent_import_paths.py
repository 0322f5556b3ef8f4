"""TorchRL's multi-agent import paths carry over to rl."""

import rl.modules
import rl.objectives
from rl.modules.models import multiagent as models_multiagent
from rl.objectives import multiagent as objectives_multiagent


def test_modules_models_multiagent_path():
    for name in ("MultiAgentMLP", "MultiAgentConvNet", "QMixer", "VDNMixer", "Mixer"):
        assert getattr(models_multiagent, name) is getattr(rl.modules, name), name
    assert sorted(models_multiagent.__all__) == [
        "Mixer",
        "MultiAgentConvNet",
        "MultiAgentMLP",
        "QMixer",
        "VDNMixer",
    ]


def test_objectives_multiagent_path():
    assert objectives_multiagent.QMixerLoss is rl.objectives.QMixerLoss
    assert objectives_multiagent.__all__ == ["QMixerLoss"]
