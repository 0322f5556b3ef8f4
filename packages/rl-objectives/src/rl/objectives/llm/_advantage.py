"""Group-relative (Monte-Carlo) advantages for GRPO: ``MCAdvantage``, the replay-buffer write
transform that groups the answers to one prompt; ``MCAdvantageSelector``, which picks the
group out of oversampled candidates; ``RayMCAdvantage``, the same groups kept in a Ray actor
that several writers share."""

from __future__ import annotations

import logging
import os
from collections import defaultdict, deque
from functools import partial
from itertools import combinations
from math import comb
from typing import Any, Literal

import torch
from tensordict import NestedKey, NonTensorData, TensorDict, TensorDictBase, lazy_stack
from torch import nn

from rl.core.ray_runtime import acquire_runtime, import_ray, release_runtime, wait_started

__all__ = ["MCAdvantage", "MCAdvantageSelector", "RayMCAdvantage"]

logger = logging.getLogger(__name__)

#: the write decisions ``MCAdvantage`` counts (``get_stats()``, ``reset_stats()``)
STATS = (
    "completed_trajectories",
    "completed_decisions",
    "trajectory_return_sum",
    "trajectory_return_max",
    "successful_trajectories",
    "completed_groups",
    "written_groups",
    "dropped_groups",
    "rescued_groups",
    "selected_trajectories",
    "unselected_trajectories",
)


