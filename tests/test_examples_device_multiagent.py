"""``--device`` of the multi-agent examples (mappo, ippo, maddpg, iddpg, masac, qmix).

This machine has no GPU, so the learners are built on PyTorch's ``meta`` device: a
tensor there has a shape and a device but no values, and an operation that meets a
non-scalar CPU tensor fails as it does on CUDA ("Tensor on device cpu is not on the
expected device meta!"). Each script's own ``make_*`` functions build its networks, its
loss, its optimizer, its update step (and replay buffer) with ``device="meta"``; a batch
of the multi-agent sign probe, collected on the CPU (by a CPU copy of the agents where
the loss reads the behaviour's log-probabilities) and laid out as the collector yields
it, is moved there, and two rounds of update steps run eagerly on it; everything the
learner owns must then be on meta, and so must the actions of the policy the collector
runs. What this cannot check: values, CUDA graphs' capture, VMAS or the probe
simulating on the device (they draw and read values); the ``gpu`` tests at the end run
all of it where CUDA is.
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
from rl.modules import MultiAgentMLP, TensorDictSequential

sys.path.insert(0, str(Path(__file__).parent))
from _compile_checks import EXAMPLES, load_path  # noqa: E402
from _device_checks import META, assert_all_on_meta, cuda  # noqa: E402

SCRIPTS = ["mappo", "ippo", "maddpg", "iddpg", "masac", "qmix"]
_has_vmas = importlib.util.find_spec("vmas") is not None


def _load(name: str):
    """``examples/multiagent/<name>.py`` as the module ``name``, loaded afresh (ippo.py and
    iddpg.py import mappo.py and maddpg.py: those are loaded first)."""
    base = {"ippo": "mappo", "iddpg": "maddpg"}.get(name)
    if base is not None:
        load_path(base, EXAMPLES / "multiagent" / f"{base}.py")
    return load_path(name, EXAMPLES / "multiagent" / f"{name}.py")


@pytest.fixture
def meta_moves():
    """``module.to(device)`` keeping each parameter object, as it does for CUDA.

    For a CPU-to-CUDA move torch writes the new tensor into each parameter in place
    (``param.data = ...``), so the ``TensorDictParams`` of a ``MultiAgentMLP``, which
    holds those same parameters, moves with them. A meta tensor cannot take a CPU one's
    place in place (another tensor type for ``torch._has_compatible_shallow_copy_type``):
    torch then makes new parameters, and the ``TensorDictParams`` would keep the CPU ones.
    Swapping the tensors on conversion (a ``torch.__future__`` flag) keeps the objects,
    as for CUDA."""
    flag = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    yield
    torch.__future__.set_swap_module_params_on_conversion(flag)


#: the sign probe (2 agents, 4-step episodes) in 8 environments
PROBE = {"scenario": "probe", "n_agents": 2, "max_steps": 4, "num_envs": 8, "hidden": 16}


def _config(module, device: str = "meta", **overrides):
    """``module``'s navigation preset (ippo's, iddpg's: a decentralised critic) on the
    probe, on ``device``."""
    preset = module.PRESETS["navigation"][1]
    return dataclasses.replace(preset, **PROBE, device=device, **overrides)


def _cpu_env(make_env, cfg):
    """The script's env (``make_env``) for ``cfg`` on the CPU: the probe."""
    return make_env(dataclasses.replace(cfg, device="cpu"), cfg.num_envs, cfg.seed)


def _rollout(env, steps: int, policy=None):
    """``[envs, steps]`` transitions of ``env`` as the collector yields them (without
    gradients), acted by ``policy`` or at random."""
    with torch.no_grad():
        return env.rollout(steps, policy, break_when_any_done=False)


def _multiagent_params_devices(*modules) -> set[str]:
    """The devices of the tensors that the ``MultiAgentMLP`` s in ``modules`` compute with
    (their ``params`` TensorDicts)."""
    return {
        str(t.device)
        for module in modules
        for net in module.modules()
        if isinstance(net, MultiAgentMLP)
        for t in net.params.values(True, True)
    }


def _bounds_devices(actor) -> set[str]:
    """The devices of the tensor arguments of ``actor``'s distribution (its bounds)."""
    return {
        str(value.device)
        for module in actor.modules()
        for value in (getattr(module, "distribution_kwargs", None) or {}).values()
        if torch.is_tensor(value)
    }


