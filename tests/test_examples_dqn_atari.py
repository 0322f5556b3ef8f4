"""dqn_atari.py: ppo_atari.py's preprocessing chain feeds a Nature-CNN Q-network, the
buffer keeps uint8 frames that give the float frames back, and a run of 600 agent
steps trains (the TD error on its data falls against the fixed target) and logs the game
score (learning Atari takes millions of frames, far beyond this machine).
ale-py ships its ROMs: nothing is downloaded."""

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
def dqn_atari():
    return _load("dqn_atari")


def test_uint8_frames_round_trip(dqn_atari):
    cfg = dqn_atari.Config()
    env = dqn_atari.make_game(cfg)
    env.set_seed(0)
    rollout = env.rollout(8, break_when_any_done=False)
    stored = dqn_atari.to_uint8(rollout)
    assert stored["observation"].dtype == torch.uint8
    assert stored["observation"].shape == (8, 4, 84, 84)
    assert set(stored.keys(True, True)) == {
        "observation",
        "action",
        ("next", "observation"),
        ("next", "reward"),
        ("next", "done"),
        ("next", "terminated"),
        ("next", "end-of-life"),
    }
    back = dqn_atari.to_float(stored.clone())
    torch.testing.assert_close(back["observation"], rollout["observation"], atol=0.5 / 255, rtol=0)
    torch.testing.assert_close(
        back["next", "observation"], rollout["next", "observation"], atol=0.5 / 255, rtol=0
    )


def test_tiny_run_fits_its_data_logs_the_score_and_draws_the_curve(dqn_atari, tmp_path):
    cfg = dqn_atari.Config(
        total_frames=600,
        learning_starts=200,
        buffer_size=600,
        lr=1e-3,
        target_network_frequency=10**6,  # the target stays the initial network
        eval_episodes=1,
        eval_max_steps=50,
        log_dir=str(tmp_path),
        exp_name="run",
        progress=False,
    )
    out = dqn_atari.main(cfg)
    assert out["frames"] == 600 and out["updates"] == 101
    assert len(out["buffer"]) == 600
    qnet, loss_module = out["qnet"], out["loss_module"]
    convs = [m for m in qnet.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [c.weight.shape for c in convs] == [(32, 4, 8, 8), (64, 32, 4, 4), (64, 64, 3, 3)]
    # the bootstrap stops at a lost life: the loss reads the end-of-life flag
    assert loss_module.tensor_keys.terminated == "end-of-life"

    # the TD error on the collected transitions, against the fixed target: the trained
    # online network has a lower one than it had at the start (= the target's weights)
    data = dqn_atari.to_float(out["buffer"][:])
    with torch.no_grad():
        trained = loss_module(data.clone())["loss"]
        loss_module.value_network_params.data.update_(loss_module.target_value_network_params.data)
        initial = loss_module(data.clone())["loss"]
    assert trained < 0.7 * initial

    scalars = tmp_path / "run" / "scalars" / "train"
    # a gradient step every 4 steps from step 200, the loss logged every 100 of them
    rows = (scalars / "loss.csv").read_text().split()
    assert [int(r.split(",")[0]) for r in rows] == [200 + 99 * 4]
    # a game of Breakout played at random ends within 600 steps: its score is logged
    scores = [float(r.split(",")[1]) for r in (scalars / "episode_return.csv").read_text().split()]
    assert scores and min(scores) >= 0.0
    assert len(out["eval_returns"]) == 1
    assert out["curve"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_help_lists_every_field(dqn_atari, capsys, monkeypatch):
    import tyro

    monkeypatch.setattr(sys, "argv", ["dqn_atari.py", "--help"])
    with pytest.raises(SystemExit) as exit_info:
        tyro.cli(dqn_atari.Config, description=dqn_atari.__doc__)
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    for field in dqn_atari.Config.__dataclass_fields__:
        assert "--" + field.replace("_", "-") in help_text, field
