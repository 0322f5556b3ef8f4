"""Action transforms: masks, discretisation, discrete projection, affine scaling, flattening.

All of them act on the action on its way into the env (``inv``) and expose the action spec
the policy sees; ``ActionMask`` keeps a discrete spec's mask in sync with the env.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from enum import IntEnum
from typing import Any, Literal

import torch
from tensordict import TensorDictBase
from torch import nn

from rl.core import (
    Bounded,
    Categorical,
    Composite,
    ContinuousBox,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    Unbounded,
)

from ._base import FORWARD_NOT_IMPLEMENTED, Transform, _missing_key_error
from ._spec_utils import NestedKey, normalize_key, normalize_keys

__all__ = [
    "ActionDiscretizer",
    "ActionMask",
    "ActionScaling",
    "DiscreteActionProjection",
    "FlattenAction",
]


class ActionMask(Transform):
    """Keeps a discrete action spec's mask in sync with the env's ``"action_mask"`` entry.

    After every reset and step, the mask read from the data is written into the env's
    action spec (``spec.update_mask``), so that ``env.rand_action()`` and random rollouts
    only draw allowed actions. It only works inside an environment: calling it on data
    raises, as TorchRL's.

    Args:
        action_key: the action entry.
        mask_key: the boolean mask entry (``[*B, n]``).

    Raises:
        ValueError: a key that is not a nested key; at reset or step, the action spec is
            not one of ``ACCEPTED_SPECS`` (``OneHot``, ``Categorical``, ``MultiOneHot``,
            ``MultiCategorical``).
        RuntimeError: called on data (``transform(td)``) or outside an env.

    Examples:
        >>> import torch
        >>> from rl.core import Binary, Categorical, Composite, Unbounded
        >>> from rl.envs import EnvBase, TransformedEnv
        >>> class MaskedEnv(EnvBase):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.action_spec = Categorical(4)
        ...         self.state_spec = Composite(action_mask=Binary(4, dtype=torch.bool))
        ...         self.observation_spec = Composite(
        ...             obs=Unbounded(3), action_mask=Binary(4, dtype=torch.bool)
        ...         )
        ...         self.reward_spec = Unbounded(1)
        ...     def _reset(self, td):
        ...         return self.observation_spec.zero().update(
        ...             {"action_mask": torch.ones(4, dtype=torch.bool)}
        ...         )
        ...     def _step(self, td):
        ...         mask = td["action_mask"].scatter(-1, td["action"].unsqueeze(-1), False)
        ...         out = self.observation_spec.zero().update({"action_mask": mask})
        ...         return out.update({"reward": torch.zeros(1), "done": ~mask.any().view(1)})
        ...     def _set_seed(self, seed):
        ...         pass
        >>> r = TransformedEnv(MaskedEnv(), ActionMask()).rollout(10)
        >>> sorted(r["action"].tolist())  # each action once: the mask forbids repeats
        [0, 1, 2, 3]
    """

    ACCEPTED_SPECS = (OneHot, Categorical, MultiOneHot, MultiCategorical)
    SPEC_TYPE_ERROR = "The action spec must be one of {}. Got {} instead."
    _dynamic_action_spec = True

    def __init__(self, action_key: NestedKey = "action", mask_key: NestedKey = "action_mask"):
        for name, key in (("action", action_key), ("mask", mask_key)):
            if not isinstance(key, (tuple, str)):
                raise ValueError(f"The {name} key must be a nested key. Got {type(key)} instead.")
        super().__init__()
        self.action_key = normalize_key(action_key)
        self.mask_key = normalize_key(mask_key)

    @property
    def has_step(self) -> bool:
        return True

    @property
    def action_spec(self):
        """The env's action spec whose mask this transform updates."""
        env = self._top_env()
        if env is None:
            raise RuntimeError(
                f"{type(self)}.parent cannot be None: make sure this transform is executed "
                "within an environment."
            )
        spec = env.full_action_spec[self.action_key]
        if not isinstance(spec, self.ACCEPTED_SPECS):
            raise ValueError(
                self.SPEC_TYPE_ERROR.format(
                    tuple(t.__name__ for t in self.ACCEPTED_SPECS), type(spec).__name__
                )
            )
        return spec

    def _update(self, tensordict):
        spec = self.action_spec
        mask = tensordict.get(self.mask_key, None)
        if mask is None:
            raise _missing_key_error(self, self.mask_key, tensordict)
        spec.update_mask(mask.clone())
        return tensordict

    def _call(self, next_tensordict):
        return self._update(next_tensordict)

    def _reset(self, tensordict, tensordict_reset):
        return self._update(tensordict_reset)

    def forward(self, tensordict):
        raise RuntimeError(FORWARD_NOT_IMPLEMENTED.format(type(self)))

    def _repr_args(self) -> str:
        return f"action_key={self.action_key!r}, mask_key={self.mask_key!r}"


