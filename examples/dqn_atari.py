"""DQN on Atari (ALE) with the classic preprocessing chain, built from rl's pieces.

Mnih et al. 2015, "Human-level control through deep reinforcement learning" (Nature),
https://www.nature.com/articles/nature14236. The defaults are CleanRL's ``dqn_atari.py``:
the Nature-CNN Q-network, Adam 1e-4, batch 32, a gradient step every 4 agent steps after
80k random ones, the target copied every 1000 steps, epsilon 1 -> 0.01 over the first 10%
of the frames. The game and its preprocessing (no-op starts, frame skip 4, end of life,
reward clipping, 84x84 grayscale, 4 stacked frames) are ``ppo_atari.py``'s ``make_game``.

The replay buffer keeps the frames as uint8 (the preprocessed frames quantised to 1/255),
a quarter of their float size: a transition of stacked frames is 56 KB, 5.6 GB per 100k
(in GPU memory with ``--device cuda``, where the buffer lives with the network).

    uv run --group atari examples/dqn_atari.py                        # ALE/Breakout-v5
    uv run --group atari examples/dqn_atari.py --env-id ALE/Pong-v5
    uv run --group atari examples/dqn_atari.py --total-frames 4000 --learning-starts 1000  # smoke
    uv run --group atari examples/dqn_atari.py --device cuda --compile --cudagraphs      # on a GPU

``total_frames`` counts agent steps (each is ``frame_skip`` emulator frames), as CleanRL's
``total_timesteps``. Writes CSV logs (or another logger) and a learning-curve PNG of the game
score under ``runs/<exp_name>/``.
"""

from __future__ import annotations

import collections
import dataclasses
import sys
import time
from pathlib import Path
from typing import Literal

import torch
import tyro
from torch import nn

from rl.collectors import Collector
from rl.core import seed_everything
from rl.core.loggers import generate_exp_name, get_logger
from rl.envs import EndOfLifeTransform
from rl.modules import ConvNet, QValueActor, TensorDictSequential
from rl.objectives import DQNLoss, HardUpdate

sys.path.insert(0, str(Path(__file__).parent))
from _common import (  # noqa: E402
    ProgressBar,
    UpdateStep,
    collector_devices,
    compile_policy,
    evaluate,
    finish_run,
    resolve_device,
    set_lr,
)
from _offpolicy import make_egreedy, make_replay_buffer  # noqa: E402
from ppo_atari import make_game  # noqa: E402