@pytest.mark.parametrize("value_norm", ["none", "popart"])
@pytest.mark.parametrize("script", ["mappo", "ippo"])
def test_ppo_advantage_and_updates_run_on_the_device(
    script, value_norm, meta_moves, meta_gae, no_bound_reads
):
    module = _load(script)
    mappo = sys.modules["mappo"]  # ippo.py is mappo.py with its presets
    cfg = _config(module, update_epochs=1, minibatch_size=16, value_norm=value_norm)
    assert cfg.centralised_critic == (script == "mappo")
    env = _cpu_env(mappo.make_env, cfg)
    cpu_actor, _ = mappo.make_agent(dataclasses.replace(cfg, device="cpu"), env)
    batch = _rollout(env, cfg.max_steps, cpu_actor)  # with the behaviour's log-probabilities
    actor, critic = mappo.make_agent(cfg, env)
    loss_module, advantage, optimizer, step = mappo.make_learner(cfg, actor, critic)
    assert _multiagent_params_devices(actor, critic) == {"meta"}
    assert _bounds_devices(actor) == {"meta"}

    batch = advantage(batch.to(META))  # as the loop: the advantage, then the epochs
    assert batch["advantage"].device == META and batch["value_target"].device == META
    for _ in range(2):  # two passes over the 32 frames, 2 minibatches of 16 each
        loss = mappo.update_epochs(cfg, loss_module, optimizer, batch, cfg.minibatch_size, step)
    assert loss.shape == ()
    assert_all_on_meta(loss_module, [optimizer], loss)
    assert {s["step"].item() for s in optimizer.state.values()} == {4.0}
    assert actor(batch.exclude("next"))["agents", "action"].device == META


@pytest.mark.parametrize("script", ["maddpg", "iddpg", "masac"])
def test_off_policy_buffer_updates_and_policy_on_the_device(script, meta_moves, no_bound_reads):
    module = _load(script)
    marl = sys.modules["_marl_common"]
    cfg = _config(module, collect_steps=4, batch_size=16)
    base = sys.modules["masac" if script == "masac" else "maddpg"]  # iddpg.py: maddpg.py's
    env = _cpu_env(base.make_env, cfg)
    critic = marl.make_q_critic(
        env, cfg.hidden, cfg.centralised_critic, cfg.share_params, device=META
    )
    if script == "masac":
        actor = marl.make_tanh_normal_actor(
            env, cfg.hidden, cfg.share_params, cfg.init_scale, device=META
        )
        policy, loss_module = actor, base.make_loss(cfg, env, actor, critic)
        loss_keys = ("loss_actor", "loss_qvalue", "loss_alpha")
    else:
        actor = base.make_actor(cfg, env)
        exploration = base.make_exploration(cfg, env)
        assert {str(b.device) for b in exploration.buffers()} == {"meta"}
        policy = TensorDictSequential(actor, exploration)
        loss_module = base.make_loss(cfg, actor, critic)
        loss_keys = ("loss_actor", "loss_value")
    assert critic.module.centralized == (script != "iddpg")
    assert _bounds_devices(actor) == {"meta"}
    update = marl.make_off_policy_update(cfg, actor, loss_module, loss_keys)
    buffer = marl.make_replay_buffer(cfg)

    # as the loop: the batch stored with the done flags repeated along the agents
    batch = _rollout(env, cfg.collect_steps).to(META)
    buffer.extend(marl.agents_done(batch.exclude("collector")).reshape(-1))
    for _ in range(2):
        sample = buffer.sample()
        assert sample.device == META and sample.batch_size == (cfg.batch_size,)
        logs = update(sample)
    assert set(logs.keys()) == set(loss_keys)
    assert_all_on_meta(loss_module, update.optimizers, logs)
    assert _multiagent_params_devices(actor, critic) == {"meta"}
    td = policy(batch[:, 0].exclude(("agents", "action")))
    assert td["agents", "action"].device == META
    if script != "masac":
        exploration.step(batch.numel())  # the annealing, in place on the device
        assert exploration.sigma.device == META


