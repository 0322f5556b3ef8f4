"""The examples run end to end on a tiny budget and print what they promise."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rollout():
    return _load("rollout")


def test_controller_balances_gym_cartpole(rollout):
    returns = rollout.main(rollout.Config(episodes=2, max_steps=200))
    # one episode per rollout, each truncated by StepCounter at 200 steps
    assert returns == [200.0, 200.0]


def test_random_policy_falls_early(rollout):
    returns = rollout.main(rollout.Config(episodes=3, random=True))
    assert len(returns) == 3
    assert all(5 <= r < 200 for r in returns)


def test_native_batch_reports_every_env(rollout):
    returns = rollout.main(rollout.Config(episodes=1, native=True, num_envs=16, random=True))
    # the rollout runs until each of the 16 envs has ended at least one episode
    assert len(returns) >= 16
    assert all(r >= 1 for r in returns)


def test_command_line_prints_the_mean_return():
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / "rollout.py"), "--episodes", "1", "--max-steps", "50"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "rollout 0: 50 steps, returns [50.0]" in out
    assert "mean return over 1 episodes: 50.0" in out


def test_root_readme_quick_start():
    """The python block of the root README runs as written and gives what it says."""
    import re

    readme = EXAMPLES.parent / "README.md"
    (block,) = re.findall(r"```python\n(.*?)```", readme.read_text(), re.S)
    scope: dict = {"__name__": "__main__"}
    exec(compile(block, str(readme), "exec"), scope)
    assert scope["rollout"].batch_size == (200,)
    assert scope["rollout"]["next", "step_count"].max() == 200
    batch = scope["batch"]
    assert batch.batch_size == (64,)
    assert ("next", "reward") in batch.keys(True) and "index" in batch.keys()
