"""Episode bookkeeping: step counts and time limits, init flags, primed entries, trajectory
ids and step timings.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable, Sequence
from multiprocessing.context import get_spawning_popen

import torch
from tensordict import TensorDictBase

from rl.core import Bounded, Categorical, Composite, Unbounded

from ._base import Transform
from ._compose import Compose  # noqa: F401  (used in the examples)
from ._spec_utils import NestedKey, normalize_key, normalize_keys, tget, tset
from ._utils import (
    episode_starts,
    first_episode,
    masked_reset,
    reset_entry_mask,
    reset_mask,
    sibling_key,
    steps_since_start,
)

__all__ = ["InitTracker", "StepCounter", "TensorDictPrimer", "Timer", "TrajCounter"]

# multiprocessing objects of the spawn context can be shared with forked and with spawned
# workers (a fork-context lock or value cannot reach a spawned process)
_SPAWN = mp.get_context("spawn")


def _next_of(tensordict: TensorDictBase, who: str) -> TensorDictBase:
    nxt = tensordict.get("next", None) if isinstance(tensordict, TensorDictBase) else None
    if nxt is None:
        if isinstance(tensordict, TensorDictBase):
            got = f"keys present: {sorted(map(str, tensordict.keys()))}"
        else:
            got = f"got {type(tensordict).__name__}"
        raise NotImplementedError(
            f"{who} cannot be called independently, only its step and reset methods "
            f"(in a TransformedEnv) or on transitions with a 'next' entry; {got}"
        )
    return nxt


class StepCounter(Transform):
    """Counts the steps of each episode in ``"step_count"`` and truncates at ``max_steps``.

    ``step_count`` (int64, shaped as the done flags: ``[*B, 1]`` at the root) is 0 after a
    reset and grows by one at every step. When ``max_steps`` is reached, ``truncated`` (and
    ``done``) are set.

    On an env whose done flags are nested (multi-agent groups), one count is kept per group
    of done keys: ``("agents", "step_count")`` next to ``("agents", "done")``. When the env
    also has root done flags, only the root is counted (``step_count_keys`` lists what is
    counted) and a truncation at the root is spread to the nested ``truncated`` / ``done``
    flags (``all_truncated_keys``, ``all_done_keys``), as TorchRL does.

    Args:
        max_steps: truncation length (``None``: never truncate).
        truncated_key: the truncation flag's name (a nested key: that one flag only).
        step_count_key: the count's name (a nested key: that one count only).
        update_done: also set the ``done`` flag next to each truncation flag.

    Raises:
        ValueError: ``max_steps`` is not a positive int.

    Examples:
        >>> from rl.envs import PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), StepCounter(max_steps=5))
        >>> r = env.rollout(10)
        >>> r["next", "step_count"].squeeze(-1)
        tensor([1, 2, 3, 4, 5])
        >>> bool(r["next", "truncated"][-1])
        True
        >>> env.transform[0].step_count_keys
        ['step_count']
    """

    _KEY_CACHES = (
        "_groups_cache",
        "_spreads_cache",
        "_reset_keys_cache",
        "_step_count_keys",
        "_truncated_keys",
        "_done_keys",
        "_terminated_keys",
        "_all_truncated_keys",
        "_all_done_keys",
    )

    def __init__(
        self,
        max_steps: int | None = None,
        truncated_key: NestedKey = "truncated",
        step_count_key: NestedKey = "step_count",
        update_done: bool = True,
    ):
        if max_steps is not None and (
            isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1
        ):
            raise ValueError(
                f"StepCounter max_steps must be a positive int or None, got {max_steps!r}"
            )
        super().__init__()
        self.max_steps = max_steps
        self.truncated_key = normalize_key(truncated_key)
        self.done_key = sibling_key(self.truncated_key, "done")
        self.step_count_key = normalize_key(step_count_key)
        self.update_done = update_done

    # ------------------------------------------------------------------ keys
    def _derives_keys(self) -> bool:
        """String names are placed next to each group's done flags; a nested key given by
        the user names the one entry to use."""
        return isinstance(self.step_count_key, str) and isinstance(self.truncated_key, str)

    def _parent_reset_keys(self, filtered: bool) -> list[NestedKey] | None:
        parent = self.parent if self._derives_keys() else None
        if parent is None:
            return None
        return _group_reset_keys(parent, filtered)

    def _cached_keys(self, cache: str, name, filtered: bool, default) -> list[NestedKey]:
        keys = self.__dict__.get(cache)
        if keys is not None:
            return keys
        resets = self._parent_reset_keys(filtered)
        if resets is None:
            return [default]
        keys = [name if isinstance(r, str) else (*r[:-1], name) for r in resets]
        self.__dict__[cache] = keys
        return keys

    @property
    def reset_keys(self) -> list[NestedKey]:
        """The reset keys of the counted groups (``["_reset"]`` without an env)."""
        keys = self.__dict__.get("_reset_keys_cache")
        if keys is None:
            keys = self._parent_reset_keys(True) or ["_reset"]
            if self.parent is not None:
                self.__dict__["_reset_keys_cache"] = keys
        return keys

    @property
    def step_count_keys(self) -> list[NestedKey]:
        """Where the counts are written, one per counted group of done keys."""
        return self._cached_keys("_step_count_keys", self.step_count_key, True, self.step_count_key)

    @property
    def truncated_keys(self) -> list[NestedKey]:
        """The truncation flags set at ``max_steps``, one per counted group."""
        return self._cached_keys("_truncated_keys", self.truncated_key, True, self.truncated_key)

    @property
    def done_keys(self) -> list[NestedKey]:
        """The done flags set with the truncation flags, one per counted group."""
        return self._cached_keys("_done_keys", "done", True, self.done_key)

    @property
    def terminated_keys(self) -> list[NestedKey]:
        """The termination flags of the counted groups."""
        return self._cached_keys(
            "_terminated_keys", "terminated", True, sibling_key(self.truncated_key, "terminated")
        )

    @property
    def all_truncated_keys(self) -> list[NestedKey]:
        """The truncation flags of every group, nested ones included (a root truncation
        is spread to them)."""
        return self._cached_keys(
            "_all_truncated_keys", self.truncated_key, False, self.truncated_key
        )

    @property
    def all_done_keys(self) -> list[NestedKey]:
        """The done flags of every group, nested ones included."""
        return self._cached_keys("_all_done_keys", "done", False, self.done_key)

    def _groups(self) -> list:
        """``(count, truncated, done, reset)`` keys of each counted group (cached once the
        transform has an env: read at every step)."""
        groups = self.__dict__.get("_groups_cache")
        if groups is None:
            keys = (self.step_count_keys, self.truncated_keys, self.done_keys, self.reset_keys)
            groups = list(zip(*keys))
            if self.parent is not None:
                self.__dict__["_groups_cache"] = groups
        return groups

    def _spreads(self) -> bool:
        """Whether a truncation is spread to nested groups (cached as :meth:`_groups`)."""
        spreads = self.__dict__.get("_spreads_cache")
        if spreads is None:
            spreads = len(self.all_done_keys) > len(self.done_keys)
            if self.parent is not None:
                self.__dict__["_spreads_cache"] = spreads
        return spreads

    @property
    def _root_only(self) -> bool:
        return self.step_count_keys == [self.step_count_key] and self.reset_keys == ["_reset"]

    # ------------------------------------------------------------------ data
    @property
    def has_step(self) -> bool:
        return True

    @staticmethod
    def _count_shape(tensordict, done_key, batch_size) -> torch.Size:
        done = tensordict.get(done_key, None) if tensordict is not None else None
        return done.shape if done is not None else torch.Size((*batch_size, 1))

    def _reset(self, tensordict, tensordict_reset):
        if self._root_only:
            key = self.step_count_key
            fresh = torch.zeros(
                (*tensordict_reset.batch_size, 1),
                dtype=torch.int64,
                device=tensordict_reset.device,
            )
            prev = tensordict.get(key, None) if tensordict is not None else None
            tensordict_reset.set(key, masked_reset(fresh, prev, reset_mask(tensordict)))
            return tensordict_reset
        for count_key, _, done_key, reset_key in self._groups():
            shape = self._count_shape(tensordict_reset, done_key, tensordict_reset.batch_size)
            fresh = torch.zeros(shape, dtype=torch.int64, device=tensordict_reset.device)
            prev = tensordict.get(count_key, None) if tensordict is not None else None
            reset = tensordict.get(reset_key, None) if tensordict is not None else None
            if prev is not None and reset is not None and prev.shape == shape:
                fresh = torch.where(_broadcast_mask(reset, prev), fresh, prev)
            tensordict_reset.set(count_key, fresh)
        return tensordict_reset

    def _step(self, tensordict, next_tensordict):
        for count_key, truncated_key, done_key, _ in self._groups():
            prev = tget(tensordict, count_key)
            if prev is None:
                shape = self._count_shape(next_tensordict, done_key, next_tensordict.batch_size)
                step = torch.ones(shape, dtype=torch.int64, device=next_tensordict.device)
            else:
                step = prev + 1
            tset(next_tensordict, count_key, step)
            if self.max_steps is not None:
                trunc = step >= self.max_steps
                old = next_tensordict.get(truncated_key, None)
                next_tensordict.set(truncated_key, trunc if old is None else old | trunc)
                if self.update_done:
                    done = next_tensordict.get(done_key, None)
                    next_tensordict.set(done_key, trunc if done is None else done | trunc)
        if self.max_steps is not None and self._spreads():
            self._spread_to_nested(next_tensordict)
        return next_tensordict

    def _spread_to_nested(self, next_tensordict) -> None:
        """A truncation of a counted group also truncates the groups nested below it."""
        pairs = [(self.truncated_keys, self.all_truncated_keys)]
        if self.update_done:
            pairs.append((self.done_keys, self.all_done_keys))
        for counted, every in pairs:
            for key in every:
                if key in counted:
                    continue
                nested = next_tensordict.get(key, None)
                if nested is None:
                    continue
                for parent_key in counted:
                    flag = next_tensordict.get(parent_key, None)
                    if flag is not None:
                        while flag.ndim < nested.ndim:
                            flag = flag.unsqueeze(-2)
                        next_tensordict.set(key, nested | flag.expand_as(nested))
                        break

    def forward(self, tensordict):
        """On a transition ``(root, "next")``: writes ``("next", step_count)`` from the root one.

        Raises:
            NotImplementedError: the data has no ``"next"`` entry.
        """
        self._step(tensordict, _next_of(tensordict, "StepCounter"))
        return tensordict

    def _rollout_safe(self) -> bool:
        return self.max_steps is None and self._root_only

    def _transform_rollout(self, rollout, initial):
        starts = episode_starts(rollout)
        count = steps_since_start(starts)
        init = initial.get(self.step_count_key, None)
        if init is not None:
            count = count + torch.where(
                first_episode(starts), init.reshape(*starts.shape[:-1], 1), 0
            )
        count = count.unsqueeze(-1)
        rollout.set(self.step_count_key, count)
        rollout.get("next").set(self.step_count_key, count + 1)
        return rollout

    def _count_spec(self, like, shape=None):
        high = self.max_steps if self.max_steps is not None else torch.iinfo(torch.int64).max
        shape = (*like.shape, 1) if shape is None else shape
        return Bounded(0, high, shape=shape, device=like.device, dtype=torch.int64)

    def _group_shapes(self) -> list:
        """The count shape of each counted group: its done flag's (root: ``[*B, 1]``)."""
        parent = self.parent
        if parent is None or self._root_only:
            return [None] * len(self.step_count_keys)
        done_spec = parent.full_done_spec
        present = set(done_spec.keys(True, True))
        return [done_spec[k].shape if k in present else None for k in self.done_keys]

    def transform_observation_spec(self, observation_spec):
        for key, shape in zip(self.step_count_keys, self._group_shapes()):
            observation_spec[key] = self._count_spec(observation_spec, shape)
        return observation_spec

    def transform_state_spec(self, state_spec):
        for key, shape in zip(self.step_count_keys, self._group_shapes()):
            state_spec[key] = self._count_spec(state_spec, shape)
        return state_spec

    def transform_done_spec(self, done_spec):
        if self.max_steps is None:  # never truncates: no flag added (as TorchRL)
            return done_spec
        present = set(done_spec.keys(True, True))
        for truncated_key, done_key in zip(self.truncated_keys, self.done_keys):
            like = done_spec[done_key] if done_key in present else None
            shape = like.shape if like is not None else (*done_spec.shape, 1)
            for key in (truncated_key, done_key):
                if key not in present:
                    done_spec[key] = Categorical(
                        2, shape=shape, device=done_spec.device, dtype=torch.bool
                    )
        return done_spec

    def _repr_args(self) -> str:
        return f"max_steps={self.max_steps}, step_count_key={self.step_count_key!r}"


