"""Environment helpers: ``step_mdp``, ``check_env_specs``, ``RandomPolicy``."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal, NamedTuple

import torch
from tensordict import (
    LazyStackedTensorDict,
    TensorDict,
    TensorDictBase,
    is_leaf_nontensor,
    is_tensor_collection,
)

from rl.core import Composite, NonTensor, StackedComposite, Unbounded

if TYPE_CHECKING:
    from ._env_base import EnvBase

__all__ = ["step_mdp", "check_env_specs", "RandomPolicy"]

NestedKey = str | tuple[str, ...]


def _key_set(keys: NestedKey | Iterable[NestedKey] | None) -> set[tuple[str, ...]]:
    if keys is None:
        return set()
    if isinstance(keys, str | tuple):  # a single (possibly nested) key
        keys = [keys]
    return {(key,) if isinstance(key, str) else tuple(key) for key in keys}


def _prefixes(keys: set[tuple[str, ...]]) -> set[tuple[str, ...]]:
    return {key[:i] for key in keys for i in range(1, len(key))}


def _excluding(td: TensorDictBase, keys: set[tuple[str, ...]]) -> TensorDictBase:
    """Shallow copy of ``td`` without ``keys`` (nested batch sizes and lazy stacks kept)."""
    if not keys:
        return td.copy()
    return td.exclude(*(key if len(key) > 1 else key[0] for key in keys))


def _merge_other(
    out: TensorDictBase,
    root: TensorDictBase,
    excluded: set[tuple[str, ...]],
    partial: set[tuple[str, ...]],
    path: tuple[str, ...] = (),
) -> None:
    """Adds to ``out`` the entries of ``root`` it lacks (the ``"next"`` values win).

    A sub-tensordict of ``root`` absent from ``out`` is set whole (its batch size and
    type kept) unless an excluded key lies inside it (``partial``); lazy stacks present
    on both sides are merged element by element.
    """
    if isinstance(out, LazyStackedTensorDict) and isinstance(root, LazyStackedTensorDict):
        if out.stack_dim == root.stack_dim and len(out.tensordicts) == len(root.tensordicts):
            for dst, src in zip(out.tensordicts, root.tensordicts):
                _merge_other(dst, src, excluded, partial, path)
            return
    present = set(out.keys())
    for name in root.keys():
        key = (*path, name)
        if name == "_reset" or key in excluded or (not path and name == "next"):
            continue
        if name in present:
            dst = out.get(name)
            if is_tensor_collection(dst):
                src = root.get(name)
                if is_tensor_collection(src):
                    dst = dst.copy()  # shallow: the input's "next" is not modified
                    _merge_other(dst, src, excluded, partial, key)
                    out.set(name, dst)
            continue
        value = root.get(name)
        if key in partial and is_tensor_collection(value):
            value = _excluding(value, {k[len(key) :] for k in excluded if k[: len(key)] == key})
        if isinstance(value, torch.Tensor) or is_tensor_collection(value):
            out.set(name, value)
        else:  # a tensorclass's plain field (``Tokens.padded``) read back as a Python value
            out.set_non_tensor(name, value)


def _merge_plain(
    nxt: TensorDict,
    root: TensorDict | None,
    drop: set[tuple[str, ...]],
    excluded: set[tuple[str, ...]],
    partial: set[tuple[str, ...]],
    path: tuple[str, ...],
) -> dict | None:
    """:func:`_excluding` + :func:`_merge_other` on plain TensorDicts, on their dicts.

    Returns the entries of the merged tensordict, or ``None`` when a value is a tensor
    collection other than a plain ``TensorDict`` (lazy stacks, tensorclasses...): the
    caller then takes the generic path, whose result this one reproduces.
    """
    out = {}
    for name, value in nxt._tensordict.items():
        key = (*path, name)
        if key in drop:
            continue
        if type(value) is not TensorDict:
            if is_tensor_collection(value):
                return None
            out[name] = value
            continue
        sub = None if root is None else root._tensordict.get(name)
        if sub is not None and type(sub) is not TensorDict:
            if is_tensor_collection(sub):
                return None
            sub = None  # a tensor at the root, a tensordict in "next": "next" wins
        if value._has_names():
            return None
        entries = _merge_plain(value, sub, drop, excluded, partial, key)
        if entries is None:
            return None
        out[name] = TensorDict._new_unsafe(
            entries, batch_size=value.batch_size, device=value.device, nested=False
        )
    if root is None:
        return out
    for name, value in root._tensordict.items():
        if name in out or name == "_reset" or (not path and name == "next"):
            continue
        key = (*path, name)
        if key in excluded:
            continue
        if type(value) is not TensorDict:
            if is_tensor_collection(value):
                return None
        elif key in partial:
            value = _excluding(value, {k[len(key) :] for k in excluded if k[: len(key)] == key})
        out[name] = value
    return out


def step_mdp(
    tensordict: TensorDictBase,
    next_tensordict: TensorDictBase | None = None,
    keep_other: bool = True,
    exclude_reward: bool = True,
    exclude_done: bool = False,
    exclude_action: bool = True,
    reward_keys: NestedKey | Iterable[NestedKey] = "reward",
    done_keys: NestedKey | Iterable[NestedKey] = "done",
    action_keys: NestedKey | Iterable[NestedKey] = "action",
) -> TensorDictBase:
    """Moves the ``"next"`` entries of a transition to the root of a new TensorDict.

    The result is the root tensordict of the following step: ``("next", obs)`` becomes
    ``obs``. Tensors are shared, not copied; nested sub-tensordicts keep their batch
    size (a group ``("agents", ...)`` of batch ``[B, n_agents]`` stays so) and lazy
    stacks stay lazy (heterogeneous entries flow through). ``"_reset"`` masks are
    dropped.

    Args:
        tensordict: a transition with a ``"next"`` sub-tensordict.
        next_tensordict: where to write the result (TorchRL's destination tensordict,
            updated and returned); ``None``: a new TensorDict.
        keep_other: keep the root entries that ``"next"`` does not hold (policy outputs,
            recurrent states...).
        exclude_reward: drop the reward keys.
        exclude_done: drop the done keys.
        exclude_action: drop the action keys of the root (kept otherwise, also with
            ``keep_other=False``).
        reward_keys, done_keys, action_keys: the keys these options refer to (a key or
            a list of keys; TorchRL's defaults ``"reward"``, ``"done"``, ``"action"``).

    Returns:
        a new TensorDict with the batch size and device of ``tensordict``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.envs import step_mdp
        >>> td = TensorDict(
        ...     observation=torch.zeros(3), action=torch.ones(1),
        ...     next=TensorDict(observation=torch.ones(3), reward=torch.ones(1)),
        ... )
        >>> sorted(step_mdp(td).keys())
        ['observation']
        >>> step_mdp(td)["observation"]
        tensor([1., 1., 1.])
        >>> agents = TensorDict(obs=torch.zeros(2, 5, 3), batch_size=[2, 5])
        >>> td = TensorDict(agents=agents, next={"agents": agents.clone()}, batch_size=[2])
        >>> step_mdp(td)["agents"].batch_size
        torch.Size([2, 5])
    """
    out = _step_mdp(
        tensordict, keep_other, exclude_reward, exclude_done, exclude_action,
        reward_keys, done_keys, action_keys,
    )  # fmt: skip
    out = _finish(out, tensordict, keep_other, exclude_action, reward_keys, done_keys, action_keys)
    if next_tensordict is not None:  # TorchRL's destination tensordict
        next_tensordict.update(out)
        return next_tensordict
    return out


def _finish(out, tensordict, keep_other, exclude_action, reward_keys, done_keys, action_keys):
    """TorchRL's last rules of ``step_mdp``: the root's action stays without the other
    root entries, and no group is left empty by the exclusions."""
    if not keep_other and not exclude_action:  # the action stays without the others
        # select: a lazy stack's heterogeneous actions stay lazy (get would stack them)
        actions = tensordict.select(*_key_set(action_keys), strict=False)
        if type(out) is TensorDict and type(actions) is TensorDict:
            for key, value in actions.items(True, True):
                _set_unshared(out, key, value)
        elif not actions.is_empty():
            out.update(actions)
    # a sub-tensordict the exclusions emptied goes too (TorchRL keeps no empty group)
    groups = {k[:i] for k in _key_set(reward_keys) | _key_set(done_keys) | _key_set(action_keys)
              for i in range(len(k) - 1, 0, -1)}  # fmt: skip
    for group in sorted(groups, key=len, reverse=True):
        sub = out.get(group, None)
        if isinstance(sub, TensorDictBase) and sub.is_empty():
            out.del_(group)
    return out


def _set_unshared(out: TensorDict, key, value: torch.Tensor) -> None:
    """``out.set(key, value)`` without writing into a sub-tensordict ``out`` shares with
    the input (the groups of ``"next"`` are taken as they are): the groups on the path
    are shallow-copied first."""
    if isinstance(key, str) or len(key) == 1:
        out.set(key, value)
        return
    node = out
    for depth, name in enumerate(key[:-1]):
        sub = node.get(name, None)
        if sub is None:  # the rest of the path is new: set creates it
            node.set(key[depth:], value)
            return
        sub = sub.clone(recurse=False)
        node.set(name, sub)
        node = sub
    node.set(key[-1], value)


def _step_mdp(
    tensordict: TensorDictBase,
    keep_other: bool,
    exclude_reward: bool,
    exclude_done: bool,
    exclude_action: bool,
    reward_keys,
    done_keys,
    action_keys,
) -> TensorDictBase:
    next_tensordict = tensordict.get("next", None)
    if next_tensordict is None:
        raise KeyError(
            "step_mdp needs a 'next' entry in the tensordict, got keys "
            f"{sorted(map(str, tensordict.keys()))}"
        )
    excluded = set()
    if exclude_reward:
        excluded |= _key_set(reward_keys)
    if exclude_done:
        excluded |= _key_set(done_keys)
    drop = excluded | {("_reset",)} if "_reset" in next_tensordict.keys() else excluded
    root_excluded = excluded | _key_set(action_keys) if exclude_action else excluded
    if (
        type(tensordict) is TensorDict
        and type(next_tensordict) is TensorDict
        and not next_tensordict._has_names()
    ):
        # plain tensordicts (the common case): the same result built on their dicts
        entries = _merge_plain(
            next_tensordict,
            tensordict if keep_other else None,
            drop,
            root_excluded,
            _prefixes(root_excluded),
            (),
        )
        if entries is not None:
            return TensorDict._new_unsafe(
                entries,
                batch_size=tensordict.batch_size,
                device=next_tensordict.device,
                nested=False,
            )
    return _step_mdp_generic(tensordict, next_tensordict, keep_other, drop, root_excluded)


def _step_mdp_generic(
    tensordict: TensorDictBase,
    next_tensordict: TensorDictBase,
    keep_other: bool,
    drop: set[tuple[str, ...]],
    root_excluded: set[tuple[str, ...]],
) -> TensorDictBase:
    """``step_mdp`` on any tensordicts (lazy stacks, tensorclasses) through their API."""
    out = _excluding(next_tensordict, drop)
    if keep_other:
        _merge_other(out, tensordict, root_excluded, _prefixes(root_excluded))
    if out.batch_size != tensordict.batch_size:
        out.batch_size = tensordict.batch_size
    return out


def _same_device(a: torch.device, b: torch.device) -> bool:
    a, b = torch.device(a), torch.device(b)
    if a.type == "cpu":
        # torch has one CPU device: a tensor sent to "cpu:1" reports "cpu"
        return b.type == "cpu"
    return a.type == b.type and (a.index or 0) == (b.index or 0)


def _expected_specs(env: EnvBase) -> dict:
    """``{key: leaf_spec}`` of every entry of a rollout (root and ``"next"``)."""
    expected = {}
    for composite in (
        env.full_observation_spec,
        env.full_state_spec,
        env.full_action_spec,
        env.full_done_spec,
    ):
        for key in composite.keys(True, True):
            expected[key] = _leaf_spec(composite, key)
    for composite in (env.full_observation_spec, env.full_reward_spec, env.full_done_spec):
        for key in composite.keys(True, True):
            path = ("next", key) if isinstance(key, str) else ("next", *key)
            expected[path] = _leaf_spec(composite, key)
    transform = getattr(env, "transform", None)
    if transform is not None and hasattr(transform, "transform_fake_tensordict"):
        # transforms that store transitions otherwise (NextObservationDelta keeps a
        # delta instead of the next observation): the keys of the fake tensordict
        fake = env.fake_tensordict()
        keys = set(fake.keys(True, True))
        expected = {key: spec for key, spec in expected.items() if key in keys}
        for key in keys - set(expected):
            value = fake.get(key)
            expected[key] = Unbounded(shape=value.shape, dtype=value.dtype, device=value.device)
    return expected


def check_env_specs(
    env: EnvBase,
    return_contiguous: bool | None = None,
    check_dtype: bool = True,
    seed: int | None = None,
    tensordict: TensorDictBase | None = None,
    break_when_any_done: bool | Literal["both"] | None = None,
    max_steps: int = 3,
) -> None:
    """Checks that a real rollout of ``env`` matches its specs exactly.

    Every key of the rollout must be declared by a spec (and every spec key must be
    written), and each value must have the spec's shape (with the time dim), dtype and
    lie within the spec (``spec.is_in``).

    Args:
        env: the environment to check.
        return_contiguous: passed to the rollout (``None``: TorchRL's default; rl's
            rollouts are contiguous either way).
        check_dtype: compare dtypes too.
        seed: when given, seeds the env and torch's generator first.
        tensordict: the initial tensordict passed to the rollout's reset.
        break_when_any_done: passed to the rollout; ``None`` (default) stops at the first
            done step, as TorchRL's rollout; ``"both"`` checks a rollout that stops at the
            first done and one that runs through (resetting done envs).
        max_steps: the rollout length.

    Raises:
        AssertionError: naming the key, the spec and the value that disagree.

    Examples:
        >>> from rl.envs import PendulumEnv, check_env_specs
        >>> check_env_specs(PendulumEnv(batch_size=[2]), seed=0)
    """
    if break_when_any_done == "both":
        for flag in (True, False):
            check_env_specs(env, return_contiguous, check_dtype, seed, tensordict, flag, max_steps)
        return
    if seed is not None:
        torch.manual_seed(seed)
        env.set_seed(seed)
    rollout = env.rollout(
        max_steps,
        break_when_any_done=break_when_any_done,
        return_contiguous=return_contiguous,
        tensordict=tensordict,
    )
    expected = _expected_specs(env)
    # non-tensor entries (strings) whose values differ across steps are NonTensorStacks,
    # which plain ``keys(True, True)`` does not list as leaves: those a spec declares count
    found = set(rollout.keys(True, True))
    found |= set(rollout.keys(True, True, is_leaf=is_leaf_nontensor)) & set(expected)
    missing = ", ".join(repr(k) for k in sorted(set(expected) - found, key=str))
    extra = ", ".join(repr(k) for k in sorted(found - set(expected), key=str))
    if missing or extra:
        raise AssertionError(
            f"the rollout keys do not match the specs of {type(env).__name__}: "
            f"keys in the specs but not written: [{missing}]; "
            f"keys written but not in the specs: [{extra}]"
        )
    nb = len(env.batch_size)
    steps = rollout.batch_size[-1]
    for key, spec in expected.items():
        if isinstance(spec, _Members) or not _dense_entry(rollout, key):
            stacked = isinstance(spec, _Members) or getattr(spec, "stack_dim", None) is not None
            if not stacked and -1 in spec.shape:
                _check_dynamic_entry(rollout, key, spec, nb, steps, check_dtype)
            else:
                _check_heterogeneous_entry(rollout, key, spec, nb, steps)
            continue
        if isinstance(spec, NonTensor):  # strings and objects: only their shape is checked
            shape = tuple(rollout.get(key).batch_size)
            want = (*spec.shape[:nb], steps, *spec.shape[nb:])
            if shape != want:
                raise AssertionError(
                    f"{key!r} has shape {shape} in the rollout, expected {want} from spec {spec!r}"
                )
            continue
        value = rollout.get(key)
        if is_tensor_collection(value):
            continue  # non-tensor data the spec does not declare as such
        want = (*spec.shape[:nb], steps, *spec.shape[nb:])
        if len(value.shape) != len(want) or any(
            w != -1 and v != w
            for v, w in zip(value.shape, want)  # -1: a dynamic dim
        ):
            raise AssertionError(
                f"{key!r} has shape {tuple(value.shape)} in the rollout, expected {want} "
                f"from spec {spec!r}"
            )
        if check_dtype and value.dtype != spec.dtype:
            raise AssertionError(
                f"{key!r} has dtype {value.dtype} in the rollout, expected {spec.dtype} "
                f"from spec {spec!r}"
            )
        if spec.device is not None and not _same_device(value.device, spec.device):
            raise AssertionError(
                f"{key!r} is on device {value.device}, expected {spec.device} from spec {spec!r}"
            )
        if getattr(spec, "mask", None) is not None:
            # a mask is the spec's state now (ActionMask updates it every step): the
            # earlier steps were drawn under other masks, so only the domain is checked
            spec = spec.clone()
            spec.update_mask(None)
        for t in range(steps):
            step_value = value.select(nb, t)
            if not spec.is_in(step_value):
                raise AssertionError(
                    f"{key!r} at step {t} is outside its spec {spec!r}: {step_value}"
                )


def _dense_entry(rollout: TensorDictBase, key) -> bool:
    """Whether ``rollout[key]`` reads as one tensor (not so for an entry whose shape
    differs between the members of a lazy stack: agents of a heterogeneous group)."""
    try:
        rollout.get(key)
    except RuntimeError:
        return False
    return True


class _Members(NamedTuple):
    """The member specs of an entry of a lazy stack (agents of a heterogeneous group)
    whose leaves cannot stack into one spec (a ``Bounded`` and an ``Unbounded``)."""

    specs: list
    stack_dim: int


def _leaf_spec(composite: Composite, key):
    try:
        return composite[key]
    except ValueError:
        node, path = composite, (key,) if isinstance(key, str) else tuple(key)
        for i, part in enumerate(path):
            if isinstance(node, StackedComposite):
                return _Members([member[path[i:]] for member in node], node.stack_dim)
            node = node[part]
        raise


def _check_dynamic_entry(
    rollout: TensorDictBase, key, spec, nb: int, steps: int, check_dtype: bool
) -> None:
    """Checks an entry whose spec has a dynamic dim (``-1``, e.g. a growing token
    sequence) step by step: same rank, same size on every other dim, same dtype."""
    want = tuple(spec.shape[nb:])
    for index in itertools.product(*(range(size) for size in rollout.batch_size[:nb])):
        for t in range(steps):
            value = rollout[(*index, t)].get(key)
            shape = tuple(value.shape)
            if len(shape) != len(want) or any(w not in (-1, v) for v, w in zip(shape, want)):
                raise AssertionError(
                    f"{key!r} has shape {shape} at step {t} (sub-env {index}), expected "
                    f"{want} from spec {spec!r}"
                )
            if check_dtype and value.dtype != spec.dtype:
                raise AssertionError(
                    f"{key!r} has dtype {value.dtype} at step {t}, expected {spec.dtype} "
                    f"from spec {spec!r}"
                )


def _check_heterogeneous_entry(rollout: TensorDictBase, key, spec, nb: int, steps: int) -> None:
    """Checks a lazily stacked entry (members of different shapes or dtypes) step by
    step, sub-env by sub-env and member by member against its member specs."""
    if isinstance(spec, _Members):
        members, dim = spec
    else:
        dim = getattr(spec, "stack_dim", None)
        members = (
            None
            if dim is None
            else [spec[(slice(None),) * dim + (j,)] for j in range(spec.shape[dim])]
        )
    if members is None or dim != nb:
        raise AssertionError(
            f"{key!r} differs in shape between the members of a lazy stack in the rollout, "
            f"but its spec {spec!r} is not stacked along the group dim"
        )
    for index in itertools.product(*(range(size) for size in rollout.batch_size[:nb])):
        specs = [member[index] if index else member for member in members]
        for t in range(steps):
            parts = rollout[(*index, t)].get(key, as_list=True)
            for j, (member, value) in enumerate(zip(specs, parts, strict=True)):
                if tuple(value.shape) != tuple(member.shape) or not member.is_in(value):
                    raise AssertionError(
                        f"{key!r} of member {j} at step {t} (sub-env {index}) is outside "
                        f"its spec {member!r}: {value}"
                    )


class RandomPolicy:
    """A policy writing uniformly random actions drawn from ``action_spec``.

    Args:
        action_spec: a leaf spec (written under ``action_key``) or a Composite of actions
            (kept as a copy). ``None`` (as TorchRL) leaves it to be set later, e.g. by a
            collector from its env's ``full_action_spec``
            (:meth:`set_action_spec_from_env`).
        action_key: where to write a leaf spec's sample.

    Raises:
        RuntimeError: called while ``action_spec`` is still ``None``.

    Examples:
        >>> from rl.envs import PendulumEnv, RandomPolicy
        >>> env = PendulumEnv()
        >>> policy = RandomPolicy(env.action_spec)
        >>> env.rollout(5, policy=policy)["action"].shape
        torch.Size([5, 1])
        >>> lazy = RandomPolicy()
        >>> lazy.set_action_spec_from_env(env)
        >>> env.rollout(5, policy=lazy)["action"].shape
        torch.Size([5, 1])
    """

    def __init__(self, action_spec=None, action_key: NestedKey = "action") -> None:
        self.action_spec = None if action_spec is None else action_spec.clone()
        self.action_key = action_key

    def set_action_spec_from_env(self, env) -> None:
        """Takes ``env.full_action_spec`` (a copy) when no spec was given; else a no-op."""
        if self.action_spec is None:
            self.action_spec = env.full_action_spec.clone()

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.action_spec is None:
            raise RuntimeError(
                "RandomPolicy.action_spec is not set: pass action_spec to the constructor, "
                "or call set_action_spec_from_env(env) (a collector does it with its env)"
            )
        if isinstance(self.action_spec, Composite):
            tensordict.update(self.action_spec.rand())
        else:
            tensordict.set(self.action_key, self.action_spec.rand())
        return tensordict
