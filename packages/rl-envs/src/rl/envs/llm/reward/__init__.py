"""Reward parsers of the LLM environments."""

from ._countdown import CountdownRewardParser
from ._gsm8k import GSM8KRewardParser
from ._math import MATHRewardParser
from ._parser import AnswerRewardParser

__all__ = ["AnswerRewardParser", "CountdownRewardParser", "GSM8KRewardParser", "MATHRewardParser"]
