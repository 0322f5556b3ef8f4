"""``--device`` of ppo_atari.py, dqn_atari.py and ppo_rnd.py, on a device other than the CPU.

As in ``tests/test_examples_device_offpolicy.py``, PyTorch's ``meta`` device stands in
for a GPU (an operation that meets a non-scalar CPU tensor fails there as on CUDA). Each
script's learner is built by its own functions with ``cfg.device="meta"``; a batch
collected on the CPU (the games and MountainCar stay there) is moved to meta as the
collector's ``storing_device`` moves it, shaped as the script's loop makes it (a rollout
``[num_envs, num_steps]`` for the PPO scripts, uint8 transitions through dqn_atari's
replay buffer, itself on meta), and the update steps run twice on it: everything the
learner owns must be there, and the policy must act there. ppo_rnd's bonus is computed
by its ``RNDTransform`` on the moved batch (on a GPU the env's ``DeviceCastTransform``
moves each step's outputs before it). Values, the collector's moves and CUDA graphs
need a real GPU: the ``gpu`` tests at the end run each script there
(``benchmarks/bench_gpu.py``); they are skipped without CUDA.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from rl.collectors import Collector

sys.path.insert(0, str(Path(__file__).parent))
from _compile_checks import load  # noqa: E402
from _device_checks import META, assert_all_on_meta, cuda  # noqa: E402

needs_ale = pytest.mark.skipif(
    importlib.util.find_spec("ale_py") is None, reason="needs ale-py (rl-envs[atari])"
)


def _rollout(env, actor, frames: int):
    """One batch of ``frames`` transitions of ``env`` (CPU) by ``actor`` (CPU), as the
    script's collector yields it: ``[num_envs, num_steps]``."""
    collector = Collector(env, actor, frames_per_batch=frames, total_frames=frames)
    batch = next(iter(collector))
    collector.shutdown()
    assert not batch["next", "observation"].isnan().any()  # see meta_gae
    return batch


def _on_meta(*modules) -> bool:
    return {t.device for m in modules for t in (*m.parameters(), *m.buffers())} == {META}


@pytest.mark.atari
@needs_ale
@pytest.mark.usefixtures("meta_gae")
def test_ppo_atari_learner_lives_on_the_device(monkeypatch):
    ppo_atari = load("ppo_atari")
    cfg = ppo_atari.Config(
        num_envs=1, num_steps=16, num_minibatches=2, update_epochs=1, device="meta"
    )
    cpu = dataclasses.replace(cfg, device="cpu")
    env = ppo_atari.make_env(cpu)
    env.set_seed(0)
    _, cpu_actor, _ = ppo_atari.make_agent(cpu, env)
    batch = _rollout(env, cpu_actor, cfg.num_envs * cfg.num_steps)
    assert batch.batch_size == (1, 16) and ("next", "end-of-life") in batch.keys(True)
    made = []

    class RecordedGAE(ppo_atari.GAE):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(ppo_atari, "GAE", RecordedGAE)

    agent, actor, critic = ppo_atari.make_agent(cfg, env)
    advantage = ppo_atari.make_advantage(cfg, critic)
    loss_module, optimizer = ppo_atari.make_loss(cfg, actor, critic)
    step = ppo_atari.make_update_step(cfg, loss_module, optimizer)
    assert _on_meta(agent) and _on_meta(made[0])  # the networks; gamma and lambda
    # the bootstrap stops at a lost life
    assert made[0].tensor_keys.terminated == "end-of-life"

    batch = advantage(batch.to(META))
    assert batch["advantage"].device == META
    loss = ppo_atari.update_epochs(cfg, loss_module, optimizer, batch, 8, step)  # 2 steps
    assert_all_on_meta(loss_module, [optimizer], loss)
    assert {s["step"].item() for s in optimizer.state.values()} == {2.0}
    # the policy the collector runs acts there
    assert actor(batch.exclude("action"))["action"].device == META


