"""Per-entry tensor transforms: dtype and device casts, pinned memory, clipping, a user
function per entry (``UnaryTransform``), hashes, and the finiteness check.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from copy import copy
from typing import Any

import torch
from tensordict import NonTensorData, NonTensorStack, TensorDictBase, is_tensor_collection

from rl.core import Bounded, Composite, NonTensor, Unbounded

from ._base import Transform, _missing_key_error
from ._spec_utils import NestedKey, leaf_keys, spec_with

__all__ = [
    "ClipTransform",
    "DTypeCastTransform",
    "DeviceCastTransform",
    "DoubleToFloat",
    "FiniteTensorDictCheck",
    "Hash",
    "PinMemoryTransform",
    "UnaryTransform",
]


class DTypeCastTransform(Transform):
    """Casts entries from ``dtype_in`` to ``dtype_out`` (actions back with ``inv``).

    Without any keys, every observation / reward entry of dtype ``dtype_in`` is cast, and
    every action / state entry of the inner env with dtype ``dtype_in`` is exposed as
    ``dtype_out`` (and cast back before reaching the env). On data, outside an env (no
    specs to pick the keys from), ``forward`` casts every ``dtype_in`` leaf to
    ``dtype_out`` and ``inv`` every ``dtype_out`` leaf back to ``dtype_in`` (TorchRL).

    Args:
        dtype_in: the inner dtype.
        dtype_out: the outer dtype.
        in_keys / out_keys: forward keys (observations, rewards).
        in_keys_inv / out_keys_inv: inverse keys (actions, states).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> t = DTypeCastTransform(torch.int64, torch.float32, in_keys=["count"])
        >>> t(TensorDict({"count": torch.tensor([3])}, []))["count"]
        tensor([3.])
    """

    _elementwise = True

    invertible = True

    def __init__(
        self,
        dtype_in: torch.dtype,
        dtype_out: torch.dtype,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        in_keys_inv: Sequence[NestedKey] | None = None,
        out_keys_inv: Sequence[NestedKey] | None = None,
    ):
        for name, dt in (("dtype_in", dtype_in), ("dtype_out", dtype_out)):
            if not isinstance(dt, torch.dtype):
                raise TypeError(f"DTypeCastTransform {name} must be a torch.dtype, got {dt!r}")
        self.dtype_in = dtype_in
        self.dtype_out = dtype_out
        self._auto = in_keys is None and in_keys_inv is None
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)

    def _set_pairs(self, attr: str, keys: list) -> None:
        # set without invalidating the env's spec cache (we are inside its computation)
        self.__dict__[attr] = [(k, k) for k in keys]

    @property
    def has_step(self) -> bool:
        return bool(self._io_pairs)

    def _casts_all(self) -> bool:
        """Without keys and outside an env (no specs to pick keys from), every entry of
        the matching dtype is cast (TorchRL)."""
        return self._auto and self._top_env() is None

    @property
    def has_inverse(self) -> bool:
        return bool(self._io_pairs_inv) or self._casts_all()

    def _apply_transform(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.to(self.dtype_out)

    def _inv_apply_transform(self, state: torch.Tensor) -> torch.Tensor:
        return state.to(self.dtype_in)

    @staticmethod
    def _cast_leaves(tensordict: TensorDictBase, src: torch.dtype, dst: torch.dtype):
        for key in list(tensordict.keys(True, True)):
            value = tensordict.get(key)
            if isinstance(value, torch.Tensor) and value.dtype == src:
                tensordict.set(key, value.to(dst))
        return tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._auto and not self._io_pairs:
            return self._cast_leaves(tensordict, self.dtype_in, self.dtype_out)
        return self._call(tensordict)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._casts_all():
            return self._cast_leaves(tensordict, self.dtype_out, self.dtype_in)
        return super()._inv_call(tensordict)

    def _leaf_spec(self, spec, in_key):
        return spec_with(spec, dtype=self.dtype_out)

    def _leaf_spec_inv(self, spec, in_key):
        return spec_with(spec, dtype=self.dtype_out)

    def _matching(self, composite) -> list:
        return [k for k in leaf_keys(composite) if composite[k].dtype == self.dtype_in]

    def transform_output_spec(self, output_spec):
        if self._auto:
            keys = self._matching(output_spec["full_observation_spec"])
            keys += self._matching(output_spec["full_reward_spec"])
            self._set_pairs("_io_pairs", keys)
        return super().transform_output_spec(output_spec)

    def transform_input_spec(self, input_spec):
        input_spec = input_spec.clone()
        actions = input_spec["full_action_spec"]
        states = input_spec.get("full_state_spec", None)
        if self._auto:
            keys = self._matching(actions)
            if states is not None:
                keys += self._matching(states)
            self._set_pairs("_io_pairs_inv", keys)
        input_spec["full_action_spec"] = self.transform_action_spec(actions)
        if states is not None:  # TorchRL's input specs may hold a None state spec
            input_spec["full_state_spec"] = self.transform_state_spec(states)
        return input_spec

    def _repr_args(self) -> str:
        keys = self._repr_keys()
        return f"dtype_in={self.dtype_in}, dtype_out={self.dtype_out}{keys}"

    def _repr_keys(self) -> str:
        if self._auto:
            return ""
        return ", " + super()._repr_args()


class DoubleToFloat(DTypeCastTransform):
    """Casts float64 entries to float32 (and float32 actions back to float64 for the env).

    Args:
        in_keys / in_keys_inv: as in :class:`DTypeCastTransform` (default: every float64
            entry found in the specs).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> DoubleToFloat()(TensorDict({"x": torch.zeros(2, dtype=torch.float64)}, []))["x"].dtype
        torch.float32
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        in_keys_inv: Sequence[NestedKey] | None = None,
        out_keys_inv: Sequence[NestedKey] | None = None,
    ):
        super().__init__(torch.float64, torch.float32, in_keys, out_keys, in_keys_inv, out_keys_inv)

    def _repr_args(self) -> str:
        return self._repr_keys().lstrip(", ")


