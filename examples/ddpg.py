"""DDPG on Pendulum-v1, from rl's pieces.

Lillicrap et al. 2016, "Continuous control with deep reinforcement learning",
https://arxiv.org/abs/1509.02971 (deterministic actor, Q critic, target networks for
both). RL-Zoo's tuned Pendulum-v1 settings (lr 1e-3, gamma 0.98, Gaussian exploration
0.1 of the action range, batch 256, one update per frame), with 64x64 networks and 1k
random frames to keep a 2-core CPU fast.

    uv run examples/ddpg.py                           # Pendulum-v1
    uv run examples/ddpg.py --seed 1 --total-frames 10000 --logger tensorboard

Writes CSV logs (or another logger), a learning-curve PNG and, with ``--video``, an
evaluation video under ``runs/<exp_name>/``.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch

from rl.collectors import Collector
from rl.core import seed_everything
from rl.objectives import DDPGLoss, SoftUpdate

sys.path.insert(0, str(Path(__file__).parent))
from _common import UpdateStep  # noqa: E402
from _offpolicy import (  # noqa: E402
    ContinuousConfig,
    Run,
    cli,
    collector_devices,
    compile_policy,
    make_deterministic_actor,
    make_env,
    make_exploration_policy,
    make_qvalue,
    make_replay_buffer,
    resolve_device,
    transitions,
)


@dataclasses.dataclass
class Config(ContinuousConfig):
    """DDPG hyperparameters (RL-Zoo's names in parentheses where they differ)."""

    gamma: float = 0.98
    """Discount factor."""
    exploration_noise: float = 0.1
    """Std of the Gaussian exploration noise, as a fraction of the action range's half-width."""


PRESETS = {"pendulum": ("Pendulum-v1, RL-Zoo's tuned DDPG", Config())}


def make_learner(cfg: Config, actor, critic):
    """The DDPG loss and its update: one gradient step of both networks and the soft
    target update; one graph with ``cfg.compile``. The loss's own tensors and the
    optimizers' live on ``cfg.device``, with the networks. Returns ``(loss_module,
    update)``, ``update(sample)`` returning both losses."""
    with torch.device(resolve_device(cfg.device)):
        loss_module = DDPGLoss(
            actor, critic, loss_function="l2", delay_actor=True, delay_value=True, gamma=cfg.gamma
        )
        target_update = SoftUpdate(loss_module, tau=cfg.tau)
        actor_optim = torch.optim.Adam(loss_module.actor_network_params.parameters(), cfg.lr)
        critic_optim = torch.optim.Adam(loss_module.value_network_params.parameters(), cfg.lr)

        def ddpg_loss(sample):
            losses = loss_module(sample)
            # the actor loss reads a detached critic: one backward, no cross-talk
            return losses["loss_value"] + losses["loss_actor"], losses.select(
                "loss_actor", "loss_value"
            )

        update = UpdateStep(
            ddpg_loss,
            [critic_optim, actor_optim],
            target_update=target_update,
            compile=cfg.compile,
            cudagraphs=cfg.cudagraphs,
        )
    return loss_module, update


def main(cfg: Config) -> dict:
    seed_everything(cfg.seed)
    torch.set_num_threads(cfg.threads)
    env = make_env(cfg.env_id)
    env.set_seed(cfg.seed)

    # the pieces: actor, critic, exploration, collector, buffer, loss, optimisers
    device = resolve_device(cfg.device)
    actor = make_deterministic_actor(env, cfg.hidden, device=device)
    critic = make_qvalue(env, cfg.hidden, device=device)
    collector = Collector(
        env,
        compile_policy(
            make_exploration_policy(cfg, env, actor),
            compile=cfg.compile,
            cudagraphs=cfg.cudagraphs,
        ),
        frames_per_batch=cfg.frames_per_batch,
        total_frames=cfg.total_frames,
        init_random_frames=cfg.init_random_frames,
        **collector_devices(device),
    )
    buffer = make_replay_buffer(cfg.buffer_size, cfg.batch_size, device=device)
    # one gradient step of both networks and the target update; one graph with --compile
    loss_module, update = make_learner(cfg, actor, critic)
    run = Run("ddpg", cfg, cfg.total_frames)

    # the loop: collect, store, update critic and actor, move the targets
    updates_per_batch = max(int(cfg.utd_ratio * cfg.frames_per_batch), 1)
    for batch in collector:
        run.observe(batch)
        buffer.extend(transitions(batch))
        if run.frames >= cfg.init_random_frames:
            for _ in range(updates_per_batch):
                losses = update(buffer.sample())
            run.log(loss_actor=losses["loss_actor"].item(), loss_value=losses["loss_value"].item())
        run.step_bar(batch.numel())
    collector.shutdown()
    return run.finish(cfg.env_id, actor, actor=actor, critic=critic, loss_module=loss_module)


if __name__ == "__main__":
    main(cli(Config, PRESETS, "pendulum", __doc__))
