"""TQC (truncated quantile critics) on Pendulum-v1, from rl's pieces.

Kuznetsov et al. 2020, "Controlling Overestimation Bias with Truncated Mixture of
Continuous Distributional Quantile Critics", https://arxiv.org/abs/2005.04269: SAC whose
critics each predict return quantiles; the target pools the atoms of every target
critic, drops the largest ones and keeps the rest. The defaults are RL-Zoo's tuned
Pendulum-v1 TQC (sb3-contrib: 20k frames, lr 1e-3, batch 256, one update per frame,
tau 0.005, 2 critics of 25 quantiles, 2 dropped per critic), with 64x64 networks.

    uv run examples/tqc.py                            # Pendulum-v1
    uv run examples/tqc.py --seed 1 --top-quantiles-to-drop-per-net 5

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
from rl.objectives import TQCLoss

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
    """TQC hyperparameters (the names of TorchRL's sota config)."""

    num_qvalue_nets: int = 2
    """Number of distributional critics (sb3-contrib's n_critics; TorchRL's HalfCheetah
    config: 5)."""
    num_quantiles: int = 25
    """Return quantiles each critic predicts."""
    top_quantiles_to_drop_per_net: int = 2
    """Largest atoms dropped from the pooled target, per critic."""
    alpha_init: float = 1.0
    """Initial entropy temperature (learned; target entropy -dim(action))."""


PRESETS = {"pendulum": ("Pendulum-v1, RL-Zoo's tuned TQC", Config())}


def make_learner(cfg: Config, env, actor, qvalue):
    """The TQC loss (pooled, truncated quantile targets, learned temperature) and its
    update: one gradient step of the summed losses (backward, Adam, the soft target
    update); one graph with ``cfg.compile``. The loss's own tensors (the temperature, the
    targets) and the optimizer's live on ``cfg.device``, with the networks. Returns
    ``(loss_module, update)``, ``update(sample)`` returning the step's losses and
    temperature."""
    with torch.device(resolve_device(cfg.device)):
        loss_module = TQCLoss(
            actor,
            qvalue,
            num_qvalue_nets=cfg.num_qvalue_nets,
            top_quantiles_to_drop_per_net=cfg.top_quantiles_to_drop_per_net,
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

    # the pieces: actor, quantile critics, collector, buffer, loss, optimiser, targets
    device = resolve_device(cfg.device)
    actor = make_tanh_normal_actor(env, cfg.hidden, device=device)
    qvalue = make_qvalue(env, cfg.hidden, out_features=cfg.num_quantiles, device=device)
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
    run = Run("tqc", cfg, cfg.total_frames)

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
    return run.finish(cfg.env_id, actor, actor=actor, qvalue=qvalue, loss_module=loss_module)


if __name__ == "__main__":
    main(cli(Config, PRESETS, "pendulum", __doc__))
