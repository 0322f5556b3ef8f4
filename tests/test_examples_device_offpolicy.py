"""``--device`` of the off-policy example scripts (sac, redq, td3, ddpg, dqn, offline,
crossq, tqc, cql_online, discrete_sac), on a device other than the CPU.

This machine has no GPU, so the learners are built on PyTorch's ``meta`` device: a
tensor there has a shape and a device but no values, and an operation that meets a
non-scalar CPU tensor fails as it does on CUDA ("Tensor on device cpu is not on the
expected device meta!"; a 0-dim CPU tensor is accepted by both). Each script's own
construction (its ``make_*`` functions with ``cfg.device="meta"``) is built, its update
step runs twice on a batch moved there, and everything it owns must be there: the loss's
parameters and buffers, the optimizers' states and learning rates, the logs. What this
cannot check: values, CUDA graphs' capture, the collector moving env outputs (copying a
``meta`` tensor back to the CPU is impossible); those run on a GPU
(``benchmarks/bench_gpu.py``).
"""

from __future__ import annotations

import sys
from itertools import chain
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _compile_checks import load  # noqa: E402
from _device_checks import (  # noqa: E402
    META,
    assert_all_on_meta,
    cuda,
    random_transitions,
)


@pytest.mark.parametrize("script", ["sac", "redq"])
@pytest.mark.usefixtures("no_bound_reads")
def test_soft_actor_critic_learners_live_on_the_device(script):
    module, off = load(script), load("_offpolicy")
    cfg = module.Config(device="meta")
    env = off.make_env(cfg.env_id)
    actor = off.make_tanh_normal_actor(env, cfg.hidden, device=cfg.device)
    qvalue = off.make_qvalue(env, cfg.hidden, device=cfg.device)
    loss_module, update = module.make_learner(cfg, env, actor, qvalue)
    batch = random_transitions(off, cfg.env_id).to(META)
    for _ in range(2):
        logs = update(batch)
    assert set(logs.keys()) == {"loss_actor", "loss_qvalue", "alpha"}
    assert_all_on_meta(loss_module, update.optimizers, logs)
    # the policy the collector runs acts there, its TanhNormal's bounds with it (a
    # distribution built inside a CUDA graph's capture could not copy them there)
    assert actor(batch.exclude("action"))["action"].device == META
    kwargs = [m.distribution_kwargs for m in actor.modules() if hasattr(m, "distribution_kwargs")]
    assert [(kw["low"].device, kw["high"].device) for kw in kwargs] == [(META, META)]


@pytest.mark.parametrize("script", ["td3", "ddpg"])
def test_deterministic_actor_learners_live_on_the_device(script):
    module, off = load(script), load("_offpolicy")
    cfg = module.Config(device="meta")
    env = off.make_env(cfg.env_id)
    actor = off.make_deterministic_actor(env, cfg.hidden, device=cfg.device)
    qvalue = off.make_qvalue(env, cfg.hidden, device=cfg.device)
    loss_module, *updates = module.make_learner(
        *((cfg, env, actor, qvalue) if script == "td3" else (cfg, actor, qvalue))
    )
    batch = random_transitions(off, cfg.env_id).to(META)
    for _ in range(2):
        logs = [update(batch) for update in updates]
    for update, log in zip(updates, logs, strict=True):
        assert_all_on_meta(loss_module, update.optimizers, log)
    explore = off.make_exploration_policy(cfg, env, actor)
    assert [b.device for b in explore.buffers()] == [META] * len(list(explore.buffers()))
    noise_spec = explore[-1].spec["action"]  # where the noise is clamped (not the CPU's)
    assert noise_spec.device == META and noise_spec.space.low.device == META
    assert explore(batch.exclude("action"))["action"].device == META


def test_dqn_learner_lives_on_the_device():
    dqn, off = load("dqn"), load("_offpolicy")
    cfg = dqn.Config(device="meta", compile=False)
    env = off.make_env(cfg.env_id)
    qnet = dqn.make_qnet(cfg, env).to(META)
    loss_module, optimizer, update = dqn.make_learner(cfg, env, qnet)
    batch = random_transitions(off, cfg.env_id).to(META)
    for _ in range(2):
        loss = update(batch)
    assert_all_on_meta(loss_module, [optimizer], loss)
    assert qnet(batch.exclude("action"))["action"].device == META
    egreedy = dqn.make_egreedy(  # its random actions drawn on the device
        env, cfg.eps_start, cfg.eps_end, cfg.exploration_fraction * cfg.total_frames, cfg.device
    )
    assert egreedy.eps.device == META and egreedy.spec["action"].device == META