def _group_reset_keys(parent, filtered: bool) -> list[NestedKey]:
    """The env's reset keys, one per group of done keys; ``filtered`` drops the groups
    that sit below another group (a root ``"_reset"`` covers every nested one)."""
    keys = [k if isinstance(k, str) else tuple(k) for k in parent.reset_keys]
    if not filtered:
        return keys
    prefixes = [() if isinstance(k, str) else k[:-1] for k in keys]
    return [
        k
        for k, pre in zip(keys, prefixes)
        if not any(other != pre and pre[: len(other)] == other for other in prefixes)
    ]


def _broadcast_mask(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A reset mask brought to ``like``'s shape: trailing dims added (or reduced with
    ``any``), then expanded."""
    if mask.ndim > like.ndim:
        mask = mask.reshape(*mask.shape[: like.ndim], -1).any(-1)
    while mask.ndim < like.ndim:
        mask = mask.unsqueeze(-1)
    return mask.expand_as(like)


class InitTracker(Transform):
    """Writes ``"is_init"``: True right after a reset, False after every step.

    Recurrent policies read it to reset their hidden state. On an env whose done flags are
    nested (multi-agent groups), one flag is written per group of done keys, shaped as its
    done flags (``("agents", "is_init")``); a root group covers the nested ones
    (``init_keys`` lists the flags written), as TorchRL does.

    Args:
        init_key: the flag's name (a nested key: that one flag only).

    Examples:
        >>> from rl.envs import PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), InitTracker())
        >>> env.rollout(3)["is_init"].squeeze(-1)
        tensor([ True, False, False])
        >>> env.transform[0].init_keys
        ['is_init']
    """

    def __init__(self, init_key: NestedKey = "is_init"):
        super().__init__()
        self.init_key = normalize_key(init_key)

    _KEY_CACHES = ("_init_keys", "_reset_keys_cache")

    # ------------------------------------------------------------------ keys
    @property
    def reset_keys(self) -> list[NestedKey]:
        """The reset key of each flagged group (``["_reset"]`` without an env)."""
        keys = self.__dict__.get("_reset_keys_cache")
        if keys is None:
            parent = self.parent if isinstance(self.init_key, str) else None
            if parent is None:
                return ["_reset"]
            keys = _group_reset_keys(parent, True)
            self.__dict__["_reset_keys_cache"] = keys
        return keys

    @property
    def init_keys(self) -> list[NestedKey]:
        """The flags written, one per group of done keys (root only when there is one)."""
        keys = self.__dict__.get("_init_keys")
        if keys is not None:
            return keys
        resets = self.reset_keys
        if resets == ["_reset"]:
            return [self.init_key]
        keys = [self.init_key if isinstance(r, str) else (*r[:-1], self.init_key) for r in resets]
        self.__dict__["_init_keys"] = keys
        return keys

    @property
    def _root_only(self) -> bool:
        return self.init_keys == [self.init_key] and self.reset_keys == ["_reset"]

    @staticmethod
    def _flag_shape(tensordict, init_key) -> torch.Size:
        done = tensordict.get(sibling_key(init_key, "done"), None)
        return done.shape if done is not None else torch.Size((*tensordict.batch_size, 1))

    # ------------------------------------------------------------------ data
    @property
    def has_step(self) -> bool:
        return True

    def _reset(self, tensordict, tensordict_reset):
        if self._root_only:
            shape = (*tensordict_reset.batch_size, 1)
            mask = reset_mask(tensordict)
            if mask is None:
                flag = torch.ones(shape, dtype=torch.bool, device=tensordict_reset.device)
            else:
                flag = mask.reshape(shape).clone()
            tensordict_reset.set(self.init_key, flag)
            return tensordict_reset
        for init_key, reset_key in zip(self.init_keys, self.reset_keys):
            flag = torch.ones(
                self._flag_shape(tensordict_reset, init_key),
                dtype=torch.bool,
                device=tensordict_reset.device,
            )
            reset = tensordict.get(reset_key, None) if tensordict is not None else None
            if reset is not None:
                flag = _broadcast_mask(reset, flag).clone()
            tensordict_reset.set(init_key, flag)
        return tensordict_reset

    def _step(self, tensordict, next_tensordict):
        for init_key in self.init_keys:
            next_tensordict.set(
                init_key,
                torch.zeros(
                    self._flag_shape(next_tensordict, init_key),
                    dtype=torch.bool,
                    device=next_tensordict.device,
                ),
            )
        return next_tensordict

    def forward(self, tensordict):
        """On a stored trajectory ``[*B, T]``: flags the first step of every episode.

        Raises:
            NotImplementedError: the data is not a trajectory with ``("next", "done")``
                flags (episode starts cannot be told without them, nor without an env).
        """
        if (
            not isinstance(tensordict, TensorDictBase)
            or not tensordict.batch_dims
            or tensordict.get(("next", "done"), None) is None
        ):
            got = (
                f"batch_size {tuple(tensordict.batch_size)} and keys "
                f"{sorted(map(str, tensordict.keys(True, True)))}"
                if isinstance(tensordict, TensorDictBase)
                else type(tensordict).__name__
            )
            raise NotImplementedError(
                "InitTracker cannot be executed without a parent env, except on a stored "
                f"trajectory [*B, T] with ('next', 'done') flags; got {got}"
            )
        starts = episode_starts(tensordict)
        tensordict.set(self.init_key, starts.unsqueeze(-1))
        nxt = tensordict.get("next", None)
        if nxt is not None:
            nxt.set(self.init_key, torch.zeros_like(starts).unsqueeze(-1))
        return tensordict

    def _rollout_safe(self) -> bool:
        return self._root_only

    def _transform_rollout(self, rollout, initial):
        starts = episode_starts(rollout)
        init = initial.get(self.init_key, None)
        if init is not None:
            starts[..., 0] = init.reshape(starts.shape[:-1])
        rollout.set(self.init_key, starts.unsqueeze(-1))
        rollout.get("next").set(self.init_key, torch.zeros_like(starts).unsqueeze(-1))
        return rollout

    def transform_observation_spec(self, observation_spec):
        parent = None if self._root_only else self.parent
        done_spec = parent.full_done_spec if parent is not None else None
        present = set(done_spec.keys(True, True)) if done_spec is not None else set()
        for init_key in self.init_keys:
            done_key = sibling_key(init_key, "done")
            shape = (
                done_spec[done_key].shape if done_key in present else (*observation_spec.shape, 1)
            )
            observation_spec[init_key] = Categorical(
                2, shape=shape, device=observation_spec.device, dtype=torch.bool
            )
        return observation_spec

    def _repr_args(self) -> str:
        return f"init_key={self.init_key!r}"


class TensorDictPrimer(Transform):
    """Adds entries (e.g. a recurrent state) to the reset output and to the specs.

    Each primer is written at reset (zeros filled with ``default_value``, or a random
    sample of its spec when ``random=True``) and carried from step to step unless the
    policy writes a new value into ``("next", key)``. The keys join the observation and
    the state specs, expanded to the env's batch size.

    Args:
        primers: a Composite or a dict ``{key: spec}`` (specs without the batch dims; a
            Composite value adds its leaves under its key). None or empty: no entries.
        random: draw initial values from the specs instead of constants.
        default_value: the fill value: a number; a callable returning the tensor of one
            primer (called per key); a dict ``{key: number or callable}`` (missing keys:
            ``0.0``); or, with ``single_default_value=True``, one callable returning a
            TensorDict (or dict) of every primer, called as ``default_value(reset=mask)``
            with the ``[*B]`` mask of the sub-envs being reset, and returning values
            for those sub-envs only. ``None``: ``0.0``.
        reset_key: the partial-reset entry read at reset (default: the env's
            ``"_reset"``).
        expand_specs: ``True``: prepend the env's batch dims to the primer specs, unless
            ``primers`` is a Composite whose shape already starts with them (TorchRL);
            ``False``: the specs already carry them (an error otherwise); ``None``:
            prepend them when the leading dims do not match the batch size.
        single_default_value: ``default_value`` is one callable for all primers (see
            above).
        call_before_env_reset: write the primers into the reset INPUT, before the base
            env resets, so that its ``_reset`` reads them (a goal, a prompt, a seed
            state), as TorchRL; the base env returns them, or else the values it saw are
            copied to the reset output. ``False``: they are written into the reset output.
        **kwargs: more primers, ``name=spec``.

    Raises:
        TypeError: a primer is not a spec.
        ValueError: ``random`` with a ``default_value``, or ``single_default_value``
            without a callable.
        KeyError: a ``default_value`` dict names a key that is not a primer.

    Examples:
        >>> import torch
        >>> from rl.core import Unbounded
        >>> from rl.envs import PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), TensorDictPrimer(hidden=Unbounded(shape=(8,))))
        >>> env.reset()["hidden"].shape
        torch.Size([8])
    """

    def __init__(
        self,
        primers: Composite | dict | None = None,
        random: bool | None = None,
        default_value: float | Callable | dict | None = None,
        reset_key: NestedKey | None = None,
        expand_specs: bool | None = None,
        single_default_value: bool = False,
        call_before_env_reset: bool = False,
        **kwargs,
    ):
        super().__init__()
        items = (
            dict(primers.items(True, True))
            if isinstance(primers, Composite)
            else dict(primers or {})
        )
        items.update(kwargs)
        # the batch dims the primers declare (a Composite's shape), as TorchRL reads them
        self.__dict__["_declared_shape"] = (
            primers.shape if isinstance(primers, Composite) else torch.Size([])
        )
        leaves = {}
        for key, spec in items.items():
            key = normalize_key(key)
            if isinstance(spec, Composite):
                # a Composite primer names a group: its leaves, under that key (TorchRL)
                prefix = key if isinstance(key, tuple) else (key,)
                for sub, leaf in spec.items(True, True):
                    sub = sub if isinstance(sub, tuple) else (sub,)
                    leaves[(*prefix, *sub)] = leaf
                continue
            if not hasattr(spec, "zero"):
                raise TypeError(f"TensorDictPrimer primer {key!r} must be a spec, got {spec!r}")
            leaves[key] = spec
        self.primers = leaves
        random = bool(random)
        if random and default_value:
            raise ValueError(
                f"TensorDictPrimer: random=True and default_value={default_value!r} are "
                "incompatible"
            )
        if default_value is None:
            default_value = 0.0
        if single_default_value and not callable(default_value):
            raise ValueError(
                "TensorDictPrimer single_default_value=True needs a callable default_value, "
                f"got {default_value!r}"
            )
        self.random = random
        if isinstance(default_value, dict):
            default_value = {normalize_key(k): v for k, v in default_value.items()}
            unknown = set(default_value) - set(self.primers)
            if unknown:
                raise KeyError(
                    f"TensorDictPrimer default_value has keys {sorted(map(str, unknown))} "
                    f"that are not primers {sorted(map(str, self.primers))}"
                )
        self.default_value = default_value
        self.reset_key = None if reset_key is None else normalize_key(reset_key)
        self.expand_specs = expand_specs
        self.single_default_value = bool(single_default_value)
        self.call_before_env_reset = bool(call_before_env_reset)
        self.__dict__["_expanded"] = {}

    @property
    def has_step(self) -> bool:
        return True

    def _spec_for(self, key, batch_size: torch.Size):
        cache = self.__dict__["_expanded"]
        spec = cache.get((key, batch_size))
        if spec is None:
            spec = self.primers[key]
            nb = len(batch_size)
            matches = spec.ndim >= nb and tuple(spec.shape[:nb]) == tuple(batch_size)
            if self.expand_specs is False:
                if not matches:
                    raise ValueError(
                        f"TensorDictPrimer(expand_specs=False): primer {key!r} has shape "
                        f"{tuple(spec.shape)}, which does not start with the batch size "
                        f"{tuple(batch_size)}"
                    )
            elif nb and self.expand_specs:
                declared = self.__dict__.get("_declared_shape", torch.Size([]))
                if tuple(declared[:nb]) != tuple(batch_size):
                    spec = spec.expand(*batch_size, *spec.shape)
            elif nb and not matches:
                spec = spec.expand(*batch_size, *spec.shape)
            cache[(key, batch_size)] = spec
        return spec

    def _initial(self, key, batch_size, device):
        spec = self._spec_for(key, batch_size)
        if self.random:
            value = spec.rand()
        else:
            fill = self.default_value
            if isinstance(fill, dict):
                fill = fill.get(key, 0.0)
            if callable(fill):
                value = torch.as_tensor(fill())
                if value.shape != spec.shape:
                    raise ValueError(
                        f"TensorDictPrimer default_value for {key!r} returned shape "
                        f"{tuple(value.shape)}, expected {tuple(spec.shape)}"
                    )
            else:
                value = spec.zero()
                if fill != 0:
                    value = value.fill_(fill)
        return value.to(device) if device is not None else value

    def _single_values(self, mask, batch_size):
        reset = torch.ones(batch_size, dtype=torch.bool) if mask is None else mask
        return self.default_value(reset=reset)

    @property
    def _has_reset_preprocess(self) -> bool:
        return self.call_before_env_reset

    def _reset_env_preprocess(self, tensordict):
        if not self.call_before_env_reset:
            return tensordict
        return self._reset_func(tensordict, tensordict)

    def _reset(self, tensordict, tensordict_reset):
        if not self.call_before_env_reset:
            return self._reset_func(tensordict, tensordict_reset)
        # written before the base env's reset: keep what it returned, else what it saw
        if tensordict is not None:
            for key in self.primers:
                if tensordict_reset.get(key, None) is None:
                    value = tensordict.get(key, None)
                    if value is not None:
                        tensordict_reset.set(key, value)
        return tensordict_reset

    def _reset_func(self, tensordict, tensordict_reset):
        mask = reset_entry_mask(tensordict, self.reset_key)
        bs = tensordict_reset.batch_size
        if self.single_default_value:
            values = self._single_values(mask, bs)
            partial = mask is not None and not bool(mask.all())
            for key in self.primers:
                value = values[key]
                prev = tensordict.get(key, None) if tensordict is not None else None
                if partial:
                    if prev is None:
                        prev = self._spec_for(key, bs).zero().to(value.device)
                    prev = prev.clone()
                    prev[mask] = value.to(prev.dtype)
                    value = prev
                tensordict_reset.set(key, value)
            return tensordict_reset
        for key in self.primers:
            fresh = self._initial(key, bs, tensordict_reset.device)
            prev = tensordict.get(key, None) if tensordict is not None else None
            tensordict_reset.set(key, masked_reset(fresh, prev, mask))
        return tensordict_reset

    def _step(self, tensordict, next_tensordict):
        for key in self.primers:
            if next_tensordict.get(key, None) is None:
                value = tensordict.get(key, None)
                if value is None:
                    value = self._initial(key, next_tensordict.batch_size, next_tensordict.device)
                next_tensordict.set(key, value)
        return next_tensordict

    def forward(self, tensordict):
        """On data: adds the primers (initial values) where they are missing."""
        if self.single_default_value:
            values = self._single_values(None, tensordict.batch_size)
            for key in self.primers:
                if tensordict.get(key, None) is None:
                    tensordict.set(key, values[key])
            return tensordict
        for key in self.primers:
            if tensordict.get(key, None) is None:
                tensordict.set(key, self._initial(key, tensordict.batch_size, tensordict.device))
        return tensordict

    def _add(self, composite):
        for key in self.primers:
            spec = self._spec_for(key, composite.shape)
            composite[key] = spec.to(composite.device) if composite.device is not None else spec
        return composite

    def transform_observation_spec(self, observation_spec):
        return self._add(observation_spec)

    def transform_state_spec(self, state_spec):
        return self._add(state_spec)

    def _repr_args(self) -> str:
        return f"primers={sorted(map(str, self.primers))}, random={self.random}"


def _no_io_pairs(self) -> None:
    """``_on_keys_changed`` of transforms whose out_keys are not maps of in_keys."""
    d = self.__dict__
    if "_in_keys" not in d or "_in_keys_inv" not in d:
        return
    d["_io_pairs"] = []
    d["_io_pairs_inv"] = []
    self.empty_cache()


class TrajCounter(Transform):
    """Numbers the trajectories: each reset gives the new episodes the next free ids.

    The counter (a ``multiprocessing.Value``) is shared by the clones of the transform,
    including clones in the workers of a ``ParallelEnv`` (forked, or sent to a starting
    process), so ids are unique across the envs that hold a clone; it is saved in
    ``state_dict()`` as ``{"traj_count": n}``.

    Args:
        out_key: where to write the id (default ``"traj_count"``); a nested key
            ``("agents", "traj_count")`` follows the done entry of the same group.
        repeats: kept for TorchRL compatibility (default 0).

    Raises:
        RuntimeError: a step before any reset, or a call on data.

    Examples:
        >>> from rl.envs import PendulumEnv, TransformedEnv, StepCounter
        >>> env = TransformedEnv(PendulumEnv(), StepCounter(max_steps=2))
        >>> env = env.append_transform(TrajCounter())
        >>> r = env.rollout(5, break_when_any_done=False)
        >>> r["traj_count"].squeeze(-1).tolist()
        [0, 0, 1, 1, 2]
    """

    def __init__(self, out_key: NestedKey = "traj_count", *, repeats: int | None = None):
        super().__init__(in_keys=[], out_keys=[out_key])
        # a spawn-context value: shareable with forked and spawned workers alike (a
        # fork-context one cannot reach a spawned process)
        self._traj_count = _SPAWN.Value("i", 0)
        self._initialized = False
        self.__dict__["_current"] = None
        self.repeats = 0 if repeats is None else repeats

    _on_keys_changed = _no_io_pairs

    @property
    def has_step(self) -> bool:
        return True

    def __getstate__(self):
        state = super().__getstate__()
        if get_spawning_popen() is None:
            # a copy (deepcopy, pickle): the counter's value, not the shared memory
            state["_traj_count"] = int(self._traj_count.value)
        # else: sent to a process being started, which shares the counter
        return state

    def __setstate__(self, state):
        count = state.pop("_traj_count")
        super().__setstate__(state)
        if isinstance(count, int):
            count = _SPAWN.Value("i", count)
        self._traj_count = count

    def clone(self) -> TrajCounter:
        out = super().clone()
        out._traj_count = self._traj_count  # clones share the counter
        return out

    def _done_key(self, keys) -> NestedKey:
        out_key = self.out_keys[0]
        for key in keys:
            if isinstance(out_key, str) and isinstance(key, str):
                return key
            if (
                not isinstance(out_key, str)
                and not isinstance(key, str)
                and key[:-1] == out_key[:-1]
            ):
                return key
        raise KeyError(
            f"TrajCounter found no done entry in the group of {out_key!r}; done keys: "
            f"{sorted(map(str, keys))}"
        )

    def _reset(self, tensordict, tensordict_reset):
        self._initialized = True
        out_key = self.out_keys[0]
        reset = None
        if tensordict is not None:
            reset = tensordict.get(sibling_key(out_key, "_reset"), None)
        prev = None if tensordict is None else tensordict.get(out_key, None)
        if prev is None:
            # a batched env's worker does not receive the ids: the last ones it wrote
            prev = self.__dict__.get("_current")
        if reset is None or prev is None:
            shape = self._shape(tensordict_reset)
            reset = torch.ones(shape, dtype=torch.bool, device=tensordict_reset.device)
            prev = None
        reset = reset.bool()
        n = int(reset.sum())
        with self._traj_count.get_lock():
            first = int(self._traj_count.value)
            self._traj_count.value = first + n
        ids = torch.arange(first, first + n, device=reset.device)
        out = torch.zeros(reset.shape, dtype=torch.int64, device=reset.device)
        out = out.masked_scatter(reset, ids)
        if prev is not None:
            out = torch.where(reset, out, prev.reshape(reset.shape))
        tensordict_reset.set(out_key, out)
        self.__dict__["_current"] = out
        return tensordict_reset

    def _shape(self, tensordict_reset) -> torch.Size:
        parent = self.container
        spec = None
        if parent is not None and hasattr(parent, "observation_spec"):
            obs = parent.observation_spec
            if self.out_keys[0] in obs.keys(True, True):
                spec = obs[self.out_keys[0]]
        if spec is not None:
            return spec.shape
        return (*tensordict_reset.batch_size, 1)

    def _step(self, tensordict, next_tensordict):
        if not self._initialized:
            raise RuntimeError("TrajCounter._step was called before any reset")
        ids = tensordict.get(self.out_keys[0], None)
        if ids is None:
            ids = self.__dict__["_current"]
        next_tensordict.set(self.out_keys[0], ids)
        self.__dict__["_current"] = ids
        return next_tensordict

    def _call(self, next_tensordict):
        raise RuntimeError("TrajCounter can only be called within an environment step or reset.")

    def forward(self, tensordict):
        raise RuntimeError("TrajCounter can only be called within an environment step or reset.")

    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        return {"traj_count": int(self._traj_count.value)}

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        self._traj_count.value = int(state_dict["traj_count"])

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        output_spec = output_spec.clone()
        done = output_spec["full_done_spec"]
        keys = [normalize_key(k) for k in done.keys(True, True)]
        done_key = self._done_key(keys)
        obs = output_spec["full_observation_spec"]
        obs[self.out_keys[0]] = Bounded(
            0,
            torch.iinfo(torch.int64).max,
            shape=done[done_key].shape,
            dtype=torch.int64,
            device=obs.device,
        )
        return output_spec

    def _repr_args(self) -> str:
        return f"out_key={self.out_keys[0]!r}"


class Timer(Transform):
    """Measures wall-clock time per step: env step, policy (between steps) and reset.

    Writes ``"<time_key>_step"``, ``"<time_key>_policy"`` and ``"<time_key>_reset"`` (in
    seconds). The step time runs from the inverse call (the action entering the env) to
    the end of the step; the policy time from the end of the previous step (or reset) to
    the next inverse call; the reset time is measured from the end of the previous step
    to the end of the reset (this env's reset hook runs after the base env's reset).

    Args:
        out_keys: the three keys (step, policy, reset).
        time_key: prefix of the default keys (default ``"time"``).

    Raises:
        TypeError: ``out_keys`` is not of length 3.
        NotImplementedError: a call on data (it only runs in an env).

    Examples:
        >>> from rl.envs import PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), Timer())
        >>> r = env.rollout(3)
        >>> bool((r["next", "time_step"] >= 0).all())
        True
    """

    def __init__(self, out_keys: Sequence[NestedKey] | None = None, time_key: str = "time"):
        if out_keys is None:
            out_keys = [f"{time_key}_step", f"{time_key}_policy", f"{time_key}_reset"]
        elif len(out_keys) != 3:
            raise TypeError(f"Timer expects three out_keys, got out_keys={out_keys}")
        super().__init__([], normalize_keys(out_keys))
        self.time_key = time_key
        self.last_inv_time = None
        self.last_call_time = None
        self.last_reset_time = None
        self._policy_time = None
        self.time_step_key, self.time_policy_key, self.time_reset_key = self.out_keys

    _on_keys_changed = _no_io_pairs

    @property
    def has_step(self) -> bool:
        return True

    @property
    def has_inverse(self) -> bool:
        return True

    @staticmethod
    def _set(td, key, elapsed: float) -> None:
        parent = td if isinstance(key, str) else td.get(key[:-1])
        leaf = key if isinstance(key, str) else key[-1]
        value = torch.tensor(elapsed, dtype=torch.get_default_dtype(), device=td.device)
        parent.set(leaf, value.expand(parent.batch_size) if parent.batch_size else value)

    def _reset(self, tensordict, tensordict_reset):
        now = time.time()
        since = self.last_call_time if self.last_call_time is not None else now
        self._set(tensordict_reset, self.time_reset_key, now - since)
        self._set(tensordict_reset, self.time_step_key, 0.0)
        self._set(tensordict_reset, self.time_policy_key, 0.0)
        self.last_reset_time = self.last_call_time = now
        self._policy_time = 0.0
        return tensordict_reset

    def _inv_call(self, tensordict):
        now = time.time()
        if self.last_call_time is not None:
            self._policy_time = now - self.last_call_time
            self._set(tensordict, self.time_policy_key, self._policy_time)
        self.last_inv_time = now
        return tensordict

    def _step(self, tensordict, next_tensordict):
        now = time.time()
        start = self.last_inv_time if self.last_inv_time is not None else now
        self._set(next_tensordict, self.time_step_key, now - start)
        self._set(next_tensordict, self.time_reset_key, 0.0)
        self._set(next_tensordict, self.time_policy_key, self._policy_time or 0.0)
        self.last_call_time = now
        return next_tensordict

    def _call(self, next_tensordict):
        raise NotImplementedError("Timer only runs inside an env (it has no forward on data)")

    def forward(self, tensordict):
        raise NotImplementedError("Timer only runs inside an env (it has no forward on data)")

    def transform_observation_spec(self, observation_spec):
        for key in self.out_keys:
            observation_spec[key] = Unbounded(
                shape=observation_spec.shape, device=observation_spec.device
            )
        return observation_spec

    def _repr_args(self) -> str:
        return f"out_keys={self.out_keys}"
