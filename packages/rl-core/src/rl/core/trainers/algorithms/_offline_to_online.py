"""Offline pre-training handed over to online fine-tuning: the SAC trainer on an
``OfflineToOnlineReplayBuffer`` and its two hooks."""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Mapping
from typing import Any

from tensordict import NestedKey, TensorDictBase

from .._trainer import Trainer, TrainerHookBase
from ._off_policy import SACTrainer

__all__ = ["OfflineToOnlineAnnealHook", "OfflineToOnlineReplayBufferHook", "OfflineToOnlineTrainer"]

_MASK = ("collector", "mask")


def _is_offline_to_online(buffer: Any) -> bool:
    return all(
        hasattr(buffer, attr)
        for attr in ("offline_buffer", "online_buffer", "anneal", "extend", "sample")
    )


class OfflineToOnlineReplayBufferHook(TrainerHookBase):
    """Writes each collected batch into an ``OfflineToOnlineReplayBuffer``'s online part
    (``pre_epoch``) and samples the mixed offline/online batches (``process_optim_batch``).

    The batch is flattened (valid steps only when it carries ``("collector", "mask")``) and,
    with ``align_to_offline_keys``, reduced to the keys of the offline dataset (read from one
    sample of it), so that the offline and online samples concatenate: the policy outputs
    (``loc``, ``scale``, ``sample_log_prob``) and the ``collector`` entries the dataset
    lacks are dropped. Without that alignment only the ``collector`` entries are dropped.

    Args:
        replay_buffer: the ``OfflineToOnlineReplayBuffer``.

    Keyword Args:
        batch_size (int, optional): the sample size; defaults to the buffer's.
        device (optional): where the samples are moved.
        align_to_offline_keys (bool): keep only the offline dataset's keys. Defaults to
            ``True``.
    """

    def __init__(
        self,
        replay_buffer: Any,
        *,
        batch_size: int | None = None,
        device: Any = None,
        align_to_offline_keys: bool = True,
    ) -> None:
        self.replay_buffer = replay_buffer
        self.batch_size = batch_size
        self.device = device
        self.align_to_offline_keys = align_to_offline_keys
        self._offline_keys: list | None = None

    def _aligned_keys(self) -> list | None:
        if not self.align_to_offline_keys:
            return None
        if self._offline_keys is None:
            offline = self.replay_buffer.offline_buffer
            if not len(offline):
                return None
            probe = offline.sample(1)
            self._offline_keys = list(probe.keys(include_nested=True, leaves_only=True))
        return self._offline_keys

    def extend(self, batch: TensorDictBase | None) -> TensorDictBase | None:
        if batch is None:
            return None
        mask = batch.get(_MASK, None)
        batch = batch[mask] if mask is not None else batch.reshape(-1)
        keys = self._aligned_keys()
        if keys is not None:
            batch = batch.select(*keys, strict=False)
        elif "collector" in batch.keys():
            batch = batch.exclude("collector")
        batch = batch.cpu() if batch.device is not None else batch
        self.replay_buffer.extend(batch)
        return batch

    def sample(self, batch: TensorDictBase | None = None) -> TensorDictBase:
        sample = self.replay_buffer.sample(self.batch_size)
        return sample.to(self.device) if self.device is not None else sample

    def state_dict(self) -> dict[str, Any]:
        return self.replay_buffer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.replay_buffer.load_state_dict(state_dict)

    def register(self, trainer: Trainer, name: str = "replay_buffer") -> None:
        trainer.register_op("pre_epoch", self.extend)
        trainer.register_op("process_optim_batch", self.sample)
        trainer.register_module(name, self)


class OfflineToOnlineAnnealHook(TrainerHookBase):
    """Lowers the buffer's offline fraction linearly with the frames collected.

    After each batch (``post_steps``) it calls
    ``replay_buffer.anneal(trainer.collected_frames, anneal_frames)``: the fraction goes
    from its initial value to 0 over ``anneal_frames`` frames, and stays at 0 afterwards.

    Args:
        trainer: the object whose ``collected_frames`` drive the schedule.
        replay_buffer: the ``OfflineToOnlineReplayBuffer``.
        anneal_frames (int): the frames over which the fraction reaches 0.

    Raises:
        ValueError: ``anneal_frames`` is not a positive int.
    """

    def __init__(self, trainer: Any, replay_buffer: Any, anneal_frames: int) -> None:
        if (
            isinstance(anneal_frames, bool)
            or not isinstance(anneal_frames, int)
            or anneal_frames < 1
        ):
            raise ValueError(
                f"OfflineToOnlineAnnealHook anneal_frames must be a positive int, got "
                f"{anneal_frames!r}"
            )
        self.trainer = trainer
        self.replay_buffer = replay_buffer
        self.anneal_frames = anneal_frames

    def __call__(self) -> None:
        self.replay_buffer.anneal(self.trainer.collected_frames, self.anneal_frames)

    def register(self, trainer: Trainer, name: str = "offline_to_online_anneal") -> None:
        trainer.register_op("post_steps", self)
        trainer.register_module(name, self)


