import importlib.metadata

import rl.collectors


def test_version_matches_metadata():
    assert rl.collectors.__version__ == importlib.metadata.version("rl-collectors") == "0.1.0"


def test_readme_runs():
    """The python blocks of the package README run as written."""
    import re
    from pathlib import Path

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    for block in re.findall(r"```python\n(.*?)```", readme, flags=re.S):
        exec(compile(block, "README.md", "exec"), {})
