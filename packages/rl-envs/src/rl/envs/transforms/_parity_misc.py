"""Utility transforms: empty-spec pruning, finiteness checks, pinned memory, random crops in
time, batch-size changes, trajectory counters, timers, observation deltas, module wrappers."""

from __future__ import annotations

import multiprocessing as mp
import time
import warnings
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

import torch
from tensordict import NonTensorData, TensorDictBase, is_tensor_collection

from rl.core import Bounded, Composite, TensorSpec, Unbounded

from ._base import Transform
from ._spec_utils import NestedKey, normalize_key, normalize_keys
from ._utils import sibling_key

__all__ = [
    "BatchSizeTransform",
    "FiniteTensorDictCheck",
    "ModuleTransform",
    "NextObservationDelta",
    "PinMemoryTransform",
    "RandomCropTensorDict",
    "RemoveEmptySpecs",
    "Timer",
    "TrajCounter",
]


def _no_io_pairs(self) -> None:
    """``_on_keys_changed`` of transforms whose out_keys are not maps of in_keys."""
    d = self.__dict__
    if "_in_keys" not in d or "_in_keys_inv" not in d:
        return
    d["_io_pairs"] = []
    d["_io_pairs_inv"] = []
    self.empty_cache()


def _depth(item) -> int:
    key = item[0]
    return 0 if isinstance(key, str) else len(key)


class RemoveEmptySpecs(Transform):
    """Removes empty sub-TensorDicts (and their empty ``Composite`` specs).

    The inverse call re-creates the empty entries the inner env's input specs hold.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"a": torch.zeros(1), "empty": TensorDict()}, [])
        >>> sorted(RemoveEmptySpecs()(td).keys())
        ['a']
    """

    def __init__(self, in_keys=None, out_keys=None, in_keys_inv=None, out_keys_inv=None):
        super().__init__()
        self._has_empty_input = True

    @property
    def has_step(self) -> bool:
        return True

    @staticmethod
    def _prune(comp: Composite) -> bool:
        found = False
        for key, spec in sorted(comp.items(True), key=_depth, reverse=True):
            if isinstance(spec, Composite) and spec.is_empty():
                del comp[key]
                found = True
        return found

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        output_spec = output_spec.clone()
        for name in ("full_done_spec", "full_observation_spec", "full_reward_spec"):
            if name in output_spec.keys():
                self._prune(output_spec[name])
        return output_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        input_spec = input_spec.clone()
        found = False
        for name in ("full_action_spec", "full_state_spec"):
            if name in input_spec.keys():
                found = self._prune(input_spec[name]) or found
        self._has_empty_input = found
        return input_spec

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        if not self._has_empty_input:
            return tensordict
        parent = self.parent
        if parent is None:
            return tensordict
        input_spec = parent.input_spec
        present = set(tensordict.keys(True))
        for name in ("full_action_spec", "full_state_spec"):
            if name not in input_spec.keys():
                continue
            for key, spec in sorted(input_spec[name].items(True), key=_depth):
                if isinstance(spec, Composite) and spec.is_empty() and key not in present:
                    tensordict.create_nested(key)
        return tensordict

    @property
    def has_inverse(self) -> bool:
        return self._has_empty_input

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        for key, value in sorted(next_tensordict.items(True), key=_depth, reverse=True):
            if (
                is_tensor_collection(value)
                and not isinstance(value, NonTensorData)
                and value.is_empty()
            ):
                del next_tensordict[key]
        return next_tensordict

    def _reset(self, tensordict, tensordict_reset):
        return self._call(tensordict_reset)

    def _repr_args(self) -> str:
        return ""


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


