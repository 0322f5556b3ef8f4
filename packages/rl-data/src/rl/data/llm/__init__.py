"""LLM post-training data: chat histories and the prompt/response containers.

Needs the ``llm`` extra for tokenizers (``pip install "rl-data[llm]"``); the containers
themselves are plain TensorClasses.
"""

from ._containers import ChatHistory, LogProbs, Masks, Text, Tokens
from ._history import ROLES, ContentBase, History
from ._kl_controllers import AdaptiveKLController, ConstantKLController
from ._topk import TopKRewardSelector

__all__ = ["ROLES", "ChatHistory", "ContentBase", "History", "LogProbs", "Masks", "Text", "Tokens"]
__all__ += ["AdaptiveKLController", "ConstantKLController", "TopKRewardSelector"]
