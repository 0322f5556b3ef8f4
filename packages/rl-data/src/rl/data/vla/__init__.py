"""Vision-Language-Action data primitives (TorchRL's ``torchrl.data.vla``).

The key layout, the action tokenizers and the robot dataset metadata are contracts
shared with ``rl.envs`` (the action-tokenizer transform) and ``rl.objectives``: they
live in :mod:`rl.core` and are gathered here under TorchRL's path.
"""

from rl.core.vla import (
    ACTION_CHUNK_KEY,
    ACTION_IS_PAD_KEY,
    ACTION_KEY,
    ACTION_TOKENS_KEY,
    IMAGE_KEY,
    INSTRUCTION_KEY,
    OBSERVATION_KEY,
    STATE_KEY,
    VLA_ACTION_KEY,
    ActionSpace,
    ActionTokenizerBase,
    GripperMode,
    RobotDatasetMetadata,
    UniformActionTokenizer,
    VLAAction,
    VLAImages,
    VLAObservation,
    VocabTailActionTokenizer,
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
