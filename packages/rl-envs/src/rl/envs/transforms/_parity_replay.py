"""Replay-buffer transforms: recurrent burn-in, next-state rebuild, policy-staleness filter.

These transforms work on stored / sampled data rather than inside an env: a replay
buffer calls ``transform.inv(data)`` when data is written (``extend``) and
``transform(data)`` when a batch is sampled.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Sequence

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from ._base import Transform
from ._spec_utils import NestedKey, normalize_key

__all__ = [
    "BurnInTransform",
    "NextStateReconstructor",
    "PolicyAgeFilter",
]

_logger = logging.getLogger(__name__)


def _under_next(key: NestedKey) -> tuple[str, ...]:
    return ("next", *key) if isinstance(key, tuple) else ("next", key)


class BurnInTransform(Transform):
    """Burns in the recurrent state of sampled sequences (a replay-buffer transform).

    Runs ``modules`` (recurrent ``TensorDictModule`` s, e.g. an ``LSTMModule`` in
    recurrent mode) without gradient on the first ``burn_in`` time steps of each sampled
    ``[B, T]`` sequence and returns the remaining ``[B, T - burn_in]`` steps, whose first
    step holds the burnt-in state (the modules' ``("next", key)`` output at the last
    burn-in step) under each of ``out_keys``. The input is left unchanged.

    Args:
        modules: the module(s) to burn in with, applied in order.
        burn_in: the number of time steps to burn in (``0``: data returned as is).
        out_keys: the recurrent-state keys to update (default: every ``key`` whose
            ``("next", key)`` is an output of a module).

    Raises:
        ValueError: a module is not a ``TensorDictModuleBase``.
        RuntimeError: the transform is used inside an env.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.modules import GRUModule  # doctest: +SKIP
        >>> gru = GRUModule(input_size=10, hidden_size=10, in_keys=["observation", "hidden"],
        ...     out_keys=["intermediate", ("next", "hidden")], default_recurrent_mode=True)  # doctest: +SKIP
        >>> t = BurnInTransform(modules=[gru], burn_in=5)  # doctest: +SKIP
        >>> td = TensorDict({"observation": torch.randn(2, 10, 10),
        ...     "hidden": torch.randn(2, 10, 1, 10), "is_init": torch.zeros(2, 10, 1, dtype=torch.bool)},
        ...     batch_size=[2, 10])  # doctest: +SKIP
        >>> t(td).shape  # doctest: +SKIP
        torch.Size([2, 5])
    """

    _ENV_ERR = "BurnInTransform can only be appended to a ReplayBuffer"

    def __init__(
        self,
        modules: Sequence[TensorDictModuleBase] | TensorDictModuleBase,
        burn_in: int,
        out_keys: Sequence[NestedKey] | None = None,
    ) -> None:
        if not isinstance(modules, Sequence):
            modules = [modules]
        for module in modules:
            if not isinstance(module, TensorDictModuleBase):
                raise ValueError(
                    f"All modules must be TensorDictModules, but a {type(module)} was provided."
                )
        if isinstance(burn_in, bool) or not isinstance(burn_in, int) or burn_in < 0:
            raise ValueError(f"BurnInTransform burn_in must be an int >= 0, got {burn_in!r}")
        in_keys: list[NestedKey] = []
        for module in modules:
            for key in module.in_keys:
                key = normalize_key(key)
                if key not in in_keys:
                    in_keys.append(key)
        keys: list[NestedKey] = []
        if out_keys is None:
            for module in modules:
                for key in module.out_keys:
                    key = normalize_key(key)
                    if isinstance(key, tuple) and key[0] == "next":
                        key = normalize_key(key[1:])
                        if key not in keys:
                            keys.append(key)
        else:
            for key in out_keys:
                key = normalize_key(key)
                if isinstance(key, tuple) and key[0] == "next":
                    key = normalize_key(key[1:])
                    warnings.warn(
                        f"The 'next' key is not needed in the BurnInTransform `out_key` {key} and "
                        "will be ignored. This transform already assumes that `out_keys` will be "
                        "retrieved from the next time step of the burnt-in data.",
                        stacklevel=2,
                    )
                if key not in keys:
                    keys.append(key)
        # in_keys and out_keys differ in number: kept out of the base class's key pairs
        super().__init__()
        self.__dict__["_burn_in_keys"] = (in_keys, keys)
        self.modules = list(modules)
        self.burn_in = burn_in

    @property
    def in_keys(self) -> list[NestedKey]:
        keys = self.__dict__.get("_burn_in_keys")
        return [] if keys is None else list(keys[0])

    @in_keys.setter
    def in_keys(self, value) -> None:
        Transform.in_keys.fset(self, value)

    @property
    def out_keys(self) -> list[NestedKey]:
        keys = self.__dict__.get("_burn_in_keys")
        return [] if keys is None else list(keys[1])

    @out_keys.setter
    def out_keys(self, value) -> None:
        Transform.out_keys.fset(self, value)

    @property
    def has_step(self) -> bool:
        return True

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError(self._ENV_ERR)

    def _step(self, tensordict, next_tensordict):
        raise RuntimeError(self._ENV_ERR + ".")

    def _reset(self, tensordict, tensordict_reset):
        raise RuntimeError(self._ENV_ERR + ".")

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.burn_in == 0:
            return tensordict
        if tensordict.ndim < 2:
            raise ValueError(
                f"BurnInTransform expects [B, T, ...] sequences (time second), got batch_size "
                f"{tuple(tensordict.batch_size)}"
            )
        B, T = tensordict.batch_size[:2]
        if T <= self.burn_in:
            raise ValueError(
                f"BurnInTransform burn_in={self.burn_in} needs sequences longer than that, got "
                f"{T} time steps"
            )
        device = tensordict.device
        burn = tensordict[:, : self.burn_in]
        out = tensordict[:, self.burn_in :].copy()
        with torch.no_grad():
            for module in self.modules:
                param = next(iter(module.parameters()), None)
                if param is not None:
                    burn = burn.to(param.device)
                burn = module(burn)
        if device is not None:
            burn = burn.to(device)
        last = burn.get("next")[:, -1]
        for key in self.out_keys:
            state = last.get(key)
            current = out.get(key, None)
            if current is None:
                current = torch.zeros(
                    B, T - self.burn_in, *state.shape[1:], dtype=state.dtype, device=state.device
                )
            else:
                current = current.clone()
            current[:, 0] = state
            out.set(key, current)
        return out

    def _repr_args(self) -> str:
        return f"burn_in={self.burn_in}, in_keys={self.in_keys}, out_keys={self.out_keys}"


class NextStateReconstructor(Transform):
    """Rebuilds ``("next", key)`` of sampled data from the root entry of the next position.

    For data stored without its ``("next", observation)`` entries (they repeat the root
    observation of the following step), ``("next", k)[i]`` becomes ``k[i + 1]`` when
    position ``i + 1`` of the flat ``[B]`` sample is the next step of the same trajectory,
    and ``fill_value`` otherwise. Position ``i + 1`` is the next step unless the trajectory
    ids differ (``traj_key``), ``done_key`` is set at ``i``, or (with ``step_count_key``)
    the step counts are not consecutive.

    Args:
        keys: the root keys to rebuild under ``"next"`` (default ``("observation",)``).

    Keyword Args:
        traj_key: the trajectory-id entry (``None``: the sample is one trajectory).
        done_key: the entry ending a trajectory at ``i`` (``None``: not checked).
        step_count_key: a step counter that must increase by one (``None``: not checked).
        fill_value: written where the next step is not in the sample (NaN by default;
            integer entries need an integer).
        strict: raise when a configured marker key is missing (else skip that check).

    Raises:
        ValueError: the sample is not flat (``batch_dims != 1``).
        KeyError: with ``strict=True``, a marker key is missing.
        TypeError: an integer entry with a NaN ``fill_value``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> data = TensorDict({"observation": torch.arange(4.0).unsqueeze(-1),
        ...     ("next", "done"): torch.tensor([[False], [True], [False], [False]]),
        ...     ("collector", "traj_ids"): torch.tensor([0, 0, 1, 1])}, [4])
        >>> NextStateReconstructor()(data)["next", "observation"].squeeze(-1)
        tensor([1., nan, 3., nan])
    """

    def __init__(
        self,
        keys: Sequence[NestedKey] = ("observation",),
        *,
        traj_key: NestedKey | None = ("collector", "traj_ids"),
        done_key: NestedKey | None = ("next", "done"),
        step_count_key: NestedKey | None = None,
        fill_value: float = float("nan"),
        strict: bool = True,
    ) -> None:
        super().__init__()
        if isinstance(keys, str):
            keys = (keys,)
        self.keys = tuple(normalize_key(k) for k in keys)
        self.traj_key = None if traj_key is None else normalize_key(traj_key)
        self.done_key = None if done_key is None else normalize_key(done_key)
        self.step_count_key = None if step_count_key is None else normalize_key(step_count_key)
        self.fill_value = fill_value
        self.strict = strict

    @property
    def has_step(self) -> bool:
        return False

    def _marker(self, td: TensorDictBase, key: NestedKey, what: str, n: int):
        value = td.get(key, None)
        if value is None:
            if self.strict:
                raise KeyError(
                    f"NextStateReconstructor: {what} {key!r} is not present in the sampled "
                    "batch. Pass the corresponding constructor kwarg explicitly (or `None` to "
                    "disable), or `strict=False` to drop the check silently."
                )
            return None
        if value.shape[0] != n:
            raise ValueError(
                f"NextStateReconstructor: marker tensor has leading dim {value.shape[0]} but "
                f"sample batch size is {n}."
            )
        return value if value.ndim == 1 else value.reshape(n, -1)[:, 0]

    def _valid(self, td: TensorDictBase, n: int) -> torch.Tensor:
        valid = torch.zeros(n, dtype=torch.bool, device=td.device)
        valid[:-1] = True
        if self.traj_key is not None:
            traj = self._marker(td, self.traj_key, "trajectory key", n)
            if traj is not None:
                valid[:-1] &= traj[1:] == traj[:-1]
        if self.done_key is not None:
            done = self._marker(td, self.done_key, "done key", n)
            if done is not None:
                valid[:-1] &= ~done[:-1].bool()
        if self.step_count_key is not None:
            count = self._marker(td, self.step_count_key, "step-count key", n)
            if count is not None:
                valid[:-1] &= count[1:] == count[:-1] + 1
        return valid

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if tensordict.batch_dims != 1:
            raise ValueError(
                "NextStateReconstructor expects a flat ``(B,)`` sample. Got "
                f"batch_size={tuple(tensordict.batch_size)}. Reshape or use a "
                "1-d storage / sampler combination."
            )
        n = tensordict.batch_size[0]
        if n < 1:
            return tensordict
        valid = self._valid(tensordict, n)
        for key in self.keys:
            root = tensordict.get(key, None)
            if root is None:
                raise KeyError(
                    f"NextStateReconstructor: root key {key!r} is not in the sample; keys "
                    f"present: {sorted(map(str, tensordict.keys(True, True)))}"
                )
            fill = self.fill_value
            if not root.is_floating_point() and isinstance(fill, float) and math.isnan(fill):
                raise TypeError(
                    f"NextStateReconstructor: root key {key!r} has non-floating dtype "
                    f"{root.dtype}; pass an explicit integer `fill_value` for this key (NaN "
                    "cannot be represented)."
                )
            shifted = torch.cat([root[1:], root[:1]], 0)
            keep = valid.reshape(n, *([1] * (root.ndim - 1)))
            tensordict.set(_under_next(key), torch.where(keep, shifted, root.new_full((), fill)))
        return tensordict

    def _repr_args(self) -> str:
        return f"keys={list(self.keys)}, traj_key={self.traj_key!r}, done_key={self.done_key!r}"


class PolicyAgeFilter(Transform):
    """Drops data whose behaviour-policy version lags the current one by too much.

    Each element's version is read from ``policy_version_key`` (the minimum over the
    element's entries when it holds several, e.g. a trajectory). Elements with
    ``current_version - version > max_policy_lag`` are dropped, both when data is written
    into a replay buffer (``inv``) and when a batch is sampled (``forward``); a sampled
    batch may then be smaller than asked for. Inside an env the transform does nothing.

    Args:
        current_version: the current policy version, or a callable returning it
            (re-read at every call).
        max_policy_lag: the largest accepted lag (``>= 0``).

    Keyword Args:
        policy_version_key: the entry holding each element's version.
        strict: raise when the version entry is missing (else let the data through, with
            a one-time warning).

    Raises:
        ValueError: ``max_policy_lag < 0``.
        KeyError: with ``strict=True``, data without the version entry.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> data = TensorDict({"policy_version": torch.tensor([0, 2, 2, 3])}, [4])
        >>> PolicyAgeFilter(lambda: 3, max_policy_lag=1)(data)["policy_version"]
        tensor([2, 2, 3])
    """

    def __init__(
        self,
        current_version: int | Callable[[], int],
        max_policy_lag: int,
        *,
        policy_version_key: NestedKey = "policy_version",
        strict: bool = False,
    ) -> None:
        super().__init__()
        if not callable(current_version):
            current_version = int(current_version)
        if max_policy_lag < 0:
            raise ValueError(f"max_policy_lag must be non-negative, got {max_policy_lag}.")
        self.current_version = current_version
        self.max_policy_lag = int(max_policy_lag)
        self.policy_version_key = normalize_key(policy_version_key)
        self.strict = bool(strict)
        self._warned_missing_version = False

    @property
    def has_step(self) -> bool:
        return False

    @property
    def has_inverse(self) -> bool:
        return True

    def _current(self) -> int:
        version = self.current_version
        return int(version()) if callable(version) else version

    def _filter(self, tensordict: TensorDictBase) -> TensorDictBase:
        if tensordict.batch_dims < 1 or tensordict.batch_size[0] == 0:
            return tensordict
        version = tensordict.get(self.policy_version_key, None)
        if version is None:
            if self.strict:
                raise KeyError(
                    f"PolicyAgeFilter: {self.policy_version_key!r} is not present in the data. "
                    "Check that the producing service stamps versions and that "
                    "policy_version_key matches, or pass strict=False to let unstamped data "
                    "through."
                )
            if not self._warned_missing_version:
                _logger.warning(
                    "PolicyAgeFilter: no %r entry found; data passes through unfiltered.",
                    self.policy_version_key,
                )
                self._warned_missing_version = True
            return tensordict
        n = tensordict.batch_size[0]
        oldest = version.reshape(n, -1).min(dim=-1).values
        keep = (self._current() - oldest) <= self.max_policy_lag
        if bool(keep.all()):
            return tensordict
        return tensordict[keep]

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._parent_parts() is not None:
            return tensordict
        return self._filter(tensordict)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._parent_parts() is not None:
            return tensordict
        return self._filter(tensordict)

    def _repr_args(self) -> str:
        return (
            f"max_policy_lag={self.max_policy_lag}, policy_version_key={self.policy_version_key!r}"
        )
