"""``CountdownRewardParser``: an arithmetic expression that must reach a target from given
numbers, each used at most once. The expression is parsed, never ``eval``-ed."""

from __future__ import annotations

import ast
import operator
import re

from ._parser import AnswerRewardParser, extract_tags

__all__ = ["CountdownRewardParser"]

_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def _evaluate(node: ast.AST) -> float:
    """The value of an expression tree of numbers, ``+ - * /`` and unary minus."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluate(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    raise ValueError(f"{type(node).__name__} is not allowed in a Countdown expression")


class CountdownRewardParser(AnswerRewardParser):
    """Reward parser of :class:`~rl.envs.llm.CountdownEnv`.

    The ``<answer>`` must be an expression of ``+ - * /`` and parentheses over the
    problem's numbers, each used at most once, equal to the target. The reference, under
    ``"answer"``, reads ``"target=<int>, numbers=<int>,<int>,..."``. Arguments and
    rewards as :class:`~rl.envs.llm.GSM8KRewardParser`.

    Examples:
        >>> from rl.envs.llm import CountdownRewardParser
        >>> CountdownRewardParser.validate_expression("(25 + 3) * 4", 112, [25, 3, 4, 7])
        True
        >>> CountdownRewardParser.validate_expression("25 * 25", 625, [25, 3])
        False
    """

    def score(self, answer: str, reference: str) -> bool:
        target, numbers = self._parse_ground_truth(reference)
        return self.validate_expression(answer, target, numbers)

    @staticmethod
    def validate_expression(expression: str, target: int, numbers: list[int]) -> bool:
        """Whether ``expression`` uses only ``numbers`` (each at most once), ``+ - * /``
        and parentheses, and equals ``target``."""
        if not re.fullmatch(r"[\d\s+\-*/().]+", expression):
            return False
        available = list(numbers)
        for n in re.findall(r"\d+", expression):
            if int(n) not in available:
                return False
            available.remove(int(n))
        try:
            value = _evaluate(ast.parse(expression, mode="eval"))
        except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
            return False
        return abs(value - target) < 1e-9

    @staticmethod
    def _parse_ground_truth(answer: str) -> tuple[int, list[int]]:
        target = re.search(r"target\s*=\s*(\d+)", answer)
        numbers = re.search(r"numbers\s*=\s*([\d,\s]+)", answer)
        if target is None or numbers is None:
            raise ValueError(
                f"the Countdown reference {answer!r} does not read 'target=<int>, numbers=<ints>'"
            )
        return int(target.group(1)), [int(n) for n in numbers.group(1).split(",") if n.strip()]

    extract_tags = staticmethod(extract_tags)