class MCAdvantageSelector:
    """Chooses ``group_size`` trajectories out of an oversampled candidate group.

    :class:`MCAdvantage` with ``candidate_group_size > grpo_size`` collects more answers
    to one prompt than it trains on; this picks the ones it writes. Strategies:

    - ``"first"``: the first ``group_size`` candidates;
    - ``"uniform"``: candidates spread evenly over the sorted returns (ranks
      ``round(i * (n - 1) / (group_size - 1))``; the median for one);
    - ``"balanced"`` (default): among the subsets whose mean return lies strictly inside
      ``keep_return_bounds``, the one whose mean is closest to the middle of the bounds,
      ties broken by the wider spread of returns, then by the first found (every subset is
      scored while there are at most ``max_combinations``; beyond, a greedy swap from the
      uniform pick). Without bounds, as ``"uniform"``.

    With ``keep_return_bounds`` a pick whose mean return is outside them gives ``None``
    (the group carries no signal: all failed or all succeeded).

    Args:
        strategy (str): ``"first"``, ``"uniform"`` or ``"balanced"`` (default).

    Keyword Args:
        max_combinations (int): the most subsets ``"balanced"`` scores one by one.
            Defaults to ``100_000``.
        in_keys (list of NestedKey, optional): the candidate entries read, the first one a
            scalar per candidate. Defaults to ``["return"]``. :class:`MCAdvantage` passes a
            ``[n]`` TensorDict holding ``"return"`` and ``"trajectories"`` (the candidates'
            lazy stack): a subclass may read either in its own :meth:`select`.

    Raises:
        ValueError: an unknown strategy, ``max_combinations < 1``, empty ``in_keys``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.objectives.llm import MCAdvantageSelector
        >>> candidates = TensorDict({"return": torch.tensor([0.0, 0.0, 0.0, 1.0])}, [4])
        >>> MCAdvantageSelector().select(candidates, group_size=2, keep_return_bounds=(0.1, 0.9))
        [0, 3]
        >>> MCAdvantageSelector("first").select(
        ...     candidates, group_size=2, keep_return_bounds=(0.1, 0.9)
        ... ) is None
        True
    """

    def __init__(
        self,
        strategy: Literal["first", "uniform", "balanced"] = "balanced",
        *,
        max_combinations: int = 100_000,
        in_keys: list[NestedKey] | None = None,
    ) -> None:
        if strategy not in ("first", "uniform", "balanced"):
            raise ValueError(
                f"strategy must be one of 'first', 'uniform' or 'balanced', got {strategy!r}"
            )
        if max_combinations < 1:
            raise ValueError(f"max_combinations must be >= 1, got {max_combinations}")
        if in_keys is not None and not in_keys:
            raise ValueError("in_keys must hold at least one key, got an empty list")
        self.strategy = strategy
        self.max_combinations = int(max_combinations)
        self.in_keys = ["return"] if in_keys is None else list(in_keys)

    def select(
        self,
        candidates: TensorDictBase,
        *,
        group_size: int,
        keep_return_bounds: tuple[float, float] | None = None,
    ) -> list[int] | None:
        """The indices of the chosen candidates, or ``None`` to skip the group.

        Args:
            candidates (TensorDictBase): ``[n]``, one entry per candidate trajectory.
            group_size (int): how many to choose.
            keep_return_bounds (tuple of float, optional): the exclusive bounds on the
                chosen candidates' mean return.

        Raises:
            ValueError: fewer than ``group_size`` candidates; not one scalar per
                candidate under ``in_keys[0]``.
        """
        values = self._values(candidates)
        n = len(values)
        if n < group_size:
            raise ValueError(f"need at least group_size={group_size} candidates, got {n}")
        if n == group_size or self.strategy == "first":
            indices = list(range(group_size))
        elif self.strategy == "uniform" or keep_return_bounds is None:
            indices = _uniform_indices(values, group_size)
        else:
            return self._balanced_indices(values, group_size, keep_return_bounds)
        return indices if _accepted(values, indices, keep_return_bounds) else None

    def _values(self, candidates: TensorDictBase) -> list[float]:
        key = self.in_keys[0]
        values = candidates.get(key)
        if values.numel() != candidates.numel():
            raise ValueError(
                f"MCAdvantageSelector reads one scalar per candidate at {key!r}, got shape "
                f"{tuple(values.shape)} for {candidates.numel()} candidates"
            )
        return [float(v) for v in values.detach().reshape(-1).cpu()]

    def _balanced_indices(
        self, values: list[float], group_size: int, bounds: tuple[float, float]
    ) -> list[int] | None:
        low, high = bounds
        middle = 0.5 * (low + high)
        n = len(values)
        if comb(n, group_size) <= self.max_combinations:
            best, best_score = None, None
            for subset in combinations(range(n), group_size):
                chosen = [values[i] for i in subset]
                mean = sum(chosen) / group_size
                if low < mean < high:
                    score = (abs(mean - middle), -(max(chosen) - min(chosen)))
                    if best_score is None or score < best_score:
                        best, best_score = list(subset), score
            return best
        # too many subsets: start from the uniform pick and swap its lowest (highest)
        # returns for the highest (lowest) others until the mean gets inside
        indices = _uniform_indices(values, group_size)
        if _accepted(values, indices, bounds):
            return indices
        order = sorted(range(n), key=values.__getitem__)
        too_low = sum(values[i] for i in indices) / group_size <= low
        incoming = reversed(order) if too_low else iter(order)
        outgoing = sorted(indices, key=values.__getitem__, reverse=not too_low)
        for new in incoming:
            if new in indices:
                continue
            if not outgoing:
                break
            indices[indices.index(outgoing.pop(0))] = new
            if _accepted(values, indices, bounds):
                return indices
        return None


def _accepted(values: list[float], indices: list[int], bounds: tuple[float, float] | None) -> bool:
    """Whether the chosen candidates' mean return is strictly inside ``bounds``."""
    if bounds is None:
        return True
    mean = sum(values[i] for i in indices) / len(indices)
    return bounds[0] < mean < bounds[1]


