"""Auto-resetting environments: ``AutoResetTransform`` and the ``AutoResetEnv`` that holds it.

An auto-resetting env resets itself inside ``_step`` when an episode ends: the
observations it returns at a done step already belong to the next episode. The
transform keeps those observations aside, writes a filler value (NaN, -1, False) in
their place under ``"next"``, and hands them back as the reset observations when the
rollout (or ``step_and_maybe_reset``) resets the done entries, so that the data has the
layout of a regular env.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from ._base import Transform
from ._env import TransformedEnv

__all__ = ["AutoResetEnv", "AutoResetTransform"]

NestedKey = str | tuple[str, ...]


def _path(key: NestedKey) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)


class AutoResetTransform(Transform):
    """Makes an auto-resetting env look like a regular one (TorchRL's transform).

    Built by ``SomeEnv(..., auto_reset=True)`` (any :class:`~rl.envs.EnvBase` subclass), or
    explicitly, in which case the env must be an :class:`AutoResetEnv`:
    ``AutoResetEnv(env, AutoResetTransform())``.

    At a step where ``done`` is set, the observations ``_step`` returned (the first ones
    of the next episode) are saved and replaced under ``"next"`` by a filler; the reset
    that follows puts the saved observations back at the root.

    Keyword Args:
        replace: ``False`` keeps the returned observations under ``"next"`` (no filler;
            overrides the ``fill_*`` arguments). ``auto_reset_replace=False`` in the env
            constructor does the same.
        fill_float: filler of floating-point entries (``"nan"``: NaN; ``None``: keep).
        fill_int: filler of signed integer entries (``None``: keep).
        fill_bool: filler of boolean and unsigned entries (``None``: keep).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.core import Composite, Unbounded
        >>> from rl.envs import EnvBase
        >>> class Counter(EnvBase):  # counts to 3, then starts again by itself
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.observation_spec = Composite(count=Unbounded(shape=(1,)))
        ...         self.action_spec = Unbounded(shape=(1,))
        ...         self.count = torch.zeros(1)
        ...     def _reset(self, td):
        ...         self.count = torch.zeros(1)
        ...         return TensorDict(count=self.count.clone())
        ...     def _step(self, td):
        ...         self.count = self.count + 1
        ...         done = self.count >= 3
        ...         if done.all():
        ...             self.count = torch.zeros(1)
        ...         return TensorDict(count=self.count.clone(), reward=torch.zeros(1), done=done)
        ...     def _set_seed(self, seed):
        ...         pass
        >>> env = Counter(auto_reset=True)
        >>> r = env.rollout(5, break_when_any_done=False)
        >>> r["count"].squeeze(-1), r["next", "count"].squeeze(-1)
        (tensor([0., 1., 2., 0., 1.]), tensor([1., 2., nan, 1., 2.]))
    """

    def __init__(
        self,
        *,
        replace: bool | None = None,
        fill_float: float | str | None = "nan",
        fill_int: int | None = -1,
        fill_bool: bool | None = False,
    ) -> None:
        super().__init__()
        if replace is False:
            fill_float = fill_int = fill_bool = None
        if fill_float == "nan":
            fill_float = float("nan")
        self.fill_float = fill_float
        self.fill_int = fill_int
        self.fill_bool = fill_bool
        self.__dict__["_saved"] = None

    def _fill_value(self, dtype: torch.dtype):
        if dtype.is_floating_point:
            return self.fill_float
        if dtype.is_signed:
            return self.fill_int
        return self.fill_bool

    def _owner(self):
        return self._top_env()

    def _groups(self, done_keys: list) -> list[tuple[tuple[str, ...], NestedKey]]:
        """``(group path, done key)`` of every ``done`` flag (the root one: path ``()``)."""
        return [(_path(k)[:-1], k) for k in done_keys if _path(k)[-1] == "done"]

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        owner = self._owner()
        if not isinstance(owner, AutoResetEnv):
            raise RuntimeError(
                "AutoResetTransform must sit in an AutoResetEnv (build the env with "
                f"auto_reset=True, or AutoResetEnv(env, AutoResetTransform())); got {owner!r}"
            )
        parent = self.parent
        obs_keys = [_path(k) for k in parent.full_observation_spec.keys(True, True)]
        saved = None
        for group, done_key in self._groups(parent.done_keys):
            done = next_tensordict.get(done_key, None)
            if done is None:  # _step wrote terminated / truncated only
                flags = [
                    next_tensordict.get((*group, n), None) for n in ("terminated", "truncated")
                ]
                flags = [f for f in flags if f is not None]
                if not flags:
                    continue
                done = flags[0] if len(flags) == 1 else flags[0] | flags[1]
            if not bool(done.any()):
                continue
            mask = done.squeeze(-1)
            if saved is None:
                saved = next_tensordict.empty()
            for key in obs_keys:
                if key[: len(group)] != group or (not group and key in saved.keys(True, True)):
                    continue
                value = next_tensordict.get(key)
                saved.set(key, value)
                fill = self._fill_value(value.dtype)
                if fill is None:
                    next_tensordict.set(key, value.clone())
                    continue
                m = mask.reshape(*mask.shape, *((1,) * (value.ndim - mask.ndim)))
                next_tensordict.set(key, torch.where(m, torch.full_like(value, fill), value))
        if saved is not None:
            self.__dict__["_saved"] = saved
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        saved = self.__dict__["_saved"]
        self.__dict__["_saved"] = None
        if saved is not None:
            tensordict_reset.update(saved)
        return tensordict_reset

    def _clear(self) -> None:
        self.__dict__["_saved"] = None

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError("AutoResetTransform runs inside an AutoResetEnv only, not on data")

    def _repr_args(self) -> str:
        return f"fill_float={self.fill_float}, fill_int={self.fill_int}, fill_bool={self.fill_bool}"


class AutoResetEnv(TransformedEnv):
    """The :class:`~rl.envs.TransformedEnv` of an auto-resetting env (holds an AutoResetTransform).

    A reset driven by a ``"_reset"`` mask (a rollout past a done step,
    ``step_and_maybe_reset``) does not call the base env's ``_reset``: the env already
    reset itself, and the saved observations are put back. A reset without a mask resets
    the base env as usual.

    Examples:
        >>> from rl.envs import AutoResetEnv, AutoResetTransform, PendulumEnv
        >>> env = AutoResetEnv(PendulumEnv(), AutoResetTransform())
        >>> env.rollout(3)["next", "observation"].shape
        torch.Size([3, 3])
    """

    # the saved observations cover every entry: no merge with the previous values
    _reset_keeps_unmasked = True

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        auto = [t for t in self.transform.transforms if isinstance(t, AutoResetTransform)]
        if tensordict is not None and "_reset" in tensordict.keys():
            td_reset = tensordict.exclude("_reset", "next")
            for key in self.base_env.done_keys:
                if key in td_reset.keys(True, True):
                    td_reset.set(key, torch.zeros_like(td_reset.get(key)))
            return self.transform._reset(tensordict, td_reset)
        for t in auto:
            t._clear()
        return super()._reset(tensordict)

    def insert_transform(self, index: int, transform: Transform) -> AutoResetEnv:
        raise RuntimeError(
            f"cannot insert a transform in {type(self).__name__}: append it, or transform "
            "the base env before auto-resetting"
        )
