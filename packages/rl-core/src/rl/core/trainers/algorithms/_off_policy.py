"""Off-policy trainers with a replay buffer and target networks: the shared base, SAC and
DDPG."""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Mapping
from typing import Any, Literal

from tensordict import NestedKey

from .._trainer import Trainer
from ._wiring import (
    check_updater,
    is_callable_loss,
    offline_collector,
    policy_network,
    register_batch_logging,
    register_off_policy,
    sample_size,
    set_loss_keys,
    warn_prototype,
)

__all__ = ["DDPGTrainer", "SACTrainer"]


class OffPolicyTrainer(Trainer):
    """The wiring shared by the off-policy algorithm trainers (not public: each algorithm
    trainer declares TorchRL's arguments and calls this constructor).

    Registers, on top of :class:`Trainer`: the replay buffer (each collected batch written
    at ``pre_epoch``, unless the collector writes it itself with ``async_collection``; each
    optimization step samples from it), the :class:`TargetNetUpdaterHook` after each
    optimization step, the push of the policy's weights to the collector after each batch,
    and the batch statistics (``done_percentage``, ``r_training``, ``r_max``, ``r_total``,
    ``action_norm``, ``obs_norm``) with the update-to-data ratio.

    With ``allow_offline`` and ``collector=None`` the run is offline: there is nothing to
    collect, each round runs ``optim_steps_per_batch`` steps on samples of the replay
    buffer (the dataset), ``total_frames`` counts the transitions sampled, and the
    statistics are those of the samples.
    """

    def __init__(
        self,
        *,
        name: str,
        collector: Any,
        loss_module: Any,
        replay_buffer: Any,
        batch_size: int | None,
        target_net_updater: Any,
        require_updater: bool,
        weights_source: Any,
        allow_offline: bool = False,
        update_priority: bool = True,
        enable_logging: bool = True,
        log_rewards: bool = True,
        log_actions: bool = True,
        log_observations: bool = False,
        done_key: NestedKey = "done",
        terminated_key: NestedKey = "terminated",
        reward_key: NestedKey = "reward",
        episode_reward_key: NestedKey = "reward_sum",
        action_key: NestedKey | None = "action",
        observation_key: NestedKey = "observation",
        loss_keys: Mapping[str, NestedKey] | None = None,
        total_reduction: Literal["mean", "sum", "min", "max"] = "max",
        **trainer_kwargs: Any,
    ) -> None:
        warn_prototype(name)
        is_callable_loss(name, loss_module)
        check_updater(name, target_net_updater, required=require_updater)
        async_collection = trainer_kwargs.get("async_collection", False)
        offline = allow_offline and collector is None
        if collector is None and not offline:
            raise ValueError(
                f"{name} needs a collector (any iterable of TensorDict batches), got None"
            )
        if offline:
            if async_collection:
                raise ValueError(
                    f"{name}: async_collection=True needs a collector; collector=None "
                    "trains offline on the replay buffer"
                )
            if trainer_kwargs.get("total_frames") is None:
                # the offline rounds never run out: only the frame budget ends the run
                raise ValueError(
                    f"{name} offline training (collector=None) needs total_frames, the "
                    "transitions to sample from the replay buffer, got None"
                )
            collector = offline_collector(
                name, replay_buffer, trainer_kwargs.get("optim_steps_per_batch"), batch_size
            )
        elif replay_buffer is not None:
            sample_size(name, replay_buffer, batch_size)
        super().__init__(
            collector=collector,
            loss_module=loss_module,
            replay_buffer=replay_buffer,
            target_net_updater=target_net_updater,
            batch_size=batch_size,
            **trainer_kwargs,
        )
        self.offline = offline
        self.done_key = done_key
        self.terminated_key = terminated_key
        self.reward_key = reward_key
        self.episode_reward_key = episode_reward_key
        self.action_key = action_key
        self.observation_key = observation_key
        if loss_keys:
            set_loss_keys(loss_module, **loss_keys)
        register_off_policy(
            self,
            replay_buffer=replay_buffer,
            batch_size=batch_size,
            target_net_updater=target_net_updater,
            weights_source=None if offline else weights_source,
            collect_into_buffer=not (async_collection or offline),
            update_priority=update_priority,
        )
        self.enable_logging = enable_logging
        self.log_rewards = log_rewards
        self.log_actions = log_actions
        self.log_observations = log_observations
        if enable_logging:
            register_batch_logging(
                self,
                on_batches=not (async_collection or offline),
                done_key=done_key,
                reward_key=reward_key,
                # a dataset's samples have no running episode return to log
                episode_reward_key=None if offline else episode_reward_key,
                action_key=action_key if log_actions else None,
                observation_key=observation_key,
                log_rewards=log_rewards,
                log_actions=log_actions,
                log_observations=log_observations,
                total_reduction=total_reduction,
                utd_ratio=replay_buffer is not None,
            )


