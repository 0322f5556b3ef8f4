"""TD3 (twin delayed DDPG) on Pendulum-v1, from rl's pieces.

Fujimoto et al. 2018, "Addressing Function Approximation Error in Actor-Critic Methods",
https://arxiv.org/abs/1802.09477 (twin critics, delayed actor updates, target policy
smoothing). RL-Zoo's tuned Pendulum-v1 settings (lr 1e-3, gamma 0.98, Gaussian
exploration 0.1 of the action range, batch 256, one update per frame), with 64x64
networks and 1k random frames to keep a 2-core CPU fast.

    uv run examples/td3.py                            # Pendulum-v1
    uv run examples/td3.py --seed 1 --total-frames 10000 --logger tensorboard

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
from rl.objectives import SoftUpdate, TD3Loss

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
    """TD3 hyperparameters (RL-Zoo's names in parentheses where they differ)."""

    gamma: float = 0.98
    """Discount factor."""
    exploration_noise: float = 0.1
    """Std of the Gaussian exploration noise, as a fraction of the action range's half-width."""
    policy_noise: float = 0.2
    """Std of the target policy smoothing noise (action units)."""
    noise_clip: float = 0.5
    """Clip of the target policy smoothing noise (action units)."""
    policy_delay: int = 2
    """Critic updates per actor (and target) update."""


PRESETS = {"pendulum": ("Pendulum-v1, RL-Zoo's tuned TD3", Config())}


def make_learner(cfg: Config, env, actor, qvalue):
    """The TD3 loss (twin critics, target policy smoothing) and its two gradient steps,
    the critics' and the actor's (with the soft target update); one graph each with
    ``cfg.compile``. The loss's own tensors and the optimizers' live on ``cfg.device``,
    with the networks. Returns ``(loss_module, update_critic, update_actor)``, each step
    taking a sample and returning its loss."""
    with torch.device(resolve_device(cfg.device)):
        loss_module = TD3Loss(
            actor,
            qvalue,
            action_spec=env.action_spec,
            num_qvalue_nets=2,
            policy_noise=cfg.policy_noise,
            noise_clip=cfg.noise_clip,
            loss_function="l2",
            gamma=cfg.gamma,
        )
        target_update = SoftUpdate(loss_module, tau=cfg.tau)
        actor_optim = torch.optim.Adam(loss_module.actor_network_params.parameters(), cfg.lr)
        critic_optim = torch.optim.Adam(loss_module.qvalue_network_params.parameters(), cfg.lr)

        def critic_loss(sample):
            loss_qvalue, _ = loss_module.value_loss(sample)
            return loss_qvalue, loss_qvalue

        def actor_loss(sample):
            loss_actor, _ = loss_module.actor_loss(sample)
            return loss_actor, loss_actor

        flags = {"compile": cfg.compile, "cudagraphs": cfg.cudagraphs}
        update_critic = UpdateStep(critic_loss, critic_optim, **flags)
        update_actor = UpdateStep(actor_loss, actor_optim, target_update=target_update, **flags)
    return loss_module, update_critic, update_actor


def main(cfg: Config) -> dict:
    seed_everything(cfg.seed)
    torch.set_num_threads(cfg.threads)
    env = make_env(cfg.env_id)
    env.set_seed(cfg.seed)

    # the pieces: actor, twin critics, exploration, collector, buffer, loss, optimisers
    device = resolve_device(cfg.device)
    actor = make_deterministic_actor(env, cfg.hidden, device=device)
    qvalue = make_qvalue(env, cfg.hidden, device=device)
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
    # the two gradient steps (the actor's with the target update); one graph each with
    # --compile
    loss_module, update_critic, update_actor = make_learner(cfg, env, actor, qvalue)
    run = Run("td3", cfg, cfg.total_frames)

    # the loop: collect, store, update the critics; every policy_delay updates the actor
    # and the targets
    updates_per_batch = max(int(cfg.utd_ratio * cfg.frames_per_batch), 1)
    num_updates = 0
    for batch in collector:
        run.observe(batch)
        buffer.extend(transitions(batch))
        if run.frames >= cfg.init_random_frames:
            for _ in range(updates_per_batch):
                sample = buffer.sample()
                loss_qvalue = update_critic(sample)
                num_updates += 1
                if num_updates % cfg.policy_delay == 0:
                    loss_actor = update_actor(sample)
            run.log(loss_actor=loss_actor.item(), loss_qvalue=loss_qvalue.item())
        run.step_bar(batch.numel())
    collector.shutdown()
    return run.finish(cfg.env_id, actor, actor=actor, qvalue=qvalue, loss_module=loss_module)


if __name__ == "__main__":
    main(cli(Config, PRESETS, "pendulum", __doc__))
