"""Per-episode bookkeeping transforms: trajectory ids (TrajCounter) and step timings (Timer)."""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Sequence
from multiprocessing.context import get_spawning_popen

import torch

from rl.core import Bounded, Composite, Unbounded

from ._base import Transform
from ._spec_utils import NestedKey, normalize_key, normalize_keys
from ._utils import sibling_key

__all__ = ["Timer", "TrajCounter"]


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
        self._traj_count = mp.Value("i", 0)
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
            count = mp.Value("i", count)
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