class RandomCropTensorDict(Transform):
    """Takes a random sub-sequence of ``sub_seq_len`` steps along ``sample_dim`` (a data transform).

    Each batch entry gets its own start; with ``mask_key`` (a boolean ``[*B, T]`` mask of
    the valid steps), the start is drawn within each entry's valid length.

    Args:
        sub_seq_len: length of the crop.
        sample_dim: the time dim (default ``-1``).
        mask_key: the valid-step mask, if any.

    Raises:
        RuntimeError: the data is shorter than ``sub_seq_len`` or has no batch dim.
        ValueError: the mask's shape differs from the data's batch shape.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict(t=torch.arange(10).expand(3, 10), batch_size=[3, 10])
        >>> out = RandomCropTensorDict(4)(td)
        >>> out.shape, bool((out["t"].diff(dim=-1) == 1).all())
        (torch.Size([3, 4]), True)
    """

    def __init__(self, sub_seq_len: int, sample_dim: int = -1, mask_key: NestedKey | None = None):
        if sample_dim > 0:
            warnings.warn(
                "RandomCropTensorDict got a positive sample_dim: with data of different batch "
                "dims it may not point at the time dim (by convention the last one)",
                stacklevel=2,
            )
        super().__init__()
        self.sub_seq_len = sub_seq_len
        self.sample_dim = sample_dim
        self.mask_key = None if mask_key is None else normalize_key(mask_key)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        shape = tensordict.shape
        dim = self.sample_dim
        if not len(shape):
            raise RuntimeError("RandomCropTensorDict cannot crop a tensordict with batch_size []")
        if shape[dim] < self.sub_seq_len:
            raise RuntimeError(
                f"RandomCropTensorDict cannot take {self.sub_seq_len} steps along dim {dim} of a "
                f"tensordict of batch_size {tuple(shape)}: reduce sub_seq_len or collect longer "
                "sequences"
            )
        max_start = shape[dim] - self.sub_seq_len
        idx_shape = list(shape)
        idx_shape[dim] = 1
        device = tensordict.device or torch.device("cpu")
        mask = None
        if self.mask_key is not None:
            mask = tensordict.get(self.mask_key, None)
        if mask is None:
            start = torch.randint(max_start + 1, idx_shape, device=device)
        else:
            if mask.shape != shape:
                raise ValueError(
                    f"RandomCropTensorDict expects the mask {self.mask_key!r} to have the batch "
                    f"shape {tuple(shape)}, got {tuple(mask.shape)}"
                )
            lengths = mask.cumsum(dim).max(dim, True)[0]
            if bool((lengths < self.sub_seq_len).any()):
                raise RuntimeError(
                    f"RandomCropTensorDict cannot take {self.sub_seq_len} steps when the shortest "
                    f"trajectory has {int(lengths.min())}"
                )
            start = (torch.rand(idx_shape, device=device) * (lengths - self.sub_seq_len + 1)).long()
        steps = torch.arange(self.sub_seq_len, device=start.device)
        view = [1] * tensordict.ndim
        view[dim] = self.sub_seq_len
        return tensordict.gather(dim=dim, index=start + steps.view(view))

    def _call(self, next_tensordict):
        return next_tensordict

    @property
    def has_step(self) -> bool:
        return False

    def _repr_args(self) -> str:
        return f"sub_seq_len={self.sub_seq_len}, sample_dim={self.sample_dim}"


class BatchSizeTransform(Transform):
    """Changes the batch size of the data (expanding to ``batch_size`` or via ``reshape_fn``).

    On data, ``reshape_fn`` is applied by ``forward``. In an env, ``_reset`` expands (or
    reshapes) the reset output, optionally after ``reset_func``, and the output / input
    specs follow (``transform_env_batch_size`` gives the new env batch size).

    Args:
        batch_size: the new batch size (expand); exclusive with ``reshape_fn``.
        reshape_fn: a function of a TensorDict (or a spec) giving the reshaped one.
        reset_func: ``(tensordict, tensordict_reset) -> tensordict_reset`` run at reset.
        env_kwarg: also pass ``env=`` (the container) to ``reset_func``.

    Raises:
        ValueError: both or neither of ``batch_size`` / ``reshape_fn``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> t = BatchSizeTransform(reshape_fn=lambda td: td.reshape(-1))
        >>> t(TensorDict(x=torch.zeros(2, 3), batch_size=[2, 3])).batch_size
        torch.Size([6])
    """

    def __init__(
        self,
        *,
        batch_size: torch.Size | None = None,
        reshape_fn: Callable[[TensorDictBase], TensorDictBase] | None = None,
        reset_func: Callable[[TensorDictBase, TensorDictBase], TensorDictBase] | None = None,
        env_kwarg: bool = False,
    ):
        super().__init__()
        if not ((batch_size is None) ^ (reshape_fn is None)):
            raise ValueError(
                "BatchSizeTransform needs exactly one of batch_size or reshape_fn, got "
                f"batch_size={batch_size!r} and reshape_fn={reshape_fn!r}"
            )
        self.batch_size = None if batch_size is None else torch.Size(batch_size)
        self.reshape_fn = reshape_fn
        self.reset_func = reset_func
        self.env_kwarg = env_kwarg

    @property
    def has_step(self) -> bool:
        return self.reshape_fn is not None

    def _reset(self, tensordict, tensordict_reset):
        if self.reset_func is not None:
            if self.env_kwarg:
                tensordict_reset = self.reset_func(tensordict, tensordict_reset, env=self.container)
            else:
                tensordict_reset = self.reset_func(tensordict, tensordict_reset)
        if self.batch_size is not None:
            return tensordict_reset.expand(self.batch_size)
        return self.reshape_fn(tensordict_reset)

    def _call(self, next_tensordict):
        if self.reshape_fn is not None:
            next_tensordict = self.reshape_fn(next_tensordict)
        return next_tensordict

    def forward(self, tensordict):
        return self._call(tensordict)

    def _inv_call(self, tensordict):
        if self.reshape_fn is not None:
            parent = self.parent
            if parent is not None:
                tensordict = tensordict.reshape(parent.batch_size)
        return tensordict

    @property
    def has_inverse(self) -> bool:
        return self.reshape_fn is not None

    def transform_env_batch_size(self, batch_size: torch.Size) -> torch.Size:
        """The batch size of the env seen through this transform."""
        if self.batch_size is not None:
            return self.batch_size
        return self.reshape_fn(torch.zeros(batch_size, device="meta")).shape

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        if self.batch_size is not None:
            return output_spec.expand(self.batch_size)
        return self.reshape_fn(output_spec)

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        if self.batch_size is not None:
            return input_spec.expand(self.batch_size)
        return self.reshape_fn(input_spec)

    def _repr_args(self) -> str:
        return f"batch_size={self.batch_size}, reshape_fn={self.reshape_fn}"


