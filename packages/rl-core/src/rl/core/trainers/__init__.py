"""The trainer, its hooks and exact checkpoints (``torchrl.trainers`` in TorchRL).

The trainer and its hooks import no other ``rl`` package: the collector, loss, replay
buffer and environments are duck-typed. The config-driven builders of :mod:`.helpers`
(TorchRL's ``torchrl.trainers.helpers``) build them, with the ``rl-core[helpers]`` extra,
importing those packages when a builder runs.
"""

from ._checkpoint import CheckpointError, atomic_save, load_checkpoint
from ._dreamer_v3 import DreamerV3OptimizationStepper, DreamerV3Optimizer, DreamerV3UpdateRatio
from ._grpo import GRPOTrainer
from ._hooks_data import (
    BatchSubSampler,
    ReplayBufferTrainer,
    RewardNormalizer,
    SelectKeys,
    ValueEstimatorHook,
    mask_batch,
)
from ._hooks_log import CountFramesLog, LogScalar, LogTiming, LogValidationReward, UTDRHook
from ._hooks_optim import (
    ClearCudaCache,
    EarlyStopping,
    LRSchedulerHook,
    OptimizerHook,
    TargetNetUpdaterHook,
    UpdateWeights,
)
from ._progress import EpisodeReturns, ProgressBar
from ._steppers import (
    DefaultOptimizationStepper,
    MixedPrecisionOptimizationStepper,
    OptimizationStepper,
)
from ._trainer import HOOK_POINTS, REWARD_KEY, Trainer, TrainerHookBase

__all__ = [
    "HOOK_POINTS",
    "REWARD_KEY",
    "BatchSubSampler",
    "CheckpointError",
    "ClearCudaCache",
    "CountFramesLog",
    "DefaultOptimizationStepper",
    "DreamerV3OptimizationStepper",
    "DreamerV3Optimizer",
    "DreamerV3UpdateRatio",
    "EarlyStopping",
    "EpisodeReturns",
    "GRPOTrainer",
    "LRSchedulerHook",
    "LogScalar",
    "LogTiming",
    "LogValidationReward",
    "MixedPrecisionOptimizationStepper",
    "OptimizationStepper",
    "OptimizerHook",
    "ProgressBar",
    "ReplayBufferTrainer",
    "RewardNormalizer",
    "SelectKeys",
    "TargetNetUpdaterHook",
    "Trainer",
    "TrainerHookBase",
    "UTDRHook",
    "UpdateWeights",
    "ValueEstimatorHook",
    "atomic_save",
    "load_checkpoint",
    "mask_batch",
]


# TorchRL keeps its algorithm trainers in ``torchrl.trainers.algorithms``; here they are
# also attributes of ``rl.core.trainers`` (and ``rl.core``), loaded on first use
_ALGORITHM_NAMES = (
    "A2CTrainer",
    "CQLTrainer",
    "DDPGTrainer",
    "DQNTrainer",
    "IQLTrainer",
    "OfflineToOnlineAnnealHook",
    "OfflineToOnlineReplayBufferHook",
    "OfflineToOnlineTrainer",
    "OnPolicyTrainer",
    "PPOTrainer",
    "ReinforceTrainer",
    "SACTrainer",
    "TD3OptimizationStepper",
    "TD3Trainer",
)


# TorchRL's config-driven builders (``torchrl.trainers.helpers``): attributes here too,
# loaded on first use (they need rl-core[helpers] only when called)
_HELPER_NAMES = (
    "A2CLossConfig",
    "ContinuousModelConfig",
    "DiscreteModelConfig",
    "DreamerConfig",
    "EnvConfig",
    "LoggerConfig",
    "LossConfig",
    "OffPolicyCollectorConfig",
    "OnPolicyCollectorConfig",
    "PPOLossConfig",
    "REDQModelConfig",
    "ReplayArgsConfig",
    "TrainerConfig",
    "correct_for_frame_skip",
    "get_norm_state_dict",
    "get_stats_random_rollout",
    "initialize_observation_norm_transforms",
    "make_collector_offpolicy",
    "make_collector_onpolicy",
    "make_dqn_actor",
    "make_dqn_loss",
    "make_dreamer",
    "make_env_transforms",
    "make_replay_buffer",
    "make_target_updater",
    "make_trainer",
    "parallel_env_constructor",
    "retrieve_observation_norms_state_dict",
    "sync_async_collector",
    "sync_sync_collector",
    "transformed_env_constructor",
)


def __getattr__(name: str):
    if name in _ALGORITHM_NAMES:
        from . import algorithms as module  # noqa: PLC0415
    elif name in _HELPER_NAMES:
        from . import helpers as module  # noqa: PLC0415
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value
    return value
