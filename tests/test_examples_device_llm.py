"""``--device`` of the LLM example scripts (llm/sft.py, llm/grpo_countdown.py), on a
device other than the CPU.

This machine has no GPU, so the learners are built on PyTorch's ``meta`` device (see
tests/_device_checks.py): each script's own ``make_*`` functions with
``cfg.device="meta"`` build the loss, the optimizer and the step; the step runs twice on
a batch as the script's loop makes it, and everything it owns must be there (the model's
parameters, the loss's buffers, AdamW's state, the logs). ``transformers`` reads an
attention mask's values to skip it (a host sync on CUDA, impossible on ``meta``) unless
the mask is being traced: the ``meta_masks`` fixture counts ``meta`` tensors as traced,
as tensors under ``torch.compile`` or a CUDA graph's capture are. ``TransformersWrapper``
computes on its model's device, so the scripts generate and evaluate there too: sampling
reads values, which ``meta`` lacks, so the collector's answers are made by a stand-in of
``model.generate`` (``answers_made_on_the_cpu``) that checks it is called on the device.
What this cannot check: values, sampling itself, ``SFTLoss``'s forward (it reads a
value: every conversation has assistant tokens), CUDA graphs' capture; the ``gpu`` tests
at the end run those where CUDA is.
"""

from __future__ import annotations

import copy
import math
import random
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).parent))
from _compile_checks import cuda_graphs_on_cpu, load  # noqa: E402
from _device_checks import META, assert_all_on_meta, cuda  # noqa: E402

CPU = torch.device("cpu")


@pytest.fixture
def meta_masks(monkeypatch):
    """``transformers``' masks built without reading a ``meta`` attention mask's values."""
    import transformers.masking_utils as masking

    traced = masking.is_tracing
    monkeypatch.setattr(
        masking,
        "is_tracing",
        lambda tensor=None: traced(tensor) or (tensor is not None and tensor.is_meta),
    )


def _longest(sft, tok, chats) -> int:
    """The width sft.py's main pads its conversations to: the longest one's tokens."""
    return max(
        len(tok.apply_chat_template(c, tokenize=True, return_dict=True)["input_ids"]) for c in chats
    )


def answers_made_on_the_cpu(monkeypatch, model, answer: list[int]) -> list[set]:
    """``model.generate`` (of its class: copies of ``model`` too) replaced by a stand-in
    that answers ``answer`` (cut to ``max_new_tokens``) to every prompt, made on the CPU
    (a model on a GPU answers there; ``TransformersWrapper`` copies the answers back for
    their text either way). Returns the devices it is called with, one set per call."""
    seen = []

    def generate(self, input_ids, attention_mask, max_new_tokens, **kwargs):
        seen.append({input_ids.device, attention_mask.device})
        new = torch.tensor(answer[:max_new_tokens]).expand(input_ids.shape[0], -1)
        return torch.cat([torch.zeros(input_ids.shape, dtype=torch.long), new], -1)

    monkeypatch.setattr(type(model), "generate", generate)
    return seen


def test_sft_step_lives_on_the_device(meta_masks, monkeypatch):
    """The ``SFTStep`` a GPU run captures (``--cudagraphs``), with the CUDA-graph
    stand-ins."""
    sft = load("llm/sft")
    cuda_graphs_on_cpu(monkeypatch)
    cfg = sft.Config(device="meta", cudagraphs=True, batch_size=4)
    chats = sft.load_chats(cfg.data)
    tok = sft.make_tokenizer()
    width = _longest(sft, tok, chats)
    model = sft.make_model(tok, cfg.n_embd, cfg.n_layer, cfg.n_head, n_positions=width + 32)
    model.to(sft.resolve_device(cfg.device))
    loss, optimizer, stepper = sft.make_learner(
        model,
        tok,
        width,
        lr=cfg.lr,
        device=sft.resolve_device(cfg.device),
        cudagraphs=cfg.cudagraphs,
    )
    assert isinstance(stepper, sft.SFTStep)
    batch = next(sft.batches(chats, cfg, random.Random(0)))
    tokens, attention, assistant = stepper.inputs(batch)
    assert {t.device for t in (tokens, attention, assistant)} == {META}
    assert tokens.shape == (cfg.batch_size, width)
    for _ in range(2):
        logs = stepper.step(None, batch)
    assert set(logs.keys()) == {"loss_sft"}
    assert_all_on_meta(loss, [optimizer], logs)
    # the model scores tokens there
    assert sft.token_log_probs(model, tokens, attention).device == META


