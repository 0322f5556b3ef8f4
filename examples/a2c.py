"""A2C (synchronous advantage actor-critic) on CartPole-v1, built from rl's pieces.

Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement Learning",
https://arxiv.org/abs/1602.01783 (the synchronous variant, as in Stable-Baselines3): one
gradient step per batch of ``num_envs x num_steps`` transitions, advantages by GAE, RMSprop.
The actor, critic and environment are ``ppo.py``'s.

    uv run examples/a2c.py
    uv run examples/a2c.py --seed 1 --total-frames 100000
    uv run examples/a2c.py --device cuda --compile --cudagraphs   # on a GPU
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Literal

import torch
import tyro

from rl.collectors import Collector
from rl.core import seed_everything
from rl.core.loggers import generate_exp_name, get_logger
from rl.objectives import A2CLoss
from rl.objectives.value import GAE

sys.path.insert(0, str(Path(__file__).parent))
from _common import (  # noqa: E402
    EpisodeReturns,
    ProgressBar,
    UpdateStep,
    collector_devices,
    compile_advantage,
    compile_policy,
    evaluate,
    finish_run,
    resolve_device,
    set_lr,
    whole_batches,
)
from ppo import make_agent, make_env  # noqa: E402


@dataclasses.dataclass
class Config:
    """A2C hyperparameters: RL-Zoo's tuned CartPole-v1 values (Stable-Baselines3's names)."""

    env_id: str = "CartPole-v1"
    """Gymnasium environment id (or a probe env name, see examples/_common.py)."""
    total_frames: int = 500_000
    """Environment steps to train for."""
    num_envs: int = 8
    """Environments stepped together (a gymnasium vector env)."""
    num_steps: int = 5
    """Steps per environment between two updates."""
    lr: float = 7e-4
    """RMSprop learning rate."""
    anneal_lr: bool = False
    """Decay the learning rate linearly to 0 over training (steadies the final policy)."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 1.0
    """GAE lambda (1.0: n-step returns, as SB3's A2C)."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Gradient clipping norm."""
    hidden: int = 64
    """Width of the two hidden layers of actor and critic."""
    normalize_obs: bool = False
    """Kept for _onpolicy.make_env (A2C on CartPole needs no normalisation)."""
    eval_episodes: int = 10
    """Deterministic evaluation episodes at the end."""
    seed: int = 0
    """Seed of torch, numpy, python and the environments."""
    logger: Literal["csv", "tensorboard", "wandb", "mlflow"] = "csv"
    """Where the scalars go (CSV needs no extra package)."""
    log_dir: str = "runs"
    """Folder of the run's logs and curve."""
    exp_name: str | None = None
    """Name of the run (default: generated from the algorithm, env and seed)."""
    progress: bool = True
    """Show a progress bar (only when attached to a terminal)."""
    compile: bool = False
    """torch.compile the collector's policy and the whole update step (the advantage, loss,
    backward, gradient clipping, optimizer step; the advantage on its own with
    ``cudagraphs``), once."""
    cudagraphs: bool = False
    """Capture the update step and the policy in CUDA graphs (needs ``--device cuda``)."""
    device: str = "cpu"
    """Where the networks, the advantage and the update step live: ``cpu``, ``cuda``,
    ``cuda:N``, or ``auto`` (CUDA where visible). The environments stay on the CPU: the
    collector moves what they return; evaluations run a CPU copy of the policy."""


