"""Replay-buffer transforms: recurrent burn-in, next-state rebuild, policy-staleness filter,
random crops in time and next observations stored as deltas.

These transforms work on stored / sampled data rather than inside an env: a replay
buffer calls ``transform.inv(data)`` when data is written (``extend``) and
``transform(data)`` when a batch is sampled. (The n-step transform is in ``_nstep``.)
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
    "NextObservationDelta",
    "NextStateReconstructor",
    "PolicyAgeFilter",
    "RandomCropTensorDict",
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
                f"Cannot sample trajectories of length {self.sub_seq_len}: RandomCropTensorDict cannot take {self.sub_seq_len} steps along dim {dim} of a "
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
                    f"Cannot sample trajectories of length {self.sub_seq_len}: RandomCropTensorDict cannot take {self.sub_seq_len} steps when the shortest "
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


_EXCLUDED = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool)


class NextObservationDelta(Transform):
    """Stores next observations as low-precision deltas, restored when the data is read.

    In an env, each step writes ``("next", "delta", key) = (next_obs - obs)`` in
    ``delta_dtype``; ``rollout`` and ``step_and_maybe_reset`` then drop the full
    ``("next", key)`` from the stored transition (it was carried to the next root
    first, so the policy reads full-precision observations), as TorchRL does; a plain
    ``step`` keeps it. The specs are unchanged (``fake_tensordict`` shows the delta in
    place of the next observation). On data (``forward``, e.g. a replay-buffer transform at sampling),
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
        >>> from rl.envs import PendulumEnv, TransformedEnv
        >>> r = TransformedEnv(PendulumEnv(), NextObservationDelta()).rollout(3)
        >>> r["next", "delta", "observation"].dtype, ("next", "observation") in r.keys(True)
        (torch.float16, False)
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
    def in_keys(self) -> list[NestedKey]:
        """The observation keys; without ``in_keys`` given, those the parent env's
        observation spec holds in a floating dtype (TorchRL), ``[]`` outside an env."""
        if self.__dict__.get("_auto_keys") and self.__dict__["_container"] is not None:
            return self._keys()
        return self._in_keys

    @in_keys.setter
    def in_keys(self, value) -> None:
        self.__dict__["_auto_keys"] = False
        Transform.in_keys.fset(self, value)

    @property
    def has_step(self) -> bool:
        return True

    def _keys(self) -> list[NestedKey]:
        if not self._auto_keys:
            return self._in_keys
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

    def _post_step_mdp_hooks(self, tensordict, tensordict_):
        # the full ("next", key) lived until step_mdp carried it to the next root: the
        # stored transition keeps the delta only (as TorchRL)
        next_td = tensordict.get("next", None)
        if next_td is not None:
            for key in self._keys():
                k = self._tuple(key)
                if next_td.get(k, None) is not None:
                    next_td.pop(k)
        if tensordict_ is not None and tensordict_.get("delta", None) is not None:
            # the next root holds observations only (the delta is not in the specs); it
            # shares the "delta" sub-tensordict with the transition: exclude, not pop
            tensordict_ = tensordict_.exclude(*[("delta", *self._tuple(k)) for k in self._keys()])
            if tensordict_.get("delta").is_empty():
                tensordict_ = tensordict_.exclude("delta")
        return tensordict, tensordict_

    def _check_batched_worker_compat(self) -> None:
        raise RuntimeError(
            f"{type(self).__name__} cannot live inside a SerialEnv/ParallelEnv worker: the "
            "batched env stores the keys of its specs only, so the delta would never reach "
            "the data. Place the transform outside the batched env, e.g. "
            f"TransformedEnv(ParallelEnv(N, make_env), {type(self).__name__}(...))."
        )

    def transform_fake_tensordict(self, fake_tensordict):
        next_td = fake_tensordict.get("next", None)
        if next_td is not None:
            for key in self._keys():
                k = self._tuple(key)
                leaf = next_td.get(k, None)
                if leaf is not None:
                    next_td.set(("delta", *k), leaf.to(self.delta_dtype))
                    next_td.pop(k)
        return fake_tensordict

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