class OfflineToOnlineTrainer(SACTrainer):
    """SAC warm-started on an offline dataset and handed over to its own experience
    (the offline-to-online setting of e.g. Nair et al., 2020, https://arxiv.org/abs/2006.09359).

    A :class:`SACTrainer` whose replay buffer is an ``OfflineToOnlineReplayBuffer``: each
    collected batch goes to its online part (:class:`OfflineToOnlineReplayBufferHook`),
    each optimization step samples a mixed batch, and the offline share of those batches
    falls linearly to 0 over ``anneal_frames`` frames (:class:`OfflineToOnlineAnnealHook`).
    Target updates, weight pushes and logging are :class:`SACTrainer`'s.

    Args:
        collector, total_frames, frame_skip, optim_steps_per_batch, loss_module: as
            :class:`SACTrainer`.
        replay_buffer: the ``OfflineToOnlineReplayBuffer`` (required).
        anneal_frames (int, optional): frames over which the offline fraction reaches 0.
            Defaults to ``total_frames``; ``<= 0`` keeps it fixed.
        batch_size (int, optional): the sample size; defaults to the buffer's.
        The other arguments are :class:`SACTrainer`'s.

    Raises:
        TypeError: ``replay_buffer`` is not an offline-to-online buffer.
        ValueError: ``async_collection=True`` (not supported); see :class:`SACTrainer`.
    """

    def __init__(
        self,
        *,
        collector: Any,
        total_frames: int,
        frame_skip: int,
        optim_steps_per_batch: int,
        loss_module: Any,
        replay_buffer: Any,
        anneal_frames: int | None = None,
        batch_size: int | None = None,
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
        if not _is_offline_to_online(replay_buffer):
            raise TypeError(
                "OfflineToOnlineTrainer requires an OfflineToOnlineReplayBuffer, got "
                f"{type(replay_buffer).__name__}"
            )
        if async_collection:
            raise ValueError("OfflineToOnlineTrainer does not support async_collection=True")
        if anneal_frames is not None and (
            isinstance(anneal_frames, bool) or not isinstance(anneal_frames, int)
        ):
            raise ValueError(
                f"OfflineToOnlineTrainer anneal_frames must be an int or None, got "
                f"{anneal_frames!r}"
            )
        if anneal_frames is None and total_frames is None:
            raise ValueError(
                "OfflineToOnlineTrainer anneal_frames defaults to total_frames, which is None: "
                "pass anneal_frames (the frames over which the offline fraction reaches 0)"
            )
        # SACTrainer wires everything but the buffer; the offline-to-online hooks below
        # write and sample it
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
            checkpoint=checkpoint,
            checkpoint_rotation=checkpoint_rotation,
            checkpoint_metadata=checkpoint_metadata,
            replay_buffer=None,
            enable_logging=enable_logging,
            log_rewards=log_rewards,
            log_actions=log_actions,
            log_observations=log_observations,
            target_net_updater=target_net_updater,
            async_collection=False,
            log_timings=log_timings,
            auto_log_optim_steps=auto_log_optim_steps,
            done_key=done_key,
            terminated_key=terminated_key,
            reward_key=reward_key,
            episode_reward_key=episode_reward_key,
            action_key=action_key,
            observation_key=observation_key,
        )
        self.replay_buffer = replay_buffer
        self.batch_size = batch_size
        self.anneal_frames = total_frames if anneal_frames is None else anneal_frames
        storage = getattr(replay_buffer.online_buffer, "storage", None)
        OfflineToOnlineReplayBufferHook(
            replay_buffer, batch_size=batch_size, device=getattr(storage, "device", None)
        ).register(self)
        if self.anneal_frames > 0:
            OfflineToOnlineAnnealHook(self, replay_buffer, self.anneal_frames).register(self)
