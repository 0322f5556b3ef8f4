"""On-policy trainers: :class:`OnPolicyTrainer` and its PPO, A2C and REINFORCE defaults."""

from __future__ import annotations

import pathlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from tensordict import NestedKey, TensorDictBase

from .._hooks_data import ValueEstimatorHook
from .._hooks_optim import LRSchedulerHook, TargetNetUpdaterHook
from .._trainer import Trainer
from ._wiring import (
    check_updater,
    is_callable_loss,
    policy_network,
    register_batch_logging,
    register_replay_buffer,
    register_weight_sync,
    sample_size,
    set_loss_keys,
    warn_prototype,
)

__all__ = ["A2CTrainer", "OnPolicyTrainer", "PPOTrainer", "ReinforceTrainer"]


def _default_gae(name: str, loss_module: Any, gamma: float, lmbda: float) -> Any:
    """The loss's own GAE estimator, built with ``gamma``, ``lmbda`` and standardized
    advantages (``average_gae=True``, as TorchRL's trainers); rl-core builds it through the
    loss (``make_value_estimator``) rather than importing ``rl.objectives``."""
    make = getattr(loss_module, "make_value_estimator", None)
    if not callable(make):
        raise ValueError(
            f"{name} computes GAE with the loss's make_value_estimator(), which "
            f"{type(loss_module).__name__} does not have: pass gae=GAE(...) or add_gae=False"
        )
    make("GAE", gamma=gamma, lmbda=lmbda, average_gae=True)
    return loss_module.value_estimator


