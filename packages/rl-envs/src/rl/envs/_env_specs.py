"""The spec properties of :class:`~rl.envs.EnvBase` (TorchRL's layout of them).

Specs live in two composites: ``output_spec`` holds ``full_observation_spec``,
``full_reward_spec`` and ``full_done_spec``; ``input_spec`` holds ``full_action_spec``
and ``full_state_spec``. Every other spec property reads or writes one of their entries,
so a subclass that overrides ``output_spec`` / ``input_spec`` (``TransformedEnv``)
changes them all.
"""

from __future__ import annotations

from typing import Any

from tensordict import TensorDictBase

from rl.core import Composite

from ._done import complete_done_spec

__all__ = ["EnvSpecs"]

NestedKey = str | tuple[str, ...]


class EnvSpecs:
    """Spec and key properties; expects ``batch_size``, ``_device``, ``_output_spec``
    and ``_input_spec`` on the instance."""

    @property
    def output_spec(self) -> Composite:
        """Composite of ``full_observation_spec``, ``full_reward_spec`` and ``full_done_spec``."""
        return self._output_spec

    @output_spec.setter
    def output_spec(self, value: Composite) -> None:
        old = self.__dict__.get("_output_spec")
        self._output_spec = value
        if old is not None and _is_locked(old) and isinstance(value, Composite):
            value.lock_(recurse=True)

    @property
    def input_spec(self) -> Composite:
        """Composite of ``full_action_spec`` and ``full_state_spec``."""
        return self._input_spec

    @input_spec.setter
    def input_spec(self, value: Composite) -> None:
        old = self.__dict__.get("_input_spec")
        self._input_spec = value
        if old is not None and _is_locked(old) and isinstance(value, Composite):
            value.lock_(recurse=True)

    def _set_spec(self, parent: str, key: str, value: Composite) -> None:
        """``output_spec[key] = value`` (or ``input_spec``), through the spec lock: the env's
        setters may change locked specs (as TorchRL's), direct item assignment may not."""
        self.__dict__.pop("_keys_cache", None)
        composite = getattr(self, parent)
        if not _is_locked(composite):
            composite[key] = value
            return
        composite.unlock_()
        try:
            composite[key] = value
        finally:
            composite.lock_(recurse=True)

    def _check_composite(self, name: str, value: Any) -> Composite:
        if not isinstance(value, Composite):
            raise TypeError(
                f"{name} must be a Composite with shape {tuple(self.batch_size)}, got {value!r}"
            )
        if tuple(value.shape) != tuple(self.batch_size):
            raise ValueError(
                f"{name} must have shape {tuple(self.batch_size)} (the env batch_size), "
                f"got a Composite of shape {tuple(value.shape)}"
            )
        return value

    def _check_leaf(self, name: str, value: Any) -> None:
        if tuple(value.shape[: len(self.batch_size)]) != tuple(self.batch_size):
            raise ValueError(
                f"{name} must have leading dims {tuple(self.batch_size)} (the env batch_size), "
                f"got shape {tuple(value.shape)} for {value!r}"
            )

    def _wrap_leaf(self, name: str, key: str, value: Any) -> Composite:
        if isinstance(value, Composite):
            return self._check_composite(name, value)
        self._check_leaf(name, value)
        return Composite({key: value}, shape=self.batch_size, device=self._device)

    @property
    def full_observation_spec(self) -> Composite:
        """All the observation entries, as a Composite of shape ``batch_size``."""
        return self.output_spec["full_observation_spec"]

    @full_observation_spec.setter
    def full_observation_spec(self, value: Composite) -> None:
        self._set_spec(
            "output_spec", "full_observation_spec", self._check_composite("observation_spec", value)
        )

    observation_spec = full_observation_spec

    @property
    def full_reward_spec(self) -> Composite:
        """The reward entries (``"reward"`` by default), as a Composite."""
        return self.output_spec["full_reward_spec"]

    @full_reward_spec.setter
    def full_reward_spec(self, value: Composite) -> None:
        self._set_spec(
            "output_spec", "full_reward_spec", self._check_composite("reward_spec", value)
        )

    @property
    def reward_spec(self):
        """The reward leaf spec when there is a single reward key, else the Composite."""
        return _single_leaf(self.full_reward_spec)

    @reward_spec.setter
    def reward_spec(self, value) -> None:
        self.full_reward_spec = self._wrap_leaf("reward_spec", "reward", value)

    @property
    def full_done_spec(self) -> Composite:
        """The done flags (``done``, ``terminated``, maybe ``truncated``), as a Composite."""
        return self.output_spec["full_done_spec"]

    @full_done_spec.setter
    def full_done_spec(self, value: Composite) -> None:
        self._set_spec("output_spec", "full_done_spec", self._check_composite("done_spec", value))

    @property
    def done_spec(self):
        """The done leaf spec when there is a single done key, else the Composite."""
        return _single_leaf(self.full_done_spec)

    @done_spec.setter
    def done_spec(self, value) -> None:
        if isinstance(value, Composite):
            if getattr(self, "auto_complete_done_specs", True):
                value = value.clone()  # completed as TorchRL's setter does
                complete_done_spec(value, self._device)
            self.full_done_spec = value
            return
        self._check_leaf("done_spec", value)
        self.full_done_spec = Composite(
            done=value, terminated=value.clone(), shape=self.batch_size, device=self._device
        )

    def add_truncated_keys(self):
        """Adds a ``truncated`` flag next to every done flag of the done spec (TorchRL's).

        Each done key gets a sibling with its last name replaced by ``"truncated"`` (a
        clone of that flag's spec): ``done`` / ``terminated`` give ``truncated``,
        ``("agents", "done")`` gives ``("agents", "truncated")``, a lone ``stop`` flag
        gives ``truncated``.

        Returns:
            the env itself.

        Raises:
            KeyError: the done spec has no entry at all.
        """
        spec = self.full_done_spec.clone()
        keys = _leaf_keys(spec)
        if not keys:
            raise KeyError(f"add_truncated_keys found no done key in the done spec {spec!r}")
        for key in keys:  # as TorchRL: the last flag of a group gives the spec
            trunc = "truncated" if isinstance(key, str) else (*key[:-1], "truncated")
            spec[trunc] = spec[key].clone()
        self.full_done_spec = spec
        return self

    @property
    def full_action_spec(self) -> Composite:
        """The action entries (``"action"`` by default), as a Composite."""
        return self.input_spec["full_action_spec"]

    @full_action_spec.setter
    def full_action_spec(self, value: Composite) -> None:
        self._set_spec(
            "input_spec", "full_action_spec", self._check_composite("action_spec", value)
        )

    @property
    def action_spec(self):
        """The action leaf spec when there is a single action key, else the Composite."""
        return _single_leaf(self.full_action_spec)

    @action_spec.setter
    def action_spec(self, value) -> None:
        self.full_action_spec = self._wrap_leaf("action_spec", "action", value)

    @property
    def full_state_spec(self) -> Composite:
        """Inputs other than the action that ``_step`` reads from the root."""
        return self.input_spec["full_state_spec"]

    @full_state_spec.setter
    def full_state_spec(self, value: Composite) -> None:
        self._set_spec("input_spec", "full_state_spec", self._check_composite("state_spec", value))

    state_spec = full_state_spec

    # ------------------------------------------------------------------------------ keys
    def _cached_keys(self, name: str, compute) -> Any:
        """``compute()`` (keys derived from the specs), cached while the specs are locked.

        Locked specs cannot change in place (a nested spec cannot be unlocked without its
        root), so the keys hold until a spec setter (``_set_spec``), a new ``output_spec``
        / ``input_spec`` object or an unlock. Per-step code reads them for free.
        """
        out, inp = self.output_spec, self.input_spec
        if not (_is_locked(out) and _is_locked(inp)):
            self.__dict__.pop("_keys_cache", None)  # the specs may change while unlocked
            return compute()
        cache = self.__dict__.get("_keys_cache")
        if cache is None or cache[0] is not out or cache[1] is not inp:
            cache = self.__dict__["_keys_cache"] = (out, inp, {})
        values = cache[2]
        if name not in values:
            values[name] = compute()
        return values[name]

    @property
    def action_keys(self) -> list[NestedKey]:
        return list(self._cached_keys("action", lambda: _leaf_keys(self.full_action_spec)))

    @property
    def action_key(self) -> NestedKey:
        """The action key (``"action"`` unless the subclass chose another)."""
        return _only_key(self.action_keys, "action")

    @property
    def reward_keys(self) -> list[NestedKey]:
        return list(self._cached_keys("reward", lambda: _leaf_keys(self.full_reward_spec)))

    @property
    def reward_key(self) -> NestedKey:
        return _only_key(self.reward_keys, "reward")

    @property
    def done_keys(self) -> list[NestedKey]:
        return list(self._done_keys_view())

    def _done_keys_view(self) -> list[NestedKey]:
        """The done keys without a copy: the same list object for as long as the specs are
        locked and unchanged, a new one after any spec change (or on each call while the
        specs are unlocked). Callers must not modify it."""
        return self._cached_keys("done", lambda: _leaf_keys(self.full_done_spec))

    @property
    def done_key(self) -> NestedKey:
        """The key of the ``done`` flag (``"done"``)."""
        return self._cached_keys("done_key", lambda: _done_key(self.done_keys))

    @property
    def observation_keys(self) -> list[NestedKey]:
        return list(
            self._cached_keys("observation", lambda: _leaf_keys(self.full_observation_spec))
        )

    @property
    def state_keys(self) -> list[NestedKey]:
        return list(self._cached_keys("state", lambda: _leaf_keys(self.full_state_spec)))

    @property
    def shape(self):
        """The batch size (TorchRL's ``env.shape``)."""
        return self.batch_size

    @property
    def batch_dims(self) -> int:
        """The number of batch dims (``len(env.batch_size)``)."""
        return len(self.batch_size)

    ndim = batch_dims

    def ndimension(self) -> int:
        return len(self.batch_size)

    def numel(self) -> int:
        """The number of environments in the batch."""
        return self.batch_size.numel()

    @property
    def done_keys_groups(self) -> list[list[NestedKey]]:
        """The done keys grouped by the sub-tensordict they live in (root first)."""
        groups: dict[tuple, list] = {}
        for key in self.done_keys:
            path = (key,) if isinstance(key, str) else tuple(key)
            groups.setdefault(path[:-1], []).append(key)
        return list(groups.values())

    @property
    def reset_keys(self) -> list[NestedKey]:
        """Where a ``"_reset"`` mask goes: one per group of done keys (``"_reset"`` at the root)."""
        return list(self._cached_keys("reset", self._reset_keys))

    def _reset_keys(self) -> list[NestedKey]:
        out = []
        for group in self.done_keys_groups:
            first = group[0]
            parent = () if isinstance(first, str) else tuple(first[:-1])
            out.append((*parent, "_reset") if parent else "_reset")
        return out

    def fake_tensordict(self) -> TensorDictBase:
        """A zero-filled transition ``(root, ("next", ...))`` laid out as the specs say."""
        root = self.full_observation_spec.zero()
        root.update(self.full_state_spec.zero())
        root.update(self.full_action_spec.zero())
        root.update(self.full_done_spec.zero())
        nxt = self.full_observation_spec.zero()
        nxt.update(self.full_reward_spec.zero())
        nxt.update(self.full_done_spec.zero())
        root.set("next", nxt)
        return root


def _is_locked(spec: Any) -> bool:
    return bool(getattr(spec, "is_locked", False))


def _leaf_keys(spec: Composite) -> list[NestedKey]:
    return list(spec.keys(include_nested=True, leaves_only=True))


def _done_key(keys: list[NestedKey]) -> NestedKey:
    for key in keys:
        if (key if isinstance(key, str) else key[-1]) == "done":
            return key
    return keys[0]


def _only_key(keys: list[NestedKey], default: str) -> NestedKey:
    if default in keys:
        return default
    if len(keys) == 1:
        return keys[0]
    raise KeyError(f"cannot pick a single {default!r} key among {keys}")


def _single_leaf(spec: Composite):
    keys = _leaf_keys(spec)
    if len(keys) == 1:
        return spec[keys[0]]
    return spec
