"""examples/mpc.py: CEM / MPPI in the true and in a learned Pendulum model, on a tiny budget."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="module")
def mpc():
    spec = importlib.util.spec_from_file_location("example_mpc", EXAMPLES / "mpc.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


TINY = dict(
    max_steps=10,
    eval_episodes=2,
    planning_horizon=3,
    optim_steps=2,
    num_candidates=16,
    top_k=4,
    progress=False,
)


@pytest.mark.parametrize(
    "kw",
    [
        dict(planner="cem"),
        dict(planner="mppi"),
        dict(model="learned", total_frames=20, init_random_frames=10, updates_per_episode=3),
    ],
    ids=["cem-true", "mppi-true", "cem-learned"],
)
def test_smoke_runs_and_logs(mpc, tmp_path, kw):
    out = mpc.main(mpc.Config(log_dir=str(tmp_path), **TINY, **kw))
    assert len(out["eval_returns"]) == 2
    assert all(r <= 0 for r in out["eval_returns"])  # Pendulum's rewards are <= 0
    csvs = {p.name for p in tmp_path.rglob("*.csv")}
    assert "episode_return.csv" in csvs
    if kw.get("model") == "learned":
        assert "model_loss.csv" in csvs


def test_true_model_is_the_env(mpc):
    from rl.envs import ActionScaling, GymEnv, TransformedEnv

    env = TransformedEnv(GymEnv("Pendulum-v1"), ActionScaling())
    env.set_seed(0)
    td = env.reset().set("action", torch.tensor([0.35]))
    nxt = env.step(td.clone())["next"]
    model = mpc.TruePendulum()
    torch.testing.assert_close(
        model(td["observation"], td["action"]), nxt["observation"], atol=1e-5, rtol=0
    )
    torch.testing.assert_close(
        mpc.pendulum_reward(td["observation"], td["action"]), nxt["reward"], atol=1e-5, rtol=0
    )


@pytest.mark.parametrize("planner", ["cem", "mppi"])
def test_planner_holds_the_pendulum_up(mpc, planner):
    from rl.envs import ActionScaling, PendulumEnv, TransformedEnv

    torch.manual_seed(0)
    cfg = mpc.Config(
        planner=planner, planning_horizon=10, optim_steps=3, num_candidates=64, top_k=8
    )
    env = TransformedEnv(PendulumEnv(), ActionScaling())
    plan = mpc.make_planner(cfg, env, mpc.TruePendulum())
    # tilted right (theta = 0.3) and at rest: gravity pulls it further, so push left
    obs = torch.tensor([torch.cos(torch.tensor(0.3)), torch.sin(torch.tensor(0.3)), 0.0])
    action = plan(TensorDict(observation=obs))["action"]
    assert action.shape == (1,) and action.item() < 0


def test_ensemble_learns_a_linear_map(mpc):
    torch.manual_seed(0)
    from rl.data import LazyTensorStorage, TensorDictReplayBuffer

    cfg = mpc.Config(ensemble_size=3, hidden=32, updates_per_episode=300, batch_size=64, lr=3e-3)
    model = mpc.Ensemble(cfg.ensemble_size, 3, 1, cfg.hidden)
    optim = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    obs, act = torch.randn(256, 3), torch.rand(256, 1) * 2 - 1
    nxt = obs + 0.1 * act - 0.05 * obs
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(256))
    buffer.extend(
        TensorDict({"observation": obs, "action": act, ("next", "observation"): nxt}, [256])
    )
    mpc.fit(model, optim, buffer, cfg)
    with torch.no_grad():
        pred = model(obs[:8], act[:8])
    torch.testing.assert_close(pred, nxt[:8], atol=0.02, rtol=0)