@pytest.mark.atari
@needs_ale
def test_dqn_atari_learner_and_buffer_live_on_the_device():
    dqn_atari = load("dqn_atari")
    cfg = dqn_atari.Config(batch_size=8, device="meta")
    env = dqn_atari.make_game(dataclasses.replace(cfg, device="cpu"))
    env.set_seed(0)
    rollout = env.rollout(16, break_when_any_done=False)
    qnet = dqn_atari.make_qnet(cfg, env)
    loss_module, optimizer, update = dqn_atari.make_learner(cfg, env, qnet)
    assert loss_module.tensor_keys.terminated == "end-of-life"
    buffer = dqn_atari.make_replay_buffer(16, cfg.batch_size, device=META)
    buffer.extend(dqn_atari.to_uint8(rollout.to(META)))  # as the loop stores a batch
    for _ in range(2):
        sample = dqn_atari.to_float(buffer.sample())
        assert sample["observation"].dtype == torch.float32 and sample.batch_size == (8,)
        loss = update(sample)
    assert buffer[:]["observation"].device == META
    assert_all_on_meta(loss_module, [optimizer], loss)
    # the policy the collector runs acts there, its random actions drawn there
    egreedy = dqn_atari.make_egreedy(
        env, cfg.start_e, cfg.end_e, cfg.exploration_fraction * cfg.total_frames, cfg.device
    )
    assert egreedy.eps.device == META and egreedy.spec["action"].device == META
    policy = dqn_atari.TensorDictSequential(qnet, egreedy)
    assert policy(rollout.exclude("action").to(META))["action"].device == META


@pytest.mark.usefixtures("meta_gae")
def test_ppo_rnd_learner_and_bonus_live_on_the_device():
    ppo_rnd = load("ppo_rnd")
    cfg = ppo_rnd.Config(num_envs=2, num_steps=8, num_minibatches=2, update_epochs=1, device="meta")
    cpu = dataclasses.replace(cfg, device="cpu")
    obs_stats = ppo_rnd.observation_scaling(cpu)
    env = ppo_rnd.make_env(cpu, cfg.num_envs, obs_stats)
    env.set_seed(0)
    cpu_actor, _ = ppo_rnd.make_agent(cpu, env)
    batch = _rollout(env, cpu_actor, cfg.num_envs * cfg.num_steps)

    actor, critic = ppo_rnd.make_agent(cfg, env)
    loss_module, optimizer = ppo_rnd.make_loss(cfg, actor, critic)
    rnd = ppo_rnd.RNDTransform(*ppo_rnd.make_rnd(cfg, 2))
    assert _on_meta(rnd)
    # the env's outputs are moved to the device, where the bonus is computed
    bonus_env = ppo_rnd.with_bonus(cfg, env, rnd)
    assert bonus_env.device == META and bonus_env.reset()["observation"].device == META
    assert bonus_env.reward_spec["intrinsic_reward"].device == META
    batch = batch.to(META)
    batch["next"] = rnd(batch["next"])  # each step's bonus, as the env writes it
    assert batch["next", "intrinsic_reward"].shape == (2, 8, 1)
    assert _on_meta(rnd)  # its running statistics were made there

    critic_int, rnd_loss, rnd_optimizer, optimizer = ppo_rnd.make_intrinsic_learner(
        cfg, rnd, 2, optimizer
    )
    assert rnd_loss.obs_rms is rnd.obs_rms and _on_meta(critic_int)
    advantage = ppo_rnd.make_advantage(cfg, critic)
    advantage_int = ppo_rnd.compile_advantage(
        functools.partial(ppo_rnd.intrinsic_advantage, cfg, critic_int), compile=False
    )
    ppo_step, rnd_step = ppo_rnd.make_update_steps(
        cfg, loss_module, critic_int, rnd_loss, optimizer, rnd_optimizer
    )
    # main's loop: the scaled reward, both advantages, their weighted sum, the update
    batch["next", "reward"] = batch["next", "reward"] * cfg.reward_scale
    batch = advantage_int(advantage(batch))
    batch["advantage"] = cfg.ext_coef * batch["advantage"] + cfg.int_coef * batch["advantage_int"]
    assert batch["value_target_int"].device == META
    losses = ppo_rnd.update(cfg, ppo_step, rnd_step, batch, 8)  # 2 minibatches
    assert set(losses) == {"loss", "loss_predictor"}
    assert_all_on_meta(loss_module, [optimizer], losses["loss"])
    assert_all_on_meta(rnd_loss, [rnd_optimizer], losses["loss_predictor"])
    # the intrinsic value head is stepped by the PPO optimizer, in a group of its own
    assert [len(g["params"]) for g in optimizer.param_groups][-1] == len(
        list(critic_int.parameters())
    )
    assert all(optimizer.state[p]["exp_avg"].device == META for p in critic_int.parameters())
    assert {s["step"].item() for s in optimizer.state.values()} == {2.0}
    assert actor(batch.exclude("action"))["action"].device == META