class DeviceCastTransform(Transform):
    """Moves the data (all of it, or the given keys) to ``device``; actions back with ``inv``.

    Args:
        device: the outer device.
        orig_device: the inner env's device (default: found from its specs, else CPU).
        in_keys / out_keys / in_keys_inv / out_keys_inv: restrict the move to these keys.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> DeviceCastTransform("cpu")(TensorDict({"x": torch.zeros(2)}, [])).device
        device(type='cpu')
    """

    invertible = True

    def __init__(
        self,
        device: torch.device | str,
        orig_device: torch.device | str | None = None,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        in_keys_inv: Sequence[NestedKey] | None = None,
        out_keys_inv: Sequence[NestedKey] | None = None,
    ):
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        self.device = torch.device(device)
        self.orig_device = torch.device(orig_device) if orig_device is not None else None
        self._whole = in_keys is None and in_keys_inv is None

    @property
    def has_step(self) -> bool:
        return True

    @property
    def has_inverse(self) -> bool:
        return self._whole or bool(self._io_pairs_inv)

    def _apply_transform(self, obs):
        return obs.to(self.device, non_blocking=True)

    def _inv_apply_transform(self, state):
        return state.to(self.orig_device or torch.device("cpu"), non_blocking=True)

    def _call(self, next_tensordict):
        if self._whole:
            return next_tensordict.to(self.device)
        device = next_tensordict.device
        if device is not None and device != self.device:
            # some entries move: the data holds two devices, so it has none (TorchRL)
            next_tensordict = next_tensordict.clone(False).clear_device_()
        return super()._call(next_tensordict)

    def transform_env_device(self, device):
        # the whole env moves, or only some entries (then it has no single device)
        return self.device if self._whole else None

    def _inv_call(self, tensordict):
        if self._whole:
            return tensordict.to(self.orig_device or torch.device("cpu"))
        return super()._inv_call(tensordict)

    def inv(self, tensordict):
        if self._whole:
            return self._inv_call(tensordict)
        return super().inv(tensordict)

    def _leaf_spec(self, spec, in_key):
        return spec.to(self.device)

    def _leaf_spec_inv(self, spec, in_key):
        return spec.to(self.device)

    def transform_output_spec(self, output_spec):
        if self.orig_device is None:
            self.orig_device = output_spec.device
        if self._whole:
            return output_spec.to(self.device)
        return super().transform_output_spec(output_spec)

    def transform_input_spec(self, input_spec):
        if self._whole:
            return input_spec.to(self.device)
        return super().transform_input_spec(input_spec)

    def _repr_args(self) -> str:
        return f"device={self.device}, orig_device={self.orig_device}"


class PinMemoryTransform(Transform):
    """Moves the data to pinned (page-locked) memory (for faster host-to-device copies).

    Needs an accelerator: pinning is not available on a CPU-only machine.

    Examples:
        >>> t = PinMemoryTransform()
    """

    def __init__(self):
        super().__init__()

    @property
    def has_step(self) -> bool:
        return True

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return next_tensordict.pin_memory()

    def _step(self, tensordict, next_tensordict):
        return self._call(next_tensordict)

    def _reset(self, tensordict, tensordict_reset):
        return self._call(tensordict_reset)

    def _repr_args(self) -> str:
        return ""


