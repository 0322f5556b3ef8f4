"""Reward parsers of the LLM environments."""

from ._countdown import CountdownRewardParser
from ._gsm8k import GSM8KRewardParser
from ._ifeval import IFEvalScoreData, IfEvalScorer
from ._ifeval_checks import INSTRUCTIONS, check_instruction
from ._math import MATHRewardParser
from ._parser import AnswerRewardParser

__all__ = [
    "INSTRUCTIONS",
    "AnswerRewardParser",
    "CountdownRewardParser",
    "GSM8KRewardParser",
    "IFEvalScoreData",
    "IfEvalScorer",
    "MATHRewardParser",
    "check_instruction",
]
