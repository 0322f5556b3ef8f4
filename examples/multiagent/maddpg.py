"""MADDPG (and IDDPG) on a VMAS scenario: DDPG over the group keys of a multi-agent env.

Lowe et al. 2017, "Multi-Agent Actor-Critic for Mixed Cooperative-Competitive
Environments", https://arxiv.org/abs/1706.02275 (MADDPG); Lillicrap et al. 2015,
https://arxiv.org/abs/1509.02971 (DDPG). As TorchRL's
``sota-implementations/multiagent/maddpg_iddpg.py``: every agent acts from its own
observation through a ``MultiAgentMLP`` and a ``TanhDelta`` bounded by the action spec,
explored with ``AdditiveGaussianModule`` noise annealed over half the run; each agent's
critic ``Q(s, a)`` is a ``MultiAgentMLP`` that reads all agents' observations and actions
(``centralized=True``, MADDPG) or only its own (IDDPG, ``iddpg.py``); ``DDPGLoss`` with
the agents' keys and TD(0) targets, the critic's target by ``SoftUpdate``.

The defaults differ from TorchRL's ``maddpg_iddpg.yaml`` (BenchMARL's off-policy settings:
60,000-frame batches, 45 x 14 updates of 4,096, lr 5e-5, gamma 0.9, no shared
parameters, millions of frames) to learn ``navigation`` in 30,000 frames on a shared
2-core machine: batches of 600 frames (60 envs x 10 steps), 50 updates of 256 after
each, lr 1e-3, parameters shared by the agents (``--no-share-params`` gives one network
per agent); gamma 0.9 and the soft updates (tau 0.005) as TorchRL's.

    uv run --group multiagent examples/multiagent/maddpg.py                    # navigation, 3 agents, 30k frames
    uv run --group multiagent examples/multiagent/iddpg.py                     # decentralised critic
    uv run --group multiagent examples/multiagent/maddpg.py --no-share-params  # one actor and critic per agent
    uv run --group multiagent examples/multiagent/maddpg.py --device cuda --cudagraphs  # on a GPU

Writes CSV logs (or another logger) and a learning-curve PNG under ``runs/<exp_name>/``.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch

from rl.core import seed_everything
from rl.modules import AdditiveGaussianModule, ProbabilisticActor, TanhDelta, TensorDictModule
from rl.objectives import DDPGLoss, ValueEstimators

sys.path.insert(0, str(Path(__file__).parent))
from _marl_common import (  # noqa: E402
    OffPolicyConfig,
    _agents_mlp,
    check_cudagraphs,
    make_env,
    make_q_critic,
    preset_cli,
    resolve_device,
    train_off_policy,
)


@dataclasses.dataclass
class Config(OffPolicyConfig):
    """MADDPG hyperparameters (continuous actions), scaled to a CPU budget."""

    sigma_init: float = 1.0
    """Initial scale of the Gaussian exploration noise (actions lie in [-1, 1])."""
    sigma_end: float = 0.1
    """Final scale of the noise, reached half-way through the run."""


def presets(**overrides) -> dict[str, tuple[str, Config]]:
    """The task measured in README.md (``overrides``: e.g. ``centralised_critic=False``)."""
    return {
        "navigation": (
            "VMAS navigation, 3 agents, 60,000 frames (the defaults)",
            Config(**overrides),
        ),
    }


PRESETS = presets()


def make_actor(cfg: Config, env) -> ProbabilisticActor:
    """Each agent's deterministic action ``mid + half * tanh(net(observation))``;
    initialised on the CPU (the same weights on every device), then moved to
    ``cfg.device`` with its bounds."""
    n_obs = env.observation_spec["agents", "observation"].shape[-1]
    action_spec = env.full_action_spec["agents", "action"]
    n_act = action_spec.shape[-1]
    net = _agents_mlp(env, n_obs, n_act, False, cfg.share_params, cfg.hidden)
    actor = ProbabilisticActor(
        TensorDictModule(net, in_keys=[("agents", "observation")], out_keys=[("agents", "param")]),
        in_keys=[("agents", "param")],
        out_keys=[("agents", "action")],
        spec=env.full_action_spec,
        distribution_class=TanhDelta,
        distribution_kwargs={
            "low": action_spec.space.low.reshape(-1, n_act)[0],
            "high": action_spec.space.high.reshape(-1, n_act)[0],
        },
    )
    return actor.to(resolve_device(cfg.device))


def make_exploration(cfg: Config, env) -> AdditiveGaussianModule:
    """Gaussian noise on the agents' actions, its scale annealed from ``cfg.sigma_init``
    to ``cfg.sigma_end`` over half the run; on ``cfg.device``."""
    return AdditiveGaussianModule(
        env.full_action_spec["agents", "action"],
        sigma_init=cfg.sigma_init,
        sigma_end=cfg.sigma_end,
        annealing_num_steps=cfg.total_frames // 2,
        action_key=("agents", "action"),
        device=resolve_device(cfg.device),
    )


def make_loss(cfg: Config, actor, critic) -> DDPGLoss:
    """DDPG's loss over the agents' keys, with TD(0) targets and a target critic; its own
    tensors on ``cfg.device``, with the networks."""
    with torch.device(resolve_device(cfg.device)):
        loss_module = DDPGLoss(actor, critic, delay_value=True)
        # the agents' reward and Q value [*B, n_agents, 1]; the done flags repeated along
        # the agents by train_off_policy (agents_done)
        loss_module.set_keys(
            state_action_value=("agents", "state_action_value"),
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
    actor = make_actor(cfg, env)
    critic = make_q_critic(env, cfg.hidden, cfg.centralised_critic, cfg.share_params, device=device)
    exploration = make_exploration(cfg, env)
    loss_module = make_loss(cfg, actor, critic)
    algo = ("ma" if cfg.centralised_critic else "i") + "ddpg"
    summary = train_off_policy(
        cfg,
        algo,
        env,
        make_env,
        actor,
        loss_module,
        ("loss_actor", "loss_value"),
        exploration=exploration,
    )
    return {**summary, "actor": actor, "critic": critic, "make_env": make_env}


if __name__ == "__main__":
    main(preset_cli(PRESETS, "navigation", __doc__))
