"""Gymnasium spaces to ``rl.core`` specs, and the value converters between the two.

A space is flattened into :class:`SpaceLeaf` entries: one per array of the gym value.
Dict spaces nest. A Tuple of items of one kind (same space type, shape and dtype, same
number of categories) is stacked into one leaf of shape ``[n_items, *item]``, as
TorchRL's ``torch.stack`` of the item specs; a Tuple of mixed items (which TorchRL cannot
stack) nests with keys ``"0"``, ``"1"``... Each leaf knows
its TensorDict key, where its value sits in the gym structure, its spec, and how to
convert a gym value to the spec's layout (``from_gym``) and back (``to_gym``). The
converters work on numpy arrays with any leading (time / env) dims.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch
from gymnasium import spaces

from rl.core import (
    Binary,
    Bounded,
    Categorical,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    Unbounded,
)

__all__ = [
    "SpaceLeaf",
    "space_leaves",
    "walk",
    "assemble",
    "numpy_to_torch_dtype",
    "register_gym_spec_conversion",
]

_NP_TO_TORCH = {
    np.dtype(np.float16): torch.float16,
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64,
    np.dtype(np.int8): torch.int8,
    np.dtype(np.int16): torch.int16,
    np.dtype(np.int32): torch.int32,
    np.dtype(np.int64): torch.int64,
    np.dtype(np.uint8): torch.uint8,
    np.dtype(np.bool_): torch.bool,
}


def numpy_to_torch_dtype(dtype: Any) -> torch.dtype:
    """The torch dtype of a numpy dtype (``TypeError`` for one torch lacks)."""
    dtype = np.dtype(dtype)
    if dtype not in _NP_TO_TORCH:
        raise TypeError(f"gym space dtype {dtype} has no torch equivalent")
    return _NP_TO_TORCH[dtype]


class SpaceLeaf(NamedTuple):
    """One array of a gym value and its spec."""

    key: tuple[str, ...]
    path: tuple
    spec: Any
    from_gym: Callable[[Any], np.ndarray] | None  # None: the gym array is used as is
    to_gym: Callable[[np.ndarray], Any]


def walk(value: Any, path: tuple) -> Any:
    """The item of a (nested) gym value at ``path``."""
    for item in path:
        value = value[item]
    return value


def assemble(space: spaces.Space, leaves: dict[tuple, Any], path: tuple = ()) -> Any:
    """Builds the gym value of ``space`` from ``{path: leaf_value}``."""
    if path in leaves:  # a leaf, or a stacked Tuple
        return leaves[path]
    if isinstance(space, spaces.Dict):
        return {k: assemble(sub, leaves, (*path, k)) for k, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(assemble(sub, leaves, (*path, i)) for i, sub in enumerate(space.spaces))
    return leaves[path]


def _box(space: spaces.Box, batch: tuple, key, path) -> SpaceLeaf:
    dtype = numpy_to_torch_dtype(space.dtype)
    shape = (*batch, *space.shape)
    low = torch.as_tensor(np.asarray(space.low))
    high = torch.as_tensor(np.asarray(space.high))
    if low.is_floating_point() and bool(torch.isinf(low).all()) and bool(torch.isinf(high).all()):
        spec = Unbounded(shape=shape, dtype=dtype)
    else:
        spec = Bounded(
            low.expand(shape).to(dtype), high.expand(shape).to(dtype), shape=shape, dtype=dtype
        )
    np_dtype = space.dtype

    def to_gym(array: np.ndarray) -> np.ndarray:
        return np.asarray(array, dtype=np_dtype)

    return SpaceLeaf(key, path, spec, None, to_gym)


def _discrete(space: spaces.Discrete, batch: tuple, key, path, categorical: bool) -> SpaceLeaf:
    n = int(space.n)
    start = int(space.start)
    if categorical:
        spec = Categorical(n, shape=batch, dtype=torch.int64)

        def from_gym(value):
            return np.asarray(value, dtype=np.int64) - start

        def to_gym(array):
            return np.asarray(array, dtype=np.int64) + start

    else:
        spec = OneHot(n, shape=(*batch, n), dtype=torch.int64)
        eye = np.eye(n, dtype=np.int64)

        def from_gym(value):
            return eye[np.asarray(value, dtype=np.int64) - start]

        def to_gym(array):
            return np.asarray(array).argmax(-1) + start

    return SpaceLeaf(key, path, spec, from_gym, to_gym)


def _multi_discrete(
    space: spaces.MultiDiscrete, batch: tuple, key, path, categorical: bool
) -> SpaceLeaf:
    nvec = np.asarray(space.nvec, dtype=np.int64)
    start = np.asarray(space.start, dtype=np.int64)
    gym_dtype = space.dtype
    if categorical or nvec.ndim > 1:
        spec = MultiCategorical(
            torch.as_tensor(nvec), shape=(*batch, *nvec.shape), dtype=torch.int64
        )

        def from_gym(value):
            return np.asarray(value, dtype=np.int64) - start

        def to_gym(array):
            return (np.asarray(array, dtype=np.int64) + start).astype(gym_dtype)

    else:
        spec = MultiOneHot(nvec.tolist(), shape=(*batch, int(nvec.sum())), dtype=torch.int64)
        eyes = [np.eye(int(n), dtype=np.int64) for n in nvec]
        bounds = np.cumsum(nvec)[:-1]

        def from_gym(value):
            value = np.asarray(value, dtype=np.int64) - start
            return np.concatenate([eye[value[..., i]] for i, eye in enumerate(eyes)], -1)

        def to_gym(array):
            parts = np.split(np.asarray(array), bounds, axis=-1)
            return (np.stack([p.argmax(-1) for p in parts], -1) + start).astype(gym_dtype)

    return SpaceLeaf(key, path, spec, from_gym, to_gym)


def _multi_binary(space: spaces.MultiBinary, batch: tuple, key, path) -> SpaceLeaf:
    shape = tuple(space.shape)
    spec = Binary(n=shape[-1], shape=(*batch, *shape), dtype=torch.int8)

    def to_gym(array):
        return np.asarray(array, dtype=np.int8)

    return SpaceLeaf(key, path, spec, None, to_gym)


def _stackable(space: spaces.Tuple) -> bool:
    """Whether the items of a Tuple space stack into one array (one kind, shape, dtype)."""
    items = space.spaces
    first = items[0] if items else None
    kinds = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
    if not isinstance(first, kinds):
        return False
    for item in items[1:]:
        if type(item) is not type(first) or item.shape != first.shape:
            return False
        if item.dtype != first.dtype:
            return False
        if isinstance(first, spaces.Discrete) and (item.n, item.start) != (first.n, first.start):
            return False
        if isinstance(first, spaces.MultiDiscrete) and not (
            np.array_equal(item.nvec, first.nvec) and np.array_equal(item.start, first.start)
        ):
            return False
    return True


def _stacked_tuple(space: spaces.Tuple, batch: tuple, categorical: bool, key, path) -> SpaceLeaf:
    """One leaf ``[*batch, n_items, *item]`` for a Tuple of items of one kind.

    The gym value is a tuple of the items (each with the leading dims of a vector env);
    the action sent back is a tuple too, as gymnasium's Tuple space expects.
    """
    subs = space.spaces
    items = [space_leaves(sub, (), categorical, key, path)[0] for sub in subs]
    item_ndim = len(items[0].spec.shape)
    if isinstance(subs[0], spaces.Box):  # items may differ in bounds: stack them
        low = np.stack([np.broadcast_to(sub.low, sub.shape) for sub in subs])
        high = np.stack([np.broadcast_to(sub.high, sub.shape) for sub in subs])
        spec = _box(spaces.Box(low, high, dtype=subs[0].dtype), batch, key, path).spec
    else:
        spec = space_leaves(subs[0], (*batch, len(subs)), categorical, key, path)[0].spec
    axis = -1 - item_ndim  # the items' dim: right before each item's own dims
    from_items = [leaf.from_gym for leaf in items]
    to_items = [leaf.to_gym for leaf in items]

    def from_gym(value):
        return np.stack(
            [np.asarray(v) if f is None else f(v) for f, v in zip(from_items, value)], axis
        )

    def to_gym(array):
        array = np.asarray(array)
        return tuple(to(np.take(array, i, axis=axis)) for i, to in enumerate(to_items))

    return SpaceLeaf(key, path, spec, from_gym, to_gym)


# User conversions (``register_gym_spec_conversion``): a space class, or its path under
# ``gymnasium.spaces`` as a string (``"Box"``, ``"tuple.Tuple"``), to a function of the space
# that returns its spec.
_CONVERSIONS: dict[Any, Callable[..., Any]] = {}
_BUILT_IN = (
    spaces.Dict,
    spaces.Tuple,
    spaces.Box,
    spaces.Discrete,
    spaces.MultiDiscrete,
    spaces.MultiBinary,
)


def register_gym_spec_conversion(spec_type: type | str) -> Callable:
    """Registers a function that converts a gymnasium space type to a spec (a decorator).

    The function is called as ``fn(space, dtype=None, device=None,
    categorical_action_encoding=..., remap_state_to_observation=..., batch_size=())`` and
    returns the spec of one entry (unused arguments can be taken as ``**kwargs``); the
    env's batch dims are prepended to it. It applies to ``spec_type`` and its subclasses:
    the conversion registered for the closest class of a space's MRO wins, and one
    registered for a built-in kind (``Box``, ``Discrete``, ``MultiDiscrete``,
    ``MultiBinary``, ``Dict``, ``Tuple``) replaces the built-in conversion. The gym values of
    such a space are read with ``numpy.asarray`` (and sent back to gym the same way).

    Args:
        spec_type: the space class, or its path under ``gymnasium.spaces`` as a string
            (``"Box"``, ``"tuple.Tuple"``).

    Returns:
        The decorator, which registers and returns the function unchanged.

    Raises:
        TypeError: ``spec_type`` is neither a class nor a string.

    Examples:
        >>> import gymnasium as gym
        >>> import numpy as np
        >>> import torch
        >>> from rl.core import Unbounded
        >>> from rl.envs import register_gym_spec_conversion
        >>> class Ring(gym.spaces.Box):  # a Box whose values wrap around
        ...     pass
        >>> @register_gym_spec_conversion(Ring)
        ... def convert_ring(space, **kwargs):
        ...     return Unbounded(shape=space.shape, dtype=torch.float32)
        >>> from rl.envs._gym_spaces import space_leaves
        >>> ring = Ring(0.0, 1.0, (2,), np.float32)
        >>> type(space_leaves(ring, key=("observation",))[0].spec).__name__
        'Unbounded'
    """
    if not isinstance(spec_type, type | str):
        raise TypeError(
            "register_gym_spec_conversion takes a gym space class or its path under "
            f"gymnasium.spaces as a string, got {type(spec_type).__name__}"
        )

    def decorator(conversion_func: Callable) -> Callable:
        _CONVERSIONS[spec_type] = conversion_func
        return conversion_func

    return decorator


def _resolve(name: str) -> type | None:
    """The class at ``name`` under ``gymnasium.spaces`` (``None`` if there is none)."""
    obj: Any = spaces
    for part in name.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj if isinstance(obj, type) else None


def _registered(space: spaces.Space) -> Callable | None:
    """The user conversion of ``space``'s closest class (``None``: the built-in one, or
    none)."""
    if not _CONVERSIONS:
        return None
    by_class = {}
    for key, func in _CONVERSIONS.items():
        cls = _resolve(key) if isinstance(key, str) else key
        if cls is not None:
            by_class[cls] = func
    for base in type(space).__mro__:
        if base in by_class:
            return by_class[base]
        if base in _BUILT_IN:
            return None
    return None


def _user_leaf(func: Callable, space, batch: tuple, categorical: bool, key, path) -> SpaceLeaf:
    spec = func(
        space,
        dtype=None,
        device=None,
        categorical_action_encoding=categorical,
        remap_state_to_observation=False,
        batch_size=(),
    )
    if batch:
        spec = spec.expand(*batch, *spec.shape)

    def to_gym(array):
        return np.asarray(array)

    return SpaceLeaf(key, path, spec, None, to_gym)


def space_leaves(
    space: spaces.Space,
    batch: tuple = (),
    categorical: bool = False,
    key: tuple[str, ...] = (),
    path: tuple = (),
) -> list[SpaceLeaf]:
    """Flattens ``space`` into leaves keyed under ``key``, with ``batch`` leading dims.

    Args:
        space: a Box, Discrete, MultiDiscrete, MultiBinary, Dict or Tuple space.
        batch: the env batch shape prepended to each spec's shape.
        categorical: Discrete / MultiDiscrete become integer specs (``Categorical`` /
            ``MultiCategorical``) instead of one-hot ones (``OneHot`` / ``MultiOneHot``).
        key: the TensorDict key of a non-Dict space (Dict keys are appended to it).
        path: position of ``space`` in the enclosing gym structure.

    Raises:
        TypeError: for a space type with no spec equivalent (and no registered
            conversion, see :func:`register_gym_spec_conversion`).
    """
    batch = tuple(batch)
    user = _registered(space)
    if user is not None:
        return [_user_leaf(user, space, batch, categorical, key, path)]
    if isinstance(space, spaces.Dict):
        leaves = []
        for name, sub in space.spaces.items():
            leaves += space_leaves(sub, batch, categorical, (*key, str(name)), (*path, name))
        return leaves
    if isinstance(space, spaces.Tuple):
        if _stackable(space):
            return [_stacked_tuple(space, batch, categorical, key, path)]
        leaves = []
        for i, sub in enumerate(space.spaces):
            leaves += space_leaves(sub, batch, categorical, (*key, str(i)), (*path, i))
        return leaves
    if isinstance(space, spaces.Box):
        return [_box(space, batch, key, path)]
    if isinstance(space, spaces.Discrete):
        return [_discrete(space, batch, key, path, categorical)]
    if isinstance(space, spaces.MultiDiscrete):
        return [_multi_discrete(space, batch, key, path, categorical)]
    if isinstance(space, spaces.MultiBinary):
        return [_multi_binary(space, batch, key, path)]
    raise TypeError(
        f"gym space {space!r} is not supported: expected Box, Discrete, MultiDiscrete, "
        "MultiBinary, Dict or Tuple, or a space type registered with "
        "rl.envs.register_gym_spec_conversion"
    )