class ActionDiscretizer(Transform):
    """Exposes a continuous (``Bounded``) action as discrete choices.

    Each action dim with bounds ``[low, high]`` is cut into ``n`` intervals (``n`` from
    ``num_intervals``: one int for every dim, or a 1-D tensor with one count per dim).
    Before reaching the env, choice ``i`` becomes ``low + (high - low) * (i + c) / n`` with
    ``c = 0.5`` (``MEDIAN``), ``0`` (``LOW``), ``1`` (``HIGH``) or a uniform draw in
    ``[0, 1)`` (``RANDOM``).

    The outer action spec is ``MultiCategorical(nvec)`` with the inner action's shape
    (``MultiOneHot(nvec)`` with a last dim of ``sum(nvec)`` when ``categorical=False``);
    a scalar action (shape ``()``) gives ``Categorical(n)`` / ``OneHot(n)``. When
    ``out_action_key`` differs from ``action_key``, the continuous action spec moves to the
    state spec: the policy writes the discrete action, the transform the continuous one.

    Args:
        num_intervals: number of choices per action dim (an int ``>= 2``, or a 1-D tensor
            of one count per element of the action's last dim).
        action_key: the inner env's action key.
        out_action_key: the outer action key (default: ``action_key``).
        sampling: a :class:`ActionDiscretizer.SamplingStrategy` (``MEDIAN``, ``LOW``,
            ``HIGH``, ``RANDOM``) or its lower-case name (``None``: ``MEDIAN``).
        categorical: index actions (else one-hot).
        low / high: bounds for use on data outside an env (read from the spec otherwise).

    Raises:
        ValueError: a count ``< 2``, a ``num_intervals`` tensor that is not 1-D, or an
            unknown ``sampling``.
        TypeError: at spec time, the inner action spec is not ``Bounded``.
        RuntimeError: ``inv`` with no bounds (no parent env and no ``low``/``high``).

    Examples:
        >>> from rl.envs import PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), ActionDiscretizer(5))
        >>> env.action_spec.nvec
        tensor([5])
        >>> from tensordict import TensorDict
        >>> t = ActionDiscretizer(4, sampling="low", low=0.0, high=4.0)
        >>> t.inv(TensorDict(action=torch.tensor([0, 3]), batch_size=[2]))["action"]
        tensor([0., 3.])
    """

    class SamplingStrategy(IntEnum):
        """Where in its interval a discrete choice lands (TorchRL's values)."""

        MEDIAN = 0
        LOW = 1
        HIGH = 2
        RANDOM = 3

    invertible = True
    _OFFSETS = {SamplingStrategy.MEDIAN: 0.5, SamplingStrategy.LOW: 0.0, SamplingStrategy.HIGH: 1.0}

    def __init__(
        self,
        num_intervals: int | torch.Tensor,
        action_key: NestedKey = "action",
        out_action_key: NestedKey | None = None,
        sampling: SamplingStrategy | Literal["median", "low", "high", "random"] | None = None,
        categorical: bool = True,
        low: float | torch.Tensor | None = None,
        high: float | torch.Tensor | None = None,
    ):
        counts = torch.as_tensor(num_intervals) if not isinstance(num_intervals, int) else None
        if counts is not None and (counts.ndim > 1 or counts.is_floating_point()):
            raise ValueError(
                f"ActionDiscretizer num_intervals must be an int or a 1-D integer tensor, "
                f"got {num_intervals!r}"
            )
        if (counts is None and (isinstance(num_intervals, bool) or num_intervals < 2)) or (
            counts is not None and bool((counts < 2).any())
        ):
            raise ValueError(
                f"ActionDiscretizer num_intervals must be an int >= 2 (or a tensor of such "
                f"counts), got {num_intervals!r}"
            )
        self_sampling = self._parse_sampling(sampling)
        action_key = normalize_key(action_key)
        out_action_key = action_key if out_action_key is None else normalize_key(out_action_key)
        super().__init__(in_keys_inv=[action_key], out_keys_inv=[out_action_key])
        self.action_key = action_key
        self.out_action_key = out_action_key
        if counts is None:
            self.num_intervals = num_intervals
        else:
            self.register_buffer("num_intervals", counts.to(torch.int64))
        self.sampling = self_sampling
        self.categorical = categorical
        self.register_buffer(
            "low", None if low is None else torch.as_tensor(low, dtype=torch.float32)
        )
        self.register_buffer(
            "high", None if high is None else torch.as_tensor(high, dtype=torch.float32)
        )
        self.__dict__["_inner_dtype"] = torch.get_default_dtype()
        # whether the inner action has no dims (one scalar choice): set from the spec
        self.__dict__["_scalar"] = None
        self.__dict__["_last_value"] = None

    @classmethod
    def _parse_sampling(cls, sampling) -> ActionDiscretizer.SamplingStrategy:
        if sampling is None:
            return cls.SamplingStrategy.MEDIAN
        if isinstance(sampling, str):
            names = {s.name.lower(): s for s in cls.SamplingStrategy}
            if sampling.lower() in names:
                return names[sampling.lower()]
        else:
            try:
                return cls.SamplingStrategy(sampling)
            except ValueError:
                pass
        raise ValueError(
            "ActionDiscretizer sampling must be one of ActionDiscretizer.SamplingStrategy "
            f"(MEDIAN, LOW, HIGH, RANDOM) or its name ('median', 'low', 'high', 'random'), "
            f"got {sampling!r}"
        )

    def _nvec(self, device=None) -> torch.Tensor:
        n = self.num_intervals
        return torch.as_tensor(n, device=device).to(torch.int64)

    def _init(self) -> None:
        """Reads the parent env's action spec, which sets the bounds (TorchRL's hook)."""
        container = self.container
        if container is None or isinstance(container, Transform):
            raise RuntimeError(
                f"Cannot execute transform {type(self).__name__} without a parent env: it "
                "has no action bounds; put it in a TransformedEnv over a Bounded action "
                "spec, or pass low= and high="
            )
        _ = container.full_action_spec

    def _indices(self, action: torch.Tensor) -> torch.Tensor:
        """The chosen interval of each action dim, ``[*B, *action_shape]`` (int64)."""
        if self.categorical:
            return action.to(torch.int64)
        scalar = self.__dict__["_scalar"]
        if scalar is None:  # no env: the bounds' shape tells
            scalar = self.low.ndim == 0
        if scalar:
            return action.to(torch.int64).argmax(-1)
        nvec = self._nvec()
        if nvec.numel() == 1:
            # same count per dim: the last dim holds the dims' one-hot blocks side by side
            n = int(nvec)
            blocks = action.unflatten(-1, (action.shape[-1] // n, n))
            return blocks.to(torch.int64).argmax(-1)
        parts = action.to(torch.int64).split(nvec.tolist(), dim=-1)
        return torch.stack([p.argmax(-1) for p in parts], -1)

    def _inv_apply_transform(self, action):
        if self.low is None:
            self._init()
        idx = self._indices(action).to(self.low.dtype)
        nvec = self._nvec(idx.device).to(self.low.dtype)
        if self.__dict__.get("_scalar"):
            nvec = nvec.reshape(-1)[0]  # a one-count tensor for a scalar action
        if self.sampling == self.SamplingStrategy.RANDOM:
            offset = torch.rand_like(idx)
        else:
            offset = self._OFFSETS[self.sampling]
        value = self.low + (self.high - self.low) * (idx + offset) / nvec
        value = value.to(self.__dict__["_inner_dtype"])
        self.__dict__["_last_value"] = value
        return value

    @property
    def has_step(self) -> bool:
        return self.out_action_key != self.action_key

    def _step(self, tensordict, next_tensordict):
        # a discrete action under its own key: the continuous one the env received is a
        # state entry of the step's root (as TorchRL, which writes it there in ``inv``)
        if self.out_action_key != self.action_key:
            value = self.__dict__.get("_last_value")
            if value is not None and self.out_action_key in tensordict.keys(True, True):
                tensordict.set(self.action_key, value)
        return next_tensordict

    def transform_input_spec(self, input_spec):
        input_spec = input_spec.clone()
        actions = input_spec["full_action_spec"]
        ((in_key, out_key),) = self._io_pairs_inv
        if in_key not in actions.keys(True, True):
            raise KeyError(
                f"ActionDiscretizer action_key {in_key!r} is not in the action spec; keys "
                f"present: {sorted(map(str, actions.keys(True, True)))}"
            )
        spec = actions[in_key]
        if not isinstance(spec, Bounded):
            raise TypeError(
                f"ActionDiscretizer needs a Bounded action spec for {in_key!r}: action spec "
                f"type {type(spec)} is not supported. The action spec type must be Bounded; "
                f"got {spec!r}"
            )
        batch = actions.shape
        nb = len(batch)
        shape = spec.shape[nb:]
        self.low = spec.low.expand(spec.shape)[(0,) * nb].clone().float()
        self.high = spec.high.expand(spec.shape)[(0,) * nb].clone().float()
        self.__dict__["_inner_dtype"] = spec.dtype
        nvec = self._nvec(spec.device)
        if nvec.ndim == 1 and len(shape) and nvec.numel() not in (1, shape[-1]):
            raise ValueError(
                f"ActionDiscretizer num_intervals has {nvec.numel()} counts, expected 1 or "
                f"{shape[-1]} (the last dim of action spec {in_key!r}, shape {tuple(shape)})"
            )
        scalar = len(shape) == 0
        self.__dict__["_scalar"] = scalar
        if scalar:
            n = int(nvec.reshape(-1)[0])
            if self.categorical:
                new = Categorical(n, shape=(), device=spec.device)
            else:
                new = OneHot(n, shape=(n,), device=spec.device)
        else:
            full = nvec.reshape(-1).expand(shape[-1]) if nvec.numel() == 1 else nvec
            if self.categorical:
                new = MultiCategorical(
                    nvec=full, shape=shape, device=spec.device, remove_singleton=False
                )
            else:
                new = MultiOneHot(
                    nvec=full, shape=(*shape[:-1], int(full.sum())), device=spec.device
                )
        if nb:
            new = new.expand(*batch, *new.shape)
        if out_key != in_key:
            input_spec["full_state_spec"][in_key] = spec.clone()
            del actions[in_key]
        actions[out_key] = new
        return input_spec

    def _repr_args(self) -> str:
        return (
            f"num_intervals={self.num_intervals}, sampling={self.sampling.name}, "
            f"categorical={self.categorical}"
        )


def _keys_or_default(keys, default: list) -> list[NestedKey]:
    return list(default) if keys is None else normalize_keys(keys)


class _ActionOnly(Transform):
    """A transform of the action only: it changes the action on the way in (``inv``) and
    leaves the env's outputs alone."""

    @property
    def has_step(self) -> bool:
        return False

    def _step(self, tensordict, next_tensordict):
        return next_tensordict

    def _reset(self, tensordict, tensordict_reset):
        return tensordict_reset


class DiscreteActionProjection(_ActionOnly):
    """Maps one-hot actions over ``max_actions`` choices onto ``num_actions_effective``.

    For a policy shared by discrete envs with different numbers of actions: the policy
    acts in a one-hot space of size ``max_actions``; before reaching the env, a choice
    ``>= num_actions_effective`` is replaced by a uniform random valid one and the action
    is re-encoded one-hot over ``num_actions_effective``. The outer action spec becomes
    ``OneHot(max_actions)``. ``forward`` (replay buffers, module chains) re-encodes stored
    actions one-hot over ``max_actions`` when ``include_forward``.

    Args:
        num_actions_effective: the env's number of actions.
        max_actions: the policy's number of actions (``>= num_actions_effective``).
        action_key: the action entry.
        include_forward: also map the action in ``forward``.

    Raises:
        RuntimeError: ``max_actions < num_actions_effective``, or an action whose last
            dim is not ``max_actions``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> t = DiscreteActionProjection(num_actions_effective=2, max_actions=3)
        >>> t.inv(TensorDict({"action": torch.tensor([0, 1, 0])}, []))["action"]
        tensor([0, 1])
        >>> t.inv(TensorDict({"action": torch.tensor([0, 0, 1])}, []))["action"].shape  # resampled
        torch.Size([2])
    """

    invertible = True

    def __init__(
        self,
        num_actions_effective: int,
        max_actions: int,
        action_key: NestedKey = "action",
        include_forward: bool = True,
    ) -> None:
        action_key = normalize_key(action_key)
        super().__init__(
            in_keys=[action_key] if include_forward else [],
            in_keys_inv=[action_key],
        )
        self.num_actions_effective = num_actions_effective
        self.max_actions = max_actions
        if max_actions < num_actions_effective:
            raise RuntimeError(
                "The `max_actions` int must be greater or equal to `num_actions_effective`."
            )

    def _apply_transform(self, action: torch.Tensor) -> torch.Tensor:
        return nn.functional.one_hot(action.argmax(-1), self.max_actions)

    def _inv_apply_transform(self, action: torch.Tensor) -> torch.Tensor:
        if action.shape[-1] != self.max_actions:
            raise RuntimeError(
                f"action.shape[-1]={action.shape[-1]} must match self.max_actions={self.max_actions}."
            )
        action = action.long().argmax(-1)
        invalid = action >= self.num_actions_effective
        if bool(invalid.any()):
            action[invalid] = torch.randint(
                self.num_actions_effective, (int(invalid.sum()),), device=action.device
            )
        return nn.functional.one_hot(action, self.num_actions_effective)

    def transform_input_spec(self, input_spec):
        input_spec = input_spec.clone()
        actions = input_spec["full_action_spec"]
        key = self.in_keys_inv[0]
        if key not in actions.keys(True, True):
            raise KeyError(
                f"DiscreteActionProjection action_key {key!r} is not in the action spec; keys "
                f"present: {sorted(map(str, actions.keys(True, True)))}"
            )
        spec = actions[key]
        actions[key] = OneHot(
            self.max_actions,
            shape=(*spec.shape[:-1], self.max_actions),
            device=spec.device,
            dtype=spec.dtype,
        )
        return input_spec

    def _repr_args(self) -> str:
        return (
            f"num_actions_effective={self.num_actions_effective}, "
            f"max_actions={self.max_actions}, in_keys_inv={self.in_keys_inv}"
        )


def _finitely_bounded(spec) -> bool:
    if isinstance(spec, Unbounded) or not isinstance(getattr(spec, "space", None), ContinuousBox):
        return False
    low, high = spec.space.low, spec.space.high
    if low.dtype.is_floating_point:
        if (low == torch.finfo(low.dtype).min).any() or (high == torch.finfo(high.dtype).max).any():
            return False
    return bool(torch.isfinite(low).all() and torch.isfinite(high).all())


class ActionScaling(_ActionOnly):
    r"""Exposes a bounded continuous action as the normalized box ``[-1, 1]`` (or ``[0, 1]``).

    With ``loc = (high + low) / 2`` and ``scale = (high - low) / 2`` read from the inner
    action spec, the policy's action ``a`` reaches the env as ``a * scale + loc``
    (``standard_normal=True``) or ``(2 a - 1) * scale + loc`` (``False``: the policy acts
    in ``[0, 1]``); ``forward`` applies the inverse map (env scale to normalized, for
    replay buffers). With explicit ``loc`` and ``scale`` (or :meth:`from_stats`) no spec is
    needed: a bounded inner spec is mapped through the affine map and an unbounded one
    stays ``Unbounded``.

    Args:
        in_keys_inv: the env-side action key (one key; ``[]`` for a forward-only
            instance, which needs explicit ``loc``/``scale``). Default ``["action"]``.
        out_keys_inv: the policy-side key (default ``in_keys_inv``).
        in_keys / out_keys: the keys of ``forward`` (default ``in_keys_inv``, or
            ``["action"]`` when forward-only).

    Keyword Args:
        loc, scale: explicit affine parameters (both or neither; ``scale`` non-zero).
        standard_normal: normalized space ``[-1, 1]`` (else ``[0, 1]``).

    Raises:
        ValueError: several action keys, only one of ``loc``/``scale``, a zero scale, or
            a forward-only instance without ``loc``/``scale``; an action whose last dim
            does not match a per-dimension ``loc``.
        RuntimeError: spec-derived scaling of an action spec that is not finitely bounded,
            or use outside an env without ``loc``/``scale``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> t = ActionScaling.from_stats(mean=torch.tensor([1.0, 2.0]), std=torch.tensor([2.0, 4.0]))
        >>> t(TensorDict({"action": torch.tensor([[3.0, 6.0]])}, [1]))["action"]
        tensor([[1., 1.]])
        >>> t.denormalize(torch.tensor([[1.0, 1.0]]))
        tensor([[3., 6.]])
    """

    invertible = True

    def __init__(
        self,
        in_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
        out_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
        *,
        loc: torch.Tensor | float | None = None,
        scale: torch.Tensor | float | None = None,
        standard_normal: bool = True,
    ) -> None:
        in_keys_inv = _keys_or_default(in_keys_inv, ["action"])
        if len(in_keys_inv) > 1:
            raise ValueError(
                "ActionScaling only supports a single action key per instance. "
                "Compose several ActionScaling transforms to scale multiple actions."
            )
        out_keys_inv = _keys_or_default(out_keys_inv, in_keys_inv)
        in_keys = _keys_or_default(in_keys, in_keys_inv or ["action"])
        out_keys = _keys_or_default(out_keys, in_keys)
        super().__init__(
            in_keys=in_keys, out_keys=out_keys, in_keys_inv=in_keys_inv, out_keys_inv=out_keys_inv
        )
        self.standard_normal = bool(standard_normal)
        if (loc is None) != (scale is None):
            raise ValueError("loc and scale must either both be provided or both be None.")
        self._explicit = loc is not None
        if not in_keys_inv and not self._explicit:
            raise ValueError(
                "in_keys_inv=[] (forward-only mode) requires explicit loc and scale: without "
                "an inverse action key there is no action spec to derive them from."
            )
        if loc is not None:
            loc, scale = torch.as_tensor(loc), torch.as_tensor(scale)
            if not loc.dtype.is_floating_point:
                loc = loc.to(torch.get_default_dtype())
            if not scale.dtype.is_floating_point:
                scale = scale.to(torch.get_default_dtype())
            if bool((scale == 0).any()):
                raise ValueError(
                    "scale must not contain zero entries (would cause division by zero)."
                )
            self.register_buffer("loc", loc)
            self.register_buffer("scale", scale)
        else:
            self.register_buffer("loc", nn.UninitializedBuffer())
            self.register_buffer("scale", nn.UninitializedBuffer())

    @property
    def initialized(self) -> bool:
        """Whether ``loc`` and ``scale`` are known (given, read from a spec or loaded)."""
        return not isinstance(self.loc, nn.UninitializedBuffer)

    def _set_loc_scale(self, loc: torch.Tensor, scale: torch.Tensor) -> None:
        self.loc = loc.clone()
        self.scale = scale.clone()

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        for name in ("loc", "scale"):
            value = state_dict.get(prefix + name)
            if value is not None and isinstance(getattr(self, name), nn.UninitializedBuffer):
                setattr(self, name, torch.empty_like(value))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @staticmethod
    def _validate_bounded(spec) -> tuple[torch.Tensor, torch.Tensor]:
        space = getattr(spec, "space", None)
        if not isinstance(space, ContinuousBox):
            raise RuntimeError(
                f"ActionScaling requires a bounded continuous action spec, got "
                f"{type(spec).__name__}. Unbounded or discrete action specs are not supported."
            )
        if isinstance(spec, Unbounded):
            raise RuntimeError(
                "ActionScaling cannot be used with an Unbounded action spec. "
                "The action spec must be fully bounded for spec-based normalization."
            )
        if not _finitely_bounded(spec):
            raise RuntimeError(
                "ActionScaling requires fully bounded actions: every entry of the action spec "
                f"must have a finite lower and upper bound, got {spec!r}"
            )
        low, high = space.low, space.high
        if bool((high <= low).any()):
            raise RuntimeError(
                "ActionScaling requires high > low for every entry of the action spec. "
                f"Got entries with high <= low in {spec!r}"
            )
        return low, high

    def _init_from_spec(self, spec) -> None:
        low, high = self._validate_bounded(spec)
        dtype = low.dtype if low.dtype.is_floating_point else torch.get_default_dtype()
        self._set_loc_scale(((high + low) / 2).to(dtype), ((high - low) / 2).to(dtype))

    def _ensure_initialized(self) -> None:
        if self.initialized:
            return
        parent = self.parent
        if parent is None:
            raise RuntimeError(
                "ActionScaling has not been initialized: pass explicit ``loc`` and ``scale`` "
                "to the constructor, or attach this transform to a TransformedEnv whose "
                "action spec is bounded so that the values can be derived automatically."
            )
        key = self.in_keys_inv[0]
        actions = parent.full_action_spec
        if key not in actions.keys(True, True):
            raise RuntimeError(
                f"ActionScaling could not find key {key!r} in the parent environment's action "
                f"spec. Available keys: {list(actions.keys(True, True))}."
            )
        self._init_from_spec(actions[key])

    def _transform_leaf(self, spec):
        dtype = spec.dtype if spec.dtype.is_floating_point else torch.get_default_dtype()
        if self._explicit:
            if not isinstance(getattr(spec, "space", None), ContinuousBox):
                raise RuntimeError(
                    f"ActionScaling requires a continuous action spec, got "
                    f"{type(spec).__name__}. Discrete action specs are not supported."
                )
            if not _finitely_bounded(spec):
                return Unbounded(shape=spec.shape, device=spec.device, dtype=spec.dtype)
            loc, scale = self.loc.to(spec.device), self.scale.to(spec.device)
            low = (spec.space.low.to(dtype) - loc) / scale
            high = (spec.space.high.to(dtype) - loc) / scale
            if not self.standard_normal:
                low, high = (low + 1) / 2, (high + 1) / 2
        else:
            if not self.initialized:
                self._init_from_spec(spec)
            else:
                self._validate_bounded(spec)
            base = spec.space.low.to(dtype)
            low = torch.full_like(base, -1.0 if self.standard_normal else 0.0)
            high = torch.ones_like(base)
        return Bounded(low=low, high=high, shape=spec.shape, device=spec.device, dtype=spec.dtype)

    def transform_action_spec(self, action_spec):
        if not self.in_keys_inv:
            return action_spec
        if not isinstance(action_spec, Composite):
            return self._transform_leaf(action_spec)
        action_spec = action_spec.clone()
        ((in_key, out_key),) = self._io_pairs_inv
        if in_key in action_spec.keys(True, True):
            action_spec[out_key] = self._transform_leaf(action_spec[in_key])
            if in_key != out_key:
                del action_spec[in_key]
        return action_spec

    def _check_dim(self, action: torch.Tensor) -> None:
        if self.loc.numel() > 1 and (action.ndim == 0 or action.shape[-1] != self.loc.shape[-1]):
            raise ValueError(
                f"action shape {tuple(action.shape)} does not match the loc/scale dimension "
                f"{self.loc.shape[-1]} on its last dim."
            )

    def _apply_transform(self, action: torch.Tensor) -> torch.Tensor:
        self._ensure_initialized()
        self._check_dim(action)
        out = (action - self.loc.to(action.device)) / self.scale.to(action.device)
        return (out + 1) / 2 if not self.standard_normal else out

    def _inv_apply_transform(self, action: torch.Tensor) -> torch.Tensor:
        self._ensure_initialized()
        self._check_dim(action)
        if not self.standard_normal:
            action = action * 2 - 1
        return action * self.scale.to(action.device) + self.loc.to(action.device)

    def normalize(self, action: torch.Tensor) -> torch.Tensor:
        """Maps an env-scale action to the normalized space (the forward map)."""
        return self._apply_transform(action)

    def denormalize(self, action: torch.Tensor) -> torch.Tensor:
        """Maps a normalized action back to the env scale (the inverse map)."""
        return self._inv_apply_transform(action)

    @classmethod
    def from_stats(
        cls,
        *,
        mean: torch.Tensor | None = None,
        std: torch.Tensor | None = None,
        low: torch.Tensor | None = None,
        high: torch.Tensor | None = None,
        eps: float = 1e-6,
        **kwargs,
    ) -> ActionScaling:
        """Builds an instance from dataset action statistics.

        Exactly one pair: ``mean``/``std`` (``loc=mean``, ``scale=std``) or ``low``/``high``
        (``loc=(low+high)/2``, ``scale=(high-low)/2``); the scale is floored at ``eps``.
        ``kwargs`` go to the constructor (``in_keys_inv``, ``standard_normal``...).
        """
        if (mean is None) != (std is None):
            raise ValueError("mean and std must be provided together.")
        if (low is None) != (high is None):
            raise ValueError("low and high must be provided together.")
        if (mean is not None) == (low is not None):
            raise ValueError("Provide exactly one of (mean, std) or (low, high).")
        dtype = torch.get_default_dtype()
        if mean is not None:
            loc = torch.as_tensor(mean, dtype=dtype)
            scale = torch.as_tensor(std, dtype=dtype)
        else:
            low = torch.as_tensor(low, dtype=dtype)
            high = torch.as_tensor(high, dtype=dtype)
            loc, scale = (low + high) / 2, (high - low) / 2
        if loc.shape != scale.shape:
            raise ValueError(
                f"loc and scale must have the same shape, got {tuple(loc.shape)} and "
                f"{tuple(scale.shape)}."
            )
        return cls(loc=loc, scale=scale.clamp_min(eps), **kwargs)

    @classmethod
    def from_metadata(cls, metadata: Any, **kwargs) -> ActionScaling:
        """Builds an instance from a dataset's action statistics.

        ``metadata`` is any object with TorchRL's ``RobotDatasetMetadata`` fields:
        ``action_key``, and ``action_mean`` / ``action_std`` or ``action_low`` /
        ``action_high`` (the first complete pair is used).
        """
        kwargs.setdefault("in_keys_inv", [metadata.action_key])
        if not kwargs["in_keys_inv"]:
            kwargs.setdefault("in_keys", [metadata.action_key])
        mean, std = getattr(metadata, "action_mean", None), getattr(metadata, "action_std", None)
        if mean is not None and std is not None:
            return cls.from_stats(mean=mean, std=std, **kwargs)
        low, high = getattr(metadata, "action_low", None), getattr(metadata, "action_high", None)
        if low is not None and high is not None:
            return cls.from_stats(low=low, high=high, **kwargs)
        raise ValueError(
            f"metadata {getattr(metadata, 'dataset_id', metadata)!r} has no action normalization "
            "statistics (set action_mean/action_std or action_low/action_high)."
        )

    def _repr_args(self) -> str:
        loc = self.loc if self.initialized else "<uninitialized>"
        scale = self.scale if self.initialized else "<uninitialized>"
        return (
            f"loc={loc}, scale={scale}, standard_normal={self.standard_normal}, "
            f"in_keys_inv={self.in_keys_inv}"
        )


class FlattenAction(_ActionOnly):
    """Flattens dims ``first_dim..last_dim`` of an action for the policy.

    The policy sees the action with those (adjacent, inclusive) dims merged; ``inv``
    restores the env's shape before the step, and ``forward`` (replay buffers, module
    chains) flattens env-shaped actions.

    Args:
        first_dim, last_dim: the span to flatten (negative unless
            ``allow_positive_dim``; ``first_dim <= last_dim``).
        in_keys_inv: env-side action keys (default ``["action"]``; each gets the span).
        out_keys_inv: policy-side keys (default ``in_keys_inv``).
        in_keys / out_keys: the keys of ``forward`` (default ``in_keys_inv``).
        allow_positive_dim: accept non-negative dims (counted after the env batch dims).

    Keyword Args:
        action_shape: the env shape of the span, for use outside an env (read from the
            inner action spec otherwise).

    Raises:
        ValueError: non-negative dims without ``allow_positive_dim``, or
            ``first_dim > last_dim``.
        RuntimeError: a span that does not fit the action spec, or ``inv`` with no known
            action shape.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> t = FlattenAction(-2, -1, action_shape=(3, 5))
        >>> t.inv(TensorDict({"action": torch.zeros(4, 15)}, [4]))["action"].shape
        torch.Size([4, 3, 5])
    """

    invertible = True

    def __init__(
        self,
        first_dim: int = -2,
        last_dim: int = -1,
        in_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
        out_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
        allow_positive_dim: bool = False,
        *,
        action_shape: Sequence[int] | None = None,
    ) -> None:
        in_keys_inv = _keys_or_default(in_keys_inv, ["action"])
        out_keys_inv = _keys_or_default(out_keys_inv, in_keys_inv)
        in_keys = _keys_or_default(in_keys, in_keys_inv)
        out_keys = _keys_or_default(out_keys, in_keys)
        super().__init__(
            in_keys=in_keys, out_keys=out_keys, in_keys_inv=in_keys_inv, out_keys_inv=out_keys_inv
        )
        for name, dim in (("first_dim", first_dim), ("last_dim", last_dim)):
            if not allow_positive_dim and dim >= 0:
                raise ValueError(
                    f"{name} should be smaller than 0 to accommodate for envs of different "
                    "batch_sizes. Set allow_positive_dim=True to allow positive dimensions."
                )
        if first_dim > last_dim:
            raise ValueError(f"first_dim ({first_dim}) must be <= last_dim ({last_dim}).")
        self._first_dim = first_dim
        self._last_dim = last_dim
        self.allow_positive_dim = bool(allow_positive_dim)
        self._unflatten_shapes: dict = {}
        if action_shape is not None:
            shape = tuple(int(s) for s in action_shape)
            for key in self.in_keys_inv:
                self._unflatten_shapes[key] = shape

    def _batch_dims(self) -> int:
        parts = self._parent_parts()
        return 0 if parts is None else len(parts[0].batch_size)

    @property
    def first_dim(self) -> int:
        if self._first_dim >= 0:
            return self._batch_dims() + self._first_dim
        return self._first_dim

    @property
    def last_dim(self) -> int:
        if self._last_dim >= 0:
            return self._batch_dims() + self._last_dim
        return self._last_dim

    @property
    def _merged_dim(self) -> int:
        return self.first_dim if self._first_dim >= 0 else self.last_dim

    def _apply_transform(self, action: torch.Tensor) -> torch.Tensor:
        return torch.flatten(action, self.first_dim, self.last_dim)

    def _ensure_shapes(self) -> None:
        if self._unflatten_shapes:
            return
        parent = self.parent
        if parent is None:
            return
        actions = parent.full_action_spec
        for key in self.in_keys_inv:
            if key in actions.keys(True, True):
                self._unflatten_shapes[key] = self._span(actions[key])

    def _unflatten(self, key: NestedKey, action: torch.Tensor) -> torch.Tensor:
        shape = self._unflatten_shapes.get(key)
        if shape is None:
            raise RuntimeError(
                f"FlattenAction has no stored unflatten shape for key {key!r}. Pass "
                "``action_shape`` to the constructor or attach the transform to a "
                "TransformedEnv with an action spec for this key."
            )
        return torch.unflatten(action, self._merged_dim, shape)

    def _inv_apply_transform(self, action: torch.Tensor) -> torch.Tensor:
        self._ensure_shapes()
        if len(self.in_keys_inv) != 1:
            raise RuntimeError(
                f"FlattenAction._inv_apply_transform cannot disambiguate between "
                f"{len(self.in_keys_inv)} action keys. Use ``FlattenAction.inv(td)`` instead."
            )
        return self._unflatten(self.in_keys_inv[0], action)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        self._ensure_shapes()
        for in_key, out_key in self._io_pairs_inv:
            value = tensordict.get(out_key, None)
            if value is None:
                if self.missing_tolerance:
                    continue
                raise KeyError(
                    f"FlattenAction expected the action {out_key!r} in the tensordict; keys "
                    f"present: {sorted(map(str, tensordict.keys(True, True)))}"
                )
            tensordict.set(in_key, self._unflatten(in_key, value))
        return tensordict

    def _span(self, spec) -> tuple[int, ...]:
        ndim = len(spec.shape)
        first = self._first_dim + ndim if self._first_dim < 0 else self._first_dim
        last = self._last_dim + ndim if self._last_dim < 0 else self._last_dim
        if self._first_dim >= 0:
            first, last = self.first_dim, self.last_dim
        if first < 0 or last >= ndim or first > last:
            raise RuntimeError(
                f"FlattenAction(first_dim={self._first_dim}, last_dim={self._last_dim}) is not "
                f"compatible with an action of shape {tuple(spec.shape)}."
            )
        return tuple(int(s) for s in spec.shape[first : last + 1])

    def _flatten_leaf(self, spec):
        ndim = len(spec.shape)
        first = self.first_dim if self.first_dim >= 0 else ndim + self.first_dim
        last = self.last_dim if self.last_dim >= 0 else ndim + self.last_dim
        shape = torch.Size(
            (*spec.shape[:first], math.prod(spec.shape[first : last + 1]), *spec.shape[last + 1 :])
        )
        if isinstance(spec, Bounded):
            low = torch.flatten(spec.space.low.expand(spec.shape), first, last)
            high = torch.flatten(spec.space.high.expand(spec.shape), first, last)
            return Bounded(low=low, high=high, shape=shape, device=spec.device, dtype=spec.dtype)
        if isinstance(spec, Unbounded):
            return Unbounded(shape=shape, device=spec.device, dtype=spec.dtype)
        spec = spec.clone()
        spec.shape = shape
        return spec

    def transform_action_spec(self, action_spec):
        if not isinstance(action_spec, Composite):
            self._unflatten_shapes[self.in_keys_inv[0]] = self._span(action_spec)
            return self._flatten_leaf(action_spec)
        action_spec = action_spec.clone()
        for in_key, out_key in self._io_pairs_inv:
            if in_key in action_spec.keys(True, True):
                leaf = action_spec[in_key]
                self._unflatten_shapes[in_key] = self._span(leaf)
                action_spec[out_key] = self._flatten_leaf(leaf)
                if in_key != out_key:
                    del action_spec[in_key]
        return action_spec

    def _repr_args(self) -> str:
        return (
            f"first_dim={int(self.first_dim)}, last_dim={int(self.last_dim)}, "
            f"in_keys_inv={self.in_keys_inv}, out_keys_inv={self.out_keys_inv}"
        )