class TrajCounter(Transform):
    """Numbers the trajectories: each reset gives the new episodes the next free ids.

    The counter is shared by the clones of the transform (and by envs built from them in
    the same process), so ids are unique across the envs that hold a clone; it is saved in
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
        self._traj_count = mp.Value("i", 0)
        self._initialized = False
        self.repeats = 0 if repeats is None else repeats

    _on_keys_changed = _no_io_pairs

    @property
    def has_step(self) -> bool:
        return True

    def __getstate__(self):
        state = super().__getstate__()
        state["_traj_count"] = int(self._traj_count.value)
        return state

    def __setstate__(self, state):
        count = state.pop("_traj_count")
        super().__setstate__(state)
        self._traj_count = mp.Value("i", count if isinstance(count, int) else 0)

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
        next_tensordict.set(self.out_keys[0], tensordict.get(self.out_keys[0]))
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


_EXCLUDED = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool)


class NextObservationDelta(Transform):
    """Stores next observations as low-precision deltas, restored when the data is read.

    In an env, each step writes ``("next", "delta", key) = (next_obs - obs)`` in
    ``delta_dtype``. On data (``forward``, e.g. a replay-buffer transform at sampling),
    ``("next", key)`` is rebuilt as ``obs + delta`` (in ``restore_dtype``, default the
    root entry's dtype) and the delta dropped (``drop_delta``).

    Args:
        in_keys: the observation keys (default: the floating entries of the parent's
            observation spec; required on data).
        delta_dtype: the floating dtype of the stored deltas (default ``float16``).
        restore_dtype: the dtype of the rebuilt entry, or ``"root"``.
        drop_delta: remove the delta once the observation is rebuilt.
        excluded_dtypes: dtypes never compressed (integers, booleans).

    Raises:
        ValueError: a non-floating ``delta_dtype`` or ``restore_dtype``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"obs": torch.tensor([1.0]), "next": {"delta": {"obs": torch.tensor([0.5])}}})
        >>> NextObservationDelta(in_keys=["obs"])(td)["next", "obs"]
        tensor([1.5000])
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | None = None,
        *,
        delta_dtype: torch.dtype = torch.float16,
        restore_dtype: torch.dtype | str = "root",
        drop_delta: bool = True,
        excluded_dtypes: tuple[torch.dtype, ...] = _EXCLUDED,
    ):
        if not delta_dtype.is_floating_point:
            raise ValueError(f"delta_dtype must be a floating-point dtype, got {delta_dtype}.")
        if restore_dtype != "root" and not (
            isinstance(restore_dtype, torch.dtype) and restore_dtype.is_floating_point
        ):
            raise ValueError(
                f"restore_dtype must be a floating-point dtype or 'root', got {restore_dtype!r}."
            )
        super().__init__([] if in_keys is None else in_keys)
        self._auto_keys = in_keys is None
        self.delta_dtype = delta_dtype
        self.restore_dtype = restore_dtype
        self.drop_delta = drop_delta
        self.excluded_dtypes = tuple(excluded_dtypes)

    @property
    def has_step(self) -> bool:
        return True

    def _keys(self) -> list[NestedKey]:
        if not self._auto_keys:
            return self.in_keys
        parent = self.parent
        if parent is None:
            return []
        keys = []
        for key, spec in parent.observation_spec.items(True, True):
            dtype = spec.dtype
            if dtype is None or dtype in self.excluded_dtypes or not dtype.is_floating_point:
                continue
            keys.append(normalize_key(key))
        return keys

    @staticmethod
    def _tuple(key: NestedKey) -> tuple[str, ...]:
        return (key,) if isinstance(key, str) else tuple(key)

    def _step(self, tensordict, next_tensordict):
        for key in self._keys():
            obs = tensordict.get(key, None)
            nxt = next_tensordict.get(key, None)
            if obs is None or nxt is None:
                continue
            # subtract at full precision, cast once
            next_tensordict.set(("delta", *self._tuple(key)), (nxt - obs).to(self.delta_dtype))
        return next_tensordict

    def _reset(self, tensordict, tensordict_reset):
        # a zero delta at reset: the entry is in the observation spec, so every output has it
        for key in self._keys():
            obs = tensordict_reset.get(key, None)
            if obs is not None:
                tensordict_reset.set(
                    ("delta", *self._tuple(key)), torch.zeros_like(obs, dtype=self.delta_dtype)
                )
        return tensordict_reset

    def transform_observation_spec(self, observation_spec):
        for key in self._keys():
            if key in observation_spec.keys(True, True):
                spec = observation_spec[key]
                observation_spec[("delta", *self._tuple(key))] = Unbounded(
                    shape=spec.shape, device=spec.device, dtype=self.delta_dtype
                )
        return observation_spec

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._auto_keys and self.parent is None:
            return tensordict
        for key in self._keys():
            k = self._tuple(key)
            delta_key = ("next", "delta", *k)
            obs = tensordict.get(k, None)
            delta = tensordict.get(delta_key, None)
            if obs is None or delta is None:
                continue
            dtype = obs.dtype if self.restore_dtype == "root" else self.restore_dtype
            tensordict.set(("next", *k), obs.to(dtype) + delta.to(dtype))
            if self.drop_delta:
                tensordict.pop(delta_key)
                sub = tensordict.get(("next", "delta"), None)
                if sub is not None and sub.is_empty():
                    tensordict.pop(("next", "delta"))
        return tensordict

    def _repr_args(self) -> str:
        keys = None if self._auto_keys else self.in_keys
        return f"in_keys={keys}, delta_dtype={self.delta_dtype}"