def make_learner(cfg: Config, actor, critic):
    """A2C's loss, its RMSprop optimizer, the advantage (GAE over the critic) and the
    update. Returns ``(loss_module, optimizer, advantage, update)``: ``update(batch)`` runs
    the advantage and one clipped gradient step (backward, RMSprop), one graph with
    ``cfg.compile``; with ``cfg.cudagraphs`` the advantage runs on its own before the
    captured step (``advantage(batch)``; else ``advantage`` is None). The loss's own
    tensors, the estimator's and the optimizer's live on ``cfg.device``, with the networks."""
    with torch.device(resolve_device(cfg.device)):
        gae = GAE(gamma=cfg.gamma, lmbda=cfg.gae_lambda, value_network=critic)
        # the advantage is part of the update step, but with --cudagraphs: there it runs
        # before the captured step, as ppo's does (the estimator reads its inputs on the
        # host and moves its constants to their device, which a capture refuses)
        advantage = compile_advantage(gae, compile=cfg.compile) if cfg.cudagraphs else None
        loss_module = A2CLoss(
            actor,
            critic,
            entropy_coeff=cfg.ent_coef,
            critic_coeff=cfg.vf_coef,
            loss_critic_type="l2",
        )
        lr = torch.tensor(cfg.lr) if cfg.compile else cfg.lr  # a tensor: annealed in place
        optimizer = torch.optim.RMSprop(loss_module.parameters(), lr=lr, alpha=0.99, eps=1e-5)

        def a2c_loss(batch):
            # the advantage of the batch with the critic as it is before the step (unless
            # it was computed before the step), then the batch flattened: compiled, inside
            # the update's graph (one call a batch, no TensorDict work at each step; with
            # cudagraphs, each replay copies the whole batch into its inputs)
            batch = batch.exclude("collector")
            if advantage is None:
                with torch.no_grad():
                    batch = gae(batch)
            losses = loss_module(batch.reshape(-1))
            loss = losses["loss_objective"] + losses["loss_critic"]
            if "loss_entropy" in losses.keys():
                loss = loss + losses["loss_entropy"]
            return loss, loss

        update = UpdateStep(
            a2c_loss,
            optimizer,
            max_grad_norm=cfg.max_grad_norm,
            compile=cfg.compile,
            cudagraphs=cfg.cudagraphs,
        )
    return loss_module, optimizer, advantage, update


def main(cfg: Config) -> dict:
    device = resolve_device(cfg.device)  # a device this machine lacks stops the run here
    seed_everything(cfg.seed)
    torch.set_num_threads(1)
    env = make_env(cfg, cfg.num_envs)
    env.set_seed(cfg.seed)
    actor, critic = make_agent(cfg, env)

    frames_per_batch = cfg.num_envs * cfg.num_steps
    total_frames = whole_batches(cfg.total_frames, frames_per_batch)
    collector = Collector(
        env,
        compile_policy(actor, compile=cfg.compile, cudagraphs=cfg.cudagraphs),
        frames_per_batch=frames_per_batch,
        total_frames=total_frames,
        **collector_devices(device),
    )
    loss_module, optimizer, advantage, update = make_learner(cfg, actor, critic)
    exp_name = cfg.exp_name or generate_exp_name("a2c", f"{cfg.env_id}-s{cfg.seed}")
    logger = get_logger(cfg.logger, logger_name=cfg.log_dir, experiment_name=exp_name)
    logger.log_hparams(dataclasses.asdict(cfg))

    progress = ProgressBar(cfg.progress, total=cfg.total_frames)
    returns = EpisodeReturns(window=20)
    frames, start = 0, time.perf_counter()
    num_updates = total_frames // frames_per_batch
    for iteration, batch in enumerate(collector):
        frames += batch.numel()
        if cfg.anneal_lr:
            set_lr(optimizer, cfg.lr * (1.0 - iteration / num_updates))
        if advantage is not None:
            advantage(batch)
        loss = update(batch)

        returns.update(batch)
        if returns.mean is not None:
            logger.log_scalar("train/episode_return", returns.mean, frames)
        logger.log_scalar("train/loss", loss.item(), frames)
        progress.observe(batch)
        progress.values["loss"] = loss.item()
        progress.update(batch.numel())
    seconds = time.perf_counter() - start
    collector.shutdown()
    progress.close()

    eval_env = make_env(cfg, 1)
    eval_env.set_seed(cfg.seed + 1000)
    summary = finish_run(logger, evaluate(eval_env, actor, cfg.eval_episodes), frames, seconds)
    return {**summary, "actor": actor, "critic": critic}


if __name__ == "__main__":
    main(tyro.cli(Config, description=__doc__))
