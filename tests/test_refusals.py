"""Every ``raise NotImplementedError`` in the packages is an abstract hook or a refusal
that says what to do.

- An abstract hook: a method whose whole body (after its docstring) is the ``raise``;
  subclasses define it. It may raise without a message.
- Anything else is a deliberate refusal of a call: it raises with a message (the way out
  is listed in docs/migration/torchrl.md, "What is refused, and what to do instead").
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _is_not_implemented(exc: ast.expr | None) -> bool:
    if isinstance(exc, ast.Call):
        exc = exc.func
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


def _has_message(exc: ast.expr) -> bool:
    return isinstance(exc, ast.Call) and bool(exc.args or exc.keywords)


def _body_is_the_raise(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    body = list(function.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    return len(body) == 1 and isinstance(body[0], ast.Raise)


def bad_raises(source: str, where: str = "<source>") -> list[str]:
    """The ``raise NotImplementedError`` of ``source`` that are neither an abstract hook
    nor a refusal with a message, as ``'where:line: why'``."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Raise) or not _is_not_implemented(node.exc):
            continue
        function = parents.get(node)
        while function is not None and not isinstance(
            function, (ast.FunctionDef, ast.AsyncFunctionDef)
        ):
            function = parents.get(function)
        in_class = function is not None and isinstance(parents.get(function), ast.ClassDef)
        hook = in_class and _body_is_the_raise(function)
        if not hook and not _has_message(node.exc):
            found.append(f"{where}:{node.lineno}: a refusal without a message")
    return found


def test_every_not_implemented_is_a_hook_or_says_what_to_do():
    found = []
    for path in sorted(ROOT.glob("packages/*/src/**/*.py")):
        found += bad_raises(path.read_text(), str(path.relative_to(ROOT)))
    assert not found, "\n".join(found)
    guide = (ROOT / "docs" / "migration" / "torchrl.md").read_text()
    assert "## What is refused, and what to do instead" in guide


class TestScanner:
    @pytest.mark.parametrize(
        "code",
        [
            """
            class Base:
                def hook(self):
                    '''Subclasses define it.'''
                    raise NotImplementedError
            """,
            """
            def f(x):
                if x:
                    raise NotImplementedError("x=True is not supported: pass x=False")
            """,
        ],
        ids=["abstract hook", "refusal with a message"],
    )
    def test_allowed(self, code):
        assert bad_raises(textwrap.dedent(code)) == []

    @pytest.mark.parametrize(
        "code",
        [
            """
            def f(x):
                if x:
                    raise NotImplementedError
            """,
            """
            class A:
                def g(self, x):
                    x = 1
                    raise NotImplementedError()
            """,
            """
            def f():
                raise NotImplementedError
            """,
        ],
        ids=["bare refusal", "empty call after code", "module function"],
    )
    def test_refused(self, code):
        assert bad_raises(textwrap.dedent(code), "f.py") != []