def test_sft_eager_learner_scores_on_the_device(meta_masks):
    """Without ``--compile`` / ``--cudagraphs`` the trainer steps on ``SFTLoss`` on the
    device as on the CPU: its policy scores the conversations where the model is, and
    AdamW steps there. (``SFTLoss`` then checks that every conversation has assistant
    tokens: a value, read with a host sync on a GPU, which ``meta`` cannot give.)"""
    sft = load("llm/sft")
    chats = sft.load_chats(sft.Config().data)
    tok = sft.make_tokenizer()
    model = sft.make_model(tok, 16, 1, 2, n_positions=_longest(sft, tok, chats)).to(META)
    loss, optimizer, stepper = sft.make_learner(model, tok, 32, lr=1e-3, device=META)
    assert stepper is None and loss.actor_network.model is model
    scored = loss.actor_network(sft.as_batch(chats[:4]))
    log_probs = scored.get(("log_probs", "full"))
    assert scored.get(("masks", "all_assistant_mask")).device == META
    (-log_probs.sum()).backward()
    optimizer.step()
    assert_all_on_meta(loss, [optimizer], log_probs.detach())


def test_sft_exact_match_decodes_on_the_device(meta_masks, monkeypatch):
    """The greedy decoding of the held-out answers runs the model where it is (its
    answers made by the stand-in, their text compared on the CPU)."""
    sft = load("llm/sft")
    chats = sft.load_chats(sft.Config().data)[:3]
    tok = sft.make_tokenizer()
    model = sft.make_model(tok, 16, 1, 2, n_positions=_longest(sft, tok, chats) + 32).to(META)
    answer = tok(chats[0][-1]["content"])["input_ids"] + [tok.eos_token_id]
    seen = answers_made_on_the_cpu(monkeypatch, model, answer)
    assert 1 / 3 <= sft.exact_match(model, tok, chats) <= 1.0  # the first one, at least
    assert seen == [{META}]


def test_sft_runs_eagerly_on_sftloss_on_the_cpu():
    """The default run (CPU, eager) keeps the trainer's own step on ``SFTLoss``."""
    sft = load("llm/sft")
    tok = sft.make_tokenizer()
    model = sft.make_model(tok, 16, 1, 2, n_positions=64)
    loss, optimizer, stepper = sft.make_learner(model, tok, 32, lr=1e-3, device=torch.device("cpu"))
    assert stepper is None
    assert isinstance(loss, sft.SFTLoss) and loss.actor_network.model is model
    assert optimizer.param_groups[0]["params"] == list(model.parameters())


def test_transformers_wrapper_scores_on_its_models_device(meta_masks):
    """What sft.py's ``SFTLoss`` and evaluations read, written where the model is (the
    conversations tokenized on the CPU, their text decoded there)."""
    from rl.modules.llm import TransformersWrapper

    sft = load("llm/sft")
    chats = sft.load_chats(sft.Config().data)[:2]
    tok = sft.make_tokenizer()
    model = sft.make_model(tok, 16, 1, 2, n_positions=_longest(sft, tok, chats))
    outs = [
        TransformersWrapper(m, tokenizer=tok, generate=False, pad_output=True)(sft.as_batch(chats))
        for m in (model, copy.deepcopy(model).to(META))
    ]
    for key in [("log_probs", "full"), ("tokens", "full")] + [
        ("masks", name) for name in ("all_attention_mask", "all_assistant_mask")
    ]:
        on_cpu, on_meta = (out.get(key) for out in outs)
        assert on_meta.device == META and on_meta.shape == on_cpu.shape, key
    assert outs[1]["text", "full"] == outs[0]["text", "full"]


