"""rl.core: tensor specs, exploration type, seeding, the n-step return, the tensor-policy
protocol, the trainer, its loggers
and checkpoints."""

from tensordict.utils import NestedKey

from ._action_chunk import ACTION_CHUNK_KEY, ACTION_IS_PAD_KEY, VLA_ACTION_KEY
from ._action_tokenizers import (
    ActionTokenizerBase,
    UniformActionTokenizer,
    VocabTailActionTokenizer,
)
from ._exploration import (
    ExplorationType,
    exploration_type,
    set_exploration_type,
    set_thread_exploration_type,
)
from ._n_step_return import n_step_return
from ._object_state import load_object_state, object_state
from ._robot_metadata import RobotDatasetMetadata
from ._seed import seed_everything
from ._service_backend import (
    current_service_backend,
    normalize_service_backend,
    service_backend,
)
from ._specs import *  # noqa: F403  (the spec classes and their deprecated aliases)
from ._specs import __all__ as _spec_names
from ._tensor_policy import TensorPolicy, tensor_policy
from ._vla_containers import VLAAction, VLAImages, VLAObservation
from ._vla_schema import ACTION_TOKENS_KEY, validate_vla_tensordict
from .loggers import *  # noqa: F403  (CSV, TensorBoard, W&B and MLflow loggers)
from .loggers import __all__ as _logger_names
from .trainers import *  # noqa: F403  (the trainer and its hooks)
from .trainers import _ALGORITHM_NAMES, _HELPER_NAMES
from .trainers import __all__ as _trainer_names

__version__ = "0.1.0"

# rl.core.checkpoint (TorchRL's torchrl.checkpoint) loads on first use; CheckpointError is
# the trainers' own, imported above
_CHECKPOINT_NAMES = (
    "Checkpoint",
    "CheckpointAdapter",
    "CheckpointBest",
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
)

__all__ = [
    *_spec_names,
    *_trainer_names,
    *_CHECKPOINT_NAMES,
    *_logger_names,
    "ACTION_CHUNK_KEY",
    "ACTION_IS_PAD_KEY",
    "ACTION_TOKENS_KEY",
    "VLA_ACTION_KEY",
    "ActionTokenizerBase",
    "RobotDatasetMetadata",
    "UniformActionTokenizer",
    "VLAAction",
    "VLAImages",
    "VLAObservation",
    "VocabTailActionTokenizer",
    "validate_vla_tensordict",
    "ExplorationType",
    "NestedKey",
    "TensorPolicy",
    "current_service_backend",
    "exploration_type",
    "load_object_state",
    "n_step_return",
    "normalize_service_backend",
    "object_state",
    "seed_everything",
    "service_backend",
    "set_exploration_type",
    "set_thread_exploration_type",
    "tensor_policy",
]


def __getattr__(name: str):
    import importlib  # noqa: PLC0415

    if name in _CHECKPOINT_NAMES:
        module = importlib.import_module(".checkpoint", __name__)
    elif name in _ALGORITHM_NAMES or name in _HELPER_NAMES:
        module = importlib.import_module(".trainers", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value
    return value
