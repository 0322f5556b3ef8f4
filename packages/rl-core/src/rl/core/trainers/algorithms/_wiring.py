"""How the algorithm trainers attach the standard hooks to a :class:`Trainer`.

Every algorithm trainer registers the same few things: a replay buffer that takes each
collected batch and gives the optimization sub-batches, the push of the trained policy
weights to the collector, and the batch statistics it logs. They are written once here.
The collector, loss, buffer and networks are duck-typed: nothing here imports another
``rl`` package.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

from tensordict import NestedKey, TensorDict, TensorDictBase

from .._hooks_data import ReplayBufferTrainer
from .._hooks_log import LogScalar, UTDRHook
from .._hooks_optim import TargetNetUpdaterHook, UpdateWeights
from .._trainer import Trainer

__all__: list[str] = []


def warn_prototype(name: str) -> None:
    """TorchRL marks its algorithm trainers experimental; so does rl."""
    warnings.warn(
        f"{name} is an experimental/prototype feature: its API may change in future versions",
        UserWarning,
        stacklevel=3,
    )


def sample_size(name: str, replay_buffer: Any, batch_size: int | None) -> int | None:
    """The size of each optimization sample: ``batch_size``, else the buffer's own.

    Raises:
        ValueError: ``batch_size`` is not a positive int, or neither it nor the buffer's
            ``batch_size`` is set.
    """
    if batch_size is not None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"{name} batch_size must be a positive int, got {batch_size!r}")
        return batch_size
    own = getattr(replay_buffer, "batch_size", None)
    if own is None:
        raise ValueError(
            f"{name} samples its optimization batches from replay_buffer, which has no "
            "batch_size: build the buffer with batch_size=... or pass batch_size= to the trainer"
        )
    return own


class _OnPolicyBufferHook(ReplayBufferTrainer):
    """A :class:`ReplayBufferTrainer` that refills the buffer with the collected batch at the
    start of each epoch (after the advantages are computed) and iterates over it from the
    start: each epoch is one pass over the fresh batch, whatever the previous epoch left of
    its iterator."""

    def refill(self, batch: TensorDictBase | None) -> None:
        if batch is None:
            return
        self.extend(batch)
        self.replay_buffer_iter = iter(self.replay_buffer)


def register_replay_buffer(
    trainer: Trainer,
    replay_buffer: Any,
    *,
    batch_size: int | None,
    collect_into_buffer: bool,
    on_policy: bool = False,
    update_priority: bool = True,
) -> ReplayBufferTrainer:
    """Registers ``replay_buffer`` on ``trainer`` as TorchRL's algorithm trainers do.

    The collected batch (flattened, valid steps only) is written at ``pre_epoch`` when
    ``collect_into_buffer`` (not with ``async_collection``, where the collector writes
    itself, nor offline); the sub-batches come from ``process_optim_batch``: by iterating
    over the buffer (its own ``batch_size``) or, with ``batch_size``, by sampling that many.
    Priorities are updated at ``post_loss`` for a prioritized buffer.
    """
    iterate = batch_size is None
    hook_cls = _OnPolicyBufferHook if on_policy else ReplayBufferTrainer
    hook = hook_cls(
        replay_buffer,
        batch_size=batch_size,
        flatten_tensordicts=True,
        memmap=False,
        device=getattr(getattr(replay_buffer, "storage", None), "device", None),
        iterate=iterate,
    )
    if collect_into_buffer:
        trainer.register_op("pre_epoch", hook.refill if on_policy else hook.extend)
    trainer.register_op("process_optim_batch", hook.sample)
    if update_priority:
        trainer.register_op("post_loss", hook.update_priority)
    trainer.register_module("replay_buffer", hook)
    return hook


def register_weight_sync(
    trainer: Trainer,
    collector: Any,
    weights_source: Any,
    weight_update_map: dict[str, str] | None = None,
) -> UpdateWeights | None:
    """Pushes the weights of ``weights_source`` (the policy) to ``collector`` after each
    batch (``post_steps``); with ``weight_update_map``, the mapped trainer attributes
    instead. A collector without ``update_policy_weights_`` (a list of batches, an offline
    run) gets nothing to push to."""
    if not callable(getattr(collector, "update_policy_weights_", None)):
        if weight_update_map is not None:
            raise ValueError(
                "weight_update_map was given, but the collector "
                f"({type(collector).__name__}) has no update_policy_weights_() to send "
                "weights to"
            )
        return None
    if weight_update_map is not None:
        if not isinstance(weight_update_map, dict) or not weight_update_map:
            raise ValueError(
                "weight_update_map must be a non-empty dict {collector destination: trainer "
                f"attribute path}}, got {weight_update_map!r}"
            )
        hook = UpdateWeights(collector, 1, weight_update_map=weight_update_map, trainer=trainer)
    else:
        if weights_source is None:
            raise AttributeError(
                "the loss module has no policy network to send to the collector "
                "(expected an actor_network / value_network attribute)"
            )
        hook = UpdateWeights(
            collector, 1, policy_weights_getter=lambda: TensorDict.from_module(weights_source)
        )
    hook.register(trainer)
    return hook


def set_loss_keys(loss_module: Any, **keys: NestedKey) -> None:
    """``loss_module.set_keys(...)`` with the key names this loss has (TorchRL passes the
    trainer's ``reward_key``, ``done_key``... to the loss)."""
    set_keys = getattr(loss_module, "set_keys", None)
    tensor_keys = getattr(loss_module, "tensor_keys", None)
    if not callable(set_keys) or tensor_keys is None:
        return
    known = {name: key for name, key in keys.items() if hasattr(tensor_keys, name)}
    if known:
        set_keys(**known)


def register_batch_logging(
    trainer: Trainer,
    *,
    on_batches: bool,
    done_key: NestedKey,
    reward_key: NestedKey,
    episode_reward_key: NestedKey | None,
    action_key: NestedKey | None,
    observation_key: NestedKey,
    log_rewards: bool,
    log_actions: bool,
    log_observations: bool,
    total_reduction: str,
    utd_ratio: bool,
) -> list[LogScalar]:
    """Registers the statistics TorchRL's algorithm trainers log.

    ``done_percentage`` always; ``r_training`` (mean and std), ``r_max`` and ``r_total``
    (``total_reduction`` of ``episode_reward_key``, unless it is ``None``) with
    ``log_rewards``; ``action_norm``
    with ``log_actions``; ``obs_norm`` with ``log_observations``. They read each collected
    batch (``pre_steps_log``) when ``on_batches``, else each optimization sub-batch
    (``post_optim_log``: asynchronous collection or offline training, where there is no
    collected batch). With ``utd_ratio``, a :class:`UTDRHook` logs the update-to-data ratio.
    """
    dest = "pre_steps_log" if on_batches else "post_optim_log"
    scalars = [LogScalar(("next", done_key), "done_percentage", True, False, "mean")]
    if log_rewards:
        scalars += [
            LogScalar(("next", reward_key), "r_training", True, True, "mean"),
            LogScalar(("next", reward_key), "r_max", False, False, "max"),
        ]
        if episode_reward_key is not None:
            scalars.append(
                LogScalar(("next", episode_reward_key), "r_total", False, False, total_reduction)
            )
    if log_actions and action_key is not None:
        scalars.append(LogScalar(action_key, "action_norm", False, True, "mean"))
    if log_observations:
        scalars.append(LogScalar(observation_key, "obs_norm", False, True, "mean"))
    for scalar in scalars:
        trainer.register_op(dest, scalar)
    if utd_ratio:
        UTDRHook(trainer).register(trainer)
    return scalars


class OfflineRounds:
    """The collector of an offline run: an endless series of empty batches, each standing
    for one round of ``optim_steps_per_batch`` optimization steps on ``frames_per_round``
    transitions sampled from the dataset. The trainer counts those transitions as its
    frames, so ``total_frames`` is the number of dataset samples the run trains on.

    Args:
        frames_per_round (int): the transitions one round samples.
    """

    def __init__(self, frames_per_round: int) -> None:
        self.frames_per_round = frames_per_round

    def __iter__(self) -> Iterator[TensorDictBase]:
        while True:
            yield TensorDict(batch_size=[self.frames_per_round])

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(frames_per_round={self.frames_per_round})"


def offline_collector(
    name: str, replay_buffer: Any, optim_steps_per_batch: Any, batch_size: int | None = None
) -> OfflineRounds:
    """The :class:`OfflineRounds` of an offline run (``collector=None``).

    Raises:
        ValueError: there is no replay buffer to train on, ``optim_steps_per_batch`` is not
            a positive int, or the sample size is unknown.
    """
    if replay_buffer is None:
        raise ValueError(
            f"{name} was given collector=None (offline training) but no replay_buffer: pass "
            "the replay buffer holding the dataset to train on"
        )
    if (
        isinstance(optim_steps_per_batch, bool)
        or not isinstance(optim_steps_per_batch, int)
        or optim_steps_per_batch < 1
    ):
        raise ValueError(
            f"{name} offline training (collector=None) needs optim_steps_per_batch, the "
            f"optimization steps per round, as a positive int, got {optim_steps_per_batch!r}"
        )
    size = sample_size(name, replay_buffer, batch_size)
    return OfflineRounds(optim_steps_per_batch * size)


def policy_network(loss_module: Any, *names: str) -> Any:
    """The first of ``loss_module``'s attributes ``names`` that exists (the policy whose
    weights the collector receives), ``None`` when there is none."""
    for attr in names:
        net = getattr(loss_module, attr, None)
        if net is not None:
            return net
    return None


def check_updater(name: str, target_net_updater: Any, required: bool) -> None:
    """Raises when a required target-network updater is missing or has no ``step()``.

    Raises:
        ValueError: ``required`` and ``target_net_updater`` is ``None``.
        TypeError: the updater has no ``step()`` method.
    """
    if target_net_updater is None:
        if required:
            raise ValueError(
                f"{name} requires a target_net_updater (a SoftUpdate or HardUpdate on the "
                "loss module), got None"
            )
        return
    if not callable(getattr(target_net_updater, "step", None)):
        raise TypeError(
            f"{name} target_net_updater must have a step() method (SoftUpdate, HardUpdate), "
            f"got {type(target_net_updater).__name__}"
        )


def is_callable_loss(name: str, loss_module: Callable) -> None:
    """Raises ``TypeError`` when ``loss_module`` cannot be called on a batch."""
    if not callable(loss_module):
        raise TypeError(
            f"{name} loss_module must be a loss module (callable on a TensorDict), got "
            f"{type(loss_module).__name__}"
        )


def register_off_policy(
    trainer: Trainer,
    *,
    replay_buffer: Any,
    batch_size: int | None,
    target_net_updater: Any,
    weights_source: Any,
    collect_into_buffer: bool,
    update_priority: bool = True,
) -> None:
    """The hooks every off-policy trainer registers: the replay buffer (each batch written
    at ``pre_epoch``, the sub-batches sampled from it), the target-network update after each
    optimization step (``post_optim``) and the push of ``weights_source`` to the collector
    after each batch."""
    if replay_buffer is not None:
        register_replay_buffer(
            trainer,
            replay_buffer,
            batch_size=batch_size,
            collect_into_buffer=collect_into_buffer,
            update_priority=update_priority,
        )
    if target_net_updater is not None:
        TargetNetUpdaterHook(target_net_updater).register(trainer)
    register_weight_sync(trainer, trainer.collector, weights_source)