def _grpo_config(grpo, **kwargs):
    return grpo.Config(
        max_number=2,
        n_embd=32,
        n_layer=1,
        n_head=2,
        sft_examples=50,
        prompts_per_batch=2,
        group_size=4,
        minibatch_size=8,
        max_new_tokens=6,
        **kwargs,
    )


def test_grpo_collector_learner_and_buffer_live_on_the_device(meta_masks, monkeypatch):
    grpo = load("llm/grpo_countdown")
    # the GRPO step a GPU run captures (answers padded to the context), with the stand-ins
    cuda_graphs_on_cpu(monkeypatch)
    cfg = _grpo_config(grpo, device="meta", cudagraphs=True)
    torch.manual_seed(0)
    tok = grpo.make_tokenizer(grpo.ANSWER_TAGS)
    model = grpo.make_model(tok, cfg.n_embd, cfg.n_layer, cfg.n_head, n_positions=64).to(META)
    rows = grpo.make_problems(cfg.sft_examples, cfg, random.Random(0))
    # one batch of answers, as main collects them: the collector's copy of the model on
    # the device, its answers' text scored by the CPU environments
    answer = tok("<answer>1+1</answer>")["input_ids"] + [tok.eos_token_id]
    seen = answers_made_on_the_cpu(monkeypatch, model, answer)
    collector = grpo.make_collector(cfg, model, tok, rows)
    assert {p.device for p in collector.get_policy_model().parameters()} == {META}
    batch = next(iter(collector))
    assert seen and all(devices == {META} for devices in seen)
    assert batch.get(("log_probs", "full")).device == META
    assert batch.get(("next", "reward")).shape[0] == cfg.prompts_per_batch * cfg.group_size
    buffer = grpo.make_buffer(cfg)
    buffer.extend(batch)
    loss, optimizer, stepper = grpo.make_learner(cfg, model, tok)
    assert isinstance(stepper, grpo.GRPOStep) and stepper.width == 64
    # the buffer holds the answers and their advantages on the device
    minibatch = buffer.sample()
    assert minibatch.shape == (cfg.minibatch_size,)
    tensors = stepper.inputs(minibatch)
    assert {t.device for t in tensors} == {META}
    assert [t.shape[-1] for t in tensors] == [64, 64, 64, cfg.minibatch_size, 64]
    for _ in range(2):
        logs = stepper.step(None, minibatch)
    assert set(logs.keys()) == {"loss_objective", "clip_fraction", "kl_approx", "ESS"}
    assert_all_on_meta(loss, [optimizer], logs)
    assert {b.device for b in loss.buffers()} == {META}  # the clipping bounds
    # GRPOLoss's eager scoring of the sampled tokens (its boolean indexing after it needs
    # values): the policy's distribution is there
    dist = loss.actor_network.get_dist(minibatch, mask_key=("masks", "all_assistant_mask"))
    assert dist.log_prob(minibatch.get(("tokens", "full"), as_padded_tensor=True)).device == META
    # the evaluation samples with the model there (its rate: the CPU envs' rewards)
    calls = len(seen)
    eval_env = grpo.make_env(rows[:2], tok, 4, 2, cfg.seed, shuffle=False)
    assert 0.0 <= grpo.evaluate(eval_env, model, tok, cfg) <= 1.0
    assert len(seen) == calls + 1 and seen[-1] == {META}


def test_grpo_eager_learner_on_the_device_has_no_stepper():
    """Without --compile / --cudagraphs, GRPOLoss itself is the step on the device (its
    clipping bounds there), and SFTLoss the SFT stage's."""
    grpo = load("llm/grpo_countdown")
    cfg = _grpo_config(grpo, device="meta")
    tok = grpo.make_tokenizer(grpo.ANSWER_TAGS)
    model = grpo.make_model(tok, cfg.n_embd, cfg.n_layer, cfg.n_head, n_positions=64).to(META)
    loss, optimizer, stepper = grpo.make_learner(cfg, model, tok)
    assert stepper is None
    assert {b.device for b in loss.buffers()} == {META}
    assert {p.device for p in loss.parameters()} == {META}
    sft_loss, _, sft_stepper = sys.modules["sft"].make_learner(
        model, tok, 32, lr=cfg.sft_lr, device=META
    )
    assert sft_stepper is None and isinstance(sft_loss, sys.modules["sft"].SFTLoss)


