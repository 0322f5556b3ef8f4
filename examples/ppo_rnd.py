"""PPO with random network distillation (RND) on MountainCar-v0, built from rl's pieces.

Burda et al. 2018, "Exploration by Random Network Distillation",
https://arxiv.org/abs/1810.12894. MountainCar's reward is -1 per step until the car reaches
the flag, which uniformly random actions never do in the 200 steps of an episode: every
episode scores -200 and PPO has nothing to learn from until its policy happens onto the
flag. RND adds a novelty bonus that leads it there (about 3 times sooner here, see
examples/README.md):
an ``RNDTransform`` in the env writes, at every step, the error of a trained *predictor*
network at reproducing a fixed random *target* network's embedding of the next
observation (``("next", "intrinsic_reward")``); ``RNDLoss`` trains the predictor on the
observations collected, so the bonus fades where the car has been and stays high where it
has not. As in the paper, the bonus gets its own value head and a non-episodic return
(an episode's end does not stop it), and the policy follows
``ext_coef * A_ext + int_coef * A_int``. The extrinsic reward enters the update scaled by
``reward_scale`` (0.01), so that its value head fits MountainCar's returns of about -100
within a few updates instead of feeding the advantages errors that drown the bonus; the
logs show it unscaled.

    uv run examples/ppo_rnd.py                   # PPO + RND, 2-3 minutes on 2 cores
    uv run examples/ppo_rnd.py --no-rnd          # plain PPO, for comparison
    uv run examples/ppo_rnd.py --seed 1 --logger tensorboard
    uv run examples/ppo_rnd.py --device cuda --compile --cudagraphs   # on a GPU

Writes CSV logs (or another logger), a learning-curve PNG and, with ``--video``, an
evaluation video under ``runs/<exp_name>/``.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
import tyro
from torch import nn

from rl.collectors import Collector
from rl.core import seed_everything
from rl.core.loggers import generate_exp_name, get_logger
from rl.envs import Compose, DeviceCastTransform, TransformedEnv
from rl.envs.transforms import RNDTransform
from rl.modules import MLP, ValueOperator
from rl.objectives import RNDLoss, group_optimizers
from rl.objectives.value.functional import generalized_advantage_estimate

sys.path.insert(0, str(Path(__file__).parent))
from _common import (  # noqa: E402
    EpisodeReturns,
    ProgressBar,
    UpdateStep,
    collector_devices,
    compile_advantage,
    compile_policy,
    resolve_device,
    set_lr,
    whole_batches,
)
from _onpolicy import evaluate_and_finish, make_env, observation_scaling, orthogonal_init  # noqa: E402
from ppo import make_advantage, make_agent, make_loss  # noqa: E402


@dataclasses.dataclass
class Config:
    """PPO + RND hyperparameters (CleanRL's names; RND's from the paper where they fit)."""

    env_id: str = "MountainCar-v0"
    """Gymnasium environment id (discrete actions), or a probe env name."""
    rnd: bool = True
    """Add the RND bonus (``--no-rnd``: plain PPO with the same settings)."""
    total_frames: int = 500_000
    """Environment steps to train for."""
    num_envs: int = 16
    """Environments stepped together (a gymnasium vector env)."""
    num_steps: int = 128
    """Steps per environment in each rollout (batch = num_envs * num_steps)."""
    update_epochs: int = 4
    """Passes over each batch."""
    num_minibatches: int = 4
    """Minibatches per pass."""
    lr: float = 1e-3
    """Adam learning rate of the policy and both value heads."""
    anneal_lr: bool = True
    """Anneal the learning rates linearly to 0."""
    gamma: float = 0.99
    """Discount of the extrinsic (episodic) return."""
    gamma_int: float = 0.99
    """Discount of the intrinsic (non-episodic) return."""
    gae_lambda: float = 0.95
    """GAE lambda of both returns."""
    reward_scale: float = 0.01
    """Factor of the extrinsic reward in the update (the logs show it unscaled): -1 per
    step sums to about -1 over MountainCar's discounted horizon, a scale the value head
    learns in a few updates (at -100 its errors would drown the bonus)."""
    ext_coef: float = 2.0
    """Weight of the extrinsic advantage (the paper's 2)."""
    int_coef: float = 1.0
    """Weight of the intrinsic advantage (the paper's 1)."""
    clip_coef: float = 0.2
    """Clipping of the probability ratio (and of the extrinsic value, with clip_vloss)."""
    clip_vloss: bool = True
    """Clip the extrinsic value loss around the old value, as CleanRL."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient (both heads)."""
    max_grad_norm: float = 0.5
    """Gradient clipping norm."""
    hidden: int = 64
    """Width of the two hidden layers of the actor and the value heads."""
    rnd_hidden: int = 64
    """Width of the two hidden layers of the RND target and predictor."""
    rnd_embed: int = 32
    """Size of the embedding the predictor learns to reproduce."""
    rnd_lr: float = 1e-3
    """Adam learning rate of the predictor."""
    rnd_update_fraction: float = 0.25
    """Fraction of each minibatch the predictor is trained on (the paper's 0.25)."""
    rnd_warmup_steps: int = 50
    """Random-action steps per env that initialise the observation statistics of RND."""
    eval_episodes: int = 10
    """Deterministic evaluation episodes at the end (extrinsic reward only)."""
    seed: int = 0
    """Seed of torch, numpy, python and the environments."""
    logger: Literal["csv", "tensorboard", "wandb", "mlflow"] = "csv"
    """Where the scalars go (CSV needs no extra package)."""
    log_dir: str = "runs"
    """Folder of the run's logs, curve and video."""
    exp_name: str | None = None
    """Name of the run (default: generated from the algorithm, env and seed)."""
    video: bool = False
    """Record an evaluation episode as an mp4."""
    progress: bool = True
    """Show a progress bar (only when attached to a terminal)."""
    normalize_obs: bool = True
    """Scale the observations to [-1, 1] by the observation space's bounds."""
    compile: bool = False
    """torch.compile the collector's policy, both advantages and the two whole update
    steps (PPO's and the predictor's: loss, backward, clipping, optimizer step), once."""
    cudagraphs: bool = False
    """Capture the update steps and the policy in CUDA graphs (needs ``--device cuda``)."""
    device: str = "cpu"
    """Where the networks (the RND pair too), the advantages and the update steps live:
    ``cpu``, ``cuda``, ``cuda:N``, or ``auto`` (CUDA where visible). The environments
    stay on the CPU, their outputs moved to the device before the RND bonus is computed
    there; evaluations run a CPU copy of the policy."""


def make_rnd(cfg: Config, obs_dim: int) -> tuple[nn.Module, nn.Module]:
    """The fixed random target and the trained predictor (same architecture), initialised
    on the CPU (the same weights on every device), then moved to ``cfg.device``."""

    def net():
        return MLP(
            in_features=obs_dim,
            out_features=cfg.rnd_embed,
            num_cells=[cfg.rnd_hidden] * 2,
            activation_class=nn.ReLU,
        )

    target, predictor = net(), net()
    for module in (target, predictor):
        orthogonal_init(module, last_gain=2**0.5)
    device = resolve_device(cfg.device)
    return target.to(device), predictor.to(device)


def with_bonus(cfg: Config, env, rnd: RNDTransform) -> TransformedEnv:
    """``env`` writing ``rnd``'s bonus at each step, its outputs first moved to
    ``cfg.device`` (a ``DeviceCastTransform``; nothing moves on the CPU), where the
    transform's networks are trained and its observation statistics are read by the
    predictor's loss."""
    return TransformedEnv(env, Compose(DeviceCastTransform(resolve_device(cfg.device)), rnd))


def make_intrinsic_learner(cfg: Config, rnd: RNDTransform, obs_dim: int, optimizer):
    """What RND adds to PPO's learner: the intrinsic value head (initialised on the CPU,
    then moved to ``cfg.device``), the predictor's loss (on ``rnd``'s networks and its
    observation statistics, made at its first step) and Adam, and ``optimizer`` joined by
    the head's Adam, one group per network set (each clipped on its own); the optimizers'
    tensors on ``cfg.device``. Returns ``(critic_int, rnd_loss, rnd_optimizer, optimizer)``."""
    device = resolve_device(cfg.device)
    critic_int = ValueOperator(
        MLP(
            in_features=obs_dim,
            out_features=1,
            num_cells=[cfg.hidden] * 2,
            activation_class=nn.Tanh,
        ),
        in_keys=["observation"],
        out_keys=["state_value_int"],
    )
    orthogonal_init(critic_int, last_gain=1.0)
    critic_int.to(device)
    with torch.device(device):
        predictor = rnd.predictor_network
        rnd_loss = RNDLoss(
            predictor,
            rnd.target_network,
            obs_rms=rnd.obs_rms,
            update_fraction=cfg.rnd_update_fraction,
        )
        rnd_optimizer = torch.optim.Adam(predictor.parameters(), lr=cfg.rnd_lr, eps=1e-5)
        optimizer = group_optimizers(
            optimizer, torch.optim.Adam(critic_int.parameters(), lr=cfg.lr, eps=1e-5)
        )
    return critic_int, rnd_loss, rnd_optimizer, optimizer


def intrinsic_advantage(cfg: Config, critic_int, batch):
    """GAE of the bonus with its own value head, never cut by an episode's end; writes
    ``"advantage_int"`` and ``"value_target_int"`` into ``batch`` ``[num_envs, T]`` and
    returns it."""
    with torch.no_grad():
        value = critic_int(batch.select(*critic_int.in_keys))["state_value_int"]
        next_value = critic_int(batch["next"].select(*critic_int.in_keys))["state_value_int"]
    reward = batch["next", "intrinsic_reward"]
    never = torch.zeros_like(reward, dtype=torch.bool)
    adv, target = generalized_advantage_estimate(
        cfg.gamma_int, cfg.gae_lambda, value, next_value, reward, never, never
    )
    batch["advantage_int"], batch["value_target_int"] = adv, target
    return batch


def make_update_steps(cfg, loss_module, critic_int, rnd_loss, optimizer, rnd_optimizer):
    """The clipped PPO step (policy, extrinsic and intrinsic value heads; each parameter
    group clipped on its own) and the predictor's step (``None`` without RND); one
    compiled graph each with ``cfg.compile``, built on ``cfg.device``."""

    def ppo_loss(mb):
        losses = loss_module(mb)
        loss = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
        if rnd_loss is not None:
            value_int = critic_int(mb.select(*critic_int.in_keys))["state_value_int"]
            loss = loss + cfg.vf_coef * F.mse_loss(value_int, mb["value_target_int"])
        return loss, loss

    def predictor_loss(mb):
        loss = rnd_loss(mb)["loss_predictor"]
        return loss, loss

    flags = {"compile": cfg.compile, "cudagraphs": cfg.cudagraphs}
    with torch.device(resolve_device(cfg.device)):
        ppo_step = UpdateStep(
            ppo_loss, optimizer, max_grad_norm=cfg.max_grad_norm, clip_each_group=True, **flags
        )
        rnd_step = None
        if rnd_loss is not None:
            rnd_step = UpdateStep(predictor_loss, rnd_optimizer, **flags)
    return ppo_step, rnd_step


def update(cfg, ppo_step, rnd_step, batch, minibatch) -> dict:
    """``cfg.update_epochs`` passes of shuffled minibatches: one PPO step and one
    predictor step each; returns the last minibatch's losses (``"loss"``: the sum the PPO
    step minimised). The minibatch indices are drawn on the batch's device."""
    flat = batch.exclude("collector").reshape(-1)
    for _ in range(cfg.update_epochs):
        for idx in torch.randperm(flat.numel(), device=flat.device).split(minibatch):
            mb = flat[idx]
            losses = {"loss": ppo_step(mb)}
            if rnd_step is not None:
                losses["loss_predictor"] = rnd_step(mb)
    return losses


def main(cfg: Config) -> dict:
    device = resolve_device(cfg.device)  # a device this machine lacks stops the run here
    seed_everything(cfg.seed)
    torch.set_num_threads(1)
    obs_stats = observation_scaling(cfg)
    env = make_env(cfg, cfg.num_envs, obs_stats)
    # ppo.py's actor, critic, loss and Adam, on cfg.device
    actor, critic = make_agent(cfg, env)
    loss_module, optimizer = make_loss(cfg, actor, critic)
    rnd = rnd_loss = critic_int = rnd_optimizer = None
    if cfg.rnd:
        obs_dim = env.observation_spec["observation"].shape[-1]
        rnd = RNDTransform(*make_rnd(cfg, obs_dim))
        env = with_bonus(cfg, env, rnd)
        env.set_seed(cfg.seed)
        # the paper's initialisation of the observation statistics: a random-action rollout
        env.rollout(cfg.rnd_warmup_steps, break_when_any_done=False)
        critic_int, rnd_loss, rnd_optimizer, optimizer = make_intrinsic_learner(
            cfg, rnd, obs_dim, optimizer
        )
    env.set_seed(cfg.seed)

    frames_per_batch = cfg.num_envs * cfg.num_steps
    total_frames = whole_batches(cfg.total_frames, frames_per_batch)
    collector = Collector(
        env,
        compile_policy(actor, compile=cfg.compile, cudagraphs=cfg.cudagraphs),
        frames_per_batch=frames_per_batch,
        total_frames=total_frames,
        **collector_devices(device),
    )
    advantage = make_advantage(cfg, critic)  # ppo.py's GAE
    if cfg.rnd:
        advantage_int = compile_advantage(
            functools.partial(intrinsic_advantage, cfg, critic_int), compile=cfg.compile
        )
    ppo_step, rnd_step = make_update_steps(
        cfg, loss_module, critic_int, rnd_loss, optimizer, rnd_optimizer
    )
    algo = "ppo-rnd" if cfg.rnd else "ppo"
    exp_name = cfg.exp_name or generate_exp_name(algo, f"{cfg.env_id}-s{cfg.seed}")
    logger = get_logger(cfg.logger, logger_name=cfg.log_dir, experiment_name=exp_name)
    logger.log_hparams(dataclasses.asdict(cfg))

    num_updates = total_frames // frames_per_batch
    minibatch = frames_per_batch // cfg.num_minibatches
    progress = ProgressBar(cfg.progress, total=cfg.total_frames)
    returns = EpisodeReturns(window=20)
    first_terminated = None  # frames when an episode first ended by termination (the goal)
    frames, start = 0, time.perf_counter()
    for update_index, batch in enumerate(collector):
        frames += batch.numel()
        if cfg.anneal_lr:
            frac = 1.0 - update_index / num_updates
            set_lr(optimizer, cfg.lr * frac)
            if cfg.rnd:
                set_lr(rnd_optimizer, cfg.rnd_lr * frac)
        returns.update(batch)  # the returns the env gives, before the scaling below
        progress.observe(batch)
        batch["next", "reward"] = batch["next", "reward"] * cfg.reward_scale
        batch = advantage(batch)
        if cfg.rnd:
            batch = advantage_int(batch)
            batch["advantage"] = (
                cfg.ext_coef * batch["advantage"] + cfg.int_coef * batch["advantage_int"]
            )
        losses = update(cfg, ppo_step, rnd_step, batch, minibatch)
        terminated = int(batch["next", "terminated"].sum())
        if terminated and first_terminated is None:
            first_terminated = frames
        if returns.mean is not None:
            logger.log_scalar("train/episode_return", returns.mean, frames)
        logger.log_scalar("train/terminated_episodes", terminated, frames)
        logger.log_scalar("train/loss", losses["loss"].item(), frames)
        if cfg.rnd:
            logger.log_scalar(
                "train/intrinsic_reward", batch["next", "intrinsic_reward"].mean().item(), frames
            )
            logger.log_scalar("train/loss_predictor", losses["loss_predictor"].item(), frames)
            progress.values["bonus"] = batch["next", "intrinsic_reward"].mean().item()
        progress.update(batch.numel())
    seconds = time.perf_counter() - start
    collector.shutdown()
    progress.close()

    summary = evaluate_and_finish(cfg, logger, actor, frames, seconds, obs_stats)
    return {
        **summary,
        "first_terminated_frame": first_terminated,
        "actor": actor,
        "critic": critic,
        "critic_int": critic_int,
        "rnd": rnd,
        "rnd_loss": rnd_loss,
    }


if __name__ == "__main__":
    main(tyro.cli(Config, description=__doc__))
