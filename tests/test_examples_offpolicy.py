"""The off-policy examples: they run on a tiny budget, and they learn the probe envs.

Each algorithm trains for a few seconds on the probe environments that fit it
(``rl.envs`` probes: one-step or two-step envs with a known answer) and must find it:
the best action (the continuous one is ``±1.5`` in ``[-2, 2]``, out of reach of an
actor that forgets to rescale its ``tanh``), the value of it, and the discounted value
of a delayed reward.
"""

from __future__ import annotations

import csv
import importlib.util
import runpy
import sys
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from rl.core import ExplorationType, set_exploration_type
from rl.envs import DiscountingProbe, ObservationActionRewardProbe

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _run_dir(tmp_path: Path) -> Path:
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    return run_dir


def _scalars(run_dir: Path, key: str) -> list[tuple[int, float]]:
    with open(run_dir / "scalars" / f"{key}.csv") as f:
        return [(int(step), float(value)) for step, value in csv.reader(f)]


TINY = {"eval_episodes": 1, "progress": False, "seed": 0}
TINY_CONTINUOUS = {
    "total_frames": 300,
    "init_random_frames": 100,
    "frames_per_batch": 50,
    "utd_ratio": 0.2,
    "batch_size": 32,
    "hidden": 16,
}
# (script, overrides of its Config) for the smoke runs
SMOKE = {
    "dqn": {
        "total_frames": 300,
        "init_random_frames": 100,
        "frames_per_batch": 50,
        "updates_per_batch": 5,
        "batch_size": 32,
        "hidden": 16,
        "dueling": True,
        "prioritized": True,
    },
    "sac": TINY_CONTINUOUS,
    "td3": TINY_CONTINUOUS,
    "ddpg": TINY_CONTINUOUS,
    "redq": {**TINY_CONTINUOUS, "num_qvalue_nets": 4},
    "crossq": {**TINY_CONTINUOUS, "critic_hidden": 16},
    "tqc": {**TINY_CONTINUOUS, "num_quantiles": 5},
    "cql_online": {**TINY_CONTINUOUS, "num_random": 4},
    "discrete_sac": {
        "total_frames": 300,
        "init_random_frames": 100,
        "frames_per_batch": 50,
        "utd_ratio": 0.2,
        "batch_size": 32,
        "hidden": 16,
        "eval_interval": 0,
    },
}


@pytest.mark.parametrize("name", sorted(SMOKE))
def test_script_runs_and_writes_logs_and_curve(name, tmp_path):
    module = _load(name)
    cfg = module.Config(log_dir=str(tmp_path), **TINY, **SMOKE[name])
    summary = module.main(cfg)
    assert summary["frames"] == cfg.total_frames
    assert len(summary["eval_returns"]) == 1
    run_dir = _run_dir(tmp_path)
    assert summary["curve"] == run_dir / "learning_curve.png"
    assert summary["curve"].stat().st_size > 0
    assert _scalars(run_dir, "eval/return") == [(cfg.total_frames, summary["eval_mean"])]
    assert _scalars(run_dir, "train/episode_return")  # episodes ended while training
    losses = [p.stem for p in (run_dir / "scalars" / "train").iterdir()]
    assert any(stem.startswith("loss") for stem in losses)


def test_help_lists_every_field(capsys, monkeypatch):
    # the script's own entry point (`python dqn.py --help`), run in this interpreter: a
    # child would spend its seconds importing torch and rl (that the scripts run as
    # commands: test_examples.py's test_command_line_prints_the_mean_return)
    dqn = _load("dqn")
    monkeypatch.setattr(sys, "argv", [str(EXAMPLES / "dqn.py"), "--help"])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(EXAMPLES / "dqn.py"), run_name="__main__")
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for field in dqn.Config.__dataclass_fields__:
        assert f"--{field.replace('_', '-')}" in out, field
    assert "Prioritized experience replay" in out  # the field docstrings are the help


