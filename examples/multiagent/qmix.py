"""QMIX (or VDN) on a VMAS scenario with discrete actions, built from rl's pieces.

Rashid et al. 2018, "QMIX: Monotonic Value Function Factorisation for Deep Multi-Agent
Reinforcement Learning", https://arxiv.org/abs/1803.11485 (VDN: Sunehag et al. 2017,
https://arxiv.org/abs/1706.05296). As TorchRL's ``sota-implementations/multiagent/
qmix_vdn.py``: each agent's Q-network is a ``MultiAgentMLP`` over its own observation
(greedy actions through ``QValueModule``, epsilon-greedy exploration annealed from 0.8 to
0.01 over half the run, BenchMARL's values); ``QMixerLoss`` mixes the chosen actions' values with a ``QMixer``
whose state is every agent's observation (or a ``VDNMixer`` sum) and regresses the mix
onto the team reward (the agents' mean) plus the target networks' discounted greedy
mix; the target networks follow by ``SoftUpdate``. Transitions go through a replay buffer
with their group keys. Presets: ``navigation`` (the defaults) and ``balance`` (4 agents
as BenchMARL's task, the same settings, 240k frames).

    uv run --group multiagent examples/multiagent/qmix.py  # navigation, discrete actions
    uv run --group multiagent examples/multiagent/qmix.py --mixer vdn
    uv run --group multiagent examples/multiagent/qmix.py balance  # VMAS balance, 4 agents, 240k frames
    uv run --group multiagent examples/multiagent/qmix.py --device cuda --cudagraphs  # on a GPU

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
    EGreedyModule,
    MultiAgentMLP,
    QMixer,
    QValueModule,
    TensorDictModule,
    TensorDictSequential,
    VDNMixer,
)
from rl.objectives import QMixerLoss, SoftUpdate, ValueEstimators

sys.path.insert(0, str(Path(__file__).parent))
from _marl_common import (  # noqa: E402
    EpisodeReturns,
    MarlConfig,
    ProgressBar,
    UpdateStep,
    check_cudagraphs,
    collector_devices,
    compile_group_policy,
    evaluate_team,
    finish_run,
    make_replay_buffer,
    preset_cli,
    resolve_device,
    team_view,
)
from _marl_common import make_env as make_marl_env  # noqa: E402


@dataclasses.dataclass
class Config(MarlConfig):
    """QMIX hyperparameters (discrete actions): TorchRL's qmix_vdn.yaml and BenchMARL's, scaled to a CPU budget."""

    buffer_size: int = 30_000
    """Replay buffer capacity (transitions, all agents each)."""
    batch_size: int = 256
    """Transitions per gradient step."""
    updates_per_batch: int = 500
    """Gradient steps after each collected batch."""
    lr: float = 3e-4
    """Adam learning rate."""
    gamma: float = 0.9
    """Discount factor."""
    tau: float = 0.005
    """Soft update rate of the target networks."""
    eps_init: float = 0.8
    """Initial epsilon of the epsilon-greedy exploration."""
    eps_end: float = 0.01
    """Final epsilon, reached half-way through the run."""
    mixer: Literal["qmix", "vdn"] = "qmix"
    """Value mixer: QMIX's monotonic hypernetwork or VDN's sum."""
    mixing_embed_dim: int = 32
    """Hidden size of the QMIX mixing network."""
    hidden: int = 256
    """Width of the two hidden layers of the agents' Q-network."""
    share_params: bool = True
    """One Q-network shared by the agents (False: one per agent)."""
    max_grad_norm: float = 40.0
    """Gradient clipping norm."""

    def __post_init__(self) -> None:
        if self.updates_per_batch < 1:
            raise ValueError(f"updates_per_batch must be at least 1, got {self.updates_per_batch}")


PRESETS = {
    "navigation": ("VMAS navigation, 3 agents, 60,000 frames (the defaults)", Config()),
    "balance": (
        "VMAS balance, 4 agents, 240,000 frames",
        Config(scenario="balance", n_agents=4, total_frames=240_000, eval_episodes=200),
    ),
}


def make_env(cfg: Config, num_envs: int, seed: int):
    """The VMAS scenario with discrete actions (or the probe), simulated on ``cfg.device``."""
    return make_marl_env(cfg, num_envs, seed, continuous_actions=False)


def make_agent(cfg: Config, env) -> tuple[TensorDictSequential, TensorDictModule]:
    """The agents' Q-network (greedy actions) and the mixer, initialised on the CPU (the
    same weights on every device), then moved to ``cfg.device``."""
    obs_shape = env.observation_spec["agents", "observation"].shape[-2:]  # [n_agents, n_obs]
    action_spec = env.full_action_spec["agents", "action"]
    net = MultiAgentMLP(
        obs_shape[-1],
        action_spec.space.n,
        env.n_agents,
        centralized=False,
        share_params=cfg.share_params,
        depth=2,
        num_cells=cfg.hidden,
        activation_class=nn.Tanh,
    )
    qnet = TensorDictSequential(
        TensorDictModule(net, [("agents", "observation")], [("agents", "action_value")]),
        QValueModule(
            action_space="categorical",
            action_value_key=("agents", "action_value"),
            out_keys=[
                ("agents", "action"),
                ("agents", "action_value"),
                ("agents", "chosen_action_value"),
            ],
        ),
    )
    if cfg.mixer == "qmix":
        # the state is every agent's observation, as in TorchRL's QMIX on VMAS
        mixer = TensorDictModule(
            QMixer(obs_shape, cfg.mixing_embed_dim, env.n_agents, device="cpu"),
            in_keys=[("agents", "chosen_action_value"), ("agents", "observation")],
            out_keys=["chosen_action_value"],
        )
    else:
        mixer = TensorDictModule(
            VDNMixer(env.n_agents, device="cpu"),
            in_keys=[("agents", "chosen_action_value")],
            out_keys=["chosen_action_value"],
        )
    device = resolve_device(cfg.device)
    return qnet.to(device), mixer.to(device)


