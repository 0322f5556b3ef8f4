"""Supervised fine-tuning (SFT) of a small language model on a local chat dataset.

The conversations (``data/chat.jsonl``: one ``{"messages": [{"role", "content"}, ...]}``
per line, single and multi-turn) become a ``History``; ``SFTLoss`` is the negative
log-likelihood of the assistant's tokens only (the chat template's
``{% generation %}`` blocks), and ``rl.core.trainers.Trainer`` runs the loop (the same
machinery as GRPO's trainer). The model is a GPT-2 defined from a ``transformers``
config and a character-level tokenizer built here: nothing downloads.

Reported: the held-out loss before and after, and the share of held-out conversations
whose last assistant turn the model reproduces exactly (greedy decoding).

    uv run --group llm examples/llm/sft.py
    uv run --group llm examples/llm/sft.py --data my_chats.jsonl --steps 500
    uv run --group llm examples/llm/sft.py --compile
    uv run --group llm examples/llm/sft.py --device cuda --cudagraphs   # on a GPU

``--compile`` runs each training step as ONE compiled graph (``examples/_common.py``'s
``UpdateStep``: the model's forward, the SFT loss, backward, gradient clipping and AdamW),
through the trainer's ``optimization_stepper`` (:class:`SFTStep`). The chat template and
the tokenizer are Python string work that dynamo cannot trace, so the conversations are
tokenized eagerly first, right-padded to one fixed width (the longest conversation of the
data): the graph sees the same shapes at every step and is compiled once.
``SFTLoss`` (which tokenizes inside its forward) stays the eager path and scores the
held-out set in both modes; :func:`sft_loss` computes the same value on the tokens.
Greedy decoding (``model.generate``) stays eager: each new token lengthens the sequence
and the key-value cache, a new shape at every step of a generation.
``--cudagraphs`` captures the step in a CUDA graph (with ``--device cuda``).

``--device cuda`` puts the model, AdamW, the training step and the evaluations on a GPU:
``TransformersWrapper`` computes where its model is (the tokens it makes on the CPU are
moved there), so the trainer steps on ``SFTLoss`` there as on the CPU (on an
:class:`SFTStep` with ``--compile`` / ``--cudagraphs``), and the model scores the
held-out loss and decodes greedily there.
"""

from __future__ import annotations

import dataclasses
import json
import random
import sys
import time
from pathlib import Path
from typing import Literal

import torch
import tyro
from tensordict import TensorDict

from rl.core import seed_everything
from rl.core.loggers import CSVLogger, generate_exp_name, get_logger
from rl.core.trainers import Trainer
from rl.data.llm import ChatHistory, History
from rl.modules.llm import TransformersWrapper
from rl.objectives.llm import SFTLoss

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
from _common import UpdateStep, check_cudagraphs, resolve_device  # noqa: E402
from _stepper import UpdateStepper  # noqa: E402
from _tiny_lm import make_model, make_tokenizer  # noqa: E402


@dataclasses.dataclass
class Config:
    """The data, the model and the fine-tuning."""

    data: str = str(Path(__file__).parent / "data" / "chat.jsonl")
    """A JSONL file of conversations: {"messages": [{"role": ..., "content": ...}, ...]}."""
    held_out: int = 64
    """Conversations kept aside for evaluation (the file's last ones)."""
    seed: int = 0
    """Seed of torch, numpy and python random."""
    n_embd: int = 64
    """Model width."""
    n_layer: int = 2
    """Transformer blocks."""
    n_head: int = 4
    """Attention heads."""
    steps: int = 300
    """Optimizer steps."""
    batch_size: int = 16
    """Conversations per step."""
    lr: float = 3e-3
    """Learning rate (AdamW)."""
    loss_function: Literal["sft", "minor_sft"] = "sft"
    """SFTLoss's loss (minor_sft needs reference log-probs: not used here)."""
    logger: Literal["csv", "tensorboard", "wandb", "mlflow"] = "csv"
    """Logging back-end (CSV needs nothing extra)."""
    log_dir: str = "runs"
    """Where the logs go."""
    exp_name: str | None = None
    """Run name (default: generated from the algorithm and the seed)."""
    progress: bool = True
    """Show a progress bar when attached to a terminal."""
    compile: bool = False
    """torch.compile each training step (forward, loss, backward, clipping, AdamW) into
    one graph, once (the conversations tokenized eagerly to a fixed width)."""
    cudagraphs: bool = False
    """Capture the training step in a CUDA graph (needs ``--device cuda``)."""
    device: str = "cpu"
    """Where the model, the optimizer, the training step and the evaluations run: ``cpu``,
    ``cuda``, ``cuda:N``, or ``auto`` (CUDA where visible). The conversations are
    tokenized on the CPU and moved there."""


def load_chats(path: str) -> list[list[dict]]:
    """The conversations of a JSONL file, each a list of ``{"role", "content"}`` messages."""
    with open(path) as f:
        return [json.loads(line)["messages"] for line in f if line.strip()]