class OnPolicyTrainer(Trainer):
    """The training loop shared by on-policy algorithms (PPO, A2C, REINFORCE).

    On top of :class:`~rl.core.trainers.Trainer` it registers, in this order:

    - the advantage estimate: before each epoch (``pre_epoch``) a
      :class:`~rl.core.trainers.ValueEstimatorHook` runs ``gae`` on the collected batch
      (default: the loss's GAE with ``gamma``, ``lmbda`` and standardized advantages), so
      the loss reads ``advantage`` / ``value_target`` computed with the critic as it is at
      the start of the epoch;
    - with a ``replay_buffer``: after the estimate, the batch (flattened) refills the
      buffer, and the optimization sub-batches are the buffer's own mini-batches (iterated
      without replacement: use a ``SamplerWithoutReplacement``); without one, each step
      trains on the whole batch;
    - ``lr_scheduler`` (a :class:`~rl.core.trainers.LRSchedulerHook`, stepped once per
      batch) and ``target_net_updater`` (a :class:`~rl.core.trainers.TargetNetUpdaterHook`)
      when given;
    - the push of ``loss_module.actor_network``'s weights to the collector after each batch
      (or the ``weight_update_map`` paths);
    - with ``enable_logging``: ``done_percentage``, ``r_training``, ``r_max``, ``r_total``
      (sum of ``episode_reward_key``), ``action_norm``, ``obs_norm`` of each batch.

    The trainer's ``reward_key``, ``done_key``, ``terminated_key`` and ``action_key`` are
    set on the loss (``loss_module.set_keys``, for the names it has) and on the estimator.

    Paper links: PPO https://arxiv.org/abs/1707.06347, A2C https://arxiv.org/abs/1602.01783,
    GAE https://arxiv.org/abs/1506.02438.

    Args:
        collector: the collector (any iterable of ``[*B, T]`` TensorDict batches).
        total_frames (int): frames to train for.
        frame_skip (int): frames per environment step.
        optim_steps_per_batch (int): optimization steps per epoch (an epoch also ends when
            the replay buffer's iteration runs out).
        loss_module: the loss (``ClipPPOLoss``, ``A2CLoss``, ``ReinforceLoss``...); it has an
            ``actor_network`` and, for the default GAE, ``make_value_estimator``.
        optimizer (torch.optim.Optimizer, optional): the optimizer.
        lr_scheduler (torch.optim.lr_scheduler.LRScheduler, optional): stepped once per
            collected batch.
        target_net_updater (optional): a ``SoftUpdate`` / ``HardUpdate`` stepped after each
            optimization step.
        logger, clip_grad_norm, clip_norm, progress_bar, seed, save_trainer_interval,
            log_interval, save_trainer_file, checkpoint, checkpoint_rotation,
            checkpoint_metadata, async_collection, log_timings, auto_log_optim_steps: as
            :class:`~rl.core.trainers.Trainer`.
        num_epochs (int, optional): passes over each batch; defaults to the algorithm's
            (4 for PPO, 1 for A2C and REINFORCE).
        replay_buffer (optional): the buffer the batches are split into mini-batches with;
            it needs a ``batch_size`` (the mini-batch size).
        batch_size (int, optional): unused: the mini-batch size is the replay buffer's own
            ``batch_size``. Passing one warns.
        gamma (float): GAE discount. Defaults to ``0.99``.
        lmbda (float): GAE lambda. Defaults to ``0.95``.
        enable_logging, log_rewards, log_actions, log_observations (bool): which batch
            statistics are logged. Defaults to ``True``, ``True``, ``True``, ``False``.
        add_gae (bool): compute the advantage before each epoch. Defaults to ``True``.
        gae (Callable, optional): the estimator (e.g. ``rl.objectives.value.GAE``); must not
            be given with ``add_gae=False``.
        weight_update_map (dict[str, str], optional): ``{collector destination: trainer
            attribute path}`` for the weights pushed to the collector.
        done_key, terminated_key, reward_key, episode_reward_key, action_key,
            observation_key (NestedKey): the keys of the data.

    Raises:
        ValueError: ``gae`` given with ``add_gae=False``; no default GAE can be made; a
            replay buffer without ``batch_size``; see also :class:`Trainer`. (With
            ``async_collection`` there is no collected batch: the estimate is skipped, so
            compute it in the replay buffer.)
        TypeError: ``loss_module`` is not callable, ``gae`` is not callable, or
            ``target_net_updater`` has no ``step()``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.core.trainers.algorithms import PPOTrainer
        >>> class Loss(torch.nn.Module):  # a stand-in for ClipPPOLoss
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.actor_network = torch.nn.Linear(1, 1)
        ...     def forward(self, td):
        ...         return TensorDict(loss_objective=(td["advantage"] * self.actor_network.weight).mean())
        >>> def advantage(td):
        ...     return td.set("advantage", td["next", "reward"])
        >>> batches = [TensorDict({("next", "reward"): torch.ones(4, 1)}, [4]) for _ in range(2)]
        >>> loss = Loss()
        >>> trainer = PPOTrainer(collector=batches, total_frames=8, frame_skip=1,
        ...     optim_steps_per_batch=1, loss_module=loss, gae=advantage, enable_logging=False,
        ...     optimizer=torch.optim.SGD(loss.parameters(), lr=0.1), progress_bar=False)
        >>> trainer.train()
        >>> trainer._optim_count  # 2 batches x 4 epochs x 1 step
        8
    """

    #: the name used in messages, and the epochs per batch when ``num_epochs`` is ``None``
    _algo_name: str = "OnPolicyTrainer"
    _default_num_epochs: int = 1

    def __init__(
        self,
        *,
        collector: Any,
        total_frames: int,
        frame_skip: int,
        optim_steps_per_batch: int,
        loss_module: Any,
        optimizer: Any | None = None,
        lr_scheduler: Any | None = None,
        target_net_updater: Any | None = None,
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
        num_epochs: int | None = None,
        replay_buffer: Any | None = None,
        batch_size: int | None = None,
        gamma: float = 0.99,
        lmbda: float = 0.95,
        enable_logging: bool = True,
        log_rewards: bool = True,
        log_actions: bool = True,
        log_observations: bool = False,
        async_collection: bool = False,
        add_gae: bool = True,
        gae: Callable[[TensorDictBase], TensorDictBase] | None = None,
        weight_update_map: dict[str, str] | None = None,
        log_timings: bool = False,
        auto_log_optim_steps: bool = True,
        done_key: NestedKey = "done",
        terminated_key: NestedKey = "terminated",
        reward_key: NestedKey = "reward",
        episode_reward_key: NestedKey = "reward",
        action_key: NestedKey = "action",
        observation_key: NestedKey = "observation",
    ) -> None:
        name = type(self).__name__
        warn_prototype(name)
        is_callable_loss(name, loss_module)
        check_updater(name, target_net_updater, required=False)
        if not add_gae and gae is not None:
            raise ValueError(f"{name}: gae must not be given when add_gae=False")
        if gae is not None and not callable(gae):
            raise TypeError(
                f"{name} gae must be callable on a TensorDict (a GAE module), got "
                f"{type(gae).__name__}"
            )
        if batch_size is not None:
            warnings.warn(
                f"{name}: batch_size is unused by on-policy trainers; the mini-batch size is "
                "the replay buffer's own batch_size",
                UserWarning,
                stacklevel=2,
            )
        if replay_buffer is not None:
            sample_size(name, replay_buffer, None)
        super().__init__(
            collector=collector,
            total_frames=total_frames,
            frame_skip=frame_skip,
            optim_steps_per_batch=optim_steps_per_batch,
            loss_module=loss_module,
            optimizer=optimizer,
            logger=logger,
            clip_grad_norm=clip_grad_norm,
            clip_norm=clip_norm,
            progress_bar=progress_bar,
            seed=seed,
            save_trainer_interval=save_trainer_interval,
            log_interval=log_interval,
            save_trainer_file=save_trainer_file,
            replay_buffer=replay_buffer,
            target_net_updater=target_net_updater,
            checkpoint=checkpoint,
            checkpoint_rotation=checkpoint_rotation,
            checkpoint_metadata=checkpoint_metadata,
            num_epochs=self._default_num_epochs if num_epochs is None else num_epochs,
            async_collection=async_collection,
            log_timings=log_timings,
            auto_log_optim_steps=auto_log_optim_steps,
        )
        self.gamma = gamma
        self.lmbda = lmbda
        self.done_key = done_key
        self.terminated_key = terminated_key
        self.reward_key = reward_key
        self.episode_reward_key = episode_reward_key
        self.action_key = action_key
        self.observation_key = observation_key

        set_loss_keys(
            loss_module, reward=reward_key, done=done_key, terminated=terminated_key,
            action=action_key,
        )  # fmt: skip
        self.gae = None
        if add_gae:
            if gae is None:
                gae = _default_gae(name, loss_module, gamma, lmbda)
            set_loss_keys(gae, reward=reward_key, done=done_key, terminated=terminated_key)
            self.gae = gae
            ValueEstimatorHook(gae).register(self)
        if replay_buffer is not None:
            sampler = getattr(replay_buffer, "sampler", None)
            if not async_collection and type(sampler).__name__ != "SamplerWithoutReplacement":
                warnings.warn(
                    f"{name}: the replay buffer's sampler is {type(sampler).__name__}; "
                    f"{self._algo_name} expects a SamplerWithoutReplacement (each epoch is "
                    "one pass over the batch)",
                    UserWarning,
                    stacklevel=2,
                )
            register_replay_buffer(
                self,
                replay_buffer,
                batch_size=None,
                collect_into_buffer=not async_collection,
                on_policy=True,
            )
        if lr_scheduler is not None:
            LRSchedulerHook(lr_scheduler).register(self)
        if target_net_updater is not None:
            TargetNetUpdaterHook(target_net_updater).register(self)
        register_weight_sync(
            self, collector, policy_network(loss_module, "actor_network"), weight_update_map
        )

        self.enable_logging = enable_logging
        self.log_rewards = log_rewards
        self.log_actions = log_actions
        self.log_observations = log_observations
        if enable_logging:
            register_batch_logging(
                self,
                on_batches=not async_collection,
                done_key=done_key,
                reward_key=reward_key,
                episode_reward_key=episode_reward_key,
                action_key=action_key,
                observation_key=observation_key,
                log_rewards=log_rewards,
                log_actions=log_actions,
                log_observations=log_observations,
                total_reduction="sum",
                utd_ratio=False,
            )