def _uniform_indices(values: list[float], group_size: int) -> list[int]:
    order = sorted(range(len(values)), key=values.__getitem__)
    if group_size == 1:
        return [order[len(order) // 2]]
    last = len(order) - 1
    return [order[round(i * last / (group_size - 1))] for i in range(group_size)]


class MCAdvantage(nn.Module):
    """Group-relative (Monte-Carlo) advantage for GRPO, as a replay-buffer write transform.

    Trajectories are queued by their prompt (``prompt_key`` of their first step); when
    ``grpo_size`` trajectories of one prompt are in, their rewards are standardised
    together, ``A = (r - mean) / max(std, 1e-6)`` (unbiased std), written at
    ``advantage_key`` and the group is returned; until then ``inv`` returns ``None``.
    With ``trajectory_return`` (``"sum"``, ``"max"``, ``"mean"``) each trajectory's return
    is standardised instead, and broadcast over its steps.

    With trajectory returns, two more options (DAPO's dynamic sampling): a group whose
    mean return is not strictly inside ``keep_return_bounds`` (all answers failed, or all
    succeeded) carries no signal and is dropped; and ``candidate_group_size > grpo_size``
    collects more answers to one prompt, letting ``candidate_selector`` (an
    :class:`MCAdvantageSelector`) choose ``grpo_size`` of them, first once
    ``candidate_selection_min_size`` are in, then at each new one, until a choice is made
    (the group is written) or ``candidate_group_size`` are in (the group is dropped).

    The write decisions are counted (:meth:`get_stats`, ``completed_groups``,
    ``written_groups``, ``dropped_groups``, ``rescued_groups`` (kept thanks to the
    oversampling), ...). Several writer processes that must complete each other's groups
    share one :class:`RayMCAdvantage`.

    Args:
        grpo_size (int): trajectories per prompt.
        prompt_key (NestedKey): the group identifier (a string or tensor). Defaults to ``"query"``.
        rewards_key (NestedKey): defaults to ``("next", "reward")``.
        advantage_key (NestedKey): defaults to ``"advantage"``.
        done_key (NestedKey): defaults to ``("next", "done")``.
        verbose (bool): log each completed group.

    Keyword Args:
        trajectory_return (str, optional): see above.
        keep_return_bounds (tuple of float, optional): ``(low, high)``, see above; needs
            ``trajectory_return``.
        candidate_group_size (int, optional): see above. Defaults to ``grpo_size``.
        candidate_selection_min_size (int, optional): see above. Defaults to ``grpo_size``.
        candidate_selector (MCAdvantageSelector, optional): defaults to
            ``MCAdvantageSelector()`` (``"balanced"``).

    Raises:
        ValueError: bad ``grpo_size`` / ``trajectory_return`` / bounds / candidate sizes.
        RuntimeError: a trajectory whose last step is not done.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.objectives.llm import MCAdvantage
        >>> transform = MCAdvantage(grpo_size=2)
        >>> answers = TensorDict(
        ...     {"query": torch.tensor([7, 7]),
        ...      "next": {"reward": torch.tensor([[1.0], [3.0]]),
        ...               "done": torch.ones(2, 1, dtype=torch.bool)}},
        ...     batch_size=(2,),
        ... )
        >>> transform.inv(answers)["advantage"]
        tensor([[-0.7071],
                [ 0.7071]])
        >>> dynamic = MCAdvantage(grpo_size=2, trajectory_return="sum",
        ...                       keep_return_bounds=(0.1, 0.9), candidate_group_size=3)
        >>> failed = answers.clone()
        >>> failed["next", "reward"] = torch.tensor([[0.0], [0.0]])
        >>> dynamic.inv(failed) is None  # two failures: nothing to learn yet, one more
        True
        >>> third = failed[:1].clone()
        >>> third["next", "reward"] = torch.tensor([[1.0]])
        >>> dynamic.inv(third)["advantage"].reshape(-1)  # a failure and the success
        tensor([-0.7071,  0.7071])
        >>> dynamic.rescued_groups
        1
    """

    def __init__(
        self,
        grpo_size: int,
        prompt_key: NestedKey = "query",
        rewards_key: NestedKey = ("next", "reward"),
        advantage_key: NestedKey = "advantage",
        done_key: NestedKey = ("next", "done"),
        verbose: bool = False,
        *,
        trajectory_return: Literal["sum", "max", "mean"] | None = None,
        keep_return_bounds: tuple[float, float] | None = None,
        candidate_group_size: int | None = None,
        candidate_selection_min_size: int | None = None,
        candidate_selector: MCAdvantageSelector | None = None,
    ):
        super().__init__()
        candidate_group_size, candidate_selection_min_size, keep_return_bounds = _check_args(
            grpo_size,
            trajectory_return,
            keep_return_bounds,
            candidate_group_size,
            candidate_selection_min_size,
        )
        self.grpo_size = grpo_size
        self.prompt_key, self.rewards_key = prompt_key, rewards_key
        self.advantage_key, self.done_key = advantage_key, done_key
        self.in_keys = [prompt_key, rewards_key, done_key]
        self.out_keys = [advantage_key]
        self.verbose = verbose
        self.trajectory_return = trajectory_return
        self.keep_return_bounds = keep_return_bounds
        self.candidate_group_size = candidate_group_size
        self.candidate_selection_min_size = candidate_selection_min_size
        self.candidate_selector = (
            MCAdvantageSelector() if candidate_selector is None else candidate_selector
        )
        self.queues: dict = defaultdict(partial(deque, maxlen=candidate_group_size))
        self.reset_stats()

    # ------------------------------------------------------------------ counters
    def reset_stats(self) -> None:
        """Zeroes the counters of write decisions."""
        for name in STATS:
            setattr(self, name, 0)
        self.trajectory_return_sum = 0.0
        self.trajectory_return_max = float("-inf")

    def clear_queues(self) -> None:
        """Forgets the incomplete groups."""
        self.queues.clear()

    @property
    def queued_groups(self) -> int:
        """Incomplete groups held."""
        return len(self.queues)

    @property
    def queued_trajectories(self) -> int:
        """Trajectories of incomplete groups held."""
        return sum(len(q) for q in self.queues.values())

    @property
    def max_queued_trajectories_per_group(self) -> int:
        """The most trajectories one incomplete group holds."""
        return max((len(q) for q in self.queues.values()), default=0)

    def get_stats(self) -> dict[str, float | int]:
        """The counters and the queue sizes, as plain numbers."""
        stats = {name: getattr(self, name) for name in STATS}
        stats["queued_groups"] = self.queued_groups
        stats["queued_trajectories"] = self.queued_trajectories
        stats["max_queued_trajectories_per_group"] = self.max_queued_trajectories_per_group
        return stats

    # ------------------------------------------------------------------ transform
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict

    def inv(self, tensordict: TensorDictBase) -> TensorDictBase | None:
        """Queues the trajectories of ``tensordict`` (``[T]``, or ``[N, T]`` / ``[N]`` of
        one-step trajectories); returns the completed groups with their advantage, or ``None``."""
        if tensordict.ndim == 0:
            tensordict = tensordict.unsqueeze(0)
        if tensordict.ndim == 1:
            done = tensordict.get(self.done_key).reshape(tensordict.shape[0], -1).any(-1)
            if done.sum() > 1:
                ends = done.nonzero().squeeze(-1) + 1
                sizes = torch.cat([ends[:1], ends.diff()]).tolist()
                if sum(sizes) < tensordict.shape[0]:
                    sizes.append(tensordict.shape[0] - sum(sizes))
                outs = [self._one(t) for t in tensordict.split(sizes)]
            else:
                outs = [self._one(tensordict)]
        else:
            flat = (
                tensordict.reshape(-1, tensordict.shape[-1]) if tensordict.ndim > 2 else tensordict
            )
            outs = [self._one(t) for t in flat.unbind(0)]
        outs = [o for o in outs if o is not None]
        if not outs:
            return None
        return torch.cat(outs, 0)

    _inv_call = inv

    def _group_of(self, traj: TensorDictBase) -> Any:
        group = traj[0].get(self.prompt_key)
        if isinstance(group, NonTensorData):  # a query string as a chat env stores it
            group = group.data
        if isinstance(group, torch.Tensor):
            return group.item() if group.numel() == 1 else tuple(group.reshape(-1).tolist())
        if not isinstance(group, str):
            raise TypeError(
                f"{self.prompt_key} must be a string or a tensor to group trajectories, got {type(group).__name__}"
            )
        return group

    def _one(self, traj: TensorDictBase) -> TensorDictBase | None:
        if not traj[-1].get(self.done_key).all():
            raise RuntimeError(
                f"MCAdvantage expects complete trajectories: the last step's {self.done_key} is False"
            )
        group = self._group_of(traj)
        self.completed_trajectories += 1
        self.completed_decisions += traj.numel()
        if self.trajectory_return is not None:
            total = float(traj.get(self.rewards_key).sum())
            self.trajectory_return_sum += total
            self.trajectory_return_max = max(self.trajectory_return_max, total)
            self.successful_trajectories += int(total > 0.0)
        queue = self.queues[group]
        queue.append(traj)
        if self.trajectory_return is None:
            if len(queue) < self.grpo_size:
                return None
            del self.queues[group]
            self.completed_groups += 1
            self.written_groups += 1
            out = torch.cat(list(queue), 0)
            reward = out.get(self.rewards_key).float()
            scale = reward.std() if reward.numel() > 1 else reward.new_ones(())
            out.set(self.advantage_key, (reward - reward.mean()) / scale.clamp_min(1e-6))
            self._log(group)
            return out
        if len(queue) < self.candidate_selection_min_size:
            return None
        out = self._trajectory_advantage(list(queue))
        if out is not None:
            del self.queues[group]
            self.completed_groups += 1
            self.written_groups += 1
            self._log(group)
        elif len(queue) == self.candidate_group_size:
            del self.queues[group]
            self.completed_groups += 1
            self.dropped_groups += 1
            if self.verbose:
                logger.info("MCAdvantage: group %r dropped (no useful subset)", group)
        return out

    def _trajectory_advantage(self, trajs: list[TensorDictBase]) -> TensorDictBase | None:
        rewards = [t.get(self.rewards_key) for t in trajs]
        reduce = {"sum": torch.sum, "max": torch.max, "mean": torch.mean}[self.trajectory_return]
        returns = torch.stack([reduce(r.float()) for r in rewards])
        candidates = TensorDict(
            {"return": returns, "trajectories": lazy_stack(trajs, 0)}, batch_size=[len(trajs)]
        )
        chosen = self.candidate_selector.select(
            candidates.select(*self.candidate_selector.in_keys, strict=True),
            group_size=self.grpo_size,
            keep_return_bounds=self.keep_return_bounds,
        )
        if chosen is None:
            return None
        if len(trajs) > self.grpo_size:
            values = [float(r) for r in returns]
            first = list(range(self.grpo_size))
            self.rescued_groups += int(not _accepted(values, first, self.keep_return_bounds))
            self.unselected_trajectories += len(trajs) - self.grpo_size
        self.selected_trajectories += len(chosen)
        returns = returns[chosen]
        if not _accepted(
            [float(r) for r in returns], list(range(len(chosen))), self.keep_return_bounds
        ):
            return None  # a custom selector's pick with no signal
        adv = (returns - returns.mean()) / returns.std().clamp_min(1e-6)
        picked = []
        for i, a in zip(chosen, adv, strict=True):
            traj = trajs[i]
            reward = rewards[i]
            traj.set(self.advantage_key, torch.full_like(reward, a.item(), dtype=adv.dtype))
            picked.append(traj)
        return torch.cat(picked, 0)

    def _log(self, group: Any) -> None:
        if self.verbose:
            logger.info("MCAdvantage: group %r complete (%d trajectories)", group, self.grpo_size)


def _check_args(
    grpo_size: int,
    trajectory_return: str | None,
    keep_return_bounds: tuple[float, float] | None,
    candidate_group_size: int | None,
    candidate_selection_min_size: int | None,
) -> tuple[int, int, tuple[float, float] | None]:
    """Validates :class:`MCAdvantage`'s options; returns the candidate sizes and bounds."""
    if grpo_size < 1:
        raise ValueError(f"grpo_size must be >= 1, got {grpo_size}")
    if trajectory_return not in (None, "sum", "max", "mean"):
        raise ValueError(
            f"trajectory_return must be one of 'sum', 'max', 'mean' or None, got {trajectory_return!r}"
        )
    if trajectory_return is not None and grpo_size < 2:
        raise ValueError(
            f"trajectory_return needs grpo_size >= 2 (a std over the group), got {grpo_size}"
        )
    candidates = grpo_size if candidate_group_size is None else int(candidate_group_size)
    if candidates < grpo_size:
        raise ValueError(
            f"candidate_group_size must be >= grpo_size={grpo_size}, got {candidate_group_size}"
        )
    if candidates > grpo_size and trajectory_return is None:
        raise ValueError(
            f"candidate_group_size={candidates} > grpo_size={grpo_size} selects candidates by "
            "their return: set trajectory_return to 'sum', 'max' or 'mean'"
        )
    min_size = (
        grpo_size if candidate_selection_min_size is None else int(candidate_selection_min_size)
    )
    if not grpo_size <= min_size <= candidates:
        raise ValueError(
            f"candidate_selection_min_size must be between grpo_size={grpo_size} and "
            f"candidate_group_size={candidates}, got {candidate_selection_min_size}"
        )
    if keep_return_bounds is not None:
        if trajectory_return is None:
            raise ValueError(
                "keep_return_bounds filters groups on their trajectory returns: set "
                "trajectory_return to 'sum', 'max' or 'mean'"
            )
        if len(keep_return_bounds) != 2 or not keep_return_bounds[0] < keep_return_bounds[1]:
            raise ValueError(
                f"keep_return_bounds must be an increasing (low, high) pair, got {keep_return_bounds}"
            )
        keep_return_bounds = (float(keep_return_bounds[0]), float(keep_return_bounds[1]))
    return candidates, min_size, keep_return_bounds


class _MCAdvantageActor:
    """What runs in :class:`RayMCAdvantage`'s actor: one :class:`MCAdvantage`."""

    def __init__(self, args: tuple, kwargs: dict) -> None:
        self.transform = MCAdvantage(*args, **kwargs)

    def ready(self) -> int:
        return os.getpid()

    def inv(self, tensordict: TensorDictBase) -> TensorDictBase | None:
        return self.transform.inv(tensordict)

    def call(self, method: str, *args) -> Any:
        return getattr(self.transform, method)(*args)

    def get(self, attr: str) -> Any:
        return getattr(self.transform, attr)

    def set(self, attr: str, value: Any) -> None:
        setattr(self.transform, attr, value)

    def queues_values(self) -> list[list[TensorDictBase]]:
        return [list(q) for q in self.transform.queues.values()]


class _RemoteQueues:
    """``RayMCAdvantage.queues``: looks at (and clears) the actor's queues."""

    def __init__(self, owner: RayMCAdvantage) -> None:
        self._owner = owner

    def values(self) -> list[list[TensorDictBase]]:
        return self._owner._remote("queues_values")

    def clear(self) -> None:
        self._owner.clear_queues()

    def __len__(self) -> int:
        return self._owner.queued_groups

    def __bool__(self) -> bool:
        return len(self) > 0


class RayMCAdvantage(nn.Module):
    """:class:`MCAdvantage` whose queues and counters live in a Ray actor.

    Several replay-buffer writers (collector processes, Ray actors) that each append a
    ``RayMCAdvantage`` built with the same ``actor_name`` share one actor, so that the
    answers to one prompt complete one group whoever collected them. ``inv`` sends the
    trajectories to the actor and returns what its :class:`MCAdvantage` returns (on the
    input's device). An anonymous actor (no ``actor_name``) belongs to this object and is
    killed by :meth:`close`; :meth:`close` of a writer sharing a named one only lets go of
    it, and the actor lives while the writer that made it holds it (close that one last). Ray is
    started locally when it does not run (``ray_init_config``), and shut down by
    :meth:`close` only when this object started it (see :mod:`rl.core.ray_runtime`).

    Args:
        grpo_size, prompt_key, rewards_key, advantage_key, done_key, verbose: as
            :class:`MCAdvantage`.

    Keyword Args:
        trajectory_return, keep_return_bounds, candidate_group_size,
        candidate_selection_min_size, candidate_selector: as :class:`MCAdvantage`.
        ray_init_config (dict, optional): keyword arguments of ``ray.init()``.
        remote_config (dict, optional): the actor's Ray options. Defaults to
            ``{"num_cpus": 1}``.
        actor_name (str, optional): the Ray name of the actor; an existing actor of that
            name is reused.

    Raises:
        ImportError: Ray is not installed (``pip install "rl-objectives[ray]"``).
        ValueError: bad arguments, as :class:`MCAdvantage` (checked here, before Ray).
        RuntimeError: the actor could not start, or died.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.objectives.llm import RayMCAdvantage
        >>> transform = RayMCAdvantage(  # doctest: +SKIP
        ...     grpo_size=2, prompt_key="group_id", trajectory_return="sum",
        ...     ray_init_config={"num_cpus": 1},
        ... )
        >>> def answer(reward):
        ...     return TensorDict({"group_id": torch.tensor([0]),
        ...                        "next": {"reward": torch.tensor([[reward]]),
        ...                                 "done": torch.tensor([[True]])}}, [1])
        >>> transform.inv(answer(0.0)) is None  # doctest: +SKIP
        True
        >>> transform.inv(answer(1.0))["advantage"].reshape(-1)  # doctest: +SKIP
        tensor([-0.7071,  0.7071])
        >>> transform.close()  # doctest: +SKIP
    """

    def __init__(
        self,
        grpo_size: int,
        prompt_key: NestedKey = "query",
        rewards_key: NestedKey = ("next", "reward"),
        advantage_key: NestedKey = "advantage",
        done_key: NestedKey = ("next", "done"),
        verbose: bool = False,
        *,
        trajectory_return: Literal["sum", "max", "mean"] | None = None,
        keep_return_bounds: tuple[float, float] | None = None,
        candidate_group_size: int | None = None,
        candidate_selection_min_size: int | None = None,
        candidate_selector: MCAdvantageSelector | None = None,
        ray_init_config: dict | None = None,
        remote_config: dict | None = None,
        actor_name: str | None = None,
    ) -> None:
        super().__init__()
        self._actor = None
        self._held_runtime = False
        #: the process id of the actor's worker (on this machine with a local Ray)
        self.worker_pid: int | None = None
        candidate_group_size, candidate_selection_min_size, keep_return_bounds = _check_args(
            grpo_size,
            trajectory_return,
            keep_return_bounds,
            candidate_group_size,
            candidate_selection_min_size,
        )
        self.grpo_size = grpo_size
        self.prompt_key, self.rewards_key = prompt_key, rewards_key
        self.advantage_key, self.done_key = advantage_key, done_key
        self.in_keys = [prompt_key, rewards_key, done_key]
        self.out_keys = [advantage_key]
        self.verbose = verbose
        self.trajectory_return = trajectory_return
        self.keep_return_bounds = keep_return_bounds
        self.candidate_group_size = candidate_group_size
        self.candidate_selection_min_size = candidate_selection_min_size
        self.candidate_selector = candidate_selector
        self.actor_name = actor_name
        self.remote_config = {"num_cpus": 1} if remote_config is None else dict(remote_config)
        self._ray = ray = import_ray("RayMCAdvantage", "rl-objectives[ray]")
        self._held_runtime = acquire_runtime(ray, ray_init_config)
        args = (grpo_size, prompt_key, rewards_key, advantage_key, done_key, verbose)
        kwargs = {
            "trajectory_return": trajectory_return,
            "keep_return_bounds": keep_return_bounds,
            "candidate_group_size": candidate_group_size,
            "candidate_selection_min_size": candidate_selection_min_size,
            "candidate_selector": candidate_selector,
        }
        self._owns_actor = actor_name is None
        try:
            actor = None
            if actor_name is not None:
                try:
                    actor = ray.get_actor(actor_name)
                except ValueError:  # no actor of that name yet: this one makes it
                    actor = None
            if actor is None:
                options = dict(self.remote_config)
                if actor_name is not None:
                    options.update(name=actor_name, get_if_exists=True)
                actor = ray.remote(_MCAdvantageActor).options(**options).remote(args, kwargs)
            self._actor = actor
            (self.worker_pid,) = wait_started(
                ray, [actor.ready.remote()], what="the RayMCAdvantage actor", timeout=300.0
            )
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ remote calls
    def _get(self, ref: Any) -> Any:
        ray = self._ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as err:
            raise RuntimeError(f"the RayMCAdvantage actor died: {err}") from err

    def _remote(self, method: str, *args) -> Any:
        if self._actor is None:
            raise RuntimeError("the RayMCAdvantage was closed")
        return self._get(getattr(self._actor, method).remote(*args))

    @property
    def queues(self) -> _RemoteQueues:
        """The actor's incomplete groups: ``len``, ``values()``, ``clear()``."""
        return _RemoteQueues(self)

    def reset_stats(self) -> None:
        """Zeroes the actor's counters."""
        self._remote("call", "reset_stats")

    def clear_queues(self) -> None:
        """Forgets the actor's incomplete groups."""
        self._remote("call", "clear_queues")

    def get_stats(self) -> dict[str, float | int]:
        """The actor's counters and queue sizes (see :meth:`MCAdvantage.get_stats`)."""
        return self._remote("call", "get_stats")

    @property
    def queued_groups(self) -> int:
        return self._remote("get", "queued_groups")

    @property
    def queued_trajectories(self) -> int:
        return self._remote("get", "queued_trajectories")

    @property
    def max_queued_trajectories_per_group(self) -> int:
        return self._remote("get", "max_queued_trajectories_per_group")

    def __getattr__(self, name: str) -> Any:
        if name in STATS:  # the counters live in the actor
            return self._remote("get", name)
        return super().__getattr__(name)

    # ------------------------------------------------------------------ transform
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict

    def inv(self, tensordict: TensorDictBase) -> TensorDictBase | None:
        """Sends the trajectories to the actor's :class:`MCAdvantage`; returns the groups
        they complete (on ``tensordict``'s device), or ``None``."""
        device = tensordict.device
        out = self._remote("inv", tensordict.cpu() if device is not None else tensordict)
        if out is not None and device is not None:
            out = out.to(device)
        return out

    _inv_call = inv

    def close(self) -> None:
        """Kills the actor if this object made it anonymously; gives the Ray runtime back."""
        actor, self._actor = self._actor, None
        if actor is not None and self._owns_actor:
            self._ray.kill(actor)
        held, self._held_runtime = self._held_runtime, False
        release_runtime(self._ray, held)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        where = "closed" if self._actor is None else (self.actor_name or "anonymous actor")
        return f"{type(self).__name__}(grpo_size={self.grpo_size}, {where})"