def as_batch(chats: list[list[dict]]) -> TensorDict:
    """Conversations as the ``("history", "full")`` SFTLoss reads."""
    history = ChatHistory(full=History.from_chats(chats), batch_size=(len(chats),))
    return TensorDict({"history": history}, batch_size=(len(chats),))


def batches(chats: list[list[dict]], cfg: Config, rng: random.Random):
    for _ in range(cfg.steps):
        yield as_batch(rng.sample(chats, cfg.batch_size))


def tokenize(batch: TensorDict, tok, width: int) -> tuple[torch.Tensor, ...]:
    """The conversations at ``("history", "full")`` as the tokens, attention mask and
    assistant mask SFT scores, each ``[B, width]``, right-padded (``width`` at least the
    longest conversation's tokens)."""
    out = batch["history", "full"].apply_chat_template(
        tokenizer=tok, add_generation_prompt=False, return_assistant_tokens_mask=True
    )
    rows = out.get("input_ids", as_list=True)
    masks = out.get("assistant_masks", as_list=True)
    tokens = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
    attention = torch.zeros(len(rows), width, dtype=torch.long)
    assistant = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, (row, mask) in enumerate(zip(rows, masks)):
        if row.numel() > width:
            raise ValueError(f"a conversation has {row.numel()} tokens, more than width={width}")
        tokens[i, : row.numel()] = row
        attention[i, : row.numel()] = 1
        assistant[i, : row.numel()] = mask.bool()
    return tokens, attention, assistant


def token_log_probs(model, tokens, attention) -> torch.Tensor:
    """The model's log-probability of each token after the first, ``[B, T - 1]``, on
    left- or right-padded ``tokens`` ``[B, T]`` (positions count the attended tokens)."""
    positions = (attention.cumsum(-1) - 1).clamp_min(0)
    logits = model(input_ids=tokens, attention_mask=attention, position_ids=positions).logits
    # logits[:, t] scores token t + 1
    return logits[:, :-1].log_softmax(-1).gather(-1, tokens[:, 1:, None]).squeeze(-1)


def sft_loss(model, tokens, attention, assistant) -> torch.Tensor:
    """``SFTLoss``'s value (``"sft"``, mean over conversations, normalised by length) on
    tokenized conversations ``[B, T]``: minus the mean log-likelihood of each
    conversation's assistant tokens, averaged over the batch."""
    log_probs = token_log_probs(model, tokens, attention)
    mask = assistant[:, 1:] & attention[:, 1:].bool()
    per_chat = (log_probs * mask).sum(-1) / mask.sum(-1).clamp_min(1)
    return -per_chat.mean()


class SFTStep(UpdateStepper):
    """The trainer's ``optimization_stepper`` under ``--compile`` / ``--cudagraphs``:
    tokenizes the batch (eagerly, to ``width``, on the CPU) and moves the tokens to
    ``device`` (the model's), then runs one ``UpdateStep`` call (the forward, the loss,
    backward, clipping at ``max_grad_norm`` and the optimizer: one graph); the optimizer's
    state goes into the checkpoints as ``OptimizerHook`` saves it."""

    def __init__(
        self,
        model,
        tok,
        width: int,
        optimizer,
        *,
        max_grad_norm: float,
        compile,
        cudagraphs,
        device: torch.device | str = "cpu",
    ) -> None:
        self.tok, self.width, self.device = tok, width, torch.device(device)

        def loss_fn(tokens, attention, assistant):
            loss = sft_loss(model, tokens, attention, assistant)
            return loss, loss

        update = UpdateStep(
            loss_fn,
            optimizer,
            max_grad_norm=max_grad_norm,
            compile=compile,
            cudagraphs=cudagraphs,
        )
        super().__init__(update, optimizer)

    def inputs(self, batch: TensorDict) -> tuple[torch.Tensor, ...]:
        return tuple(t.to(self.device) for t in tokenize(batch, self.tok, self.width))

    def step(self, trainer, batch: TensorDict) -> TensorDict:
        return TensorDict(loss_sft=super().step(trainer, batch))