class SACTrainer(OffPolicyTrainer):
    """Soft Actor-Critic (Haarnoja et al., 2018, https://arxiv.org/abs/1801.01290).

    Each collected batch is written into ``replay_buffer`` (flattened); each of the
    ``optim_steps_per_batch`` optimization steps samples from it, minimizes the
    ``SACLoss`` entries and steps ``target_net_updater`` (a ``SoftUpdate``); after the batch
    the actor's weights (``loss_module.actor_network``) are pushed to the collector. The
    trainer's ``reward_key``, ``done_key``, ``terminated_key`` and ``action_key`` are set on
    the loss. Batch statistics are logged with ``enable_logging``; ``r_total`` is the max
    of ``("next", episode_reward_key)`` (a ``RewardSum`` transform writes ``reward_sum``).

    Args:
        collector: the collector (any iterable of TensorDict batches).
        total_frames (int): frames to collect.
        frame_skip (int): frames per environment step.
        optim_steps_per_batch (int): optimization steps per collected batch.
        loss_module: the SAC loss (``actor_network``, ``set_keys``).
        optimizer (torch.optim.Optimizer, optional): the optimizer of every loss parameter.
        logger, clip_grad_norm, clip_norm, progress_bar, seed, save_trainer_interval,
            log_interval, save_trainer_file, checkpoint, checkpoint_rotation,
            checkpoint_metadata, learner_backend, learner_backend_options,
            learner_poll_interval, async_collection, log_timings, auto_log_optim_steps: as
            :class:`~rl.core.trainers.Trainer`.
        replay_buffer (optional): the buffer; it needs a ``batch_size`` unless
            ``batch_size`` is given.
        batch_size (int, optional): the sample size of each step; defaults to iterating
            over the buffer with its own ``batch_size``.
        enable_logging, log_rewards, log_actions, log_observations (bool): which batch
            statistics are logged.
        target_net_updater: the ``SoftUpdate`` of the loss's target networks (required).
        done_key, terminated_key, reward_key, episode_reward_key, action_key,
            observation_key (NestedKey): the keys of the data.

    Raises:
        ValueError: no ``target_net_updater``; a replay buffer without any sample size;
            see also :class:`~rl.core.trainers.Trainer`.
        TypeError: ``target_net_updater`` has no ``step()``, ``loss_module`` is not callable.
    """

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
        batch_size: int | None = None,
        learner_backend: Literal["local", "ray"] = "local",
        learner_backend_options: dict[str, Any] | None = None,
        learner_poll_interval: float = 0.05,
        enable_logging: bool = True,
        log_rewards: bool = True,
        log_actions: bool = True,
        log_observations: bool = False,
        target_net_updater: Any | None = None,
        async_collection: bool = False,
        log_timings: bool = False,
        auto_log_optim_steps: bool = True,
        done_key: NestedKey = "done",
        terminated_key: NestedKey = "terminated",
        reward_key: NestedKey = "reward",
        episode_reward_key: NestedKey = "reward_sum",
        action_key: NestedKey = "action",
        observation_key: NestedKey = "observation",
    ) -> None:
        super().__init__(
            name=type(self).__name__,
            collector=collector,
            loss_module=loss_module,
            replay_buffer=replay_buffer,
            batch_size=batch_size,
            target_net_updater=target_net_updater,
            require_updater=True,
            weights_source=policy_network(loss_module, "actor_network"),
            enable_logging=enable_logging,
            log_rewards=log_rewards,
            log_actions=log_actions,
            log_observations=log_observations,
            done_key=done_key,
            terminated_key=terminated_key,
            reward_key=reward_key,
            episode_reward_key=episode_reward_key,
            action_key=action_key,
            observation_key=observation_key,
            loss_keys=dict(
                reward=reward_key, done=done_key, terminated=terminated_key, action=action_key
            ),
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
            learner_backend=learner_backend,
            learner_backend_options=learner_backend_options,
            learner_poll_interval=learner_poll_interval,
            async_collection=async_collection,
            log_timings=log_timings,
            auto_log_optim_steps=auto_log_optim_steps,
        )


class DDPGTrainer(OffPolicyTrainer):
    """Deep Deterministic Policy Gradient (Lillicrap et al., 2015,
    https://arxiv.org/abs/1509.02971).

    The same loop as :class:`SACTrainer` with a ``DDPGLoss``: replay buffer written with
    each batch and sampled at each step, ``target_net_updater`` (a ``SoftUpdate``) stepped
    after each optimization step, the actor's weights pushed to the collector after each
    batch. ``reward_key``, ``done_key`` and ``terminated_key`` are set on the loss. The
    arguments are :class:`SACTrainer`'s.

    Raises:
        ValueError: no ``target_net_updater``; a replay buffer without any sample size.
        TypeError: ``target_net_updater`` has no ``step()``, ``loss_module`` is not callable.
    """

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
        batch_size: int | None = None,
        learner_backend: Literal["local", "ray"] = "local",
        learner_backend_options: dict[str, Any] | None = None,
        learner_poll_interval: float = 0.05,
        enable_logging: bool = True,
        log_rewards: bool = True,
        log_actions: bool = True,
        log_observations: bool = False,
        target_net_updater: Any | None = None,
        async_collection: bool = False,
        log_timings: bool = False,
        auto_log_optim_steps: bool = True,
        done_key: NestedKey = "done",
        terminated_key: NestedKey = "terminated",
        reward_key: NestedKey = "reward",
        episode_reward_key: NestedKey = "reward_sum",
        action_key: NestedKey = "action",
        observation_key: NestedKey = "observation",
    ) -> None:
        super().__init__(
            name=type(self).__name__,
            collector=collector,
            loss_module=loss_module,
            replay_buffer=replay_buffer,
            batch_size=batch_size,
            target_net_updater=target_net_updater,
            require_updater=True,
            weights_source=policy_network(loss_module, "actor_network"),
            enable_logging=enable_logging,
            log_rewards=log_rewards,
            log_actions=log_actions,
            log_observations=log_observations,
            done_key=done_key,
            terminated_key=terminated_key,
            reward_key=reward_key,
            episode_reward_key=episode_reward_key,
            action_key=action_key,
            observation_key=observation_key,
            loss_keys=dict(reward=reward_key, done=done_key, terminated=terminated_key),
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
            learner_backend=learner_backend,
            learner_backend_options=learner_backend_options,
            learner_poll_interval=learner_poll_interval,
            async_collection=async_collection,
            log_timings=log_timings,
            auto_log_optim_steps=auto_log_optim_steps,
        )
