"""``--device`` of the LLM example scripts (llm/sft.py, llm/grpo_countdown.py), on a
device other than the CPU.

This machine has no GPU, so the learners are built on PyTorch's ``meta`` device (see
tests/_device_checks.py): each script's own ``make_*`` functions with
``cfg.device="meta"`` build the loss, the optimizer and the step; the step runs twice on
a batch as the script's loop makes it, and everything it owns must be there (the model's
parameters, the loss's buffers, AdamW's state, the logs). ``transformers`` reads an
attention mask's values to skip it (a host sync on CUDA, impossible on ``meta``) unless
the mask is being traced: the ``meta_masks`` fixture counts ``meta`` tensors as traced,
as tensors under ``torch.compile`` or a CUDA graph's capture are. What this cannot
check: values, generation (the collector's copy of the model and the evaluations run on
the CPU by design), CUDA graphs' capture; the ``gpu`` tests at the end run those where
CUDA is.
"""

from __future__ import annotations

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


@pytest.mark.parametrize("cudagraphs", [False, True])
def test_sft_learner_lives_on_the_device(cudagraphs, meta_masks, monkeypatch):
    sft = load("llm/sft")
    if cudagraphs:  # the step a GPU run captures, with the CUDA-graph stand-ins
        cuda_graphs_on_cpu(monkeypatch)
    cfg = sft.Config(device="meta", cudagraphs=cudagraphs, batch_size=4)
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
    # off the CPU every step is an SFTStep, even eager: SFTLoss scores on the CPU only
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


def test_sft_runs_eagerly_on_sftloss_on_the_cpu():
    """The default run (CPU, eager) keeps the trainer's own step on ``SFTLoss``."""
    sft = load("llm/sft")
    tok = sft.make_tokenizer()
    model = sft.make_model(tok, 16, 1, 2, n_positions=64)
    loss, optimizer, stepper = sft.make_learner(model, tok, 32, lr=1e-3, device=torch.device("cpu"))
    assert stepper is None
    assert isinstance(loss, sft.SFTLoss) and loss.actor_network.model is model
    assert optimizer.param_groups[0]["params"] == list(model.parameters())


@pytest.mark.xfail(
    strict=True,
    raises=(RuntimeError, NotImplementedError, AssertionError),
    reason="rl.modules.llm.TransformersWrapper makes its tensors on the CPU whatever its "
    "model's device (packages/rl-objectives/src/rl/modules/llm/_transformers.py: forward's "
    "tokens and attention, fed to the model and to LLMMaskedCategorical.log_prob; "
    "_generate's ids and att; _write's padded rows; its device argument is stored, never "
    "used): SFTLoss cannot score, nor the wrapper generate with, a model on a GPU; sft.py "
    "steps with SFTStep there, the evaluations and the GRPO collector's copy run on the CPU",
)
def test_transformers_wrapper_scores_on_its_models_device(meta_masks):
    from rl.modules.llm import TransformersWrapper

    sft = load("llm/sft")
    chats = sft.load_chats(sft.Config().data)[:2]
    tok = sft.make_tokenizer()
    model = sft.make_model(tok, 16, 1, 2, n_positions=_longest(sft, tok, chats)).to(META)
    scorer = TransformersWrapper(model, tokenizer=tok, generate=False, pad_output=True)
    out = scorer(sft.as_batch(chats))
    assert out.get(("log_probs", "full")).device == META
    assert out.get(("tokens", "full")).device == META


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


def test_grpo_learner_and_buffer_live_on_the_device(meta_masks, monkeypatch):
    grpo = load("llm/grpo_countdown")
    # the GRPO step a GPU run captures (answers padded to the context), with the stand-ins
    cuda_graphs_on_cpu(monkeypatch)
    cfg = _grpo_config(grpo, device="meta", cudagraphs=True)
    torch.manual_seed(0)
    tok = grpo.make_tokenizer(grpo.ANSWER_TAGS)
    model = grpo.make_model(tok, cfg.n_embd, cfg.n_layer, cfg.n_head, n_positions=64)
    rows = grpo.make_problems(cfg.sft_examples, cfg, random.Random(0))
    # one batch of sampled answers, as main collects them: a CPU copy of the model samples
    collector = grpo.make_collector(cfg, model, tok, rows)
    buffer = grpo.make_buffer(cfg)
    buffer.extend(next(iter(collector)))
    model.to(META)
    loss, optimizer, stepper = grpo.make_learner(cfg, model, tok)
    assert isinstance(stepper, grpo.GRPOStep) and stepper.width == 64
    assert {p.device for p in collector.get_policy_model().parameters()} == {torch.device("cpu")}
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


def test_grpo_eager_learner_on_the_device_has_no_stepper():
    """Without --compile / --cudagraphs, GRPOLoss itself is the step on the device (its
    clipping bounds there); the SFT stage's step is sft.py's SFTStep."""
    grpo = load("llm/grpo_countdown")
    cfg = _grpo_config(grpo, device="meta")
    tok = grpo.make_tokenizer(grpo.ANSWER_TAGS)
    model = grpo.make_model(tok, cfg.n_embd, cfg.n_layer, cfg.n_head, n_positions=64).to(META)
    loss, optimizer, stepper = grpo.make_learner(cfg, model, tok)
    assert stepper is None
    assert {b.device for b in loss.buffers()} == {META}
    assert {p.device for p in loss.parameters()} == {META}
    sft_learner = grpo.make_sft_learner(model, tok, 32, lr=cfg.sft_lr, device=META)
    assert isinstance(sft_learner[2], sys.modules["sft"].SFTStep)


# ---------------------------------------------------------------- on a GPU
# These run where CUDA is (benchmarks/bench_gpu.py runs every file holding a ``gpu``
# test); here they are skipped. They train as tests/test_examples_llm.py does, with the
# model, AdamW and the (captured) steps on the GPU, and check what was learned as it does.


@pytest.mark.gpu
@cuda
def test_sft_cudagraphs_on_the_gpu_lowers_the_held_out_loss(tmp_path):
    sft = load("llm/sft")
    cfg = sft.Config(
        steps=30,
        batch_size=8,
        held_out=16,
        log_dir=str(tmp_path),
        progress=False,
        device="cuda",
        cudagraphs=True,
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


def test_a_loss_the_step_cannot_compute_is_refused_off_the_cpu():
    """Off the CPU (and compiled) the step is an ``SFTStep``, which computes the plain SFT
    loss: another ``loss_function`` would train one objective and report another."""
    sft = load("llm/sft")
    model = torch.nn.Linear(2, 2)
    for kwargs in ({"device": META}, {"device": torch.device("cpu"), "compile": True}):
        with pytest.raises(ValueError, match="loss_function='minor_sft' runs on SFTLoss"):
            sft.make_learner(model, None, 8, lr=1e-3, loss_function="minor_sft", **kwargs)
