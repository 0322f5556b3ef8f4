"""Search trees built from stored rollouts (TorchRL 0.14.1's ``torchrl.data.map.tree``).

:class:`MCTSForest` keeps every transition it is given in two maps: the *data map* takes an
``(observation, action)`` pair to what followed it (the ``"next"`` entries and the action),
the *node map* takes an observation to the data-map entries that leave it (one per action
taken there). :meth:`MCTSForest.get_tree` walks these maps from a root observation and
returns a :class:`Tree`: a vertex per branching point (or per step with ``compact=False``),
each holding the rollout that led to it.
"""

from __future__ import annotations

import functools
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Literal

import torch
from tensordict import NestedKey, TensorClass, TensorDict, TensorDictBase, lazy_stack
from tensordict.utils import unravel_key

from rl.core import Composite
from rl.data.map.tdstorage import TensorDictMap
from rl.data.replay_buffers.storages import ListStorage

__all__ = ["MCTSForest", "Tree"]

_DEFAULT_DONE_KEYS = ["done", "terminated", "truncated"]


def _walk(tree: Tree) -> Iterator[Tree]:
    """Breadth-first over ``tree`` and its descendants (a shared vertex once per parent)."""
    queue = deque([tree])
    while queue:
        vertex = queue.popleft()
        yield vertex
        if vertex.subtree is not None:
            queue.extend(vertex.subtree.unbind(0))


def _flatten_refs(refs: Any) -> Iterator[Any]:
    """The weak references in a parent field, however nested (a stack reads as lists)."""
    if refs is None:
        return
    if isinstance(refs, weakref.ref):
        yield refs
        return
    for item in refs:
        yield from _flatten_refs(item)


