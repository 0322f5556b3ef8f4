"""rl.collectors: data collectors that batch a policy acting in environments."""

from rl.envs import RandomPolicy

from ._base import BaseCollector
from ._multi import (
    MultiAsyncCollector,
    MultiaSyncDataCollector,
    MultiCollector,
    MultiSyncCollector,
    MultiSyncDataCollector,
)
from ._profile import ProfileConfig
from ._single import Collector, SyncDataCollector
from ._utils import split_trajectories
from ._weight_update import (
    MultiProcessedWeightUpdater,
    RemoteModuleWeightUpdater,
    VanillaWeightUpdater,
    WeightUpdaterBase,
)

__version__ = "0.1.0"

__all__ = [
    "BaseCollector",
    "Collector",
    "MultiAsyncCollector",
    "MultiCollector",
    "MultiProcessedWeightUpdater",
    "MultiSyncCollector",
    "MultiSyncDataCollector",
    "MultiaSyncDataCollector",
    "ProfileConfig",
    "RandomPolicy",
    "RemoteModuleWeightUpdater",
    "SyncDataCollector",
    "VanillaWeightUpdater",
    "WeightUpdaterBase",
    "split_trajectories",
]
