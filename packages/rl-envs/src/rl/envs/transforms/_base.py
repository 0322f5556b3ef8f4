"""Transform: the base class of every environment / data transform.

A transform is an ``nn.Module`` that reads ``in_keys`` from a TensorDict and writes
``out_keys``; it runs in three places:

- inside a :class:`~rl.envs.TransformedEnv`, through the hooks ``_reset(td, td_reset)``,
  ``_step(td, next_td)`` and ``inv(td)`` (action side), with the env's specs passed through
  ``transform_output_spec`` / ``transform_input_spec``;
- on a batch of data: ``transform(td)`` (``forward``) and ``transform.inv(td)``;
- as any ``nn.Module`` (a replay-buffer transform, a module in a ``TensorDictSequential``).
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Sequence

import torch
from tensordict import TensorDictBase
from torch import nn

from ._spec_utils import NestedKey, normalize_keys, tget, tset

__all__ = ["FORWARD_NOT_IMPLEMENTED", "ObservationTransform", "Transform"]

#: the message of the RuntimeError a transform that only works inside an env raises when
#: called on data (``.format(type(transform))``), as TorchRL's
FORWARD_NOT_IMPLEMENTED = "class {} cannot be executed without a parent environment."


def _container_of(obj):
    """What holds ``obj`` (a Compose or an env), or None: containers are held through
    weak references (TorchRL), so an env and its transforms form no reference cycle and
    a dropped env is freed (its workers closed) at once."""
    ref = obj.__dict__.get("_container")
    return None if ref is None else ref()


def _missing_key_error(transform: Transform, key: NestedKey, td: TensorDictBase) -> KeyError:
    present = sorted(str(k) for k in td.keys(include_nested=True, leaves_only=True))
    return KeyError(
        f"{type(transform).__name__} expected in_key {key!r} in the tensordict, "
        f"but it is absent; keys present: {present}"
    )


class Transform(nn.Module):
    """Base class of every environment / data transform.

    Subclasses usually override ``_apply_transform`` (a tensor-in, tensor-out map applied to
    each ``in_key`` and written to the matching ``out_key``) and the ``transform_*_spec``
    methods for the specs they change. Transforms with per-episode state override
    ``_reset`` and ``_step``; action-side transforms override ``_inv_apply_transform``
    (reading ``out_keys_inv``, the keys seen from outside, and writing ``in_keys_inv``, the
    keys the inner env reads).

    Args:
        in_keys: keys read by the forward transform.
        out_keys: keys written by the forward transform (default: ``in_keys``).
        in_keys_inv: keys written by the inverse transform (inner env side).
        out_keys_inv: keys read by the inverse transform (outer side, default ``in_keys_inv``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> class Double(Transform):
        ...     def _apply_transform(self, obs):
        ...         return obs * 2
        >>> td = TensorDict({"observation": torch.ones(3)}, [])
        >>> Double(in_keys=["observation"])(td)["observation"]
        tensor([2., 2., 2.])
    """

    invertible = False

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
        in_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
        out_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
    ):
        super().__init__()
        self.__dict__["_container"] = None
        self.__dict__["_parent_cache"] = None
        self.missing_tolerance = False
        self.in_keys = in_keys
        self.out_keys = out_keys
        self.in_keys_inv = in_keys_inv
        self.out_keys_inv = out_keys_inv

    # ------------------------------------------------------------------ keys
    @property
    def in_keys(self) -> list[NestedKey]:
        return self._in_keys

    @in_keys.setter
    def in_keys(self, value) -> None:
        self.__dict__["_in_keys"] = normalize_keys(value)
        self._on_keys_changed()

    @property
    def out_keys(self) -> list[NestedKey]:
        out = self.__dict__.get("_out_keys")
        return list(self._in_keys) if out is None else out

    @out_keys.setter
    def out_keys(self, value) -> None:
        self.__dict__["_out_keys"] = None if value is None else normalize_keys(value)
        self._on_keys_changed()

    @property
    def in_keys_inv(self) -> list[NestedKey]:
        return self._in_keys_inv

    @in_keys_inv.setter
    def in_keys_inv(self, value) -> None:
        self.__dict__["_in_keys_inv"] = normalize_keys(value)
        self._on_keys_changed()

    @property
    def out_keys_inv(self) -> list[NestedKey]:
        out = self.__dict__.get("_out_keys_inv")
        return list(self._in_keys_inv) if out is None else out

    @out_keys_inv.setter
    def out_keys_inv(self, value) -> None:
        self.__dict__["_out_keys_inv"] = None if value is None else normalize_keys(value)
        self._on_keys_changed()

    def _on_keys_changed(self) -> None:
        d = self.__dict__
        if "_in_keys" not in d or "_in_keys_inv" not in d:
            return
        out_keys = self.out_keys
        if len(out_keys) != len(d["_in_keys"]):
            raise ValueError(
                f"{type(self).__name__} needs as many out_keys as in_keys, got "
                f"in_keys={d['_in_keys']} and out_keys={out_keys}"
            )
        out_inv = self.out_keys_inv
        if len(out_inv) != len(d["_in_keys_inv"]):
            raise ValueError(
                f"{type(self).__name__} needs as many out_keys_inv as in_keys_inv, got "
                f"in_keys_inv={d['_in_keys_inv']} and out_keys_inv={out_inv}"
            )
        # cached pairs: the hot path iterates plain lists, no property calls
        d["_io_pairs"] = list(zip(d["_in_keys"], out_keys))
        d["_io_pairs_inv"] = list(zip(d["_in_keys_inv"], out_inv))
        self.empty_cache()

    # ------------------------------------------------------------ container
    @property
    def container(self):
        """The env holding this transform, through the ``Compose`` lists it sits in (as
        TorchRL: ``env.transform[0].container is env``); the outermost ``Compose`` when it
        is in no env, ``None`` when it is in nothing."""
        container = _container_of(self)
        while isinstance(container, Transform):
            above = _container_of(container)
            if above is None:
                return container
            container = above
        return container

    #: ``__dict__`` entries a subclass caches from its env (keys derived from the parent's
    #: specs): dropped whenever the transform changes container or its specs change
    _KEY_CACHES: tuple[str, ...] = ()

    def _drop_key_caches(self) -> None:
        for name in self._KEY_CACHES:
            self.__dict__.pop(name, None)

    def set_container(self, container) -> None:
        current = _container_of(self)
        # a transform may move out of a Compose that is in no env (TorchRL); one inside
        # an env stays there: the env's specs and parents are built from it
        if current is not None and current is not container and self._parent_parts() is not None:
            raise RuntimeError(
                f"{type(self).__name__} already belongs to {type(current).__name__}; "
                "use transform.clone() to put a copy in another container"
            )
        self.__dict__["_container"] = None if container is None else weakref.ref(container)
        self.__dict__["_parent_cache"] = None
        self._drop_key_caches()

    def reset_parent(self) -> None:
        """Detaches the transform from its container."""
        self.__dict__["_container"] = None
        self.__dict__["_parent_cache"] = None
        self._drop_key_caches()

    def empty_cache(self) -> None:
        """Drops cached parents and tells the owning env to recompute its specs."""
        self.__dict__["_parent_cache"] = None
        self._drop_key_caches()
        container = _container_of(self)
        if container is not None:
            container.empty_cache()

    def close(self) -> None:
        """Releases what the transform holds (processes, connections); the env's ``close``
        calls it. Nothing by default."""

    def dump(self, **kwargs) -> None:
        """Writes what a recording transform collected (``VideoRecorder``,
        ``TensorDictRecorder``); nothing for the others, as in TorchRL, so that
        ``env.transform.dump()`` works on any chain."""

    @property
    def parent(self):
        """The env seen by this transform: the base env plus the transforms before it.

        Returns a ``TransformedEnv`` over the same base env holding shallow copies of the
        preceding transforms (``None`` when the transform is in no env).
        """
        cached = self.__dict__["_parent_cache"]
        if cached is not None:
            if _container_of(self) is not None:
                return cached
            self.__dict__["_parent_cache"] = None  # its env was dropped
        from ._compose import Compose
        from ._env import TransformedEnv

        parts = self._parent_parts()
        if parts is None:
            return None
        base_env, before = parts
        out = TransformedEnv(base_env, Compose(*[t._parent_copy() for t in before]))
        self.__dict__["_parent_cache"] = out
        return out

    def _parent_copy(self) -> Transform:
        """A shallow copy for :attr:`parent`: a new module in no container that shares
        this one's tensors, submodules and attributes (as TorchRL's ``clone``).

        A deep copy would also copy what a transform only refers to (a ``VideoRecorder``'s
        logger, with its locks and files) and fail or duplicate it; the parent env only
        needs the preceding transforms' maps and specs.
        """
        out = copy.copy(self)
        state = out.__dict__
        for name in ("_parameters", "_buffers", "_modules"):
            state[name] = dict(state[name])
        state["_container"] = None
        state["_parent_cache"] = None
        for name in self._KEY_CACHES:
            state.pop(name, None)
        return out

    def _parent_parts(self):
        """``(base_env, [transforms applied before this one])`` or None outside an env."""
        from ._compose import Compose
        from ._env import TransformedEnv

        container = _container_of(self)
        if container is None:
            return None
        if isinstance(container, TransformedEnv):
            return container.base_env, []
        if isinstance(container, Compose):
            parts = container._parent_parts()
            if parts is None:
                return None
            base_env, before = parts
            before = list(before)
            for t in container.transforms:
                if t is self:
                    break
                before.append(t)
            return base_env, before
        raise TypeError(f"unexpected container type {type(container).__name__}")

    def _top_env(self):
        """The outermost TransformedEnv that holds this transform (or None)."""
        from ._env import TransformedEnv

        obj = self
        while obj is not None and not isinstance(obj, TransformedEnv):
            obj = _container_of(obj)
        return obj

    def clone(self) -> Transform:
        """A deep copy detached from any container."""
        container = self.__dict__["_container"]
        cache = self.__dict__["_parent_cache"]
        self.__dict__["_container"] = None
        self.__dict__["_parent_cache"] = None
        try:
            out = copy.deepcopy(self)
        finally:
            self.__dict__["_container"] = container
            self.__dict__["_parent_cache"] = cache
        return out

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_container"] = None
        state["_parent_cache"] = None
        return state

    # ---------------------------------------------------------- data hooks
    def _apply_transform(self, obs: torch.Tensor) -> torch.Tensor:
        """Maps one input tensor to its output (identity in the base class)."""
        return obs

    def _inv_apply_transform(self, state: torch.Tensor) -> torch.Tensor:
        """Maps one outer (policy-side) tensor to the inner env's tensor (identity here)."""
        return state

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        """Applies ``_apply_transform`` to every in_key of ``next_tensordict``."""
        for in_key, out_key in self._io_pairs:
            value = tget(next_tensordict, in_key)
            if value is None:
                if self.missing_tolerance:
                    continue
                raise _missing_key_error(self, in_key, next_tensordict)
            tset(next_tensordict, out_key, self._apply_transform(value))
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Transforms a batch of data in place (root keys) and returns it."""
        return self._call(tensordict)

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        """Env hook after ``base_env._step``: transforms the step's output."""
        return self._call(next_tensordict)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        """Env hook after ``base_env._reset``: transforms the reset output.

        Keys that are not produced at reset (a reward, say) are skipped.
        """
        tol = self.missing_tolerance
        self.missing_tolerance = True
        try:
            return self._call(tensordict_reset)
        finally:
            self.missing_tolerance = tol

    @property
    def _has_reset_preprocess(self) -> bool:
        """Whether :meth:`_reset_env_preprocess` does anything (skipped otherwise)."""
        return type(self)._reset_env_preprocess is not Transform._reset_env_preprocess

    def _reset_env_preprocess(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Env hook BEFORE ``base_env._reset``: edits the reset input (a shallow copy).

        TorchRL's hook: ``TensorDictPrimer(call_before_env_reset=True)`` writes its
        entries here so that the base env's ``_reset`` reads them.
        """
        return tensordict

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        for in_key, out_key in self._io_pairs_inv:
            value = tensordict.get(out_key, None)
            if value is None:
                if self.missing_tolerance:
                    continue
                raise _missing_key_error(self, out_key, tensordict)
            tensordict.set(in_key, self._inv_apply_transform(value))
        return tensordict

    def inv(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Inverse transform (outer action -> inner action) on a shallow copy of the input."""
        if not self.has_inverse:
            return tensordict
        return self._inv_call(tensordict.copy())

    @property
    def has_inverse(self) -> bool:
        """Whether ``inv`` does anything (TransformedEnv skips it on the hot path otherwise)."""
        return bool(self._io_pairs_inv) or type(self)._inv_call is not Transform._inv_call

    @property
    def has_step(self) -> bool:
        """Whether ``_step`` does anything (TransformedEnv skips no-op transforms)."""
        return bool(self._io_pairs) or (
            type(self)._step is not Transform._step or type(self)._call is not Transform._call
        )

    # ------------------------------------------------- whole-rollout hooks
    # A transform that maps each step independently of the others (same function at
    # every step, no state, no action side, no effect on done flags) sets
    # ``_elementwise = True``: TransformedEnv may then run the base env's fast rollout
    # and apply it to the whole [*B, T] trajectory at once.
    _elementwise = False
    # True when the transform changes the action spec while the env runs (ActionMask):
    # random rollouts then draw each action from the current spec
    _dynamic_action_spec = False
    # True when ``inv`` reads root entries of any name (a user's condition): an env around
    # the one holding it must step it with its full root, not the raw one of a fast rollout
    _reads_outer_root = False

    def _rollout_safe(self) -> bool:
        """Whether ``_transform_rollout`` reproduces the step-by-step result."""
        return self._elementwise and not self.has_inverse

    def _transform_rollout(
        self, rollout: TensorDictBase, initial: TensorDictBase
    ) -> TensorDictBase:
        """Applies the transform to a whole rollout ``[*B, T]`` (root and ``"next"``).

        Args:
            rollout: the rollout of the env below this transform.
            initial: the (transformed) tensordict the rollout started from.
        """
        # the root holds reset outputs (a reward, say, may be absent: tolerated as in
        # ``_reset``); ``"next"`` holds step outputs, checked as strictly as ``_step``
        tol = self.missing_tolerance
        self.missing_tolerance = True
        try:
            self._call(rollout)
        finally:
            self.missing_tolerance = tol
        self._call(rollout.get("next"))
        return rollout

    # ---------------------------------------------------------- spec hooks
    def _leaf_spec(self, spec, in_key: NestedKey):
        """The spec of ``out_key`` given the spec of ``in_key`` (forward side)."""
        return spec

    def _leaf_spec_inv(self, spec, in_key: NestedKey):
        """The spec of ``out_key_inv`` (outer) given that of ``in_key_inv`` (inner)."""
        return spec

    def _map_leaves(self, composite):
        if not hasattr(composite, "keys"):
            # a leaf spec given alone (TorchRL's ``_apply_to_composite``): it is the
            # spec of the in_key, mapped as such
            return self._leaf_spec(composite, self._io_pairs[0][0] if self._io_pairs else None)
        present = set(composite.keys(include_nested=True, leaves_only=True))
        for in_key, out_key in self._io_pairs:
            if in_key in present:
                composite[out_key] = self._leaf_spec(composite[in_key], in_key)
        return composite

    def _map_leaves_inv(self, composite):
        if not hasattr(composite, "keys"):
            pairs = self._io_pairs_inv
            return self._leaf_spec_inv(composite, pairs[0][0] if pairs else None)
        present = set(composite.keys(include_nested=True, leaves_only=True))
        for in_key, out_key in self._io_pairs_inv:
            if in_key in present:
                spec = self._leaf_spec_inv(composite[in_key], in_key)
                if out_key != in_key:
                    del composite[in_key]
                composite[out_key] = spec
        return composite

    def transform_observation_spec(self, observation_spec):
        return self._map_leaves(observation_spec)

    def transform_reward_spec(self, reward_spec):
        return self._map_leaves(reward_spec)

    def transform_done_spec(self, done_spec):
        return done_spec

    def transform_action_spec(self, action_spec):
        return self._map_leaves_inv(action_spec)

    def transform_state_spec(self, state_spec):
        return self._map_leaves_inv(state_spec)

    def transform_output_spec(self, output_spec):
        """Passes the observation / reward / done parts of ``output_spec`` through the hooks."""
        output_spec = output_spec.clone()
        output_spec["full_observation_spec"] = self.transform_observation_spec(
            output_spec["full_observation_spec"]
        )
        if "full_reward_spec" in output_spec.keys():
            output_spec["full_reward_spec"] = self.transform_reward_spec(
                output_spec["full_reward_spec"]
            )
        if "full_done_spec" in output_spec.keys():
            output_spec["full_done_spec"] = self.transform_done_spec(output_spec["full_done_spec"])
        return output_spec

    def transform_input_spec(self, input_spec):
        """Passes the action / state parts of ``input_spec`` through the hooks."""
        input_spec = input_spec.clone()
        input_spec["full_action_spec"] = self.transform_action_spec(input_spec["full_action_spec"])
        if "full_state_spec" in input_spec.keys():
            input_spec["full_state_spec"] = self.transform_state_spec(input_spec["full_state_spec"])
        return input_spec

    def _post_step_mdp_hooks(
        self, tensordict: TensorDictBase, tensordict_: TensorDictBase | None
    ) -> tuple[TensorDictBase, TensorDictBase | None]:
        """Edits a stored transition once ``step_mdp`` built the next root from it
        (``step_and_maybe_reset``, and the whole ``rollout``); identity by default."""
        return tensordict, tensordict_

    def _check_batched_worker_compat(self) -> None:
        """Raises ``RuntimeError`` when the transform cannot run inside a ``SerialEnv`` /
        ``ParallelEnv`` worker (TorchRL's hook, called when a batched env builds its
        sub-envs); a transform that can does nothing (the default)."""

    def transform_fake_tensordict(self, fake_tensordict: TensorDictBase) -> TensorDictBase:
        """The env's ``fake_tensordict`` as this transform stores transitions (identity)."""
        return fake_tensordict

    def transform_env_batch_size(self, batch_size: torch.Size) -> torch.Size:
        """The batch size of the env seen through this transform (unchanged by default)."""
        return batch_size

    def transform_env_device(self, device: torch.device | None) -> torch.device | None:
        """The device of the env seen through this transform (unchanged by default;
        ``None`` when its entries end up on several devices, as TorchRL)."""
        return device

    # ---------------------------------------------------------------- misc
    def _repr_args(self) -> str:
        args = []
        if self.in_keys:
            args.append(f"in_keys={self.in_keys}")
        if self.out_keys != self.in_keys:
            args.append(f"out_keys={self.out_keys}")
        if self.in_keys_inv:
            args.append(f"in_keys_inv={self.in_keys_inv}")
        if self.out_keys_inv != self.in_keys_inv:
            args.append(f"out_keys_inv={self.out_keys_inv}")
        return ", ".join(args)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._repr_args()})"


