"""MASAC on a VMAS scenario: SAC over the group keys of a multi-agent env, centralised critic.

Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications",
https://arxiv.org/abs/1812.05905 (SAC); its multi-agent form with a centralised critic as
TorchRL's ``sota-implementations/multiagent/sac.py`` and BenchMARL's MASAC: every agent
acts from its own observation through a ``MultiAgentMLP`` and a ``TanhNormal`` bounded by
the action spec; each agent's twin critics ``Q(s, a)`` are ``MultiAgentMLP`` s that read
all agents' observations and actions (``centralized=True``; ``--no-centralised-critic``:
ISAC); ``SACLoss`` with the agents' keys, TD(0) soft targets, a learned temperature whose
target entropy is minus one agent's action size (each agent's log-probability is
compared with its own action's dimensions), the critics' targets by ``SoftUpdate``.

The defaults differ from TorchRL's ``sac.yaml`` (BenchMARL's off-policy settings:
60,000-frame batches, 45 x 14 updates of 4,096, lr 5e-5, initial temperature 1,
millions of frames) to learn ``navigation`` in 30,000 frames on a shared 2-core machine:
batches of 600 frames (60 envs x 10 steps), 50 updates of 256 after each, lr 1e-3, an
initial temperature of 0.01 (navigation's rewards are about 0.03 a step); gamma 0.9 and
the soft updates (tau 0.005) as TorchRL's.

    uv run --group multiagent examples/multiagent/masac.py                  # navigation, 3 agents, 30k frames
    uv run --group multiagent examples/multiagent/masac.py --alpha-init 0.1
    uv run --group multiagent examples/multiagent/masac.py --device cuda --cudagraphs  # on a GPU

Writes CSV logs (or another logger) and a learning-curve PNG under ``runs/<exp_name>/``.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch

from rl.core import seed_everything
from rl.objectives import SACLoss, ValueEstimators

sys.path.insert(0, str(Path(__file__).parent))
from _marl_common import (  # noqa: E402
    OffPolicyConfig,
    check_cudagraphs,
    make_env,
    make_q_critic,
    make_tanh_normal_actor,
    preset_cli,
    resolve_device,
    train_off_policy,
)


@dataclasses.dataclass
class Config(OffPolicyConfig):
    """MASAC hyperparameters (continuous actions), scaled to a CPU budget."""

    alpha_init: float = 0.01
    """Initial entropy temperature, learned from there (TorchRL's 1.0 would outweigh navigation's rewards, about 0.03 a step)."""
    init_scale: float = 1.0
    """Initial standard deviation of the actor's Normal (before the tanh)."""


PRESETS = {
    "navigation": ("VMAS navigation, 3 agents, 60,000 frames (the defaults)", Config()),
}


def make_loss(cfg: Config, env, actor, critic) -> SACLoss:
    """SAC's loss over the agents' keys (twin critics, their targets, a learned
    temperature), with TD(0) soft targets; its own tensors (the temperature, the target
    entropy) on ``cfg.device``, with the networks."""
    with torch.device(resolve_device(cfg.device)):
        loss_module = SACLoss(
            actor,
            critic,
            alpha_init=cfg.alpha_init,
            # per agent: each agent's log-probability sums over its own action's dimensions
            target_entropy=-float(env.full_action_spec["agents", "action"].shape[-1]),
            delay_qvalue=True,
        )
        # the agents' action, reward and Q values [*B, n_agents, ...]; the done flags
        # repeated along the agents by train_off_policy (agents_done)
        loss_module.set_keys(
            state_action_value=("agents", "state_action_value"),
            action=("agents", "action"),
            reward=("agents", "reward"),
            done=("agents", "done"),
            terminated=("agents", "terminated"),
        )
        loss_module.make_value_estimator(ValueEstimators.TD0, gamma=cfg.gamma)
    return loss_module


def main(cfg: Config) -> dict:
    device = resolve_device(cfg.device)  # a device this machine lacks stops the run here
    check_cudagraphs(cfg.cudagraphs)  # before the env is built
    seed_everything(cfg.seed)
    torch.set_num_threads(1)
    env = make_env(cfg, cfg.num_envs, cfg.seed)
    actor = make_tanh_normal_actor(env, cfg.hidden, cfg.share_params, cfg.init_scale, device=device)
    critic = make_q_critic(env, cfg.hidden, cfg.centralised_critic, cfg.share_params, device=device)
    loss_module = make_loss(cfg, env, actor, critic)
    algo = ("ma" if cfg.centralised_critic else "i") + "sac"
    summary = train_off_policy(
        cfg,
        algo,
        env,
        make_env,
        actor,
        loss_module,
        ("loss_actor", "loss_qvalue", "loss_alpha"),
    )
    return {**summary, "actor": actor, "critic": critic, "make_env": make_env}


if __name__ == "__main__":
    main(preset_cli(PRESETS, "navigation", __doc__))
