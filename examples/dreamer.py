"""Dreamer on Pendulum-v1: a world model learned from replay, a policy learned in imagination.

DreamerV3 by default (Hafner et al. 2023, "Mastering Diverse Domains through World
Models", https://arxiv.org/abs/2301.04104): categorical latents with a block-GRU RSSM,
symlog reconstruction, two-hot reward and value heads, a balanced KL with free bits, and
an actor trained on percentile-normalised lambda returns. ``--version 1`` is Dreamer v1
(Hafner et al. 2020, https://arxiv.org/abs/1912.01603): Gaussian latents, MSE heads.

Each update: a batch of replayed sequences is filtered through the RSSM (world-model
loss); from every posterior latent the actor imagines ``imagination-horizon`` steps in
the model (``rl.envs.DreamerEnv``) and climbs the lambda return the critic bootstraps.
The agent acts by filtering its observations through the same RSSM (its networks, world
model, imagination env, losses and acting step: ``_dreamer_agent.py``). The defaults are a
CPU-sized model (DreamerV3's smallest, "XS", has 12M parameters; this one 0.14M: width
64, belief 64, 8x8 categoricals) with one update of 16 x 16 replayed steps every 10
agent steps, imagining 15 steps from 128 of the batch's latents; the critic is also
regressed on its slow (EMA) copy, as in DreamerV3.

    uv run examples/dreamer.py                         # DreamerV3, state observations
    uv run examples/dreamer.py --version 1             # Dreamer v1
    uv run examples/dreamer.py --from-pixels --total-frames 2000   # 64x64 pixels

With ``--compile``, each update is ONE compiled graph (``_common.UpdateStep``): the
world model filtered over the replayed sequences, the imagination rollout in the model
env inside the actor loss, the critic's loss, the gradients, each optimiser's clipping
and Adam step and the slow critic's moving average; the acting step (the RSSM filter and
the actor) is compiled too, once for exploration and once for evaluation.
``--cudagraphs`` (with ``--device cuda``) captures the update, compiled or eager, in a
CUDA graph (the imagination env declares that it is never done: its rollout reads no
done flag on the host).
``--device cuda`` puts the networks, the losses, the update step and the replay buffer on
the GPU; the gymnasium environments stay on the CPU, a ``DeviceCastTransform`` moving
what they return to the GPU and the actions back, so the agent acts there too.

    uv run examples/dreamer.py --device cuda --compile --cudagraphs   # on a GPU

Writes CSV logs (or another logger) and a learning-curve PNG under ``runs/<exp_name>/``.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Literal

import torch
import tyro
from tensordict import TensorDict

from rl.core import ExplorationType, seed_everything, set_exploration_type
from rl.core.loggers import generate_exp_name, get_logger
from rl.data import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer
from rl.envs import (
    ActionScaling,
    DeviceCastTransform,
    GymEnv,
    Resize,
    ToTensorImage,
    TransformedEnv,
)

sys.path.insert(0, str(Path(__file__).parent))
from _common import (  # noqa: E402
    ProgressBar,
    UpdateStep,
    check_cudagraphs,
    finish_run,
    resolve_device,
)
from _dreamer_agent import make_act, make_agent  # noqa: E402


@dataclasses.dataclass
class Config:
    """Dreamer's hyperparameters (DreamerV3's names in parentheses where they differ)."""

    version: Literal[1, 3] = 3
    """DreamerV3 or Dreamer v1."""
    env_id: str = "Pendulum-v1"
    """The gymnasium task (continuous actions)."""
    from_pixels: bool = False
    """Learn from 64x64 RGB renderings instead of the state observation."""
    image_size: int = 64
    """Side of the square pixel observation."""
    action_repeat: int = 2
    """Environment frames per agent step (frames count environment frames)."""
    total_frames: int = 50_000
    """Environment frames of the run."""
    init_random_frames: int = 2_000
    """Frames of uniformly random actions before the agent acts (prefill)."""
    train_every: int = 10
    """Agent steps between two updates (train_ratio = batch_size * batch_length /
    train_every replayed steps per agent step)."""
    batch_size: int = 16
    """Sequences per update."""
    batch_length: int = 16
    """Steps per replayed sequence (DreamerV3: 64; Pendulum's state is Markov, and every
    step of a sequence costs a sequential RSSM step)."""
    buffer_size: int = 100_000
    """Replay capacity in agent steps."""
    imagination_horizon: int = 15
    """Imagined steps per start latent (imag_horizon)."""
    imagination_starts: int = 128
    """Posterior latents of the batch the imagination starts from, drawn at random (all
    ``batch_size * batch_length`` of them in DreamerV3; fewer cost less on a CPU)."""
    gamma: float = 0.99
    """Discount of the imagined returns (horizon ~100 agent steps)."""
    lmbda: float = 0.95
    """Lambda of the imagined returns (return_lambda)."""
    hidden: int = 64
    """Width of every MLP and of the RSSM projections (units)."""
    rnn_hidden: int = 64
    """Size of the deterministic belief (deter)."""
    num_categoricals: int = 8
    """DreamerV3: categoricals of the stochastic latent (stoch)."""
    num_classes: int = 8
    """DreamerV3: classes per categorical (classes)."""
    state_dim: int = 30
    """Dreamer v1: size of the Gaussian stochastic latent."""
    depth: int = 16
    """Base channels of the image encoder / decoder (pixels)."""
    model_lr: float = 1e-3
    """Adam learning rate of the world model."""
    actor_lr: float = 3e-4
    """Adam learning rate of the actor."""
    value_lr: float = 3e-4
    """Adam learning rate of the critic."""
    grad_clip: float = 100.0
    """Gradient-norm clip of each of the three optimisers."""
    slow_critic_regularization: float = 1.0
    """DreamerV3: weight of the critic's regression on its slow (EMA) copy (slowreg);
    0 keeps no slow copy."""
    slow_critic_tau: float = 0.02
    """DreamerV3: rate of the slow critic's exponential moving average (slow_critic_fraction)."""
    free_bits: float = 1.0
    """KL floor in nats (v1 uses 3)."""
    kl_dynamic: float = 0.5
    """DreamerV3: weight of the dynamics KL (the prior's; dyn)."""
    kl_representation: float = 0.1
    """DreamerV3: weight of the representation KL (the posterior's; rep)."""
    unimix: float = 0.01
    """DreamerV3: uniform fraction mixed into the latent categoricals."""
    entropy_bonus: float = 3e-4
    """DreamerV3: weight of the actor's entropy (actent)."""
    eval_every: int = 5_000
    """Frames between evaluations (their returns are the curve's eval points)."""
    eval_episodes: int = 5
    """Deterministic evaluation episodes, during training and at the end."""
    stop_at_return: float | None = None
    """Stop once an evaluation's mean return reaches this (the task is solved); ``None``
    trains the whole budget."""
    seed: int = 0
    """Seed of torch, numpy and python random."""
    threads: int = 1
    """torch intra-op threads."""
    logger: Literal["csv", "tensorboard", "wandb", "mlflow"] = "csv"
    """Logging back-end (CSV needs nothing extra)."""
    log_dir: str = "runs"
    """Where the logs go."""
    exp_name: str | None = None
    """Run name (default: generated from the version, the env and the seed)."""
    progress: bool = True
    """Show a progress bar (only when attached to a terminal)."""
    compile: bool = False
    """torch.compile the whole update (world model, imagination, actor and critic
    losses, gradients, clipping, Adam, slow critic) as one graph, and the acting step."""
    cudagraphs: bool = False
    """Capture the update, compiled or eager, in a CUDA graph (needs ``--device cuda``)."""
    device: str = "cpu"
    """Where the networks, the losses, the update step and the replay buffer live:
    ``cpu``, ``cuda``, ``cuda:N``, or ``auto`` (CUDA where visible). The environments
    stay on the CPU: a ``DeviceCastTransform`` moves what they return to the device and
    the actions back; the agent acts (and is evaluated) there."""


