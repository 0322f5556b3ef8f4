"""The package README's python blocks and every docstring ``Examples:`` block run as written.

No other test file of this package runs doctests, so every module of ``rl.modules`` and
``rl.objectives`` (found by walking the packages, private ``_name.py`` modules included,
since that is where the code and its docstrings live) is doctested here once.
"""

import contextlib
import doctest
import importlib
import io
import pkgutil
import re
from pathlib import Path

import pytest
import torch

import rl.modules
import rl.objectives

README = Path(__file__).parents[1] / "README.md"
RESULTS = Path(__file__).parents[3] / "benchmarks" / "results"

# Modules that define public classes or functions but have no ``Examples:`` block, each
# with the reason. Every other module that defines public objects must have examples;
# modules that only re-export names (package ``__init__``s, ``models.utils``) have none.
NO_EXAMPLES = {
    "rl.modules.distributions._utils": "internal numeric helpers (safe_tanh, ...), not exported",
    "rl.objectives.value._base": "ValueEstimatorBase: abstract, its subclasses have examples",
    "rl.objectives.value._vtrace": "VTrace: its docstring has no Examples block yet",
    "rl.modules.llm._transformers": "needs a transformers model and tokenizer: tests/test_modules_llm.py builds them",
    "rl.objectives.llm._sft": "SFTLoss needs a transformers model and tokenizer: tests/test_loss_llm.py builds them",
    "rl.objectives.llm._grpo": "GRPOLoss needs a transformers model and tokenizer: tests/test_loss_llm.py builds them",
}


def _all_modules() -> list[str]:
    names = []
    for pkg in (rl.modules, rl.objectives):
        names.append(pkg.__name__)
        names += [m.name for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")]
    return sorted(names)


def _defines_public_objects(module) -> bool:
    """Whether the module defines classes or functions it exports (``__all__`` if any)."""
    names = getattr(module, "__all__", [n for n in vars(module) if not n.startswith("_")])
    return any(
        getattr(getattr(module, n, None), "__module__", None) == module.__name__ for n in names
    )


MODULES = _all_modules()


def test_no_examples_list_is_current():
    assert set(NO_EXAMPLES) <= set(MODULES), sorted(set(NO_EXAMPLES) - set(MODULES))
    assert len(MODULES) > 40


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    torch.manual_seed(0)
    module = importlib.import_module(name)
    result = doctest.testmod(
        module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, report=False
    )
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples fail in {name}"
    if name not in NO_EXAMPLES and _defines_public_objects(module):
        assert result.attempted > 0, f"{name} defines public objects but has no example"


def _readme_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def _expected_prints(block: str) -> list[str]:
    """The ``# value`` comment after each ``print(...)`` line (or on the line below)."""
    pattern = r"^\s*print\(.*\)(?:[ \t]*#[ \t]*(.+)|[ \t]*\n#[ \t]*(.+))$"
    return [(a or b).strip() for a, b in re.findall(pattern, block, re.M)]


def test_readme_has_the_sections():
    text = README.read_text()
    for heading in (
        "## Install",
        "## Example",
        "## Networks",
        "## Distributions",
        "## Actors and critics",
        "## Exploration",
        "## Recurrent modules",
        "## Multi-agent networks",
        "## Value estimators",
        "## Losses",
        "## Target updates",
        "## Compile-readiness",
        "## Speed",
    ):
        assert heading in text, heading
    assert "pip install rl-objectives" in text and '"rl-objectives[cpp]"' in text


def test_readme_loss_table_names_every_loss():
    table = README.read_text().split("## Losses", 1)[1].split("## Target updates", 1)[0]
    losses = [n for n in rl.objectives.__all__ if n.endswith("Loss") and n != "LossModule"]
    assert len(losses) == 37  # + ACTLoss, DiffusionBCLoss, the 4 DreamerV3 losses, WorldModelLoss
    for name in losses:
        assert f"`{name}`" in table, name


def test_readme_speed_sources_exist():
    """Each speed figure of the README names the benchmarks/results file it comes from."""
    speed = README.read_text().split("## Speed", 1)[1].split("## Tests", 1)[0]
    items = re.split(r"\n- ", speed)[1:]
    assert items
    for item in items:
        cited = re.findall(r"benchmarks/results/(\w+\.md)", item)
        assert len(cited) == 1, item
        assert (RESULTS / cited[0]).is_file(), cited[0]
        assert re.search(r"\d+\.\d+x", item), item


@pytest.mark.parametrize("index", range(len(_readme_blocks())))
def test_readme_examples(index):
    block = _readme_blocks()[index]
    expected = _expected_prints(block)
    assert expected, f"README block {index} prints nothing to check"
    torch.manual_seed(0)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, str(README), "exec"), {"__name__": "__main__"})
    printed = out.getvalue().splitlines()
    assert printed == expected, f"README block {index} printed {printed}, expected {expected}"
