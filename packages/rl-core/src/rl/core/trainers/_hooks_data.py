"""Hooks that shape the data: replay buffer, key selection, sub-sampling, reward scaling,
value estimates."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from tensordict import NestedKey, TensorDictBase

from ._trainer import REWARD_KEY, MissingKeyError, Trainer, TrainerHookBase

__all__ = [
    "BatchSubSampler",
    "ReplayBufferTrainer",
    "RewardNormalizer",
    "SelectKeys",
    "ValueEstimatorHook",
    "mask_batch",
]

_MASK = ("collector", "mask")


def mask_batch(batch: TensorDictBase) -> TensorDictBase:
    """Keeps the valid steps of a padded batch (``("collector", "mask")``); a batch without
    a mask is returned as is.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"x": torch.arange(4), ("collector", "mask"): torch.tensor(
        ...     [True, False, True, True])}, batch_size=[4])
        >>> mask_batch(td)["x"]
        tensor([0, 2, 3])
    """
    mask = batch.get(_MASK, None)
    return batch[mask] if mask is not None else batch


class SelectKeys(TrainerHookBase):
    """Keeps only ``keys`` in each collected batch (``batch_process``).

    Args:
        keys: the keys to keep.

    Raises:
        TypeError: ``keys`` is a single string instead of a sequence of keys.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict(a=torch.zeros(2), b=torch.ones(2), batch_size=[2])
        >>> list(SelectKeys(["a"])(td).keys())
        ['a']
    """

    def __init__(self, keys: Sequence[NestedKey]) -> None:
        if isinstance(keys, str):
            raise TypeError(f"SelectKeys expects a sequence of keys, got the string {keys!r}")
        self.keys = list(keys)

    def __call__(self, batch: TensorDictBase) -> TensorDictBase:
        missing = [k for k in self.keys if k not in batch.keys(True)]
        if missing:
            raise MissingKeyError(
                f"SelectKeys: the batch has no key {missing[0]!r}; it has "
                f"{sorted(map(str, batch.keys(True, True)))}"
            )
        return batch.select(*self.keys)

    def register(self, trainer: Trainer, name: str = "select_keys") -> None:
        trainer.register_op("batch_process", self)
        trainer.register_module(name, self)


class ReplayBufferTrainer(TrainerHookBase):
    """Extends a replay buffer with each batch and samples the optimization batches from it.

    Registers ``extend`` at ``batch_process``, ``sample`` at ``process_optim_batch`` and
    ``update_priority`` at ``post_loss``. The buffer's contents, sampler and writer go into
    the trainer's checkpoints; a memory-mapped storage (one with a ``scratch_dir``) is saved
    by reference to its directory, not copied.

    Args:
        replay_buffer: an ``rl.data`` replay buffer (``extend``, ``sample``, ``state_dict``).
        batch_size: the sample size (default: the buffer's own).
        memmap: kept for TorchRL compatibility (the storage decides where data lives).
        device: where samples are sent.
        flatten_tensordicts: flatten ``[*B, T]`` batches (keeping the valid steps of a
            masked batch) before extending.
        max_dims: unused here, accepted for TorchRL compatibility.
        iterate: draw the optimization batches by iterating over the buffer
            (``next(iter(replay_buffer))``) instead of calling ``sample``: once the
            iterator is exhausted, ``sample`` starts a new one and raises
            ``StopIteration``, which ends the trainer's optimization steps for this batch.
            Defaults to ``False``.

    Examples:
        >>> rb_trainer = ReplayBufferTrainer(replay_buffer, batch_size=256)  # doctest: +SKIP
        >>> rb_trainer.register(trainer)  # doctest: +SKIP
    """

    def __init__(
        self,
        replay_buffer: Any,
        batch_size: int | None = None,
        memmap: bool = False,
        device: torch.device | str | None = None,
        flatten_tensordicts: bool = False,
        max_dims: Sequence[int] | None = None,
        iterate: bool = False,
    ) -> None:
        self.replay_buffer = replay_buffer
        self.iterate = iterate
        self.replay_buffer_iter = iter(replay_buffer) if iterate else None
        self.batch_size = batch_size
        self.memmap = memmap
        self.device = device
        self.flatten_tensordicts = flatten_tensordicts
        self.max_dims = max_dims

    def extend(self, batch: TensorDictBase) -> None:
        if self.flatten_tensordicts:
            mask = batch.get(_MASK, None)
            batch = batch[mask] if mask is not None else batch.reshape(-1)
        self.replay_buffer.extend(batch.cpu() if batch.device is not None else batch)

    def sample(self, batch: TensorDictBase | None = None) -> TensorDictBase:
        if self.iterate:
            try:
                sample = next(self.replay_buffer_iter)
            except StopIteration:
                # the next optimization round iterates over the buffer from the start
                self.replay_buffer_iter = iter(self.replay_buffer)
                raise
        else:
            sample = self.replay_buffer.sample(batch_size=self.batch_size)
        return sample.to(self.device) if self.device is not None else sample

    def update_priority(self, batch: TensorDictBase) -> None:
        update = getattr(self.replay_buffer, "update_tensordict_priority", None)
        if callable(update) and getattr(self.replay_buffer, "_prioritized", False):
            update(batch)

    def _storage(self) -> Any:
        return getattr(self.replay_buffer, "storage", None)

    def state_dict(self) -> dict[str, Any]:
        storage = self._storage()
        scratch_dir = getattr(storage, "scratch_dir", None)
        if scratch_dir is None:
            return {"replay_buffer": self.replay_buffer.state_dict()}
        return {
            "memmap_ref": {
                "scratch_dir": str(Path(scratch_dir).resolve()),
                "len": len(storage),
                "write_end": int(getattr(storage, "_write_end", len(storage))),
                "max_size": int(storage.max_size),
            },
            "sampler": self.replay_buffer.sampler.state_dict(),
            "writer": self.replay_buffer.writer.state_dict(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "replay_buffer" in state_dict:
            self.replay_buffer.load_state_dict(state_dict["replay_buffer"])
            return
        ref = state_dict["memmap_ref"]
        storage = self._storage()
        here = getattr(storage, "scratch_dir", None)
        if here is None or str(Path(here).resolve()) != ref["scratch_dir"]:
            raise ValueError(
                f"the checkpoint's replay buffer lives in the memory-mapped storage at "
                f"'{ref['scratch_dir']}'; this buffer's storage is at {here!s}: build it with "
                f"LazyMemmapStorage(..., scratch_dir='{ref['scratch_dir']}')"
            )
        length, write_end = int(ref["len"]), int(ref["write_end"])
        now_len, now_end = len(storage), int(getattr(storage, "_write_end", len(storage)))
        full = int(ref["max_size"])
        if now_len >= full and not (length == now_len and write_end == now_end):
            warnings.warn(
                f"the memory-mapped replay buffer at '{ref['scratch_dir']}' was written past "
                f"its capacity after the checkpoint: some of the checkpoint's items were "
                f"overwritten, so the resumed run continues but is not bit-identical",
                stacklevel=2,
            )
        storage._empty()
        if length:
            storage._record_write(length, write_end)
        self.replay_buffer.sampler.load_state_dict(state_dict["sampler"])
        self.replay_buffer.writer.load_state_dict(state_dict["writer"])

    def register(self, trainer: Trainer, name: str = "replay_buffer") -> None:
        trainer.register_op("batch_process", self.extend)
        trainer.register_op("process_optim_batch", self.sample)
        trainer.register_op("post_loss", self.update_priority)
        trainer.register_module(name, self)


class BatchSubSampler(TrainerHookBase):
    """Samples a sub-batch of the collected batch for each optimization step.

    A 1-d batch gives ``batch_size`` random items; a ``[B, T]`` batch gives
    ``[batch_size // sub_traj_len, sub_traj_len]`` windows of consecutive steps (valid steps
    only when the batch carries ``("collector", "mask")``). Uses torch's global generator,
    whose state the trainer's checkpoints hold.

    Args:
        batch_size: the number of items in the sub-batch.
        sub_traj_len: the window length (``<= 0``: the whole time dimension).
        min_sub_traj_len: the shortest window allowed when masked trajectories are short.

    Raises:
        ValueError: the windows would hold no item, or are longer than the batch's time
            dimension.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict(x=torch.arange(20).reshape(2, 10), batch_size=[2, 10])
        >>> BatchSubSampler(batch_size=6, sub_traj_len=3)(td).shape
        torch.Size([2, 3])
    """

    def __init__(self, batch_size: int, sub_traj_len: int = 0, min_sub_traj_len: int = 0) -> None:
        self.batch_size = batch_size
        self.sub_traj_len = sub_traj_len
        self.min_sub_traj_len = min_sub_traj_len

    def __call__(self, batch: TensorDictBase) -> TensorDictBase:
        if batch.ndim == 1:
            return batch[torch.randperm(batch.shape[0])[: self.batch_size]]
        T = batch.shape[1]
        sub_len = self.sub_traj_len if self.sub_traj_len > 0 else T
        mask = batch.get(_MASK, None)
        if mask is not None:
            traj_len = mask.reshape(batch.shape[0], T, -1)[..., 0].sum(-1)
            sub_len = max(self.min_sub_traj_len, min(sub_len, int(traj_len.min())))
        else:
            traj_len = torch.full((batch.shape[0],), T, dtype=torch.long)
        if sub_len > T or sub_len < 1:
            raise ValueError(
                f"BatchSubSampler sub_traj_len={sub_len} is outside [1, {T}] (the batch's "
                f"time dimension)"
            )
        n = self.batch_size // sub_len
        if n == 0:
            raise ValueError(
                f"BatchSubSampler batch_size={self.batch_size} is smaller than "
                f"sub_traj_len={sub_len}: the sub-batch would be empty"
            )
        valid = torch.arange(batch.shape[0])[traj_len >= sub_len]
        traj_idx = valid[torch.randint(valid.numel(), (n,))]
        room = (traj_len[traj_idx] - sub_len).clamp_min(0)
        start = (torch.rand(n) * (room + 1).float()).long().clamp_max(room)
        time_idx = start[:, None] + torch.arange(sub_len)
        return batch[traj_idx[:, None], time_idx]

    def register(self, trainer: Trainer, name: str = "batch_subsampler") -> None:
        trainer.register_op("process_optim_batch", self)
        trainer.register_module(name, self)


class RewardNormalizer(TrainerHookBase):
    """Normalizes rewards with running statistics (exponential moving averages).

    ``update_reward_stats`` (``batch_process``) updates the decayed sum, sum of squares and
    count of the collected rewards; ``normalize_reward`` (``process_optim_batch``) returns a
    copy of the optimization batch with ``(reward - mean) / std * scale``.

    Args:
        decay: the moving-average decay.
        scale: the factor applied after normalization.
        eps: the smallest standard deviation.
        log_pbar: unused, for TorchRL compatibility.
        reward_key: where the reward is (default ``("next", "reward")``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> norm = RewardNormalizer(decay=1.0)
        >>> td = TensorDict({("next", "reward"): torch.tensor([[1.0], [3.0]])}, batch_size=[2])
        >>> norm.update_reward_stats(td)
        >>> norm.normalize_reward(td)["next", "reward"].squeeze(-1)
        tensor([-0.7071,  0.7071])
    """

    def __init__(
        self,
        decay: float = 0.999,
        scale: float = 1.0,
        eps: float | None = None,
        log_pbar: bool = False,
        reward_key: NestedKey | None = None,
    ) -> None:
        self.decay = decay
        self.scale = scale
        self.eps = torch.finfo(torch.get_default_dtype()).eps if eps is None else eps
        self.reward_key = REWARD_KEY if reward_key is None else reward_key
        self._stats: dict[str, torch.Tensor] = {}

    @torch.no_grad()
    def update_reward_stats(self, batch: TensorDictBase) -> None:
        reward = batch.get(self.reward_key)
        mask = batch.get(_MASK, None)
        if mask is not None:
            reward = reward[mask]
        reward = reward.double()
        zero = torch.zeros((), dtype=torch.float64)
        s = self.decay * self._stats.get("sum", zero) + reward.sum()
        ssq = self.decay * self._stats.get("ssq", zero) + reward.pow(2).sum()
        count = self.decay * self._stats.get("count", zero) + reward.numel()
        var = (ssq - s.pow(2) / count) / (count - 1) if count > 1 else zero
        self._stats = {
            "sum": s,
            "ssq": ssq,
            "count": count,
            "mean": s / count,
            "std": var.clamp_min(self.eps).sqrt(),
        }

    def normalize_reward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if not self._stats:
            raise RuntimeError(
                "RewardNormalizer.normalize_reward was called before update_reward_stats: "
                "register the hook with RewardNormalizer.register(trainer)"
            )
        tensordict = tensordict.clone(False)
        reward = tensordict.get(self.reward_key)
        mean = self._stats["mean"].to(reward.device, reward.dtype)
        std = self._stats["std"].to(reward.device, reward.dtype)
        tensordict.set(self.reward_key, (reward - mean) / std * self.scale)
        return tensordict

    def state_dict(self) -> dict[str, Any]:
        return {"stats": {k: v.clone() for k, v in self._stats.items()}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._stats = {k: v.clone() for k, v in state_dict["stats"].items()}

    def register(self, trainer: Trainer, name: str = "reward_normalizer") -> None:
        trainer.register_op("batch_process", self.update_reward_stats)
        trainer.register_op("process_optim_batch", self.normalize_reward)
        trainer.register_module(name, self)


class ValueEstimatorHook(TrainerHookBase):
    """Runs a value estimator (``GAE``...) on the whole collected batch before each epoch.

    Registered at ``pre_epoch``: the advantages and value targets are computed once per
    epoch on the collected batch, before the optimization steps draw their sub-batches from
    it with :class:`BatchSubSampler` (so each epoch sees the value network as it is then).
    A :class:`ReplayBufferTrainer` copies the batch into its buffer earlier, at
    ``batch_process``, and samples from the buffer: the estimates written here never reach
    its samples; compute them there with a replay-buffer transform instead. Without a batch
    (``None``: the collector writes into the replay buffer itself) the hook does nothing. An estimator with a
    ``state_dict`` (a module) has its state in the trainer's checkpoints.

    Args:
        value_estimator (Callable[[TensorDictBase], TensorDictBase]): writes its entries
            into the batch it is given and returns it, e.g. ``rl.objectives.value.GAE``.

    Raises:
        TypeError: ``value_estimator`` is not callable.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> def advantage(td):
        ...     return td.set("advantage", td["next", "reward"] - td["value"])
        >>> hook = ValueEstimatorHook(advantage)
        >>> td = TensorDict({"value": torch.ones(2, 1), ("next", "reward"): torch.full((2, 1), 3.0)},
        ...     batch_size=[2])
        >>> hook(td)["advantage"].squeeze(-1)
        tensor([2., 2.])
    """

    def __init__(self, value_estimator: Callable[[TensorDictBase], TensorDictBase]) -> None:
        if not callable(value_estimator):
            raise TypeError(
                "ValueEstimatorHook expects a callable value estimator (a GAE, TD(lambda) "
                f"module...), got {type(value_estimator).__name__}"
            )
        self.value_estimator = value_estimator

    def __call__(self, batch: TensorDictBase | None) -> TensorDictBase | None:
        if batch is None:
            return None
        return self.value_estimator(batch)

    def state_dict(self) -> dict[str, Any]:
        state = getattr(self.value_estimator, "state_dict", None)
        return {"value_estimator": state()} if callable(state) else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "value_estimator" in state_dict and hasattr(self.value_estimator, "load_state_dict"):
            self.value_estimator.load_state_dict(state_dict["value_estimator"])

    def register(self, trainer: Trainer, name: str = "value_estimator") -> None:
        trainer.register_op("pre_epoch", self)
        trainer.register_module(name, self)
