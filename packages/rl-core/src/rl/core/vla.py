"""Vision-Language-Action contracts shared by ``rl.envs``, ``rl.data`` and ``rl.objectives``.

The TensorDict key layout of VLA data, its typed containers, the action tokenizers
and the robot dataset metadata (TorchRL's ``torchrl.data.vla``, also gathered as
:mod:`rl.data.vla`).
"""

from ._action_tokenizers import (
    ActionTokenizerBase,
    UniformActionTokenizer,
    VocabTailActionTokenizer,
)
from ._robot_metadata import ActionSpace, GripperMode, RobotDatasetMetadata
from ._vla_containers import VLAAction, VLAImages, VLAObservation
from ._vla_schema import (
    ACTION_CHUNK_KEY,
    ACTION_IS_PAD_KEY,
    ACTION_KEY,
    ACTION_TOKENS_KEY,
    IMAGE_KEY,
    INSTRUCTION_KEY,
    OBSERVATION_KEY,
    STATE_KEY,
    VLA_ACTION_KEY,
    validate_vla_tensordict,
)

__all__ = [
    "ACTION_CHUNK_KEY",
    "ACTION_IS_PAD_KEY",
    "ACTION_KEY",
    "ACTION_TOKENS_KEY",
    "IMAGE_KEY",
    "INSTRUCTION_KEY",
    "OBSERVATION_KEY",
    "STATE_KEY",
    "VLA_ACTION_KEY",
    "ActionSpace",
    "ActionTokenizerBase",
    "GripperMode",
    "RobotDatasetMetadata",
    "UniformActionTokenizer",
    "VLAAction",
    "VLAImages",
    "VLAObservation",
    "VocabTailActionTokenizer",
    "validate_vla_tensordict",
]