class Tree(TensorClass["nocast"]):
    """A vertex of a search tree and, through ``subtree``, everything below it.

    A vertex is a place where the search branches: its ``node_data`` holds the observation
    there, its ``rollout`` the steps (in TorchRL's TED layout, time last) from the previous
    vertex to it, and its ``subtree`` a lazy stack of one :class:`Tree` per action taken
    there. Vertices built by :class:`MCTSForest` carry the ``hash`` of the
    ``(observation, action)`` pair their rollout starts with (``None`` for the root) and a
    ``node_id`` in breadth-first order (0 for the root).

    Attributes:
        count: visit count (``visits`` is an alias).
        wins: accumulated value.
        index: data-map indices of the children (``None`` at a leaf).
        hash (int): hash of the edge that leads here; ``None`` at the root.
        node_id (int): the vertex's id in its tree.
        rollout (TensorDict): steps from the parent vertex to this one, ``[..., T]``.
        node_data (TensorDict): the observation entries that define the vertex.
        subtree (Tree): stack of children.
        specs (Composite): optional env-like specs (``input_spec`` / ``output_spec``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import Tree
        >>> root = Tree(node_data=TensorDict(obs=torch.tensor(0)), node_id=0)
        >>> root.subtree = TensorDict.lazy_stack(
        ...     [Tree(node_data=TensorDict(obs=torch.tensor(i)), node_id=i, hash=i) for i in (1, 2)]
        ... )
        >>> root.num_children, sorted(root.edges()), list(root.valid_paths())
        (2, [(0, 1), (0, 2)], [(0,), (1,)])
        >>> root.subtree[1].parent.node_id
        0
    """

    count: int | torch.Tensor = None
    wins: int | torch.Tensor = None
    index: torch.Tensor | None = None
    hash: int | None = None
    node_id: int | None = None
    rollout: TensorDict | None = None
    node_data: TensorDict | None = None
    subtree: Tree = None
    _parent: Any = None
    specs: Composite | None = None

    @classmethod
    def make_node(
        cls,
        data: TensorDictBase,
        *,
        device: torch.device | None = None,
        batch_size: torch.Size | None = None,
        specs: Composite | None = None,
    ) -> Tree:
        """A vertex from one step or a rollout.

        With a ``"next"`` entry, ``data`` is the vertex's rollout (a single step gets a
        time dimension) and the vertex gets one child made from the last ``"next"``
        entries; without one, ``data`` is the vertex's ``node_data``. The ``"action"``
        and ``"next"`` entries never go into ``node_data``.
        """
        if "next" in data.keys():
            rollout = data if data.ndim else data.unsqueeze(0)
            subtree = lazy_stack([cls.make_node(rollout["next"][..., -1])])
        else:
            rollout = subtree = None
        return cls(
            count=torch.zeros(()),
            wins=torch.zeros(()),
            node_data=data.exclude("action", "next"),
            rollout=rollout,
            subtree=subtree,
            specs=specs,
            device=data.device if device is None else device,
            batch_size=batch_size,
        )

    def _spec(self, *path: str) -> Composite:
        if self.specs is None:
            raise RuntimeError(f"this Tree has no specs, so no {path[-1]} (build it with specs=)")
        return self.specs[path]

    @property
    def full_observation_spec(self) -> Composite:
        """``specs["output_spec", "full_observation_spec"]``."""
        return self._spec("output_spec", "full_observation_spec")

    @property
    def full_reward_spec(self) -> Composite:
        """``specs["output_spec", "full_reward_spec"]``."""
        return self._spec("output_spec", "full_reward_spec")

    @property
    def full_done_spec(self) -> Composite:
        """``specs["output_spec", "full_done_spec"]``."""
        return self._spec("output_spec", "full_done_spec")

    @property
    def full_state_spec(self) -> Composite:
        """``specs["input_spec", "full_state_spec"]``."""
        return self._spec("input_spec", "full_state_spec")

    @property
    def full_action_spec(self) -> Composite:
        """``specs["input_spec", "full_action_spec"]``."""
        return self._spec("input_spec", "full_action_spec")

    @property
    def selected_actions(self) -> torch.Tensor | TensorDictBase | None:
        """The first action of each child's rollout: every action tried here (``None`` at a leaf)."""
        if self.subtree is None:
            return None
        return self.subtree.rollout[..., 0]["action"]

    @property
    def prev_action(self) -> torch.Tensor | TensorDictBase | None:
        """The last action of the rollout, the one that produced ``node_data`` (``None`` at the root)."""
        if self.rollout is None:
            return None
        return self.rollout[..., -1]["action"]

    @property
    def branching_action(self) -> torch.Tensor | TensorDictBase | None:
        """The first action of the rollout, taken at the parent vertex (``None`` at the root)."""
        if self.rollout is None:
            return None
        return self.rollout[..., 0]["action"]

    @property
    def node_observation(self) -> torch.Tensor | TensorDictBase:
        """``node_data["observation"]``."""
        return self.node_data["observation"]

    @property
    def node_observations(self) -> TensorDictBase:
        """``node_data`` restricted to ``"observation"``, as a tensordict."""
        return self.node_data.select("observation")

    @property
    def visits(self) -> int | torch.Tensor:
        """Alias of ``count``."""
        return self.count

    @visits.setter
    def visits(self, count: int | torch.Tensor) -> None:
        self.count = count

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "subtree" and value is not None:
            # each child remembers this vertex; a child reached from several parents keeps them all
            ref = weakref.ref(self._tensordict)
            children = value.unbind(0) if value.batch_dims else (value,)
            for child in children:
                known = child._parent
                if known is None:
                    child._parent = ref
                elif isinstance(known, weakref.ref):
                    child._parent = [known, ref]
                else:
                    child._parent = [*known, ref]
        super().__setattr__(name, value)

    @property
    def parent(self) -> Tree | None:
        """The vertex (or, for a vertex with several parents, the stack of vertices) above this one.

        Parents are held by weak reference: ``None`` at a root, or once the parent is gone.
        The result wraps the parent's own tensors (equal content, new ``Tree`` object).
        """
        found: list[TensorDictBase] = []
        for ref in _flatten_refs(self._parent):
            target = ref()
            if target is not None and not any(target is seen for seen in found):
                found.append(target)
        if not found:
            return None
        if len(found) == 1:
            return self._from_tensordict(found[0])
        return lazy_stack([self._from_tensordict(td) for td in found])

    @property
    def num_children(self) -> int:
        """Number of children (the length of ``subtree``)."""
        return 0 if self.subtree is None else len(self.subtree)

    @property
    def is_terminal(self) -> bool | torch.Tensor:
        """The ``("next", "done")`` flag of the rollout's last step; ``False`` without a rollout."""
        if self.rollout is None:
            return False
        return self.rollout[..., -1]["next", "done"].squeeze(-1)

    def fully_expanded(self, env: Any) -> bool:
        """Whether every action of ``env`` (``env.cardinality(node_data)``) has a child here."""
        return env.cardinality(self.node_data) == self.num_children

    def get_vertex_by_id(self, id: int) -> Tree:
        """The vertex with ``node_id == id``; ``ValueError`` when there is none."""
        for vertex in _walk(self):
            if vertex.node_id == id:
                return vertex
        raise ValueError(f"Node with id {id} not found.")

    def get_vertex_by_hash(self, hash: int) -> Tree:
        """The vertex with this ``hash``; ``ValueError`` when there is none."""
        for vertex in _walk(self):
            if vertex.hash == hash:
                return vertex
        raise ValueError(f"Node with hash {hash} not found.")

    def __contains__(self, other: Tree) -> bool:
        return any(vertex.hash == other.hash for vertex in self.vertices().values())

    def vertices(
        self, *, key_type: Literal["id", "hash", "path"] = "hash"
    ) -> dict[int | tuple[int, ...] | None, Tree]:
        """The vertices of the tree, by ``hash``, ``node_id`` or path (a tuple of child indices).

        With ``"hash"`` or ``"id"`` a vertex reached from several parents appears once; with
        ``"path"`` once per path that reaches it.

        Raises:
            ValueError: ``key_type`` is none of ``"id"``, ``"hash"``, ``"path"``.
        """
        if key_type not in ("id", "hash", "path"):
            raise ValueError(f"key_type must be either 'hash', 'id' or 'path'. Got {key_type}.")
        result = {}
        seen = set()
        queue = deque([(self, ())])
        while queue:
            vertex, path = queue.popleft()
            if key_type != "path":
                if vertex.hash in seen:
                    continue
                seen.add(vertex.hash)
            key = {"path": path, "id": vertex.node_id, "hash": vertex.hash}[key_type]
            result[key] = vertex
            for i in range(vertex.num_children):
                queue.append((vertex.subtree[i], (*path, i)))
        return result

    def num_vertices(self, *, count_repeat: bool = False) -> int:
        """The number of distinct vertices (by ``node_id``).

        ``count_repeat=True`` walks every path, so a vertex with several parents is found
        through each of them; the count is still of distinct ids.
        """
        found = self.vertices(key_type="path" if count_repeat else "hash").values()
        return len({vertex.node_id for vertex in found})

    def edges(self) -> list[tuple[int, int]]:
        """``(parent node_id, child node_id)`` for every edge, breadth first."""
        result = []
        for vertex in _walk(self):
            for i in range(vertex.num_children):
                result.append((vertex.node_id, vertex.subtree[i].node_id))
        return result

    def valid_paths(self) -> Iterator[tuple[int, ...]]:
        """Every path from this vertex to a leaf, as a tuple of child indices, breadth first."""
        queue = deque([(self, ())])
        while queue:
            vertex, path = queue.popleft()
            n = vertex.num_children
            if not n:
                yield path
            for i in range(n):
                queue.append((vertex.subtree[i], (*path, i)))

    def max_length(self) -> int:
        """The length (number of edges) of the longest path to a leaf."""
        return max((len(path) for path in self.valid_paths()), default=0)

    def rollout_from_path(self, path: tuple[int, ...]) -> TensorDictBase | None:
        """The rollouts of the vertices along ``path`` (this one first), joined in time.

        Returns ``None`` when no vertex on the path holds a rollout.
        """
        vertex = self
        pieces = [] if vertex.rollout is None else [vertex.rollout]
        for i in path:
            vertex = vertex.subtree[i]
            if vertex.rollout is not None:
                pieces.append(vertex.rollout)
        return torch.cat(pieces, dim=-1) if pieces else None

    def plot(self, *args: Any, **kwargs: Any) -> None:
        """Not provided: rl draws no figures here (TorchRL's needs plotly and igraph).

        ``to_string``, ``edges()`` and ``vertices(key_type="path")`` give the structure to
        draw with any graph library.
        """
        raise NotImplementedError(
            "Tree.plot is not part of rl; draw tree.edges() / tree.vertices(key_type='path') "
            "with a graph library, or print tree.to_string()"
        )

    def to_string(
        self, node_format_fn: Callable[[Tree], Any] = lambda tree: tree.node_data.to_dict()
    ) -> str:
        """One line per vertex that holds a rollout, depth first: its path, then ``node_format_fn(vertex)``.

        Lines are indented by one space per level below the first.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> from rl.data import MCTSForest
            >>> forest = MCTSForest()
            >>> forest.extend(TensorDict(
            ...     observation=torch.tensor([0, 1]), action=torch.tensor([5, 6]),
            ...     next=TensorDict(observation=torch.tensor([1, 2]), batch_size=[2]),
            ...     batch_size=[2]))
            >>> forest.extend(TensorDict(
            ...     observation=torch.tensor([0]), action=torch.tensor([7]),
            ...     next=TensorDict(observation=torch.tensor([3]), batch_size=[1]),
            ...     batch_size=[1]))
            >>> print(forest.get_tree(TensorDict(observation=torch.tensor(0))).to_string())
            (0,) {'observation': tensor(2)}
            (1,) {'observation': tensor(3)}
        """
        lines = []
        stack = [(self, ())]
        while stack:
            vertex, path = stack.pop()
            if vertex.subtree is not None:
                children = list(enumerate(vertex.subtree))
                stack.extend((child, (*path, i)) for i, child in reversed(children))
            if vertex.rollout is not None:
                indent = " " * max(len(path) - 1, 0)
                lines.append(f"{indent}{path} {node_format_fn(vertex)}")
        return "\n".join(lines)


