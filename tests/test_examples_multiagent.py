"""The multi-agent examples (mappo.py, ippo.py, qmix.py, maddpg.py, iddpg.py, masac.py) run
on VMAS and learn.

A tiny VMAS budget checks each script end to end on ``navigation`` and on the
``balance`` preset (logs, curve, evaluation);
the multi-agent sign probe (``--scenario probe``: every agent must answer its own random
sign) checks in seconds that each algorithm learns through the group keys: MAPPO with a
centralised critic and shared parameters, IPPO with one actor and critic per agent, QMIX
and VDN with discrete actions, MADDPG / IDDPG and MASAC off-policy from a replay buffer.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

from rl.core import ExplorationType, set_exploration_type

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "multiagent"
_has_vmas = importlib.util.find_spec("vmas") is not None


def _load(name: str):
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and `from mappo import ...` look it up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def mappo():
    return _load("mappo")


@pytest.fixture(scope="module")
def qmix():
    return _load("qmix")


@pytest.fixture(scope="module")
def ippo(mappo):
    return _load("ippo")


@pytest.fixture(scope="module")
def maddpg():
    return _load("maddpg")


@pytest.fixture(scope="module")
def iddpg(maddpg):
    return _load("iddpg")


@pytest.fixture(scope="module")
def masac():
    return _load("masac")


def test_presets_name_the_task(mappo, ippo, qmix):
    # balance as BenchMARL's vmas/balance task: 4 agents, 100-step episodes
    for module in (mappo, ippo, qmix):
        cfg = module.PRESETS["balance"][1]
        assert (cfg.scenario, cfg.n_agents, cfg.max_steps) == ("balance", 4, 100)
    # the navigation preset is the scripts' defaults (the README's navigation rows)
    assert mappo.PRESETS["navigation"][1] == mappo.Config()
    assert ippo.PRESETS["navigation"][1] == mappo.Config(centralised_critic=False)
    assert qmix.PRESETS["navigation"][1] == qmix.Config()
    assert mappo.PRESETS["balance"][1].centralised_critic
    assert not ippo.PRESETS["balance"][1].centralised_critic
    assert mappo.PRESETS["balance"][1].total_frames == ippo.PRESETS["balance"][1].total_frames


def test_balance_presets_follow_benchmarl(mappo, ippo, qmix):
    # MAPPO / IPPO on balance: BenchMARL's fine_tuned/vmas on-policy settings (60,000-frame
    # batches of 600 envs x 100 steps, minibatches of 4,096, lr 5e-5, gamma 0.9, no
    # entropy bonus, gradient clip 5, L2 critic loss) for 20 batches
    for module in (mappo, ippo):
        cfg = module.PRESETS["balance"][1]
        assert cfg.num_envs * cfg.max_steps == 60_000
        assert (cfg.minibatch_size, cfg.update_epochs) == (4096, 3)
        assert (cfg.lr, cfg.gamma, cfg.gae_lambda, cfg.clip_coef) == (5e-5, 0.9, 0.9, 0.2)
        assert (cfg.ent_coef, cfg.max_grad_norm, cfg.loss_critic_type) == (0.0, 5.0, "l2")
        assert (cfg.init_scale, cfg.normalize_advantage) == (1.0, False)
        assert (cfg.total_frames, cfg.eval_episodes) == (1_200_000, 200)
    # QMIX on balance: the navigation settings for 240,000 frames (40 batches)
    cfg = qmix.PRESETS["balance"][1]
    navigation = qmix.PRESETS["navigation"][1]
    assert cfg == dataclasses.replace(
        navigation,
        scenario="balance",
        n_agents=4,
        total_frames=240_000,
        eval_episodes=200,
    )


def test_preset_cli(mappo, ippo, qmix):
    from _marl_common import preset_cli

    assert preset_cli(qmix.PRESETS, "navigation", "", args=[]) == qmix.Config()
    cfg = preset_cli(ippo.PRESETS, "navigation", "", args=["balance", "--seed", "2"])
    assert cfg == dataclasses.replace(ippo.PRESETS["balance"][1], seed=2)
    # flags without a preset apply to the default one
    cfg = preset_cli(ippo.PRESETS, "navigation", "", args=["--no-share-params"])
    assert cfg == mappo.Config(centralised_critic=False, share_params=False)
    with pytest.raises(SystemExit):
        preset_cli(mappo.PRESETS, "navigation", "", args=["balance", "--no-such-flag"])


def _probe_actions(out, cfg, module, key):
    """The trained policy's deterministic actions and the signs it saw, on a fresh probe."""
    env = module.make_env(cfg, 32, seed=7)
    td = env.reset()
    with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
        out[key](td)
    return td["agents", "action"], td["agents", "observation"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "centralised_critic, share_params, value_norm",
    [(True, True, "none"), (False, False, "none"), (True, True, "popart")],
    ids=["mappo", "ippo", "mappo-popart"],
)
def test_ppo_learns_the_probe(mappo, tmp_path, centralised_critic, share_params, value_norm):
    cfg = mappo.Config(
        scenario="probe",
        n_agents=2,
        max_steps=4,
        num_envs=32,
        total_frames=32 * 4 * 16,
        update_epochs=4,
        minibatch_size=32,
        hidden=32,
        lr=3e-3,
        eval_episodes=16,
        centralised_critic=centralised_critic,
        share_params=share_params,
        value_norm=value_norm,
        log_dir=str(tmp_path),
        exp_name="run",
        progress=False,
    )
    torch.manual_seed(0)
    out = mappo.main(cfg)
    # best answer: a = s / 2 (reward 0); answering 0 earns -1 a step, 4 steps an episode
    assert out["eval_mean"] > -0.4, out["eval_returns"]
    action, sign = _probe_actions(out, cfg, mappo, "actor")
    torch.testing.assert_close(action, sign / 2, atol=0.2, rtol=0)
    assert (tmp_path / "run" / "learning_curve.png").is_file()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mixer", ["qmix", "vdn"])
