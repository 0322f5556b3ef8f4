"""Trajectory queries over stored transitions (TorchRL 0.14.1's ``torchrl.data.replay_buffers.query``).

Transitions are cut into :class:`Trajectory` views by their trajectory ids (or, without
ids, by their end-of-episode flags) and filtered with predicates written in a small
language rooted at :data:`traj`::

    rb.query((traj.reward.sum() > 100) & (traj.length >= 50))

A predicate built from :data:`traj` knows which entries it reads
(:meth:`TrajectoryPredicate.required_keys`); a buffer then reads only those entries and
runs only the transforms that can change them while it decides which trajectories match.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from tensordict import NestedKey, TensorClass, TensorDictBase, is_tensor_collection, lazy_stack
from tensordict.utils import unravel_key

from rl.data.replay_buffers._trajectories import find_start_stop_traj

__all__ = [
    "Trajectory",
    "TrajectoryPredicate",
    "filter_trajectories",
    "iter_trajectories",
    "traj",
]

# entries holding trajectory ids, looked up in this order
_ID_KEYS = (("collector", "traj_ids"), "traj_ids", "episode")
# end-of-episode flags: a trajectory ends where any flag of the first group present is set
_END_FLAG_GROUPS = (
    (("next", "done"), ("next", "terminated"), ("next", "truncated")),
    ("done", "terminated", "truncated"),
)


class Trajectory(TensorClass["nocast"]):
    """The transitions of one trajectory, in time order, read as attributes.

    ``trajectory.observation`` reads the root entry; a name with no root entry is read
    under ``"next"``, so ``trajectory.reward`` and ``trajectory.done`` are the post-step
    values. Indexing with a key (``trajectory["next", "done"]``) reads the data; indexing
    with steps (``trajectory[2:5]``) gives a shorter :class:`Trajectory`. Trajectories of
    different lengths stack with :func:`tensordict.lazy_stack`.

    Attributes:
        data (TensorDictBase): the transitions, ``[T]``.

    Raises:
        ValueError: ``data`` has more than one batch dimension.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import Trajectory
        >>> data = TensorDict(observation=torch.zeros(4, 3),
        ...                   next=TensorDict(reward=torch.ones(4, 1), batch_size=[4]),
        ...                   batch_size=[4])
        >>> trajectory = Trajectory(data)
        >>> trajectory.length, trajectory.observation.shape, trajectory.total_reward
        (4, torch.Size([4, 3]), tensor(4.))
        >>> trajectory[1:3]
        Trajectory(length=2, keys=['next', 'observation'])
    """

    data: TensorDictBase

    def __post_init__(self) -> None:
        data = self.data
        if self.batch_size or data is None or not data.batch_dims:
            return
        if data.batch_dims != 1:
            raise ValueError(
                "Trajectory expects data with a single batch dimension (the steps), got "
                f"batch_size={tuple(data.batch_size)}."
            )
        self.batch_size = data.batch_size

    @property
    def length(self) -> int:
        """The number of transitions."""
        return int(self.batch_size[0])

    @property
    def total_reward(self) -> torch.Tensor:
        """The sum of ``reward`` over the trajectory."""
        return self.reward.sum()

    def get(self, key: NestedKey, default: Any = None) -> Any:
        """The entry ``key`` of the data, else ``("next", key)`` for a plain name, else ``default``."""
        value = self.data.get(key, None)
        if value is None and isinstance(key, str):
            value = self.data.get(("next", key), None)
        return default if value is None else value

    def keys(self, *args: Any, **kwargs: Any):
        """The keys of the data."""
        return self.data.keys(*args, **kwargs)


# tensorclass installs its own __getattr__ / __getitem__ / __repr__ when the class is made;
# ours wrap them: unknown names are data entries, keys index the data
_tensorclass_getattr = Trajectory.__getattr__
_tensorclass_getitem = Trajectory.__getitem__


def _trajectory_getattr(self: Trajectory, name: str) -> Any:
    try:
        return _tensorclass_getattr(self, name)
    except AttributeError:
        if name.startswith("_"):
            raise
    value = self.get(name)
    if value is None:
        held = sorted(map(str, self.data.keys(include_nested=True, leaves_only=True)))
        raise AttributeError(
            f"Trajectory has no entry {name!r} in its data (looked up {name!r} and "
            f"{('next', name)!r}); it holds {held}"
        )
    return value


def _trajectory_getitem(self: Trajectory, index: Any) -> Any:
    if isinstance(index, str) or (
        isinstance(index, tuple) and index and all(isinstance(part, str) for part in index)
    ):
        return self.data[index]
    return _tensorclass_getitem(self, index)


def _trajectory_repr(self: Trajectory) -> str:
    shape = (
        f"length={self.length}"
        if len(self.batch_size) == 1
        else f"batch_size={tuple(self.batch_size)}"
    )
    keys = None if self.data is None else sorted(map(str, self.data.keys()))
    return f"Trajectory({shape}, keys={keys})"


Trajectory.__getattr__ = _trajectory_getattr
Trajectory.__getitem__ = _trajectory_getitem
Trajectory.__repr__ = _trajectory_repr


def _merge_keys(first: frozenset | None, second: frozenset | None) -> frozenset | None:
    """The keys two predicates read together; ``None`` (unknown) wins."""
    if first is None or second is None:
        return None
    return first | second


_ELEMENTWISE_HINT = (
    "compares per-transition values and is ambiguous as a trajectory filter. "
    "Call .any() or .all() to reduce it to a single boolean."
)


class TrajectoryPredicate:
    """A yes/no question about a :class:`Trajectory`, composable with ``&``, ``|`` and ``~``.

    Made by comparing :data:`traj` expressions (``traj.length >= 5``,
    ``traj.reward.sum() > 100``, ``(traj.reward > 10).any()``).

    Args:
        fn: the question, ``Trajectory -> bool``.
        description: how the predicate prints.
        keys: the data entries ``fn`` reads; ``None`` when unknown.

    Examples:
        >>> from rl.data import traj
        >>> predicate = (traj.reward.sum() > 1.0) & (traj.length >= 5)
        >>> predicate
        TrajectoryPredicate(((traj.reward.sum() > 1.0) & (traj.length >= 5)))
        >>> predicate.required_keys()
        frozenset({'reward'})
    """

    def __init__(
        self,
        fn: Callable[[Trajectory], Any],
        description: str = "predicate",
        keys: frozenset | None = None,
    ) -> None:
        self._fn = fn
        self._description = description
        self._keys = keys

    def required_keys(self) -> frozenset | None:
        """The entries the predicate reads (a plain name may be found under ``"next"``), or ``None``."""
        return self._keys

    def __call__(self, trajectory: Trajectory) -> bool:
        return bool(self._fn(trajectory))

    def __and__(self, other: TrajectoryPredicate) -> TrajectoryPredicate:
        return TrajectoryPredicate(
            lambda t: self(t) and other(t),
            f"({self._description} & {other._description})",
            _merge_keys(self._keys, other._keys),
        )

    def __or__(self, other: TrajectoryPredicate) -> TrajectoryPredicate:
        return TrajectoryPredicate(
            lambda t: self(t) or other(t),
            f"({self._description} | {other._description})",
            _merge_keys(self._keys, other._keys),
        )

    def __invert__(self) -> TrajectoryPredicate:
        return TrajectoryPredicate(lambda t: not self(t), f"~{self._description}", self._keys)

    def __repr__(self) -> str:
        return f"TrajectoryPredicate({self._description})"


class _StepwiseComparison:
    """A comparison made step by step: ``.any()`` or ``.all()`` turns it into a predicate."""

    def __init__(self, fn: Callable[[Trajectory], torch.Tensor], description: str, keys) -> None:
        self._fn = fn
        self._description = description
        self._keys = keys

    def any(self) -> TrajectoryPredicate:
        """True when the comparison holds at some step."""
        return TrajectoryPredicate(
            lambda t: bool(self._fn(t).any()), f"{self._description}.any()", self._keys
        )

    def all(self) -> TrajectoryPredicate:
        """True when the comparison holds at every step."""
        return TrajectoryPredicate(
            lambda t: bool(self._fn(t).all()), f"{self._description}.all()", self._keys
        )

    def __call__(self, trajectory: Trajectory | None = None) -> bool:
        raise TypeError(f"{self._description} {_ELEMENTWISE_HINT}")

    def __repr__(self) -> str:
        return f"_StepwiseComparison({self._description})"


class _Expression:
    """A value computed from a trajectory; comparing it with a constant makes a question."""

    # what a comparison makes: a TrajectoryPredicate for a scalar, a stepwise one for a field
    _makes: type = TrajectoryPredicate

    def __init__(self, fn: Callable[[Trajectory], Any], description: str, keys) -> None:
        self._fn = fn
        self._description = description
        self._keys = keys

    def _compare(self, op: Callable[[Any, Any], Any], symbol: str, other: Any):
        return self._makes(
            lambda t: op(self._fn(t), other),
            f"({self._description} {symbol} {other!r})",
            self._keys,
        )

    def __gt__(self, other: Any):
        return self._compare(operator.gt, ">", other)

    def __ge__(self, other: Any):
        return self._compare(operator.ge, ">=", other)

    def __lt__(self, other: Any):
        return self._compare(operator.lt, "<", other)

    def __le__(self, other: Any):
        return self._compare(operator.le, "<=", other)

    def __eq__(self, other: Any):  # type: ignore[override]
        return self._compare(operator.eq, "==", other)

    def __ne__(self, other: Any):  # type: ignore[override]
        return self._compare(operator.ne, "!=", other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._description})"


class _Field(_Expression):
    """One entry over the steps of a trajectory: reduce it, or compare it step by step."""

    _makes = _StepwiseComparison

    def __init__(self, key: NestedKey, description: str | None = None) -> None:
        self._key = key
        super().__init__(self._read, description or f"traj.{key}", frozenset({unravel_key(key)}))

    def _read(self, trajectory: Trajectory) -> torch.Tensor:
        value = trajectory.get(self._key)
        if value is None:
            raise KeyError(
                f"Key {self._key!r} not found in trajectory (looked up the root and ('next', ...))."
            )
        return value

    def _reduce(self, name: str, fn: Callable[[torch.Tensor], Any]) -> _Expression:
        return _Expression(lambda t: fn(self._read(t)), f"{self._description}.{name}()", self._keys)

    def sum(self) -> _Expression:
        """The sum over the steps."""
        return self._reduce("sum", torch.sum)

    def mean(self) -> _Expression:
        """The mean over the steps (as floats)."""
        return self._reduce("mean", lambda x: x.float().mean())

    def max(self) -> _Expression:
        """The largest value."""
        return self._reduce("max", torch.max)

    def min(self) -> _Expression:
        """The smallest value."""
        return self._reduce("min", torch.min)

    def first(self) -> _Expression:
        """The value at the first step."""
        return self._reduce("first", lambda x: x[0])

    def last(self) -> _Expression:
        """The value at the last step."""
        return self._reduce("last", lambda x: x[-1])


class _TrajectoryRoot:
    """``traj``: where trajectory expressions start.

    ``traj.<name>`` is an entry (the root's, else the one under ``"next"``);
    ``traj[key]`` takes any nested key; ``traj.length`` and ``traj.total_reward`` are
    scalars. Entries reduce with ``.sum()``, ``.mean()``, ``.max()``, ``.min()``,
    ``.first()``, ``.last()``, or compare step by step and reduce with ``.any()`` /
    ``.all()``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import filter_trajectories, traj
        >>> data = TensorDict(traj_ids=torch.tensor([0, 0, 1, 1, 1]),
        ...                   next=TensorDict(reward=torch.tensor([[1.], [1.], [0.], [5.], [0.]]),
        ...                                   batch_size=[5]),
        ...                   batch_size=[5])
        >>> [t.length for t in filter_trajectories(data, (traj.reward > 4).any())]
        [3]
        >>> [t.length for t in filter_trajectories(data, traj.reward.sum() < 3)]
        [2]
    """

    @property
    def length(self) -> _Expression:
        """The number of steps."""
        return _Expression(lambda t: t.length, "traj.length", frozenset())

    @property
    def total_reward(self) -> _Expression:
        """The sum of ``reward``."""
        return _Expression(lambda t: t.total_reward, "traj.total_reward", frozenset({"reward"}))

    def __getattr__(self, name: str) -> _Field:
        if name.startswith("_"):
            raise AttributeError(name)
        return _Field(name)

    def __getitem__(self, key: NestedKey) -> _Field:
        return _Field(key, description=f"traj[{key!r}]")

    def __repr__(self) -> str:
        return "traj"


traj = _TrajectoryRoot()


def _split_signal(
    source: TensorDictBase, trajectory_key: NestedKey | None
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(ids, ends)``: the trajectory ids of ``source``, or (without ids) its end flags."""
    shape = source.batch_size
    for key in (trajectory_key,) if trajectory_key is not None else _ID_KEYS:
        ids = source.get(key, None)
        if ids is not None:
            return ids.reshape(shape), None
    if trajectory_key is not None:
        raise KeyError(f"trajectory_key {trajectory_key!r} not found in data.")
    for group in _END_FLAG_GROUPS:
        found = [key for key in group if source.get(key, None) is not None]
        if found:
            ends = torch.zeros(shape, dtype=torch.bool, device=source.device)
            for key in found:
                ends = ends | source.get(key).reshape(shape).bool()
            warnings.warn(
                f"No trajectory id entry was found; splitting on the end-of-episode flags "
                f"{tuple(found)}. A trajectory whose last transition carries no end flag is "
                "merged with the next one: store trajectory ids (('collector', 'traj_ids')) "
                "or pass trajectory_key for reliable splitting.",
                UserWarning,
                stacklevel=3,
            )
            return None, ends
    raise KeyError(
        f"Cannot split data into trajectories: no trajectory id entry (looked up {_ID_KEYS}) "
        f"and no end-of-episode entry (looked up {_END_FLAG_GROUPS}). Pass trajectory_key."
    )


def _boundaries(
    source: TensorDictBase,
    trajectory_key: NestedKey | None,
    at_capacity: bool = False,
    cursor: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(start, stop, length)`` of each trajectory in ``source`` (time along dim 0).

    The same rule as :class:`~rl.data.SliceSampler` (:func:`~rl.data.find_start_stop_traj`),
    so queries and samplers agree on where trajectories are.
    """
    ids, ends = _split_signal(source, trajectory_key)
    return find_start_stop_traj(trajectory=ids, end=ends, at_capacity=at_capacity, cursor=cursor)


def _oldest_first(
    start: torch.Tensor, shape: torch.Size, at_capacity: bool, cursor: int | None
) -> list[int]:
    """Positions of the trajectories in write order, batch column by batch column.

    A full ring's oldest row is the one after the last write.
    """
    steps = shape[0]
    oldest = (cursor + 1) % steps if at_capacity and cursor is not None else 0
    order_key = (start[:, 0].long() - oldest) % steps
    column = torch.zeros_like(order_key)
    for dim in range(1, start.shape[1]):
        column = column * shape[dim] + start[:, dim].long()
    return torch.argsort(column * steps + order_key).tolist()


def _cut(
    source: TensorDictBase, start: torch.Tensor, stop: torch.Tensor, length: int
) -> TensorDictBase:
    """The steps of one trajectory: a view when contiguous, a gather across the wrap point."""
    first, last = int(start[0]), int(stop[0])
    column = tuple(int(c) for c in start[1:])
    if first <= last:
        return source[(slice(first, last + 1), *column)]
    rows = torch.arange(first, first + length) % source.batch_size[0]
    return source[(rows, *column)]


def _key_path(key: NestedKey) -> tuple[str, ...]:
    key = unravel_key(key)
    return key if isinstance(key, tuple) else (key,)


def _overlap(a: NestedKey, b: NestedKey) -> bool:
    """Whether one key is the other or lies inside it."""
    a, b = _key_path(a), _key_path(b)
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def _plan(transforms: Sequence[Callable], needed: set) -> tuple[list[Callable], set | None]:
    """The transforms that can change ``needed`` entries and the entries they read.

    Walking back from the last transform, one is kept when it writes a needed entry (what
    it reads becomes needed too). A transform that does not declare ``out_keys`` could
    write anything: it and every one before it are kept, and every entry is read (``None``).
    """
    needed = set(needed)
    kept: list[Callable] = []
    for position in range(len(transforms) - 1, -1, -1):
        transform = transforms[position]
        writes = getattr(transform, "out_keys", None) or []
        if not writes:
            return [*transforms[: position + 1], *reversed(kept)], None
        if any(_overlap(w, n) for w in writes for n in needed):
            kept.append(transform)
            needed.update(unravel_key(k) for k in getattr(transform, "in_keys", None) or [])
    return list(reversed(kept)), needed


def _transformed(data: TensorDictBase, transforms: Sequence[Callable]) -> TensorDictBase:
    if not transforms:
        return data
    data = data.copy()  # transforms may set entries: never into the stored tensordict
    for transform in transforms:
        data = transform(data)
    return data


def _check_predicate(predicate: Any) -> None:
    if isinstance(predicate, _StepwiseComparison):
        raise TypeError(f"{predicate._description} {_ELEMENTWISE_HINT}")


def query_trajectories(
    source: TensorDictBase,
    predicate: Callable[[Trajectory], bool] | None = None,
    *,
    transforms: Sequence[Callable] = (),
    trajectory_key: NestedKey | None = None,
    at_capacity: bool = False,
    cursor: int | None = None,
) -> list[Trajectory]:
    """The trajectories of a storage's content (time along dim 0) that ``predicate`` accepts.

    Matching trajectories come back with ``transforms`` applied, oldest first (per batch
    column for a multi-dimensional storage). With a :data:`traj` predicate, only the
    entries it reads (and the transforms that can change them) are used to decide.
    """
    _check_predicate(predicate)
    if not source.batch_dims:
        raise ValueError(
            "Trajectory queries expect a storage with at least one batch dimension, got "
            f"batch_size={tuple(source.batch_size)}."
        )
    if source.batch_size[0] == 0:
        return []
    start, stop, lengths = _boundaries(source, trajectory_key, at_capacity, cursor)
    if not start.numel():
        return []
    transforms = list(transforms)
    judged, judged_whole = source, True
    if predicate is not None:
        needed = getattr(predicate, "required_keys", None)
        needed = needed() if callable(needed) else None
        judging_transforms = transforms
        if needed is not None:
            expanded = set()
            for key in needed:
                key = unravel_key(key)
                expanded.add(key)
                if isinstance(key, str):
                    expanded.add(("next", key))
            judging_transforms, fetch = _plan(transforms, expanded)
            if fetch is not None:
                judged = source.select(*fetch, strict=False)
                judged_whole = False
        judged_whole = judged_whole and len(judging_transforms) == len(transforms)
        judged = _transformed(judged, judging_transforms)
    results = []
    for position in _oldest_first(start, source.batch_size, at_capacity, cursor):
        length = int(lengths[position])
        if predicate is not None:
            candidate = Trajectory(_cut(judged, start[position], stop[position], length))
            if not predicate(candidate):
                continue
            if judged_whole:
                results.append(candidate)
                continue
        data = _cut(source, start[position], stop[position], length)
        results.append(Trajectory(_transformed(data, transforms)))
    return results


def iter_trajectories(
    data: TensorDictBase, trajectory_key: NestedKey | None = None
) -> Iterator[Trajectory]:
    """The trajectories of a flat batch of transitions, as :class:`Trajectory` views, in order.

    Steps are grouped by ``trajectory_key`` if given, else by the first of
    ``("collector", "traj_ids")``, ``"traj_ids"``, ``"episode"`` present; without ids, a
    trajectory ends where any of the ``("next", "done" / "terminated" / "truncated")`` flags
    is set (then root flags), with a ``UserWarning``: a trajectory whose last step has no
    flag is merged with the next one. The last step always ends a trajectory.

    Args:
        data (TensorDictBase): transitions, ``[N]``.
        trajectory_key (NestedKey, optional): the entry of trajectory ids.

    Raises:
        TypeError: ``data`` is not a tensordict.
        ValueError: ``data`` has more than one batch dimension.
        KeyError: ``trajectory_key`` is missing, or there are neither ids nor end flags.
    """
    if not isinstance(data, TensorDictBase):
        raise TypeError(
            f"iter_trajectories expects a TensorDictBase, got {type(data)}: trajectory "
            "queries need tensordict-backed data."
        )
    if data.batch_dims != 1:
        raise ValueError(
            "iter_trajectories expects data with a single batch dimension (flat transitions), "
            f"got batch_size={tuple(data.batch_size)}."
        )
    if data.batch_size[0] == 0:
        return
    start, stop, _ = _boundaries(data, trajectory_key)
    for first, last in zip(start[:, 0].tolist(), stop[:, 0].tolist()):
        yield Trajectory(data[first : last + 1])


def filter_trajectories(
    data: TensorDictBase,
    predicate: Callable[[Trajectory], bool] | None = None,
    *,
    trajectory_key: NestedKey | None = None,
) -> list[Trajectory]:
    """The trajectories of ``data`` (see :func:`iter_trajectories`) that ``predicate`` accepts.

    Args:
        data (TensorDictBase): transitions, ``[N]``.
        predicate (callable, optional): a :class:`TrajectoryPredicate` made from
            :data:`traj`, or any ``Trajectory -> bool``. Defaults to keeping all.

    Keyword Args:
        trajectory_key (NestedKey, optional): the entry of trajectory ids.

    Raises:
        TypeError: ``predicate`` is a step-by-step comparison not reduced with ``.any()``
            or ``.all()``.
    """
    _check_predicate(predicate)
    return [
        trajectory
        for trajectory in iter_trajectories(data, trajectory_key)
        if predicate is None or predicate(trajectory)
    ]


def storage_content(storage: Any) -> TensorDictBase | None:
    """A storage's content as one tensordict (``None`` when empty), for a query.

    Raises:
        TypeError: the storage holds something other than tensordicts, or (list storages)
            tensordicts with a batch dimension.
    """
    if not len(storage):
        return None
    content = storage[:]
    if isinstance(content, (list, tuple)):
        if not all(is_tensor_collection(item) for item in content):
            raise TypeError(
                "ReplayBuffer.query requires a tensordict-backed storage, got items of type "
                f"{type(content[0]).__name__}."
            )
        if any(item.batch_dims for item in content):
            raise TypeError(
                "ReplayBuffer.query on a list-based storage expects single-transition "
                "(scalar) items."
            )
        return lazy_stack(list(content))
    if not is_tensor_collection(content):
        raise TypeError(
            "ReplayBuffer.query requires a tensordict-backed storage, got content of type "
            f"{type(content).__name__}."
        )
    return content
