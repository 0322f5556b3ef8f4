"""PPO on Atari (ALE) with the classic preprocessing chain, built from rl's pieces.

Schulman et al. 2017, "Proximal Policy Optimization Algorithms",
https://arxiv.org/abs/1707.06347; the preprocessing of Mnih et al. 2015 (Nature DQN) and
Machado et al. 2018. The defaults are CleanRL's ``ppo_atari.py``: 8 envs x 128 steps, 4
epochs of 4 minibatches, lr 2.5e-4 annealed, clip 0.1, entropy 0.01, the Nature-CNN trunk
shared by the policy and value heads.

Each sub-env is an ALE game (``frameskip=1``, no sticky actions) with rl-envs transforms:
``NoopResetEnv`` (up to 30 random frames after a reset), ``FrameSkipTransform`` (each
action repeated 4 times, rewards summed), ``EndOfLifeTransform`` (a lost life ends the
value bootstrap, the game goes on), ``RewardSum`` (the game score, for the logs),
``RewardClipping`` to [-1, 1], ``ToTensorImage`` (uint8 HWC to float CHW in [0, 1]),
``GrayScale``, ``Resize`` to 84x84 and ``CatFrames`` (the last 4 frames): observations
``[4, 84, 84]``.

    uv run --group atari examples/ppo_atari.py                                   # ALE/Breakout-v5
    uv run --group atari examples/ppo_atari.py --env-id ALE/Pong-v5 --parallel   # one process per env
    uv run --group atari examples/ppo_atari.py --total-frames 2000 --num-envs 2  # a smoke run
    uv run --group atari examples/ppo_atari.py --device cuda --compile --cudagraphs  # on a GPU

``total_frames`` counts agent steps (each is ``frame_skip`` emulator frames), as CleanRL's
``total_timesteps``. Writes CSV logs (or another logger), a learning-curve PNG of the game
score and, with ``--video``, an evaluation video under ``runs/<exp_name>/``.
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
from rl.envs import (
    CatFrames,
    Compose,
    EndOfLifeTransform,
    FrameSkipTransform,
    GrayScale,
    GymEnv,
    NoopResetEnv,
    ParallelEnv,
    Resize,
    RewardClipping,
    RewardSum,
    SerialEnv,
    ToTensorImage,
    TransformedEnv,
    VideoRecorder,
)
from rl.modules import (
    ActorValueOperator,
    ConvNet,
    OneHotCategorical,
    ProbabilisticActor,
    TensorDictModule,
    ValueOperator,
)
from rl.objectives.value import GAE

sys.path.insert(0, str(Path(__file__).parent))
from _common import (  # noqa: E402
    ProgressBar,
    collector_devices,
    compile_advantage,
    compile_policy,
    evaluate,
    finish_run,
    resolve_device,
    set_lr,
    whole_batches,
)
from ppo import make_loss, make_update_step, update_epochs  # noqa: E402


@dataclasses.dataclass
class Config:
    """PPO-Atari hyperparameters (CleanRL's names where they exist)."""

    env_id: str = "ALE/Breakout-v5"
    """ALE game id (ale-py, ``rl-envs[atari]``)."""
    total_frames: int = 10_000_000
    """Agent steps to train for (total_timesteps; each is frame_skip emulator frames)."""
    num_envs: int = 8
    """Games played together."""
    parallel: bool = False
    """One process per game (ParallelEnv) instead of stepping them in turn (SerialEnv)."""
    num_steps: int = 128
    """Steps per game in each rollout (batch = num_envs * num_steps)."""
    update_epochs: int = 4
    """Passes over each batch."""
    num_minibatches: int = 4
    """Minibatches per pass."""
    lr: float = 2.5e-4
    """Adam learning rate."""
    anneal_lr: bool = True
    """Anneal the learning rate linearly to 0."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    clip_coef: float = 0.1
    """Clipping of the probability ratio (and of the value, with clip_vloss)."""
    clip_vloss: bool = True
    """Clip the value loss around the old value, as CleanRL."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
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
    """Seed of torch, numpy, python and the games."""
    threads: int = 1
    """Torch CPU threads."""
    logger: Literal["csv", "tensorboard", "wandb", "mlflow"] = "csv"
    """Where the scalars go (CSV needs no extra package)."""
    log_dir: str = "runs"
    """Folder of the run's logs, curve and video."""
    exp_name: str | None = None
    """Name of the run (default: generated from the algorithm, env and seed)."""
    video: bool = False
    """Record an evaluation game as an mp4."""
    progress: bool = True
    """Show a progress bar (only when attached to a terminal)."""
    compile: bool = False
    """torch.compile the collector's policy, the advantage and the whole update step (loss, backward,
    gradient clipping, optimizer step), once."""
    cudagraphs: bool = False
    """Capture the update step and the policy in CUDA graphs (needs ``--device cuda``)."""
    device: str = "cpu"
    """Where the agent, the advantage and the update step live: ``cpu``, ``cuda``,
    ``cuda:N``, or ``auto`` (CUDA where visible). The games stay on the CPU: the collector
    moves what they return; evaluations run a CPU copy of the policy."""


def make_game(cfg: Config, clip_rewards: bool = True, logger=None) -> TransformedEnv:
    """One ALE game with the preprocessing chain; observations ``[frame_stack, 84, 84]``.

    With ``logger``, a ``VideoRecorder`` records the game's RGB frames (after frame skip).
    """
    game = GymEnv(cfg.env_id, frameskip=1, repeat_action_probability=0.0)
    chain = [NoopResetEnv(cfg.noop_max), FrameSkipTransform(cfg.frame_skip)]
    if logger is not None:
        chain.append(VideoRecorder(logger, tag="eval_video", in_keys=["observation"]))
    if cfg.end_of_life:
        chain.append(EndOfLifeTransform())
    chain.append(RewardSum())  # the unclipped game score, "episode_reward"
    if clip_rewards:
        chain.append(RewardClipping(-1.0, 1.0))
    chain += [
        ToTensorImage(in_keys=["observation"]),
        GrayScale(in_keys=["observation"]),
        Resize(cfg.screen_size, cfg.screen_size, in_keys=["observation"]),
        CatFrames(N=cfg.frame_stack, dim=-3, in_keys=["observation"]),
    ]
    return TransformedEnv(game, Compose(*chain))


def make_env(cfg: Config):
    """``num_envs`` games, stepped in turn (or in parallel processes)."""
    batched = ParallelEnv if cfg.parallel else SerialEnv
    return batched(cfg.num_envs, lambda: make_game(cfg))


def make_agent(cfg: Config, env) -> tuple[ActorValueOperator, ProbabilisticActor, ValueOperator]:
    """The Nature-CNN trunk (3 convs, 512 units) shared by a policy and a value head;
    initialised on the CPU (the same weights on every device), then moved to
    ``cfg.device``."""
    n_actions = env.action_spec.shape[-1]
    trunk = nn.Sequential(
        ConvNet(
            in_features=cfg.frame_stack,
            num_cells=[32, 64, 64],
            kernel_sizes=[8, 4, 3],
            strides=[4, 2, 1],
            activation_class=nn.ReLU,
        ),
        nn.LazyLinear(512),
        nn.ReLU(),
    )
    common = TensorDictModule(trunk, in_keys=["observation"], out_keys=["hidden"])
    policy_head = ProbabilisticActor(
        TensorDictModule(nn.Linear(512, n_actions), in_keys=["hidden"], out_keys=["logits"]),
        in_keys=["logits"],
        spec=env.action_spec,
        distribution_class=OneHotCategorical,
        return_log_prob=True,
    )
    value_head = ValueOperator(nn.Linear(512, 1), in_keys=["hidden"])
    agent = ActorValueOperator(common, policy_head, value_head)
    with torch.no_grad():  # materialise the lazy layer
        agent(env.fake_tensordict())
    # CleanRL's initialisation: orthogonal, gain sqrt(2) in the trunk, 0.01 for the policy
    # head and 1 for the value head; zero biases
    for layer, gain in [
        *((m, 2**0.5) for m in trunk.modules() if isinstance(m, nn.Conv2d | nn.Linear)),
        (policy_head.module[0].module, 0.01),
        (value_head.module, 1.0),
    ]:
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
    agent.to(resolve_device(cfg.device))
    return agent, agent.get_policy_operator(), agent.get_value_operator()


def make_advantage(cfg: Config, critic):
    """GAE over ``critic``'s values (its gamma and lambda on ``cfg.device``), the bootstrap
    stopped at a lost life with ``cfg.end_of_life`` (the game does not reset there); run
    without gradients, one graph with the value network with ``cfg.compile``."""
    gae = GAE(
        gamma=cfg.gamma,
        lmbda=cfg.gae_lambda,
        value_network=critic,
        device=resolve_device(cfg.device),
    )
    if cfg.end_of_life:
        EndOfLifeTransform().register_keys(gae)
    return compile_advantage(gae, compile=cfg.compile)


def main(cfg: Config) -> dict:
    device = resolve_device(cfg.device)  # a device this machine lacks stops the run here
    seed_everything(cfg.seed)
    torch.set_num_threads(cfg.threads)
    env = make_env(cfg)
    env.set_seed(cfg.seed)
    agent, actor, critic = make_agent(cfg, env)

    frames_per_batch = cfg.num_envs * cfg.num_steps
    total_frames = whole_batches(cfg.total_frames, frames_per_batch)
    collector = Collector(
        env,
        compile_policy(actor, compile=cfg.compile, cudagraphs=cfg.cudagraphs),
        frames_per_batch=frames_per_batch,
        total_frames=total_frames,
        **collector_devices(device),
    )
    advantage = make_advantage(cfg, critic)
    # CleanRL's PPO loss and Adam (ppo.py's: clipped ratio and value, normalised
    # advantages, on cfg.device); one clipped gradient step is one graph with --compile
    loss_module, optimizer = make_loss(cfg, actor, critic)
    step = make_update_step(cfg, loss_module, optimizer)
    exp_name = cfg.exp_name or generate_exp_name("ppo_atari", f"{cfg.env_id}-s{cfg.seed}")
    exp_name = exp_name.replace("/", "_")
    logger = get_logger(cfg.logger, logger_name=cfg.log_dir, experiment_name=exp_name)
    logger.log_hparams(dataclasses.asdict(cfg))

    num_updates = total_frames // frames_per_batch
    minibatch = frames_per_batch // cfg.num_minibatches
    progress = ProgressBar(cfg.progress, total=cfg.total_frames)
    scores: collections.deque[float] = collections.deque(maxlen=20)
    frames, start = 0, time.perf_counter()
    for update, batch in enumerate(collector):
        frames += batch.numel()
        if cfg.anneal_lr:
            set_lr(optimizer, cfg.lr * (1.0 - update / num_updates))
        batch = advantage(batch)
        loss = update_epochs(cfg, loss_module, optimizer, batch, minibatch, step)
        flat = batch.reshape(-1)
        # the score of each game that ended in the batch (not of each life)
        ended = flat["next", "done"].squeeze(-1)
        scores.extend(flat["next", "episode_reward"][ended].squeeze(-1).tolist())
        if scores:
            mean_score = sum(scores) / len(scores)
            logger.log_scalar("train/episode_return", mean_score, frames)
            progress.values["score"] = mean_score
        logger.log_scalar("train/loss", loss.item(), frames)
        logger.log_scalar("train/lr", float(optimizer.param_groups[0]["lr"]), frames)
        progress.values["loss"] = loss.item()
        progress.update(batch.numel())
    seconds = time.perf_counter() - start
    collector.shutdown()
    progress.close()

    # evaluation on the unclipped score, one game at a time
    eval_env = make_game(cfg, clip_rewards=False)
    eval_env.set_seed(cfg.seed + 1000)
    returns = evaluate(eval_env, actor, cfg.eval_episodes, max_steps=cfg.eval_max_steps)
    summary = finish_run(logger, returns, frames, seconds)
    if cfg.video:
        video_env = make_game(cfg, clip_rewards=False, logger=logger)
        video_env.set_seed(cfg.seed + 2000)
        evaluate(video_env, actor, 1, max_steps=cfg.eval_max_steps)
        recorder = next(t for t in video_env.transform if isinstance(t, VideoRecorder))
        summary["video"] = recorder.dump()
    return {**summary, "agent": agent, "actor": actor, "critic": critic}


if __name__ == "__main__":
    main(tyro.cli(Config, description=__doc__))