class ObservationTransform(Transform):
    """Base class of the transforms that act on observations (TorchRL's).

    It only changes the default keys: with ``in_keys=None`` the transform reads
    ``"observation"`` and ``"pixels"``. ``CatFrames``, ``ObservationNorm``,
    ``ToTensorImage``, ``Resize``, ``CenterCrop``, ``Crop``, ``GrayScale``,
    ``FlattenObservation`` and ``VideoRecorder`` derive from it, as in TorchRL (each
    keeps its own default keys), so ``isinstance(t, ObservationTransform)`` tells
    observation transforms apart.

    Args:
        in_keys: keys read (default ``["observation", "pixels"]``).
        out_keys: keys written (default: ``in_keys``).
        in_keys_inv: keys written by the inverse transform.
        out_keys_inv: keys read by the inverse transform.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> class Halve(ObservationTransform):
        ...     def _apply_transform(self, obs):
        ...         return obs / 2
        >>> t = Halve()
        >>> t.in_keys
        ['observation', 'pixels']
        >>> t(TensorDict(observation=torch.ones(2), pixels=torch.full((2,), 4.0)))["pixels"]
        tensor([2., 2.])
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        in_keys_inv: Sequence[NestedKey] | None = None,
        out_keys_inv: Sequence[NestedKey] | None = None,
    ):
        if in_keys is None:
            in_keys = ["observation", "pixels"]
        super().__init__(
            in_keys=in_keys, out_keys=out_keys, in_keys_inv=in_keys_inv, out_keys_inv=out_keys_inv
        )
