"""examples/dreamer.py on a tiny budget: the world model learns (state and 64x64 pixels,
DreamerV3 and v1) and a whole run logs, evaluates and stops where it is told."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from rl.data import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="module")
def dreamer():
    spec = importlib.util.spec_from_file_location("example_dreamer", EXAMPLES / "dreamer.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the script: small ops on a shared CPU
    yield module
    torch.set_num_threads(threads)


TINY = dict(
    hidden=16,
    rnn_hidden=16,
    num_categoricals=4,
    num_classes=4,
    state_dim=8,
    depth=4,
    batch_size=4,
    batch_length=8,
    imagination_horizon=3,
    imagination_starts=16,
    model_lr=3e-3,
    progress=False,
)


def _model_losses(dreamer, cfg, episodes: int, updates: int) -> list[float]:
    torch.manual_seed(0)
    env = dreamer.make_env(cfg)
    env.set_seed(0)
    agent = dreamer.make_agent(cfg, env)
    optimizers = {
        "model": torch.optim.Adam(agent["world_model"].parameters(), lr=cfg.model_lr),
        "actor": torch.optim.Adam(agent["actor"].parameters(), lr=cfg.actor_lr),
        "value": torch.optim.Adam(agent["value"].parameters(), lr=cfg.value_lr),
    }
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(1_000),
        sampler=SliceSampler(slice_len=cfg.batch_length, end_key=("next", "done")),
        batch_size=cfg.batch_size * cfg.batch_length,
    )
    for _ in range(episodes):
        episode = dreamer.play(env, agent, "random")
        assert episode["is_init"].squeeze(-1).tolist() == [True] + [False] * (len(episode) - 1)
        buffer.extend(episode)
    # the agent acts from its filtered latents, within the action bounds
    acted = dreamer.play(env, agent, "explore")
    assert acted["action"].abs().max() <= 1.0
    losses = []
    for _ in range(updates):
        metrics = dreamer.update(agent, optimizers, buffer.sample(), cfg)
        assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values()), metrics
        losses.append(metrics["loss_model"])
    return losses


@pytest.mark.parametrize("version", [3, 1])
def test_world_model_loss_falls_from_state(dreamer, version):
    cfg = dreamer.Config(version=version, **TINY, free_bits=1.0 if version == 3 else 0.0)
    losses = _model_losses(dreamer, cfg, episodes=2, updates=40)
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.7 * first, (first, last)


def test_world_model_loss_falls_from_64x64_pixels(dreamer):
    cfg = dreamer.Config(from_pixels=True, **TINY)
    losses = _model_losses(dreamer, cfg, episodes=1, updates=15)
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    assert last < 0.9 * first, (first, last)


def test_run_logs_evaluates_and_stops_at_the_target(dreamer, tmp_path):
    cfg = dreamer.Config(
        **TINY,
        total_frames=2_000,
        init_random_frames=200,
        train_every=25,
        eval_every=400,
        eval_episodes=1,
        stop_at_return=-1e9,  # any return meets it: the first evaluation stops the run
        log_dir=str(tmp_path),
        exp_name="run",
    )
    out = dreamer.main(cfg)
    assert (
        out["frames"] == 400 and out["updates"] == 8
    )  # one per 25 agent steps, the prefill included
    assert len(out["eval_returns"]) == 1 and out["eval_returns"][0] <= 0
    csvs = {p.stem for p in (tmp_path / "run").rglob("*.csv")}
    assert {"episode_return", "loss_model", "loss_actor", "loss_value"} <= csvs
    assert (tmp_path / "run" / "learning_curve.png").exists()


def test_slow_critic_is_an_ema_of_the_critic(dreamer):
    """After each update the slow critic moves ``slow_critic_tau`` of the way to the critic."""
    cfg = dreamer.Config(**TINY, slow_critic_tau=0.25)
    torch.manual_seed(0)
    env = dreamer.make_env(cfg)
    env.set_seed(0)
    agent = dreamer.make_agent(cfg, env)
    value_loss = agent["value_loss"]
    assert value_loss.slow_critic_regularization == cfg.slow_critic_regularization == 1.0
    optimizers = {
        "model": torch.optim.Adam(agent["world_model"].parameters(), lr=cfg.model_lr),
        "actor": torch.optim.Adam(agent["actor"].parameters(), lr=cfg.actor_lr),
        "value": torch.optim.Adam(agent["value"].parameters(), lr=cfg.value_lr),
    }
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(1_000),
        sampler=SliceSampler(slice_len=cfg.batch_length, end_key=("next", "done")),
        batch_size=cfg.batch_size * cfg.batch_length,
    )
    buffer.extend(dreamer.play(env, agent, "random"))
    slow = value_loss.target_value_model_params.clone()
    assert (slow == value_loss.value_model_params.data).all()  # the copy starts equal
    for _ in range(3):
        metrics = dreamer.update(agent, optimizers, buffer.sample(), cfg)
        online = value_loss.value_model_params.data
        slow = slow.apply(lambda s, o: 0.75 * s + 0.25 * o, online)
        torch.testing.assert_close(value_loss.target_value_model_params, slow)
    assert metrics["loss_value"] > 0
    # the critic the optimiser trains is the one the loss regresses (and the loss also
    # holds the two-hot bins, a buffer)
    assert {id(p) for p in agent["value"].parameters()} <= {
        id(p) for p in value_loss.value_model_params.values(True, True)
    }
