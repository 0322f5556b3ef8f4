"""The ``Examples:`` blocks of rl.envs.llm run and print what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

pytest.importorskip("transformers")

MODULES = [
    "_chat",
    "_llm_env",
    "datasets._countdown",
    "datasets._gsm8k",
    "datasets._ifeval",
    "datasets._math",
    "reward._countdown",
    "reward._gsm8k",
    "reward._ifeval",
    "reward._math",
    "transforms._dataloading",
    "transforms._format",
    "transforms._kl",
    "transforms._python",
    "transforms._reason",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(f"rl.envs.llm.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