def make_env(cfg: Config):
    """The task with actions in ``[-1, 1]``; ``pixels`` as ``uint8 [3, size, size]``; on
    another device than the CPU, what it returns is moved to ``cfg.device`` (the actions
    back to the CPU), where the agent acts."""
    env = GymEnv(
        cfg.env_id, from_pixels=cfg.from_pixels, pixels_only=False, frame_skip=cfg.action_repeat
    )
    env = TransformedEnv(env, ActionScaling())
    if cfg.from_pixels:
        env.append_transform(ToTensorImage())
        env.append_transform(Resize(cfg.image_size, cfg.image_size))
    device = resolve_device(cfg.device)
    if device.type != "cpu":
        env.append_transform(DeviceCastTransform(device))
    return env


@torch.no_grad()
def play(env, agent: dict, mode: Literal["random", "explore", "eval"]):
    """One episode; the agent filters each observation through the RSSM (belief from the
    previous latent and action, then the posterior of the new observation) and acts on
    the latent (``agent["act"][mode]``), on the agent's device (where :func:`make_env`
    moves the observations). Returns the episode ``[T]`` as the replay stores it."""
    obs_key, prior, device = agent["obs_key"], agent["prior"], agent["device"]
    td = env.reset()
    state = torch.zeros(agent["stoch"], device=device)
    belief = torch.zeros(prior.rnn_hidden_dim, device=device)
    action = torch.zeros(env.action_spec.shape, device=device)
    steps, first = [], True
    exploration = ExplorationType.DETERMINISTIC if mode == "eval" else ExplorationType.RANDOM
    act = agent.get("act") or make_act(agent, compile=False)
    while True:
        obs = td[obs_key]
        if mode == "random":
            action = env.action_spec.rand()
        else:
            with set_exploration_type(exploration):
                state, belief, action = act[mode](state, belief, action, obs)
        td["action"] = action
        td = env.step(td)
        steps.append(
            TensorDict(
                action=action,
                is_init=torch.tensor([first], device=device),
                next=td["next"].select(obs_key, "reward", "done"),
            )
        )
        first = False
        if td["next", "done"].item():
            return torch.stack(steps)
        td = td["next"]


