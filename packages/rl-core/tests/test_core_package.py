import doctest
import importlib
import pkgutil
import random
import warnings

import numpy as np
import pytest
import torch
from tensordict.nn import InteractionType, interaction_type, set_interaction_type

import rl.core
from rl.core import ExplorationType, exploration_type, seed_everything, set_exploration_type


def test_version_is_set():
    assert rl.core.__version__ == "0.1.0"


def test_all_names_resolve():
    for name in rl.core.__all__:
        assert getattr(rl.core, name) is not None, name


def _modules():
    import rl.core._specs

    names = ["rl.core._seed", "rl.core._exploration"]
    names += [f"rl.core._specs.{m.name}" for m in pkgutil.iter_modules(rl.core._specs.__path__)]
    return names


@pytest.mark.parametrize("module", _modules())
def test_doctests(module):
    mod = importlib.import_module(module)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        result = doctest.testmod(
            mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False
        )
    assert result.failed == 0


class TestExplorationType:
    def test_aliases_are_tensordicts(self):
        assert ExplorationType is InteractionType
        assert exploration_type is interaction_type
        assert set_exploration_type is set_interaction_type

    @pytest.mark.parametrize("kind", list(ExplorationType))
    def test_context_sets_and_restores(self, kind):
        before = exploration_type()
        with set_exploration_type(kind):
            assert exploration_type() is kind
            assert interaction_type() is kind
        assert exploration_type() is before

    def test_members(self):
        assert {m.name for m in ExplorationType} >= {"RANDOM", "MODE", "MEAN", "DETERMINISTIC"}


class TestSeedEverything:
    def test_same_seed_same_draws(self):
        def draw():
            return random.random(), np.random.rand(), torch.rand(()).item()

        seed_everything(123)
        first = draw()
        seed_everything(123)
        assert draw() == first
        seed_everything(124)
        assert draw() != first

    def test_returns_seed(self):
        assert seed_everything(np.int64(7)) == 7

    def test_bad_seeds(self):
        with pytest.raises(ValueError, match=r"seed in \[0, 2\*\*32\), got -1"):
            seed_everything(-1)
        with pytest.raises(ValueError, match=r"got 4294967296"):
            seed_everything(2**32)
        with pytest.raises(TypeError, match="expects an int seed, got float 1.5"):
            seed_everything(1.5)


def test_readme_example_runs(capsys):
    import pathlib
    import re

    text = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
    code = re.search(r"## Example\n\n```python\n(.*?)```", text, re.S).group(1)
    exec(compile(code, "README.md", "exec"), {})
    assert "('next', 'reward')" in capsys.readouterr().out
