"""GRPO on a small Countdown game, after a short SFT warm-up, with a language model built
from a config (no downloaded weights).

Shao et al. 2024, "DeepSeekMath" (https://arxiv.org/abs/2402.03300) for GRPO. The task:
given ``num_count`` numbers and a target reached by combining them, answer
``<answer>expression</answer>`` with an expression of ``+ - *`` and parentheses over the
numbers (each at most once) that equals the target; ``CountdownRewardParser`` scores it
(1 right, 0 otherwise), never evaluating Python. Many problems have several right
answers, of which the SFT data shows one.

1. A character-level tokenizer and a small GPT-2 (``transformers`` config) are built here.
2. SFT: ``SFTLoss`` on generated problems and their generating expression, driven by
   ``rl.core.trainers.Trainer`` for about one pass over the examples (a deliberately weak
   start: the model copies the numbers but mostly guesses the operation).
3. GRPO: an ``LLMCollector`` samples ``group_size`` answers to each prompt of a
   ``DatasetChatEnv`` with a copy of the model (as an inference engine would);
   ``MCAdvantage`` in the replay buffer standardises the rewards within each group;
   ``GRPOTrainer`` runs ``GRPOLoss`` over the buffer (two passes), then pushes the
   weights to the collector's copy and empties the buffer. The budget is a number of
   batches, over which the learning rate warms up, then decays linearly to 0.

The score is the success rate of sampled answers (temperature 1) on held-out prompts,
measured after SFT and along GRPO.

    uv run --group llm examples/llm/grpo_countdown.py
    uv run --group llm examples/llm/grpo_countdown.py --seed 1 --grpo-batches 100
    uv run --group llm examples/llm/grpo_countdown.py --compile
    uv run --group llm examples/llm/grpo_countdown.py --device cuda --cudagraphs   # on a GPU

``--compile``: each SFT step is ONE compiled graph (``sft.py``'s :class:`SFTStep`: the
conversations tokenized eagerly to a fixed width, then the forward, the loss, backward,
clipping and AdamW), and so is each GRPO step (:class:`GRPOStep`: the minibatch's answers
padded eagerly, then the forward, :func:`grpo_objective`, backward, clipping and AdamW,
compiled with dynamic shapes: one graph for every answer length). ``GRPOLoss`` itself cannot be that graph: it reads the
answers as rows of their own length (a Python loop over them) and masks by boolean
indexing, whose data-dependent shapes break a graph; :func:`grpo_objective` computes its
values with masks instead (an equality the tests check). Sampling (``model.generate``,
in the collector and the evaluations) stays eager: each new token lengthens the sequence
and the key-value cache. ``--cudagraphs`` captures both steps in CUDA graphs (with
``--device cuda``).

``--device cuda`` puts the model, the optimizers, both stages' steps and the replay
buffer (the answers and their advantages) on a GPU. ``TransformersWrapper`` computes
where its model is (the prompts' tokens are moved there): the collector's copy of the
model samples on the GPU too (its weights copied from the trained model after each
batch), and so do the evaluations; ``SFTLoss`` and ``GRPOLoss`` score there (the
environments stay on the CPU, reading the answers' text).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import random
import sys
import time
import warnings
from pathlib import Path
from typing import Literal

import torch
import tyro
from tensordict import TensorDict

from rl.collectors import VanillaWeightUpdater
from rl.collectors.llm import LLMCollector
from rl.core import seed_everything
from rl.core.loggers import CSVLogger, generate_exp_name, get_logger
from rl.core.trainers import GRPOTrainer, LRSchedulerHook, Trainer
from rl.data import LazyStackStorage, ReplayBuffer, SamplerWithoutReplacement
from rl.envs import StepCounter
from rl.envs.llm import CountdownRewardParser, DatasetChatEnv
from rl.modules.llm import TransformersWrapper
from rl.objectives.llm import GRPOLoss, MCAdvantage

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
from _common import resolve_device  # noqa: E402
from _stepper import UpdateStepper  # noqa: E402
from _tiny_lm import make_model, make_tokenizer  # noqa: E402
from sft import UpdateStep, as_batch, check_cudagraphs, token_log_probs  # noqa: E402
from sft import make_learner as make_sft_learner  # noqa: E402


@dataclasses.dataclass
class Config:
    """The task, the model, the SFT warm-up and GRPO."""

    seed: int = 0
    """Seed of torch, numpy, python random and the problems."""
    num_count: int = 2
    """Numbers per problem."""
    max_number: int = 9
    """The numbers are drawn in [1, max_number]."""
    n_embd: int = 128
    """Model width."""
    n_layer: int = 2
    """Transformer blocks."""
    n_head: int = 4
    """Attention heads."""
    sft_examples: int = 3000
    """Generated (problem, expression) pairs the SFT stage draws from."""
    sft_steps: int = 100
    """SFT optimizer steps (a weak start on purpose: the model copies the numbers but
    mostly guesses the operation)."""
    sft_batch_size: int = 32
    """Conversations per SFT step."""
    sft_lr: float = 3e-3
    """SFT learning rate (AdamW)."""
    prompts_per_batch: int = 8
    """Prompts per GRPO batch."""
    group_size: int = 8
    """Sampled answers per prompt (the group GRPO's advantages compare)."""
    grpo_batches: int = 200
    """GRPO batches: the budget, counted in updates so that the result does not depend on
    the machine's load (7 to 15 minutes on a 2-core CPU shared with other jobs)."""
    grpo_minutes: float | None = 18.0
    """Wall-clock cap of the GRPO stage, a safety that stops a run on an overloaded
    machine (it does not bind at the defaults on a 2-core CPU); ``None``: no cap."""
    grpo_lr: float = 6e-4
    """Peak GRPO learning rate (AdamW): reached linearly over ``grpo_warmup`` batches,
    then decayed linearly to 0 at ``grpo_batches`` (at a constant 1e-3 with two passes,
    one seed in two collapsed to answers that are all wrong, and late in a run the
    policy drifts away again)."""
    grpo_warmup: int = 10
    """GRPO batches of learning-rate warm-up (AdamW's first steps are its largest)."""
    minibatch_size: int = 32
    """Answers per GRPO optimization step."""
    num_epochs: int = 2
    """Passes over each batch's answers (the second one off-policy, which the ratio
    clipping bounds): sampling costs more than a pass, so a second one is cheap."""
    clip_epsilon: float = 0.2
    """GRPO ratio clipping."""
    entropy_coeff: float = 0.0
    """Entropy bonus."""
    max_new_tokens: int = 16
    """Tokens an answer may have."""
    eval_prompts: int = 64
    """Held-out prompts (never trained on) scored after SFT and along GRPO."""
    eval_samples: int = 4
    """Sampled answers scored per held-out prompt."""
    eval_interval: int = 25
    """GRPO batches between two evaluations."""
    final_evals: int = 4
    """Evaluations averaged for the SFT level and the final level (each
    ``eval_prompts * eval_samples`` answers)."""
    logger: Literal["csv", "tensorboard", "wandb", "mlflow"] = "csv"
    """Logging back-end (CSV needs nothing extra)."""
    log_dir: str = "runs"
    """Where the logs go."""
    exp_name: str | None = None
    """Run name (default: generated from the algorithm, the task and the seed)."""
    progress: bool = True
    """Show a progress bar when attached to a terminal."""
    compile: bool = False
    """torch.compile each SFT step and each GRPO step (forward, loss, backward,
    clipping, AdamW) into one graph each, once (no entropy bonus then)."""
    cudagraphs: bool = False
    """Capture the SFT and GRPO steps in CUDA graphs (needs ``--device cuda``)."""
    device: str = "cpu"
    """Where the model (and the collector's copy of it, which samples the answers), the
    optimizers, the SFT and GRPO steps, the replay buffer and the evaluations' sampling
    live: ``cpu``, ``cuda``, ``cuda:N``, or ``auto`` (CUDA where visible). The
    environments stay on the CPU."""


ANSWER_TAGS = ["<answer>", "</answer>"]  # one token each


def make_problems(
    n: int, cfg: Config, rng: random.Random, exclude=(), distinct: bool = False
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


def grpo_tensors(batch, width: int | None = None) -> tuple[torch.Tensor, ...]:
    """What GRPO's objective reads from a minibatch of answers, right-padded to ``width``
    (default: the longest answer's): the full tokens, their attention mask and the mask of
    the answer's tokens (``[B, T]``), each answer's advantage (``[B]``) and the log-probs
    it was sampled with (``[B, T]``; ``GRPOLoss``'s default keys)."""

    def padded(key, dtype=None):
        value = batch.get(key, as_padded_tensor=True, padding_value=0)
        value = value if dtype is None else value.to(dtype)
        if width is None:
            return value
        return torch.nn.functional.pad(value, (0, width - value.shape[-1]))

    advantage = batch.get("advantage").reshape(batch.shape[0])
    return (
        padded(("tokens", "full"), torch.long),
        padded(("masks", "all_attention_mask"), torch.long),
        padded(("masks", "all_assistant_mask"), torch.bool),
        advantage,
        padded(("log_probs", "full")),
    )


def grpo_objective(
    model, clip_epsilon: float, tokens, attention, answer, advantage, sample_log_prob
) -> dict[str, torch.Tensor]:
    """``GRPOLoss``'s outputs (clipped objective averaged over the answers' tokens, the
    clipped share, the approximate KL to the sampling policy, the effective sample size)
    on :func:`grpo_tensors`, with masks in the place of its boolean indexing (no
    data-dependent shape: one graph)."""
    # the first token has no context
    log_prob = torch.nn.functional.pad(token_log_probs(model, tokens, attention), (1, 0))
    first = torch.arange(tokens.shape[-1], device=tokens.device) == 0
    mask = answer & attention.bool() & ~first & torch.isfinite(sample_log_prob)
    log_weight = torch.where(mask, log_prob - torch.where(mask, sample_log_prob, 0.0), 0.0)
    count = mask.sum()
    low, high = math.log1p(-clip_epsilon), math.log1p(clip_epsilon)
    clipped = log_weight.clamp(low, high)
    advantage = advantage.unsqueeze(-1)
    objective = -torch.minimum(log_weight.exp() * advantage, clipped.exp() * advantage)
    with torch.no_grad():
        masked = log_weight.masked_fill(~mask, float("-inf")).flatten()
        ess = (2 * masked.logsumexp(0) - (2 * masked).logsumexp(0)).exp() / count
        clip_fraction = ((clipped != log_weight) & mask).sum() / count
        kl_approx = torch.where(mask, -log_weight, 0.0).sum() / count
    return {
        "loss_objective": torch.where(mask, objective, 0.0).sum() / count.clamp_min(1),
        "clip_fraction": clip_fraction,
        "kl_approx": kl_approx,
        "ESS": ess,
    }


class GRPOStep(UpdateStepper):
    """GRPO's ``optimization_stepper`` under ``--compile``: pads the minibatch's answers
    (eagerly), then runs one ``UpdateStep`` call (the forward, :func:`grpo_objective`,
    backward, clipping at ``max_grad_norm``, AdamW: one graph); the optimizer's state goes
    into the checkpoints as the trainer's hook saves it.

    ``width=None`` pads each minibatch to its longest answer and compiles with dynamic
    shapes (one graph for every length: padding every answer to the model's context
    would cost more than compiling saves); a ``width`` pads to it (fixed shapes, as CUDA
    graphs need)."""

    def __init__(
        self,
        model,
        width: int | None,
        optimizer,
        *,
        clip_epsilon: float,
        max_grad_norm: float,
        compile,
        cudagraphs: bool = False,
    ) -> None:
        self.width = width

        def loss_fn(*tensors):
            out = grpo_objective(model, clip_epsilon, *tensors)
            return out["loss_objective"], out

        if compile and width is None:  # one graph for every batch and answer length
            compile = {"dynamic": True, **(compile if isinstance(compile, dict) else {})}
        update = UpdateStep(
            loss_fn,
            optimizer,
            max_grad_norm=max_grad_norm,
            compile=compile,
            cudagraphs=cudagraphs,
        )
        super().__init__(update, optimizer)

    def inputs(self, batch) -> tuple[torch.Tensor, ...]:
        return grpo_tensors(batch, self.width)

    def step(self, trainer, batch) -> TensorDict:
        return TensorDict(super().step(trainer, batch))


def sample_kwargs(cfg: Config) -> dict:
    """``model.generate``'s arguments for sampling an answer (temperature 1)."""
    return {"max_new_tokens": cfg.max_new_tokens, "do_sample": True}


def make_collector(cfg: Config, model, tok, rows: list[dict]) -> LLMCollector:
    """An ``LLMCollector`` of ``grpo_batches`` batches: ``group_size`` answers to each of
    ``prompts_per_batch`` prompts of ``rows``, sampled by a copy of ``model`` (as an
    inference engine would; on ``model``'s device), into which ``model``'s weights are
    copied after each batch."""
    gen_model = copy.deepcopy(model)
    num_envs = cfg.prompts_per_batch * cfg.group_size
    return LLMCollector(
        make_env(rows, tok, num_envs, cfg.group_size, cfg.seed),
        policy=TransformersWrapper(
            gen_model, tokenizer=tok, pad_output=True, generate_kwargs=sample_kwargs(cfg)
        ),
        dialog_turns_per_batch=num_envs,
        total_dialog_turns=cfg.grpo_batches * num_envs,
        flatten_data=True,
        weight_updater=VanillaWeightUpdater(
            weight_getter=lambda: TensorDict.from_module(model).data,
            policy_weights=TensorDict.from_module(gen_model).data,
        ),
    )


def make_buffer(cfg: Config) -> ReplayBuffer:
    """A batch's answers (moved to ``cfg.device`` as they are written), their advantages
    standardised within each group, drawn in minibatches without replacement."""
    buffer = ReplayBuffer(
        storage=LazyStackStorage(
            cfg.prompts_per_batch * cfg.group_size, device=resolve_device(cfg.device)
        ),
        sampler=SamplerWithoutReplacement(),
        batch_size=cfg.minibatch_size,
    )
    buffer.append_transform(MCAdvantage(grpo_size=cfg.group_size))
    return buffer


def make_learner(cfg: Config, model, tok) -> tuple[GRPOLoss, torch.optim.AdamW, GRPOStep | None]:
    """``GRPOLoss`` on ``model``, its AdamW optimizer and, with ``--compile`` /
    ``--cudagraphs``, the :class:`GRPOStep` the trainer runs (else ``None``: the trainer's
    own step on ``GRPOLoss``); the loss's own tensors (its clipping bounds) and the
    optimizer's live on ``cfg.device``, with the model."""
    with torch.device(resolve_device(cfg.device)):
        loss = GRPOLoss(
            TransformersWrapper(model, tokenizer=tok, pad_output=True),
            clip_epsilon=cfg.clip_epsilon,
            entropy_bonus=cfg.entropy_coeff > 0,
            entropy_coeff=cfg.entropy_coeff,
        )
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.grpo_lr)
        stepper = None
        if cfg.compile or cfg.cudagraphs:  # one graph per step (answers padded as below)
            stepper = GRPOStep(
                model,
                # CUDA graphs: one fixed width (the context); else each batch's, dynamic shapes
                model.config.n_positions if cfg.cudagraphs else None,
                optimizer,
                clip_epsilon=cfg.clip_epsilon,
                max_grad_norm=1.0,  # GRPOTrainer's clip_norm
                compile=cfg.compile,
                cudagraphs=cfg.cudagraphs,
            )
    return loss, optimizer, stepper


@torch.no_grad()
def evaluate(env, model, tok, cfg: Config, times: int = 1) -> float:
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


def sft_batches(rows: list[dict], cfg: Config, rng: random.Random):
    """``sft_steps`` batches of chats (the problem, then its generating expression)."""
    for _ in range(cfg.sft_steps):
        yield as_batch([sft_chat(r) for r in rng.sample(rows, cfg.sft_batch_size)])


def main(cfg: Config) -> dict:
    check_cudagraphs(cfg.cudagraphs)
    device = resolve_device(cfg.device)
    if (cfg.compile or cfg.cudagraphs) and cfg.entropy_coeff > 0:
        raise ValueError(
            f"the compiled GRPO step has no entropy bonus; got entropy_coeff="
            f"{cfg.entropy_coeff} with --compile / --cudagraphs (set it to 0, or run eagerly)"
        )
    seed_everything(cfg.seed)
    torch.set_num_threads(1)
    rng = random.Random(cfg.seed)
    exp_name = cfg.exp_name or generate_exp_name("grpo", f"countdown{cfg.num_count}-s{cfg.seed}")
    logger = get_logger(cfg.logger, logger_name=cfg.log_dir, experiment_name=exp_name)
    logger.log_hparams(dataclasses.asdict(cfg))
    start = time.perf_counter()

    tok = make_tokenizer(ANSWER_TAGS)
    # initialised on the CPU (the same weights on every device), then moved
    model = make_model(tok, cfg.n_embd, cfg.n_layer, cfg.n_head, n_positions=64)
    model.to(device)
    eval_rows = make_problems(cfg.eval_prompts, cfg, rng, distinct=True)
    train_rows = make_problems(cfg.sft_examples, cfg, rng, exclude=[r["query"] for r in eval_rows])
    n_eval = cfg.eval_samples * len(eval_rows)
    eval_env = make_env(eval_rows, tok, n_eval, cfg.eval_samples, cfg.seed, shuffle=False)

    # 1. SFT, a fraction of an epoch, on the trainer's loop
    width = max(  # an SFTStep's fixed width: the longest conversation's
        len(tok.apply_chat_template(sft_chat(r), tokenize=True, return_dict=True)["input_ids"])
        for r in train_rows
    )
    sft_loss_module, sft_optimizer, stepper = make_sft_learner(
        model,
        tok,
        width,
        lr=cfg.sft_lr,
        device=device,
        compile=cfg.compile,
        cudagraphs=cfg.cudagraphs,
    )
    sft = Trainer(
        collector=sft_batches(train_rows, cfg, rng),
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
    sft_success = evaluate(eval_env, model, tok, cfg, cfg.final_evals)
    logger.log_scalar("eval/success", sft_success, 0)
    print(f"after SFT ({cfg.sft_steps} steps): held-out success {sft_success:.1%}")

    # 2. GRPO: a collector with its own copy of the model, refreshed after each batch
    num_envs = cfg.prompts_per_batch * cfg.group_size
    collector = make_collector(cfg, model, tok, train_rows)
    buffer = make_buffer(cfg)
    loss, optimizer, grpo_stepper = make_learner(cfg, model, tok)
    trainer = GRPOTrainer(
        collector=collector,
        total_frames=cfg.grpo_batches * num_envs,
        loss_module=loss,
        optimizer=optimizer,
        weight_sync_sender=collector,
        empty_replay_buffer_on_weight_update=True,
        replay_buffer=buffer,
        num_epochs=cfg.num_epochs,
        optimization_stepper=grpo_stepper,
        logger=logger,
        log_interval=0,
        progress_bar=cfg.progress,
    )

    def lr_factor(k: int) -> float:  # k batches done
        return min((k + 1) / (cfg.grpo_warmup + 1), 1 - k / cfg.grpo_batches)

    decay = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    LRSchedulerHook(decay, interval="batch").register(trainer)
    curve = [(0, sft_success)]
    grpo_start = time.perf_counter()

    def evaluate_and_stop(batch):
        batches = trainer.collected_frames // num_envs
        if batches % cfg.eval_interval == 0:
            curve.append((trainer.collected_frames, evaluate(eval_env, model, tok, cfg)))
            logger.log_scalar("eval/success", curve[-1][1], trainer.collected_frames)
        minutes = cfg.grpo_minutes
        if minutes is not None and time.perf_counter() - grpo_start > 60 * minutes:
            trainer.request_stop(f"the GRPO budget of {cfg.grpo_minutes} minutes is spent")

    trainer.register_op("post_steps_log", evaluate_and_stop)
    with warnings.catch_warnings():
        if grpo_stepper is not None:  # it writes AdamW's update and never calls step(),
            # which the scheduler's order check watches: the schedule itself is right
            warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler.step")
        trainer.train()
    final = evaluate(eval_env, model, tok, cfg, cfg.final_evals)
    if curve[-1][0] == trainer.collected_frames:
        curve.pop()
    curve.append((trainer.collected_frames, final))
    logger.log_scalar("eval/final_success", final, trainer.collected_frames)
    seconds = time.perf_counter() - start
    image = None
    if isinstance(logger, CSVLogger):
        from rl.core.plot import plot_runs

        image = plot_runs([logger.experiment], f"{logger.experiment}/curve.png", ["eval/success"])
    print(
        f"GRPO: {trainer.collected_frames} answers in {time.perf_counter() - grpo_start:.0f} s; "
        f"held-out success {sft_success:.1%} -> {final:.1%} ({100 * (final - sft_success):+.1f} "
        f"points); {seconds:.0f} s in all" + (f"; curve: {image}" if image else "")
    )
    return {
        "sft_success": sft_success,
        "final_success": final,
        "curve": curve,
        "answers": trainer.collected_frames,
        "seconds": seconds,
        "model": model,
    }


if __name__ == "__main__":
    main(tyro.cli(Config, description=__doc__))