def make_learner(
    model,
    tok,
    width: int,
    *,
    lr: float,
    device: torch.device,
    compile: bool = False,
    cudagraphs: bool = False,
    loss_function: str = "sft",
) -> tuple[SFTLoss, torch.optim.AdamW, SFTStep | None]:
    """``SFTLoss`` on ``model`` (on ``device``), its AdamW optimizer and the trainer's
    ``optimization_stepper``: an :class:`SFTStep` on conversations tokenized to ``width``
    with ``compile`` / ``cudagraphs``, else ``None`` (the trainer's own step on
    ``SFTLoss``, which scores where the model is). The optimizer's state lives on
    ``device``."""
    stepped = compile or cudagraphs
    if stepped and loss_function != "sft":  # SFTStep computes the plain SFT loss only
        raise ValueError(
            f"loss_function={loss_function!r} runs on SFTLoss, eagerly; with --compile or "
            "--cudagraphs the step is an SFTStep, which computes loss_function='sft' only"
        )
    with torch.device(device):
        loss = SFTLoss(
            TransformersWrapper(model, tokenizer=tok, generate=False, pad_output=True),
            loss_function=loss_function,
        )
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        stepper = None
        if stepped:  # one graph per step
            stepper = SFTStep(
                model,
                tok,
                width,
                optimizer,
                max_grad_norm=1.0,
                compile=compile,
                cudagraphs=cudagraphs,
                device=device,
            )
    return loss, optimizer, stepper


@torch.no_grad()
def held_out_loss(model, tok, chats: list[list[dict]], loss_function: str = "sft") -> float:
    """``SFTLoss`` on ``chats``, scored by ``model`` in eval mode, where it is."""
    model.eval()
    scorer = TransformersWrapper(model, tokenizer=tok, generate=False, pad_output=True)
    return SFTLoss(scorer, loss_function=loss_function)(as_batch(chats)).loss_sft.item()


@torch.no_grad()
def exact_match(model, tok, chats: list[list[dict]]) -> float:
    """Share of ``chats`` whose last assistant turn greedy decoding reproduces (``model``
    decoding where it is)."""
    policy = TransformersWrapper(
        model, tokenizer=tok, generate_kwargs={"max_new_tokens": 24, "do_sample": False}
    )
    prompts = History.from_chats([chat[:-1] for chat in chats])
    td = TensorDict(
        {"history": ChatHistory(prompt=prompts, batch_size=(len(chats),))},
        batch_size=(len(chats),),
    )
    answers = policy(td)["history", "response"]
    hits = [
        answer[-1].content == chat[-1]["content"] for answer, chat in zip(answers.unbind(0), chats)
    ]
    return sum(hits) / len(hits)


def main(cfg: Config) -> dict:
    check_cudagraphs(cfg.cudagraphs)
    device = resolve_device(cfg.device)
    seed_everything(cfg.seed)
    torch.set_num_threads(1)
    rng = random.Random(cfg.seed)
    exp_name = cfg.exp_name or generate_exp_name("sft", f"chat-s{cfg.seed}")
    logger = get_logger(cfg.logger, logger_name=cfg.log_dir, experiment_name=exp_name)
    logger.log_hparams(dataclasses.asdict(cfg))
    chats = load_chats(cfg.data)
    train, test = chats[: -cfg.held_out], chats[-cfg.held_out :]
    tok = make_tokenizer()
    longest = max(
        len(tok.apply_chat_template(c, tokenize=True, return_dict=True)["input_ids"]) for c in chats
    )
    # initialised on the CPU (the same weights on every device), then moved
    model = make_model(tok, cfg.n_embd, cfg.n_layer, cfg.n_head, n_positions=longest + 32)
    model.to(device)
    before = held_out_loss(model, tok, test, cfg.loss_function)
    logger.log_scalar("eval/loss_sft", before, 0)
    # the steps on fixed-width tokens (the longest conversation's)
    loss, optimizer, stepper = make_learner(
        model,
        tok,
        longest,
        lr=cfg.lr,
        device=device,
        compile=cfg.compile,
        cudagraphs=cfg.cudagraphs,
        loss_function=cfg.loss_function,
    )
    trainer = Trainer(
        collector=batches(train, cfg, rng),
        total_frames=cfg.steps * cfg.batch_size,
        frame_skip=1,
        optim_steps_per_batch=1,
        loss_module=loss,
        optimizer=optimizer,
        clip_norm=1.0,
        optimization_stepper=stepper,
        logger=logger,
        log_interval=0,
        progress_bar=cfg.progress,
    )
    start = time.perf_counter()
    model.train()
    trainer.train()
    seconds = time.perf_counter() - start
    after = held_out_loss(model, tok, test, cfg.loss_function)
    match = exact_match(model, tok, test)
    frames = trainer.collected_frames
    logger.log_scalar("eval/loss_sft", after, frames)
    logger.log_scalar("eval/exact_match", match, frames)
    curve = None
    if isinstance(logger, CSVLogger):
        from rl.core.plot import plot_runs

        curve = plot_runs([logger.experiment], f"{logger.experiment}/curve.png", ["loss_sft"])
    print(
        f"{cfg.steps} steps ({frames} conversations) in {seconds:.0f} s: held-out loss "
        f"{before:.3f} -> {after:.3f}, exact last answer {match:.1%}"
        + (f"; curve: {curve}" if curve else "")
    )
    return {
        "loss_before": before,
        "loss_after": after,
        "exact_match": match,
        "seconds": seconds,
        "model": model,
    }


if __name__ == "__main__":
    main(tyro.cli(Config, description=__doc__))
