"""The Trainer-based DQN example (dqn_trainer.py) runs, logs, learns and resumes.

A tiny CartPole budget checks the logs, curve and checkpoint; a probe environment checks
that the hooks wired together really learn (the Q-values of an observation-dependent
reward, and a discounted delayed reward through the target network); a run stopped after
a checkpoint and started again with the same command resumes from it and ends with the
parameters of an uninterrupted run.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from rl.core.trainers import CheckpointError, load_checkpoint

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
def dqn():
    return _load("dqn_trainer")


def _tiny(dqn, tmp_path, **kwargs):
    """A small CartPole config: 4 batches of 128 frames, learning from the third."""
    base = {
        "total_frames": 512,
        "init_random_frames": 256,
        "frames_per_batch": 128,
        "optim_steps_per_batch": 4,
        "batch_size": 32,
        "hidden": 32,
        "eval_interval": 2,
        "eval_frames": 100,
        "eval_episodes": 2,
        "save_interval": 256,
        "log_dir": str(tmp_path),
        "exp_name": "run",
        "progress": False,
    }
    return dqn.Config(**{**base, **kwargs})


def _rows(path: Path) -> list[tuple[int, float]]:
    return [(int(s), float(v)) for s, v in (r.split(",") for r in path.read_text().splitlines())]


def test_tiny_budget_writes_logs_curve_and_checkpoint(dqn, tmp_path):
    out = dqn.main(_tiny(dqn, tmp_path))
    run = tmp_path / "run"
    assert out["frames"] == 512 and out["trainer"].collected_frames == 512
    assert out["resumed_from"] == 0
    # learning from the batch that reaches init_random_frames: 3 batches x 4 steps
    assert out["trainer"]._optim_count == 12
    assert len(out["eval_returns"]) == 2 and all(r >= 8 for r in out["eval_returns"])
    scalars = run / "scalars"
    assert [s for s, _ in _rows(scalars / "n_frames.csv")] == [128, 256, 384, 512]
    assert [v for _, v in _rows(scalars / "n_frames.csv")] == [128, 256, 384, 512]
    # the loss is logged after the batches that trained
    assert [s for s, _ in _rows(scalars / "loss.csv")] == [256, 384, 512]
    assert all(v == 1.0 for _, v in _rows(scalars / "train" / "reward.csv"))
    # CartPole episodes last at least 8 steps: every logged recent-return mean does too
    assert all(v >= 8 for _, v in _rows(scalars / "train" / "episode_return.csv"))
    # validation every 2 batches: after the 1st and the 3rd
    assert [s for s, _ in _rows(scalars / "total_r_evaluation.csv")] == [128, 384]
    assert _rows(scalars / "eval" / "return.csv") == [(512, sum(out["eval_returns"]) / 2)]
    assert out["curve"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the checkpoint holds the finished run: frames, the loss's online and target nets,
    # the replay buffer, the optimizer and the target updater's counter
    ckpt = load_checkpoint(out["checkpoint"])
    assert out["checkpoint"] == run / "checkpoint.pt"
    assert ckpt["state"]["collected_frames"] == 512
    hooks = ckpt["hooks"]
    assert {"replay_buffer", "optimizer", "target_net_updater", "count_frames_log"} <= set(hooks)
    assert hooks["target_net_updater"]["updater"]["counter"] == 12
    assert hooks["count_frames_log"]["frame_count"] == 512
    assert any("target_value_network_params" in k for k in ckpt["loss_module"])


@pytest.mark.parametrize("target_update", ["hard", "soft"])
def test_learns_the_q_values_of_a_probe(dqn, tmp_path, target_update):
    """ObservationActionRewardProbe: one step, obs ±1, reward +1 when the action matches
    the sign, else -1; the greedy action must follow the sign and Q must reach ±1."""
    env_id = "ObservationActionRewardProbe"
    cfg = _tiny(
        dqn,
        tmp_path,
        env_id=env_id,
        num_envs=8,
        total_frames=1536,
        frames_per_batch=64,
        init_random_frames=128,
        optim_steps_per_batch=16,
        lr=3e-3,
        gamma=0.9,
        target_update=target_update,
        target_update_interval=16,
        tau=0.1,
        exploration_fraction=0.5,
        eval_episodes=1,
        eval_frames=16,
    )
    out = dqn.main(cfg)
    env = _load("_common").make_base_env(env_id, 16)
    env.set_seed(123)
    td = out["qnet"](env.reset())
    obs = td["observation"]
    assert (td["action"].argmax(-1) == env.optimal_action(obs)).all()
    expected = torch.cat([-torch.ones_like(obs), torch.ones_like(obs)], -1)
    expected = torch.where(obs > 0, expected, expected.flip(-1))
    torch.testing.assert_close(td["action_value"], expected, atol=0.15, rtol=0)
    assert out["eval_returns"] == [1.0]


def test_bootstraps_a_discounted_delayed_reward(dqn, tmp_path):
    """DiscountingProbe: two steps, reward 1 at the second whatever the action; the first
    step's Q-values are gamma (learned through the target network), the second's are 1."""
    cfg = _tiny(
        dqn,
        tmp_path,
        env_id="DiscountingProbe",
        num_envs=8,
        total_frames=1536,
        frames_per_batch=64,
        init_random_frames=128,
        optim_steps_per_batch=16,
        lr=3e-3,
        gamma=0.9,
        target_update_interval=16,
        eval_episodes=1,
        eval_frames=16,
    )
    out = dqn.main(cfg)
    env = _load("_common").make_base_env("DiscountingProbe", 2)
    td = env.reset()
    first = out["qnet"](td.clone())["action_value"]
    td["observation"] = torch.ones_like(td["observation"])
    second = out["qnet"](td)["action_value"]
    torch.testing.assert_close(first, torch.full_like(first, 0.9), atol=0.07, rtol=0)
    torch.testing.assert_close(second, torch.ones_like(second), atol=0.07, rtol=0)


class _Killed(Exception):
    pass


def test_rerun_resumes_from_the_checkpoint_exactly(dqn, tmp_path, monkeypatch):
    """A run stopped right after its 256-frame checkpoint, run again with the same config,
    starts from 256 frames and ends with the parameters of a run never stopped."""
    reference = dqn.main(_tiny(dqn, tmp_path / "reference"))
    expected = {k: v.clone() for k, v in reference["trainer"].loss_module.state_dict().items()}

    class KilledAfterCheckpoint(dqn.Trainer):
        def save_trainer(self, force_save=False):
            path = super().save_trainer(force_save)
            if path is not None and self.collected_frames == 256:
                raise _Killed
            return path

    cfg = _tiny(dqn, tmp_path / "stopped")
    with monkeypatch.context() as patch:
        patch.setattr(dqn, "Trainer", KilledAfterCheckpoint)
        with pytest.raises(_Killed):
            dqn.main(cfg)
    saved = load_checkpoint(tmp_path / "stopped" / "run" / "checkpoint.pt")
    assert saved["state"]["collected_frames"] == 256

    started_at = []
    original_load = dqn.Trainer.load_from_file

    def spy(self, file):
        out = original_load(self, file)
        started_at.append(self.collected_frames)
        return out

    monkeypatch.setattr(dqn.Trainer, "load_from_file", spy)
    resumed = dqn.main(cfg)
    assert started_at == [256] and resumed["resumed_from"] == 256
    assert resumed["trainer"].collected_frames == 512
    assert resumed["trainer"]._optim_count == reference["trainer"]._optim_count == 12
    got = resumed["trainer"].loss_module.state_dict()
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert torch.equal(got[key], value), key
    # the CSV rows the stopped run wrote after its checkpoint were dropped, none repeated
    frames = _rows(tmp_path / "stopped" / "run" / "scalars" / "n_frames.csv")
    assert [s for s, _ in frames] == [128, 256, 384, 512]
    # every logged value equals the uninterrupted run's, the evaluation after the resume
    # included (its env continues from its saved state, not from its seed)
    logged = sorted(p.relative_to(tmp_path / "reference") for p in
                    (tmp_path / "reference").rglob("scalars/**/*.csv"))  # fmt: skip
    assert Path("run/scalars/total_r_evaluation.csv") in logged and len(logged) >= 6
    for name in logged:
        assert _rows(tmp_path / "stopped" / name) == _rows(tmp_path / "reference" / name), name

    # rerun once more with a larger budget: it continues from the finished run's 512
    started_at.clear()
    longer = dqn.main(_tiny(dqn, tmp_path / "stopped", total_frames=768))
    assert started_at == [512] and longer["trainer"].collected_frames == 768


def _cloudpickle_payload(marker: Path) -> bytes:
    """The hostile test's attack: gymnasium's CloudpickleWrapper runs pickle.loads on its
    payload, here one that touches ``marker``."""
    inner = f"cos\nsystem\n(S'touch {marker}'\ntR.".encode()
    head = b"cgymnasium.vector.utils.misc\nCloudpickleWrapper\n)\x81C"
    return head + bytes([len(inner)]) + inner + b"b."


@pytest.mark.parametrize("where", ["collector", "evaluation"])
def test_crafted_checkpoint_does_not_run_code_on_resume(dqn, tmp_path, monkeypatch, where):
    """A checkpoint whose env state is a pickle payload is refused on resume, before any
    code in it runs, and the run stops with an error instead of exiting 0."""
    cfg = _tiny(dqn, tmp_path, total_frames=256)
    dqn.main(cfg)
    path = tmp_path / "run" / "checkpoint.pt"
    state = load_checkpoint(path)
    marker = tmp_path / "pwned"
    payload = torch.frombuffer(bytearray(_cloudpickle_payload(marker)), dtype=torch.uint8)
    if where == "collector":
        state["collector"]["env_state"] = payload
    else:
        (hook,) = [h for h in state["hooks"].values() if "env_state" in h]
        hook["env_state"] = payload
    torch.save(state, path)
    with pytest.raises(CheckpointError, match="cannot be restored: cannot restore the state of"):
        dqn.main(_tiny(dqn, tmp_path, total_frames=512))
    assert not marker.exists()


def test_help_lists_every_field(dqn, capsys, monkeypatch):
    import tyro

    monkeypatch.setattr(sys, "argv", ["dqn_trainer.py", "--help"])
    with pytest.raises(SystemExit) as exit_info:
        tyro.cli(dqn.Config, description=dqn.__doc__)
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    for field in dqn.Config.__dataclass_fields__:
        assert "--" + field.replace("_", "-") in help_text, field
