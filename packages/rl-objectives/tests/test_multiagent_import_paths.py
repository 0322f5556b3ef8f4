"""TorchRL's multi-agent import paths carry over to rl."""

import rl.modules
import rl.objectives
from rl.modules.models import multiagent as models_multiagent
from rl.objectives import multiagent as objectives_multiagent


def test_modules_models_multiagent_path():
    for name in (
        "MultiAgentMLP",
        "MultiAgentConvNet",
        "MultiAgentNetBase",
        "QMixer",
        "VDNMixer",
        "Mixer",
    ):
        assert getattr(models_multiagent, name) is getattr(rl.modules, name), name
    assert sorted(models_multiagent.__all__) == [
        "Mixer",
        "MultiAgentConvNet",
        "MultiAgentMLP",
        "MultiAgentNetBase",
        "QMixer",
        "VDNMixer",
    ]


def test_objectives_multiagent_path():
    for name in ("IPPOLoss", "MAPPOLoss", "QMixerLoss"):
        assert getattr(objectives_multiagent, name) is getattr(rl.objectives, name), name
    assert objectives_multiagent.__all__ == ["IPPOLoss", "MAPPOLoss", "QMixerLoss"]
