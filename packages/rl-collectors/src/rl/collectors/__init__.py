"""rl.collectors: data collectors that batch a policy acting in environments."""

from ._multi import (
    MultiAsyncCollector,
    MultiaSyncDataCollector,
    MultiCollector,
    MultiSyncCollector,
    MultiSyncDataCollector,
)
from ._single import Collector, SyncDataCollector
from ._utils import split_trajectories

__version__ = "0.1.0"

__all__ = [
    "Collector",
    "MultiAsyncCollector",
    "MultiCollector",
    "MultiSyncCollector",
    "MultiSyncDataCollector",
    "MultiaSyncDataCollector",
    "SyncDataCollector",
    "split_trajectories",
]
