"""examples/decision_transformer.py: windows of the dataset, the online replay of the best
episodes, and the offline and --online runs on a tiny budget (logs, curve, the normalised
score, the paired score change)."""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from tensordict import TensorDict

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _scalars(run_dir: Path, key: str) -> list[tuple[int, float]]:
    with open(run_dir / "scalars" / f"{key}.csv") as f:
        return [(int(step), float(value)) for step, value in csv.reader(f)]


@pytest.fixture(scope="module")
def dt():
    return _load("decision_transformer")


@pytest.fixture(scope="module")
def tiny_dataset(dt, tmp_path_factory):
    """Two Pendulum episodes of random actions, saved as ``sac.py --save-buffer`` does."""
    import _offpolicy  # on the path once the example is loaded

    path = tmp_path_factory.mktemp("dataset") / "data"
    env = _offpolicy.make_env("Pendulum-v1")
    env.set_seed(0)
    buffer = _offpolicy.make_replay_buffer(400, 8, scratch_dir=path)
    buffer.extend(_offpolicy.transitions(env.rollout(400, break_when_any_done=False)))
    cfg = SimpleNamespace(env_id="Pendulum-v1", seed=0, eval_episodes=1)
    _offpolicy.save_dataset(buffer, path, cfg, policy_return=-1000.0)
    return path


def test_windows_end_at_a_step_and_are_zero_padded_before_the_start(dt):
    # episode e, step t holds 100 * (e + 1) + t + 1 in every entry
    def episode(e: int, length: int) -> TensorDict:
        value = (100 * (e + 1) + torch.arange(1.0, length + 1)).unsqueeze(-1)
        return TensorDict({key: value for key in dt.KEYS}, batch_size=[length])

    windows = dt.Windows([episode(0, 3), episode(1, 5)], context=4)
    torch.manual_seed(0)
    batch = windows.sample(200)
    assert batch.batch_size == (200, 4)
    obs = batch[dt.KEYS[0]].squeeze(-1)
    torch.testing.assert_close(batch["action"], batch[dt.KEYS[1]])
    for row in obs:
        real = row[row > 0]
        assert (row[: 4 - len(real)] == 0).all()  # padding first, then consecutive steps
        assert (real.diff() == 1).all()
        step = int(real[0].item()) % 100
        assert step == 1 or len(real) == 4  # a short window starts at the episode's start
    ends = {int(v) for v in obs[:, -1]}
    assert ends == {101, 102, 103, 201, 202, 203, 204, 205}  # every step ends some window


def test_replay_keeps_the_best_episodes_and_replaces_the_lowest_first(dt):
    # Zheng et al.'s replay: the best `size` episodes by return, the lowest of them first
    def episode(ret: float, length: int = 3) -> TensorDict:
        rtg = torch.full((length, 1), ret * 0.01)  # returns-to-go scaled by 0.01
        rtg[1:] = rtg[1:] / 2  # only the first step's is the episode's return
        value = torch.full((length, 1), ret)
        return TensorDict(
            {dt.KEYS[0]: value, dt.KEYS[1]: value, dt.KEYS[2]: rtg}, batch_size=[length]
        )

    data = [episode(r) for r in (-500.0, -10.0, -300.0, -50.0, -1000.0)]
    replay, returns = dt.best_episodes_first_replaced(data, 0.01, size=3, context=2)
    assert returns == pytest.approx([-300.0, -50.0, -10.0])
    assert len(replay.lengths) == 3
    stored = replay.store[dt.KEYS[0]][:, 1, 0]  # the first real step (one zero before it)
    torch.testing.assert_close(stored, torch.tensor([-300.0, -50.0, -10.0]))
    replay.replace(0, episode(-20.0, length=2))  # the slot of the lowest return
    torch.testing.assert_close(
        replay.store[dt.KEYS[0]][0, 1:, 0], torch.tensor([-20.0, -20.0, 0.0])
    )
    assert replay.lengths.tolist() == [2, 3, 3]
    torch.manual_seed(0)
    ends = replay.sample(300)[dt.KEYS[0]][:, -1, 0]
    assert set(ends.tolist()) == {-20.0, -50.0, -10.0}  # -300 and the dropped ones are gone
    _, all_returns = dt.best_episodes_first_replaced(data, 0.01, size=10, context=2)
    assert len(all_returns) == 5  # all of them when the dataset holds fewer


def test_mean_std(dt):
    assert dt.mean_std([1.0, 3.0]) == pytest.approx((2.0, 2**0.5))
    assert dt.mean_std([4.0]) == (4.0, 0.0)


def test_offline_run(dt, tiny_dataset, tmp_path):
    cfg = dt.Config(
        dataset=str(tiny_dataset),
        num_updates=20,
        batch_size=8,
        context=5,
        n_embd=16,
        n_layer=1,
        log_interval=10,
        eval_interval=10,
        eval_interval_episodes=1,
        eval_episodes=1,
        log_dir=str(tmp_path),
        progress=False,
    )
    summary = dt.main(cfg)
    span = summary["data_return"] - summary["random_return"]
    assert summary["score"] == pytest.approx(
        100 * (summary["eval_mean"] - summary["random_return"]) / span
    )
    assert summary["target_return"] == summary["data_return"] == -1000.0
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert [step for step, _ in _scalars(run_dir, "train/loss")] == [10, 20]
    assert [step for step, _ in _scalars(run_dir, "eval/return")] == [10, 20]
    assert summary["curve"].exists()
    assert type(summary["actor"].module[0].module).__name__ == "DTActor"


def test_online_run(dt, tiny_dataset, tmp_path):
    cfg = dt.Config(
        dataset=str(tiny_dataset),
        online=True,
        num_updates=10,
        online_episodes=2,
        online_updates=3,
        batch_size=8,
        context=5,
        n_embd=16,
        n_layer=1,
        log_interval=10,
        eval_interval=100,
        eval_episodes=1,
        log_dir=str(tmp_path),
        progress=False,
    )
    summary = dt.main(cfg)
    assert "offline_score" in summary and "score" in summary
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert [step for step, _ in _scalars(run_dir, "train/episode_return")] == [10, 13]
    assert [step for step, _ in _scalars(run_dir, "train/loss_alpha")] == [10, 13, 16]
    assert type(summary["loss_module"]).__name__ == "OnlineDTLoss"
    # collected aiming at half the (negative) evaluation target, paired before/after change
    assert summary["online_target_return"] == summary["target_return"] / 2 == -500.0
    assert len(summary["online_returns"]) == 2
    assert [r for _, r in _scalars(run_dir, "train/episode_return")] == pytest.approx(
        summary["online_returns"]
    )
    span = summary["data_return"] - summary["random_return"]
    change = [a - b for a, b in zip(summary["eval_returns"], summary["offline_returns"])]
    assert summary["score_change"] == pytest.approx(100 * sum(change) / len(change) / span)
    assert summary["score"] - summary["offline_score"] == pytest.approx(summary["score_change"])