@pytest.mark.parametrize(
    "script",
    [
        pytest.param("ppo_atari", marks=[pytest.mark.atari, needs_ale]),
        pytest.param("dqn_atari", marks=[pytest.mark.atari, needs_ale]),
        "ppo_rnd",
    ],
)
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_a_cuda_device_this_machine_lacks_stops_the_run_at_the_start(script, tmp_path):
    module = load(script)
    cfg = module.Config(device="cuda", progress=False, log_dir=str(tmp_path))
    with pytest.raises(RuntimeError, match="--device 'cuda': this machine has 0 CUDA"):
        module.main(cfg)
    assert not any(tmp_path.iterdir())  # stopped before the logger was made


def test_the_bonus_env_moves_nothing_on_the_cpu():
    """On the CPU the ``DeviceCastTransform`` before the bonus is a no-op: the same bonus
    and statistics as the transform alone gives (the script's CPU results are
    unchanged)."""
    ppo_rnd = load("ppo_rnd")
    cfg = ppo_rnd.Config(num_envs=2)
    rollouts, stats = [], []
    for cast in (True, False):
        torch.manual_seed(0)
        rnd = ppo_rnd.RNDTransform(*ppo_rnd.make_rnd(cfg, 2))
        env = ppo_rnd.make_env(cfg, 2, ppo_rnd.observation_scaling(cfg))
        if cast:
            env = ppo_rnd.with_bonus(cfg, env, rnd)
            assert env.device == torch.device("cpu")
        else:
            env = ppo_rnd.TransformedEnv(env, rnd)
        env.set_seed(0)
        rollouts.append(env.rollout(20, break_when_any_done=False))
        stats.append(rnd.state_dict())
    assert rollouts[0]["next", "intrinsic_reward"].abs().sum() > 0
    assert (rollouts[0] == rollouts[1]).all()
    for key, value in stats[0].items():
        torch.testing.assert_close(stats[1][key], value, rtol=0, atol=0)


# ---------------------------------------------------------------- on a GPU
# These run where CUDA is (benchmarks/bench_gpu.py runs every file holding a ``gpu``
# test); here they are skipped. Each script trains with its networks, advantages,
# update steps (and dqn_atari's buffer) on the GPU, the update steps and the policy
# captured in CUDA graphs, on the tiny budgets of their CPU tests
# (tests/test_examples_atari.py, test_examples_dqn_atari.py, test_examples_rnd.py), and
# asserts what those assert. Their logic runs here on the CPU with the CUDA-graph
# stand-ins of tests/_compile_checks.py (``cuda_graphs_on_cpu``).


def _devices(module) -> set[str]:
    return {t.device.type for t in (*module.parameters(), *module.buffers())}


def _rows(path: Path) -> list[tuple[int, float]]:
    return [(int(a), float(b)) for a, b in (r.split(",") for r in path.read_text().split())]