@pytest.mark.parametrize("mixer", ["qmix", "vdn"])
def test_qmix_buffer_updates_and_policy_on_the_device(mixer, meta_moves):
    qmix = _load("qmix")
    marl = sys.modules["_marl_common"]
    cfg = _config(qmix, mixer=mixer, batch_size=16)
    env = _cpu_env(qmix.make_env, cfg)
    qnet, mixer_net = qmix.make_agent(cfg, env)
    explore = qmix.make_exploration(cfg, env)
    loss_module, update = qmix.make_learner(cfg, qnet, mixer_net)
    buffer = marl.make_replay_buffer(cfg)
    assert _multiagent_params_devices(qnet) == {"meta"}
    assert {str(b.device) for b in explore.buffers()} == {"meta"}

    # as the loop: the team's reward (the agents' mean) at the root, the agents' dropped
    batch = _rollout(env, cfg.max_steps).to(META)
    batch.set(("next", "reward"), marl.team_view(batch).get(("next", "reward")))
    buffer.extend(batch.exclude("collector", ("next", "agents", "reward")).reshape(-1))
    for _ in range(2):
        loss = update(buffer.sample())
    assert loss.shape == ()
    assert_all_on_meta(loss_module, update.optimizers, loss)
    td = TensorDictSequential(qnet, explore)(batch[:, 0].exclude(("agents", "action")))
    assert td["agents", "action"].device == META
    explore.step(batch.numel())
    assert explore.eps.device == META


@pytest.mark.parametrize("script", SCRIPTS)
def test_device_is_a_flag_of_every_script(script):
    module = _load(script)
    preset_cli = sys.modules["_marl_common"].preset_cli
    assert preset_cli(module.PRESETS, "navigation", "", args=[]).device == "cpu"
    cfg = preset_cli(module.PRESETS, "navigation", "", args=["--device", "cuda:1"])
    assert cfg == dataclasses.replace(module.PRESETS["navigation"][1], device="cuda:1")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
@pytest.mark.parametrize("script", SCRIPTS)
def test_a_cuda_device_this_machine_lacks_stops_the_script_at_the_start(script, tmp_path):
    module = _load(script)
    cfg = _config(module, device="cuda", progress=False, log_dir=str(tmp_path))
    with pytest.raises(RuntimeError, match="--device 'cuda': this machine has 0 CUDA"):
        module.main(cfg)
    assert not any(tmp_path.iterdir())  # stopped before the logger was made


# ---------------------------------------------------------------- on a GPU
# These run where CUDA is (benchmarks/bench_gpu.py runs every file holding a ``gpu``
# test); here they are skipped. They train on the probe runs of
# tests/test_examples_multiagent.py with the env, the networks, the buffer and the
# captured update step and policy on the GPU, and check what was learned as those do;
# and run each script on VMAS simulating on the GPU, on those tests' tiny budget.


#: the probe runs' shared settings (tests/test_examples_multiagent.py)
GPU_PROBE = {
    "scenario": "probe",
    "n_agents": 2,
    "max_steps": 4,
    "num_envs": 32,
    "hidden": 32,
    "eval_episodes": 16,
}


def _gpu_run(module, tmp_path, **overrides):
    """``module.main`` on its navigation preset with ``overrides``, on the GPU with CUDA
    graphs; returns ``(cfg, summary)`` once it checked that the env, the networks and the
    policy's actions live on the GPU."""
    cfg = dataclasses.replace(
        module.PRESETS["navigation"][1],
        exp_name="run",
        progress=False,
        device="cuda",
        cudagraphs=True,
        log_dir=str(tmp_path),
        **overrides,
    )
    torch.manual_seed(0)
    out = module.main(cfg)
    nets = [v for v in out.values() if isinstance(v, torch.nn.Module)]
    assert {p.device.type for net in nets for p in net.parameters()} == {"cuda"}
    assert {d.split(":")[0] for d in _multiagent_params_devices(*nets)} == {"cuda"}
    assert out["make_env"](cfg, 2, seed=0).device.type == "cuda"
    assert (tmp_path / "run" / "learning_curve.png").is_file()
    return cfg, out


def _probe_actions(out, cfg, key):
    """The trained policy's deterministic actions on a fresh probe simulated on the GPU,
    and the signs it saw, both copied to the CPU."""
    env = out["make_env"](cfg, 32, seed=7)
    td = env.reset()
    with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
        out[key](td)
    assert td["agents", "action"].device.type == "cuda"
    return td["agents", "action"].cpu(), td["agents", "observation"].cpu()


