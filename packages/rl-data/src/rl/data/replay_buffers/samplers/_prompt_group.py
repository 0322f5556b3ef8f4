"""``PromptGroupSampler``: batches of whole groups of items sharing a key (the prompt of
LLM post-training), as group-relative objectives (GRPO) need them."""

from __future__ import annotations

import warnings
from collections import defaultdict
from typing import Any, Literal

import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from rl.data.replay_buffers.samplers._sampler import EMPTY_STORAGE_ERROR, Sampler
from rl.data.replay_buffers.storages._base import Storage

__all__ = ["PromptGroupSampler"]

_STRATEGIES = ("random", "recency", "reward", "variance")


def _max_variance_subset(rewards: torch.Tensor, k: int) -> torch.Tensor:
    """The positions of the ``k`` rewards with the largest variance (the highest total
    among equal variances): some of the lowest and some of the highest rewards."""
    order = torch.argsort(rewards)
    values = rewards[order].double()
    n = values.numel()
    prefix = torch.cat([values.new_zeros(1), values.cumsum(0)])
    prefix_sq = torch.cat([values.new_zeros(1), values.square().cumsum(0)])
    low = torch.arange(k + 1)  # how many of the lowest rewards are kept
    high = k - low
    total = prefix[low] + prefix[n] - prefix[n - high]
    total_sq = prefix_sq[low] + prefix_sq[n] - prefix_sq[n - high]
    variance = total_sq / k - (total / k).square()
    best = torch.isclose(variance, variance.max(), rtol=1e-12, atol=1e-12)
    n_low = int(torch.where(best, total, torch.full_like(total, -torch.inf)).argmax())
    rank = torch.arange(n)
    return order[(rank < n_low) | (rank >= n - (k - n_low))]