def test_qmix_learns_the_probe(qmix, tmp_path, mixer):
    cfg = qmix.Config(
        scenario="probe",
        n_agents=2,
        max_steps=4,
        num_envs=32,
        total_frames=32 * 4 * 8,
        buffer_size=2048,
        batch_size=64,
        updates_per_batch=20,
        hidden=32,
        mixing_embed_dim=8,
        lr=3e-3,
        mixer=mixer,
        eval_episodes=16,
        log_dir=str(tmp_path),
        exp_name="run",
        progress=False,
    )
    torch.manual_seed(0)
    out = qmix.main(cfg)
    # the right answer earns 1 a step (4 an episode); a constant one earns 2 on average
    assert out["eval_mean"] >= 3.8, out["eval_returns"]
    action, sign = _probe_actions(out, cfg, qmix, "qnet")
    assert ((action - 1).unsqueeze(-1).float() == sign).float().mean() >= 0.95


@pytest.mark.skipif(not _has_vmas, reason='needs VMAS: pip install "rl-envs[vmas]"')
@pytest.mark.timeout(120)
@pytest.mark.parametrize("preset", ["navigation", "balance"])
@pytest.mark.parametrize("script", ["mappo", "qmix"])
def test_scripts_run_on_vmas(mappo, qmix, tmp_path, script, preset):
    module = {"mappo": mappo, "qmix": qmix}[script]
    small = {"update_epochs": 1} if script == "mappo" else {"updates_per_batch": 2}
    cfg = dataclasses.replace(
        module.PRESETS[preset][1],
        num_envs=4,
        max_steps=5,
        total_frames=40,
        hidden=16,
        eval_episodes=2,
        log_dir=str(tmp_path),
        exp_name="run",
        progress=False,
        **small,
    )
    out = module.main(cfg)
    assert out["frames"] == 40
    assert len(out["eval_returns"]) == 2 and all(math.isfinite(r) for r in out["eval_returns"])
    assert (tmp_path / "run" / "scalars" / "train" / "loss.csv").is_file()
    env = out["make_env"](cfg, 2, seed=0)
    n_agents = {"navigation": 3, "balance": 4}[preset]
    assert env.observation_spec["agents", "observation"].shape[:2] == (2, n_agents)