@pytest.mark.gpu
@cuda
@pytest.mark.timeout(300)
@pytest.mark.parametrize("script", ["mappo", "ippo"])
def test_ppo_cudagraphs_on_the_gpu_learn_the_probe(script, tmp_path):
    cfg, out = _gpu_run(
        _load(script),
        tmp_path,
        **GPU_PROBE,
        total_frames=32 * 4 * 16,
        update_epochs=4,
        minibatch_size=32,
        lr=3e-3,
        share_params=script == "mappo",  # ippo: one actor and critic per agent
    )
    assert out["eval_mean"] > -0.4, out["eval_returns"]
    action, sign = _probe_actions(out, cfg, "actor")
    torch.testing.assert_close(action, sign / 2, atol=0.2, rtol=0)


@pytest.mark.gpu
@cuda
@pytest.mark.timeout(300)
@pytest.mark.parametrize("mixer", ["qmix", "vdn"])
def test_qmix_cudagraphs_on_the_gpu_learn_the_probe(mixer, tmp_path):
    cfg, out = _gpu_run(
        _load("qmix"),
        tmp_path,
        **GPU_PROBE,
        total_frames=32 * 4 * 8,
        buffer_size=2048,
        batch_size=64,
        updates_per_batch=20,
        mixing_embed_dim=8,
        lr=3e-3,
        mixer=mixer,
    )
    assert out["eval_mean"] >= 3.8, out["eval_returns"]
    action, sign = _probe_actions(out, cfg, "qnet")
    assert ((action - 1).unsqueeze(-1).float() == sign).float().mean() >= 0.95


#: tests/test_examples_multiagent.py's off-policy probe runs (gamma 0: a transition's
#: value is its reward)
OFF_POLICY_GPU = {
    **GPU_PROBE,
    "collect_steps": 4,
    "total_frames": 32 * 4 * 16,
    "batch_size": 64,
    "updates_per_batch": 20,
    "gamma": 0.0,
}


@pytest.mark.gpu
@cuda
@pytest.mark.timeout(300)
@pytest.mark.parametrize("script", ["maddpg", "iddpg"])
def test_ddpg_cudagraphs_on_the_gpu_learn_the_probe(script, tmp_path):
    noise = {"sigma_init": 0.5, "sigma_end": 0.5}
    cfg, out = _gpu_run(_load(script), tmp_path, **OFF_POLICY_GPU, lr=1e-2, lr_actor=1e-3, **noise)
    assert out["critic"].module.centralized == (script == "maddpg")
    assert out["eval_mean"] > -3.0, out["eval_returns"]
    action, sign = _probe_actions(out, cfg, "actor")
    assert (action.sign() == sign).float().mean() >= 0.95


@pytest.mark.gpu
@cuda
@pytest.mark.timeout(300)
def test_masac_cudagraphs_on_the_gpu_learns_the_probe(tmp_path):
    cfg, out = _gpu_run(
        _load("masac"), tmp_path, **OFF_POLICY_GPU, lr=3e-3, lr_actor=1e-4, alpha_init=1.0
    )
    assert out["eval_mean"] > -1.0, out["eval_returns"]
    action, sign = _probe_actions(out, cfg, "actor")
    torch.testing.assert_close(action, sign / 2, atol=0.3, rtol=0)


#: tests/test_examples_multiagent.py's VMAS runs: 2 batches of 4 envs x 5 steps
VMAS_RUN = {
    "num_envs": 4,
    "max_steps": 5,
    "total_frames": 40,
    "hidden": 16,
    "eval_episodes": 2,
}
#: 8 update steps after each batch: 16 in all, past the CUDA graphs' 10 warm-up calls
VMAS_SMALL = {
    "mappo": {"update_epochs": 8},
    "ippo": {"update_epochs": 8},
    "qmix": {"updates_per_batch": 8, "batch_size": 8},
    **{
        name: {"collect_steps": 5, "batch_size": 8, "updates_per_batch": 8}
        for name in ("maddpg", "iddpg", "masac")
    },
}


@pytest.mark.gpu
@cuda
@pytest.mark.skipif(not _has_vmas, reason='needs VMAS: pip install "rl-envs[vmas]"')
@pytest.mark.timeout(300)
@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_run_vmas_on_the_gpu(script, tmp_path):
    cfg, out = _gpu_run(_load(script), tmp_path, **VMAS_RUN, **VMAS_SMALL[script])
    assert cfg.scenario == "navigation"
    assert out["frames"] == 40
    assert len(out["eval_returns"]) == 2 and all(math.isfinite(r) for r in out["eval_returns"])
