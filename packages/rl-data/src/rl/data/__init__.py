"""rl.data: replay buffers, storages, samplers, writers and data post-processing."""

from rl.data.postprocs import MultiStep
from rl.data.replay_buffers import (
    CompressedListStorage,
    FlatStorageCheckpointer,
    HERReplayBuffer,
    HindsightStrategy,
    LambdaScheduler,
    LazyMemmapStorage,
    LazyStackStorage,
    LazyTensorStorage,
    LinearScheduler,
    ListStorage,
    ListStorageCheckpointer,
    OfflineToOnlineReplayBuffer,
    ParameterScheduler,
    PrioritizedReplayBuffer,
    PrioritizedSampler,
    PrioritizedSliceSampler,
    RandomSampler,
    RemoteTensorDictReplayBuffer,
    ReplayBuffer,
    ReplayBufferEnsemble,
    RoundRobinWriter,
    Sampler,
    SamplerEnsemble,
    SamplerWithoutReplacement,
    SchedulerList,
    SliceSampler,
    SliceSamplerWithoutReplacement,
    StepScheduler,
    Storage,
    StorageCheckpointerBase,
    StorageEnsemble,
    TensorDictMaxValueWriter,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
    TensorDictRoundRobinWriter,
    TensorStorage,
    TensorStorageCheckpointer,
    Writer,
    WriterEnsemble,
    find_start_stop_traj,
    prefill_replay_buffer,
)

__version__ = "0.1.0"

__all__ = [
    "prefill_replay_buffer",
    "OfflineToOnlineReplayBuffer",
    "HindsightStrategy",
    "HERReplayBuffer",
    "CompressedListStorage",
    "find_start_stop_traj",
    "FlatStorageCheckpointer",
    "LambdaScheduler",
    "LazyMemmapStorage",
    "LazyStackStorage",
    "LazyTensorStorage",
    "LinearScheduler",
    "ListStorage",
    "ListStorageCheckpointer",
    "MultiStep",
    "ParameterScheduler",
    "PrioritizedReplayBuffer",
    "PrioritizedSampler",
    "PrioritizedSliceSampler",
    "RandomSampler",
    "RayReplayBuffer",
    "RemoteTensorDictReplayBuffer",
    "ReplayBuffer",
    "ReplayBufferEnsemble",
    "RoundRobinWriter",
    "Sampler",
    "SamplerEnsemble",
    "SamplerWithoutReplacement",
    "SchedulerList",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
    "StepScheduler",
    "Storage",
    "StorageCheckpointerBase",
    "StorageEnsemble",
    "TensorDictMaxValueWriter",
    "TensorDictPrioritizedReplayBuffer",
    "TensorDictReplayBuffer",
    "TensorDictRoundRobinWriter",
    "TensorStorage",
    "TensorStorageCheckpointer",
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
