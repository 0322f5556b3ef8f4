r"""``MATHRewardParser``: competition maths answers against the solution's last ``\boxed{}``."""

from __future__ import annotations

import importlib.util

from ._parser import AnswerRewardParser, extract_tags

__all__ = ["MATHRewardParser"]

_has_math_verify = importlib.util.find_spec("math_verify") is not None


def _normalize_math(s: str) -> str:
    s = s.strip()
    for old in (" ", ",", "$", "\\left", "\\right", "\\!", "\\,", "\\;", "\\:"):
        s = s.replace(old, "")
    return s


class MATHRewardParser(AnswerRewardParser):
    r"""Reward parser of :class:`~rl.envs.llm.MATHEnv`: the ``<answer>`` against the last
    ``\boxed{...}`` of the dataset's solution (under ``"answer"``).

    With ``math-verify`` installed, answers compare by symbolic equivalence; otherwise as
    strings without spaces, commas, ``$`` and LaTeX spacing / ``\left`` ``\right``.
    Arguments and rewards as :class:`~rl.envs.llm.GSM8KRewardParser`.

    Examples:
        >>> from rl.envs.llm import MATHRewardParser
        >>> MATHRewardParser.extract_boxed(r"so $x = \boxed{\frac{1}{2}}$")
        '\\frac{1}{2}'
        >>> MATHRewardParser().reward_of(r"<answer>\frac{1}{2}</answer>", r"\boxed{\frac{1}{2}}")["success"]
        True
    """

    def score(self, answer: str, reference: str) -> bool:
        return self.answers_match(answer, self.extract_boxed(reference))

    @staticmethod
    def answers_match(predicted: str, reference: str) -> bool:
        """Whether two answers are the same (symbolically with ``math-verify``)."""
        if _has_math_verify:
            from math_verify import parse, verify

            try:
                return bool(verify(parse(predicted), parse(reference)))
            except Exception:  # an answer math-verify cannot parse compares as text
                pass
        return _normalize_math(predicted) == _normalize_math(reference)

    @staticmethod
    def extract_boxed(text: str) -> str:
        r"""The content of the last ``\boxed{...}`` of ``text`` (nested braces kept), or
        ``text`` stripped when there is none."""
        start = text.rfind("\\boxed{")
        if start == -1:
            return text.strip()
        i = start + len("\\boxed{")
        depth, begin = 1, i
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        return text[begin : i - 1].strip()

    extract_tags = staticmethod(extract_tags)
