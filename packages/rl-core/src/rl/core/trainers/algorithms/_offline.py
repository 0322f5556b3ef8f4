"""Offline-RL trainers: IQL and CQL, trained on a dataset or online."""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Mapping
from typing import Any

from .._steppers import DefaultOptimizationStepper
from .._trainer import Trainer
from ._off_policy import OffPolicyTrainer
from ._wiring import policy_network

__all__ = ["CQLTrainer", "IQLTrainer"]

_ARGS_DOC = """
    Args:
        collector: the collector (any iterable of TensorDict batches), or ``None`` to train
            offline on ``replay_buffer`` alone: each round runs ``optim_steps_per_batch``
            steps on samples of the buffer, and ``total_frames`` counts the transitions
            sampled (``optim_steps_per_batch * batch size`` per round).
        total_frames (int): frames to collect, or transitions to sample offline.
        frame_skip (int): frames per environment step.
        optim_steps_per_batch (int): optimization steps per batch (or offline round).
        loss_module: the loss (``actor_network``).
        optimizer (torch.optim.Optimizer, optional): the optimizer.
        logger, clip_grad_norm, clip_norm, progress_bar, seed, save_trainer_interval,
            log_interval, save_trainer_file, checkpoint, checkpoint_rotation,
            checkpoint_metadata, async_collection, log_timings, auto_log_optim_steps: as
            :class:`~rl.core.trainers.Trainer`.
        replay_buffer (optional): the buffer (the dataset, offline); sampled with its own
            ``batch_size``, which it needs.
        enable_logging, log_rewards, log_actions, log_observations (bool): which statistics
            are logged: of each collected batch, or of each sample offline.
        target_net_updater (optional): a ``SoftUpdate`` stepped after each optimization
            step.

    Raises:
        ValueError: ``collector=None`` without a ``replay_buffer`` or with
            ``async_collection``; a replay buffer without ``batch_size``.
        TypeError: ``target_net_updater`` has no ``step()``, ``loss_module`` is not callable.
"""


class IQLTrainer(OffPolicyTrainer):
    """Implicit Q-Learning (Kostrikov et al., 2021, https://arxiv.org/abs/2110.06169).

    Each optimization step samples ``replay_buffer``, minimizes the ``IQLLoss`` entries
    (actor, Q-value, expectile value) and steps ``target_net_updater``. With a collector,
    each collected batch is first written into the buffer and the actor's weights are
    pushed to the collector after it; with ``collector=None`` the run is offline.
    """

    __doc__ += _ARGS_DOC

    def __init__(
        self,
        *,
        collector: Any,
        total_frames: int,
        frame_skip: int,
        optim_steps_per_batch: int,
        loss_module: Any,
        optimizer: Any | None = None,
        logger: Any | None = None,
        clip_grad_norm: bool = True,
        clip_norm: float | None = None,
        progress_bar: bool = True,
        seed: int | None = None,
        save_trainer_interval: int = 10000,
        log_interval: int = 10000,
        save_trainer_file: str | pathlib.Path | None = None,
        checkpoint: Any | None = None,
        checkpoint_rotation: Any | None = None,
        checkpoint_metadata: Callable[[Trainer], Mapping[str, Any]] | None = None,
        replay_buffer: Any | None = None,
        enable_logging: bool = True,
        log_rewards: bool = True,
        log_actions: bool = True,
        log_observations: bool = False,
        target_net_updater: Any | None = None,
        async_collection: bool = False,
        log_timings: bool = False,
        auto_log_optim_steps: bool = True,
    ) -> None:
        super().__init__(
            name=type(self).__name__,
            collector=collector,
            loss_module=loss_module,
            replay_buffer=replay_buffer,
            batch_size=None,
            target_net_updater=target_net_updater,
            require_updater=False,
            weights_source=policy_network(loss_module, "actor_network"),
            allow_offline=True,
            enable_logging=enable_logging,
            log_rewards=log_rewards,
            log_actions=log_actions,
            log_observations=log_observations,
            total_frames=total_frames,
            frame_skip=frame_skip,
            optim_steps_per_batch=optim_steps_per_batch,
            optimizer=optimizer,
            logger=logger,
            clip_grad_norm=clip_grad_norm,
            clip_norm=clip_norm,
            progress_bar=progress_bar,
            seed=seed,
            save_trainer_interval=save_trainer_interval,
            log_interval=log_interval,
            save_trainer_file=save_trainer_file,
            checkpoint=checkpoint,
            checkpoint_rotation=checkpoint_rotation,
            checkpoint_metadata=checkpoint_metadata,
            async_collection=async_collection,
            log_timings=log_timings,
            auto_log_optim_steps=auto_log_optim_steps,
        )