@dataclasses.dataclass
class Config:
    """DQN-Atari hyperparameters (CleanRL's names where they exist)."""

    env_id: str = "ALE/Breakout-v5"
    """ALE game id (ale-py, ``rl-envs[atari]``)."""
    total_frames: int = 10_000_000
    """Agent steps to train for (total_timesteps; each is frame_skip emulator frames)."""
    buffer_size: int = 100_000
    """Replay buffer capacity in transitions (CleanRL: 1M, 56 GB of uint8 frames here)."""
    learning_starts: int = 80_000
    """Agent steps of uniformly random actions before learning starts."""
    train_frequency: int = 4
    """Agent steps between two gradient steps."""
    batch_size: int = 32
    """Transitions per gradient step."""
    lr: float = 1e-4
    """Adam learning rate."""
    anneal_lr: bool = False
    """Decay the learning rate linearly to 0 over total_frames."""
    gamma: float = 0.99
    """Discount factor."""
    target_network_frequency: int = 1000
    """Gradient steps between two copies of the online network into the target."""
    double_dqn: bool = False
    """Double DQN targets (the online network picks the next action)."""
    start_e: float = 1.0
    """Initial epsilon of the epsilon-greedy exploration."""
    end_e: float = 0.01
    """Final epsilon."""
    exploration_fraction: float = 0.10
    """Fraction of total_frames over which epsilon decays linearly."""
    max_grad_norm: float = 10.0
    """Gradient clipping norm."""
    noop_max: int = 30
    """Most random frames played after a reset (NoopResetEnv)."""
    frame_skip: int = 4
    """Emulator frames per agent step (FrameSkipTransform)."""
    frame_stack: int = 4
    """Frames stacked in an observation (CatFrames)."""
    screen_size: int = 84
    """Side of the resized grayscale frame."""
    end_of_life: bool = True
    """Stop the value bootstrap when a life is lost (EndOfLifeTransform)."""
    eval_episodes: int = 5
    """Deterministic evaluation games at the end (unclipped score)."""
    eval_max_steps: int = 27_000
    """Agent-step cap of an evaluation game (108k emulator frames with frame_skip 4)."""
    seed: int = 0
    """Seed of torch, numpy, python and the game."""
    threads: int = 1
    """Torch CPU threads."""
    logger: Literal["csv", "tensorboard", "wandb", "mlflow"] = "csv"
    """Where the scalars go (CSV needs no extra package)."""
    log_dir: str = "runs"
    """Folder of the run's logs and curve."""
    exp_name: str | None = None
    """Name of the run (default: generated from the algorithm, env and seed)."""
    progress: bool = True
    """Show a progress bar (only when attached to a terminal)."""
    compile: bool = False
    """torch.compile the collector's policy and the whole update step (loss, backward,
    gradient clipping, optimizer step), once."""
    cudagraphs: bool = False
    """Capture the update step and the policy in CUDA graphs (needs ``--device cuda``)."""
    device: str = "cpu"
    """Where the Q-network, the update step and the replay buffer live: ``cpu``, ``cuda``,
    ``cuda:N``, or ``auto`` (CUDA where visible). The game stays on the CPU: the collector
    moves what it returns; the evaluation runs a CPU copy of the Q-network."""


def make_qnet(cfg: Config, env) -> QValueActor:
    """The Nature-CNN Q-network: 3 convolutions, 512 units, one value per action;
    initialised on the CPU (the same weights on every device), then moved to
    ``cfg.device``."""
    net = nn.Sequential(
        ConvNet(
            in_features=cfg.frame_stack,
            num_cells=[32, 64, 64],
            kernel_sizes=[8, 4, 3],
            strides=[4, 2, 1],
            activation_class=nn.ReLU,
        ),
        nn.LazyLinear(512),
        nn.ReLU(),
        nn.Linear(512, env.action_spec.shape[-1]),
    )
    qnet = QValueActor(net, in_keys=["observation"], spec=env.action_spec)
    with torch.no_grad():  # materialise the lazy layer
        qnet(env.fake_tensordict())
    return qnet.to(resolve_device(cfg.device))


def make_learner(cfg: Config, env, qnet):
    """The DQN loss (double DQN with ``cfg.double_dqn``; the bootstrap stopped at a lost
    life with ``cfg.end_of_life``), its Adam optimizer and its update: one clipped
    gradient step and the target's counter (a copy every ``cfg.target_network_frequency``
    steps); the gradient step is one graph with ``cfg.compile``. The loss's own tensors
    and the optimizer's live on ``cfg.device``, with the network. Returns
    ``(loss_module, optimizer, update)``, ``update(sample)`` returning the loss."""
    with torch.device(resolve_device(cfg.device)):
        loss_module = DQNLoss(
            qnet,
            double_dqn=cfg.double_dqn,
            delay_value=True,
            loss_function="l2",
            gamma=cfg.gamma,
            action_space=env.action_spec,
        )
        if cfg.end_of_life:  # the bootstrap stops at a lost life, the game does not reset
            EndOfLifeTransform().register_keys(loss_module)
        target_update = HardUpdate(
            loss_module, value_network_update_interval=cfg.target_network_frequency
        )
        optimizer = torch.optim.Adam(loss_module.parameters(), lr=cfg.lr)

        def dqn_loss(sample):
            loss = loss_module(sample)["loss"]
            return loss, loss

        update = UpdateStep(
            dqn_loss,
            optimizer,
            max_grad_norm=cfg.max_grad_norm,
            target_update=target_update,
            compile=cfg.compile,
            cudagraphs=cfg.cudagraphs,
        )
    return loss_module, optimizer, update


