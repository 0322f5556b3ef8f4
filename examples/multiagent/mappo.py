"""MAPPO (and IPPO) on a VMAS scenario: PPO over the group keys of a multi-agent env.

Yu et al. 2022, "The Surprising Effectiveness of PPO in Cooperative Multi-Agent Games",
https://arxiv.org/abs/2103.01955 (MAPPO); de Witt et al. 2020, "Is Independent Learning
All You Need in the StarCraft Multi-Agent Challenge?", https://arxiv.org/abs/2011.09533
(IPPO). As TorchRL's ``sota-implementations/multiagent/mappo_ippo.py``: every agent acts
from its own observation through a ``MultiAgentMLP`` (TanhNormal, bounded by the action
spec); the critic is a ``MultiAgentMLP`` that reads all agents' observations
(``centralized=True``, MAPPO: ``MAPPOLoss``) or only its own (IPPO, ``ippo.py``:
``IPPOLoss``); ``MultiAgentGAE`` reads the agents' reward and value under
``("agents", ...)`` and repeats the environment's done flags along the agents.
``--value-norm popart`` (or ``running``, ``percentile``) measures the critic loss on the running scale
of the value targets (MAPPO's value normalisation); off by default. The defaults are
TorchRL's multi-agent PPO tutorial on ``navigation`` (3 agents, 60 envs x 100 steps per
batch, 400-sample minibatches, lr 3e-4, gamma 0.99, lambda 0.9, 60k frames) with 10
epochs per batch instead of 30, to fit a shared 2-core machine.

Presets: ``navigation`` (the defaults) and ``balance`` (4 agents as BenchMARL's task, with
BenchMARL's ``fine_tuned/vmas`` on-policy settings: 600 envs x 100 steps per batch,
minibatches of 4,096, lr 5e-5, gamma 0.9, 1.2M frames; README.md has the results).

    uv run --group multiagent examples/multiagent/mappo.py                   # navigation, 60k frames: a few minutes
    uv run --group multiagent examples/multiagent/mappo.py balance --seed 1  # VMAS balance, 4 agents, 1.2M frames
    uv run --group multiagent examples/multiagent/ippo.py                    # decentralised critic
    uv run --group multiagent examples/multiagent/mappo.py --device cuda --cudagraphs  # on a GPU

Writes CSV logs (or another logger) and a learning-curve PNG under ``runs/<exp_name>/``.
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
from rl.core import seed_everything
from rl.core.loggers import generate_exp_name, get_logger
from rl.modules import (
    MultiAgentMLP,
    PercentileValueNorm,
    PopArtValueNorm,
    ProbabilisticActor,
    RunningValueNorm,
    TensorDictModule,
    ValueNorm,
)
from rl.objectives import IPPOLoss, MAPPOLoss, ValueEstimators

sys.path.insert(0, str(Path(__file__).parent))
from _marl_common import (  # noqa: E402
    EpisodeReturns,
    MarlConfig,
    ProgressBar,
    check_cudagraphs,
    collector_devices,
    compile_advantage,
    compile_group_policy,
    evaluate_team,
    finish_run,
    make_env,
    make_tanh_normal_actor,
    preset_cli,
    resolve_device,
    team_view,
    whole_batches,
)
from ppo import make_update_step, update_epochs  # noqa: E402  (examples/, on the path through _marl_common)


@dataclasses.dataclass
class Config(MarlConfig):
    """MAPPO hyperparameters (continuous actions); the defaults follow TorchRL's multi-agent PPO tutorial."""

    update_epochs: int = 10
    """Passes over each batch."""
    minibatch_size: int = 400
    """Samples (environment steps, all agents) per gradient step."""
    lr: float = 3e-4
    """Adam learning rate."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.9
    """GAE lambda."""
    clip_coef: float = 0.2
    """Clipping of the probability ratio."""
    normalize_advantage: bool = False
    """Standardise the advantages of each minibatch."""
    loss_critic_type: Literal["l1", "l2", "smooth_l1"] = "smooth_l1"
    """Regression loss of the critic."""
    value_norm: Literal["none", "popart", "running", "percentile"] = "none"
    """Critic loss on the value targets' running scale: PopArtValueNorm, RunningValueNorm, PercentileValueNorm or none."""
    ent_coef: float = 1e-4
    """Entropy bonus coefficient."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm."""
    hidden: int = 256
    """Width of the two hidden layers of actor and critic."""
    init_scale: float = 1.0
    """Initial standard deviation of the actor's Normal (before the tanh)."""
    centralised_critic: bool = True
    """MAPPO: the critic reads every agent's observation (False: IPPO)."""
    share_params: bool = True
    """One actor and one critic network shared by the agents (False: one per agent)."""


def presets(**overrides) -> dict[str, tuple[str, Config]]:
    """The tasks measured in README.md, each with its settings (``overrides``: the same
    for every preset, e.g. ``centralised_critic=False`` for IPPO)."""
    navigation = Config(**overrides)
    # BenchMARL's fine_tuned/vmas on-policy settings (600 envs x 100 steps per batch,
    # minibatches of 4,096, lr 5e-5, gamma 0.9, no entropy bonus, gradient clip 5), with
    # 3 epochs of 15 minibatches instead of 40 random minibatches per batch
    balance = Config(
        scenario="balance",
        n_agents=4,
        num_envs=600,
        total_frames=1_200_000,
        eval_episodes=200,
        update_epochs=3,
        minibatch_size=4096,
        lr=5e-5,
        gamma=0.9,
        ent_coef=0.0,
        max_grad_norm=5.0,
        loss_critic_type="l2",
        **overrides,
    )
    return {
        "navigation": ("VMAS navigation, 3 agents, 60,000 frames (the defaults)", navigation),
        "balance": ("VMAS balance, 4 agents, BenchMARL's settings, 1,200,000 frames", balance),
    }


