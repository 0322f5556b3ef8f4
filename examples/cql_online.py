"""Conservative Q-learning trained online on Pendulum-v1, from rl's pieces.

Kumar et al. 2020, "Conservative Q-Learning for Offline Reinforcement Learning",
https://arxiv.org/abs/2006.04779, used as TorchRL's ``sota-implementations/cql/
cql_online.py`` uses it: SAC whose critics also pay the conservative penalty (the
log-sum-exp of Q over sampled actions minus Q of the replayed action), learning from
its own collected data. The penalty settings are TorchRL's online config (weight 1,
temperature 1, 10 sampled actions, stochastic backup, no Lagrange multiplier); the rest
are the SAC example's (RL-Zoo's Pendulum SAC: lr 1e-3, batch 256, one update per frame,
tau 0.005, 1k random frames), with 64x64 networks.

    uv run examples/cql_online.py                         # Pendulum-v1
    uv run examples/cql_online.py --min-q-weight 5 --with-lagrange

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
from rl.objectives import CQLLoss

sys.path.insert(0, str(Path(__file__).parent))
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
    summed_update,
    transitions,
)


@dataclasses.dataclass
class Config(ContinuousConfig):
    """CQL hyperparameters (TorchRL's ``loss`` section names)."""

    min_q_weight: float = 1.0
    """Weight of the conservative penalty."""
    num_random: int = 10
    """Actions sampled per state (uniform, and from the policy at s and s') for the
    penalty's log-sum-exp."""
    cql_temperature: float = 1.0
    """Temperature of the penalty's log-sum-exp."""
    max_q_backup: bool = False
    """Back up the max of the target critics over ``num_random`` next actions."""
    deterministic_backup: bool = False
    """Leave the entropy bonus out of the critics' target."""
    with_lagrange: bool = False
    """Learn the penalty's weight (Lagrange multiplier) to hold it at ``lagrange_thresh``."""
    lagrange_thresh: float = 10.0
    """With ``with_lagrange``, the target gap between sampled and replayed Q-values."""
    alpha_init: float = 1.0
    """Initial entropy temperature (learned; target entropy -dim(action))."""


PRESETS = {"pendulum": ("Pendulum-v1, online CQL on the SAC example's settings", Config())}


def make_learner(cfg: Config, env, actor, qvalue):
    """The CQL loss (SAC's, the critics paying the conservative penalty) and its update:
    one gradient step of the summed losses (backward, Adam, the soft target update); one
    graph with ``cfg.compile``. The loss's own tensors (the temperature, the Lagrange
    multiplier, the targets) and the optimizer's live on ``cfg.device``, with the
    networks. Returns ``(loss_module, update)``, ``update(sample)`` returning the step's
    losses and temperature."""
    loss_keys = ("loss_actor", "loss_qvalue", "loss_cql", "loss_alpha")
    if cfg.with_lagrange:
        loss_keys += ("loss_alpha_prime",)
    with torch.device(resolve_device(cfg.device)):
        loss_module = CQLLoss(
            actor,
            qvalue,
            loss_function="l2",
            alpha_init=cfg.alpha_init,
            action_spec=env.action_spec,
            gamma=cfg.gamma,
            temperature=cfg.cql_temperature,
            min_q_weight=cfg.min_q_weight,
            max_q_backup=cfg.max_q_backup,
            deterministic_backup=cfg.deterministic_backup,
            num_random=cfg.num_random,
            with_lagrange=cfg.with_lagrange,
            lagrange_thresh=cfg.lagrange_thresh,
        )
        update = summed_update(
            cfg, loss_module, loss_keys, ("loss_actor", "loss_qvalue", "loss_cql", "alpha")
        )
    return loss_module, update


def main(cfg: Config) -> dict:
    seed_everything(cfg.seed)
    torch.set_num_threads(cfg.threads)
    env = make_env(cfg.env_id)
    env.set_seed(cfg.seed)

    # the pieces: actor, twin critics, collector, buffer, loss, optimiser, targets
    device = resolve_device(cfg.device)
    actor = make_tanh_normal_actor(env, cfg.hidden, device=device)
    qvalue = make_qvalue(env, cfg.hidden, device=device)
    collector = Collector(
        env,
        compile_policy(actor, compile=cfg.compile, cudagraphs=cfg.cudagraphs),
        frames_per_batch=cfg.frames_per_batch,
        total_frames=cfg.total_frames,
        init_random_frames=cfg.init_random_frames,
        **collector_devices(device),
    )
    buffer = make_replay_buffer(cfg.buffer_size, cfg.batch_size, device=device)
    # one gradient step (backward, Adam, target update); one graph with --compile
    loss_module, update = make_learner(cfg, env, actor, qvalue)
    run = Run("cql_online", cfg, cfg.total_frames)

    # the loop: collect, store, update actor, critics (TD + penalty) and temperature
    updates_per_batch = max(int(cfg.utd_ratio * cfg.frames_per_batch), 1)
    for batch in collector:
        run.observe(batch)
        buffer.extend(transitions(batch))
        if run.frames >= cfg.init_random_frames:
            for _ in range(updates_per_batch):
                losses = update(buffer.sample())
            run.log(**{key: value.item() for key, value in losses.items()})
        run.step_bar(batch.numel())
    collector.shutdown()
    return run.finish(cfg.env_id, actor, actor=actor, qvalue=qvalue, loss_module=loss_module)


if __name__ == "__main__":
    main(cli(Config, PRESETS, "pendulum", __doc__))