# VMAS's hand-written HeuristicPolicy for balance (every agent pushes up while the package is
# below the goal) gets 13.4 with continuous actions; random actions -5.8 / -6.8, doing
# nothing -1.4 (README.md, bench_examples_multiagent.py --baselines --preset balance)
BALANCE_HEURISTIC = 13.4


@pytest.mark.slow
@pytest.mark.skipif(not _has_vmas, reason='needs VMAS: pip install "rl-envs[vmas]"')
@pytest.mark.timeout(3600)
def test_mappo_learns_vmas_balance(mappo, tmp_path):
    # the balance preset, seed 0 (the results file's mappo/balance/0 run: evaluation 23.6),
    # 1.2M frames, about 20 minutes on a shared core
    cfg = dataclasses.replace(
        mappo.PRESETS["balance"][1], log_dir=str(tmp_path), exp_name="run", progress=False
    )
    out = mappo.main(cfg)
    assert out["frames"] == 1_200_000
    assert out["eval_mean"] > BALANCE_HEURISTIC, out["eval_returns"]


@pytest.mark.slow
@pytest.mark.skipif(not _has_vmas, reason='needs VMAS: pip install "rl-envs[vmas]"')
@pytest.mark.timeout(3600)
def test_qmix_learns_vmas_balance(qmix, tmp_path):
    # the balance preset, seed 0 (the results file's qmix/balance/0 run: evaluation 54.2),
    # 240k frames
    cfg = dataclasses.replace(
        qmix.PRESETS["balance"][1], log_dir=str(tmp_path), exp_name="run", progress=False
    )
    out = qmix.main(cfg)
    assert out["frames"] == 240_000
    assert out["eval_mean"] > BALANCE_HEURISTIC, out["eval_returns"]


def test_qmix_refuses_a_run_without_updates(qmix):
    with pytest.raises(ValueError, match="updates_per_batch must be at least 1, got 0"):
        qmix.Config(updates_per_batch=0)


def _off_policy_probe(module, tmp_path, **overrides):
    """A probe run of an off-policy script: 2 agents, 4-step episodes, 16 batches of 32 envs
    x 4 steps, 20 updates of 64 each; gamma 0 (the probe's signs are drawn anew each step,
    so a transition's value is its reward)."""
    cfg = module.Config(
        scenario="probe",
        n_agents=2,
        max_steps=4,
        num_envs=32,
        collect_steps=4,
        total_frames=32 * 4 * 16,
        batch_size=64,
        updates_per_batch=20,
        hidden=32,
        gamma=0.0,
        eval_episodes=16,
        log_dir=str(tmp_path),
        exp_name="run",
        progress=False,
        **overrides,
    )
    torch.manual_seed(0)
    return cfg, module.main(cfg)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("script", ["maddpg", "iddpg"])
def test_ddpg_learns_the_probe(maddpg, iddpg, tmp_path, script):
    # iddpg.py is maddpg.py with centralised_critic=False (its presets)
    critic = iddpg.PRESETS["navigation"][1].centralised_critic if script == "iddpg" else True
    module = maddpg
    cfg, out = _off_policy_probe(
        module,
        tmp_path,
        lr=1e-2,
        lr_actor=1e-3,
        sigma_init=0.5,
        sigma_end=0.5,
        centralised_critic=critic,
    )
    assert out["critic"].module.centralized == (script == "maddpg")
    # reward -4 (a - s/2)^2 a step: an answer blind to the sign earns -4 an episode at best
    # (a = 0), an untrained policy about -20; the deterministic actions follow the signs
    assert out["eval_mean"] > -3.0, out["eval_returns"]
    action, sign = _probe_actions(out, cfg, module, "actor")
    assert (action.sign() == sign).float().mean() >= 0.95
    assert (tmp_path / "run" / "learning_curve.png").is_file()


