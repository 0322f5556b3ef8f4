"""rl.data.vla gathers the VLA primitives under TorchRL's ``torchrl.data.vla`` path."""

import rl.core.vla
import rl.data
import rl.data.vla


def test_same_objects_as_rl_core():
    for name in rl.data.vla.__all__:
        assert getattr(rl.data.vla, name) is getattr(rl.core.vla, name)
    # TorchRL also exposes the tokenizers and the metadata at ``torchrl.data``
    assert rl.data.UniformActionTokenizer is rl.core.vla.UniformActionTokenizer
    assert rl.data.RobotDatasetMetadata is rl.core.vla.RobotDatasetMetadata
