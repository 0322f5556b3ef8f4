"""Replay buffers and their storages, samplers and writers."""

from rl.data.replay_buffers._buffers import ReplayBuffer
from rl.data.replay_buffers._checkpointers import (
    CompressedListStorageCheckpointer,
    FlatStorageCheckpointer,
    H5StorageCheckpointer,
    ListStorageCheckpointer,
    NestedStorageCheckpointer,
    StorageCheckpointerBase,
    StorageEnsembleCheckpointer,
    TensorStorageCheckpointer,
)
from rl.data.replay_buffers._conditional_update import ConditionalUpdateResult
from rl.data.replay_buffers._ensemble import (
    ReplayBufferEnsemble,
    SamplerEnsemble,
    StorageEnsemble,
    WriterEnsemble,
)
from rl.data.replay_buffers._her import HERReplayBuffer, HindsightStrategy
from rl.data.replay_buffers._offline_to_online import (
    OfflineToOnlineReplayBuffer,
    prefill_replay_buffer,
)
from rl.data.replay_buffers._query import (
    Trajectory,
    TrajectoryPredicate,
    filter_trajectories,
    iter_trajectories,
    traj,
)
from rl.data.replay_buffers._remote import RemoteTensorDictReplayBuffer
from rl.data.replay_buffers._sample_units import SampleUnit, Sequence, Transition
from rl.data.replay_buffers._scheduler import (
    LambdaScheduler,
    LinearScheduler,
    ParameterScheduler,
    SchedulerList,
    StepScheduler,
)
from rl.data.replay_buffers._td_buffers import (
    PrioritizedReplayBuffer,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from rl.data.replay_buffers._ted import (
    DEFAULT_DONE_KEYS,
    Flat2TED,
    H5Combine,
    H5Split,
    Nested2TED,
    TED2Flat,
    TED2Nested,
)
from rl.data.replay_buffers._trajectories import find_start_stop_traj
from rl.data.replay_buffers.samplers import (
    ConsumingSampler,
    PrioritizedSampler,
    PrioritizedSliceSampler,
    PromptGroupSampler,
    RandomSampler,
    Sampler,
    SamplerWithoutReplacement,
    SliceSampler,
    SliceSamplerWithoutReplacement,
    StalenessAwareSampler,
    StreamingSliceSampler,
)
from rl.data.replay_buffers.storages import (
    CompressedListStorage,
    LazyMemmapStorage,
    LazyStackStorage,
    LazyTensorStorage,
    ListStorage,
    Storage,
    TensorStorage,
)
from rl.data.replay_buffers.writers import (
    ImmutableDatasetWriter,
    RoundRobinWriter,
    TensorDictMaxValueWriter,
    TensorDictRoundRobinWriter,
    Writer,
)

__all__ = [
    "DEFAULT_DONE_KEYS",
    "prefill_replay_buffer",
    "OfflineToOnlineReplayBuffer",
    "HindsightStrategy",
    "HERReplayBuffer",
    "ImmutableDatasetWriter",
    "CompressedListStorage",
    "ConsumingSampler",
    "ConditionalUpdateResult",
    "find_start_stop_traj",
    "filter_trajectories",
    "iter_trajectories",
    "traj",
    "Trajectory",
    "TrajectoryPredicate",
    "CompressedListStorageCheckpointer",
    "Flat2TED",
    "H5Combine",
    "H5Split",
    "H5StorageCheckpointer",
    "Nested2TED",
    "NestedStorageCheckpointer",
    "StorageEnsembleCheckpointer",
    "TED2Flat",
    "TED2Nested",
    "FlatStorageCheckpointer",
    "LambdaScheduler",
    "LazyMemmapStorage",
    "LazyStackStorage",
    "LazyTensorStorage",
    "LinearScheduler",
    "ListStorage",
    "ListStorageCheckpointer",
    "ParameterScheduler",
    "PrioritizedReplayBuffer",
    "PrioritizedSampler",
    "PrioritizedSliceSampler",
    "PromptGroupSampler",
    "RandomSampler",
    "RayReplayBuffer",
    "RemoteTensorDictReplayBuffer",
    "ReplayBuffer",
    "ReplayBufferEnsemble",
    "RoundRobinWriter",
    "Sampler",
    "SamplerEnsemble",
    "SamplerWithoutReplacement",
    "SampleUnit",
    "Sequence",
    "SchedulerList",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
    "StalenessAwareSampler",
    "StepScheduler",
    "StreamingSliceSampler",
    "Storage",
    "StorageCheckpointerBase",
    "StorageEnsemble",
    "TensorDictMaxValueWriter",
    "TensorDictPrioritizedReplayBuffer",
    "TensorDictReplayBuffer",
    "TensorDictRoundRobinWriter",
    "TensorStorage",
    "TensorStorageCheckpointer",
    "Transition",
    "Writer",
    "WriterEnsemble",
]


def __getattr__(name: str):
    # RayReplayBuffer is imported on first use (it needs the rl-data[ray] extra at use)
    if name == "RayReplayBuffer":
        from rl.data.replay_buffers._ray import RayReplayBuffer  # noqa: PLC0415

        globals()[name] = RayReplayBuffer
        return RayReplayBuffer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