def make_update(agent: dict, optimizers: dict, cfg: Config) -> UpdateStep:
    """One world-model, actor and critic step on a batch of sequences ``[B, T]``: the
    three losses summed (each only reaches its own networks: the others are held out or
    detached), each optimiser's gradients clipped on their own, its Adam step, and the
    slow critic's moving average; one graph with ``cfg.compile``. The batch, the initial
    latents and the imagination's random starts are on the agent's device."""
    model_loss, actor_loss = agent["model_loss"], agent["actor_loss"]
    value_loss = agent["value_loss"]
    stoch, rnn_hidden = agent["stoch"], agent["prior"].rnn_hidden_dim
    device = agent["device"]

    def dreamer_loss(batch):
        batch = batch.reshape(cfg.batch_size, cfg.batch_length)
        batch["state"] = torch.zeros(*batch.shape, stoch, device=device)
        batch["belief"] = torch.zeros(*batch.shape, rnn_hidden, device=device)
        model_losses, world = model_loss(batch)
        latents = world.get("next").select("state", "belief").reshape(-1)
        starts = torch.randperm(latents.numel(), device=device)[: cfg.imagination_starts]
        actor_losses, imagined = actor_loss(latents[starts])
        value_losses, _ = value_loss(imagined.detach())
        totals = {
            "loss_model": sum(v for k, v in model_losses.items() if k.startswith("loss")).sum(),
            "loss_actor": actor_losses["loss_actor"].sum(),
            "loss_value": value_losses["loss_value"].sum(),
        }
        logs = {**totals, **{k: v.mean() for k, v in model_losses.items()}}
        return sum(totals.values()), logs

    with torch.device(device):
        return UpdateStep(
            dreamer_loss,
            list(optimizers.values()),
            max_grad_norm=cfg.grad_clip,
            clip_each_group=True,  # each optimiser's one group
            target_update=agent["slow_critic"],
            compile=cfg.compile,
            cudagraphs=cfg.cudagraphs,
        )