def make_exploration(cfg: Config, env) -> EGreedyModule:
    """Epsilon-greedy exploration of the agents' actions, epsilon annealed from
    ``cfg.eps_init`` to ``cfg.eps_end`` over half the run; on ``cfg.device``."""
    return EGreedyModule(
        env.full_action_spec["agents", "action"],
        eps_init=cfg.eps_init,
        eps_end=cfg.eps_end,
        annealing_num_steps=cfg.total_frames // 2,
        action_key=("agents", "action"),
        device=resolve_device(cfg.device),
    )


def make_learner(cfg: Config, qnet, mixer) -> tuple[QMixerLoss, UpdateStep]:
    """The QMIX (or VDN) loss with its target networks and TD(0) targets, and its update:
    one gradient step (backward, clipping, Adam, the targets' soft update; one graph with
    ``cfg.compile``). Returns ``(loss_module, update)``, ``update(sample)`` returning the
    loss. The loss's own tensors and the optimizer's live on ``cfg.device``, with the
    networks."""
    with torch.device(resolve_device(cfg.device)):
        loss_module = QMixerLoss(qnet, mixer, delay_value=True, action_space="categorical")
        loss_module.set_keys(
            action_value=("agents", "action_value"),
            local_value=("agents", "chosen_action_value"),
            global_value="chosen_action_value",
            action=("agents", "action"),
        )
        loss_module.make_value_estimator(ValueEstimators.TD0, gamma=cfg.gamma)
        target_updater = SoftUpdate(loss_module, tau=cfg.tau)
        optimizer = torch.optim.Adam(loss_module.parameters(), lr=cfg.lr)

        def qmix_loss(sample):
            loss = loss_module(sample)["loss"]
            return loss, loss

        update = UpdateStep(
            qmix_loss,
            optimizer,
            max_grad_norm=cfg.max_grad_norm,
            target_update=target_updater,
            compile=cfg.compile,
            cudagraphs=cfg.cudagraphs,
        )
    return loss_module, update


def main(cfg: Config) -> dict:
    device = resolve_device(cfg.device)  # a device this machine lacks stops the run here
    check_cudagraphs(cfg.cudagraphs)  # before the env is built
    seed_everything(cfg.seed)
    torch.set_num_threads(1)
    env = make_env(cfg, cfg.num_envs, cfg.seed)
    qnet, mixer = make_agent(cfg, env)
    explore = make_exploration(cfg, env)
    policy = TensorDictSequential(qnet, explore)

    frames_per_batch = cfg.num_envs * cfg.max_steps
    collector = Collector(
        env,
        compile_group_policy(policy, compile=cfg.compile, cudagraphs=cfg.cudagraphs),
        frames_per_batch=frames_per_batch,
        total_frames=cfg.total_frames,
        **collector_devices(device),
    )
    buffer = make_replay_buffer(cfg)
    # one gradient step (backward, clipping, Adam, soft update); one graph with --compile
    loss_module, update = make_learner(cfg, qnet, mixer)
    exp_name = cfg.exp_name or generate_exp_name(cfg.mixer, f"{cfg.scenario}-s{cfg.seed}")
    logger = get_logger(cfg.logger, logger_name=cfg.log_dir, experiment_name=exp_name)
    logger.log_hparams(dataclasses.asdict(cfg))

    progress = ProgressBar(cfg.progress, total=cfg.total_frames)
    returns = EpisodeReturns(window=cfg.num_envs)
    frames, start = 0, time.perf_counter()
    for batch in collector:
        frames += batch.numel()
        team = team_view(batch)
        # QMIX learns from the team's reward: the mean of the agents' rewards
        batch.set(("next", "reward"), team.get(("next", "reward")))
        buffer.extend(batch.exclude("collector", ("next", "agents", "reward")).reshape(-1))
        for _ in range(cfg.updates_per_batch):
            loss = update(buffer.sample())
        explore.step(batch.numel())
        returns.update(team)
        progress.observe(team)
        if returns.mean is not None:
            logger.log_scalar("train/episode_return", returns.mean, frames)
        logger.log_scalar("train/loss", loss.item(), frames)
        logger.log_scalar("train/epsilon", float(explore.eps), frames)
        progress.values["loss"] = loss.item()
        progress.update(batch.numel())
    seconds = time.perf_counter() - start
    collector.shutdown()
    progress.close()

    eval_env = make_env(cfg, cfg.eval_episodes, cfg.seed + 1000)
    summary = finish_run(logger, evaluate_team(eval_env, qnet, cfg.max_steps), frames, seconds)
    return {**summary, "qnet": qnet, "mixer": mixer, "make_env": make_env}


if __name__ == "__main__":
    main(preset_cli(PRESETS, "navigation", __doc__))
