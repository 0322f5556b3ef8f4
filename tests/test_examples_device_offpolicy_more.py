"""``--device`` of the other soft actor-critic scripts (CrossQ, TQC, online CQL, discrete
SAC), on a device other than the CPU.

As in ``test_examples_device_offpolicy.py``, PyTorch's ``meta`` device stands for a GPU
(an operation meeting a non-scalar CPU tensor fails there as it does on CUDA): each
script's learner is built by its own functions with ``cfg.device="meta"``, its update
step(s) run twice on a batch moved there, and the loss's parameters and buffers, the
optimizers' states and the logs must all be there, as must the action of the policy the
collector runs. Values, the collector's moves and CUDA graphs need a real GPU
(``benchmarks/bench_gpu.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _compile_checks import load  # noqa: E402
from _device_checks import (  # noqa: E402
    META,
    assert_all_on_meta,
    random_transitions,
)


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
