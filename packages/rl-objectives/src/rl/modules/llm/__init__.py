"""LLM policies (``pip install "rl-objectives[llm]"``): ``TransformersWrapper`` around a
Hugging Face causal language model, and the token distribution ``LLMMaskedCategorical``.

The data containers (``ChatHistory``, ``Text``, ``Tokens``, ``Masks``, ``LogProbs``) live
in :mod:`rl.data.llm` and are re-exported here, where TorchRL exposes them.
"""

from rl.data.llm import ChatHistory, LogProbs, Masks, Text, Tokens

from ..distributions import LLMMaskedCategorical
from ._remote import RemoteTransformersWrapper
from ._reward_model import HFRewardModelWrapper
from ._transformers import LLMWrapperBase, TransformersWrapper

__all__ = [
    "ChatHistory",
    "HFRewardModelWrapper",
    "LLMMaskedCategorical",
    "LLMWrapperBase",
    "LogProbs",
    "Masks",
    "RemoteTransformersWrapper",
    "Text",
    "Tokens",
    "TransformersWrapper",
]