def make_optimizers(cfg: Config, agent: dict) -> dict:
    """The Adam optimisers of the world model, the actor and the critic, on the agent's
    device (their states live with the parameters)."""
    with torch.device(agent["device"]):
        return {
            "model": torch.optim.Adam(agent["world_model"].parameters(), lr=cfg.model_lr, eps=1e-8),
            "actor": torch.optim.Adam(agent["actor"].parameters(), lr=cfg.actor_lr, eps=1e-5),
            "value": torch.optim.Adam(agent["value"].parameters(), lr=cfg.value_lr, eps=1e-5),
        }


def update(agent: dict, optimizers: dict, batch, cfg: Config) -> dict:
    """One world-model, actor and critic step on a batch of sequences ``[B, T]`` (the
    update step is built at the first call with these optimisers); the logged values."""
    step = agent.get("update")
    if step is None:
        step = agent["update"] = make_update(agent, optimizers, cfg)
    return {k: v.item() for k, v in step(batch).items()}


def main(cfg: Config) -> dict:
    device = resolve_device(cfg.device)  # a device this machine lacks stops the run here
    seed_everything(cfg.seed)
    torch.set_num_threads(cfg.threads)
    exp_name = cfg.exp_name or generate_exp_name(
        f"dreamer-v{cfg.version}{'-pixels' if cfg.from_pixels else ''}", f"{cfg.env_id}-s{cfg.seed}"
    )
    logger = get_logger(cfg.logger, logger_name=cfg.log_dir, experiment_name=exp_name)
    logger.log_hparams(dataclasses.asdict(cfg))
    env, eval_env = make_env(cfg), make_env(cfg)
    env.set_seed(cfg.seed)
    eval_env.set_seed(cfg.seed + 1000)

    check_cudagraphs(cfg.cudagraphs)
    agent = make_agent(cfg, env)
    agent["act"] = make_act(agent, cfg.compile)
    optimizers = make_optimizers(cfg, agent)
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(cfg.buffer_size, device=device),
        sampler=SliceSampler(slice_len=cfg.batch_length, end_key=("next", "done")),
        batch_size=cfg.batch_size * cfg.batch_length,
    )

    start = time.perf_counter()
    frames = steps = updates = 0
    next_eval = cfg.eval_every
    history: list[dict] = []
    progress = ProgressBar(cfg.progress, total=cfg.total_frames)
    while frames < cfg.total_frames:
        mode = "random" if frames < cfg.init_random_frames else "explore"
        episode = play(env, agent, mode)
        buffer.extend(episode)
        ep_return = episode["next", "reward"].sum().item()
        frames += len(episode) * cfg.action_repeat
        steps += len(episode)
        logger.log_scalar("train/episode_return", ep_return, frames)
        # catch up on the updates the episode's steps owe (train_every steps each)
        if frames >= cfg.init_random_frames:
            owed = steps // cfg.train_every - updates
            for _ in range(owed):
                metrics = update(agent, optimizers, buffer.sample(), cfg)
                updates += 1
            history.append(metrics)
            for key, val in metrics.items():
                logger.log_scalar(f"train/{key}", val, frames)
            progress.values.update(model=metrics["loss_model"], episode_return=ep_return)
        progress.update(len(episode) * cfg.action_repeat)
        if frames >= next_eval or frames >= cfg.total_frames:
            next_eval += cfg.eval_every
            returns = [
                play(eval_env, agent, "eval")["next", "reward"].sum().item()
                for _ in range(cfg.eval_episodes)
            ]
            mean = sum(returns) / len(returns)
            logger.log_scalar("eval/episode_return", mean, frames)
            logger.log_scalar("eval/updates", updates, frames)
            logger.log_scalar("eval/wall_seconds", time.perf_counter() - start, frames)
            if cfg.stop_at_return is not None and mean >= cfg.stop_at_return:
                break
    progress.close()
    seconds = time.perf_counter() - start
    logger.log_scalar("train/updates_per_second", updates / seconds, frames)
    summary = finish_run(logger, returns, frames, seconds)
    summary.update(updates=updates, history=history, agent=agent)
    return summary


if __name__ == "__main__":
    main(tyro.cli(Config, description=__doc__))
