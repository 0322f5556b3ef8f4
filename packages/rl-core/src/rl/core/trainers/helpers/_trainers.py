"""The trainer of a config-driven script (TorchRL's ``trainers.helpers.trainers``)."""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch import optim
from torch.optim.lr_scheduler import CosineAnnealingLR

from ..._exploration import ExplorationType
from .._hooks_data import BatchSubSampler, ReplayBufferTrainer, RewardNormalizer, SelectKeys
from .._hooks_log import CountFramesLog, LogScalar, LogValidationReward
from .._hooks_optim import ClearCudaCache, UpdateWeights
from .._trainer import Trainer
from ._config import field, require

__all__ = ["TrainerConfig", "make_trainer"]

_log = logging.getLogger(__name__)

OPTIMIZERS = {"adam": optim.Adam, "sgd": optim.SGD, "adamax": optim.Adamax}
_LR_SCHEDULERS = ("cosine", "")


@dataclass
class TrainerConfig:
    """The optimisation fields of a script's config."""

    optim_steps_per_batch: int = 500
    """Optimisation steps after each collected batch."""
    optimizer: str = "adam"
    """Optimizer: ``"adam"``, ``"sgd"`` or ``"adamax"``."""
    lr_scheduler: str = "cosine"
    """Learning-rate schedule: ``"cosine"`` (annealed to 0 over the run) or "" (none)."""
    selected_keys: list | None = None
    """Keep only these keys of the collected batches (``None``: all)."""
    batch_size: int = 256
    """Size of the optimisation batches."""
    log_interval: int = 10000
    """Optimisation steps between two logs."""
    lr: float = 3e-4
    """Learning rate."""
    weight_decay: float = 0.0
    """Weight decay."""
    clip_norm: float = 1000.0
    """Gradient clipping threshold."""
    clip_grad_norm: bool = False
    """Clip the gradient's norm (else each value is clipped)."""
    normalize_rewards_online: bool = False
    """Normalise the rewards with running statistics before the loss."""
    normalize_rewards_online_scale: float = 1.0
    """Scale of the normalised rewards."""
    normalize_rewards_online_decay: float = 0.9999
    """Decay of the reward running statistics."""
    sub_traj_len: int = -1
    """Length of the sub-trajectories sampled from a batch without replay buffer."""


