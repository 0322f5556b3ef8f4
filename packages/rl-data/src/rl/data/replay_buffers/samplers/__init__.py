"""Samplers: which stored items a replay buffer returns."""

from rl.data.replay_buffers.samplers._consuming import ConsumingSampler
from rl.data.replay_buffers.samplers._prioritized import PrioritizedSampler
from rl.data.replay_buffers.samplers._prioritized_slice import PrioritizedSliceSampler
from rl.data.replay_buffers.samplers._prompt_group import PromptGroupSampler
from rl.data.replay_buffers.samplers._random import RandomSampler, SamplerWithoutReplacement
from rl.data.replay_buffers.samplers._sampler import Sampler
from rl.data.replay_buffers.samplers._slice import SliceSampler, SliceSamplerWithoutReplacement
from rl.data.replay_buffers.samplers._staleness import StalenessAwareSampler
from rl.data.replay_buffers.samplers._streaming_slice import StreamingSliceSampler

__all__ = [
    "ConsumingSampler",
    "PrioritizedSampler",
    "PrioritizedSliceSampler",
    "PromptGroupSampler",
    "RandomSampler",
    "Sampler",
    "SamplerWithoutReplacement",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
    "StalenessAwareSampler",
    "StreamingSliceSampler",
]
