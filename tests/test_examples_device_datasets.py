"""``--device`` of the example scripts that learn from a saved dataset: ``td3_bc.py``,
``diffusion_bc.py``, ``decision_transformer.py`` and ``gail.py``.

As in ``tests/test_examples_device_offpolicy.py``, PyTorch's ``meta`` device stands in
for a GPU (an operation that meets a non-scalar CPU tensor fails there as on CUDA). Each
script's learner is built by its own functions with ``cfg.device="meta"``, its update
step(s) run twice on a batch shaped as its loop makes it and moved there (transitions
for TD3+BC, observations and unit-box actions for the diffusion cloner, windows cut from
episodes for the Decision Transformer, expert and replay samples for GAIL's
discriminator), and everything it owns must be there, and the policy must act there.
A run of each script's ``main`` with ``--device`` (the CPU here, CUDA where present)
checks that its networks end where they were asked to be.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

sys.path.insert(0, str(Path(__file__).parent))
from _compile_checks import load  # noqa: E402
from _device_checks import META, assert_all_on_meta, cuda, random_transitions  # noqa: E402

from rl.core import ExplorationType, set_exploration_type  # noqa: E402

ENV_ID = "Pendulum-v1"
needs_transformers = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="needs transformers"
)


def _on_meta(module: torch.nn.Module) -> bool:
    return {t.device for t in (*module.parameters(), *module.buffers())} == {META}


def test_td3_bc_learner_lives_on_the_device():
    td3_bc, off = load("td3_bc"), load("_offpolicy")
    cfg = td3_bc.Config(device="meta", hidden=32)
    env = off.make_env(ENV_ID)
    actor = off.make_deterministic_actor(env, cfg.hidden, device=cfg.device)
    qvalue = off.make_qvalue(env, cfg.hidden, device=cfg.device)
    loss_module, update_critic, update_actor = td3_bc.make_learner(cfg, env, actor, qvalue)
    batch = random_transitions(off, ENV_ID).to(META)  # as the loop moves each sample
    for _ in range(2):
        loss_qvalue = update_critic(batch)
        actor_logs = update_actor(batch)
    assert set(actor_logs) == {"loss_actor", "bc_loss"}
    assert_all_on_meta(loss_module, update_critic.optimizers, loss_qvalue)
    assert_all_on_meta(loss_module, update_actor.optimizers, actor_logs)
    assert actor(batch.exclude("action"))["action"].device == META


def test_diffusion_bc_learner_and_policy_live_on_the_device():
    diffusion_bc, off = load("diffusion_bc"), load("_offpolicy")
    cfg = diffusion_bc.Config(device="meta", hidden=32, depth=2, num_steps=5)
    env = off.make_env(ENV_ID)
    actor, policy, loss_module, update = diffusion_bc.make_learner(cfg, env)
    # the loop's batch: observations and the actions mapped to the unit box, on the CPU
    sample = random_transitions(off, ENV_ID)
    low, high = env.action_spec.space.low, env.action_spec.space.high
    batch = TensorDict(
        observation=sample["observation"],
        action_unit=diffusion_bc.to_unit_box(sample["action"], low, high),
        batch_size=sample.batch_size,
    ).to(META)
    for _ in range(2):
        loss = update(batch)
    assert_all_on_meta(loss_module, update.optimizers, loss)
    # the acting policy (the chain, then the rescaling with its bounds) acts there
    assert _on_meta(policy)
    for exploration in (ExplorationType.DETERMINISTIC, ExplorationType.RANDOM):
        with torch.no_grad(), set_exploration_type(exploration):
            out = policy(batch.select("observation"))
        assert out["action"].device == META and out["action"].shape == sample["action"].shape


def test_diffusion_bc_rescaling_keeps_its_bounds_with_the_policy():
    diffusion_bc = load("diffusion_bc")
    low, high = torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0])
    rescale = diffusion_bc.FromUnitBox(low, high)
    unit = torch.tensor([[-1.0, -1.0], [0.5, 0.5], [3.0, -3.0]])
    torch.testing.assert_close(rescale(unit), torch.tensor([[-2.0, 0.0], [1.0, 0.75], [2.0, 0.0]]))
    assert [name for name, _ in rescale.named_buffers()] == ["low", "high"]
    assert rescale.to(META).low.device == META


@pytest.fixture
def gpt2_on_meta(monkeypatch):
    """transformers' GPT-2 asks (``.all()`` of a tensor: a value) whether its position ids
    pack several sequences in a row, which a meta tensor cannot answer (CUDA can, with a
    sync). Each window is one sequence: for meta tensors, the answer it would give (None)."""
    masking = pytest.importorskip("transformers.masking_utils")
    real = masking.find_packed_sequence_indices

    def find_packed_sequence_indices(position_ids):
        return None if position_ids.device == META else real(position_ids)

    monkeypatch.setattr(masking, "find_packed_sequence_indices", find_packed_sequence_indices)


def _bounds_devices(actor) -> list[tuple[torch.device, torch.device]]:
    kwargs = [m.distribution_kwargs for m in actor.modules() if hasattr(m, "distribution_kwargs")]
    return [(kw["low"].device, kw["high"].device) for kw in kwargs]


@needs_transformers
@pytest.mark.parametrize("online", [False, True])
@pytest.mark.usefixtures("gpt2_on_meta", "no_bound_reads")
def test_decision_transformer_learner_lives_on_the_device(online):
    dt, off = load("decision_transformer"), load("_offpolicy")
    data = load("_offline_data")
    cfg = dt.Config(device="meta", online=online, context=5, n_embd=16, n_layer=1, batch_size=8)
    env = off.make_env(ENV_ID)
    # windows cut on the CPU from the episodes of a dataset (two random Pendulum ones)
    buffer = off.make_replay_buffer(400, cfg.batch_size)
    buffer.extend(random_transitions(off, ENV_ID, 400))
    loc, scale = data.observation_stats(buffer)
    windows = dt.Windows(dt.episodes(buffer, loc, scale, cfg.reward_scale), cfg.context)
    actor = dt.make_actor(cfg, loc.shape[-1], env.action_spec)
    # the distribution's bounds (TanhDelta's, online TanhNormal's) move with the actor
    assert _on_meta(actor) and _bounds_devices(actor) == [(META, META)]
    loss_module, loss_keys, optimizer, update_step = dt.make_learner(cfg, actor)
    actor.train()
    for lr in (cfg.lr / 2, cfg.lr):  # the warm-up sets the learning rate before a step
        dt.set_lr(optimizer, lr)
        logs = update_step(windows.sample(cfg.batch_size).to(META))
    assert set(logs.keys()) == set(loss_keys)
    assert_all_on_meta(loss_module, update_step.optimizers, logs)
    actor.eval()
    window = windows.sample(2).to(META)
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        action = actor(window.exclude("action"))["action"]
    assert action.device == META and action.shape == (2, cfg.context, 1)


@pytest.mark.parametrize("use_grad_penalty", [False, True])
@pytest.mark.usefixtures("no_bound_reads")
def test_gail_learners_live_on_the_device(use_grad_penalty):
    gail, off = load("gail"), load("_offpolicy")
    cfg = gail.Config(device="meta", use_grad_penalty=use_grad_penalty, batch_size=32)
    env = off.make_env(ENV_ID)
    demos = random_transitions(off, ENV_ID)  # stands in for the expert's episodes
    discriminator = gail.make_discriminator(cfg, demos)
    assert _on_meta(discriminator)
    actor = off.make_tanh_normal_actor(env, cfg.hidden, device=cfg.device)
    qvalue = off.make_qvalue(env, cfg.hidden, device=cfg.device)
    gail_loss, sac_loss, update_discriminator, update_learner = gail.make_learner(
        cfg, env, discriminator, actor, qvalue
    )
    # the expert's and the replay buffer on the device, filled as main fills them
    expert = off.make_replay_buffer(len(demos), cfg.batch_size, device=META)
    expert.extend(demos.select("observation", "action"))
    buffer = off.make_replay_buffer(len(demos), cfg.batch_size, device=META)
    buffer.extend(random_transitions(off, ENV_ID).to(META))
    for _ in range(2):
        batch = gail.discriminator_batch(expert, buffer)
        assert batch.batch_size == (cfg.batch_size,)
        assert {t.device for t in batch.values()} == {META}
        disc_logs = update_discriminator(batch)
        learner_logs = update_learner(buffer.sample())
    expected = {"loss", "gp_loss"} if use_grad_penalty else {"loss"}
    assert set(disc_logs.keys()) == expected
    assert set(learner_logs.keys()) == {"loss_actor", "loss_qvalue", "alpha", "gail_reward"}
    assert_all_on_meta(gail_loss, update_discriminator.optimizers, disc_logs)
    assert_all_on_meta(sac_loss, update_learner.optimizers, learner_logs)
    assert actor(buffer.sample().exclude("action"))["action"].device == META
    assert _bounds_devices(actor) == [(META, META)]


# ---------------------------------------------------------------- whole runs
# Each script's main on a tiny budget with --device: on the CPU here, on CUDA where it
# is present (benchmarks/bench_gpu.py runs the ``gpu`` tests). The envs and the
# evaluations stay on the CPU (a CPU copy of the policy); the trained networks end on
# the device.

DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, cuda])]
TINY = {"eval_episodes": 1, "progress": False}
RUNS = {
    "td3_bc": {"num_updates": 6, "batch_size": 16, "hidden": 8, "eval_interval": 4},
    "diffusion_bc": {
        "num_updates": 6,
        "batch_size": 16,
        "hidden": 8,
        "depth": 1,
        "num_steps": 3,
        "top_episodes": 1,
        "eval_interval": 4,
    },
    "decision_transformer": {
        "num_updates": 4,
        "batch_size": 8,
        "context": 5,
        "n_embd": 16,
        "n_layer": 1,
        "eval_interval": 100,
    },
    "decision_transformer-online": {
        "online": True,
        "num_updates": 2,
        "online_episodes": 1,
        "online_updates": 2,
        "batch_size": 8,
        "context": 5,
        "n_embd": 16,
        "n_layer": 1,
        "eval_interval": 100,
    },
    "gail": {
        "total_frames": 200,  # one episode ends: the curve of the training returns
        "init_random_frames": 150,
        "frames_per_batch": 50,
        "utd_ratio": 0.1,
        "expert_episodes": 1,
        "batch_size": 16,
        "hidden": 8,
        "disc_hidden": 8,
    },
}
#: the summary's trained networks
TRAINED = {
    "td3_bc": ("actor", "qvalue", "loss_module"),
    "diffusion_bc": ("actor", "acting_policy", "loss_module"),
    "decision_transformer": ("actor", "loss_module"),
    "gail": ("actor", "qvalue", "discriminator", "loss_module"),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "run",
    [
        "td3_bc",
        "diffusion_bc",
        pytest.param("decision_transformer", marks=needs_transformers),
        pytest.param("decision_transformer-online", marks=needs_transformers),
        "gail",
    ],
)
def test_main_trains_on_the_device_and_evaluates_on_the_cpu(
    run, device, pendulum_dataset, tmp_path
):
    script = run.split("-")[0]
    module = load(script)
    cfg = module.Config(
        **TINY, **RUNS[run], dataset=str(pendulum_dataset), device=device, log_dir=str(tmp_path)
    )
    summary = module.main(cfg)
    assert math.isfinite(summary["eval_mean"])
    for name in TRAINED[script]:
        tensors = [*summary[name].parameters(), *summary[name].buffers()]
        assert {t.device.type for t in tensors} == {device}, name
