"""Compose: a list of transforms applied in order."""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence

from torch import nn

from ._base import Transform

__all__ = ["Compose"]


class _NotATransformError(TypeError, ValueError):
    """A TypeError that TorchRL code catches as the ValueError TorchRL raises."""


class _InsertIndexError(IndexError, ValueError):
    """An IndexError that TorchRL code catches as the ValueError TorchRL raises."""


def as_transform(transform, where: str) -> Transform:
    """``transform`` itself, or a plain callable on tensordicts wrapped as a transform."""
    if isinstance(transform, Transform):
        return transform
    if callable(transform):
        from .._callable_transform import CallableTransform

        return CallableTransform(transform)
    raise _NotATransformError(
        f"{where} expects a Transform or a callable, got {type(transform).__name__}: {transform!r}"
    )


class Compose(Transform):
    """A list of transforms applied in order (inverse transforms in reverse order).

    Args:
        *transforms: the transforms, in application order (or one list of them). A plain
            callable on tensordicts is wrapped in a transform that calls it at each
            step and reset, as TorchRL does.
        transforms: the list of transforms, as a keyword (TorchRL's third spelling).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.envs.transforms import Compose, ObservationNorm, RenameTransform
        >>> t = Compose(ObservationNorm(loc=1.0, scale=2.0), RenameTransform(["observation"], ["obs"]))
        >>> t(TensorDict({"observation": torch.ones(2)}, []))["obs"]
        tensor([3., 3.])
    """

    def __init__(self, *transforms: Transform, **kwargs):
        super().__init__()
        if not transforms and "transforms" in kwargs:
            transforms = tuple(kwargs.pop("transforms"))
        elif len(transforms) == 1 and isinstance(transforms[0], (list, tuple)):
            transforms = tuple(transforms[0])
        if kwargs:
            raise TypeError(f"Compose got unexpected keyword arguments {sorted(kwargs)}")
        transforms = [as_transform(t, "Compose") for t in transforms]
        self.transforms = nn.ModuleList()
        for t in transforms:
            t.set_container(self)
            self.transforms.append(t)
        self._refresh()

    def __getattr__(self, name: str):
        # TorchRL's ``TransformedEnv(env, t).transform`` is ``t`` itself; here it is a
        # Compose holding ``t``: its public attributes (``init_stats``, ``loc``, ...) are
        # read through, so ``env.transform.init_stats(...)`` works in both
        try:
            return super().__getattr__(name)
        except AttributeError:
            ts = self.__dict__["_modules"].get("transforms")
            if ts is None or len(ts) != 1 or name.startswith("_"):
                raise
            only = ts[0]
        try:
            return getattr(only, name)
        except AttributeError:
            raise AttributeError(
                f"Compose (of one {type(only).__name__}) has no attribute {name!r}"
            ) from None

    def _refresh(self) -> None:
        ts = list(self.transforms)
        for t in ts:
            if isinstance(t, Compose):
                t._refresh()
        self.__dict__["_step_list"] = [t for t in ts if t.has_step]
        self.__dict__["_inv_list"] = [t for t in reversed(ts) if t.has_inverse]

    def empty_cache(self) -> None:
        if "transforms" in self._modules:
            self._refresh()
            # a member changed: the parents (copies of earlier members) are stale
            for t in self.transforms:
                t.__dict__["_parent_cache"] = None
        super().empty_cache()

    def close(self) -> None:
        """Closes each member."""
        for t in self.transforms:
            t.close()

    def dump(self, **kwargs):
        """Calls each member's ``dump(**kwargs)`` (the recorders write what they hold).

        Returns:
            the member's result when there is one member (TorchRL's
            ``TransformedEnv(env, t).transform`` is ``t`` itself), else ``None``.
        """
        results = [t.dump(**kwargs) for t in self.transforms]
        return results[0] if len(results) == 1 else None

    @property
    def has_inverse(self) -> bool:
        return bool(self.__dict__.get("_inv_list"))

    @property
    def has_step(self) -> bool:
        return True

    # keys of a Compose are the union of its members' (informative only)
    @property
    def in_keys(self):
        if "transforms" not in self._modules:
            return self.__dict__.get("_in_keys", [])
        out = []
        for t in self.transforms:
            out.extend(k for k in t.in_keys if k not in out)
        return out

    @in_keys.setter
    def in_keys(self, value):
        Transform.in_keys.fset(self, value)

    @property
    def out_keys(self):
        if "transforms" not in self._modules:
            return []
        out = []
        for t in self.transforms:
            out.extend(k for k in t.out_keys if k not in out)
        return out

    @out_keys.setter
    def out_keys(self, value):
        Transform.out_keys.fset(self, None)

    def _on_keys_changed(self) -> None:
        self.__dict__["_io_pairs"] = []
        self.__dict__["_io_pairs_inv"] = []

    # ----------------------------------------------------------- list API
    def __getitem__(self, item: int | slice) -> Transform:
        if isinstance(item, slice):
            return Compose(*[t.clone() for t in self.transforms[item]])
        return self.transforms[item]

    def to(self, *args, **kwargs) -> Compose:
        """Moves each transform with its own ``to`` (``nn.Module.to`` moves the children's
        tensors without calling it: a :class:`ModuleTransform`'s I/O device follows its
        module only through its own), then this one."""
        for t in self.transforms:
            t.to(*args, **kwargs)
        return super().to(*args, **kwargs)

    def __len__(self) -> int:
        return len(self.transforms)

    def __iter__(self) -> Iterator[Transform]:
        return iter(self.transforms)

    def append(self, transform: Transform) -> None:
        """Adds a transform at the end; the members of a plain ``Compose`` are added one
        by one (the list stays flat, as TorchRL's)."""
        if type(transform) is Compose and type(self) is Compose:
            for t in list(transform.transforms):
                self.append(t)
            return
        self.insert(len(self.transforms), transform)

    def extend(self, transforms: Sequence[Transform]) -> None:
        for t in transforms:
            self.append(t)

    def insert(self, index: int, transform: Transform) -> None:
        """Inserts a transform before position ``index`` (negative indices allowed)."""
        transform = as_transform(transform, "Compose.insert")
        n = len(self.transforms)
        if not -n <= index <= n:
            raise _InsertIndexError(
                f"insert index {index} out of range for a Compose of {n} transforms"
            )
        if index < 0:
            index = n + index
        transform.set_container(self)
        self.transforms.insert(index, transform)
        self._invalidate_members()

    def pop(self, index: int = -1) -> Transform:
        """Removes and returns the transform at ``index``."""
        n = len(self.transforms)
        if not -n <= index < n:
            raise IndexError(f"pop index {index} is out of range for a Compose of {n} transforms")
        t = self.transforms[index]
        del self.transforms[index]
        t.reset_parent()
        self._invalidate_members()
        return t

    def _invalidate_members(self) -> None:
        for t in self.transforms:
            t.__dict__["_parent_cache"] = None
            if isinstance(t, Compose):
                t._invalidate_members()
        self.empty_cache()

    def set_container(self, container) -> None:
        super().set_container(container)
        if "transforms" in self._modules:
            for t in self.transforms:  # each member sees its new place, as in TorchRL (an
                t.set_container(self)  # inverse-only transform refuses to end up in an env)
            self._invalidate_members()

    def reset_parent(self) -> None:
        super().reset_parent()
        for t in self.transforms:
            t.__dict__["_parent_cache"] = None

    def clone(self) -> Compose:
        return Compose(*[t.clone() for t in self.transforms])

    def _parent_copy(self) -> Compose:
        # the members are copied too: joining the new Compose re-links their container
        return Compose(*[t._parent_copy() for t in self.transforms])

    def __setstate__(self, state):
        super().__setstate__(state)
        # members drop their container when pickled: relink them
        for t in self.transforms:
            t.__dict__["_container"] = weakref.ref(self)

    # -------------------------------------------------------------- hooks
    def _call(self, next_tensordict):
        for t in self.transforms:
            next_tensordict = t._call(next_tensordict)
        return next_tensordict

    def forward(self, tensordict):
        for t in self.transforms:
            tensordict = t(tensordict)
        return tensordict

    def _step(self, tensordict, next_tensordict):
        for t in self._step_list:
            next_tensordict = t._step(tensordict, next_tensordict)
        return next_tensordict

    def _reset(self, tensordict, tensordict_reset):
        for t in self.transforms:
            tensordict_reset = t._reset(tensordict, tensordict_reset)
        return tensordict_reset

    @property
    def _has_reset_preprocess(self) -> bool:
        return any(t._has_reset_preprocess for t in self.transforms)

    def _reset_env_preprocess(self, tensordict):
        # innermost last, as the inverse transforms (TorchRL's order)
        for t in reversed(self.transforms):
            tensordict = t._reset_env_preprocess(tensordict)
        return tensordict

    def _inv_call(self, tensordict):
        for t in self._inv_list:
            tensordict = t._inv_call(tensordict)
        return tensordict

    def inv(self, tensordict):
        if not self._inv_list:
            return tensordict
        return self._inv_call(tensordict.copy())

    def transform_output_spec(self, output_spec):
        for t in self.transforms:
            output_spec = t.transform_output_spec(output_spec)
        return output_spec

    def transform_input_spec(self, input_spec):
        for t in self.transforms:
            input_spec = t.transform_input_spec(input_spec)
        return input_spec

    def _post_step_mdp_hooks(self, tensordict, tensordict_):
        for t in self.transforms:
            tensordict, tensordict_ = t._post_step_mdp_hooks(tensordict, tensordict_)
        return tensordict, tensordict_

    def _check_batched_worker_compat(self) -> None:
        for t in self.transforms:
            t._check_batched_worker_compat()

    def transform_fake_tensordict(self, fake_tensordict):
        for t in self.transforms:
            fake_tensordict = t.transform_fake_tensordict(fake_tensordict)
        return fake_tensordict

    def transform_env_batch_size(self, batch_size):
        for t in self.transforms:
            batch_size = t.transform_env_batch_size(batch_size)
        return batch_size

    def transform_env_device(self, device):
        for t in self.transforms:
            device = t.transform_env_device(device)
        return device

    def transform_observation_spec(self, observation_spec):
        for t in self.transforms:
            observation_spec = t.transform_observation_spec(observation_spec)
        return observation_spec

    def transform_reward_spec(self, reward_spec):
        for t in self.transforms:
            reward_spec = t.transform_reward_spec(reward_spec)
        return reward_spec

    def transform_done_spec(self, done_spec):
        for t in self.transforms:
            done_spec = t.transform_done_spec(done_spec)
        return done_spec

    def transform_action_spec(self, action_spec):
        for t in self.transforms:
            action_spec = t.transform_action_spec(action_spec)
        return action_spec

    def transform_state_spec(self, state_spec):
        for t in self.transforms:
            state_spec = t.transform_state_spec(state_spec)
        return state_spec

    def __repr__(self) -> str:
        if not len(self.transforms):
            return "Compose()"
        inner = ",\n".join("    " + repr(t).replace("\n", "\n    ") for t in self.transforms)
        return f"Compose(\n{inner})"