@pytest.mark.parametrize("algo", ["iql", "cql"])
@pytest.mark.usefixtures("no_bound_reads")
def test_offline_learners_live_on_the_device(algo):
    offline, off = load("offline"), load("_offpolicy")
    cfg = offline.resolve(offline.Config(algo=algo, device="meta"))
    env = off.make_env("Pendulum-v1")
    actor, qvalue, loss_module, loss_keys, update = offline.make_learner(cfg, env)
    batch = random_transitions(off, "Pendulum-v1").to(META)
    for flag in (True, False):  # CQL's warm-up flag, as main makes it
        logs = update(batch, torch.tensor(flag, device=META))
    assert set(logs.keys()) == set(loss_keys)
    assert_all_on_meta(loss_module, update.optimizers, logs)
    assert {p.device for p in chain(actor.parameters(), qvalue.parameters())} == {META}


def test_resolve_device_names_what_it_refuses():
    common = load("_common")
    assert common.resolve_device("cpu") == torch.device("cpu")
    assert common.resolve_device("meta") == META
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert common.resolve_device("auto").type == expected
    with pytest.raises(ValueError, match="--device 'gpu0' is not a torch device name"):
        common.resolve_device("gpu0")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(RuntimeError, match=rf"--device 'cuda:{count}': this machine has {count}"):
        common.resolve_device(f"cuda:{count}")