class ClipTransform(Transform):
    """Clips entries to ``[low, high]`` (observations forward, actions with ``inv``).

    Args:
        in_keys / out_keys: forward keys.
        in_keys_inv / out_keys_inv: inverse keys (clipped before reaching the env; their
            specs stay those of the inner env, as TorchRL).
        low: lower bound (``None``: none).
        high: upper bound (``None``: none).

    Raises:
        TypeError: both bounds are ``None``, or a bound is not a scalar.
        ValueError: ``low >= high``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> t = ClipTransform(in_keys=["observation"], low=-1.0, high=1.0)
        >>> t(TensorDict({"observation": torch.tensor([-3.0, 0.5, 2.0])}, []))["observation"]
        tensor([-1.0000,  0.5000,  1.0000])
    """

    _elementwise = True

    invertible = True

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        in_keys_inv: Sequence[NestedKey] | None = None,
        out_keys_inv: Sequence[NestedKey] | None = None,
        *,
        low: float | None = None,
        high: float | None = None,
    ):
        if low is None and high is None:
            raise TypeError(
                "Either one or both of `high` and `low` must be provided to ClipTransform, "
                "got neither"
            )
        for value in (low, high):
            if value is not None and torch.as_tensor(value).numel() > 1:
                raise TypeError(
                    f"low and high must be scalars or None. Got low={low} and high={high}."
                )
        if low is not None and high is not None and not low < high:
            raise ValueError(
                f"`low` must be strictly lower than `high` in ClipTransform, got low={low} "
                f"and high={high}"
            )
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        self.low = low
        self.high = high

    def _apply_transform(self, obs):
        return obs.clamp(self.low, self.high)

    def _inv_apply_transform(self, state):
        return state.clamp(self.low, self.high)

    def _clipped_spec(self, spec):
        if isinstance(spec, Bounded):
            low = spec.low if self.low is None else spec.low.clamp_min(self.low)
            high = spec.high if self.high is None else spec.high.clamp_max(self.high)
            return spec_with(spec, low=low, high=high)
        if self.low is not None and self.high is not None:
            return spec_with(spec, low=self.low, high=self.high)
        return spec_with(spec)

    def _leaf_spec(self, spec, in_key):
        return self._clipped_spec(spec)

    # the input specs stay the inner env's (as TorchRL): what the outside sends may be
    # anything, it is clipped on its way in

    def _repr_args(self) -> str:
        return f"low={self.low}, high={self.high}, {super()._repr_args()}"


def _spec_of_value(value, device) -> Any:
    """The spec of one output value: ``Unbounded`` for tensors, ``NonTensor`` otherwise."""
    if isinstance(value, (NonTensorData, NonTensorStack)):
        return NonTensor(shape=value.batch_size, device=device)
    if isinstance(value, torch.Tensor):
        return Unbounded(shape=value.shape, device=value.device, dtype=value.dtype)
    if is_tensor_collection(value):
        return Composite(
            {k: _spec_of_value(v, device) for k, v in value.items()},
            shape=value.batch_size,
            device=device,
        )
    return NonTensor(shape=(), device=device)


def _plain(value):
    """Python data out of ``NonTensorData`` / ``NonTensorStack`` (as TorchRL's transforms)."""
    if isinstance(value, NonTensorData):
        return value.get("data") if value.dim() == 0 else value.tolist()
    if isinstance(value, NonTensorStack):
        return value.tolist()
    return value


