"""DQN: the value-based off-policy trainer (single- and multi-agent)."""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Mapping
from typing import Any, Literal

from tensordict import NestedKey, TensorDictBase
from tensordict.nn import TensorDictSequential

from .._trainer import Trainer, TrainerHookBase
from ._off_policy import OffPolicyTrainer
from ._wiring import policy_network, register_batch_logging

__all__ = ["DQNTrainer"]

_MIXING_STRATEGIES = (None, "qmix", "vdn", "iql")


class _GreedyAnnealer(TrainerHookBase):
    """Steps an epsilon-greedy module by the frames collected since its last call
    (``greedy_module.step(frames)``), once per batch (``post_steps``); the frame count it
    has reached goes into the trainer's checkpoints."""

    def __init__(self, trainer: Trainer, greedy_module: Any) -> None:
        self.trainer = trainer
        self.greedy_module = greedy_module
        self.last_frames = 0

    def __call__(self) -> None:
        delta = self.trainer.collected_frames - self.last_frames
        if delta > 0:
            self.greedy_module.step(delta)
            self.last_frames = self.trainer.collected_frames

    def state_dict(self) -> dict[str, Any]:
        return {"greedy_last_frames": self.last_frames}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.last_frames = int(state_dict["greedy_last_frames"])

    def register(self, trainer: Trainer, name: str = "greedy_annealer") -> None:
        trainer.register_op("post_steps", self)
        trainer.register_module(name, self)