class PPOTrainer(OnPolicyTrainer):
    """PPO (Schulman et al., 2017, https://arxiv.org/abs/1707.06347): an
    :class:`OnPolicyTrainer` running 4 epochs over each batch by default.

    Pair it with ``ClipPPOLoss`` / ``KLPENPPOLoss`` and a replay buffer of the batch's size
    with a ``SamplerWithoutReplacement`` and the mini-batch size as its ``batch_size``; see
    :class:`OnPolicyTrainer` for the arguments.
    """

    _algo_name = "PPO"
    _default_num_epochs = 4


class A2CTrainer(OnPolicyTrainer):
    """A2C (Mnih et al., 2016, https://arxiv.org/abs/1602.01783): an
    :class:`OnPolicyTrainer` making one pass over each batch by default (``A2CLoss``; its
    entropy bonus is set on the loss). See :class:`OnPolicyTrainer` for the arguments.
    """

    _algo_name = "A2C"
    _default_num_epochs = 1


class ReinforceTrainer(OnPolicyTrainer):
    """REINFORCE with a learned baseline (Williams, 1992): an :class:`OnPolicyTrainer`
    making one pass over each batch by default, with GAE advantages from the critic
    (``ReinforceLoss``). See :class:`OnPolicyTrainer` for the arguments.
    """

    _algo_name = "REINFORCE"
    _default_num_epochs = 1