def test_a_cuda_device_this_machine_lacks_stops_the_script_at_the_start(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    sac = load("sac")
    cfg = sac.Config(device="cuda", progress=False, log_dir=str(tmp_path))
    with pytest.raises(RuntimeError, match="--device 'cuda': this machine has 0 CUDA"):
        sac.main(cfg)


def test_evaluation_runs_the_policy_itself_on_the_cpu():
    common = load("_common")
    net = torch.nn.Linear(2, 1)
    assert common.on_cpu(net) is net
    policy = lambda td: td  # noqa: E731 - a policy without parameters is kept as it is
    assert common.on_cpu(policy) is policy


def test_evaluation_of_a_policy_on_a_device_runs_a_cpu_copy():
    """Off the CPU, the evaluations get a copy moved to the CPU, and the learner's policy
    is left where it is. (A ``meta`` module cannot be copied to the CPU: the move is
    recorded instead.)"""
    moved = []

    class Recorded(torch.nn.Linear):
        def to(self, *args, **kwargs):
            moved.append((self, *args))
            return self

    net = Recorded(2, 1, device=META)
    copy = load("_common").on_cpu(net)
    assert moved == [(copy, "cpu")]
    assert copy is not net and net.weight.device == META


def test_the_actor_moves_with_its_distribution_bounds():
    off = load("_offpolicy")
    env = off.make_env("Pendulum-v1")
    actor = off.make_tanh_normal_actor(env, 8, device=META)
    kwargs = [m.distribution_kwargs for m in actor.modules() if hasattr(m, "distribution_kwargs")]
    assert [(kw["low"].device, kw["high"].device) for kw in kwargs] == [(META, META)]
    assert {p.device for p in actor.parameters()} == {META}


def test_an_unindexed_cuda_device_resolves_to_the_current_one(monkeypatch):
    """``cuda`` becomes ``cuda:<current>``: tensors report indexed devices, and a
    collector comparing its batch's device to ``cuda`` would move every batch again."""
    common = load("_common")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert common.resolve_device("cuda") == torch.device("cuda", 1)
    assert common.resolve_device("auto") == torch.device("cuda", 1)
    assert common.resolve_device("cuda:0") == torch.device("cuda", 0)


# ------------------------------------------- the other soft actor-critic scripts


@pytest.mark.parametrize(
    "script, options, logged",
    [
        ("tqc", {}, {"loss_actor", "loss_qvalue", "alpha"}),
        ("cql_online", {}, {"loss_actor", "loss_qvalue", "loss_cql", "alpha"}),
        (
            "cql_online",
            {"with_lagrange": True, "max_q_backup": True, "deterministic_backup": True},
            {"loss_actor", "loss_qvalue", "loss_cql", "alpha"},
        ),
    ],
    ids=["tqc", "cql_online", "cql_online-lagrange-max_q_backup"],
)
@pytest.mark.usefixtures("no_bound_reads")
def test_summed_soft_actor_critic_learners_live_on_the_device(script, options, logged):
    module, off = load(script), load("_offpolicy")
    cfg = module.Config(device="meta", **options)
    env = off.make_env(cfg.env_id)
    actor = off.make_tanh_normal_actor(env, cfg.hidden, device=cfg.device)
    # as main builds them: TQC's critics predict cfg.num_quantiles return quantiles
    quantiles = {"out_features": cfg.num_quantiles} if script == "tqc" else {}
    qvalue = off.make_qvalue(env, cfg.hidden, device=cfg.device, **quantiles)
    loss_module, update = module.make_learner(cfg, env, actor, qvalue)
    batch = random_transitions(off, cfg.env_id).to(META)
    for _ in range(2):
        logs = update(batch)
    assert set(logs.keys()) == logged
    assert_all_on_meta(loss_module, update.optimizers, logs)
    # the policy the collector runs acts there
    assert actor(batch.exclude("action"))["action"].device == META


@pytest.mark.usefixtures("no_bound_reads")
def test_crossq_learner_lives_on_the_device():
    crossq, off = load("crossq"), load("_offpolicy")
    cfg = crossq.Config(device="meta")
    env = off.make_env(cfg.env_id)
    actor = off.make_tanh_normal_actor(env, cfg.hidden, device=cfg.device)
    qvalue = crossq.make_critic(cfg, env, device=cfg.device)
    # the batch-renormalised critics' statistics moved too
    assert {b.device for b in qvalue.buffers()} == {META}
    loss_module, updates = crossq.make_learner(cfg, env, actor, qvalue)
    batch = random_transitions(off, cfg.env_id).to(META)
    for actor_step in (False, True) * 2:  # the critics' step, then the step of all
        logs = updates[actor_step](batch)
        assert set(logs.keys()) == {"loss_actor", "loss_qvalue", "alpha"}
        assert_all_on_meta(loss_module, updates[actor_step].optimizers, logs)
    assert actor(batch.exclude("action"))["action"].device == META


def test_discrete_sac_learner_lives_on_the_device():
    discrete_sac, off = load("discrete_sac"), load("_offpolicy")
    cfg = discrete_sac.Config(device="meta")
    env = off.make_env(cfg.env_id)  # CartPole-v1: one-hot actions
    actor = discrete_sac.make_categorical_actor(env, cfg.hidden, device=cfg.device)
    qvalue = discrete_sac.make_action_values(env, cfg.hidden, device=cfg.device)
    loss_module, update = discrete_sac.make_learner(cfg, env, actor, qvalue)
    batch = random_transitions(off, cfg.env_id).to(META)
    for _ in range(2):
        logs = update(batch)
    assert set(logs.keys()) == {"loss_actor", "loss_qvalue", "alpha", "entropy"}
    assert_all_on_meta(loss_module, update.optimizers, logs)
    action = actor(batch.exclude("action"))["action"]
    assert action.device == META and action.shape == batch["action"].shape


# ---------------------------------------------------------------- on a GPU
# These run where CUDA is (benchmarks/bench_gpu.py runs every file holding a ``gpu``
# test); here they are skipped. They train on the probe envs of
# tests/test_examples_offpolicy.py with the networks, the buffer and the captured (and
# compiled) update step on the GPU, and check what was learned, as those tests do.


PROBE_RUN = {
    "total_frames": 1_000,
    "init_random_frames": 200,
    "frames_per_batch": 50,
    "batch_size": 64,
    "lr": 3e-3,
    "hidden": 32,
    "eval_episodes": 1,
    "progress": False,
    "device": "cuda",
    "cudagraphs": True,
}


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize(
    "script, compile",
    [("sac", False), ("sac", True), ("td3", False), ("ddpg", False), ("redq", False)],
)
def test_cudagraphs_on_the_gpu_find_the_scaled_best_action(script, compile, tmp_path):
    from rl.core import ExplorationType, set_exploration_type
    from rl.envs import ObservationActionRewardProbe

    module = load(script)
    extra = {"num_qvalue_nets": 4} if script == "redq" else {}
    cfg = module.Config(
        env_id="ObservationActionRewardProbe-continuous",
        **PROBE_RUN,
        **extra,
        compile=compile,
        log_dir=str(tmp_path),
    )
    summary = module.main(cfg)
    actor = summary["actor"]
    assert {p.device.type for p in actor.parameters()} == {"cuda"}
    probe = ObservationActionRewardProbe(continuous=True)
    obs = torch.tensor([[-1.0], [1.0]])
    td = probe.fake_tensordict().expand(2).clone()
    td["observation"] = obs
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        action = actor(td.to("cuda"))["action"]
    # the best actions are -1.5 and +1.5 (tests/test_examples_offpolicy.py)
    torch.testing.assert_close(action.cpu(), probe.optimal_action(obs), atol=0.3, rtol=0)


@pytest.mark.gpu
@cuda
def test_dqn_cudagraphs_on_the_gpu_learns_the_probe(tmp_path):
    dqn = load("dqn")
    cfg = dqn.Config(
        env_id="ObservationActionRewardProbe",
        total_frames=1_000,
        init_random_frames=200,
        frames_per_batch=50,
        updates_per_batch=25,
        batch_size=64,
        lr=3e-3,
        hidden=32,
        target_update_interval=25,
        exploration_fraction=0.5,
        eval_episodes=1,
        progress=False,
        device="cuda",
        cudagraphs=True,
        log_dir=str(tmp_path),
    )
    summary = dqn.main(cfg)
    assert {p.device.type for p in summary["qnet"].parameters()} == {"cuda"}
    assert summary["eval_mean"] == 1.0
