"""ppo_atari.py: the preprocessing chain gives stacked 84x84 frames, and a tiny run trains,
logs the game score and draws the curve (a smoke test: learning Atari takes millions of
frames, far beyond this machine)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.atari

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _load(name: str):
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def ppo_atari():
    return _load("ppo_atari")


def test_preprocessing_chain(ppo_atari):
    cfg = ppo_atari.Config()
    env = ppo_atari.make_game(cfg)
    spec = env.observation_spec
    assert spec["observation"].shape == (4, 84, 84)
    assert spec["observation"].dtype == torch.float32
    assert {"end-of-life", "lives", "episode_reward"} <= set(spec.keys())
    env.set_seed(0)
    torch.manual_seed(0)
    td = env.rollout(40, break_when_any_done=False)
    obs, nxt = td["observation"], td["next", "observation"]
    assert obs.shape == (40, 4, 84, 84)
    assert 0.0 <= obs.min() and obs.max() <= 1.0 and obs.max() > 0.1
    # frame stacking: each step drops the oldest frame and appends the new one
    torch.testing.assert_close(nxt[:, :3], obs[:, 1:])
    torch.testing.assert_close(obs[1:], nxt[:-1])
    # four emulator frames per step: the new frame differs from the last stacked one
    assert (nxt[:, 3] != obs[:, 3]).any()
    assert td["next", "reward"].abs().max() <= 1.0
    assert (td["lives"] == 5).all() or td["next", "end-of-life"].any()


def test_tiny_run_trains_logs_and_draws_the_curve(ppo_atari, tmp_path):
    cfg = ppo_atari.Config(
        total_frames=512,
        num_envs=2,
        num_steps=256,
        update_epochs=1,
        eval_episodes=1,
        eval_max_steps=50,
        log_dir=str(tmp_path),
        exp_name="run",
        progress=False,
    )
    out = ppo_atari.main(cfg)
    assert out["frames"] == 512
    # the policy and the value share the Nature-CNN trunk
    actor_params = dict(out["actor"].named_parameters())
    critic_params = dict(out["critic"].named_parameters())
    shared = [k for k in actor_params if k.startswith("module.0.")]
    assert shared and all(actor_params[k] is critic_params[k] for k in shared)
    assert out["actor"].module[0].module[0][0].weight.shape == (32, 4, 8, 8)
    scalars = tmp_path / "run" / "scalars" / "train"
    assert [r.split(",")[0] for r in (scalars / "loss.csv").read_text().splitlines()] == ["512"]
    # a game of Breakout played at random ends within 256 steps: its score is logged
    scores = [float(r.split(",")[1]) for r in (scalars / "episode_return.csv").read_text().split()]
    assert len(scores) == 1 and scores[0] >= 0.0
    lr = float((scalars / "lr.csv").read_text().split(",")[1])
    assert lr == cfg.lr  # the first update runs at the initial rate, then it anneals
    assert len(out["eval_returns"]) == 1 and out["eval_returns"][0] >= 0.0
    assert out["curve"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_help_lists_every_field(ppo_atari, capsys, monkeypatch):
    import tyro

    monkeypatch.setattr(sys, "argv", ["ppo_atari.py", "--help"])
    with pytest.raises(SystemExit) as exit_info:
        tyro.cli(ppo_atari.Config, description=ppo_atari.__doc__)
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    for field in ppo_atari.Config.__dataclass_fields__:
        assert "--" + field.replace("_", "-") in help_text, field
