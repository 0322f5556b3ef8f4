"""examples/ppo_rnd.py runs, writes its logs and curve, and its novelty bonus learns.

A tiny MountainCar budget checks the script end to end (with and without RND); a short
run then checks that the bonus fades on the states the car visits and stays high on the
ones it has not reached, which is what drives the exploration.
"""

from __future__ import annotations

import copy
import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from rl.objectives import RNDLoss

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
def ppo_rnd():
    _load("ppo")
    return _load("ppo_rnd")


def _tiny(ppo_rnd, tmp_path, **kwargs):
    defaults = {"total_frames": 1024, "num_envs": 4, "num_steps": 64, "eval_episodes": 1}
    return ppo_rnd.Config(
        log_dir=str(tmp_path), exp_name="run", progress=False, **{**defaults, **kwargs}
    )


def _rows(path: Path) -> list[tuple[int, float]]:
    return [(int(a), float(b)) for a, b in (r.split(",") for r in path.read_text().splitlines())]


class TestPPORND:
    def test_tiny_budget_writes_logs_keys_and_curve(self, ppo_rnd, tmp_path):
        out = ppo_rnd.main(_tiny(ppo_rnd, tmp_path))
        assert out["frames"] == 1024
        assert len(out["eval_returns"]) == 1 and -200 <= out["eval_returns"][0] < 0
        scalars = tmp_path / "run" / "scalars"
        frames = [256, 512, 768, 1024]
        for name in ("loss", "intrinsic_reward", "loss_predictor", "terminated_episodes"):
            assert [f for f, _ in _rows(scalars / "train" / f"{name}.csv")] == frames, name
        assert all(v >= 0 for _, v in _rows(scalars / "train" / "intrinsic_reward.csv"))
        assert (scalars / "eval" / "return.csv").exists()
        assert out["curve"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        # the bonus is written by the env's RNDTransform, one per env and step, and the
        # loss trains the transform's own predictor on the observations it is computed from
        rnd, rnd_loss = out["rnd"], out["rnd_loss"]
        assert rnd_loss.predictor_network is rnd.predictor_network
        assert rnd_loss.obs_rms is rnd.obs_rms and rnd.obs_rms.count > 1024
        env = ppo_rnd.TransformedEnv(ppo_rnd.make_env(ppo_rnd.Config(), 2), rnd.clone())
        rollout = env.rollout(3)
        assert rollout["next", "intrinsic_reward"].shape == (2, 3, 1)
        assert rollout["observation"].abs().max() <= 1.0  # scaled to [-1, 1]
        td = out["critic_int"](rollout["next"].select("observation"))
        assert td["state_value_int"].shape == (2, 3, 1)

    def test_without_rnd_is_plain_ppo(self, ppo_rnd, tmp_path):
        out = ppo_rnd.main(_tiny(ppo_rnd, tmp_path, rnd=False))
        assert out["rnd"] is None and out["critic_int"] is None
        train = tmp_path / "run" / "scalars" / "train"
        assert (train / "loss.csv").exists() and not (train / "intrinsic_reward.csv").exists()

    def test_intrinsic_advantage_ignores_episode_ends(self, ppo_rnd):
        """The bonus's return runs on through a done step (non-episodic, as in the paper)."""
        cfg = ppo_rnd.Config(gamma_int=0.5, gae_lambda=1.0)

        def critic_int(td):  # V = 0 everywhere: the advantage is the discounted bonus sum
            return td.set("state_value_int", torch.zeros(*td.batch_size, 1))

        critic_int.in_keys = ["observation"]
        batch = TensorDict(
            {
                "observation": torch.zeros(1, 3, 2),
                "next": {
                    "observation": torch.zeros(1, 3, 2),
                    "intrinsic_reward": torch.tensor([[[1.0], [2.0], [4.0]]]),
                    "done": torch.tensor([[[False], [True], [False]]]),
                },
            },
            [1, 3],
        )
        ppo_rnd.intrinsic_advantage(cfg, critic_int, batch)
        expected = torch.tensor([[[1.0 + 0.5 * 2 + 0.25 * 4], [2.0 + 0.5 * 4], [4.0]]])
        torch.testing.assert_close(batch["advantage_int"], expected)
        torch.testing.assert_close(batch["value_target_int"], expected)

    def test_bonus_fades_on_visited_states(self, ppo_rnd, tmp_path, monkeypatch):
        initial = []  # the predictor as it was before training

        def make_rnd(cfg, obs_dim):
            target, predictor = build(cfg, obs_dim)
            initial.append(copy.deepcopy(predictor))
            return target, predictor

        build = ppo_rnd.make_rnd
        monkeypatch.setattr(ppo_rnd, "make_rnd", make_rnd)
        out = ppo_rnd.main(_tiny(ppo_rnd, tmp_path, total_frames=4096, num_envs=8))
        rnd = out["rnd"]
        # MountainCar starts at rest between -0.6 and -0.4 (scaled: -0.33 to -0.11, 0), where
        # a young policy stays; the far corners (flag side at full speed, far left at full
        # speed backwards) are out of its reach
        position = torch.linspace(-0.6, -0.4, 32)
        seen = torch.stack([(position + 0.3) / 0.9, torch.zeros(32)], -1)
        novel = torch.tensor([[0.95, 0.95], [0.9, 0.8], [-0.95, -0.95], [-0.9, -0.8]])

        def error(predictor, obs):  # the raw prediction error, as the transform sees it
            loss = RNDLoss(predictor, rnd.target_network, obs_rms=rnd.obs_rms, update_fraction=1.0)
            return loss(TensorDict({"next": {"observation": obs}}, [len(obs)]))["loss_predictor"]

        trained = rnd.predictor_network
        assert error(trained, seen) < 0.25 * error(initial[0], seen)  # it fell by training
        assert error(trained, seen) < 0.1 * error(trained, novel)
        # and so does the (normalised) bonus the env writes
        rnd.eval()

        def bonus(obs):
            return rnd(TensorDict(observation=obs, batch_size=[len(obs)]))["intrinsic_reward"]

        assert bonus(seen).mean() < 0.1 * bonus(novel).mean()

    def test_help_lists_every_field(self, ppo_rnd, capsys, monkeypatch):
        import tyro

        monkeypatch.setattr(sys, "argv", ["ppo_rnd.py", "--help"])
        with pytest.raises(SystemExit) as exit_info:
            tyro.cli(ppo_rnd.Config, description=ppo_rnd.__doc__)
        assert exit_info.value.code == 0
        help_text = capsys.readouterr().out
        for field in ppo_rnd.Config.__dataclass_fields__:
            flag = "--" + field.replace("_", "-")
            assert flag in help_text or f"--no-{field}" in help_text, field
