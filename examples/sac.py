"""Soft Actor-Critic on Pendulum-v1, from rl's pieces.

Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications",
https://arxiv.org/abs/1812.05905 (twin Q-networks, learned temperature). The defaults are
RL-Zoo's tuned Pendulum-v1 SAC (20k frames, lr 1e-3, batch 256, one update per frame,
tau 0.005), with 64x64 networks.

    uv run examples/sac.py                               # Pendulum-v1
    uv run examples/sac.py --save-buffer data/pendulum   # also keep the replay buffer
    uv run examples/sac.py --seed 1 --total-frames 10000 --logger tensorboard

``--save-buffer DIR`` keeps the replay buffer as a memory-mapped storage in ``DIR``
(with ``dataset.json``: its size and the returns of the final and of a random policy),
the dataset ``examples/offline.py`` learns from. Writes CSV logs (or another logger), a
learning-curve PNG and, with ``--video``, an evaluation video under ``runs/<exp_name>/``.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch

from rl.collectors import Collector
from rl.core import seed_everything
from rl.objectives import SACLoss

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
    save_dataset,
    summed_update,
    transitions,
)


@dataclasses.dataclass
class Config(ContinuousConfig):
    """SAC hyperparameters (RL-Zoo's names in parentheses where they differ)."""

    alpha_init: float = 1.0
    """Initial entropy temperature (learned; target entropy -dim(action))."""
    save_buffer: str | None = None
    """Keep the replay buffer as a memmap dataset in this folder (for offline.py)."""


PRESETS = {"pendulum": ("Pendulum-v1, RL-Zoo's tuned SAC", Config())}


def make_learner(cfg: Config, env, actor, qvalue):
    """The SAC loss (twin critics, learned temperature) and its update: one gradient step
    of the summed losses (backward, Adam, the soft target update); one graph with
    ``cfg.compile``. Returns ``(loss_module, update)``, ``update(sample)`` returning the
    step's losses and temperature. The loss's own tensors (the temperature, the targets)
    and the optimizer's live on ``cfg.device``, with the networks."""
    with torch.device(resolve_device(cfg.device)):
        loss_module = SACLoss(
            actor,
            qvalue,
            num_qvalue_nets=2,
            loss_function="l2",
            alpha_init=cfg.alpha_init,
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

    # the pieces: actor, critics, collector, buffer, loss, optimiser, target update
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
    buffer = make_replay_buffer(
        max(cfg.buffer_size, cfg.total_frames) if cfg.save_buffer else cfg.buffer_size,
        cfg.batch_size,
        scratch_dir=cfg.save_buffer,
        device=device,
    )
    loss_module, update = make_learner(cfg, env, actor, qvalue)
    run = Run("sac", cfg, cfg.total_frames)

    # the loop: collect, store, update actor, critics and temperature, move the targets
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
    summary = run.finish(cfg.env_id, actor, actor=actor, qvalue=qvalue, loss_module=loss_module)
    if cfg.save_buffer:
        summary["dataset"] = save_dataset(buffer, cfg.save_buffer, cfg, summary["eval_mean"])
    return summary


if __name__ == "__main__":
    main(cli(Config, PRESETS, "pendulum", __doc__))