# ------------------------------------------------------------------------ probes


def _probe_obs() -> torch.Tensor:
    return torch.tensor([[-1.0], [1.0]])


def _action_values(qnet, obs: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return qnet(TensorDict(observation=obs, batch_size=obs.shape[:1]))["action_value"]


def _dqn_probe(env_id: str, seed: int, log_dir: Path, **overrides) -> dict:
    dqn = _load("dqn")
    cfg = dqn.Config(
        env_id=env_id,
        total_frames=1_000,
        init_random_frames=200,
        frames_per_batch=50,
        updates_per_batch=25,
        batch_size=64,
        lr=3e-3,
        hidden=32,
        target_update_interval=25,
        exploration_fraction=0.5,
        log_dir=str(log_dir),
        eval_episodes=1,
        progress=False,
        seed=seed,
        **overrides,
    )
    return dqn.main(cfg)


@pytest.mark.parametrize("seed", [0])
def test_dqn_learns_observation_action_probe(seed, tmp_path):
    summary = _dqn_probe("ObservationActionRewardProbe", seed, tmp_path)
    probe = ObservationActionRewardProbe()
    obs = _probe_obs()
    q = _action_values(summary["qnet"], obs)  # [2 obs, 2 actions]
    assert q.argmax(-1).tolist() == probe.optimal_action(obs).tolist()
    # the best action's value is the reward +1, the other one's -1
    torch.testing.assert_close(q.max(-1).values, torch.ones(2), atol=0.15, rtol=0)
    torch.testing.assert_close(q.min(-1).values, -torch.ones(2), atol=0.3, rtol=0)
    assert summary["eval_mean"] == 1.0


@pytest.mark.parametrize("seed", [0])
def test_dqn_discounts_the_delayed_reward(seed, tmp_path):
    gamma = 0.8
    summary = _dqn_probe("DiscountingProbe", seed, tmp_path, gamma=gamma)
    obs = torch.tensor([[0.0], [1.0]])
    value = _action_values(summary["qnet"], obs).max(-1).values.unsqueeze(-1)
    expected = DiscountingProbe().expected_value(obs, gamma=gamma)  # [[0.8], [1.0]]
    torch.testing.assert_close(value, expected, atol=0.08, rtol=0)


# 400 updates after 200 random frames: every agent below finds the best actions within
# 0.3 with seeds 0, 1 and 2 (checked when the budget came down from 1,000 frames)
CONTINUOUS_PROBE = {
    "total_frames": 600,
    "init_random_frames": 200,
    "frames_per_batch": 50,
    "utd_ratio": 1.0,
    "batch_size": 64,
    "lr": 3e-3,
    "hidden": 32,
}


@pytest.mark.parametrize("name", ["sac", "td3", "ddpg", "redq", "crossq", "tqc", "cql_online"])
@pytest.mark.parametrize("seed", [0])
def test_continuous_agent_finds_the_scaled_best_action(name, seed, tmp_path):
    module = _load(name)
    extra = {"num_qvalue_nets": 4} if name == "redq" else {}
    extra = {"critic_hidden": 64} if name == "crossq" else extra
    cfg = module.Config(
        env_id="ObservationActionRewardProbe-continuous",
        **CONTINUOUS_PROBE,
        **extra,
        eval_episodes=1,
        progress=False,
        seed=seed,
        log_dir=str(tmp_path),
    )
    summary = module.main(cfg)
    probe = ObservationActionRewardProbe(continuous=True)
    obs = _probe_obs()
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        td = probe.fake_tensordict().expand(2).clone()
        td["observation"] = obs
        action = summary["actor"](td)["action"]
    # the best actions are -1.5 and +1.5: an unscaled tanh could not pass
    torch.testing.assert_close(action, probe.optimal_action(obs), atol=0.3, rtol=0)


@pytest.mark.parametrize("seed", [0])
def test_discrete_sac_learns_observation_action_probe(seed, tmp_path):
    discrete_sac = _load("discrete_sac")
    cfg = discrete_sac.Config(
        env_id="ObservationActionRewardProbe",
        total_frames=1_000,
        init_random_frames=200,
        frames_per_batch=50,
        utd_ratio=0.5,
        batch_size=64,
        lr=3e-3,
        hidden=32,
        eval_interval=500,
        eval_interval_episodes=2,
        eval_episodes=1,
        progress=False,
        seed=seed,
        log_dir=str(tmp_path),
    )
    summary = discrete_sac.main(cfg)
    probe = ObservationActionRewardProbe()
    obs = _probe_obs()
    td = TensorDict(observation=obs, batch_size=[2])
    critics = summary["loss_module"].qvalue_network_params  # the two trained critics
    with torch.no_grad():
        logits = summary["actor"](td.clone())["logits"]
        qs = []
        for i in range(2):
            with critics[i].to_module(summary["qvalue"]):
                qs.append(summary["qvalue"](td.clone())["action_value"])  # [2 obs, 2 actions]
    best = probe.optimal_action(obs)
    assert logits.argmax(-1).tolist() == best.tolist()
    # one step then terminated: each critic's value of an action is its reward, +1 or -1
    for q in qs:
        torch.testing.assert_close(
            q.gather(-1, best.view(2, 1)), torch.ones(2, 1), atol=0.2, rtol=0
        )
        torch.testing.assert_close(q.min(-1).values, -torch.ones(2), atol=0.4, rtol=0)
    assert summary["eval_mean"] == 1.0
    # the evaluations during training were logged, the last weights' return beside them
    assert [step for step, _ in _scalars(_run_dir(tmp_path), "eval/return")] == [500, 1000, 1000]
    assert _scalars(_run_dir(tmp_path), "eval/last_weights_return")[0][0] == 1000


# ----------------------------------------------------------------------- offline


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory):
    sac = _load("sac")
    root = tmp_path_factory.mktemp("dataset")
    cfg = sac.Config(
        **TINY,
        **{**TINY_CONTINUOUS, "total_frames": 400},
        log_dir=str(root / "runs"),
        save_buffer=str(root / "data"),
    )
    summary = sac.main(cfg)
    return root / "data", summary