class PromptGroupSampler(Sampler):
    """Samples ``num_groups`` groups of ``samples_per_group`` items sharing ``group_key``.

    The items of a storage are grouped by their ``group_key`` value (an int, or a string
    such as the prompt's text); a batch holds whole groups, group after group, the
    layout group-relative objectives (GRPO) read. Sampling consumes nothing: a
    persistent buffer keeps replaying past generations of a group (RePO, Li et al. 2025,
    https://arxiv.org/abs/2506.09340). Within a group, ``strategy`` picks the items:

    - ``"random"``: uniformly (as the groups, always);
    - ``"recency"``: the most recently written;
    - ``"reward"``: the highest ``reward_key`` (averaged over its trailing dims);
    - ``"variance"``: the subset of largest reward variance (the highest total reward
      among equal ones), RePO's answer to vanishing group-relative advantages.

    A group smaller than ``samples_per_group`` (or fewer groups than ``num_groups``)
    is completed by drawing with replacement, with a warning (once).

    Args:
        num_groups: the groups of a batch (``samples_per_group = batch_size //
            num_groups``).
        samples_per_group: the items per group (``num_groups = batch_size //
            samples_per_group``); give exactly one of the two.
        group_key: the entry grouping the items.
        strategy: ``"random"``, ``"recency"``, ``"reward"`` or ``"variance"``.
        reward_key: the reward read by ``"reward"`` and ``"variance"``.
        cache_groups: keep the groups until the storage changes (``False`` rebuilds
            them at every batch).

    Raises:
        TypeError: neither or both of ``num_groups`` and ``samples_per_group``, or one
            that is not an int; (at sampling) a storage whose items are not TensorDicts
            (a plain ``ListStorage``) or a reward that is not a tensor.
        ValueError: a count below 1, an unknown strategy; (at sampling) a batch size
            that is not a multiple of the group count or size.
        NotImplementedError: (at sampling) a multi-dimensional storage.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import LazyStackStorage, PromptGroupSampler, ReplayBuffer
        >>> rb = ReplayBuffer(
        ...     storage=LazyStackStorage(100),
        ...     sampler=PromptGroupSampler(num_groups=2, group_key="prompt"),
        ...     batch_size=8,
        ... )
        >>> prompt = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2])
        >>> _ = rb.extend(TensorDict({"prompt": prompt}, batch_size=[12]))
        >>> batch = rb.sample()
        >>> [int(batch["prompt"][i * 4 : (i + 1) * 4].unique().numel()) for i in range(2)]
        [1, 1]
    """

    def __init__(
        self,
        *,
        num_groups: int | None = None,
        samples_per_group: int | None = None,
        group_key: NestedKey = "query",
        strategy: Literal["random", "recency", "reward", "variance"] = "random",
        reward_key: NestedKey = ("next", "reward"),
        cache_groups: bool = True,
    ) -> None:
        if (num_groups is None) == (samples_per_group is None):
            raise TypeError(
                f"give exactly one of num_groups and samples_per_group, got "
                f"num_groups={num_groups} and samples_per_group={samples_per_group}"
            )
        name, value = (
            ("num_groups", num_groups)
            if num_groups is not None
            else ("samples_per_group", samples_per_group)
        )
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be a positive int, got {value!r}")
        if value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value}")
        if strategy not in _STRATEGIES:
            raise ValueError(f"strategy must be one of {_STRATEGIES}, got {strategy!r}")
        self.num_groups = None if num_groups is None else int(num_groups)
        self.samples_per_group = None if samples_per_group is None else int(samples_per_group)
        self.group_key = group_key
        self.strategy = strategy
        self.reward_key = reward_key
        self.cache_groups = bool(cache_groups)
        # the groups (key -> positions) and rewards of one revision of one storage
        self._group_index: dict[Any, torch.Tensor] | None = None
        self._row_rewards: torch.Tensor | None = None
        self._cache_key: tuple[int, int, int] | None = None
        # "recency": the write clock of every position
        self._position_recency: torch.Tensor | None = None
        self._recency_clock = 0
        self._warned_small_group = False

    # -- batches ---------------------------------------------------------------------------------
    def _shape(self, batch_size: int) -> tuple[int, int]:
        per = self.num_groups if self.num_groups is not None else self.samples_per_group
        if batch_size % per:
            name = "num_groups" if self.num_groups is not None else "samples_per_group"
            raise ValueError(f"batch_size={batch_size} is not divisible by {name}={per}")
        if self.num_groups is not None:
            return self.num_groups, batch_size // self.num_groups
        return batch_size // self.samples_per_group, self.samples_per_group

    def _randperm(self, n: int) -> torch.Tensor:
        return torch.randperm(n, generator=self._rng)

    def _randint(self, n: int, k: int) -> torch.Tensor:
        return torch.randint(n, (k,), generator=self._rng)

    def _warn_small(self) -> None:
        if not self._warned_small_group:
            warnings.warn(
                "a group (or the set of groups) is smaller than the draw asks for; it is "
                "completed by drawing with replacement (store more data or ask for fewer "
                "groups / samples per group)",
                stacklevel=3,
            )
            self._warned_small_group = True

    def _groups(self, storage: Storage) -> dict[Any, torch.Tensor]:
        key = (id(storage), len(storage), storage._mutation_revision)
        if self.cache_groups and self._group_index is not None and self._cache_key == key:
            return self._group_index
        data = storage.get(slice(None))
        if not isinstance(data, TensorDictBase):
            raise TypeError(
                f"{type(self).__name__} reads the stored items as one TensorDict "
                "(LazyTensorStorage, LazyMemmapStorage, LazyStackStorage). Plain ListStorage "
                "is not supported"
            )
        values = data.get(self.group_key)
        values = values.tolist() if hasattr(values, "tolist") else list(values)
        if len(values) != len(storage):
            raise RuntimeError(
                f"group_key={self.group_key!r} holds {len(values)} values for "
                f"{len(storage)} stored items; it needs one per item"
            )
        positions: dict[Any, list[int]] = defaultdict(list)
        for position, value in enumerate(values):
            positions[tuple(value) if isinstance(value, list) else value].append(position)
        self._group_index = {k: torch.tensor(v) for k, v in positions.items()}
        if self.strategy in ("reward", "variance"):
            reward = data.get(self.reward_key)
            if not isinstance(reward, torch.Tensor):
                raise TypeError(
                    f"the {self.strategy!r} strategy requires reward_key={self.reward_key!r} "
                    f"to hold a tensor, got {type(reward).__name__}"
                )
            self._row_rewards = reward.reshape(reward.shape[0], -1).float().mean(-1).cpu()
        if self.strategy == "recency":
            self._date_unknown_positions(len(storage))
        self._cache_key = key
        return self._group_index

    def _pick_groups(self, groups: dict[Any, torch.Tensor], count: int) -> list:
        keys = list(groups)
        n = len(keys)
        if n >= count:
            return [keys[i] for i in self._randperm(n)[:count].tolist()]
        self._warn_small()
        extra = self._randint(n, count - n).tolist()
        return [keys[i] for i in self._randperm(n).tolist() + extra]

    def _pick_within(self, positions: torch.Tensor, k: int) -> torch.Tensor:
        n = positions.numel()
        if n < k:
            self._warn_small()
            return torch.cat([self._pick_within(positions, n), positions[self._randint(n, k - n)]])
        if self.strategy == "recency":
            return positions[torch.argsort(self._position_recency[positions])[-k:]]
        if self.strategy == "reward":
            return positions[torch.topk(self._row_rewards[positions], k).indices]
        if self.strategy == "variance":
            return positions[_max_variance_subset(self._row_rewards[positions], k)]
        return positions[self._randperm(n)[:k]]

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict]:
        if len(storage) == 0:
            raise RuntimeError(EMPTY_STORAGE_ERROR)
        if storage.ndim > 1:
            raise NotImplementedError(
                f"{type(self).__name__} samples 1-dimensional storages, got ndim={storage.ndim}"
            )
        num_groups, per_group = self._shape(batch_size)
        groups = self._groups(storage)
        picked = self._pick_groups(groups, num_groups)
        return torch.cat([self._pick_within(groups[key], per_group) for key in picked]), {}

    # -- writes ----------------------------------------------------------------------------------
    def _record_writes(self, index: int | torch.Tensor) -> None:
        """Dates the positions just written (``"recency"``)."""
        if self.strategy != "recency":
            return
        index = torch.as_tensor(index, dtype=torch.long).reshape(-1).cpu()
        if not index.numel():
            return
        needed = int(index.max()) + 1
        self._grow_recency(needed)
        clock = self._recency_clock + torch.arange(1, index.numel() + 1)
        # a position written twice in one batch keeps its last date
        self._position_recency.scatter_reduce_(0, index, clock, "amax")
        self._recency_clock += index.numel()

    def _grow_recency(self, size: int) -> None:
        known = 0 if self._position_recency is None else self._position_recency.numel()
        if known < size:
            more = torch.full((size - known,), -1, dtype=torch.long)
            self._position_recency = (
                more
                if self._position_recency is None
                else torch.cat([self._position_recency, more])
            )

    def _date_unknown_positions(self, length: int) -> None:
        """Items stored before the sampler saw them count as older than those it saw."""
        if self._position_recency is None:
            self._position_recency = torch.arange(length)
            self._recency_clock = max(self._recency_clock, length)
            return
        self._grow_recency(length)
        recency = self._position_recency[:length]
        unknown = (recency < 0).nonzero().squeeze(-1)
        if unknown.numel():
            known = recency[recency >= 0]
            first = int(known.min()) if known.numel() else unknown.numel()
            recency[unknown] = torch.arange(first - unknown.numel(), first)
            self._recency_clock = max(self._recency_clock, unknown.numel())

    def add(self, index: int) -> None:
        self._record_writes(index)

    def extend(self, index: torch.Tensor) -> None:
        self._record_writes(index)

    def mark_update(self, index: Any) -> None:
        self._record_writes(index)
        self._group_index = None

    def _empty(self) -> None:
        self._group_index = self._row_rewards = self._cache_key = None
        self._position_recency = None
        self._recency_clock = 0
        self._warned_small_group = False

    # -- checkpoints -----------------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_group_index=None, _row_rewards=None, _cache_key=None)  # rebuilt on use
        return state

    def state_dict(self) -> dict[str, Any]:
        """The write dates of ``"recency"`` (the groups are rebuilt from the storage)."""
        if self._position_recency is None:
            return {}
        return {
            "position_recency": self._position_recency.clone(),
            "recency_clock": self._recency_clock,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        recency = state_dict.get("position_recency")
        self._position_recency = None if recency is None else recency.clone().cpu()
        self._recency_clock = int(state_dict.get("recency_clock", 0))
        self._group_index = self._row_rewards = self._cache_key = None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_groups={self.num_groups}, "
            f"samples_per_group={self.samples_per_group}, group_key={self.group_key!r}, "
            f"strategy={self.strategy!r})"
        )