class UnaryTransform(Transform):
    """Applies a function to each ``in_key`` and writes the result to the matching ``out_key``.

    The output specs are found by calling ``fn`` on a zero-filled sample of the env's
    specs, so ``fn`` may change shapes and dtypes or return python objects (strings,
    stored as non-tensor data).

    Args:
        in_keys: the inputs.
        out_keys: the outputs.
        in_keys_inv: the inputs of the inverse call (inner side).
        out_keys_inv: the outputs of the inverse call (outer side).
        fn: the function (a non-tensor input arrives as python data, unless
            ``use_raw_nontensor``).
        inv_fn: the function of the inverse call (default ``fn``).
        use_raw_nontensor: hand ``NonTensorData`` / ``NonTensorStack`` to ``fn`` unchanged.

    Examples:
        >>> import torch
        >>> from rl.envs import PendulumEnv
        >>> env = PendulumEnv().append_transform(
        ...     UnaryTransform(in_keys=["observation"], out_keys=["obs2"], fn=lambda x: x * 2)
        ... )
        >>> td = env.reset()
        >>> torch.equal(td["obs2"], td["observation"] * 2)
        True
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey],
        out_keys: Sequence[NestedKey],
        in_keys_inv: Sequence[NestedKey] | None = None,
        out_keys_inv: Sequence[NestedKey] | None = None,
        *,
        fn: Callable[[Any], Any],
        inv_fn: Callable[[Any], Any] | None = None,
        use_raw_nontensor: bool = False,
    ):
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        if not callable(fn):
            raise TypeError(f"{type(self).__name__} fn must be callable, got {fn!r}")
        self._fn = fn
        self._inv_fn = inv_fn
        self._use_raw_nontensor = use_raw_nontensor

    def _apply_transform(self, value):
        if not self._use_raw_nontensor:
            value = _plain(value)
        return self._fn(value)

    def _inv_apply_transform(self, state):
        if not self._use_raw_nontensor:
            state = _plain(state)
        if self._inv_fn is not None:
            return self._inv_fn(state)
        return self._fn(state)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        for in_key, out_key in self._io_pairs_inv:
            value = tensordict.get(out_key, None)
            if value is None:
                if self.missing_tolerance:
                    continue
                raise _missing_key_error(self, out_key, tensordict)
            tensordict.set(in_key, self._inv_apply_transform(value))
        return tensordict

    #: as TorchRL's: the inverse map also runs on the input of a reset, so that the base
    #: env reads the inner entries (a ``Hash``'s string given as its hash, say)
    enable_inv_on_reset = True

    @property
    def _has_reset_preprocess(self) -> bool:
        return self.enable_inv_on_reset and bool(self._io_pairs_inv)

    def _reset_env_preprocess(self, tensordict: TensorDictBase) -> TensorDictBase:
        if tensordict is None or not self._has_reset_preprocess:
            return tensordict
        tolerance = self.missing_tolerance
        self.missing_tolerance = True  # a reset's input may hold none of the entries
        try:
            return self._inv_call(tensordict)
        finally:
            self.missing_tolerance = tolerance

    def _probe_specs(self, parts: dict[str, Composite], pairs, forward: bool) -> dict:
        """Runs the map on a zero sample of ``parts`` and returns ``{out_key: spec}``."""
        sample = None
        for comp in parts.values():
            z = comp.zero()
            sample = z if sample is None else sample.update(z)
        out = {}
        if sample is None:
            return out
        for in_key, out_key in pairs:
            # (non-tensor entries are not listed by keys(leaves_only=True))
            value = sample.get(in_key, None)
            if value is None:
                continue
            result = self._apply_transform(value) if forward else self._inv_apply_transform(value)
            device = next(iter(parts.values())).device
            if not isinstance(result, (torch.Tensor, NonTensorData, NonTensorStack)) and not (
                is_tensor_collection(result)
            ):
                out[out_key] = NonTensor(shape=sample.batch_size, device=device)
            else:
                out[out_key] = _spec_of_value(result, device)
        return out

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        output_spec = output_spec.clone()
        names = [
            n
            for n in ("full_observation_spec", "full_reward_spec", "full_done_spec")
            if n in output_spec.keys()
        ]
        new = self._probe_specs({n: output_spec[n] for n in names}, self._io_pairs, True)
        for name in names:
            comp = output_spec[name]
            keys = set(comp.keys(True, True))
            for in_key, out_key in self._io_pairs:
                if in_key in keys and out_key in new:
                    comp[out_key] = new[out_key]
        return output_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        input_spec = input_spec.clone()
        if not self._io_pairs_inv:
            return input_spec
        names = [n for n in ("full_action_spec", "full_state_spec") if n in input_spec.keys()]
        # as TorchRL: the outer spec is what the forward map makes of the inner entry
        new = self._probe_specs({n: input_spec[n] for n in names}, self._io_pairs_inv, True)
        for name in names:
            comp = input_spec[name]
            keys = set(comp.keys(True, True))
            for in_key, out_key in self._io_pairs_inv:
                if in_key in keys and out_key in new:
                    comp[out_key] = new[out_key]
        return input_spec

    def _repr_args(self) -> str:
        return f"in_keys={self.in_keys}, out_keys={self.out_keys}, fn={self._fn!r}"


class Hash(UnaryTransform):
    """Writes a hash (a ``uint8`` tensor, 32 bytes of SHA-256 by default) of each ``in_key``.

    With ``in_keys_inv`` (or a ``repertoire``) the inputs seen are remembered, so that the
    inverse call maps a hash back to its input.

    Args:
        in_keys: the values to hash (strings, or anything ``hash_fn`` takes).
        out_keys: where to write the hashes.
        in_keys_inv: inputs restored by the inverse call.
        out_keys_inv: hashes read by the inverse call.
        hash_fn: ``(value) -> Tensor`` or ``(value, seed) -> Tensor`` when ``seed`` is given
            (default :meth:`reproducible_hash`).
        seed: the seed passed to ``hash_fn``.
        use_raw_nontensor: hand ``NonTensorData`` to ``hash_fn`` unchanged.
        repertoire: the ``{hash tuple: input}`` dict of the inverse map (kept, not copied).

    Raises:
        ValueError: ``hash_fn`` returns something else than a tensor.
        RuntimeError: an inverse call without a repertoire.

    Examples:
        >>> from tensordict import TensorDict
        >>> t = Hash(in_keys=["text"], out_keys=["hash"])
        >>> t(TensorDict(text="abc"))["hash"][:4]
        tensor([186, 120,  22, 191], dtype=torch.uint8)
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey],
        out_keys: Sequence[NestedKey],
        in_keys_inv: Sequence[NestedKey] | None = None,
        out_keys_inv: Sequence[NestedKey] | None = None,
        *,
        hash_fn: Callable | None = None,
        seed: Any | None = None,
        use_raw_nontensor: bool = False,
        repertoire: dict | None = None,
    ):
        if hash_fn is None:
            hash_fn = Hash.reproducible_hash
        if repertoire is None and in_keys_inv is not None and len(in_keys_inv) > 0:
            repertoire = {}
        self._repertoire = repertoire
        self._seed = seed
        self._hash_fn = hash_fn
        super().__init__(
            in_keys,
            out_keys,
            in_keys_inv,
            out_keys_inv,
            fn=self.call_hash_fn,
            inv_fn=self.get_input_from_hash,
            use_raw_nontensor=use_raw_nontensor,
        )

    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        return {"_repertoire": self._repertoire}

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        self._repertoire = state_dict.get("_repertoire")

    @classmethod
    def hash_to_repertoire_key(cls, hash_tensor):
        """A hashable (nested tuple of ints) form of a hash tensor."""
        if isinstance(hash_tensor, torch.Tensor):
            if hash_tensor.dim() == 0:
                return hash_tensor.tolist()
            return tuple(cls.hash_to_repertoire_key(t) for t in hash_tensor.tolist())
        if isinstance(hash_tensor, list):
            return tuple(cls.hash_to_repertoire_key(t) for t in hash_tensor)
        return hash_tensor

    def get_input_from_hash(self, hash_tensor) -> Any:
        """The input that produced ``hash_tensor`` (needs a repertoire)."""
        if self._repertoire is None:
            raise RuntimeError(
                "Hash got an inverse call but keeps no repertoire: pass in_keys_inv / "
                "out_keys_inv or repertoire= to the constructor"
            )
        return self._repertoire[self.hash_to_repertoire_key(hash_tensor)]

    def call_hash_fn(self, value):
        """``hash_fn(value)`` (with the seed if any), remembered in the repertoire."""
        out = self._hash_fn(value) if self._seed is None else self._hash_fn(value, self._seed)
        if not torch.is_tensor(out):
            raise ValueError(
                f"Hash hash_fn must return a tensor, got {type(out).__name__} from {self._hash_fn!r}"
            )
        if self._repertoire is not None:
            self._repertoire[self.hash_to_repertoire_key(out)] = copy(value)
        return out

    @classmethod
    def reproducible_hash(cls, string, seed=None) -> torch.Tensor:
        """SHA-256 of ``seed + string`` as a ``(32,)`` ``uint8`` tensor (``None`` hashes ``""``)."""
        if string is None:
            string = ""
        seeded = seed + string if seed is not None else str(string)
        digest = bytearray(hashlib.sha256(seeded.encode("utf-8")).digest())
        return torch.frombuffer(digest, dtype=torch.uint8)


def _check_finite(tensor: torch.Tensor) -> None:
    if tensor.is_floating_point() or tensor.is_complex():
        if not bool(tensor.isfinite().all()):
            raise ValueError("Encountered a non-finite tensor.")


class FiniteTensorDictCheck(Transform):
    """Raises ``ValueError("Encountered a non-finite tensor.")`` on any NaN / inf entry.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> FiniteTensorDictCheck()(TensorDict(x=torch.ones(2)))["x"]
        tensor([1., 1.])
    """

    def __init__(self):
        super().__init__(in_keys=[])

    @property
    def has_step(self) -> bool:
        return True

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        for value in next_tensordict.values(True, True):
            if isinstance(value, torch.Tensor):
                _check_finite(value)
        return next_tensordict

    def _reset(self, tensordict, tensordict_reset):
        return self._call(tensordict_reset)

    def _repr_args(self) -> str:
        return ""