def test_sac_saves_its_buffer_as_a_dataset(tiny_dataset):
    path, summary = tiny_dataset
    offline = _load("offline")
    import _offpolicy

    buffer, info = _offpolicy.open_dataset(path, batch_size=8)
    assert len(buffer) == info["length"] == 400
    assert info["env_id"] == "Pendulum-v1"
    assert info["policy_return"] == summary["eval_mean"]
    assert info["random_return"] < 0
    batch = buffer.sample()
    assert batch["observation"].shape == (8, 3)
    assert batch["next", "reward"].shape == (8, 1)
    assert offline.Config().algo == "iql"


def test_offline_fills_each_algorithms_defaults():
    # fields left at None take the chosen algorithm's values; values given are kept
    offline = _load("offline")
    iql = offline.resolve(offline.Config())
    assert (iql.num_updates, iql.lr, iql.tau, iql.hidden) == (10_000, 3e-4, 0.005, 256)
    assert iql.normalize_obs is False
    cql = offline.resolve(offline.Config(algo="cql"))
    assert (cql.num_updates, cql.lr, cql.tau, cql.hidden) == (10_000, 1e-3, 0.02, 128)
    assert cql.normalize_obs is True
    given = offline.resolve(offline.Config(algo="cql", lr=5e-4, hidden=32, normalize_obs=False))
    assert (given.lr, given.hidden, given.tau, given.normalize_obs) == (5e-4, 32, 0.02, False)