class CQLTrainer(OffPolicyTrainer):
    """Conservative Q-Learning (Kumar et al., 2020, https://arxiv.org/abs/2006.04779).

    The loop of :class:`IQLTrainer` with a ``CQLLoss``: each optimization step minimizes
    ``loss_actor``, ``loss_qvalue``, ``loss_cql`` and ``loss_alpha`` (and
    ``loss_alpha_prime`` when the loss has ``with_lagrange=True``) through a
    :class:`~rl.core.trainers.DefaultOptimizationStepper`; other entries the loss
    returns are logged, not minimized. ``collector=None`` trains offline.
    """

    __doc__ += _ARGS_DOC

    def __init__(
        self,
        *,
        collector: Any,
        total_frames: int,
        frame_skip: int,
        optim_steps_per_batch: int,
        loss_module: Any,
        optimizer: Any | None = None,
        logger: Any | None = None,
        clip_grad_norm: bool = True,
        clip_norm: float | None = None,
        progress_bar: bool = True,
        seed: int | None = None,
        save_trainer_interval: int = 10000,
        log_interval: int = 10000,
        save_trainer_file: str | pathlib.Path | None = None,
        checkpoint: Any | None = None,
        checkpoint_rotation: Any | None = None,
        checkpoint_metadata: Callable[[Trainer], Mapping[str, Any]] | None = None,
        replay_buffer: Any | None = None,
        enable_logging: bool = True,
        log_rewards: bool = True,
        log_actions: bool = True,
        log_observations: bool = False,
        target_net_updater: Any | None = None,
        async_collection: bool = False,
        log_timings: bool = False,
        auto_log_optim_steps: bool = True,
    ) -> None:
        components = ["loss_actor", "loss_qvalue", "loss_cql", "loss_alpha"]
        if getattr(loss_module, "with_lagrange", False):
            components.append("loss_alpha_prime")
        super().__init__(
            name=type(self).__name__,
            collector=collector,
            loss_module=loss_module,
            replay_buffer=replay_buffer,
            batch_size=None,
            target_net_updater=target_net_updater,
            require_updater=False,
            weights_source=policy_network(loss_module, "actor_network"),
            allow_offline=True,
            enable_logging=enable_logging,
            log_rewards=log_rewards,
            log_actions=log_actions,
            log_observations=log_observations,
            total_frames=total_frames,
            frame_skip=frame_skip,
            optim_steps_per_batch=optim_steps_per_batch,
            optimizer=optimizer,
            optimization_stepper=DefaultOptimizationStepper(loss_components=components),
            logger=logger,
            clip_grad_norm=clip_grad_norm,
            clip_norm=clip_norm,
            progress_bar=progress_bar,
            seed=seed,
            save_trainer_interval=save_trainer_interval,
            log_interval=log_interval,
            save_trainer_file=save_trainer_file,
            checkpoint=checkpoint,
            checkpoint_rotation=checkpoint_rotation,
            checkpoint_metadata=checkpoint_metadata,
            async_collection=async_collection,
            log_timings=log_timings,
            auto_log_optim_steps=auto_log_optim_steps,
        )