#: what a transition holds in the buffer (the end-of-life flag where the chain writes one)
TRANSITION_KEYS = (
    "observation",
    "action",
    ("next", "observation"),
    ("next", "reward"),
    ("next", "done"),
    ("next", "terminated"),
    ("next", "end-of-life"),
)


def to_uint8(batch):
    """Transitions of a collected batch with their frames as uint8 (what the buffer keeps)."""
    out = batch.reshape(-1).select(*TRANSITION_KEYS, strict=False)
    for key in ("observation", ("next", "observation")):
        out[key] = (out[key] * 255).round_().to(torch.uint8)
    return out


def to_float(sample):
    """A sampled batch with its frames back in [0, 1]."""
    for key in ("observation", ("next", "observation")):
        sample[key] = sample[key].float().div_(255)
    return sample


def main(cfg: Config) -> dict:
    device = resolve_device(cfg.device)  # a device this machine lacks stops the run here
    seed_everything(cfg.seed)
    torch.set_num_threads(cfg.threads)
    env = make_game(cfg)
    env.set_seed(cfg.seed)
    qnet = make_qnet(cfg, env)
    egreedy = make_egreedy(
        env, cfg.start_e, cfg.end_e, cfg.exploration_fraction * cfg.total_frames, cfg.device
    )
    collector = Collector(
        env,
        compile_policy(
            TensorDictSequential(qnet, egreedy), compile=cfg.compile, cudagraphs=cfg.cudagraphs
        ),
        frames_per_batch=cfg.train_frequency,
        total_frames=cfg.total_frames,
        init_random_frames=cfg.learning_starts,
        **collector_devices(device),
    )
    buffer = make_replay_buffer(cfg.buffer_size, cfg.batch_size, device=device)
    loss_module, optimizer, update = make_learner(cfg, env, qnet)
    exp_name = cfg.exp_name or generate_exp_name("dqn_atari", f"{cfg.env_id}-s{cfg.seed}")
    exp_name = exp_name.replace("/", "_")
    logger = get_logger(cfg.logger, logger_name=cfg.log_dir, experiment_name=exp_name)
    logger.log_hparams(dataclasses.asdict(cfg))

    progress = ProgressBar(cfg.progress, total=cfg.total_frames)
    scores: collections.deque[float] = collections.deque(maxlen=20)
    frames, updates, start = 0, 0, time.perf_counter()
    try:
        for batch in collector:
            frames += batch.numel()
            buffer.extend(to_uint8(batch))
            egreedy.step(batch.numel())
            # the score of each game that ended (not of each life)
            ended = batch["next", "done"].squeeze(-1)
            scores.extend(batch["next", "episode_reward"][ended].squeeze(-1).tolist())
            if frames >= cfg.learning_starts:
                if cfg.anneal_lr:
                    set_lr(optimizer, cfg.lr * (1.0 - frames / cfg.total_frames))
                loss = update(to_float(buffer.sample()))
                updates += 1
                if updates % 100 == 0:
                    logger.log_scalar("train/loss", loss.item(), frames)
                    logger.log_scalar("train/epsilon", egreedy.eps.item(), frames)
                    progress.values["loss"] = loss.item()
            if scores and ended.any():
                mean_score = sum(scores) / len(scores)
                logger.log_scalar("train/episode_return", mean_score, frames)
                progress.values["score"] = mean_score
            progress.update(batch.numel())
        seconds = time.perf_counter() - start
    finally:
        collector.shutdown()
        progress.close()

    # evaluation on the unclipped score, greedy actions
    eval_env = make_game(cfg, clip_rewards=False)
    eval_env.set_seed(cfg.seed + 1000)
    returns = evaluate(eval_env, qnet, cfg.eval_episodes, max_steps=cfg.eval_max_steps)
    summary = finish_run(logger, returns, frames, seconds)
    return {
        **summary,
        "updates": updates,
        "qnet": qnet,
        "loss_module": loss_module,
        "buffer": buffer,
    }


if __name__ == "__main__":
    main(tyro.cli(Config, description=__doc__))
