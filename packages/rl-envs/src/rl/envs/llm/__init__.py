"""LLM environments (``pip install "rl-envs[llm]"``): chats as environments, datasets of
prompts, reward parsers, and the transforms of LLM post-training.

The data containers (``History``, ``ChatHistory``, ``Text``, ``Tokens``) come from
:mod:`rl.data.llm`; policies (``TransformersWrapper``) from :mod:`rl.modules.llm`, which
this package never imports: the transforms that run a model take it as an argument.
"""

from ._chat import ChatEnv, DatasetChatEnv
from ._dataset import load_local_dataset
from ._hashing import LLMHashingEnv
from ._llm_env import LLMEnv
from .datasets import (
    CountdownEnv,
    GSM8KEnv,
    GSM8KPrepareQuestion,
    IFEvalData,
    IFEvalEnv,
    MATHEnv,
    make_gsm8k_env,
)
from .reward import (
    CountdownRewardParser,
    GSM8KRewardParser,
    IFEvalScoreData,
    IfEvalScorer,
    MATHRewardParser,
)
from .transforms import (
    AddThinkingPrompt,
    DataLoadingPrimer,
    KLComputation,
    KLRewardTransform,
    MCPToolTransform,
    PythonInterpreter,
    RayDataLoadingPrimer,
    RetrieveKL,
    RetrieveLogProb,
    TemplateTransform,
    Tokenizer,
    as_nested_tensor,
    as_padded_tensor,
)

__all__ = [
    "AddThinkingPrompt",
    "KLComputation",
    "KLRewardTransform",
    "LLMEnv",
    "LLMHashingEnv",
    "MCPToolTransform",
    "PythonInterpreter",
    "RetrieveKL",
    "RetrieveLogProb",
    "TemplateTransform",
    "Tokenizer",
    "ChatEnv",
    "CountdownEnv",
    "CountdownRewardParser",
    "GSM8KEnv",
    "GSM8KPrepareQuestion",
    "GSM8KRewardParser",
    "IFEvalData",
    "IFEvalEnv",
    "IFEvalScoreData",
    "IfEvalScorer",
    "MATHEnv",
    "MATHRewardParser",
    "DataLoadingPrimer",
    "RayDataLoadingPrimer",
    "DatasetChatEnv",
    "as_nested_tensor",
    "as_padded_tensor",
    "load_local_dataset",
    "make_gsm8k_env",
]
