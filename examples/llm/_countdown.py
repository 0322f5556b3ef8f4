"""The Countdown task of ``grpo_countdown.py``: its problems (numbers, a target, the
expression that reaches it), the one-turn chat env that scores an answer with
``CountdownRewardParser``, the SFT warm-up on the problems' generating expressions and
the held-out evaluation."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import torch

from rl.core.trainers import Trainer
from rl.envs import StepCounter
from rl.envs.llm import CountdownRewardParser, DatasetChatEnv
from rl.modules.llm import TransformersWrapper

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
from _common import resolve_device  # noqa: E402
from sft import as_batch  # noqa: E402
from sft import make_learner as make_sft_learner  # noqa: E402

__all__ = [
    "ANSWER_TAGS",
    "CountdownRewardParser",
    "evaluate",
    "make_env",
    "make_problems",
    "sample_kwargs",
    "sft_batches",
    "sft_chat",
    "sft_warm_up",
]

ANSWER_TAGS = ["<answer>", "</answer>"]  # one token each


def make_problems(
    n: int, cfg, rng: random.Random, exclude=(), distinct: bool = False
) -> list[dict]:
    """Countdown problems: numbers, a target reached by folding them with ``+ - *`` in a
    random order, and that expression (the SFT answer). Targets are positive; no query of
    ``exclude`` is drawn, and with ``distinct`` no query twice."""
    rows, seen = [], set(exclude)
    while len(rows) < n:
        numbers = [rng.randint(1, cfg.max_number) for _ in range(cfg.num_count)]
        order = rng.sample(numbers, len(numbers))
        expr, value = str(order[0]), order[0]
        for k in order[1:]:
            op = rng.choice("+-*")
            if op == "*" and ("+" in expr or "-" in expr):
                expr = f"({expr})"
            expr, value = f"{expr}{op}{k}", {"+": value + k, "-": value - k, "*": value * k}[op]
        query = f"{' '.join(map(str, numbers))} -> {value}"
        if value <= 0 or query in seen:
            continue
        if distinct:
            seen.add(query)
        reference = f"target={value}, numbers={','.join(map(str, numbers))}"
        rows.append({"query": query, "answer": reference, "solution": expr})
    return rows


def make_env(rows: list[dict], tok, num_envs: int, repeats: int | None, seed: int, shuffle=True):
    """A one-turn chat env over ``rows``, its answers scored by ``CountdownRewardParser``."""
    env = DatasetChatEnv(
        dataset=rows,
        num_envs=num_envs,
        repeats=repeats,
        shuffle=shuffle,
        seed=seed,
        tokenizer=tok,
    )
    env.append_transform(StepCounter(max_steps=1))
    env.append_transform(CountdownRewardParser(tokenizer=tok, format_reward=0.0))
    return env


def sample_kwargs(cfg) -> dict:
    """``model.generate``'s arguments for sampling an answer (temperature 1)."""
    return {"max_new_tokens": cfg.max_new_tokens, "do_sample": True}


@torch.no_grad()
def evaluate(env, model, tok, cfg, times: int = 1) -> float:
    """Success rate of the answers ``model`` samples (where it is) to the held-out prompts
    (the mean of ``times`` evaluations)."""
    policy = TransformersWrapper(model, tokenizer=tok, generate_kwargs=sample_kwargs(cfg))
    rates = [env.step(policy(env.reset()))["next", "reward"].float().mean() for _ in range(times)]
    return sum(rate.item() for rate in rates) / times


def sft_chat(row: dict) -> list[dict]:
    """The SFT conversation of a problem: its query, then its generating expression."""
    return [
        {"role": "user", "content": row["query"]},
        {"role": "assistant", "content": f"<answer>{row['solution']}</answer>"},
    ]


def sft_batches(rows: list[dict], cfg, rng: random.Random):
    """``sft_steps`` batches of chats (the problem, then its generating expression)."""
    for _ in range(cfg.sft_steps):
        yield as_batch([sft_chat(r) for r in rng.sample(rows, cfg.sft_batch_size)])


def sft_warm_up(cfg, model, tok, rows: list[dict], rng: random.Random, logger) -> None:
    """Trains ``model`` (in place) with ``SFTLoss`` on ``cfg.sft_steps`` batches of the
    conversations of ``rows`` (the problem, then its generating expression), driven by
    ``rl.core.trainers.Trainer``: one compiled ``SFTStep`` per step with ``cfg.compile``,
    the conversations tokenized to the longest one's width."""
    width = max(  # an SFTStep's fixed width: the longest conversation's
        len(tok.apply_chat_template(sft_chat(r), tokenize=True, return_dict=True)["input_ids"])
        for r in rows
    )
    sft_loss_module, sft_optimizer, stepper = make_sft_learner(
        model,
        tok,
        width,
        lr=cfg.sft_lr,
        device=resolve_device(cfg.device),
        compile=cfg.compile,
        cudagraphs=cfg.cudagraphs,
    )
    sft = Trainer(
        collector=sft_batches(rows, cfg, rng),
        total_frames=cfg.sft_steps * cfg.sft_batch_size,
        frame_skip=1,
        optim_steps_per_batch=1,
        loss_module=sft_loss_module,
        optimizer=sft_optimizer,
        clip_norm=1.0,
        optimization_stepper=stepper,
        progress_bar=cfg.progress,
        logger=logger,
        log_interval=0,
    )
    model.train()
    sft.train()
    model.eval()
