"""Ready-made trainers for the common algorithms (``torchrl.trainers.algorithms``).

Each is a :class:`~rl.core.trainers.Trainer` with the hooks its algorithm needs already
registered: advantage estimation for the on-policy ones, the replay buffer, target-network
updates and policy-weight pushes for the off-policy ones, and the usual batch statistics.
They take built objects (collector, loss module, optimizer, replay buffer, logger) and
import no other ``rl`` package.
"""

from .._dreamer_v3 import DreamerV3OptimizationStepper, DreamerV3Optimizer, DreamerV3UpdateRatio
from .._grpo import GRPOTrainer
from ._dqn import DQNTrainer
from ._off_policy import DDPGTrainer, SACTrainer
from ._offline import CQLTrainer, IQLTrainer
from ._offline_to_online import (
    OfflineToOnlineAnnealHook,
    OfflineToOnlineReplayBufferHook,
    OfflineToOnlineTrainer,
)
from ._on_policy import A2CTrainer, OnPolicyTrainer, PPOTrainer, ReinforceTrainer
from ._td3 import TD3OptimizationStepper, TD3Trainer

__all__ = [
    "A2CTrainer",
    "CQLTrainer",
    "DDPGTrainer",
    "DQNTrainer",
    "DreamerV3OptimizationStepper",
    "DreamerV3Optimizer",
    "DreamerV3UpdateRatio",
    "GRPOTrainer",
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
]