@pytest.mark.timeout(120)
def test_masac_learns_the_probe(masac, tmp_path):
    # the probe's rewards are of order 1 a step (navigation's 0.03): TorchRL's initial
    # temperature (1.0) fits it, with an actor slower than its critic
    cfg, out = _off_policy_probe(masac, tmp_path, lr=3e-3, lr_actor=1e-4, alpha_init=1.0)
    # the best answer a = s / 2 earns 0; answering 0 earns -4 an episode
    assert out["eval_mean"] > -1.0, out["eval_returns"]
    action, sign = _probe_actions(out, cfg, masac, "actor")
    torch.testing.assert_close(action, sign / 2, atol=0.3, rtol=0)


def test_off_policy_presets(maddpg, iddpg, masac):
    # the navigation preset is each script's defaults (the README's rows); IDDPG is MADDPG
    # with a per-agent critic
    assert maddpg.PRESETS["navigation"][1] == maddpg.Config()
    assert iddpg.PRESETS["navigation"][1] == maddpg.Config(centralised_critic=False)
    assert masac.PRESETS["navigation"][1] == masac.Config()
    from _marl_common import preset_cli

    # one preset: no subcommand needed, its name accepted, every field a flag
    assert preset_cli(maddpg.PRESETS, "navigation", "", args=[]) == maddpg.Config()
    cfg = preset_cli(iddpg.PRESETS, "navigation", "", args=["navigation", "--seed", "2"])
    assert cfg == maddpg.Config(centralised_critic=False, seed=2)
    cfg = preset_cli(masac.PRESETS, "navigation", "", args=["--no-share-params", "--lr", "0.01"])
    assert cfg == masac.Config(share_params=False, lr=0.01)
    with pytest.raises(SystemExit):
        preset_cli(maddpg.PRESETS, "navigation", "", args=["--no-such-flag"])
    with pytest.raises(ValueError, match="updates_per_batch must be at least 1, got 0"):
        maddpg.Config(updates_per_batch=0)
    with pytest.raises(ValueError, match="collect_steps must be at least 1, got 0"):
        masac.Config(collect_steps=0)


def test_agents_done_repeats_the_root_flags():
    from _marl_common import agents_done
    from tensordict import TensorDict

    done = torch.tensor([[[False], [True]], [[True], [False]]])  # [envs 2, time 2, 1]
    batch = TensorDict(
        next=TensorDict(
            done=done,
            terminated=~done,
            agents=TensorDict(reward=torch.zeros(2, 2, 3, 1), batch_size=[2, 2, 3]),
            batch_size=[2, 2],
        ),
        batch_size=[2, 2],
    )
    agents_done(batch)
    assert batch["next", "agents", "done"].shape == (2, 2, 3, 1)
    for agent in range(3):
        assert torch.equal(batch["next", "agents", "done"][:, :, agent], done)
        assert torch.equal(batch["next", "agents", "terminated"][:, :, agent], ~done)


@pytest.mark.skipif(not _has_vmas, reason='needs VMAS: pip install "rl-envs[vmas]"')
@pytest.mark.timeout(120)
@pytest.mark.parametrize("script", ["maddpg", "iddpg", "masac"])
def test_off_policy_scripts_run_on_vmas(maddpg, iddpg, masac, tmp_path, script):
    module = {"maddpg": maddpg, "iddpg": iddpg, "masac": masac}[script]
    cfg = dataclasses.replace(
        module.PRESETS["navigation"][1],
        num_envs=4,
        max_steps=5,
        collect_steps=5,
        total_frames=40,
        batch_size=8,
        updates_per_batch=2,
        hidden=16,
        eval_episodes=2,
        log_dir=str(tmp_path),
        exp_name="run",
        progress=False,
    )
    out = module.main(cfg)
    assert out["frames"] == 40
    assert len(out["eval_returns"]) == 2 and all(math.isfinite(r) for r in out["eval_returns"])
    assert (tmp_path / "run" / "scalars" / "train" / "loss_actor.csv").is_file()
    # the critic reads every agent (MADDPG, MASAC) or its own (IDDPG)
    assert out["critic"].module.centralized == (script != "iddpg")