def test_offline_observation_norms_standardise_the_dataset(tiny_dataset):
    path, _ = tiny_dataset
    offline = _load("offline")
    import _offpolicy

    buffer, _ = _offpolicy.open_dataset(path, batch_size=8)
    data = buffer[: len(buffer)]
    batch_norm, env_norm = offline.observation_norms(buffer)
    out = batch_norm(data.clone())
    torch.testing.assert_close(out["observation"].mean(0), torch.zeros(3), atol=1e-4, rtol=0)
    torch.testing.assert_close(out["observation"].std(0), torch.ones(3), atol=1e-4, rtol=0)
    loc, scale = data["observation"].mean(0), data["observation"].std(0)
    expected_next = (data["next", "observation"] - loc) / scale
    torch.testing.assert_close(out["next", "observation"], expected_next)
    torch.testing.assert_close(out["action"], data["action"])  # only observations move
    assert env_norm.in_keys == ["observation"]
    torch.testing.assert_close(env_norm.loc, loc)
    # once appended, the buffer's reads go through it; the files stay raw
    buffer.append_transform(batch_norm)
    torch.testing.assert_close(buffer[: len(buffer)]["observation"], out["observation"])
    reopened, _ = _offpolicy.open_dataset(path, batch_size=8)
    torch.testing.assert_close(reopened[: len(reopened)]["observation"], data["observation"])


@pytest.mark.parametrize("algo", ["iql", "cql"])
def test_offline_trains_on_the_dataset(algo, tiny_dataset, tmp_path):
    path, _ = tiny_dataset
    offline = _load("offline")
    cfg = offline.Config(
        dataset=str(path),
        algo=algo,
        num_updates=20,
        log_interval=10,
        batch_size=32,
        hidden=16,
        log_dir=str(tmp_path),
        **TINY,
        **({"bc_steps": 10} if algo == "cql" else {}),  # past CQL's warm-up
    )
    summary = offline.main(cfg)
    span = summary["data_return"] - summary["random_return"]
    expected = 100 * (summary["eval_mean"] - summary["random_return"]) / span
    assert summary["score"] == pytest.approx(expected)
    run_dir = _run_dir(tmp_path)
    assert [step for step, _ in _scalars(run_dir, "train/loss_qvalue")] == [10, 20]
    assert summary["curve"].exists()


def _cql(path, tmp_path, name, **overrides):
    offline = _load("offline")
    cfg = offline.Config(
        dataset=str(path),
        algo="cql",
        num_updates=6,
        log_interval=3,
        batch_size=16,
        hidden=8,
        num_random=2,
        log_dir=str(tmp_path),
        exp_name=name,
        **{**TINY, "eval_episodes": 1},
        **overrides,
    )
    return offline.main(cfg)


def test_offline_evaluates_on_the_normalised_env(tiny_dataset, tmp_path):
    # the networks see standardised observations: the evaluation env standardises too
    path, _ = tiny_dataset
    import _offpolicy

    summary = _cql(path, tmp_path, "normalised")
    seed = TINY["seed"]
    assert summary["obs_norm"] is not None
    env = _offpolicy.make_env("Pendulum-v1")
    env.append_transform(summary["obs_norm"].clone())
    env.set_seed(seed + 1000)
    assert _offpolicy.evaluate(env, summary["actor"], 1) == pytest.approx(summary["eval_returns"])
    raw = _offpolicy.make_env("Pendulum-v1")
    raw.set_seed(seed + 1000)
    assert _offpolicy.evaluate(raw, summary["actor"], 1) != pytest.approx(summary["eval_returns"])


