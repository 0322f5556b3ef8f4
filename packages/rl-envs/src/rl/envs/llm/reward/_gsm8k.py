"""``GSM8KRewardParser``: grade-school maths answers against GSM8K's ``#### <number>``."""

from __future__ import annotations

from ._parser import AnswerRewardParser, extract_tags

__all__ = ["GSM8KRewardParser"]


class GSM8KRewardParser(AnswerRewardParser):
    """Reward parser of :class:`~rl.envs.llm.GSM8KEnv`: the ``<answer>`` number against the
    number after ``"#### "`` in the dataset's ``answer`` field.

    Numbers compare after :meth:`normalize_answer` (no commas, ``$`` or ``%``; ``"72.0"``
    is ``"72"``). Rewards: ``correct_reward`` (1.0) right, ``format_reward`` (0.1) an
    answer that is wrong, 0 no answer (see
    :class:`~rl.envs.llm.reward.AnswerRewardParser` for the entries written).

    Args:
        tokenizer: the model's tokenizer (decodes tokens; gives ``eos_token``).
        in_keys (list of NestedKey, optional): ``[response_key, answer_key]``; defaults to
            ``[(mode, "full"), "answer"]`` after the parent env's ``input_mode``.
        out_keys (list of NestedKey, optional): defaults to ``["reward_answer",
            "reward_think", "reward_right", "reward", "success"]``.
        eos_token (str, optional): stripped from the end of the response.
        set_done_if_answer (bool): an answer ends the episode. Defaults to ``True``.
        input_mode (str, optional): the parent env's, unless given.
        format_reward (float): a wrong answer's reward. Defaults to ``0.1``.
        correct_reward (float): a right answer's reward. Defaults to ``1.0``.

    Examples:
        >>> from rl.envs.llm import GSM8KRewardParser
        >>> parser = GSM8KRewardParser()
        >>> parser.reward_of("<think>6*12</think><answer>72</answer>", "... #### 72")["reward"]
        1.0
    """

    def score(self, answer: str, reference: str) -> bool:
        reference = reference.split("#### ")[-1]
        return self.normalize_answer(answer) == self.normalize_answer(reference)

    @staticmethod
    def normalize_answer(answer: str) -> str:
        """``" $1,200.50 "`` -> ``"1200.5"``: no spaces, commas, ``$`` or ``%``, no
        trailing zeros after a decimal point."""
        answer = answer.strip().replace(",", "").replace("$", "").replace("%", "").rstrip(".")
        if "." in answer:
            answer = answer.rstrip("0").rstrip(".")
        return answer

    extract_tags = staticmethod(extract_tags)
