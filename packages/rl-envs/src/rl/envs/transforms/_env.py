"""TransformedEnv: an env plus a list of transforms."""

from __future__ import annotations

import weakref
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from .._backends import auto_unwrap_transformed_env
from .._env_base import EnvBase, _state_entry
from .._partial_step import check_step_mask, masked_merge, peek_step_mask
from ..engine import EnvKernel, RolloutKernel
from ._base import Transform
from ._compose import Compose, as_transform
from ._kernel import TransformKernel
from ._spec_utils import tget
from ._utils import carry_preset

__all__ = ["TransformedEnv"]


def _flat_transforms(compose: Compose) -> list[Transform]:
    out = []
    for t in compose.transforms:
        out.extend(_flat_transforms(t) if isinstance(t, Compose) else [t])
    return out


def _reads_outer_root(env: EnvBase) -> bool:
    """Whether a transform inside ``env`` (a nested TransformedEnv) reads root entries
    that the transforms of an env around it write (``ConditionalSkip``'s ``cond``): the
    outer env cannot then run ``env``'s fast rollout on the raw root."""
    while isinstance(env, TransformedEnv):
        if any(t._reads_outer_root for t in _flat_transforms(env.transform)):
            return True
        env = env.base_env
    return False


class TransformedEnv(EnvBase):
    """An environment whose outputs (and action inputs) go through a list of transforms.

    The transforms form a list (a :class:`Compose`), not nested wrappers:
    ``append_transform``, ``insert_transform(i, t)`` and ``env.transform[i]`` edit and
    read it, and ``env.transform[i].parent`` is the env up to that transform. The specs
    are the base env's specs passed through every transform (computed once, recomputed
    when the list changes).

    Policy-free rollouts whose transforms only map the trajectory (no action-side
    transform, no effect on done flags: ``StepCounter()`` without ``max_steps``,
    ``RewardSum``, ``DoubleToFloat``, ``ObservationNorm``, ...) run the base env's fast
    rollout and apply the transforms to the whole trajectory at once; the result is the
    same as the step-by-step loop. With a policy and a gym base env, the same transforms
    run step by step inside the gym env's policy fast path, on zero-copy views of its
    buffers (again the step loop's result).

    Args:
        env: the base env (TorchRL's keyword ``base_env=`` works too).
        transform: a transform or a :class:`Compose` (default: empty).
        cache_specs: keep the transformed specs until the transform list changes
            (``True``, TorchRL's default); ``False`` recomputes them from the base env's
            at every access (for a transform whose specs change without the list
            changing), at the cost of a spec pass per access.
        auto_unwrap: whether ``TransformedEnv(TransformedEnv(env, t1), t2)`` becomes
            ``TransformedEnv(env, Compose(t1, t2))`` (``None``: the
            :func:`~rl.envs.set_auto_unwrap_transformed_env` setting, ``False`` by default).
        device: move the base env there first.

    Examples:
        >>> import torch
        >>> from rl.envs import PendulumEnv, TransformedEnv
        >>> from rl.envs.transforms import Compose, ObservationNorm, StepCounter
        >>> env = TransformedEnv(PendulumEnv(), Compose(ObservationNorm(loc=0.0, scale=2.0)))
        >>> env.insert_transform(0, StepCounter(max_steps=10))
        TransformedEnv(
            env=PendulumEnv(batch_size=torch.Size([]), device=None),
            transform=Compose(
                StepCounter(max_steps=10, step_count_key='step_count'),
                ObservationNorm(loc=0.0000, scale=2.0000, keys=['observation'])))
        >>> env.transform[1].parent.transform[0]
        StepCounter(max_steps=10, step_count_key='step_count')
        >>> env.rollout(20)["next", "step_count"][-1]
        tensor([10])
    """

    def __init__(
        self,
        env: EnvBase | None = None,
        transform: Transform | None = None,
        cache_specs: bool = True,
        *,
        auto_unwrap: bool | None = None,
        device=None,
        base_env: EnvBase | None = None,
        **kwargs: Any,
    ):
        if env is None:
            env = base_env
        if device is not None and isinstance(env, EnvBase):
            env = env.to(device)
        if (
            type(env) is TransformedEnv
            and type(self) is TransformedEnv
            and (auto_unwrap if auto_unwrap is not None else auto_unwrap_transformed_env())
        ):
            inner = [t.clone() for t in env.transform.transforms]
            if transform is not None:
                inner.append(transform)
            env, transform = env.base_env, Compose(*inner)
        if not isinstance(env, EnvBase):
            raise TypeError(
                f"TransformedEnv expects an EnvBase as env, got {type(env).__name__}: {env!r}"
            )
        if kwargs:
            raise TypeError(f"TransformedEnv got unexpected arguments {sorted(kwargs)}")
        self.__dict__["base_env"] = env
        self.__dict__["_spec_cache"] = None
        self.__dict__["_raw_reset"] = None
        super().__init__(
            device=env.device, batch_size=env.batch_size, run_type_checks=env.run_type_checks
        )
        # the transformed specs (computed once built, so that a transform refuses its env
        # at once; again after each change of the transform list, which sets them to None)
        self.__dict__["_output_spec"] = None
        self.__dict__["_input_spec"] = None
        self.__dict__["cache_specs"] = bool(cache_specs)
        if transform is None:
            transform = Compose()
        transform = as_transform(transform, "TransformedEnv")
        if not isinstance(transform, Compose):
            transform = Compose(transform)
        transform = self._on_device(transform)
        transform.set_container(self)
        self.__dict__["_transform"] = transform

    # ------------------------------------------------------------------ transform list
    @property
    def transform(self) -> Compose:
        """The transforms, as a :class:`Compose` (index it: ``env.transform[i]``)."""
        return self._transform

    @transform.setter
    def transform(self, transform: Transform) -> None:
        transform = as_transform(transform, "TransformedEnv.transform")
        if not isinstance(transform, Compose):
            transform = Compose(transform)
        transform = self._on_device(transform)
        self._transform.reset_parent()
        transform.set_container(self)
        self.__dict__["_transform"] = transform
        self.empty_cache()

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "transform":
            # nn.Module.__setattr__ would register a Transform (an nn.Module) as a
            # submodule named "transform" and never reach the property's setter
            TransformedEnv.transform.fset(self, value)
            return
        super().__setattr__(name, value)

    def _on_device(self, transform, chained: bool = False):
        # as TorchRL: a transform's buffers (ObservationNorm's loc and scale, a running
        # mean) move to the env's device when the transform joins it: the base env's, or
        # (``chained``: appended, inserted) the device the current transforms leave (read
        # from the transforms alone, without computing the specs)
        device = self.base_env.device
        if chained:
            device = self._transform.transform_env_device(device)
        if device is not None and isinstance(transform, torch.nn.Module):
            transform = transform.to(device)
        return transform

    def append_transform(self, transform: Transform) -> TransformedEnv:
        """Adds ``transform`` (or a callable on tensordicts) at the end of the list, moved
        to the env's device; returns the env."""
        self._transform.append(self._on_device(transform, chained=True))
        return self

    def insert_transform(self, index: int, transform: Transform) -> TransformedEnv:
        """Inserts ``transform`` before position ``index``, moved to the env's device;
        returns the env."""
        self._transform.insert(index, self._on_device(transform, chained=True))
        return self

    def _post_init(self) -> None:
        # the specs are the base env's (completed there) through the transforms: no done
        # flag or reward is added back when a transform removed it (TorchRL's
        # ExcludeTransform("done")); they are computed now, so a transform refuses its env
        self._specs()

    def empty_cache(self) -> None:
        """Drops the cached specs (recomputed at the next access)."""
        d = self.__dict__
        d["_spec_cache"] = None
        d["_raw_reset"] = None
        d["_output_spec"] = None
        d["_input_spec"] = None

    def set_spec_lock_(self, mode: bool = True) -> TransformedEnv:
        """Locks (or unlocks) the transformed specs, now or when they are next computed."""
        mode = bool(mode)
        d = self.__dict__
        d["_is_spec_locked"] = mode
        d.pop("_keys_cache", None)
        cache = d.get("_spec_cache")
        if cache is not None:
            for spec in cache[:2]:
                if mode:
                    spec.lock_(recurse=True)
                elif spec.is_locked:
                    spec.unlock_()
        return self

    # -------------------------------------------------------------------------- specs
    def _specs(self):
        cache = self.__dict__["_spec_cache"]
        if cache is None:
            base = self.base_env
            output_spec = self._transform.transform_output_spec(base.output_spec.clone())
            input_spec = self._transform.transform_input_spec(base.input_spec.clone())
            self._transform._refresh()
            flat = _flat_transforms(self._transform)
            fast = all(t._rollout_safe() for t in flat) and not _reads_outer_root(base)
            self.__dict__["_dynamic_action_spec"] = any(t._dynamic_action_spec for t in flat)
            self.__dict__["_inv_steps_env"] = any(
                getattr(t, "_inv_steps_env", False) for t in flat
            )
            self.__dict__["_post_hooks"] = any(
                type(t)._post_step_mdp_hooks is not Transform._post_step_mdp_hooks for t in flat
            )
            if self.__dict__.get("_is_spec_locked", True):
                output_spec.lock_(recurse=True)
                input_spec.lock_(recurse=True)
            cache = (output_spec, input_spec, fast)
            self.__dict__["_spec_cache"] = cache
            self.__dict__["_output_spec"] = output_spec
            self.__dict__["_input_spec"] = input_spec
            # a BatchSizeTransform changes the env's batch size (TorchRL)
            self.__dict__["_batch_size"] = torch.Size(
                self._transform.transform_env_batch_size(base.batch_size)
            )
            device = output_spec.device
            device = device if device is not None else base.device
            self._device = self._transform.transform_env_device(device)
        return cache

    def _uncached_spec(self, name: str):
        """``cache_specs=False``: the base env's spec through the transforms, now."""
        spec = getattr(self.base_env, name).clone()
        spec = getattr(self._transform, f"transform_{name}")(spec)
        if self.is_spec_locked:
            spec.lock_(recurse=True)
        return spec

    @property
    def output_spec(self):
        if not self.__dict__["cache_specs"]:
            self._specs()
            return self._uncached_spec("output_spec")
        return self._specs()[0]

    @output_spec.setter
    def output_spec(self, value) -> None:
        if self.__dict__.get("_transform") is None:
            return  # EnvBase.__init__ placeholder
        cache = self._specs()
        self.__dict__["_spec_cache"] = (value, cache[1], cache[2])
        self.__dict__["_output_spec"] = value

    @property
    def input_spec(self):
        if not self.__dict__["cache_specs"]:
            self._specs()
            return self._uncached_spec("input_spec")
        return self._specs()[1]

    @input_spec.setter
    def input_spec(self, value) -> None:
        if self.__dict__.get("_transform") is None:
            return
        cache = self._specs()
        self.__dict__["_spec_cache"] = (cache[0], value, cache[2])
        self.__dict__["_input_spec"] = value

    @property
    def batch_size(self) -> torch.Size:
        """The base env's batch size, as the transforms change it (``BatchSizeTransform``)."""
        d = self.__dict__
        if d["_spec_cache"] is None and d.get("_transform") is not None:
            self._specs()
        return d["_batch_size"]

    @batch_size.setter
    def batch_size(self, value: torch.Size) -> None:
        raise RuntimeError(
            "Cannot modify the batch-size of a transformed env (TransformedEnv.batch_size "
            f"follows its base env and transforms; got {value!r}). Change the batch size of "
            "the base_env instead."
        )

    @property
    def batch_locked(self) -> bool:
        """The base env's (a stateless base env takes any leading batch dims); read-only."""
        return self.__dict__["base_env"].batch_locked

    @batch_locked.setter
    def batch_locked(self, value) -> None:
        raise RuntimeError(
            "batch_locked is a read-only property of a TransformedEnv: it is its base "
            f"env's ({self.__dict__['base_env'].batch_locked}), got {value!r}"
        )

    @property
    def allow_done_after_reset(self) -> bool:
        """The base env's (read-only): the transforms do not make a reset done."""
        return self.__dict__["base_env"].allow_done_after_reset

    @allow_done_after_reset.setter
    def allow_done_after_reset(self, value: bool) -> None:
        if value is None or "_transform" not in self.__dict__:
            return  # EnvBase.__init__'s default: the base env's flag holds
        raise RuntimeError(
            "_allow_done_after_reset is a read-only property for TransformedEnvs: it is "
            f"the base env's ({self.__dict__['base_env'].allow_done_after_reset}), got {value!r}"
        )

    @property
    def _step_reads_observations(self) -> bool:
        """The base env's: transforms hand it the root, they do not read it for it."""
        return self.__dict__["base_env"]._step_reads_observations

    @property
    def device(self):
        if self.__dict__.get("_transform") is not None:
            self._specs()
        return self._device

    # --------------------------------------------------------------------------- hooks
    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        transform = self._transform
        if transform._has_reset_preprocess:
            # entries written before the base env resets (TensorDictPrimer(
            # call_before_env_reset=True)), on a shallow copy of the caller's input
            if tensordict is None:
                tensordict = TensorDict(batch_size=self.batch_size, device=self.device)
            else:
                tensordict = tensordict.copy()
            tensordict = transform._reset_env_preprocess(tensordict)
        raw = self.base_env._reset(tensordict)
        # the base env's flags are completed from its own spec before the transforms run
        # (as TorchRL): a truncation a transform adds must not read as termination
        self.base_env._complete_outputs(raw)
        # shallow copy: transforms set new tensors, the raw ones stay for the fast rollout
        # (a full reset: the raw outputs of a partial one may hold only the reset rows)
        full = tensordict is None or "_reset" not in tensordict.keys()
        self.__dict__["_raw_reset"] = raw.copy() if full and self._specs()[2] else None
        return transform._reset(tensordict, raw)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self.__dict__["_raw_reset"] = None
        transform = self._transform
        td_in = transform.inv(tensordict)
        partial = peek_step_mask(td_in)
        if partial is not None:  # written by a transform's inv (ConditionalSkip, ...)
            return self._step_partial(tensordict, td_in, partial)
        next_td = self.base_env._step(td_in)
        carry_preset(next_td, tget(tensordict, "next"))
        self.base_env._complete_outputs(next_td)
        return transform._step(self._step_root(tensordict, td_in), next_td)

    def _step_root(self, tensordict: TensorDictBase, td_in: TensorDictBase) -> TensorDictBase:
        """The root the transforms' ``_step`` reads: the caller's, or, when a transform's
        ``inv`` steps the env itself (``MultiAction``), the root ``inv`` left (as TorchRL,
        whose transforms always read ``inv``'s output)."""
        return td_in if self.__dict__.get("_inv_steps_env", False) else tensordict

    def _step_partial(
        self, tensordict: TensorDictBase, td_in: TensorDictBase, partial: torch.Tensor
    ) -> TensorDictBase:
        """TorchRL's partial step of a TransformedEnv: the entries whose ``"_step"`` is
        False are skipped, and the transforms' ``_step`` does not run on them."""
        if td_in is tensordict:
            td_in = tensordict.copy()
        td_in.del_("_step")
        base = self.base_env
        transform = self._transform
        preset = tget(tensordict, "next")
        if base.batch_locked:
            partial = check_step_mask(partial, base.batch_size)
            if not bool(partial.any()):
                # nothing is stepped: the current values, no transform runs
                next_td = self._skip_tensordict(td_in)
                carry_preset(next_td, preset)
                return next_td
            if not bool(partial.all()):
                td_in.set("_step", partial)  # trusted to the base env (batched envs honor it)
            next_td = base._step(td_in)
            carry_preset(next_td, preset)
            base._complete_done(next_td)
            return transform._step(self._step_root(tensordict, td_in), next_td)
        partial = check_step_mask(partial, td_in.batch_size)
        if bool(partial.all()):
            next_td = base._step(td_in)
            carry_preset(next_td, preset)
            base._complete_done(next_td)
            return transform._step(self._step_root(tensordict, td_in), next_td)
        out = self._skip_tensordict(td_in)
        if bool(partial.any()):
            sub_in = td_in[partial]
            sub_next = base._step(sub_in)
            base._complete_done(sub_next)
            masked_merge(
                out, partial, transform._step(self._step_root(tensordict, td_in)[partial], sub_next)
            )
        carry_preset(out, preset)
        return out

    def _set_seed(self, seed: int | None) -> None:
        self.base_env._set_seed(seed)

    def step_and_maybe_reset(
        self, tensordict: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        tensordict, root_next = super().step_and_maybe_reset(tensordict)
        self._specs()
        if self.__dict__["_post_hooks"]:
            tensordict, root_next = self._transform._post_step_mdp_hooks(tensordict, root_next)
        return tensordict, root_next

    def _finish_rollout(self, result, set_truncated, out=None, storing_device=None):
        self._specs()
        if self.__dict__["_post_hooks"]:
            result, _ = self._transform._post_step_mdp_hooks(result, None)
        return super()._finish_rollout(result, set_truncated, out, storing_device)

    def fake_tensordict(self) -> TensorDictBase:
        """The specs' zero transition, as the transforms store it (``NextObservationDelta``)."""
        return self._transform.transform_fake_tensordict(super().fake_tensordict())

    def rollout_kernel(self) -> RolloutKernel:
        """:class:`~rl.envs.transforms._kernel.TransformKernel` over the base env's kernel
        when every transform is rollout-safe (``Transform._rollout_safe``) and the base env
        has a kernel of its own; else the env's ``_step`` / ``reset``."""
        raw = self.__dict__["_raw_reset"]
        self.__dict__["_raw_reset"] = None
        cls = type(self)
        if (
            not self._specs()[2]
            or self.run_type_checks
            or cls._step is not TransformedEnv._step
            or cls._reset is not TransformedEnv._reset
        ):
            return EnvKernel(self)
        base = self.base_env.rollout_kernel()
        if isinstance(base, (EnvKernel, TransformKernel)):  # nested: the step loop
            return EnvKernel(self)
        return TransformKernel(self, base, _flat_transforms(self._transform), raw)

    def _draws_actions_per_step(self) -> bool:
        self._specs()
        return self.__dict__["_dynamic_action_spec"] or self.base_env._draws_actions_per_step()

    # ---------------------------------------------------------------------------- misc
    def state_dict(self, *args, **kwargs):
        """The transforms' state (e.g. VecNorm statistics, ObservationNorm loc/scale)."""
        return self._transform.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict: bool = True):
        return self._transform.load_state_dict(state_dict, strict=strict)

    def env_state(self) -> dict[str, Any]:
        """The base env's state and the transforms' (counters, running statistics, ...)."""
        return {**super().env_state(), "base": self.base_env.env_state()}

    def load_env_state(self, state: dict[str, Any]) -> None:
        """Restores :meth:`env_state`: the base env's state, then the transforms'."""
        self.base_env.load_env_state(_state_entry(self, state, "base"))
        super().load_env_state(state)

    def close(self, *, raise_if_closed: bool = True) -> None:
        if not self.is_closed:
            self.base_env.close()
            self._transform.close()
        super().close()

    def to(self, *args, **kwargs) -> TransformedEnv:
        """Moves the base env and the transforms (and this env's own buffers)."""
        self.base_env.to(*args, **kwargs)
        self._transform.to(*args, **kwargs)
        self.empty_cache()
        device, *_ = torch._C._nn._parse_to(*args, **kwargs)
        if device is not None:
            self.__dict__["_device"] = self.base_env.device
        torch.nn.Module.to(self, *args, **kwargs)
        return self

    def __getattr__(self, name: str):
        # buffers / parameters / modules registered on the env itself (nn.Module)
        d = self.__dict__
        for registry in ("_parameters", "_buffers", "_modules"):
            found = d.get(registry)
            if found is not None and name in found:
                return found[name]
        # only public attributes are forwarded: private hooks (_rollout_fast, ...) of the
        # base env must not leak into this env's logic
        if isinstance(getattr(type(self), name, None), property):
            # the property itself raised an AttributeError (Python then falls back to
            # __getattr__): say so instead of answering with the base env's attribute
            raise AttributeError(
                f"Could not get {name} because an internal error was raised: an "
                f"AttributeError inside TransformedEnv.{name} (a transform's "
                "transform_*_spec, say); call env.transform.transform_output_spec("
                "env.base_env.output_spec.clone()) (or transform_input_spec) to see it"
            )
        if name.startswith("_") or "base_env" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        return getattr(self.__dict__["base_env"], name)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_spec_cache"] = None
        state["_raw_reset"] = None
        state["_output_spec"] = None
        state["_input_spec"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._transform.__dict__["_container"] = weakref.ref(self)

    def __repr__(self) -> str:
        t = repr(self._transform).replace("\n", "\n    ")
        return f"TransformedEnv(\n    env={self.base_env!r},\n    transform={t})"
