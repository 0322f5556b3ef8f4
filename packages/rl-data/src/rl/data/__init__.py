"""rl.data: replay buffers, storages, samplers, writers and data post-processing."""

from rl.data._video import VideoClipRef, clear_video_decoder_cache, set_video_decoder_cache_size
from rl.data.map import (
    BinaryToDecimal,
    HashToInt,
    MCTSForest,
    QueryModule,
    RandomProjectionHash,
    SipHash,
    TensorDictMap,
    TensorMap,
    Tree,
)
from rl.data.postprocs import DensifyReward, MultiStep
from rl.data.replay_buffers import (
    DEFAULT_DONE_KEYS,
    CompressedListStorage,
    CompressedListStorageCheckpointer,
    ConditionalUpdateResult,
    ConsumingSampler,
    Flat2TED,
    FlatStorageCheckpointer,
    H5Combine,
    H5Split,
    H5StorageCheckpointer,
    HERReplayBuffer,
    HindsightStrategy,
    ImmutableDatasetWriter,
    LambdaScheduler,
    LazyMemmapStorage,
    LazyStackStorage,
    LazyTensorStorage,
    LinearScheduler,
    ListStorage,
    ListStorageCheckpointer,
    Nested2TED,
    NestedStorageCheckpointer,
    OfflineToOnlineReplayBuffer,
    ParameterScheduler,
    PrioritizedReplayBuffer,
    PrioritizedSampler,
    PrioritizedSliceSampler,
    PromptGroupSampler,
    RandomSampler,
    RemoteTensorDictReplayBuffer,
    ReplayBuffer,
    ReplayBufferEnsemble,
    RoundRobinWriter,
    Sampler,
    SamplerEnsemble,
    SamplerWithoutReplacement,
    SampleUnit,
    SchedulerList,
    Sequence,
    SliceSampler,
    SliceSamplerWithoutReplacement,
    StalenessAwareSampler,
    StepScheduler,
    Storage,
    StorageCheckpointerBase,
    StorageEnsemble,
    StorageEnsembleCheckpointer,
    StreamingSliceSampler,
    TED2Flat,
    TED2Nested,
    TensorDictMaxValueWriter,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
    TensorDictRoundRobinWriter,
    TensorStorage,
    TensorStorageCheckpointer,
    Trajectory,
    TrajectoryPredicate,
    Transition,
    Writer,
    WriterEnsemble,
    filter_trajectories,
    find_start_stop_traj,
    iter_trajectories,
    prefill_replay_buffer,
    traj,
)
from rl.data.vla import (
    ActionTokenizerBase,
    RobotDatasetMetadata,
    UniformActionTokenizer,
    VocabTailActionTokenizer,
    validate_vla_tensordict,
)

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_DONE_KEYS",
    "ActionTokenizerBase",
    "RobotDatasetMetadata",
    "UniformActionTokenizer",
    "VocabTailActionTokenizer",
    "validate_vla_tensordict",
    "BinaryToDecimal",
    "HashToInt",
    "QueryModule",
    "RandomProjectionHash",
    "SipHash",
    "TensorDictMap",
    "TensorMap",
    "MCTSForest",
    "Tree",
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
    "DensifyReward",
    "MultiStep",
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
    "VideoClipRef",
    "clear_video_decoder_cache",
    "set_video_decoder_cache_size",
]


# TorchRL's ``torchrl.data`` also exports its LLM data names; here they load with
# ``rl.data.llm`` on first use, so that ``import rl.data`` does not pay for them
_LLM_NAMES = (
    "AdaptiveKLController",
    "ConstantKLController",
    "ContentBase",
    "History",
    "PairwiseDataset",
    "PromptData",
    "PromptTensorDictTokenizer",
    "RewardData",
    "RolloutFromModel",
    "TensorDictTokenizer",
    "TokenizedDatasetLoader",
    "TopKRewardSelector",
    "create_infinite_iterator",
    "get_dataloader",
)
__all__ += _LLM_NAMES

# the offline datasets (TorchRL's ``torchrl.data.datasets``) live in ``rl.data.datasets``;
# DESIGN maps them to ``rl.data``, so they resolve here too, on first use
_DATASET_NAMES = (
    "BaseDatasetExperienceReplay",
    "LeRobotExperienceReplay",
    "MinariExperienceReplay",
    "lerobot_columns_to_tensordict",
    "load_dataset",
    "register_dataset",
)
__all__ += _DATASET_NAMES


def __getattr__(name: str):
    if name in _LLM_NAMES:
        from rl.data import llm  # noqa: PLC0415

        value = getattr(llm, name)
        globals()[name] = value
        return value
    if name in _DATASET_NAMES:
        from rl.data import datasets  # noqa: PLC0415

        value = getattr(datasets, name)
        globals()[name] = value
        return value
    # RayReplayBuffer is imported on first use (it needs the rl-data[ray] extra at use)
    if name == "RayReplayBuffer":
        from rl.data.replay_buffers._ray import RayReplayBuffer  # noqa: PLC0415

        globals()[name] = RayReplayBuffer
        return RayReplayBuffer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