def _spec_map(value, spec):
    if value is None:
        return spec
    if isinstance(value, TensorSpec):
        return value
    return value(spec)


class ModuleTransform(Transform):
    """Runs a TensorDict module (a ``TensorDictModule``, a policy, ...) as a transform.

    ``in_keys`` / ``out_keys`` are the module's; with ``inverse=True`` the module runs on
    the inverse (action) path instead. Spec changes are given as specs or functions.

    Args:
        module: the module; exclusive with ``module_factory``.
        module_factory: a callable building the module.
        no_grad: run under ``torch.no_grad()``.
        inverse: run on the inverse path.
        device: where the module and its inputs go.
        use_ray_service: not supported here (TorchRL runs the module as a Ray actor).
        actor_name, num_gpus, num_cpus: Ray options, accepted for compatibility.
        observation_spec_transform, action_spec_transform, reward_spec_transform,
        done_spec_transform, state_spec_transform: a spec replacing that spec, or a
            function of it.

    Raises:
        ValueError: both or neither of ``module`` / ``module_factory``.
        NotImplementedError: ``use_ray_service=True``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> t = ModuleTransform(module=TensorDictModule(lambda x: x + 1, ["x"], ["y"]))
        >>> t(TensorDict(x=torch.zeros(2)))["y"]
        tensor([1., 1.])
    """

    def __init__(
        self,
        *,
        module: Any | None = None,
        module_factory: Callable[[], Any] | None = None,
        no_grad: bool = False,
        inverse: bool = False,
        device: torch.device | None = None,
        use_ray_service: bool = False,
        actor_name: str | None = None,
        num_gpus: int | None = None,
        num_cpus: int | None = None,
        observation_spec_transform: TensorSpec | Callable | None = None,
        action_spec_transform: TensorSpec | Callable | None = None,
        reward_spec_transform: TensorSpec | Callable | None = None,
        done_spec_transform: TensorSpec | Callable | None = None,
        state_spec_transform: TensorSpec | Callable | None = None,
    ):
        if module is None and module_factory is None:
            raise ValueError("ModuleTransform needs one of module or module_factory, got neither")
        if module is not None and module_factory is not None:
            raise ValueError("ModuleTransform needs only one of module or module_factory, got both")
        if use_ray_service:
            raise NotImplementedError(
                "ModuleTransform(use_ray_service=True) is not supported: run the module locally"
            )
        super().__init__()
        self.module = module if module is not None else module_factory()
        self._io_device = None
        if device is not None:
            self.module = self.module.to(device)
            self._io_device = torch.device(device)
        self.no_grad = no_grad
        self.inverse = inverse
        self.observation_spec_transform = observation_spec_transform
        self.action_spec_transform = action_spec_transform
        self.reward_spec_transform = reward_spec_transform
        self.done_spec_transform = done_spec_transform
        self.state_spec_transform = state_spec_transform

    @property
    def in_keys(self):
        module = self.__dict__.get("_modules", {}).get("module")
        if module is None:
            return []
        return [] if self.inverse else list(module.in_keys)

    @in_keys.setter
    def in_keys(self, value) -> None:
        if value:
            raise RuntimeError(f"in_keys {value} cannot be set for ModuleTransform")
        self.__dict__["_in_keys"] = []
        self._on_keys_changed()

    @property
    def out_keys(self):
        module = self.__dict__.get("_modules", {}).get("module")
        if module is None:
            return []
        return [] if self.inverse else list(module.out_keys)

    @out_keys.setter
    def out_keys(self, value) -> None:
        if value:
            raise RuntimeError(f"out_keys {value} cannot be set for ModuleTransform")

    @property
    def in_keys_inv(self):
        module = self.__dict__.get("_modules", {}).get("module")
        return list(module.out_keys) if module is not None and self.inverse else []

    @in_keys_inv.setter
    def in_keys_inv(self, value) -> None:
        if value:
            raise RuntimeError(f"in_keys_inv {value} cannot be set for ModuleTransform")
        self.__dict__["_in_keys_inv"] = []
        self._on_keys_changed()

    @property
    def out_keys_inv(self):
        module = self.__dict__.get("_modules", {}).get("module")
        return list(module.in_keys) if module is not None and self.inverse else []

    @out_keys_inv.setter
    def out_keys_inv(self, value) -> None:
        if value:
            raise RuntimeError(f"out_keys_inv {value} cannot be set for ModuleTransform")

    def _on_keys_changed(self) -> None:
        d = self.__dict__
        d["_io_pairs"] = []
        d["_io_pairs_inv"] = []
        self.empty_cache()

    @property
    def has_step(self) -> bool:
        return not self.inverse

    @property
    def has_inverse(self) -> bool:
        return self.inverse

    def _run(self, tensordict):
        with torch.no_grad() if self.no_grad else nullcontext():
            if self._io_device is not None:
                tensordict = tensordict.to(self._io_device)
            return self.module(tensordict)

    def _call(self, next_tensordict):
        if self.inverse:
            return next_tensordict
        return self._run(next_tensordict)

    def _reset(self, tensordict, tensordict_reset):
        return self._call(tensordict_reset)

    def forward(self, tensordict):
        return self._call(tensordict)

    def _inv_call(self, tensordict):
        if not self.inverse:
            return tensordict
        return self._run(tensordict)

    def transform_observation_spec(self, observation_spec):
        return _spec_map(self.observation_spec_transform, observation_spec)

    def transform_reward_spec(self, reward_spec):
        return _spec_map(self.reward_spec_transform, reward_spec)

    def transform_done_spec(self, done_spec):
        return _spec_map(self.done_spec_transform, done_spec)

    def transform_action_spec(self, action_spec):
        return _spec_map(self.action_spec_transform, action_spec)

    def transform_state_spec(self, state_spec):
        return _spec_map(self.state_spec_transform, state_spec)

    def _repr_args(self) -> str:
        return f"module={type(self.module).__name__}, inverse={self.inverse}"
