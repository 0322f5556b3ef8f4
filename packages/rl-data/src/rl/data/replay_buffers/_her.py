"""Hindsight experience replay: goals relabeled at sampling time (Andrychowicz et al.,
2017, https://arxiv.org/abs/1707.01495)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, Literal

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from rl.data.replay_buffers._td_buffers import TensorDictReplayBuffer
from rl.data.replay_buffers._utils import KeyMismatchError
from rl.data.replay_buffers.samplers._random import RandomSampler
from rl.data.replay_buffers.samplers._sampler import Sampler
from rl.data.replay_buffers.storages._base import Storage


class HindsightStrategy(enum.StrEnum):
    """Where :class:`HERReplayBuffer` takes the relabeled goal of a transition.

    ``FUTURE``: an achieved goal of the same or a later step of its episode; ``FINAL``: the
    episode's last achieved goal; ``EPISODE``: any step of the episode; ``RANDOM``: any
    stored item.
    """

    FUTURE = "future"
    FINAL = "final"
    EPISODE = "episode"
    RANDOM = "random"


def _sibling(key: NestedKey, name: str) -> NestedKey:
    return key[:-1] + (name,) if isinstance(key, tuple) else name


def _under_next(key: NestedKey) -> tuple:
    return ("next", *key) if isinstance(key, tuple) else ("next", key)


class HERReplayBuffer(TensorDictReplayBuffer):
    """A TensorDict replay buffer that relabels goals when it samples (TorchRL's API).

    The first ``int(batch_size * her_ratio)`` transitions of every batch get a new desired
    goal (under ``goal_key``, and ``("next", goal_key)`` when stored) taken from
    ``achieved_goal_key`` of a step chosen by ``strategy``, and a reward recomputed by
    ``reward_fn``; the rest keep their stored goals and rewards. Episodes end where
    ``end_key`` or its ``terminated`` sibling is set, at the last stored item and, once the
    storage wraps, at the newest write. The stored data is never modified.

    Args:
        reward_fn: receives the relabeled transitions (a TensorDict) and returns their
            rewards, of shape ``[*batch, 1]`` or ``[*batch]``.
        her_ratio: the fraction of each batch that is relabeled, in ``[0, 1]``.
        strategy: ``"future"`` (default), ``"final"``, ``"episode"`` or ``"random"``.
        goal_key, achieved_goal_key, reward_key, end_key: where the desired goal, the
            achieved goal, the reward and the episode-end flag are stored.
        sampler: which transitions a batch holds (default :class:`RandomSampler`).
        **kwargs: the other :class:`TensorDictReplayBuffer` arguments. A storage with
            ``ndim > 1`` (``LazyTensorStorage(n, ndim=2)`` fed ``[B, T]`` batches) keeps
            one sequence per environment: episodes never cross from one to another.

    Raises:
        ValueError: ``her_ratio`` is outside ``[0, 1]`` or ``strategy`` is unknown.
        NotImplementedError: at sampling, with a sampler whose indices are neither 1-D
            (``ndim=1`` storages) nor coordinate tuples (``ndim > 1``): relabeling needs
            each sampled item's position in its episode, which such indices do not give.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import HERReplayBuffer, LazyTensorStorage
        >>> def reward_fn(td):
        ...     close = (td["achieved_goal"] - td["desired_goal"]).norm(dim=-1, keepdim=True)
        ...     return (close < 0.05).float()
        >>> rb = HERReplayBuffer(
        ...     reward_fn=reward_fn, her_ratio=1.0, storage=LazyTensorStorage(100), batch_size=4
        ... )
        >>> steps = TensorDict(
        ...     {
        ...         "desired_goal": torch.ones(4, 2),
        ...         "achieved_goal": torch.zeros(4, 2),
        ...         "next": {"reward": torch.zeros(4, 1), "done": torch.tensor([[0], [0], [0], [1]]).bool()},
        ...     },
        ...     batch_size=[4],
        ... )
        >>> _ = rb.extend(steps)
        >>> batch = rb.sample()
        >>> batch["desired_goal"].abs().sum().item(), batch["next", "reward"].sum().item()
        (0.0, 4.0)
    """

    def __init__(
        self,
        reward_fn: Callable[[TensorDictBase], torch.Tensor],
        *,
        her_ratio: float = 0.8,
        strategy: HindsightStrategy | Literal["future", "final", "episode", "random"] = "future",
        goal_key: NestedKey = "desired_goal",
        achieved_goal_key: NestedKey = "achieved_goal",
        reward_key: NestedKey = ("next", "reward"),
        end_key: NestedKey = ("next", "done"),
        sampler: Sampler | None = None,
        **kwargs: Any,
    ) -> None:
        if not 0.0 <= her_ratio <= 1.0:
            raise ValueError(f"her_ratio must be in [0, 1], got {her_ratio}")
        try:
            strategy = HindsightStrategy(strategy)
        except ValueError:
            raise ValueError(
                f"strategy must be one of {[s.value for s in HindsightStrategy]}, got {strategy!r}"
            ) from None
        super().__init__(sampler=sampler if sampler is not None else RandomSampler(), **kwargs)
        self.reward_fn = reward_fn
        self.her_ratio = float(her_ratio)
        self.strategy = strategy
        self.goal_key = goal_key
        self.achieved_goal_key = achieved_goal_key
        self.reward_key = reward_key
        self.end_key = end_key
        self._ends_cache: tuple[tuple, torch.Tensor] | None = None

    # -- checkpoints ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The buffer's state plus the relabeling settings under ``"_her"`` (as TorchRL).

        The settings are a record: :meth:`load_state_dict` does not apply them.
        """
        state = super().state_dict()
        state["_her"] = {
            "her_ratio": self.her_ratio,
            "strategy": self.strategy.value,
            "goal_key": self.goal_key,
            "achieved_goal_key": self.achieved_goal_key,
            "reward_key": self.reward_key,
            "end_key": self.end_key,
        }
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores the storage, sampler and writer; the relabeling settings stay as built.

        As TorchRL 0.14, ``her_ratio``, ``strategy`` and the keys are the constructor's,
        not the checkpoint's ``"_her"`` entry (which :meth:`state_dict` writes for
        reference). A ``"_her"`` entry of any shape, TorchRL's included, is accepted; the
        cached episode ends are always recomputed from the loaded storage.
        """
        super().load_state_dict({k: v for k, v in state_dict.items() if k != "_her"})
        self._ends_cache = None

    def empty(self) -> None:
        super().empty()
        self._ends_cache = None

    # -- episodes --------------------------------------------------------------------------------
    # Positions: items numbered column after column, time along each (``column * rows +
    # row``), where a storage with ndim > 1 writes time along dim 0 and keeps one sequence
    # per column (the other dims, flattened); with ndim=1 the position is the index.
    @staticmethod
    def _layout(storage: Storage) -> tuple[int, int]:
        """``(rows, columns)`` of the stored items: time runs down the rows of each column."""
        n = len(storage)
        rows = storage._len_along_dim0 if storage.ndim > 1 else n
        return rows, (n // rows if rows else 0)

    def _episode_ends(self, storage: Storage) -> torch.Tensor:
        """Sorted last positions of the stored episodes (CPU int64), recomputed only when
        the buffer was written to since the last batch (the writer's count moves on every
        write; ``empty`` and ``load_state_dict`` drop the cache)."""
        count = getattr(self._writer, "write_count", None)
        token = (
            None
            if count is None
            else (id(storage), len(storage), count, getattr(storage, "_write_end", 0), self.end_key)
        )
        if token is not None and self._ends_cache is not None and self._ends_cache[0] == token:
            return self._ends_cache[1]
        ends = self._find_episode_ends(storage)
        self._ends_cache = None if token is None else (token, ends)
        return ends

    def _find_episode_ends(self, storage: Storage) -> torch.Tensor:
        rows, cols = self._layout(storage)
        flags = [
            storage._column(key).reshape(rows, cols, -1).any(-1).cpu()
            for key in (self.end_key, _sibling(self.end_key, "terminated"))
            if storage._has_key(key)
        ]
        if not flags:
            raise KeyMismatchError(
                f"the storage holds neither {self.end_key!r} nor "
                f"{_sibling(self.end_key, 'terminated')!r}: store episode ends under one of them"
            )
        boundary = flags[0] if len(flags) == 1 else flags[0] | flags[1]
        boundary = boundary.clone()
        boundary[rows - 1] = True  # every column ends at its last stored step
        write_end = getattr(storage, "_write_end", 0)
        capacity = getattr(storage, "_rows", None) or storage.max_size
        if rows == capacity and write_end:
            boundary[write_end - 1] = True  # the newest write: episodes do not cross the wrap
        return boundary.t().reshape(-1).nonzero().squeeze(-1)

    @staticmethod
    def _positions(storage: Storage, index: Any, rows: int) -> torch.Tensor:
        """Sampled indices (1-D, or a tuple of coordinates when ndim > 1) to positions."""
        if storage.ndim == 1:
            return index.cpu()
        row, *coords = (torch.as_tensor(c).cpu().long() for c in index)
        column = torch.zeros_like(row)
        for coord, size in zip(coords, storage.shape[1:]):
            column = column * size + coord
        return column * rows + row

    @staticmethod
    def _storage_index(storage: Storage, position: torch.Tensor, rows: int) -> Any:
        """Positions to what indexes ``storage._column(key)``: the index, or coordinates."""
        if storage.ndim == 1:
            return position.to(storage.device)
        coords = torch.unravel_index(position // rows, storage.shape[1:])
        return tuple(c.to(storage.device) for c in (position % rows, *coords))

    def _goal_source(self, index: torch.Tensor, ends: torch.Tensor, n: int) -> torch.Tensor:
        """The position whose achieved goal each relabeled transition takes."""
        position = torch.searchsorted(ends, index).clamp(max=ends.shape[0] - 1)
        end = ends[position]
        start = torch.where(position == 0, 0, ends[(position - 1).clamp(min=0)] + 1)
        rng = self._sampler._rng
        draw = torch.rand(index.shape[0], generator=rng)
        if self.strategy is HindsightStrategy.FUTURE:
            room = end - index
            return index + torch.minimum((draw * (room + 1)).long(), room)
        if self.strategy is HindsightStrategy.FINAL:
            return end
        if self.strategy is HindsightStrategy.EPISODE:
            room = end - start
            return start + torch.minimum((draw * (room + 1)).long(), room)
        return torch.randint(n, (index.shape[0],), generator=rng)

    # -- sampling --------------------------------------------------------------------------------
    def _sample(self, batch_size: int) -> tuple[Any, dict]:
        data, info = super()._sample(batch_size)
        storage = self._storage
        index = info["index"]
        if storage.ndim == 1:
            ok = isinstance(index, torch.Tensor) and index.ndim == 1
        else:
            ok = isinstance(index, tuple) and len(index) == storage.ndim
        if not ok:
            raise NotImplementedError(
                f"{type(self).__name__} needs a sampler of 1-D indices (ndim=1) or of "
                f"coordinate tuples (ndim > 1), got {type(index).__name__}"
            )
        relabeled = int(data.shape[0] * self.her_ratio)
        if relabeled == 0:
            return data, info
        for key, role in (
            (self.goal_key, "goal_key"),
            (self.achieved_goal_key, "achieved_goal_key"),
        ):
            if not storage._has_key(key):
                raise KeyMismatchError(
                    f"{role}={key!r} is not stored; store it in every transition before sampling"
                )
        rows, _ = self._layout(storage)
        positions = self._positions(storage, index, rows)[:relabeled]
        source = self._goal_source(positions, self._episode_ends(storage), len(storage))
        goals = storage._column(self.achieved_goal_key)[self._storage_index(storage, source, rows)]
        part = data[:relabeled]
        part.set_(self.goal_key, goals.to(part.get(self.goal_key).dtype))
        next_goal = _under_next(self.goal_key)
        if next_goal in part.keys(True, True):
            part.set_(next_goal, goals.to(part.get(next_goal).dtype))
        reward = torch.as_tensor(self.reward_fn(part))
        target = part.get(self.reward_key)
        if reward.numel() != target.numel():
            raise ValueError(
                f"reward_fn returned {tuple(reward.shape)}, expected {tuple(target.shape)} "
                f"(the shape of {self.reward_key!r}) or {tuple(target.shape[:1])}"
            )
        part.set_(self.reward_key, reward.reshape(target.shape).to(target.dtype))
        return data, info

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(strategy={self.strategy.value!r}, her_ratio={self.her_ratio}, "
            f"goal_key={self.goal_key!r}, achieved_goal_key={self.achieved_goal_key!r}, "
            f"reward_key={self.reward_key!r}, storage={self._storage})"
        )
