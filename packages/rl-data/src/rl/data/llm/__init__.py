"""LLM post-training data: chat histories and the prompt/response containers.

Needs the ``llm`` extra for tokenizers (``pip install "rl-data[llm]"``); the containers
themselves are plain TensorClasses.
"""

from ._chat_templates import add_chat_template
from ._containers import ChatHistory, LogProbs, Masks, Text, Tokens
from ._dataset import (
    TensorDictTokenizer,
    TokenizedDatasetLoader,
    create_infinite_iterator,
    get_dataloader,
)
from ._history import ROLES, ContentBase, History
from ._kl_controllers import AdaptiveKLController, ConstantKLController
from ._prompt import PromptData, PromptTensorDictTokenizer
from ._reward import PairwiseDataset, RewardData
from ._rollout import RolloutFromModel
from ._topk import TopKRewardSelector

__all__ = ["ROLES", "ChatHistory", "ContentBase", "History", "LogProbs", "Masks", "Text", "Tokens"]
__all__ += [
    "PairwiseDataset",
    "PromptData",
    "PromptTensorDictTokenizer",
    "RewardData",
    "TensorDictTokenizer",
    "TokenizedDatasetLoader",
    "add_chat_template",
    "create_infinite_iterator",
    "get_dataloader",
]
__all__ += ["AdaptiveKLController", "ConstantKLController", "RolloutFromModel", "TopKRewardSelector"]
