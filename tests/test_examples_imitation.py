"""examples/td3_bc.py, diffusion_bc.py and gail.py: the shared dataset helpers, and each
script learning the continuous ``ObservationActionRewardProbe`` (one step, observation
±1, reward ``1 - (a - 1.5·obs)²``) from a small saved dataset in seconds.

The dataset is written as ``sac.py --save-buffer`` writes it: half of it the expert's
actions (``1.5·obs`` plus a little noise), half uniformly random actions. Offline, TD3+BC
must find the expert's action; the cloner and GAIL, given the best episodes, must copy it.
"""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from tensordict import TensorDict

from rl.core import ExplorationType, set_exploration_type

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PROBE = "ObservationActionRewardProbe-continuous"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _scalars(run_dir: Path, key: str) -> list[tuple[int, float]]:
    with open(run_dir / "scalars" / f"{key}.csv") as f:
        return [(int(step), float(value)) for step, value in csv.reader(f)]


def _run_dir(tmp_path: Path) -> Path:
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    return run_dir


@pytest.fixture(scope="module")
def helpers():
    _load("td3_bc")  # puts examples/ on the path
    import _offline_data
    import _offpolicy

    return SimpleNamespace(data=_offline_data, offpolicy=_offpolicy)


@pytest.fixture(scope="module")
def probe_dataset(helpers, tmp_path_factory):
    """600 one-step probe episodes: even ones the expert's, odd ones uniformly random."""
    offpolicy = helpers.offpolicy
    path = tmp_path_factory.mktemp("probe") / "data"
    env = offpolicy.make_env(PROBE)
    env.set_seed(0)
    generator = torch.Generator().manual_seed(0)
    count = iter(range(10**6))

    def mixed_policy(td):
        obs = td["observation"]
        if next(count) % 2 == 0:
            action = 1.5 * obs + 0.05 * torch.randn(obs.shape, generator=generator)
        else:
            action = 4 * torch.rand(obs.shape, generator=generator) - 2
        return td.set("action", action.clamp(-2, 2))

    rollout = env.rollout(600, mixed_policy, break_when_any_done=False)
    buffer = offpolicy.make_replay_buffer(600, 32, scratch_dir=path)
    buffer.extend(offpolicy.transitions(rollout))
    cfg = SimpleNamespace(env_id=PROBE, seed=0, eval_episodes=50)
    offpolicy.save_dataset(buffer, path, cfg, policy_return=1.0)
    return path


TINY = {"eval_episodes": 20, "progress": False, "seed": 0}


def _actions(policy, obs_norm=None) -> torch.Tensor:
    """The policy's deterministic actions at the observations -1 and +1."""
    td = TensorDict(observation=torch.tensor([[-1.0], [1.0]]), batch_size=[2])
    if obs_norm is not None:
        td = obs_norm.clone()(td)
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        return policy(td)["action"]


class TestOfflineData:
    def test_normalised_score_spans_random_to_data(self, helpers):
        info = {"policy_return": -100.0, "random_return": -1100.0}
        assert helpers.data.normalised_score(-100.0, info) == 100.0
        assert helpers.data.normalised_score(-1100.0, info) == 0.0
        assert helpers.data.normalised_score(-300.0, info) == pytest.approx(80.0)
        summary = helpers.data.report_score({"eval_mean": -600.0}, info)
        assert summary["score"] == pytest.approx(50.0)
        assert (summary["data_return"], summary["random_return"]) == (-100.0, -1100.0)

    def test_best_episodes_picks_complete_episodes_by_return(self, helpers):
        # episodes of lengths 2, 3, 1 with returns 3, 30, -1; the last 2 steps are unfinished
        rewards = torch.tensor([1.0, 2.0, 10.0, 10.0, 10.0, -1.0, 50.0, 50.0])
        done = torch.tensor([0, 1, 0, 0, 1, 1, 0, 0], dtype=torch.bool)
        data = TensorDict(
            observation=torch.arange(8.0).unsqueeze(-1),
            next=TensorDict(reward=rewards.unsqueeze(-1), done=done.unsqueeze(-1), batch_size=[8]),
            batch_size=[8],
        )
        assert helpers.data.episode_bounds(data) == [(0, 1), (2, 4), (5, 5)]
        buffer = helpers.offpolicy.make_replay_buffer(8, 2)
        buffer.extend(data)
        best, returns = helpers.data.best_episodes(buffer, 2)
        assert returns == [30.0, 3.0]
        assert best["observation"].squeeze(-1).tolist() == [2.0, 3.0, 4.0, 0.0, 1.0]
        _, all_returns = helpers.data.best_episodes(buffer, 10)
        assert all_returns == [30.0, 3.0, -1.0]  # never the unfinished one
        with pytest.raises(ValueError, match="count must be at least 1, got 0"):
            helpers.data.best_episodes(buffer, 0)

    def test_best_episodes_needs_a_complete_episode(self, helpers):
        data = TensorDict(
            observation=torch.zeros(3, 1),
            next=TensorDict(
                reward=torch.zeros(3, 1), done=torch.zeros(3, 1, dtype=torch.bool), batch_size=[3]
            ),
            batch_size=[3],
        )
        buffer = helpers.offpolicy.make_replay_buffer(3, 2)
        buffer.extend(data)
        with pytest.raises(ValueError, match="3 transitions holds no complete episode"):
            helpers.data.best_episodes(buffer, 1)