# ---------------------------------------------------------------- on a GPU
# These run where CUDA is (benchmarks/bench_gpu.py runs every file holding a ``gpu``
# test); here they are skipped. They train as tests/test_examples_llm.py does, with the
# model, AdamW and the (captured) steps on the GPU, and check what was learned as it does.


@pytest.mark.gpu
@cuda
# eager: the trainer's own step on SFTLoss, scoring on the GPU
@pytest.mark.parametrize("cudagraphs", [True, False])
def test_sft_on_the_gpu_lowers_the_held_out_loss(cudagraphs, tmp_path):
    sft = load("llm/sft")
    cfg = sft.Config(
        steps=30,
        batch_size=8,
        held_out=16,
        log_dir=str(tmp_path),
        progress=False,
        device="cuda",
        cudagraphs=cudagraphs,
    )
    out = sft.main(cfg)
    assert {p.device.type for p in out["model"].parameters()} == {"cuda"}
    assert out["loss_after"] < 0.6 * out["loss_before"]
    assert 0.0 <= out["exact_match"] <= 1.0


@pytest.mark.gpu
@cuda
@pytest.mark.timeout(600)
# eager: GRPOLoss itself scores the buffer's answers on the GPU (SFT: an eager SFTStep)
@pytest.mark.parametrize("cudagraphs", [True, False])
def test_grpo_on_the_gpu_raises_the_held_out_success(cudagraphs, tmp_path):
    grpo = load("llm/grpo_countdown")
    cfg = grpo.Config(  # tests/test_examples_llm.py's run
        max_number=2,
        n_embd=64,
        sft_steps=40,
        sft_batch_size=16,
        sft_lr=1e-2,
        sft_examples=200,
        prompts_per_batch=4,
        group_size=4,
        grpo_batches=24,
        grpo_lr=1e-3,
        grpo_warmup=0,
        num_epochs=1,
        minibatch_size=16,
        max_new_tokens=8,
        eval_prompts=2,
        eval_samples=32,
        eval_interval=12,
        final_evals=2,
        log_dir=str(tmp_path),
        progress=False,
        device="cuda",
        cudagraphs=cudagraphs,
    )
    out = grpo.main(cfg)
    assert {p.device.type for p in out["model"].parameters()} == {"cuda"}
    assert out["answers"] == 24 * 16
    assert all(math.isfinite(rate) and 0 <= rate <= 1 for _, rate in out["curve"])
    # the SFT model answers 1 in 8 right; 24 GRPO batches of 16 answers raise it
    assert out["final_success"] > out["sft_success"] + 0.1, out["curve"]


def test_a_loss_the_step_cannot_compute_is_refused_when_compiled():
    """Compiled (or captured) the step is an ``SFTStep``, which computes the plain SFT
    loss: another ``loss_function`` would train one objective and report another. Eager,
    on any device, ``SFTLoss`` is the step and computes it."""
    sft = load("llm/sft")
    model = torch.nn.Linear(2, 2)
    for kwargs in ({"device": META, "cudagraphs": True}, {"device": CPU, "compile": True}):
        with pytest.raises(ValueError, match="loss_function='minor_sft' runs on SFTLoss"):
            sft.make_learner(model, None, 8, lr=1e-3, loss_function="minor_sft", **kwargs)
    tok = sft.make_tokenizer()
    model = sft.make_model(tok, 16, 1, 2, n_positions=64).to(META)
    loss, _, stepper = sft.make_learner(
        model, tok, 8, lr=1e-3, loss_function="minor_sft", device=META
    )
    assert stepper is None and loss.loss_function == "minor_sft"
