"""The ``Examples:`` blocks of the transform modules run and print what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "_action",
    "_base",
    "_belief",
    "_chunk",
    "_compose",
    "_env",
    "_episode",
    "_exploration",
    "_frames",
    "_image",
    "_intrinsic",
    "_keys",
    "_norm",
    "_recording",
    "_reward",
    "_shape",
    "_tensor",
    "_video",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(f"rl.envs.transforms.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