class TestTD3BC:
    def test_defaults_are_the_papers_scaled_to_the_action_range(self):
        td3_bc = _load("td3_bc")
        cfg = td3_bc.Config()
        assert (cfg.lr, cfg.batch_size, cfg.hidden, cfg.policy_delay) == (3e-4, 256, 256, 2)
        assert (cfg.policy_noise, cfg.noise_clip, cfg.tau, cfg.gamma) == (0.2, 0.5, 0.005, 0.99)
        assert cfg.normalize_obs
        assert cfg.alpha == 10.0  # the paper's 2.5 for actions in [-1, 1], Pendulum's span [-2, 2]

    def test_learns_the_expert_action_offline(self, probe_dataset, tmp_path):
        td3_bc = _load("td3_bc")
        cfg = td3_bc.Config(
            dataset=str(probe_dataset),
            num_updates=600,
            batch_size=64,
            hidden=32,
            lr=3e-3,
            log_interval=200,
            eval_interval=300,
            eval_interval_episodes=2,
            log_dir=str(tmp_path),
            **TINY,
        )
        summary = td3_bc.main(cfg)
        expected = torch.tensor([[-1.5], [1.5]])
        actions = _actions(summary["actor"], summary["obs_norm"])
        torch.testing.assert_close(actions, expected, atol=0.3, rtol=0)
        assert summary["score"] > 90
        run_dir = _run_dir(tmp_path)
        assert [step for step, _ in _scalars(run_dir, "train/bc_loss")] == [200, 400, 600]
        assert [step for step, _ in _scalars(run_dir, "eval/return")] == [300, 600]
        assert summary["curve"].exists()


class TestDiffusionBC:
    def test_unit_box_round_trip_and_clip(self):
        diffusion_bc = _load("diffusion_bc")
        low, high = torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0])
        action = torch.tensor([[-2.0, 0.0], [1.0, 0.75]])
        unit = diffusion_bc.to_unit_box(action, low, high)
        torch.testing.assert_close(unit, torch.tensor([[-1.0, -1.0], [0.5, 0.5]]))
        torch.testing.assert_close(diffusion_bc.from_unit_box(unit, low, high), action)
        clipped = diffusion_bc.from_unit_box(torch.tensor([[3.0, -3.0]]), low, high)
        torch.testing.assert_close(clipped, torch.tensor([[2.0, 0.0]]))

    def test_clones_the_best_episodes(self, probe_dataset, tmp_path):
        diffusion_bc = _load("diffusion_bc")
        cfg = diffusion_bc.Config(
            dataset=str(probe_dataset),
            top_episodes=150,  # of the 300 expert ones
            num_updates=800,
            batch_size=64,
            num_steps=10,
            hidden=64,
            depth=2,
            log_interval=400,
            eval_interval=400,
            eval_interval_episodes=2,
            log_dir=str(tmp_path),
            **TINY,
        )
        summary = diffusion_bc.main(cfg)
        actions = _actions(summary["acting_policy"], summary["obs_norm"])
        torch.testing.assert_close(actions, torch.tensor([[-1.5], [1.5]]), atol=0.3, rtol=0)
        assert summary["score"] > 90
        run_dir = _run_dir(tmp_path)
        assert [step for step, _ in _scalars(run_dir, "train/loss_diffusion_bc")] == [400, 800]
        assert type(summary["loss_module"]).__name__ == "DiffusionBCLoss"


class TestGAIL:
    def test_imitates_the_expert_without_the_env_reward(self, probe_dataset, tmp_path):
        gail = _load("gail")
        cfg = gail.Config(
            dataset=str(probe_dataset),
            expert_episodes=150,
            total_frames=600,
            init_random_frames=100,
            frames_per_batch=100,
            utd_ratio=0.5,
            disc_updates=10,
            batch_size=64,
            hidden=32,
            disc_hidden=32,
            lr=3e-3,
            disc_lr=3e-3,
            log_dir=str(tmp_path),
            **TINY,
        )
        summary = gail.main(cfg)
        actions = _actions(summary["actor"])
        torch.testing.assert_close(actions, torch.tensor([[-1.5], [1.5]]), atol=0.3, rtol=0)
        assert summary["score"] > 90
        assert len(summary["expert_returns"]) == 150
        run_dir = _run_dir(tmp_path)
        assert _scalars(run_dir, "train/loss_discriminator")
        assert _scalars(run_dir, "train/gail_reward")


@pytest.mark.parametrize(
    "script, preset, args, expected",
    [
        ("td3_bc", "td3_bc", ["--alpha", "2.5", "--seed", "3"], {"alpha": 2.5, "seed": 3}),
        ("diffusion_bc", "diffusion_bc", ["--top-episodes", "None"], {"top_episodes": None}),
        (
            "gail",
            "pendulum",
            ["--use-grad-penalty", "--total-frames", "500"],
            {"total_frames": 500, "use_grad_penalty": True},
        ),
    ],
)
def test_flags_work_without_naming_a_preset(helpers, script, preset, args, expected):
    module = _load(script)
    cfg = helpers.offpolicy.cli(module.Config, module.PRESETS, preset, script, args)
    assert {key: getattr(cfg, key) for key in expected} == expected
