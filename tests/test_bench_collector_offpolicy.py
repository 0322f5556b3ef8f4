"""benchmarks/bench_collector_offpolicy.py: its floors act as the examples' actors do, and
its smallest run writes the table it prints."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    name = "bench_collector_offpolicy"
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_deterministic_floor_draws_the_actions_of_the_examples_policy(bench):
    """Same seed, same observations: the plain loop's action is the TensorDict policy's
    (actor, TanhModule, AdditiveGaussianModule), noise and clamping included."""
    torch.manual_seed(0)
    env = bench.make_env(bench.ENV_ID)
    spec = env.action_spec
    actor = bench.make_deterministic_actor(env, 8)
    noise = bench.AdditiveGaussianModule(spec, sigma_init=bench.SIGMA, sigma_end=bench.SIGMA)
    policy = bench.TensorDictSequential(actor, noise)
    floor = bench.deterministic_floor(actor, spec)
    obs = torch.randn(64, 3) * 100  # saturated actions: some noisy ones are clamped
    with torch.no_grad():
        torch.manual_seed(1)
        ours = policy(TensorDict(observation=obs, batch_size=[64]))["action"]
        torch.manual_seed(1)
        plain = floor(obs)
    torch.testing.assert_close(plain, ours)
    assert bool((plain.abs() <= 2.0).all()) and bool((plain.abs() == 2.0).any())


def test_tanh_normal_floor_reads_the_actors_parameters(bench):
    """The plain loop's Normal has the actor's loc and scale, and its squashed samples
    stay inside the action bounds."""
    torch.manual_seed(0)
    env = bench.make_env(bench.ENV_ID)
    spec = env.action_spec
    actor = bench.make_tanh_normal_actor(env, 8)
    obs = torch.randn(32, 3)
    with torch.no_grad():
        td = actor(TensorDict(observation=obs, batch_size=[32]))
        loc, scale = actor.module[0].module(obs)
        actions = bench.tanh_normal_floor(actor, spec)(obs)
    torch.testing.assert_close(loc, td["loc"])
    torch.testing.assert_close(scale, td["scale"])
    assert actions.shape == td["action"].shape
    assert bool((actions.abs() <= 2.0).all())


def test_floor_batch_records_an_episode_as_gymnasium_runs_it(bench):
    """Rows of 10 frames: step counts run 1..200 and restart after the time limit, the
    episode return is the running sum of the rewards."""
    torch.manual_seed(0)
    env = bench.make_env(bench.ENV_ID)
    floor = bench.Floor(
        bench.deterministic_floor(bench.make_deterministic_actor(env, 8), env.action_spec), 10
    )
    counts, rewards, returns, truncated = [], [], [], []
    for _ in range(21):
        assert floor.batch() == 10
        counts += floor.rows["step_count"].squeeze(-1).tolist()
        rewards += floor.rows["reward"].squeeze(-1).tolist()
        returns += floor.rows["episode_reward"].squeeze(-1).tolist()
        truncated += floor.rows["truncated"].squeeze(-1).tolist()
    assert counts[:200] == list(range(1, 201)) and counts[200:] == list(range(1, 11))
    assert truncated.index(True) == 199 and truncated.count(True) == 1
    running = torch.tensor(rewards[:200]).cumsum(0)
    torch.testing.assert_close(torch.tensor(returns[:200]), running, rtol=1e-5, atol=1e-3)


def test_smallest_run_writes_its_table(bench, tmp_path, monkeypatch):
    out = tmp_path / "collector.md"
    monkeypatch.setattr(sys, "argv", ["bench", "--rounds", "1", "--out", str(out)])
    threads = torch.get_num_threads()
    try:
        bench.main()  # sets one torch thread, as the examples run
    finally:
        torch.set_num_threads(threads)
    text = out.read_text()
    rows = [
        line
        for line in text.splitlines()
        if line.startswith("| deterministic") or line.startswith("| tanh")
    ]
    assert len(rows) == 2
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        floor, ours, ratio = (float(c.replace(",", "").rstrip("x")) for c in cells[1:4])
        assert floor > 0 and ours > 0
        assert ratio == pytest.approx(ours / floor, abs=0.01 + 0.01 * ratio)
