"""REDQ (randomized ensembled double Q-learning) on Pendulum-v1, from rl's pieces.

Chen et al. 2021, "Randomized Ensembled Double Q-Learning: Learning Fast Without a
Model", https://arxiv.org/abs/2101.05982: SAC with an ensemble of ten critics whose
target is the minimum over a random pair of them. The paper's ensemble (10, pairs of 2)
and SAC settings (lr 1e-3 as RL-Zoo's Pendulum SAC, batch 256, tau 0.005); the paper's
20 updates per frame are cut to 1 (``--utd-ratio``) to suit a 2-core CPU, with 64x64
networks.

    uv run examples/redq.py                           # Pendulum-v1
    uv run examples/redq.py --utd-ratio 5 --total-frames 10000

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
from rl.objectives import REDQLoss

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
    """REDQ hyperparameters (the paper's names where they exist)."""

    num_qvalue_nets: int = 10
    """Size of the critic ensemble (N)."""
    sub_sample_len: int = 2
    """Critics drawn for each target's minimum (M)."""


PRESETS = {"pendulum": ("Pendulum-v1, REDQ with one update per frame", Config())}


def make_learner(cfg: Config, env, actor, qvalue):
    """The REDQ loss (``num_qvalue_nets`` critics, ``sub_sample_len`` drawn for each
    target) and its update: one gradient step of the summed losses (backward, Adam, the
    soft target update); one graph with ``cfg.compile``. Returns ``(loss_module,
    update)``, ``update(sample)`` returning the step's losses and temperature."""
    with torch.device(resolve_device(cfg.device)):  # the loss's and optimizer's tensors
        loss_module = REDQLoss(
            actor,
            qvalue,
            num_qvalue_nets=cfg.num_qvalue_nets,
            sub_sample_len=cfg.sub_sample_len,
            loss_function="l2",
            action_spec=env.action_spec,
            gamma=cfg.gamma,
        )
        update = summed_update(cfg, loss_module)
    return loss_module, update


def main(cfg: Config) -> dict:
    seed_everything(cfg.seed)
    torch.set_num_threads(cfg.threads)
    env = make_env(cfg.env_id)
    env.set_seed(cfg.seed)

    # the pieces: actor, critic ensemble, collector, buffer, loss, optimiser, targets
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
    loss_module, update = make_learner(cfg, env, actor, qvalue)
    run = Run("redq", cfg, cfg.total_frames)

    # the loop: collect, store, update actor, ensemble and temperature, move the targets
    updates_per_batch = max(int(cfg.utd_ratio * cfg.frames_per_batch), 1)
    for batch in collector:
        run.observe(batch)
        buffer.extend(transitions(batch))
        if run.frames >= cfg.init_random_frames:
            for _ in range(updates_per_batch):
                losses = update(buffer.sample())
            run.log(
                loss_actor=losses["loss_actor"].item(),
                loss_qvalue=losses["loss_qvalue"].item(),
                alpha=losses["alpha"].item(),
            )
        run.step_bar(batch.numel())
    collector.shutdown()
    return run.finish(cfg.env_id, actor, actor=actor, qvalue=qvalue, loss_module=loss_module)


if __name__ == "__main__":
    main(cli(Config, PRESETS, "pendulum", __doc__))
