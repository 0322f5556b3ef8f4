"""The on-policy examples (ppo.py, a2c.py) run, write their logs and curve, and learn.

A tiny CartPole budget checks the script end to end; the probe environments (rl.envs
probes) check that each algorithm really learns what it should in a few thousand frames:
the better action (discrete and continuous, where the best action 1.5 needs the tanh
rescaled to [-2, 2]), the value of an observation, and the discounted value of a
two-step episode.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from rl.core import ExplorationType, set_exploration_type

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _load(name: str):
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and `from ppo import ...` look it up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def ppo():
    return _load("ppo")


@pytest.fixture(scope="module")
def a2c():
    _load("ppo")
    return _load("a2c")


def _probe_state(module, out, env_id: str, gamma: float):
    """Deterministic action and value of the trained agent on fresh probe observations."""
    env = _load("_common").make_base_env(env_id, 8)
    env.set_seed(123)
    td = env.reset()
    with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
        out["actor"](td)
        out["critic"](td)
    obs = td["observation"]
    return td, env.optimal_action(obs), env.expected_value(obs, gamma)


def _probe_config(module, env_id, tmp_path, **kwargs):
    if "update_epochs" in module.Config.__dataclass_fields__:  # PPO: 4 epochs of 4 minibatches
        kwargs = {"update_epochs": 4, "num_minibatches": 4, "gae_lambda": 0.95, **kwargs}
    return module.Config(
        env_id=env_id,
        num_envs=16,
        num_steps=16,
        gamma=0.9,
        eval_episodes=1,
        log_dir=str(tmp_path),
        exp_name=env_id,
        progress=False,
        **kwargs,
    )


class TestPPO:
    @pytest.mark.parametrize(("epochs", "minibatch"), [(0, 64), (2, 0)])
    def test_update_refuses_empty_passes(self, ppo, epochs, minibatch):
        cfg = ppo.Config(update_epochs=epochs)
        with pytest.raises(ValueError, match=f"update_epochs={epochs}, minibatch={minibatch}"):
            ppo.update_epochs(cfg, None, None, None, minibatch)

    def test_cartpole_tiny_budget_writes_logs_and_curve(self, ppo, tmp_path):
        cfg = ppo.Config(total_frames=1024, eval_episodes=2, log_dir=str(tmp_path), exp_name="run")
        out = ppo.main(cfg)
        assert out["frames"] == 1024
        assert len(out["eval_returns"]) == 2 and all(r >= 8 for r in out["eval_returns"])
        scalars = tmp_path / "run" / "scalars"
        rows = (scalars / "train" / "loss.csv").read_text().splitlines()
        assert [int(r.split(",")[0]) for r in rows] == [256, 512, 768, 1024]
        assert (scalars / "eval" / "return.csv").exists()
        assert out["curve"] == tmp_path / "run" / "learning_curve.png"
        assert out["curve"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    @pytest.mark.parametrize(
        "env_id", ["ObservationActionRewardProbe", "ObservationActionRewardProbe-continuous"]
    )
    def test_learns_the_observation_dependent_action(self, ppo, tmp_path, env_id):
        cfg = _probe_config(ppo, env_id, tmp_path, total_frames=3072, lr=3e-3, anneal_lr=False)
        td, best, value = _probe_state(ppo, ppo.main(cfg), env_id, cfg.gamma)
        if env_id.endswith("continuous"):
            torch.testing.assert_close(td["action"], best, atol=0.3, rtol=0)
        else:
            assert (td["action"].argmax(-1) == best).all()
        torch.testing.assert_close(td["state_value"], value, atol=0.1, rtol=0)

    def test_value_discounts_a_delayed_reward(self, ppo, tmp_path):
        cfg = _probe_config(
            ppo, "DiscountingProbe", tmp_path, total_frames=2048, lr=3e-3, anneal_lr=False
        )
        td, _, value = _probe_state(ppo, ppo.main(cfg), "DiscountingProbe", cfg.gamma)
        # observation 0 is the first of two steps: V = gamma * 1 = 0.9, not 1
        torch.testing.assert_close(td["state_value"], value, atol=0.05, rtol=0)
        assert (value == 0.9).all()

    def test_pendulum_preset_runs(self, ppo, tmp_path):
        _, preset = ppo.PRESETS["pendulum"]
        cfg = dataclasses.replace(
            preset,
            **{
                "total_frames": 512,
                "num_envs": 2,
                "num_steps": 256,
                "num_minibatches": 4,
                "update_epochs": 1,
                "eval_episodes": 1,
                "log_dir": str(tmp_path),
                "exp_name": "pendulum",
            },
        )
        out = ppo.main(cfg)
        action = out["actor"](ppo.make_env(cfg, 1).reset())["action"]
        assert action.shape == (1,) and action.abs().max() <= 2.0
        assert -2000 < out["eval_mean"] < 0

    def test_observation_stats_follow_the_seed(self, ppo):
        # the statistics env is seeded with the run's seed: the same seed, the same
        # statistics; another seed, other starts (Pendulum's are drawn by the env)
        _, preset = ppo.PRESETS["pendulum"]

        def stats(seed):
            torch.manual_seed(0)  # the random actions' generator, as seed_everything
            return ppo.observation_stats(dataclasses.replace(preset, seed=seed), steps=50)

        (loc_a, scale_a), (loc_b, scale_b), (loc_c, _) = stats(3), stats(3), stats(4)
        assert loc_a.shape == scale_a.shape == (3,)
        assert torch.equal(loc_a, loc_b) and torch.equal(scale_a, scale_b)
        assert not torch.equal(loc_a, loc_c)

    def test_help_lists_every_field(self, ppo, capsys, monkeypatch):
        monkeypatch.setattr(sys, "argv", ["ppo.py", "cartpole", "--help"])
        with pytest.raises(SystemExit) as exit_info:
            ppo.cli()
        assert exit_info.value.code == 0
        help_text = capsys.readouterr().out
        for field in ppo.Config.__dataclass_fields__:
            assert "--" + field.replace("_", "-") in help_text, field


class TestA2C:
    def test_learns_the_observation_dependent_action(self, a2c, tmp_path):
        env_id = "ObservationActionRewardProbe"
        cfg = _probe_config(a2c, env_id, tmp_path, total_frames=4096, lr=3e-3)
        cfg.gae_lambda = 0.95
        td, best, value = _probe_state(a2c, a2c.main(cfg), env_id, cfg.gamma)
        assert (td["action"].argmax(-1) == best).all()
        torch.testing.assert_close(td["state_value"], value, atol=0.15, rtol=0)
