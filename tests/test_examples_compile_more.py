"""``--compile`` of the scripts outside the single-process algorithms: rollout.py,
distributed/ppo_ray.py, distributed/collect_torchrun.py, llm/sft.py, llm/grpo_countdown.py.

The same checks as ``test_examples_compile.py`` (``_compile_checks``' helpers): dynamo's
counters (the graphs each compiled function makes, no graph break, nothing compiled after
the first updates, ``error_on_recompile``) and, for the scripts that train, the first
compiled update's loss equal to the eager one on the same weights and batch. Policies
compiled in other processes (Ray actors, collector ranks) report their own counters
through a hook that writes them to a file after each batch they collect.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest
import torch
from torch._dynamo.utils import counters

sys.path.insert(0, str(Path(__file__).parent))
from _compile_checks import (  # noqa: E402
    check,
    load,
    record_dynamo_counters,
    watch,
    worker_counters,
)


def _no_breaks_or_recompiles() -> None:
    assert not counters["graph_break"], dict(counters["graph_break"])
    # (a recompilation raises: the fresh_dynamo fixture sets error_on_recompile)


def _check_workers(stats: dict[str, list[dict]], workers: int, batches: int) -> None:
    """Each worker compiled its policy (one graph) at its first batch, and nothing after."""
    assert len(stats) == workers, json.dumps(stats)
    for rows in stats.values():
        assert len(rows) >= batches, rows
        assert rows[0]["graphs"] == 1 and rows[0]["frames"] == 1, rows
        assert all(row == rows[0] for row in rows), rows
        assert rows[0]["breaks"] == 0 and rows[0]["compiled"] == 1  # no recompilation


# --------------------------------------------------------------------------- rollout.py
@pytest.mark.slow  # compilation: 10-30 s on a 2-core CPU
def test_rollout_compiles_the_controller_once(fresh_dynamo):
    rollout = load("rollout")
    cfg = dict(native=True, num_envs=8, episodes=2, max_steps=60)
    eager = rollout.main(rollout.Config(**cfg))
    assert counters["frames"]["total"] == 0
    compiled = rollout.main(rollout.Config(**cfg, compile=True))
    assert compiled == eager  # a deterministic controller: the same episodes
    # one graph (the controller's tensor twin), compiled at the first step of 120
    assert counters["stats"]["unique_graphs"] == 1 and counters["frames"]["ok"] == 1
    _no_breaks_or_recompiles()


def test_rollout_help_says_what_compile_compiles(capsys, monkeypatch):
    rollout = load("rollout")
    monkeypatch.setattr(sys, "argv", ["rollout.py", "--help"])
    with pytest.raises(SystemExit):
        rollout.parse_args()
    out = " ".join(capsys.readouterr().out.split())
    assert "--compile torch.compile the policy network" in out
    assert "random policy has none" in out


# ----------------------------------------------------------------- distributed/ppo_ray
@pytest.mark.slow  # a local Ray instance, compilation in the learner and in each actor
@pytest.mark.timeout(300)
def test_ppo_ray_compiles_the_update_and_each_actors_policy(fresh_dynamo, monkeypatch, tmp_path):
    ray = pytest.importorskip("ray")
    # the actors do not have tests/ on their path: the hook's module goes by value
    ray.cloudpickle.register_pickle_by_value(sys.modules[record_dynamo_counters.__module__])
    ppo_ray = load("distributed/ppo_ray")
    seen = watch(ppo_ray.ppo, monkeypatch)  # ppo.make_update_step's UpdateStep
    folder = tmp_path / "actors"
    folder.mkdir()
    monkeypatch.setattr(
        ppo_ray,
        "RayCollector",
        functools.partial(
            ppo_ray.RayCollector,
            post_collect_hook=functools.partial(record_dynamo_counters, str(folder)),
        ),
    )
    cfg = ppo_ray.Config(
        env_id="ObservationActionRewardProbe",
        total_frames=512,
        num_envs=4,
        num_steps=32,
        update_epochs=2,
        num_minibatches=2,
        eval_episodes=1,
        num_collectors=2,
        num_cpus=2,
        log_dir=str(tmp_path),
        progress=False,
        compile=True,
    )
    out = ppo_ray.main(cfg)
    assert out["frames"] == 512 and out["losses_finite"]
    assert len(seen) == 4 * 2 * 2  # batches x epochs x minibatches
    check(seen, first=4)  # after the first batch's updates
    assert counters["frames"]["ok"] == 2  # the learner: update step, advantage
    _check_workers(worker_counters(folder), workers=2, batches=4)


# --------------------------------------------------------- distributed/collect_torchrun
@pytest.mark.slow  # compilation in the learner and in each collector rank
@pytest.mark.timeout(300)
def test_collect_torchrun_compiles_the_step_and_each_ranks_policy(
    fresh_dynamo, monkeypatch, tmp_path
):
    script = load("distributed/collect_torchrun")
    seen = watch(script, monkeypatch)
    folder = tmp_path / "ranks"
    folder.mkdir()
    from rl.collectors import Collector

    probe = functools.partial(record_dynamo_counters, str(folder))

    class Probed(Collector):  # a rank runs ``rollout`` itself (no postproc)
        def rollout(self, *args, **kwargs):
            return probe(super().rollout(*args, **kwargs))

    monkeypatch.setattr(
        script,
        "DistributedDataCollector",
        functools.partial(
            script.DistributedDataCollector,
            collector_class=Probed,
            mp_start_method="fork",  # the ranks inherit Probed and error_on_recompile
            # a rank that hangs fails the learner with its rank named, before pytest's
            # timeout (each op, the ranks' first compilation included, takes far less)
            timeout=200,
        ),
    )
    cfg = script.Config(total_frames=1200, frames_per_batch=200, num_workers=2, compile=True)
    script.main(cfg)
    assert len(seen) == 6  # one REINFORCE step per batch
    check(seen, first=1)
    assert counters["frames"]["ok"] == 1  # the learner: the update step
    _check_workers(worker_counters(folder), workers=2, batches=2)


# ------------------------------------------------------------------------------ llm/sft
@pytest.fixture
def sft():
    pytest.importorskip("transformers")
    return load("llm/sft")


def test_sft_loss_on_tokens_equals_sftloss(sft):
    from rl.modules.llm import TransformersWrapper
    from rl.objectives.llm import SFTLoss

    torch.manual_seed(0)
    chats = sft.load_chats(sft.Config().data)[:6]
    tok = sft.make_tokenizer()
    model = sft.make_model(tok, 32, 1, 2, n_positions=400)
    batch = sft.as_batch(chats)
    expected = SFTLoss(TransformersWrapper(model, tokenizer=tok, generate=False, pad_output=True))(
        batch
    ).loss_sft
    tokens, attention, assistant = sft.tokenize(batch, tok, 300)
    assert tokens.shape == attention.shape == assistant.shape == (6, 300)
    # the padding changes nothing: right padding, causal attention
    torch.testing.assert_close(sft.sft_loss(model, tokens, attention, assistant), expected)
    with pytest.raises(ValueError, match="more than width=10"):
        sft.tokenize(batch, tok, 10)


@pytest.mark.slow  # compilation of the model's forward and backward: about a minute
def test_sft_step_compiled_once_in_one_graph(sft, fresh_dynamo, monkeypatch, tmp_path):
    seen = watch(sft, monkeypatch)
    cfg = sft.Config(
        steps=6,
        batch_size=4,
        held_out=4,
        n_embd=32,
        n_layer=1,
        n_head=2,
        log_dir=str(tmp_path),
        progress=False,
        compile=True,
    )
    out = sft.main(cfg)
    assert out["loss_after"] < out["loss_before"]
    assert len(seen) == 6
    check(seen, first=1, graphs=1)  # one graph: forward, loss, backward, clipping, AdamW


# ------------------------------------------------------------------- llm/grpo_countdown
@pytest.mark.slow  # compilation of the SFT step and of the GRPO step: minutes
@pytest.mark.timeout(600)
def test_grpo_sft_and_grpo_steps_compiled_once_in_one_graph_each(
    fresh_dynamo, monkeypatch, tmp_path
):
    pytest.importorskip("transformers")
    grpo = load("llm/grpo_countdown")
    sft_seen = watch(sys.modules["sft"], monkeypatch)  # grpo's SFT steps: sft.SFTStep
    grpo_seen = watch(sys.modules["_grpo_step"], monkeypatch)  # grpo.GRPOStep
    compared: list[float] = []

    class Compared(grpo.GRPOStep):
        """Before each compiled step, ``GRPOLoss`` (eager) on the same minibatch and
        weights: the compiled step's outputs must equal it. The advantages are redrawn
        at random (the first batches' rewards are mostly all 0: a zero objective)."""

        def step(self, trainer, batch):
            batch.set("advantage", torch.randn(batch.shape[0], 1))
            with torch.no_grad():
                eager = trainer.loss_module(batch)
            logs = super().step(trainer, batch)
            for key in ("loss_objective", "clip_fraction", "kl_approx", "ESS"):
                torch.testing.assert_close(
                    logs[key], getattr(eager, key).detach(), rtol=1e-4, atol=1e-5
                )
            compared.append(float(eager.kl_approx))
            return logs

    monkeypatch.setattr(grpo, "GRPOStep", Compared)
    cfg = grpo.Config(
        max_number=2,
        n_embd=32,
        n_layer=1,
        n_head=2,
        sft_examples=50,
        sft_steps=4,
        sft_batch_size=8,
        prompts_per_batch=2,
        group_size=4,
        grpo_batches=3,
        grpo_minutes=None,
        num_epochs=2,  # the second pass off the sampling policy: a ratio other than 1
        minibatch_size=8,
        max_new_tokens=6,
        eval_prompts=2,
        eval_samples=4,
        eval_interval=100,
        final_evals=1,
        log_dir=str(tmp_path),
        progress=False,
        compile=True,
    )
    out = grpo.main(cfg)
    assert out["answers"] == 3 * 8
    assert len(sft_seen) == 4 and len(grpo_seen) == len(compared) == 3 * 2
    assert any(kl != 0 for kl in compared)  # off-policy passes were compared
    # each step's graph at its first call: nothing compiled after, no graph break
    check(sft_seen, first=1, graphs=2)
    check(grpo_seen, first=1, graphs=2)
    assert counters["frames"]["ok"] == 2
    _no_breaks_or_recompiles()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only error")
def test_cudagraphs_without_cuda_names_the_missing_device():
    """rollout.py and collect_torchrun.py (their configs have no logger fields, unlike
    those of ``test_examples_compile.py``'s parametrized test)."""
    rollout = load("rollout")
    with pytest.raises(RuntimeError, match="--cudagraphs needs a CUDA device"):
        rollout.main(rollout.Config(cudagraphs=True))
    script = load("distributed/collect_torchrun")
    with pytest.raises(RuntimeError, match="--cudagraphs needs a CUDA device"):
        script.learner(script.Config(cudagraphs=True), "mp")
