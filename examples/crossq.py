"""CrossQ on Pendulum-v1, from rl's pieces.

Bhatt et al. 2024, "CrossQ: Batch Normalization in Deep Reinforcement Learning for
Greater Sample Efficiency and Simplicity", https://arxiv.org/abs/1902.05605: SAC without
target networks, whose batch-renormalised critics see the current and the next
state-action pairs in one batch. The paper's settings (lr 1e-3, Adam betas (0.5, 0.999),
actor updated every 3 critic updates, batch 256, one update per frame), with 256-wide
critics (the paper's: 2048) and 64-wide actor to suit a 2-core CPU.

    uv run examples/crossq.py                         # Pendulum-v1
    uv run examples/crossq.py --seed 1 --total-frames 10000

Writes CSV logs (or another logger), a learning-curve PNG and, with ``--video``, an
evaluation video under ``runs/<exp_name>/``.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from pathlib import Path

import torch

from rl.collectors import Collector
from rl.core import seed_everything
from rl.modules import BatchRenorm1d
from rl.objectives import CrossQLoss

sys.path.insert(0, str(Path(__file__).parent))
from _common import UpdateStep  # noqa: E402
from _offpolicy import (  # noqa: E402
    ContinuousConfig,
    Run,
    cli,
    collector_devices,
    compile_policy,
    make_env,
    make_qvalue,
    make_replay_buffer,
    make_tanh_normal_actor,
    resolve_device,
    transitions,
)


@dataclasses.dataclass
class Config(ContinuousConfig):
    """CrossQ hyperparameters (the paper's names where they exist)."""

    adam_beta1: float = 0.5
    """Adam's first momentum coefficient (the paper lowers it to 0.5)."""
    policy_delay: int = 3
    """Critic updates per actor and temperature update."""
    renorm_momentum: float = 0.01
    """Momentum of the critics' batch renormalisation statistics."""
    renorm_warmup: int = 100_000
    """Updates during which batch renormalisation behaves as batch normalisation (sbx's
    default: over a 20k-frame run the critics use plain batch norm; with 5k, seed 2's
    critic diverged after the warm-up)."""
    hidden: int = 64
    """Width of the actor's two hidden layers."""
    critic_hidden: int = 256
    """Width of the critics' two hidden layers."""
    input_norm: bool = True
    """Batch-renormalise the critics' input (observation and action) too, as the paper's
    critics do."""


PRESETS = {"pendulum": ("Pendulum-v1, CrossQ", Config())}


def make_critic(cfg: Config, env, device=None):
    """The Q-network the loss copies into its twin critics: batch renormalisation after
    each hidden layer (and on the input with ``cfg.input_norm``); on ``device`` (default:
    the CPU)."""
    renorm = {"momentum": cfg.renorm_momentum, "warmup_steps": cfg.renorm_warmup}
    in_features = env.observation_spec["observation"].shape[-1] + env.action_spec.shape[-1]
    return make_qvalue(
        env,
        cfg.critic_hidden,
        input_norm=BatchRenorm1d(in_features, **renorm) if cfg.input_norm else None,
        norm_class=BatchRenorm1d,
        norm_kwargs={"num_features": cfg.critic_hidden, **renorm},
        device=device,
    )


def make_learner(cfg: Config, env, actor, qvalue):
    """The CrossQ loss and its two gradient steps: the critics' alone, and every
    ``cfg.policy_delay`` updates the step of all networks (critics, actor, temperature);
    one graph each with ``cfg.compile``. The loss's own tensors and the optimizers' live
    on ``cfg.device``, with the networks. Returns ``(loss_module, updates)``,
    ``updates[actor_step](sample)`` returning the step's losses and temperature."""
    with torch.device(resolve_device(cfg.device)):
        loss_module = CrossQLoss(
            actor,
            qvalue,
            num_qvalue_nets=2,
            loss_function="l2",
            action_spec=env.action_spec,
            gamma=cfg.gamma,
        )
        betas = (cfg.adam_beta1, 0.999)
        critic_optim = torch.optim.Adam(
            loss_module.qvalue_network_params.parameters(), cfg.lr, betas=betas
        )
        actor_optim = torch.optim.Adam(
            [*loss_module.actor_network_params.parameters(), loss_module.log_alpha],
            cfg.lr,
            betas=betas,
        )

        def crossq_loss(sample, actor_step: bool):
            losses = loss_module(sample)
            loss = losses["loss_qvalue"]
            if actor_step:  # the actor loss reads detached critics: one backward, no cross-talk
                loss = loss + losses["loss_actor"] + losses["loss_alpha"]
            return loss, losses.select("loss_actor", "loss_qvalue", "alpha")

        flags = {"compile": cfg.compile, "cudagraphs": cfg.cudagraphs}
        updates = {
            False: UpdateStep(
                functools.partial(crossq_loss, actor_step=False), critic_optim, **flags
            ),
            True: UpdateStep(
                functools.partial(crossq_loss, actor_step=True),
                [critic_optim, actor_optim],
                **flags,
            ),
        }
    return loss_module, updates


def main(cfg: Config) -> dict:
    seed_everything(cfg.seed)
    torch.set_num_threads(cfg.threads)
    env = make_env(cfg.env_id)
    env.set_seed(cfg.seed)

    # the pieces: actor, batch-renormalised critics, collector, buffer, loss, optimisers
    device = resolve_device(cfg.device)
    actor = make_tanh_normal_actor(env, cfg.hidden, device=device)
    qvalue = make_critic(cfg, env, device=device)
    collector = Collector(
        env,
        compile_policy(actor, compile=cfg.compile, cudagraphs=cfg.cudagraphs),
        frames_per_batch=cfg.frames_per_batch,
        total_frames=cfg.total_frames,
        init_random_frames=cfg.init_random_frames,
        **collector_devices(device),
    )
    buffer = make_replay_buffer(cfg.buffer_size, cfg.batch_size, device=device)
    # the critics' step, and the step of all networks every policy_delay updates; one
    # graph each with --compile
    loss_module, updates = make_learner(cfg, env, actor, qvalue)
    run = Run("crossq", cfg, cfg.total_frames)

    # the loop: collect, store, update the critics; every policy_delay updates the actor
    # and the temperature (no target networks)
    updates_per_batch = max(int(cfg.utd_ratio * cfg.frames_per_batch), 1)
    num_updates = 0
    for batch in collector:
        run.observe(batch)
        buffer.extend(transitions(batch))
        if run.frames >= cfg.init_random_frames:
            for _ in range(updates_per_batch):
                num_updates += 1
                losses = updates[num_updates % cfg.policy_delay == 0](buffer.sample())
            run.log(
                loss_actor=losses["loss_actor"].item(),
                loss_qvalue=losses["loss_qvalue"].item(),
                alpha=losses["alpha"].item(),
            )
        run.step_bar(batch.numel())
    collector.shutdown()
    actor.eval()
    return run.finish(cfg.env_id, actor, actor=actor, qvalue=qvalue, loss_module=loss_module)


if __name__ == "__main__":
    main(cli(Config, PRESETS, "pendulum", __doc__))
