"""Transforms of the LLM environments."""

from ...transforms._tokenizer import Tokenizer
from ._dataloading import (
    DataLoadingPrimer,
    RayDataLoadingPrimer,
    as_nested_tensor,
    as_padded_tensor,
)
from ._format import TemplateTransform
from ._kl import KLComputation, KLRewardTransform, RetrieveKL, RetrieveLogProb
from ._mcp import MCPToolTransform
from ._python import PythonInterpreter
from ._reason import AddThinkingPrompt

__all__ = [
    "AddThinkingPrompt",
    "DataLoadingPrimer",
    "RayDataLoadingPrimer",
    "KLComputation",
    "KLRewardTransform",
    "MCPToolTransform",
    "PythonInterpreter",
    "RetrieveKL",
    "RetrieveLogProb",
    "TemplateTransform",
    "Tokenizer",
    "as_nested_tensor",
    "as_padded_tensor",
]
