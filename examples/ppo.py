"""PPO (clipped objective, GAE) on CartPole-v1 or Pendulum-v1, built from rl's pieces.

Schulman et al. 2017, "Proximal Policy Optimization Algorithms",
https://arxiv.org/abs/1707.06347. Presets: ``cartpole`` (the default) uses RL-Zoo's tuned
CartPole settings (8 envs x 32 steps, 20 epochs, lr 1e-3 annealed, gamma 0.98, lambda 0.8)
and solves it within 100k frames; ``cleanrl`` is CleanRL's ``ppo.py`` defaults (4 envs x
128 steps, 4 epochs of 4 minibatches, lr 2.5e-4 annealed), slower to solve, the setting of
the speed benchmark; ``pendulum`` is a continuous task (TanhNormal policy, observation
normalisation, RL-Zoo's gamma 0.9 and 1024-step rollouts).

    uv run examples/ppo.py                         # CartPole-v1, about a minute on 2 cores
    uv run examples/ppo.py pendulum                # Pendulum-v1 (continuous, TanhNormal)
    uv run examples/ppo.py cartpole --seed 1 --logger tensorboard
    uv run examples/ppo.py --device cuda --compile --cudagraphs   # on a GPU

Writes CSV logs (or another logger), a learning-curve PNG and, with ``--video``, an
evaluation video under ``runs/<exp_name>/``.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Literal

import torch
from torch import nn

from rl.collectors import Collector
from rl.core import Categorical, seed_everything
from rl.core.loggers import generate_exp_name, get_logger
from rl.modules import (
    MLP,
    NormalParamExtractor,
    OneHotCategorical,
    ProbabilisticActor,
    TanhNormal,
    TensorDictModule,
    ValueOperator,
)
from rl.objectives import ClipPPOLoss
from rl.objectives.value import GAE

sys.path.insert(0, str(Path(__file__).parent))
from _common import (  # noqa: E402
    EpisodeReturns,
    ProgressBar,
    UpdateStep,
    collector_devices,
    compile_advantage,
    compile_policy,
    preset_cli,
    resolve_device,
    set_lr,
    whole_batches,
)
from _onpolicy import (  # noqa: E402
    config_device,
    evaluate_and_finish,
    make_env,
    observation_stats,
    orthogonal_init,
)


@dataclasses.dataclass
class Config:
    """PPO hyperparameters (CleanRL's names); the defaults are the ``cartpole`` preset."""

    env_id: str = "CartPole-v1"
    """Gymnasium environment id (discrete or Box actions)."""
    total_frames: int = 100_000
    """Environment steps to train for."""
    num_envs: int = 8
    """Environments stepped together (a gymnasium vector env)."""
    num_steps: int = 32
    """Steps per environment in each rollout (batch = num_envs * num_steps)."""
    update_epochs: int = 20
    """Passes over each batch."""
    num_minibatches: int = 1
    """Minibatches per pass."""
    lr: float = 1e-3
    """Adam learning rate."""
    anneal_lr: bool = True
    """Anneal the learning rate linearly to 0."""
    gamma: float = 0.98
    """Discount factor."""
    gae_lambda: float = 0.8
    """GAE lambda."""
    clip_coef: float = 0.2
    """Clipping of the probability ratio (and of the value, with clip_vloss)."""
    clip_vloss: bool = True
    """Clip the value loss around the old value, as CleanRL."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Gradient clipping norm."""
    hidden: int = 64
    """Width of the two hidden layers of actor and critic."""
    normalize_obs: bool = False
    """Normalise observations with statistics of a random rollout."""
    eval_episodes: int = 10
    """Deterministic evaluation episodes at the end."""
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
    compile: bool = False
    """torch.compile the collector's policy, the advantage and the whole update step
    (loss, backward, gradient clipping, optimizer step), once."""
    cudagraphs: bool = False
    """Capture the update step and the policy in CUDA graphs (needs ``--device cuda``)."""
    device: str = "cpu"
    """Where the networks, the advantage and the update step live: ``cpu``, ``cuda``,
    ``cuda:N``, or ``auto`` (CUDA where visible). The environments stay on the CPU: the
    collector moves what they return; evaluations run a CPU copy of the policy."""


PRESETS = {
    "cartpole": ("CartPole-v1, RL-Zoo's tuned settings (solved within 100k frames)", Config()),
    "cleanrl": (
        "CartPole-v1, CleanRL's ppo.py defaults (the speed benchmark's)",
        Config(
            total_frames=500_000,
            num_envs=4,
            num_steps=128,
            num_minibatches=4,
            update_epochs=4,
            lr=2.5e-4,
            gamma=0.99,
            gae_lambda=0.95,
            ent_coef=0.01,
        ),
    ),
    "pendulum": (
        "Pendulum-v1, tuned continuous settings",
        Config(
            env_id="Pendulum-v1",
            total_frames=200_000,
            num_envs=4,
            num_steps=1024,
            update_epochs=10,
            num_minibatches=64,
            gamma=0.9,
            gae_lambda=0.95,
            clip_vloss=False,
            normalize_obs=True,
        ),
    ),
}


def make_agent(cfg: Config, env) -> tuple[ProbabilisticActor, ValueOperator]:
    """The actor and the critic, initialised on the CPU (the same weights on every device),
    then moved to ``cfg.device``."""
    action_spec = env.action_spec
    continuous = action_spec.dtype.is_floating_point
    n_out = action_spec.shape[-1]
    if continuous:
        net = nn.Sequential(
            MLP(out_features=2 * n_out, num_cells=[cfg.hidden] * 2, activation_class=nn.Tanh),
            NormalParamExtractor(),
        )
        module = TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"])
        actor = ProbabilisticActor(
            module,
            in_keys=["loc", "scale"],
            spec=action_spec,
            distribution_class=TanhNormal,
            # the bounds of one env (the spec of a batched env repeats them per env)
            distribution_kwargs={
                "low": action_spec.space.low.reshape(-1, n_out)[0],
                "high": action_spec.space.high.reshape(-1, n_out)[0],
            },
            return_log_prob=True,
        )
    else:
        # integer actions (gym's Discrete, as CleanRL acts) or one-hot ones (probe envs)
        integer = isinstance(action_spec, Categorical)
        n_out = action_spec.space.n if integer else n_out
        net = MLP(out_features=n_out, num_cells=[cfg.hidden] * 2, activation_class=nn.Tanh)
        module = TensorDictModule(net, in_keys=["observation"], out_keys=["logits"])
        actor = ProbabilisticActor(
            module,
            in_keys=["logits"],
            spec=action_spec,
            distribution_class=torch.distributions.Categorical if integer else OneHotCategorical,
            return_log_prob=True,
        )
    critic = ValueOperator(
        MLP(out_features=1, num_cells=[cfg.hidden] * 2, activation_class=nn.Tanh),
        in_keys=["observation"],
    )
    with torch.no_grad():  # materialise the lazy first layers
        td = env.fake_tensordict()
        actor(td)
        critic(td)
    # orthogonal initialisation, a small policy head: PPO's usual implementation details
    orthogonal_init(actor, last_gain=0.01)
    orthogonal_init(critic, last_gain=1.0)
    device = config_device(cfg)
    return actor.to(device), critic.to(device)


def make_loss(cfg: Config, actor, critic) -> tuple[ClipPPOLoss, torch.optim.Adam]:
    """CleanRL's PPO loss (clipped ratio, L2 critic loss, normalised advantages, clipped
    value with ``clip_vloss``) and its Adam optimizer; the loss's own tensors (its
    coefficients) and the optimizer's on ``cfg.device``, with the networks."""
    with torch.device(config_device(cfg)):
        loss_module = ClipPPOLoss(
            actor,
            critic,
            clip_epsilon=cfg.clip_coef,
            entropy_coeff=cfg.ent_coef,
            critic_coeff=cfg.vf_coef,
            loss_critic_type="l2",
            normalize_advantage=True,
            clip_value=cfg.clip_coef if cfg.clip_vloss else None,
        )
        # compiled: the learning rate is a tensor, annealed in place (a float would be a
        # constant of the compiled optimizer step, recompiled at every change)
        lr = torch.tensor(cfg.lr) if getattr(cfg, "compile", False) else cfg.lr
        optimizer = torch.optim.Adam(loss_module.parameters(), lr=lr, eps=1e-5)
    return loss_module, optimizer


def make_advantage(cfg: Config, critic):
    """GAE over ``critic``'s values (gamma and lambda on ``cfg.device``), run without
    gradients: eager, rl-cpp's fused scan kernel on the CPU; compiled, one graph with the
    value network."""
    gae = GAE(
        gamma=cfg.gamma, lmbda=cfg.gae_lambda, value_network=critic, device=config_device(cfg)
    )
    return compile_advantage(gae, compile=cfg.compile)


def make_update_step(cfg: Config, loss_module, optimizer, compile: bool | None = None):
    """One clipped gradient step on the minibatch ``batch[index]`` (``step(batch,
    index)``: the gather, loss, backward, clipping, optimizer step); with
    ``cfg.compile`` all of it is one compiled graph (``UpdateStep``), the minibatch
    gathered in it (with ``cfg.cudagraphs``, each replay copies the whole batch into the
    graph's static inputs)."""

    def ppo_loss(batch, index):
        losses = loss_module(batch[index])
        loss = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
        return loss, loss

    if compile is None:
        compile = getattr(cfg, "compile", False)
    with torch.device(config_device(cfg)):
        return UpdateStep(
            ppo_loss,
            optimizer,
            max_grad_norm=cfg.max_grad_norm,
            compile=compile,
            cudagraphs=getattr(cfg, "cudagraphs", False),
        )


def update_epochs(
    cfg: Config, loss_module, optimizer, batch, minibatch: int, step=None
) -> torch.Tensor:
    """PPO's update: ``cfg.update_epochs`` passes over the batch in shuffled minibatches,
    one clipped gradient step each (``step``, from :func:`make_update_step`; an eager
    one when not given); returns the last minibatch's loss. The minibatch indices are
    drawn on the batch's device."""
    if cfg.update_epochs < 1 or minibatch < 1:
        raise ValueError(
            f"PPO needs update_epochs >= 1 and a minibatch of >= 1 sample; got "
            f"update_epochs={cfg.update_epochs}, minibatch={minibatch} (the batch's frames "
            "divided by num_minibatches)"
        )
    if step is None:
        step = make_update_step(cfg, loss_module, optimizer, compile=False)
    flat = batch.exclude("next", "collector").reshape(-1)  # what the loss reads
    for _ in range(cfg.update_epochs):
        for idx in torch.randperm(flat.numel(), device=flat.device).split(minibatch):
            loss = step(flat, idx)
    return loss


def main(cfg: Config) -> dict:
    device = resolve_device(cfg.device)  # a device this machine lacks stops the run here
    seed_everything(cfg.seed)
    torch.set_num_threads(1)
    obs_stats = observation_stats(cfg) if cfg.normalize_obs else None
    env = make_env(cfg, cfg.num_envs, obs_stats)
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
    advantage = make_advantage(cfg, critic)
    loss_module, optimizer = make_loss(cfg, actor, critic)
    step = make_update_step(cfg, loss_module, optimizer)
    exp_name = cfg.exp_name or generate_exp_name("ppo", f"{cfg.env_id}-s{cfg.seed}")
    logger = get_logger(cfg.logger, logger_name=cfg.log_dir, experiment_name=exp_name)
    logger.log_hparams(dataclasses.asdict(cfg))

    num_updates = total_frames // frames_per_batch
    minibatch = frames_per_batch // cfg.num_minibatches
    progress = ProgressBar(cfg.progress, total=cfg.total_frames)
    returns = EpisodeReturns(window=20)
    frames, start, cpu_start = 0, time.perf_counter(), time.process_time()
    for update, batch in enumerate(collector):
        frames += batch.numel()
        if cfg.anneal_lr:
            set_lr(optimizer, cfg.lr * (1.0 - update / num_updates))
        batch = advantage(batch)
        loss = update_epochs(cfg, loss_module, optimizer, batch, minibatch, step)
        returns.update(batch)
        if returns.mean is not None:
            logger.log_scalar("train/episode_return", returns.mean, frames)
        logger.log_scalar("train/loss", loss.item(), frames)
        progress.observe(batch)
        progress.values["loss"] = loss.item()
        progress.update(batch.numel())
    seconds = time.perf_counter() - start
    cpu_fps = frames / (time.process_time() - cpu_start)  # CPU time: steadier on a shared machine
    collector.shutdown()
    progress.close()

    summary = evaluate_and_finish(cfg, logger, actor, frames, seconds, obs_stats)
    return {**summary, "cpu_fps": cpu_fps, "actor": actor, "critic": critic}


def cli(args=None) -> Config:
    """The config from the command line (or ``args``): ``ppo.py [preset] [--flags]``, the
    ``cartpole`` preset when the flags come first."""
    return preset_cli(Config, PRESETS, "cartpole", __doc__, args)


if __name__ == "__main__":
    main(cli())