def _as_key_list(value: Any, name: str) -> list[NestedKey] | None:
    if value is None:
        return None
    if isinstance(value, (str, tuple)):
        return [unravel_key(value)]
    if not isinstance(value, list):
        raise ValueError(f"{name} must be a list of NestedKeys or a NestedKey, got {value!r}.")
    return [unravel_key(key) for key in value]


class MCTSForest:
    """A store of rollouts from which search trees are read, as TorchRL 0.14.1's ``MCTSForest``.

    Rollouts (TED layout: root entries, the action, and a ``"next"`` tensordict) go in
    with :meth:`extend`. Two maps remember them: ``data_map`` takes each
    ``(observation, action)`` pair to what followed it; ``node_map`` takes each observation
    to the data-map indices (and hashes) of the actions taken there and a visit count.
    :meth:`get_tree` reads the tree that grows from a root observation: branching where
    rollouts diverged, joined where they meet the same ``(observation, action)``.

    Keyword Args:
        data_map (TensorDictMap, optional): the ``(observation, action) -> next`` map.
            Built on the first :meth:`extend` with
            :meth:`TensorDictMap.from_tensordict_pair` (a ``LazyTensorStorage(max_size)``).
        node_map (TensorDictMap, optional): the ``observation -> children`` map. Built on
            the first :meth:`extend` on a ``ListStorage(max_size)``.
        max_size (int, optional): capacity of both maps. Defaults to ``data_map.max_size``,
            then ``node_map.max_size``, then 1000. A value that disagrees with a given map
            raises ``ValueError``.
        done_keys (list of NestedKey, optional): defaults to ``["done", "terminated", "truncated"]``.
        reward_keys (list of NestedKey, optional): defaults to ``["reward"]``.
        observation_keys (list of NestedKey, optional): the entries that identify a node.
            Defaults to ``["observation"]``.
        action_keys (list of NestedKey, optional): defaults to ``["action"]``.
        excluded_keys (list of NestedKey, optional): entries not stored in the data map
            (removed from the root and from ``"next"``).
        consolidated (bool, optional): keep the data map's tensors in one consolidated
            storage (``LazyTensorStorage(consolidated=True)``). Defaults to ``False``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import MCTSForest
        >>> def rollout(observations, actions):
        ...     obs = torch.tensor(observations)
        ...     return TensorDict(observation=obs[:-1], action=torch.tensor(actions),
        ...                       next=TensorDict(observation=obs[1:], batch_size=[len(actions)]),
        ...                       batch_size=[len(actions)])
        >>> forest = MCTSForest()
        >>> forest.extend(rollout([0, 1, 2, 3], [0, 0, 0]))
        >>> forest.extend(rollout([0, 1, 4], [0, 1]))  # shares the first step, then branches
        >>> len(forest)
        4
        >>> tree = forest.get_tree(TensorDict(observation=torch.tensor(0)))
        >>> tree.rollout["next", "observation"], tree.num_children
        (tensor([1]), 2)
        >>> list(tree.valid_paths()), tree.rollout_from_path((0,))["next", "observation"]
        ([(0,), (1,)], tensor([1, 2, 3]))
    """

    def __init__(
        self,
        *,
        data_map: TensorDictMap | None = None,
        node_map: TensorDictMap | None = None,
        max_size: int | None = None,
        done_keys: list[NestedKey] | None = None,
        reward_keys: list[NestedKey] | None = None,
        observation_keys: list[NestedKey] | None = None,
        action_keys: list[NestedKey] | None = None,
        excluded_keys: list[NestedKey] | None = None,
        consolidated: bool | None = None,
    ) -> None:
        given = [(name, m.max_size) for name, m in (("data_map", data_map), ("node_map", node_map))
                 if m is not None]  # fmt: skip
        if max_size is None and given:
            max_size = given[0][1]
            reference = f"{given[0][0]}.max_size={max_size}"
        else:
            reference = f"max_size={max_size}"
        for name, size in given:
            if size != max_size:
                raise ValueError(
                    f"Conflicting max_size: got {reference} and {name}.max_size={size}."
                )
        self.data_map = data_map
        self.node_map = node_map
        self.max_size = max_size
        self.done_keys = done_keys
        self.reward_keys = reward_keys
        self.observation_keys = observation_keys
        self.action_keys = action_keys
        self.excluded_keys = excluded_keys
        self.consolidated = consolidated

    # keys: each defaults lazily, so get_keys_from_env can tell which were given
    @property
    def done_keys(self) -> list[NestedKey]:
        """The done entries (default ``["done", "terminated", "truncated"]``)."""
        if self._done_keys is None:
            self._done_keys = list(_DEFAULT_DONE_KEYS)
        return self._done_keys

    @done_keys.setter
    def done_keys(self, value: list[NestedKey] | NestedKey | None) -> None:
        self._done_keys = _as_key_list(value, "done_keys")

    @property
    def reward_keys(self) -> list[NestedKey]:
        """The reward entries under ``"next"`` (default ``["reward"]``)."""
        if self._reward_keys is None:
            self._reward_keys = ["reward"]
        return self._reward_keys

    @reward_keys.setter
    def reward_keys(self, value: list[NestedKey] | NestedKey | None) -> None:
        self._reward_keys = _as_key_list(value, "reward_keys")

    @property
    def action_keys(self) -> list[NestedKey]:
        """The action entries (default ``["action"]``)."""
        if self._action_keys is None:
            self._action_keys = ["action"]
        return self._action_keys

    @action_keys.setter
    def action_keys(self, value: list[NestedKey] | NestedKey | None) -> None:
        self._action_keys = _as_key_list(value, "action_keys")

    @property
    def observation_keys(self) -> list[NestedKey]:
        """The entries that identify a node (default ``["observation"]``)."""
        if self._observation_keys is None:
            self._observation_keys = ["observation"]
        return self._observation_keys

    @observation_keys.setter
    def observation_keys(self, value: list[NestedKey] | NestedKey | None) -> None:
        self._observation_keys = _as_key_list(value, "observation_keys")

    @property
    def excluded_keys(self) -> list[NestedKey] | None:
        """Entries left out of the data map, or ``None``."""
        return self._excluded_keys

    @excluded_keys.setter
    def excluded_keys(self, value: list[NestedKey] | NestedKey | None) -> None:
        self._excluded_keys = _as_key_list(value, "excluded_keys")

    def get_keys_from_env(self, env: Any) -> None:
        """Takes the reward, done, action and observation keys not set yet from ``env``."""
        if self._reward_keys is None:
            self.reward_keys = env.reward_keys
        if self._done_keys is None:
            self.done_keys = env.done_keys
        if self._action_keys is None:
            self.action_keys = env.action_keys
        if self._observation_keys is None:
            self.observation_keys = env.observation_keys

    @staticmethod
    def _write_fn_stack(new: TensorDictBase, old: TensorDictBase | None = None) -> TensorDictBase:
        """The node map's ``write_fn``: the actions taken at a node, and how often it was left.

        Each row of ``new`` holds data-map ``_index``/``_hash`` entries (one, or a vector
        of them) and optionally a ``count`` of the steps it stands for (default 1). A new
        node keeps them as vectors; a known node (``old``) appends the indices it has not
        seen yet, with their hashes, in order of arrival, and adds the counts.
        """
        rows = []
        pairs = zip(new.unbind(0), old.unbind(0) if old is not None else [None] * len(new))
        for new_row, old_row in pairs if new.ndim else [(new, old)]:
            index = new_row["_index"].reshape(-1)
            hashes = new_row["_hash"].reshape(-1)
            count = new_row.get("count", None)
            count = torch.ones((), dtype=torch.int) if count is None else count.to(torch.int)
            if old_row is not None:
                fresh = ~torch.isin(index, old_row["_index"])
                index = torch.cat([old_row["_index"], index[fresh]])
                hashes = torch.cat([old_row["_hash"], hashes[fresh]])
                count = old_row["count"] + count
            rows.append(TensorDict(_index=index, _hash=hashes, count=count, device=new_row.device))
        return lazy_stack(rows) if new.ndim else rows[0]

    def _check_keys(self, data: TensorDictBase, what: str, *, with_next: bool) -> None:
        present = data.keys(True, True)
        wanted = [("observation_keys", key) for key in self.observation_keys]
        if with_next:
            wanted += [("action_keys", key) for key in self.action_keys]
        for name, key in wanted:
            if key not in present:
                raise KeyError(
                    f"{what} has no entry {key!r} (MCTSForest {name}={getattr(self, name)}); "
                    f"it holds {', '.join(sorted(map(str, present)))}"
                )
        if with_next:
            if "next" not in data.keys():
                raise KeyError(f"{what} has no 'next' entry: a rollout is a TED tensordict")
            for key in self.observation_keys:
                if ("next", *((key,) if isinstance(key, str) else key)) not in present:
                    raise KeyError(
                        f"{what} has no entry {('next', key)!r} (MCTSForest observation_keys="
                        f"{self.observation_keys})"
                    )

    def _make_data_map(self, source: TensorDictBase, dest: TensorDictBase) -> None:
        size = {} if self.max_size is None else {"max_size": self.max_size}
        self.data_map = TensorDictMap.from_tensordict_pair(
            source,
            dest,
            in_keys=[*self.observation_keys, *self.action_keys],
            consolidated=self.consolidated,
            **size,
        )
        if self.max_size is None:
            self.max_size = self.data_map.max_size

    def _make_node_map(self, source: TensorDictBase, dest: TensorDictBase) -> None:
        self.node_map = TensorDictMap.from_tensordict_pair(
            source,
            dest,
            in_keys=list(self.observation_keys),
            out_keys=[*self.data_map.query_module.out_keys, "count"],
            storage_constructor=functools.partial(ListStorage, self.max_size),
            collate_fn=lazy_stack,
            write_fn=self._write_fn_stack,
        )

    def extend(self, rollout: TensorDictBase, *, return_node: bool = False) -> Tree | None:
        """Adds the transitions of a rollout (TED layout, time last; ``[B, T]`` is read as ``B*T`` steps).

        A step whose ``(observation, action)`` is known already adds nothing new; a step
        from a known observation with a new action adds a branch there.

        Args:
            rollout (TensorDict): root observation and action entries, and a ``"next"``
                tensordict with the next observation (and reward, done, ...).
            return_node (bool, optional): return ``get_tree(rollout)`` (the tree grown from
                the rollout's first observation). Defaults to ``False``.

        Raises:
            KeyError: an observation or action key (or ``("next", observation)``) is missing;
                the message names it.
        """
        if not isinstance(rollout, TensorDictBase):
            raise TypeError(f"MCTSForest.extend expects a TensorDict rollout, got {type(rollout)}")
        self._check_keys(rollout, "the rollout", with_next=True)
        flat = rollout.reshape(-1) if rollout.ndim != 1 else rollout
        source = flat.exclude("next").copy()
        dest = flat.select("next", *self.action_keys).copy()
        if self.excluded_keys is not None:
            dest = dest.exclude(*self.excluded_keys)
            dest.set("next", dest.get("next").exclude(*self.excluded_keys))
        if self.data_map is None:
            self._make_data_map(source, dest)
        # one data-map write per distinct (observation, action) (the last row of each), then
        # one node-map write per distinct observation with all the actions taken there
        keyed = self.data_map.query_module(source, extend=True, clone=True)
        index_key, hash_key = self.data_map.query_module.out_keys
        step_index, step_hash = keyed[index_key], keyed[hash_key]
        last = {i: row for row, i in enumerate(step_index.tolist())}
        rows = torch.tensor(sorted(last.values()))
        self.data_map[source[rows]] = dest[rows]
        if self.node_map is None:
            self._make_node_map(source, dest)
        nodes = self.node_map.query_module(source, extend=True, clone=True)[index_key]
        groups: dict[int, list[int]] = {}
        for row, node in enumerate(nodes.tolist()):
            groups.setdefault(node, []).append(row)
        firsts, children = [], []
        for members in groups.values():
            firsts.append(members[0])
            picked = torch.tensor(members)
            index, order = step_index[picked], []
            seen: set[int] = set()
            for position, i in enumerate(index.tolist()):
                if i not in seen:
                    seen.add(i)
                    order.append(position)
            order = torch.tensor(order)
            children.append(
                TensorDict(
                    {
                        index_key: index[order],
                        hash_key: step_hash[picked][order],
                        "count": torch.tensor(len(members), dtype=torch.int),
                    }
                )
            )
        self.node_map[source[torch.tensor(firsts)]] = lazy_stack(children)
        if return_node:
            return self.get_tree(flat[0])
        return None

    def add(self, step: TensorDictBase, *, return_node: bool = False) -> Tree | None:
        """Adds a single transition (no batch dimension); see :meth:`extend`."""
        tree = self.extend(step.unsqueeze(0) if not step.ndim else step)
        if return_node:
            return self.get_tree(step)
        return tree

    def get_child(self, root: TensorDictBase) -> TensorDictBase:
        """What the data map holds for ``root``'s ``(observation, action)``: its ``"next"`` and action."""
        return self.data_map[root]

    @property
    def _index_key(self) -> NestedKey:
        return self.data_map.query_module.index_key

    @property
    def _hash_key(self) -> NestedKey:
        return self.data_map.query_module.hash_key

    def _lookup(self, node: TensorDictBase) -> TensorDictBase:
        """The node map's row for ``node``, or a KeyError naming its observation."""
        meta = None if self.node_map is None else self.node_map.get(node)
        if meta is None:
            shown = {str(k): v for k, v in node.to_dict().items()}
            raise KeyError(
                f"no rollout in the forest leaves the root {shown} (observation_keys="
                f"{self.observation_keys}); extend the forest with a rollout from it first"
            )
        return meta

    def _local_tree(
        self, node: TensorDictBase, index: torch.Tensor | None, compact: bool
    ) -> tuple[Tree, torch.Tensor | None, torch.Tensor | None]:
        """A vertex and its children's data-map indices and hashes.

        From ``node`` (taking the data-map entry ``index``, or every action of ``node``
        when ``None``), steps are followed while exactly one action leaves the current
        observation (only one step with ``compact=False``); they make the vertex's rollout.
        """
        hashes = None
        if index is None:
            meta = self._lookup(node)
            index, hashes = meta[self._index_key], meta[self._hash_key]
        steps = []
        while index is not None and index.numel() == 1:
            stored = self.data_map.storage[int(index.reshape(()))]
            step = stored.copy()
            for key in self.observation_keys:
                step.set(key, node.get(key).to(step.device))
            steps.append(step)
            following = stored["next"].select(*self.observation_keys)
            meta = self.node_map.get(following)
            if meta is None:
                node, index, hashes = following, None, None
            else:
                node, index, hashes = following, meta[self._index_key], meta[self._hash_key]
                if not compact:
                    break
        vertex = Tree(
            rollout=torch.stack(steps, -1) if steps else None,
            count=torch.zeros((), dtype=torch.int32),
            wins=torch.zeros(()),
            node_data=node,
            index=index,
            hash=None,
            subtree=None,
        )
        return vertex, index, hashes

    def get_tree(
        self, root: TensorDictBase, *, max_depth: int | None = None, compact: bool = True
    ) -> Tree:
        """The tree that grows from ``root``'s observation.

        Vertices are numbered breadth first (``node_id``, root 0). Where two paths reach the
        same ``(observation, action)``, the vertex is shared: it appears under both parents
        with one id.

        Args:
            root (TensorDict): holds the ``observation_keys`` entries (others are ignored).

        Keyword Args:
            max_depth (int, optional): expand children down to this depth: ``0`` gives the
                root and its children, ``1`` adds grandchildren, ... Defaults to no limit.
            compact (bool, optional): one vertex per branching point, the steps between
                in its rollout (``True``), or one vertex per step (``False``). With a single
                action at the root, the root's rollout holds the steps up to the first branch
                (one step with ``compact=False``).

        Raises:
            KeyError: ``root`` lacks an observation key, or no stored rollout leaves it.
        """
        self._check_keys(root, "the root", with_next=False)
        node = root.select(*self.observation_keys)
        tree, index, hashes = self._local_tree(node, None, compact)
        tree.node_id = 0
        next_id = 1
        built: dict[int, tuple[Tree, torch.Tensor | None, torch.Tensor | None]] = {}
        queue = deque([(tree, index, hashes, 0)] if index is not None else [])
        while queue:
            vertex, index, hashes, depth = queue.popleft()
            expand = max_depth is None or depth < max_depth
            children = []
            for i, h in zip(index.unbind(0), hashes.tolist()):
                if h in built:
                    children.append(built[h][0])
                    continue
                child, child_index, child_hashes = self._local_tree(vertex.node_data, i, compact)
                child.node_id, child.hash = next_id, h
                next_id += 1
                built[h] = (child, child_index, child_hashes)
                children.append(child)
                if expand and child_index is not None:
                    queue.append((child, child_index, child_hashes, depth + 1))
            vertex.subtree = lazy_stack(children)
        return tree

    @classmethod
    def valid_paths(cls, tree: Tree) -> Iterator[tuple[int, ...]]:
        """``tree.valid_paths()``."""
        yield from tree.valid_paths()

    def __len__(self) -> int:
        return 0 if self.data_map is None else len(self.data_map)

    def to_string(
        self,
        td_root: TensorDictBase,
        node_format_fn: Callable[[Tree], Any] = lambda tree: tree.node_data.to_dict(),
    ) -> str:
        """``get_tree(td_root).to_string(node_format_fn)``."""
        return self.get_tree(td_root).to_string(node_format_fn)
