"""TD3: the trainer and its delayed actor/critic optimization step."""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Mapping
from typing import Any, Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictSequential

from .._hooks_optim import clip_gradients
from .._steppers import OptimizationStepper
from .._trainer import Trainer
from ._off_policy import OffPolicyTrainer
from ._wiring import policy_network

__all__ = ["TD3OptimizationStepper", "TD3Trainer"]


class TD3OptimizationStepper(OptimizationStepper):
    """One TD3 optimization step: the critic every step, the actor every
    ``policy_update_delay`` steps, each with its own optimizer.

    Runs ``loss_module.value_loss(sub_batch)`` (backward, clip, critic step), then, on
    every ``policy_update_delay``-th call, ``loss_module.actor_loss(sub_batch)`` (backward,
    clip, actor step). Gradients are clipped with the trainer's ``clip_grad_norm`` /
    ``clip_norm``. When the trainer's replay buffer is prioritized, the priorities are
    updated from the critic's ``td_error`` (max over the Q-networks). Returns the detached
    ``critic_loss_key`` and ``actor_loss_key`` losses (the actor's is 0 on the steps it
    skips).

    Args:
        optimizer_actor (torch.optim.Optimizer): the actor's optimizer.
        optimizer_critic (torch.optim.Optimizer): the critics' optimizer.

    Keyword Args:
        policy_update_delay (int): steps between two actor updates. Defaults to ``2``.
        zero_grad_set_to_none (bool): ``zero_grad(set_to_none=...)``. Defaults to ``True``.
        actor_loss_key (str): the name of the actor loss returned. Defaults to
            ``"loss_actor"``.
        critic_loss_key (str): the name of the critic loss returned. Defaults to
            ``"loss_qvalue"``.

    Raises:
        ValueError: ``policy_update_delay`` is not a positive int.
    """

    def __init__(
        self,
        optimizer_actor: torch.optim.Optimizer,
        optimizer_critic: torch.optim.Optimizer,
        *,
        policy_update_delay: int = 2,
        zero_grad_set_to_none: bool = True,
        actor_loss_key: str = "loss_actor",
        critic_loss_key: str = "loss_qvalue",
    ) -> None:
        if (
            isinstance(policy_update_delay, bool)
            or not isinstance(policy_update_delay, int)
            or policy_update_delay < 1
        ):
            raise ValueError(
                "TD3OptimizationStepper policy_update_delay must be a positive int, got "
                f"{policy_update_delay!r}"
            )
        self.optimizer_actor = optimizer_actor
        self.optimizer_critic = optimizer_critic
        self.policy_update_delay = policy_update_delay
        self.zero_grad_set_to_none = zero_grad_set_to_none
        self.actor_loss_key = actor_loss_key
        self.critic_loss_key = critic_loss_key
        self._update_counter = 0

    def state_dict(self) -> dict[str, Any]:
        return {
            "update_counter": self._update_counter,
            "optimizer_actor": self.optimizer_actor.state_dict(),
            "optimizer_critic": self.optimizer_critic.state_dict(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._update_counter = int(state_dict.get("update_counter", 0))
        self.optimizer_actor.load_state_dict(state_dict["optimizer_actor"])
        self.optimizer_critic.load_state_dict(state_dict["optimizer_critic"])

    def _step(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor, trainer: Any) -> None:
        loss.backward()
        params = [p for group in optimizer.param_groups for p in group["params"]]
        clip_gradients(params, trainer.clip_grad_norm, trainer.clip_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=self.zero_grad_set_to_none)

    def step(self, trainer: Trainer, sub_batch: TensorDictBase) -> TensorDictBase:
        self._update_counter += 1
        q_loss, q_metadata = trainer.compute_loss(sub_batch, method="value_loss")
        self._step(self.optimizer_critic, q_loss, trainer)
        actor_loss = q_loss.detach().new_zeros(())
        if self._update_counter % self.policy_update_delay == 0:
            actor_loss, _ = trainer.compute_loss(sub_batch, method="actor_loss")
            self._step(self.optimizer_actor, actor_loss, trainer)
        buffer = getattr(trainer, "replay_buffer", None)
        update = getattr(buffer, "update_tensordict_priority", None)
        td_error = q_metadata.get("td_error") if isinstance(q_metadata, Mapping) else None
        if callable(update) and td_error is not None and getattr(buffer, "_prioritized", False):
            tensor_keys = getattr(trainer.loss_module, "tensor_keys", None)
            priority_key = getattr(tensor_keys, "priority", "td_error")
            td_error = td_error.detach()
            if td_error.ndim > len(sub_batch.batch_size):  # one row per Q-network
                td_error = td_error.max(0).values
            sub_batch.set(priority_key, td_error)
            update(sub_batch)
        return TensorDict(
            {self.critic_loss_key: q_loss.detach(), self.actor_loss_key: actor_loss.detach()},
            batch_size=[],
        )


class TD3Trainer(OffPolicyTrainer):
    """Twin Delayed DDPG (Fujimoto et al., 2018, https://arxiv.org/abs/1802.09477).

    The off-policy loop of :class:`SACTrainer` (replay buffer written with each batch and
    sampled at each step, ``target_net_updater`` stepped after each optimization step,
    policy weights pushed to the collector after each batch) with a ``TD3Loss``. Pass a
    :class:`TD3OptimizationStepper` as ``optimization_stepper`` for TD3's delayed actor
    updates (the actor's optimizer every ``policy_update_delay`` steps, the critics'
    every step; it also updates the priorities of a prioritized buffer); with only an
    ``optimizer``, every step minimizes the sum of the loss entries. With an
    ``exploration_module`` the weights pushed to the collector are those of
    ``TensorDictSequential(actor_network, exploration_module)`` (its annealed noise
    scale included).

    Args:
        collector, total_frames, frame_skip, optim_steps_per_batch, loss_module, optimizer,
            logger, clip_grad_norm, clip_norm, progress_bar, seed, save_trainer_interval,
            log_interval, save_trainer_file, checkpoint, checkpoint_rotation,
            checkpoint_metadata, replay_buffer, batch_size, learner_backend,
            learner_backend_options, learner_poll_interval, enable_logging, log_rewards,
            log_actions, log_observations, async_collection, log_timings,
            auto_log_optim_steps: as :class:`SACTrainer`.
        optimization_stepper (TD3OptimizationStepper, optional): the delayed update.
        num_epochs (int): passes over each batch. Defaults to ``1``.
        target_net_updater: the ``SoftUpdate`` of the target networks (required).
        exploration_module (torch.nn.Module, optional): the exploration noise module the
            collector's policy ends with.

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
        optimization_stepper: TD3OptimizationStepper | None = None,
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
        num_epochs: int = 1,
        replay_buffer: Any | None = None,
        batch_size: int | None = None,
        learner_backend: Literal["local", "ray"] = "local",
        learner_backend_options: dict[str, Any] | None = None,
        learner_poll_interval: float = 0.05,
        enable_logging: bool = True,
        log_rewards: bool = True,
        log_actions: bool = True,
        log_observations: bool = False,
        async_collection: bool = False,
        log_timings: bool = False,
        auto_log_optim_steps: bool = True,
        target_net_updater: Any,
        exploration_module: torch.nn.Module | None = None,
    ) -> None:
        actor = policy_network(loss_module, "actor_network")
        weights_source = actor
        if exploration_module is not None and actor is not None:
            weights_source = TensorDictSequential(actor, exploration_module)
        self.exploration_module = exploration_module
        super().__init__(
            name=type(self).__name__,
            collector=collector,
            loss_module=loss_module,
            replay_buffer=replay_buffer,
            batch_size=batch_size,
            target_net_updater=target_net_updater,
            require_updater=True,
            weights_source=weights_source,
            # a TD3OptimizationStepper updates the priorities from the critic's td_error
            update_priority=optimization_stepper is None,
            enable_logging=enable_logging,
            log_rewards=log_rewards,
            log_actions=log_actions,
            log_observations=log_observations,
            episode_reward_key="reward",
            total_reduction="sum",
            total_frames=total_frames,
            frame_skip=frame_skip,
            optim_steps_per_batch=optim_steps_per_batch,
            optimizer=optimizer,
            optimization_stepper=optimization_stepper,
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
            num_epochs=num_epochs,
            learner_backend=learner_backend,
            learner_backend_options=learner_backend_options,
            learner_poll_interval=learner_poll_interval,
            async_collection=async_collection,
            log_timings=log_timings,
            auto_log_optim_steps=auto_log_optim_steps,
        )
