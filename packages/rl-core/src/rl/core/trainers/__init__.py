"""The trainer, its hooks and exact checkpoints (``torchrl.trainers`` in TorchRL).

Nothing here imports another ``rl`` package: the collector, loss, replay buffer and
environments are duck-typed.
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
from .algorithms import (
    A2CTrainer,
    CQLTrainer,
    DDPGTrainer,
    DQNTrainer,
    IQLTrainer,
    OfflineToOnlineAnnealHook,
    OfflineToOnlineReplayBufferHook,
    OfflineToOnlineTrainer,
    OnPolicyTrainer,
    PPOTrainer,
    ReinforceTrainer,
    SACTrainer,
    TD3OptimizationStepper,
    TD3Trainer,
)

__all__ = [
    "HOOK_POINTS",
    "REWARD_KEY",
    "A2CTrainer",
    "BatchSubSampler",
    "CQLTrainer",
    "CheckpointError",
    "ClearCudaCache",
    "CountFramesLog",
    "DDPGTrainer",
    "DQNTrainer",
    "DefaultOptimizationStepper",
    "DreamerV3OptimizationStepper",
    "DreamerV3Optimizer",
    "DreamerV3UpdateRatio",
    "EarlyStopping",
    "EpisodeReturns",
    "GRPOTrainer",
    "IQLTrainer",
    "LRSchedulerHook",
    "LogScalar",
    "LogTiming",
    "LogValidationReward",
    "MixedPrecisionOptimizationStepper",
    "OfflineToOnlineAnnealHook",
    "OfflineToOnlineReplayBufferHook",
    "OfflineToOnlineTrainer",
    "OnPolicyTrainer",
    "OptimizationStepper",
    "OptimizerHook",
    "PPOTrainer",
    "ProgressBar",
    "ReinforceTrainer",
    "ReplayBufferTrainer",
    "RewardNormalizer",
    "SACTrainer",
    "SelectKeys",
    "TD3OptimizationStepper",
    "TD3Trainer",
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