def make_trainer(
    collector: Any,
    loss_module: Any,
    recorder: Any | None = None,
    target_net_updater: Any | None = None,
    policy_exploration: Any | None = None,
    replay_buffer: Any | None = None,
    logger: Any | None = None,
    cfg: Any = None,
) -> Trainer:
    """A :class:`Trainer` with the hooks a script's config asks for.

    The optimizer (``cfg.optimizer``; Adam with ``betas=(0.0, 0.9)``) covers the loss's
    parameters, with a cosine schedule over ``total_frames / frames_per_batch *
    optim_steps_per_batch`` steps (``cfg.lr_scheduler == "cosine"``). The hooks: noise
    reset of noisy layers (``cfg.noisy``); ``SelectKeys(cfg.selected_keys)``; batches
    moved to the CPU; with ``replay_buffer``, a :class:`ReplayBufferTrainer` (extend,
    sample ``cfg.batch_size``, update priorities), else a :class:`BatchSubSampler`;
    the schedule and ``target_net_updater.step`` after each optimisation step; online
    reward normalisation (``cfg.normalize_rewards_online``); ``policy_exploration.step``
    after each batch; the learning rate, the reward (:class:`LogScalar`) and the frame
    count logged; with ``recorder``, validation rollouts every ``cfg.record_interval``
    batches, deterministic and exploratory; the collector's policy weights updated after
    each batch. ``cfg.total_frames`` counts env steps: the trainer runs
    ``total_frames * frame_skip`` frames. The trainer logs every ``cfg.log_interval``
    frames (TorchRL's ignores the field and keeps the trainer's default, 10000, which is
    also the field's).

    TorchRL runs (and drops) one validation rollout of each recorder while building the
    trainer; here the first runs in the loop, after the first batch, and is logged.

    Args:
        collector: the data collector.
        loss_module: the loss (its parameters are optimised).
        recorder: an env for validation rollouts (``None``: no validation).
        target_net_updater: stepped after each optimisation step.
        policy_exploration: the exploration policy (its ``step(frames)``, if any, anneals
            the exploration; the recorder runs it).
        replay_buffer: where the batches go (``None``: train on sub-batches of each batch).
        logger: the logger (the config is logged as hyper-parameters).
        cfg: the config (:class:`TrainerConfig` fields, ``frame_skip``, ``total_frames``,
            ``frames_per_batch``, and the :class:`LoggerConfig` ones with a recorder);
            ``None`` takes the defaults with 1000 frames (debugging only; warns).

    Returns:
        The trainer.

    Raises:
        ValueError: ``cfg.optimizer`` or ``cfg.lr_scheduler`` is unknown (TorchRL raises
            ``KeyError`` and ``NotImplementedError``).
    """
    needed = "make_trainer"
    if cfg is None:
        warnings.warn(
            "make_trainer got no cfg: it uses the TrainerConfig defaults with 1000 frames, "
            "which is meant for debugging only",
            UserWarning,
            stacklevel=2,
        )
        cfg = TrainerConfig()
        cfg.frame_skip = 1
        cfg.total_frames = 1000
        cfg.frames_per_batch = 100
        cfg.record_frames = 10
        cfg.record_interval = 10
        cfg.recorder_log_keys = None
    decl = "TrainerConfig"
    name = field(cfg, "optimizer", needed, decl)
    if name not in OPTIMIZERS:
        raise ValueError(f"cfg.optimizer must be one of {sorted(OPTIMIZERS)}, got {name!r}")
    schedule = field(cfg, "lr_scheduler", needed, decl)
    if schedule not in _LR_SCHEDULERS:
        raise ValueError(f"cfg.lr_scheduler must be one of {_LR_SCHEDULERS}, got {schedule!r}")
    frame_skip = field(cfg, "frame_skip", needed, "EnvConfig")
    total_frames = field(cfg, "total_frames", needed, "OnPolicyCollectorConfig")
    frames_per_batch = field(cfg, "frames_per_batch", needed, "OnPolicyCollectorConfig")
    optim_steps = field(cfg, "optim_steps_per_batch", needed, decl)
    batch_size = field(cfg, "batch_size", needed, decl)

    optimizer = OPTIMIZERS[name](
        loss_module.parameters(),
        lr=field(cfg, "lr", needed, decl),
        weight_decay=field(cfg, "weight_decay", needed, decl),
        **({"betas": (0.0, 0.9)} if name == "adam" else {}),
    )
    device = next(loss_module.parameters()).device
    scheduler = None
    if schedule == "cosine":
        scheduler = CosineAnnealingLR(
            optimizer, T_max=int(total_frames / frames_per_batch * optim_steps)
        )
    if logger is not None:
        logger.log_hparams(cfg)

    trainer = Trainer(
        collector=collector,
        frame_skip=frame_skip,
        total_frames=total_frames * frame_skip,
        loss_module=loss_module,
        optimizer=optimizer,
        logger=logger,
        optim_steps_per_batch=optim_steps,
        clip_grad_norm=field(cfg, "clip_grad_norm", needed, decl),
        clip_norm=field(cfg, "clip_norm", needed, decl),
        # TorchRL leaves the trainer's default (10000, TrainerConfig's default too)
        log_interval=getattr(cfg, "log_interval", 10000),
    )
    if torch.cuda.device_count() > 0:
        trainer.register_op("pre_optim_steps", ClearCudaCache(1))
    if getattr(cfg, "noisy", False):
        reset_noise = require("rl.modules", needed).reset_noise
        trainer.register_op("pre_optim_steps", lambda: loss_module.apply(reset_noise))
    selected_keys = field(cfg, "selected_keys", needed, decl)
    if selected_keys:
        trainer.register_op("batch_process", SelectKeys(selected_keys))
    trainer.register_op("batch_process", lambda batch: batch.cpu())

    if replay_buffer is not None:
        buffer_hook = ReplayBufferTrainer(
            replay_buffer, batch_size, flatten_tensordicts=False, memmap=False, device=device
        )
        trainer.register_op("batch_process", buffer_hook.extend)
        trainer.register_op("process_optim_batch", buffer_hook.sample)
        trainer.register_op("post_loss", buffer_hook.update_priority)
    else:
        trainer.register_op(
            "process_optim_batch",
            BatchSubSampler(
                batch_size=batch_size, sub_traj_len=field(cfg, "sub_traj_len", needed, decl)
            ),
        )
        trainer.register_op("process_optim_batch", lambda batch: batch.to(device))

    if scheduler is not None:
        trainer.register_op("post_optim", scheduler.step)
    if target_net_updater is not None:
        trainer.register_op("post_optim", target_net_updater.step)
    if field(cfg, "normalize_rewards_online", needed, decl):
        normalizer = RewardNormalizer(
            scale=field(cfg, "normalize_rewards_online_scale", needed, decl),
            decay=field(cfg, "normalize_rewards_online_decay", needed, decl),
        )
        trainer.register_op("batch_process", normalizer.update_reward_stats)
        trainer.register_op("process_optim_batch", normalizer.normalize_reward)
    if policy_exploration is not None and hasattr(policy_exploration, "step"):
        trainer.register_op("post_steps", policy_exploration.step, frames=frames_per_batch)
    trainer.register_op("post_steps_log", lambda *_: {"lr": optimizer.param_groups[0]["lr"]})

    if recorder is not None:
        record = {
            "record_frames": field(cfg, "record_frames", needed, "LoggerConfig"),
            "frame_skip": frame_skip,
            "policy_exploration": policy_exploration,
            "environment": recorder,
            "record_interval": field(cfg, "record_interval", needed, "LoggerConfig"),
        }
        trainer.register_op(
            "post_steps_log",
            LogValidationReward(
                **record, log_keys=field(cfg, "recorder_log_keys", needed, "LoggerConfig")
            ),
        )
        trainer.register_op(
            "post_steps_log",
            LogValidationReward(
                **record,
                exploration_type=ExplorationType.RANDOM,
                suffix="exploration",
                out_keys={("next", "reward"): "r_evaluation_exploration"},
            ),
        )
    trainer.register_op("post_steps", UpdateWeights(collector, update_weights_interval=1))
    trainer.register_op("pre_steps_log", LogScalar())
    trainer.register_op("pre_steps_log", CountFramesLog(frame_skip=frame_skip))
    _log.debug("make_trainer built %s", trainer)
    return trainer