PRESETS = presets()


def make_agent(cfg: Config, env) -> tuple[ProbabilisticActor, TensorDictModule]:
    """The agents' actor and critic, initialised on the CPU (the same weights on every
    device), then moved to ``cfg.device`` (the actor with its bounds)."""
    n_obs = env.observation_spec["agents", "observation"].shape[-1]
    actor = make_tanh_normal_actor(env, cfg.hidden, cfg.share_params, cfg.init_scale)
    critic = TensorDictModule(
        MultiAgentMLP(
            n_obs,
            1,
            env.n_agents,
            centralized=cfg.centralised_critic,
            share_params=cfg.share_params,
            depth=2,
            num_cells=cfg.hidden,
            activation_class=nn.Tanh,
        ),
        in_keys=[("agents", "observation")],
        out_keys=[("agents", "state_value")],
    )
    device = resolve_device(cfg.device)
    return actor.to(device), critic.to(device)


def make_value_norm(cfg: Config) -> ValueNorm | None:
    """The critic's value normaliser named by ``cfg.value_norm`` (``None`` for ``"none"``)."""
    norms = {
        "popart": PopArtValueNorm,
        "running": RunningValueNorm,
        "percentile": PercentileValueNorm,
    }
    return norms[cfg.value_norm](shape=1) if cfg.value_norm in norms else None


def make_learner(cfg: Config, actor, critic):
    """MAPPO's (or IPPO's) loss over the agents' keys, its advantage (``MultiAgentGAE``
    over the critic), its Adam optimizer and its update step (one clipped gradient step
    on a minibatch, ``ppo.make_update_step``: one graph with ``cfg.compile``). Returns
    ``(loss_module, advantage, optimizer, step)``. The loss's own tensors (the value
    normaliser's statistics, the estimator's gamma and lambda) and the optimizer's live
    on ``cfg.device``, with the networks."""
    with torch.device(resolve_device(cfg.device)):
        loss_cls = MAPPOLoss if cfg.centralised_critic else IPPOLoss
        loss_module = loss_cls(
            actor,
            critic,
            value_norm=make_value_norm(cfg),
            clip_epsilon=cfg.clip_coef,
            entropy_coeff=cfg.ent_coef,
            normalize_advantage=cfg.normalize_advantage,
            loss_critic_type=cfg.loss_critic_type,
        )
        # the agents' entries: reward, action and value [*B, n_agents, 1]; done and
        # terminated stay at the root [*B, 1], repeated along the agents by MultiAgentGAE
        loss_module.set_keys(
            reward=("agents", "reward"),
            action=("agents", "action"),
            value=("agents", "state_value"),
        )
        loss_module.make_value_estimator(
            ValueEstimators.MAGAE, gamma=cfg.gamma, lmbda=cfg.gae_lambda
        )
        # compiled: one graph with the critic
        advantage = compile_advantage(loss_module.value_estimator, compile=cfg.compile)
        optimizer = torch.optim.Adam(loss_module.parameters(), lr=cfg.lr)
        step = make_update_step(cfg, loss_module, optimizer)
    return loss_module, advantage, optimizer, step


def main(cfg: Config) -> dict:
    device = resolve_device(cfg.device)  # a device this machine lacks stops the run here
    check_cudagraphs(cfg.cudagraphs)  # before the env is built
    seed_everything(cfg.seed)
    torch.set_num_threads(1)
    env = make_env(cfg, cfg.num_envs, cfg.seed)
    actor, critic = make_agent(cfg, env)

    frames_per_batch = cfg.num_envs * cfg.max_steps
    collector = Collector(
        env,
        compile_group_policy(actor, compile=cfg.compile, cudagraphs=cfg.cudagraphs),
        frames_per_batch=frames_per_batch,
        total_frames=whole_batches(cfg.total_frames, frames_per_batch),
        **collector_devices(device),
    )
    loss_module, advantage, optimizer, step = make_learner(cfg, actor, critic)
    algo = ("ma" if cfg.centralised_critic else "i") + "ppo"
    exp_name = cfg.exp_name or generate_exp_name(algo, f"{cfg.scenario}-s{cfg.seed}")
    logger = get_logger(cfg.logger, logger_name=cfg.log_dir, experiment_name=exp_name)
    logger.log_hparams(dataclasses.asdict(cfg))

    progress = ProgressBar(cfg.progress, total=cfg.total_frames)
    returns = EpisodeReturns(window=cfg.num_envs)
    frames, start = 0, time.perf_counter()
    for batch in collector:
        frames += batch.numel()
        batch = advantage(batch)
        loss = update_epochs(cfg, loss_module, optimizer, batch, cfg.minibatch_size, step)
        team = team_view(batch)
        returns.update(team)
        progress.observe(team)
        if returns.mean is not None:
            logger.log_scalar("train/episode_return", returns.mean, frames)
        logger.log_scalar("train/loss", loss.item(), frames)
        progress.values["loss"] = loss.item()
        progress.update(batch.numel())
    seconds = time.perf_counter() - start
    collector.shutdown()
    progress.close()

    eval_env = make_env(cfg, cfg.eval_episodes, cfg.seed + 1000)
    summary = finish_run(logger, evaluate_team(eval_env, actor, cfg.max_steps), frames, seconds)
    return {**summary, "actor": actor, "critic": critic, "make_env": make_env}


if __name__ == "__main__":
    main(preset_cli(PRESETS, "navigation", __doc__))
