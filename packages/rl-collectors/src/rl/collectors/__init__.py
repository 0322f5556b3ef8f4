"""rl.collectors: data collectors that batch a policy acting in environments."""

from rl.envs import RandomPolicy

from ._async_batched import AsyncBatchedCollector
from ._base import BaseCollector
from ._evaluator import Evaluator
from ._interruptor import Interruptor
from ._multi import (
    MultiAsyncCollector,
    MultiaSyncDataCollector,
    MultiCollector,
    MultiSyncCollector,
    MultiSyncDataCollector,
)
from ._profile import ProfileConfig
from ._single import Collector, SyncDataCollector
from ._single_async import AsyncCollector
from ._utils import split_trajectories
from ._weight_sync import (
    InitialSyncTransport,
    TransportBackend,
    WeightStrategy,
    WeightSyncBackend,
    WeightSyncScheme,
)
from ._weight_sync_process import (
    MPTransport,
    MultiProcessWeightSyncScheme,
    NoWeightSyncScheme,
    SharedMemTransport,
    SharedMemWeightSyncScheme,
)
from ._weight_sync_remote import (
    DistributedTransport,
    DistributedWeightSyncScheme,
    RayModuleTransformScheme,
    RayTransport,
    RayWeightSyncScheme,
    RPCTransport,
    RPCWeightSyncScheme,
)
from ._weight_update import (
    MultiProcessedWeightUpdater,
    RayWeightUpdater,
    RemoteModuleWeightUpdater,
    VanillaWeightUpdater,
    WeightUpdaterBase,
)

__version__ = "0.1.0"

__all__ = [
    "AsyncBatchedCollector",
    "AsyncCollector",
    "BaseCollector",
    "Collector",
    "DistributedTransport",
    "DistributedWeightSyncScheme",
    "Evaluator",
    "InitialSyncTransport",
    "Interruptor",
    "MPTransport",
    "MultiProcessWeightSyncScheme",
    "NoWeightSyncScheme",
    "RPCTransport",
    "RPCWeightSyncScheme",
    "RayModuleTransformScheme",
    "RayTransport",
    "RayWeightSyncScheme",
    "SharedMemTransport",
    "SharedMemWeightSyncScheme",
    "TransportBackend",
    "WeightStrategy",
    "WeightSyncBackend",
    "WeightSyncScheme",
    "MultiAsyncCollector",
    "MultiCollector",
    "MultiProcessedWeightUpdater",
    "MultiSyncCollector",
    "MultiSyncDataCollector",
    "MultiaSyncDataCollector",
    "ProfileConfig",
    "RandomPolicy",
    "RayWeightUpdater",
    "RemoteModuleWeightUpdater",
    "SyncDataCollector",
    "VanillaWeightUpdater",
    "WeightUpdaterBase",
    "split_trajectories",
]