class DQNTrainer(OffPolicyTrainer):
    """Deep Q-Network (Mnih et al., 2015, https://www.nature.com/articles/nature14236).

    Each collected batch is written into ``replay_buffer``; each optimization step samples
    from it, minimizes the ``DQNLoss`` and steps ``target_net_updater`` (typically a
    ``HardUpdate``); after each batch the Q-network's weights
    (``loss_module.value_network``, or ``local_value_network`` for the multi-agent
    losses) are pushed to the collector. With a ``greedy_module`` (an ``EGreedyModule``)
    its epsilon is annealed by the frames collected after each batch, and the pushed
    weights are those of ``TensorDictSequential(value_network, greedy_module)``.

    For multi-agent data, ``mixing_strategy="qmix"`` or ``"vdn"`` averages the per-agent
    ``("next", reward_key)`` and ``("next", episode_reward_key)`` over the agent dimension
    (``-2``) into ``aggregated_reward_key`` / ``aggregated_episode_reward_key`` (required
    then) before the batch is stored, and the statistics log those.

    Args:
        collector, total_frames, frame_skip, optim_steps_per_batch, loss_module, optimizer,
            logger, clip_grad_norm, clip_norm, progress_bar, seed, save_trainer_interval,
            log_interval, save_trainer_file, checkpoint, checkpoint_rotation,
            checkpoint_metadata, replay_buffer, batch_size, learner_backend,
            learner_backend_options, learner_poll_interval, enable_logging, log_rewards,
            log_observations, async_collection, log_timings, auto_log_optim_steps: as
            :class:`SACTrainer` (no action statistics are logged).
        target_net_updater: the target network's updater (required).
        greedy_module (optional): an epsilon-greedy module with ``step(frames)``.
        mixing_strategy (str, optional): ``"qmix"``, ``"vdn"``, ``"iql"`` or ``None``.
        done_key, terminated_key, reward_key, episode_reward_key, action_key,
            observation_key (NestedKey): the keys of the data.
        aggregated_reward_key, aggregated_episode_reward_key (NestedKey, optional): where
            the agent-averaged rewards go with ``"qmix"`` / ``"vdn"``.

    Raises:
        ValueError: no ``target_net_updater``; an unknown ``mixing_strategy``; ``"qmix"`` /
            ``"vdn"`` without both aggregated keys; a replay buffer without sample size.
        AttributeError: the loss has neither ``value_network`` nor ``local_value_network``
            (with a collector to push weights to).
        TypeError: ``greedy_module`` has no ``step()``; ``target_net_updater`` has no
            ``step()``.
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
        log_observations: bool = False,
        target_net_updater: Any | None = None,
        greedy_module: Any | None = None,
        async_collection: bool = False,
        log_timings: bool = False,
        auto_log_optim_steps: bool = True,
        mixing_strategy: str | None = None,
        done_key: NestedKey = "done",
        terminated_key: NestedKey = "terminated",
        reward_key: NestedKey = "reward",
        episode_reward_key: NestedKey = "reward_sum",
        aggregated_reward_key: NestedKey | None = None,
        aggregated_episode_reward_key: NestedKey | None = None,
        action_key: NestedKey = "action",
        observation_key: NestedKey = "observation",
    ) -> None:
        name = type(self).__name__
        if mixing_strategy not in _MIXING_STRATEGIES:
            raise ValueError(
                f"{name} mixing_strategy must be one of {list(_MIXING_STRATEGIES)}, got "
                f"{mixing_strategy!r}"
            )
        mixed = mixing_strategy in ("qmix", "vdn")
        if mixed and (aggregated_reward_key is None or aggregated_episode_reward_key is None):
            raise ValueError(
                f"{name}: aggregated_reward_key and aggregated_episode_reward_key must be "
                f"given with mixing_strategy={mixing_strategy!r}"
            )
        if greedy_module is not None and not callable(getattr(greedy_module, "step", None)):
            raise TypeError(
                f"{name} greedy_module must have a step(frames) method (an EGreedyModule), "
                f"got {type(greedy_module).__name__}"
            )
        q_network = policy_network(loss_module, "value_network", "local_value_network")
        if q_network is None and callable(getattr(collector, "update_policy_weights_", None)):
            raise AttributeError(
                f"{name}: loss_module must expose value_network or local_value_network to "
                f"send the policy weights to the collector ({type(loss_module).__name__} "
                "has neither)"
            )
        weights_source = q_network
        if greedy_module is not None and q_network is not None:
            weights_source = TensorDictSequential(q_network, greedy_module)
        self.mixing_strategy = mixing_strategy
        self.aggregated_reward_key = aggregated_reward_key
        self.aggregated_episode_reward_key = aggregated_episode_reward_key
        self.greedy_module = greedy_module
        super().__init__(
            name=name,
            collector=collector,
            loss_module=loss_module,
            replay_buffer=replay_buffer,
            batch_size=batch_size,
            target_net_updater=target_net_updater,
            require_updater=True,
            weights_source=weights_source,
            enable_logging=False,
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
        self.done_key = done_key
        self.terminated_key = terminated_key
        self.reward_key = reward_key
        self.episode_reward_key = episode_reward_key
        self.action_key = action_key
        self.observation_key = observation_key
        if greedy_module is not None:
            _GreedyAnnealer(self, greedy_module).register(self)
        if mixed:
            self.register_op("batch_process", self._aggregate_agent_rewards)
        self.enable_logging = enable_logging
        self.log_rewards = log_rewards
        self.log_observations = log_observations
        if enable_logging:
            register_batch_logging(
                self,
                on_batches=not async_collection,
                done_key=done_key,
                reward_key=aggregated_reward_key if mixed else reward_key,
                episode_reward_key=aggregated_episode_reward_key if mixed else episode_reward_key,
                action_key=None,
                observation_key=observation_key,
                log_rewards=log_rewards,
                log_actions=False,
                log_observations=log_observations,
                total_reduction="max",
                utd_ratio=replay_buffer is not None,
            )

    def _aggregate_agent_rewards(self, batch: TensorDictBase) -> TensorDictBase:
        """Writes the agent-averaged rewards (mean over the agent dimension, ``-2``)."""
        for key, aggregated in (
            (self.reward_key, self.aggregated_reward_key),
            (self.episode_reward_key, self.aggregated_episode_reward_key),
        ):
            value = batch.get(("next", key), None)
            if value is not None:
                batch.set(("next", aggregated), value.mean(-2))
        return batch
