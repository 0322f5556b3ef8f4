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
padded eagerly, then the forward, ``_grpo_step.grpo_objective``, backward, clipping and AdamW,
compiled with dynamic shapes: one graph for every answer length). ``GRPOLoss`` itself cannot be that graph: it reads the
answers as rows of their own length (a Python loop over them) and masks by boolean
indexing, whose data-dependent shapes break a graph; ``_grpo_step.grpo_objective`` computes its
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
from rl.core.trainers import GRPOTrainer, LRSchedulerHook
from rl.data import LazyStackStorage, ReplayBuffer, SamplerWithoutReplacement
from rl.modules.llm import TransformersWrapper
from rl.objectives.llm import GRPOLoss, MCAdvantage

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
from _common import resolve_device  # noqa: E402
from _countdown import (  # noqa: E402
    ANSWER_TAGS,
    evaluate,
    make_env,
    make_problems,
    sample_kwargs,
    sft_warm_up,
)
from _grpo_step import GRPOStep  # noqa: E402
from _tiny_lm import make_model, make_tokenizer  # noqa: E402
from sft import check_cudagraphs  # noqa: E402


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
    sft_warm_up(cfg, model, tok, train_rows, rng, logger)
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