@pytest.mark.gpu
@pytest.mark.atari
@cuda
@needs_ale
def test_ppo_atari_cudagraphs_on_the_gpu_trains_and_logs(tmp_path):
    ppo_atari = load("ppo_atari")
    cfg = ppo_atari.Config(
        total_frames=512,
        num_envs=2,
        num_steps=256,  # one batch, 4 epochs x 4 minibatches: past the graphs' warm-up
        eval_episodes=1,
        eval_max_steps=50,
        log_dir=str(tmp_path),
        exp_name="run",
        progress=False,
        device="cuda",
        cudagraphs=True,
    )
    out = ppo_atari.main(cfg)
    assert out["frames"] == 512
    assert _devices(out["agent"]) == {"cuda"}
    scalars = tmp_path / "run" / "scalars" / "train"
    (frames, loss), *_ = losses = _rows(scalars / "loss.csv")
    assert len(losses) == 1 and frames == 512 and math.isfinite(loss)
    # a game of Breakout played at random ends within 256 steps: its score is logged
    scores = _rows(scalars / "episode_return.csv")
    assert len(scores) == 1 and scores[0][1] >= 0.0
    assert len(out["eval_returns"]) == 1 and out["eval_returns"][0] >= 0.0


@pytest.mark.gpu
@pytest.mark.atari
@cuda
@needs_ale
def test_dqn_atari_cudagraphs_on_the_gpu_fits_its_data(tmp_path):
    dqn_atari = load("dqn_atari")
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
        device="cuda",
        cudagraphs=True,
    )
    out = dqn_atari.main(cfg)
    assert out["frames"] == 600 and out["updates"] == 101
    assert len(out["buffer"]) == 600
    qnet, loss_module = out["qnet"], out["loss_module"]
    assert _devices(loss_module) == {"cuda"}
    data = dqn_atari.to_float(out["buffer"][:])
    assert data["observation"].device.type == "cuda"
    # the TD error on the collected transitions, against the fixed target: the trained
    # online network has a lower one than it had at the start (= the target's weights)
    with torch.no_grad():
        trained = loss_module(data.clone())["loss"]
        loss_module.value_network_params.data.update_(loss_module.target_value_network_params.data)
        initial = loss_module(data.clone())["loss"]
    assert trained < 0.7 * initial
    assert _devices(qnet) == {"cuda"}
    assert len(out["eval_returns"]) == 1 and math.isfinite(out["eval_returns"][0])


@pytest.mark.gpu
@cuda
def test_ppo_rnd_cudagraphs_on_the_gpu_fades_the_bonus_on_visited_states(tmp_path):
    ppo_rnd = load("ppo_rnd")
    cfg = ppo_rnd.Config(
        total_frames=4096,
        num_envs=8,
        num_steps=64,
        eval_episodes=1,
        log_dir=str(tmp_path),
        exp_name="run",
        progress=False,
        device="cuda",
        cudagraphs=True,
    )
    out = ppo_rnd.main(cfg)
    assert out["frames"] == 4096
    assert len(out["eval_returns"]) == 1 and -200 <= out["eval_returns"][0] < 0
    rnd, rnd_loss = out["rnd"], out["rnd_loss"]
    for module in (out["actor"], out["critic"], out["critic_int"], rnd):
        assert _devices(module) == {"cuda"}
    assert rnd_loss.obs_rms is rnd.obs_rms and rnd.obs_rms.count > 4096
    train = tmp_path / "run" / "scalars" / "train"
    for name in ("loss", "loss_predictor", "intrinsic_reward"):
        rows = _rows(train / f"{name}.csv")
        assert [f for f, _ in rows] == [512 * i for i in range(1, 9)], name
        assert all(math.isfinite(v) for _, v in rows), name
    # as tests/test_examples_rnd.py's: the (normalised) bonus is low where the car has
    # been (at rest near its start) and high in the far corners it has not reached
    position = torch.linspace(-0.6, -0.4, 32)
    seen = torch.stack([(position + 0.3) / 0.9, torch.zeros(32)], -1)
    novel = torch.tensor([[0.95, 0.95], [0.9, 0.8], [-0.95, -0.95], [-0.9, -0.8]])
    rnd.eval()

    def bonus(obs):
        td = TensorDict(observation=obs, batch_size=[len(obs)]).to(rnd.obs_rms.mean.device)
        return rnd(td)["intrinsic_reward"]

    assert bonus(seen).mean() < 0.1 * bonus(novel).mean()