def test_cql_bc_warm_up_keeps_the_critics_out_of_the_actor(tiny_dataset, tmp_path):
    # during the warm-up the actor clones the data: a critic trained with another penalty
    # weight (same draws) leaves it unchanged; after the warm-up the critics steer it
    path, _ = tiny_dataset

    def actor_weights(name, **kw):
        summary = _cql(path, tmp_path, name, **kw)
        return [p.detach().clone() for p in summary["actor"].parameters()]

    for a, b in zip(
        actor_weights("w1", bc_steps=6, min_q_weight=1.0),
        actor_weights("w9", bc_steps=6, min_q_weight=9.0),
        strict=True,
    ):
        torch.testing.assert_close(a, b)
    differ = [
        not torch.equal(a, b)
        for a, b in zip(
            actor_weights("n1", bc_steps=2, min_q_weight=1.0),
            actor_weights("n9", bc_steps=2, min_q_weight=9.0),
            strict=True,
        )
    ]
    assert any(differ)


def test_cql_lagrange_learns_the_penalty_weight(tiny_dataset, tmp_path):
    path, _ = tiny_dataset
    summary = _cql(path, tmp_path, "lagrange", with_lagrange=True, lagrange_thresh=1e3)
    # the penalty sits far below its target gap: the multiplier's loss lowers alpha_prime
    assert summary["loss_module"].log_alpha_prime.item() < 0
    assert [step for step, _ in _scalars(tmp_path / "lagrange", "train/loss_alpha_prime")] == [
        3,
        6,
    ]


def test_cql_learns_its_temperature_unless_fixed(tiny_dataset, tmp_path):
    path, _ = tiny_dataset
    fixed = _cql(path, tmp_path, "fixed", bc_steps=2, alpha_init=0.5)
    assert fixed["loss_module"].log_alpha.exp().item() == pytest.approx(0.5)
    learnt = _cql(path, tmp_path, "learnt", bc_steps=2, alpha_init=0.5, fixed_alpha=False)
    assert learnt["loss_module"].log_alpha.exp().item() != pytest.approx(0.5)
    assert [step for step, _ in _scalars(tmp_path / "learnt", "train/loss_alpha")] == [3, 6]
    assert not (tmp_path / "fixed" / "scalars" / "train" / "loss_alpha.csv").exists()


def test_offline_names_a_missing_dataset(tmp_path):
    offline = _load("offline")
    cfg = offline.Config(dataset=str(tmp_path / "nothing"), log_dir=str(tmp_path), **TINY)
    with pytest.raises(FileNotFoundError, match="sac.py --save-buffer"):
        offline.main(cfg)


def test_dqn_ends_with_the_best_evaluated_weights(tmp_path, monkeypatch):
    # evaluations every 100 frames; the script must end with the weights that scored
    # best there (ties: the later ones), and log the last weights' return apart
    dqn = _load("dqn")
    scores = iter([10.0, 30.0, 20.0])  # the second evaluation is the best
    snapshots = []
    evaluate = dqn.Run.evaluate

    def fake_evaluate(self, env_id, policy, episodes, seed_offset=1000):
        if 2000 < seed_offset < 3000:  # an evaluation during training (3000: last weights)
            snapshots.append({k: v.clone() for k, v in policy.state_dict().items()})
            return [next(scores)] * episodes
        return evaluate(self, env_id, policy, episodes, seed_offset)

    monkeypatch.setattr(dqn.Run, "evaluate", fake_evaluate)
    cfg = dqn.Config(
        log_dir=str(tmp_path),
        **TINY,
        **{**SMOKE["dqn"], "prioritized": False, "dueling": False},
        eval_interval=100,
        eval_interval_episodes=2,
    )
    cfg.total_frames = 300
    summary = dqn.main(cfg)
    assert len(snapshots) == 3
    final = summary["qnet"].state_dict()
    for key, value in snapshots[1].items():
        torch.testing.assert_close(final[key], value)
    assert not all(torch.equal(final[k], v) for k, v in snapshots[2].items())
    run_dir = _run_dir(tmp_path)
    assert [s for _, s in _scalars(run_dir, "eval/return")][:3] == [10.0, 30.0, 20.0]
    ((step, _),) = _scalars(run_dir, "eval/last_weights_return")
    assert step == 300
