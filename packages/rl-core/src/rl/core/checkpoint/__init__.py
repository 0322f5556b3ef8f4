"""Checkpoints of named components (``torchrl.checkpoint`` in TorchRL).

:class:`Checkpoint` saves modules, optimizers, replay buffers, JSON values and the global
RNG state under one manifest, atomically, as a directory or an archive, and restores all
or some of them; :class:`CheckpointRotation` keeps the last N checkpoints of a run and the
best by a metric. Loading never unpickles: tensors come from tensor files, structures from
JSON, ``torch.save`` payloads through ``weights_only=True``. The files are TorchRL's
layout, so TorchRL and rl read each other's checkpoints.
"""

from ..trainers import CheckpointError
from ._adapters import (
    CheckpointAdapter,
    CheckpointOptions,
    DumpLoadCheckpointAdapter,
    JSONCheckpointAdapter,
    StateDictCheckpointAdapter,
    StateDictFormat,
)
from ._checkpoint import (
    Checkpoint,
    CheckpointBest,
    CheckpointFormat,
    CheckpointLoadResult,
    CheckpointMetricMode,
    CheckpointStrictness,
)
from ._rng import GlobalRNGState
from ._rotation import CheckpointRotation

__all__ = [
    "Checkpoint",
    "CheckpointAdapter",
    "CheckpointBest",
    "CheckpointError",
    "CheckpointFormat",
    "CheckpointLoadResult",
    "CheckpointMetricMode",
    "CheckpointOptions",
    "CheckpointRotation",
    "CheckpointStrictness",
    "DumpLoadCheckpointAdapter",
    "GlobalRNGState",
    "JSONCheckpointAdapter",
    "StateDictCheckpointAdapter",
    "StateDictFormat",
]
