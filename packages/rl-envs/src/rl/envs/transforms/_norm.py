"""Normalisation transforms: ``ObservationNorm`` (a fixed affine map), ``VecNorm`` and
``VecNormV2`` (running statistics, shareable between processes) and ``RunningMeanStd``.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import os
import tempfile
import uuid
import warnings
from collections.abc import Sequence

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX
    fcntl = None

import torch
from tensordict import MemoryMappedTensor, TensorDict, TensorDictBase
from torch import nn

from rl.core import Bounded, Composite, Unbounded

from ._base import ObservationTransform, Transform, _missing_key_error
from ._spec_utils import NestedKey, normalize_keys

__all__ = ["ObservationNorm", "RunningMeanStd", "VecNorm", "VecNormV2"]

# multiprocessing locks of the spawn context can be shared with forked and with spawned
# workers (a fork-context lock cannot reach a spawned process)
_SPAWN = mp.get_context("spawn")


def _as_float_tensor(value, name: str) -> torch.Tensor | None:
    if value is None:
        return None
    if not isinstance(value, torch.Tensor):
        value = torch.as_tensor(value, dtype=torch.get_default_dtype())
    elif not value.is_floating_point():
        value = value.to(torch.get_default_dtype())
    return value


class ObservationNorm(ObservationTransform):
    """Affine normalisation of observations: ``obs * scale + loc``.

    With ``standard_normal=True`` the map is ``(obs - loc) / scale`` instead, so that
    ``loc`` / ``scale`` are the mean / std of the data. ``init_stats`` estimates them from
    rollouts of the parent env. The inverse map (``inv``, for ``in_keys_inv``) undoes it.

    Args:
        loc: the offset (scalar or tensor broadcastable to the observation).
        scale: the scale; must not contain 0 with ``standard_normal``.
        in_keys: keys to normalise (default ``["observation"]``).
        out_keys: where to write (default ``in_keys``).
        in_keys_inv / out_keys_inv: keys of the inverse map (e.g. to scale actions).
        standard_normal: use ``(obs - loc) / scale``.
        eps: lower bound of the std estimated by ``init_stats``.

    The ``state_dict`` holds ``standard_normal``, ``loc`` and ``scale``; asking for it
    before ``loc`` / ``scale`` exist raises ``ValueError`` (as TorchRL). Loading one into
    a norm without them yet gives it the loaded values.

    Raises:
        ValueError: ``scale`` contains a zero with ``standard_normal``, or only one of ``loc`` /
            ``scale`` is given.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.envs.transforms import ObservationNorm
        >>> t = ObservationNorm(loc=1.0, scale=2.0, in_keys=["observation"])
        >>> t(TensorDict({"observation": torch.tensor([0.0, 1.0])}, []))["observation"]
        tensor([1., 3.])
    """

    _elementwise = True

    invertible = True

    def __init__(
        self,
        loc: float | torch.Tensor | None = None,
        scale: float | torch.Tensor | None = None,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        in_keys_inv: Sequence[NestedKey] | None = None,
        out_keys_inv: Sequence[NestedKey] | None = None,
        standard_normal: bool = False,
        eps: float | None = None,
    ):
        if in_keys is None:
            in_keys = ["observation"]
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        if (loc is None) != (scale is None):
            raise ValueError(
                f"ObservationNorm needs both loc and scale (or neither, then init_stats), "
                f"got loc={loc!r} and scale={scale!r}"
            )
        loc = _as_float_tensor(loc, "loc")
        scale = _as_float_tensor(scale, "scale")
        if standard_normal and scale is not None and bool((scale == 0).any()):
            # ``(obs - loc) / scale``; ``obs * 0 + loc`` (a constant) is a valid map
            raise ValueError(
                f"ObservationNorm scale must be non-zero with standard_normal=True, got scale={scale}"
            )
        self.standard_normal = bool(standard_normal)
        self.eps = eps
        self.register_buffer("loc", loc)
        self.register_buffer("scale", scale)

    @property
    def initialized(self) -> bool:
        return self.loc is not None

    def _check_init(self) -> None:
        if self.loc is None:
            raise RuntimeError(
                "Loc/Scale have not been initialized. Either pass in values in the constructor or call the init_stats method. ObservationNorm has no loc/scale: pass them to the constructor or call "
                "init_stats() first"
            )

    def _apply_transform(self, obs: torch.Tensor) -> torch.Tensor:
        loc = self.loc
        if loc is None:
            self._check_init()
        if self.standard_normal:
            return (obs - loc) / self.scale
        if obs.dtype == loc.dtype:
            return torch.addcmul(loc, obs, self.scale)
        return obs * self.scale + loc

    def _inv_apply_transform(self, state: torch.Tensor) -> torch.Tensor:
        self._check_init()
        if self.standard_normal:
            return state * self.scale + self.loc
        return (state - self.loc) / self.scale

    def _map_bounds(self, spec, fn):
        if isinstance(spec, Bounded):
            a, b = fn(spec.low.to(self.loc.dtype)), fn(spec.high.to(self.loc.dtype))
            low, high = torch.minimum(a, b), torch.maximum(a, b)
            shape = torch.broadcast_shapes(low.shape, spec.shape)
            return Bounded(
                low.expand(shape).clone(),
                high.expand(shape).clone(),
                shape=shape,
                device=spec.device,
                dtype=spec.dtype,
            )
        return Unbounded(shape=spec.shape, device=spec.device, dtype=spec.dtype)

    def _leaf_spec(self, spec, in_key):
        if self.loc is None:
            return Unbounded(shape=spec.shape, device=spec.device, dtype=spec.dtype)
        return self._map_bounds(spec, self._apply_transform)

    def _leaf_spec_inv(self, spec, in_key):
        # the outer spec is the image of the inner one through the forward map
        self._check_init()
        return self._map_bounds(spec, self._apply_transform)

    def init_stats(
        self,
        num_iter: int,
        reduce_dim: int | tuple[int, ...] = 0,
        cat_dim: int | None = None,
        key: NestedKey | None = None,
        keep_dims: tuple[int, ...] | None = None,
    ) -> None:
        """Estimates ``loc`` / ``scale`` from ``num_iter`` random steps of the parent env.

        Args:
            num_iter: number of steps to collect (rollouts are repeated until reached).
            reduce_dim: dims of the collected data ``[*B, T, *F]`` averaged over. For a
                batched env pass e.g. ``(0, 1)``.
            cat_dim: dim along which successive rollouts are concatenated, one of
                ``reduce_dim`` (default: ``reduce_dim`` when it is an int).
            key: the rollout entry the statistics are computed on (needed when there
                are several in_keys; default: the only one).
            keep_dims: reduced dims kept as size-1 dims in ``loc`` / ``scale``.

        Raises:
            ValueError: ``num_iter`` is not positive, or ``cat_dim`` is missing / not in
                ``reduce_dim``.
            RuntimeError: several in_keys and no ``key``, the transform is in no env, an
                ObservationNorm before it has no stats yet, or stats are already set.
        """
        if not isinstance(num_iter, int) or num_iter < 1:
            raise ValueError(f"init_stats num_iter must be a positive int, got {num_iter!r}")
        if cat_dim is None:
            if not isinstance(reduce_dim, int):
                raise ValueError(
                    f"cat_dim must be specified if reduce_dim is not an integer, got reduce_dim={reduce_dim}"
                )
            cat_dim = reduce_dim
        if cat_dim not in ((reduce_dim,) if isinstance(reduce_dim, int) else tuple(reduce_dim)):
            raise ValueError(
                f"cat_dim must be part of or equal to reduce_dim, got cat_dim={cat_dim} and "
                f"reduce_dim={reduce_dim}"
            )
        if self.loc is not None:
            raise RuntimeError(
                "Loc/Scale are already initialized: ObservationNorm loc/scale are already set; init_stats refuses to overwrite them"
            )
        if key is None:
            if len(self.in_keys) != 1:
                raise RuntimeError(
                    "Transform has multiple in_keys but no specific key was passed as an "
                    f"argument: init_stats needs key= among {self.in_keys}"
                )
            key = self.in_keys[0]
        parent = self.parent
        if parent is None:
            raise RuntimeError(
                "Cannot initialize the transform if parent env is not defined: ObservationNorm.init_stats needs the transform to be in a TransformedEnv"
            )
        before = [t for t in parent.transform.modules() if isinstance(t, ObservationNorm)]
        if any(t.loc is None for t in before):
            raise RuntimeError(
                "ObservationNorms need to be initialized in the right order."
                "Trying to initialize an ObservationNorm while a parent ObservationNorm "
                "transform is still uninitialized"
            )
        reduce = (reduce_dim,) if isinstance(reduce_dim, int) else tuple(reduce_dim)
        chunks, collected = [], 0
        steps_dim = len(parent.batch_size)
        while collected < num_iter:
            td = parent.rollout(max_steps=num_iter - collected)
            chunks.append(td.get(key))
            collected += td.shape[steps_dim]
        data = torch.cat(chunks, cat_dim).to(torch.get_default_dtype())
        mean = data.mean(reduce, keepdim=True)
        std = data.std(reduce, keepdim=True)
        eps = self.eps if self.eps is not None else torch.finfo(std.dtype).eps
        std = std.clamp_min(eps)
        keep = set() if keep_dims is None else {d % data.ndim for d in keep_dims}
        squeeze = sorted((d % data.ndim for d in reduce if d % data.ndim not in keep), reverse=True)
        for d in squeeze:
            mean, std = mean.squeeze(d), std.squeeze(d)
        if self.standard_normal:
            self.loc, self.scale = mean, std
        else:
            self.loc, self.scale = -mean / std, 1.0 / std
        self.empty_cache()

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        # TorchRL's loc/scale are lazy buffers until set, and saving one raises
        if self.loc is None:
            raise ValueError(
                "Attempted to use an uninitialized parameter: ObservationNorm("
                f"in_keys={self.in_keys}) has no loc/scale yet; pass them to the constructor "
                "or call init_stats() before state_dict()"
            )
        # ``standard_normal`` is a Python bool here (read on every step) but an entry of
        # the state_dict, as in TorchRL, so that a loaded norm maps the same way
        destination[prefix + "standard_normal"] = torch.tensor(
            self.standard_normal, device=self.loc.device
        )
        super()._save_to_state_dict(destination, prefix, keep_vars)

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        flag_key = prefix + "standard_normal"
        flag = state_dict.get(flag_key)
        if flag is not None:
            if not isinstance(flag, torch.Tensor) or flag.numel() != 1:
                error_msgs.append(f"{flag_key} must be a one-element tensor, got {flag!r}")
            else:
                self.standard_normal = bool(flag)
        elif strict:
            missing_keys.append(flag_key)
        # an uninitialised norm takes the loaded shapes (TorchRL fails here: it copies
        # into its empty lazy buffers)
        for name in ("loc", "scale"):
            if getattr(self, name) is None and prefix + name in state_dict:
                setattr(self, name, torch.empty_like(state_dict[prefix + name]))
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        if flag_key in unexpected_keys:
            unexpected_keys.remove(flag_key)

    def _repr_args(self) -> str:
        if self.loc is None:
            stats = "loc=None, scale=None"
        elif self.loc.numel() == 1 and self.scale.numel() == 1:
            stats = f"loc={self.loc.item():.4f}, scale={self.scale.item():.4f}"
        else:
            stats = f"loc=Tensor{tuple(self.loc.shape)}, scale=Tensor{tuple(self.scale.shape)}"
        return f"{stats}, keys={self.in_keys}"


def _flat(key: NestedKey) -> str:
    return key if isinstance(key, str) else "_".join(key)


_LOCK_KEY = "_lock_id"


class _StatsLock:
    """An inter-process lock (``flock`` on a file named after the statistics' id).

    Every process that holds the same shared statistics derives the same file name from
    the ``_lock_id`` entry, so workers built from a pickled factory (any start method)
    serialise their read-modify-write of the running sums. The file is opened once per
    process: a forked child shares its parent's open file, which ``flock`` would not
    separate.
    """

    def __init__(self, lock_id: int):
        self.path = os.path.join(tempfile.gettempdir(), f"rl_vecnorm_{lock_id:016x}.lock")
        self._fd: int | None = None
        self._pid: int | None = None

    def __getstate__(self):
        return {"path": self.path, "_fd": None, "_pid": None}

    @contextlib.contextmanager
    def held(self):
        if fcntl is None:  # pragma: no cover
            yield
            return
        if self._pid != os.getpid():
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            self._pid = os.getpid()
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)


def _vecnorm_v2_args(args, kwargs) -> dict:
    names = ["in_keys", "out_keys", "shared_td", "lock", "decay", "eps", "shapes"]
    # VecNormV2's own keyword arguments pass through unchanged, as in TorchRL
    v2_names = ["stateful", "shared_data", "reduce_batch_dims"]
    if len(args) > len(names):
        raise TypeError(f"VecNorm takes at most {len(names)} positional arguments, got {len(args)}")
    given = dict(zip(names, args))
    for key, value in kwargs.items():
        if key in given:
            raise TypeError(f"VecNorm got multiple values for argument {key!r}")
        given[key] = value
    unknown = sorted(set(given) - set(names) - set(v2_names))
    if unknown:
        raise TypeError(f"VecNorm got unexpected arguments {unknown}")
    if given.get("shared_td") is not None and given.get("shared_data") is not None:
        raise TypeError("VecNorm got both shared_td and shared_data: pass one of them")
    in_keys = given.pop("in_keys", None)
    if in_keys is None:
        in_keys = ["observation", "reward"]
    out = {"in_keys": in_keys, "out_keys": given.pop("out_keys", None)}
    if given.get("shared_td") is not None:
        out["shared_data"] = given["shared_td"]
    for key in ("lock", "decay", "eps", *v2_names):
        if key in given:
            out[key] = given[key]
    return out


class VecNorm(Transform):
    """Normalises entries with running (exponentially decayed) mean and variance.

    Statistics live in a TensorDict (``sum``, ``ssq`` and ``count`` per key) that can be
    put in shared memory and handed to several envs (e.g. the workers of a
    ``ParallelEnv``) so that they all update and read the same statistics; they are saved
    in ``state_dict`` and restored in place by ``load_state_dict`` (shared memory kept).

    Args:
        in_keys: entries to normalise (default ``["observation", "reward"]``).
        out_keys: where to write (default ``in_keys``).
        shared_td: the statistics TensorDict, typically from
            :meth:`build_td_for_shared_vecnorm`; created lazily when ``None``.
        lock: accepted for TorchRL compatibility (updates of shared statistics are
            serialised by a file lock).
        decay: decay of the running sums (``1.0`` = plain averages).
        eps: lower bound of the std.
        shapes: accepted for TorchRL compatibility (shapes come from the data).
        new_api: ``True`` returns a :class:`VecNormV2` built from the same arguments
            (``shared_td`` becomes ``shared_data``; ``shapes`` is dropped).

    Raises:
        ValueError: ``decay`` outside ``(0, 1]`` or ``eps`` not positive.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.envs.transforms import VecNorm
        >>> t = VecNorm(in_keys=["observation"], decay=1.0)
        >>> td = TensorDict({"observation": torch.tensor([[1.0], [3.0]])}, [2])
        >>> t(td)["observation"].squeeze(-1)
        tensor([-1.,  1.])
    """

    def __new__(cls, *args, new_api: bool | None = None, **kwargs):
        # as TorchRL: ``VecNorm(..., new_api=True)`` builds a VecNormV2
        if new_api and cls is VecNorm:
            return VecNormV2(**_vecnorm_v2_args(args, kwargs))
        return super().__new__(cls)

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        shared_td: TensorDictBase | None = None,
        lock=None,
        decay: float = 0.9999,
        eps: float = 1e-4,
        shapes: Sequence[torch.Size] | None = None,
        new_api: bool | None = None,
    ):
        if in_keys is None:
            in_keys = ["observation", "reward"]
        super().__init__(in_keys, out_keys)
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"VecNorm decay must be in (0, 1], got {decay!r}")
        if not eps > 0:
            raise ValueError(f"VecNorm eps must be positive, got {eps!r}")
        self.decay = decay
        self.eps = eps
        self.frozen = False
        if shared_td is not None:
            for key in self.in_keys:
                for suffix in ("_sum", "_ssq", "_count"):
                    if _flat(key) + suffix not in shared_td.keys():
                        raise KeyError(
                            f"VecNorm shared_td lacks {_flat(key) + suffix!r}; it has keys "
                            f"{sorted(shared_td.keys())} (build it with build_td_for_shared_vecnorm)"
                        )
        self.__dict__["_td"] = shared_td
        self._lock = None
        if shared_td is not None and _LOCK_KEY in shared_td.keys():
            self._lock = _StatsLock(int(shared_td.get(_LOCK_KEY)))

    @property
    def stats(self) -> TensorDictBase | None:
        """The statistics TensorDict (``None`` before the first call)."""
        return self.__dict__["_td"]

    @classmethod
    def build_td_for_shared_vecnorm(
        cls,
        env,
        keys: Sequence[NestedKey] | None = None,
        memmap: bool = True,
        prefix: str | os.PathLike | None = None,
    ) -> TensorDictBase:
        """Zero statistics for ``keys`` of ``env``'s specs, shared between processes.

        Args:
            env: the env whose observation / reward specs give the shapes.
            keys: the keys (default ``["observation", "reward"]``).
            memmap: memory-mapped files (default): they stay shared when the TensorDict
                is pickled to a worker, with any start method (``"spawn"`` included).
                ``False`` gives shared-memory tensors, shared with ``"fork"`` workers only.
            prefix: folder of the memory-mapped files (default: a new temporary folder).
        """
        keys = normalize_keys(["observation", "reward"] if keys is None else keys)
        nb = len(env.batch_size)
        specs = {}
        for comp in (env.full_observation_spec, env.full_reward_spec):
            for k in comp.keys(True, True):
                specs[k if isinstance(k, str) or len(k) > 1 else k[0]] = comp[k]
        data = {}
        for key in keys:
            if key not in specs:
                raise KeyError(
                    f"VecNorm key {key!r} is not in the env's observation/reward specs "
                    f"{sorted(map(str, specs))}"
                )
            shape = specs[key].shape[nb:]
            data[_flat(key) + "_sum"] = torch.zeros(shape)
            data[_flat(key) + "_ssq"] = torch.zeros(shape)
            data[_flat(key) + "_count"] = torch.zeros(())
        # names the inter-process lock that guards the updates (see _StatsLock)
        data[_LOCK_KEY] = torch.randint(1, 2**62, ())
        td = TensorDict(data, batch_size=[])
        if not memmap:
            return td.share_memory_()
        if prefix is None:
            prefix = tempfile.mkdtemp(prefix="rl_vecnorm_")
        return td.memmap_(prefix=prefix)

    def freeze(self) -> VecNorm:
        """Stops updating the statistics (evaluation)."""
        self.frozen = True
        return self

    def unfreeze(self) -> VecNorm:
        self.frozen = False
        return self

    def _stats_for(self, key: NestedKey, value: torch.Tensor, nbatch: int):
        td = self.__dict__["_td"]
        name = _flat(key)
        if td is None or name + "_sum" not in td.keys():
            shape = value.shape[nbatch:]
            new = {
                name + "_sum": torch.zeros(shape, device=value.device),
                name + "_ssq": torch.zeros(shape, device=value.device),
                name + "_count": torch.zeros((), device=value.device),
            }
            if td is None:
                td = TensorDict(new, batch_size=[])
                self.__dict__["_td"] = td
            else:
                td.update(new)
        return td.get(name + "_sum"), td.get(name + "_ssq"), td.get(name + "_count")

    def _normalize(self, key, value: torch.Tensor, nbatch: int) -> torch.Tensor:
        s, ssq, count = self._stats_for(key, value, nbatch)
        with self._lock.held() if self._lock is not None else contextlib.nullcontext():
            if not self.frozen:
                dims = tuple(range(nbatch))
                n = math.prod(value.shape[:nbatch])
                # statistics are data, not part of any graph: a rollout under grad (a
                # policy with parameters acting on a differentiable env) must not chain
                # every later step's autograd history onto them
                with torch.no_grad():
                    x = value.detach().to(s.dtype)
                    s.mul_(self.decay).add_(x.sum(dims) if dims else x)
                    ssq.mul_(self.decay).add_((x * x).sum(dims) if dims else x * x)
                    count.mul_(self.decay).add_(n)
            if self._lock is not None:
                # shared: read a snapshot under the lock, never another worker's half update
                s, ssq, count = s.clone(), ssq.clone(), count.clone()
        mean, std = self._moments(s, ssq, count)
        return ((value - mean) / std).to(value.dtype)

    def _moments(self, s, ssq, count) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and std from the running sums, as TorchRL: ``sqrt(max(var, eps))``."""
        mean = s / count.clamp_min(self.eps)
        var = ssq / count.clamp_min(self.eps) - mean * mean
        return mean, var.clamp_min(self.eps).sqrt().clamp_min(self.eps)

    def _loc_scale(self) -> tuple[TensorDictBase, TensorDictBase]:
        if self.__dict__["_td"] is None:
            raise RuntimeError(
                "VecNorm has no statistics yet: run it on data first. "
                "Make sure the VecNorm has been initialized"
            )
        locs, scales = {}, {}
        for key in self.in_keys:
            s, ssq, count = self._stats_for(key, torch.zeros(()), 0)
            locs[key], scales[key] = self._moments(s, ssq, count)
        return TensorDict(locs, batch_size=[]), TensorDict(scales, batch_size=[])

    @property
    def loc(self) -> TensorDictBase:
        """The running mean of each in_key (read afresh: other processes may update it)."""
        return self._loc_scale()[0]

    @property
    def scale(self) -> TensorDictBase:
        """The running std of each in_key, ``sqrt(max(var, eps))``."""
        return self._loc_scale()[1]

    @property
    def standard_normal(self) -> bool:
        """``loc`` and ``scale`` act as ``(x - loc) / scale`` (always ``True``)."""
        return True

    def denorm(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Maps the normalised ``out_keys`` back to the ``in_keys``: ``x * scale + loc``.

        Args:
            tensordict: data holding normalised entries; out_keys it lacks are skipped.

        Returns:
            A shallow copy of ``tensordict`` with the in_keys written.

        Raises:
            RuntimeError: the transform has seen no data yet.
        """
        if self.__dict__["_td"] is None:
            raise RuntimeError("VecNorm must be initialized before calling denorm.")
        locs, scales = self._loc_scale()
        tensordict = tensordict.copy()
        present = set(tensordict.keys(True, True))
        for in_key, out_key in self._io_pairs:
            if out_key in present:
                value = tensordict.get(out_key)
                tensordict.set(in_key, value * scales.get(in_key) + locs.get(in_key))
        return tensordict

    def clone(self) -> VecNorm:
        """A copy that shares the statistics of this one (as TorchRL's VecNorm clone)."""
        td = self.__dict__["_td"]
        self.__dict__["_td"] = None
        try:
            out = super().clone()
        finally:
            self.__dict__["_td"] = td
        out.__dict__["_td"] = td
        return out

    def frozen_copy(self) -> VecNorm:
        """A frozen copy reading this transform's statistics (which it never updates).

        Raises:
            RuntimeError: the transform has seen no data yet.
        """
        td = self.__dict__["_td"]
        if td is None:
            raise RuntimeError(
                "Make sure the VecNorm has been initialized before creating a frozen copy."
            )
        out = self.clone()
        out.__dict__["_td"] = td.copy()
        return out.freeze()

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        nbatch = next_tensordict.batch_dims
        for in_key, out_key in self._io_pairs:
            value = next_tensordict.get(in_key, None)
            if value is None:
                if self.missing_tolerance:
                    continue
                raise _missing_key_error(self, in_key, next_tensordict)
            next_tensordict.set(out_key, self._normalize(in_key, value, nbatch))
        return next_tensordict

    def _leaf_spec(self, spec, in_key):
        return Unbounded(shape=spec.shape, device=spec.device, dtype=spec.dtype)

    def to_observation_norm(self) -> ObservationNorm | Transform:
        """A frozen :class:`ObservationNorm` (standard_normal) with the current statistics."""
        from ._compose import Compose

        norms = []
        for in_key, out_key in self._io_pairs:
            s, ssq, count = self._stats_for(in_key, torch.zeros(()), 0)
            mean, std = self._moments(s, ssq, count)
            norms.append(
                ObservationNorm(
                    loc=mean.clone(),
                    scale=std.clone(),
                    in_keys=[in_key],
                    out_keys=[out_key],
                    standard_normal=True,
                )
            )
        return norms[0] if len(norms) == 1 else Compose(*norms)

    def get_extra_state(self):
        td = self.__dict__["_td"]
        if td is None:
            warnings.warn(
                "Querying state_dict on an uninitialized VecNorm transform returns no "
                "statistics; loading that state_dict into an initialized VecNorm raises.",
                UserWarning,
                stacklevel=2,
            )
            return None
        # the statistics themselves (no copy), keys flattened with SEP as TorchRL: an
        # EnvCreator hands them to the envs it builds, which then update the same memory
        return td.flatten_keys(self.SEP).to_dict()

    # separator of the flattened statistics keys (TorchRL's: keys may hold dots)
    SEP = "-<.>-"

    def set_extra_state(self, state) -> None:
        td = self.__dict__["_td"]
        if state is None:
            if td is not None:
                raise KeyError(
                    "Could not find a tensordict in the state_dict: it was saved from an "
                    "uninitialized VecNorm and this one holds statistics"
                )
            return
        new = TensorDict(state, batch_size=[])
        if any(self.SEP in k for k in new.keys()):
            new = new.unflatten_keys(self.SEP)
        if td is None:
            # a TensorDict made of shared tensors (an EnvCreator's statistics, a memmap)
            # does not report itself shared: its leaves tell
            leaves = list(new.values(True, True))
            if not all(t.is_shared() or isinstance(t, MemoryMappedTensor) for t in leaves):
                warnings.warn(
                    "VecNorm wasn't initialized and the tensordict is not shared: the loaded "
                    "statistics are put in shared memory now; hand the transform to worker "
                    "processes after load_state_dict, not before.",
                    UserWarning,
                    stacklevel=2,
                )
                new.share_memory_()
            self.__dict__["_td"] = new
        else:
            # in place, so shared-memory statistics stay shared
            for key, value in new.items():
                if key in td.keys() and key != _LOCK_KEY:
                    td.get(key).copy_(value)
                else:
                    td.set(key, value)

    def _repr_args(self) -> str:
        return f"keys={self.in_keys}, decay={self.decay}, eps={self.eps}"


def _tuple(key) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)


class RunningMeanStd(nn.Module):
    """Running mean and variance over batches (parallel Welford / Chan et al. update).

    Args:
        shape: the shape of one sample (default scalar).
        epsilon: the initial count (a prior of ``epsilon`` samples of mean 0, variance 1).

    Examples:
        >>> import torch
        >>> rms = RunningMeanStd(shape=(2,), epsilon=0.0)
        >>> rms.update(torch.tensor([[1.0, 2.0], [3.0, 6.0]]))
        >>> rms.mean, rms.var
        (tensor([2., 4.]), tensor([1., 4.]))
    """

    def __init__(self, shape: tuple = (), epsilon: float = 1e-4):
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float32))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float32))
        self.register_buffer("count", torch.tensor(epsilon, dtype=torch.float32))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Folds the samples ``x`` ``[*N, *shape]`` (flattened over the leading dims) in
        (no autograd history is recorded)."""
        x = x.detach().float()
        x = x.reshape(-1) if self.mean.ndim == 0 else x.reshape(-1, *self.mean.shape)
        n = x.shape[0]
        if n == 0:
            return
        batch_mean = x.mean(0)
        batch_var = x.var(0, unbiased=False) if n > 1 else torch.zeros_like(batch_mean)
        delta = batch_mean - self.mean
        total = self.count + n
        m2 = self.var * self.count + batch_var * n + delta.pow(2) * (self.count * n / total)
        self.mean.copy_(self.mean + delta * (n / total))
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """``(x - mean) / sqrt(var)`` (variance floored at ``1e-8``)."""
        return (x.float() - self.mean) / self.var.clamp_min(1e-8).sqrt()


class VecNormV2(Transform):
    """Normalises entries with exponentially decayed running moments (TorchRL's ``VecNormV2``).

    For each key, ``loc`` (first moment) and ``var`` (second moment) are updated at every
    step by ``lerp(value, 1 - decay)`` (``1 / count`` when ``decay == 1``, a plain
    average), and the output is ``(value - loc') / max(sqrt(var'), eps)`` where ``loc'``
    and ``var' = (var - loc**2)`` are divided by the bias correction ``1 - decay**count``.
    Statistics are element-wise over the whole entry (batch dims included), unless
    ``reduce_batch_dims`` averages the batch first. Reset observations update the
    statistics too.

    Args:
        in_keys: entries to normalise.
        out_keys: where to write (default ``in_keys``).
        lock: a lock guarding updates (default a new ``multiprocessing.Lock``).
        stateful: keep the statistics in the transform (default). With ``False`` they are
            carried in the tensordict, per env and per episode, under
            ``"<prefix>_loc"``, ``"<prefix>_var"`` and ``"<prefix>_count"`` (``prefix`` is
            ``"_vecnorm"``, made unique if the env already has such entries).
        decay: decay of the moments (default ``0.9999``).
        eps: lower bound of the scale (default ``1e-4``).
        shared_data: a TensorDict ``{"loc", "var", "count"}`` of statistics to use.
        reduce_batch_dims: average over the batch dims before updating.

    Raises:
        NotImplementedError: ``stateful=False`` with ``shared_data``.
        RuntimeError: ``loc`` / ``scale`` / :meth:`denorm` before any data.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> t = VecNormV2(in_keys=["obs"], decay=1.0)
        >>> _ = t(TensorDict(obs=torch.tensor([1.0])))
        >>> t(TensorDict(obs=torch.tensor([3.0])))["obs"]
        tensor([1.])
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey],
        out_keys: Sequence[NestedKey] | None = None,
        *,
        lock=None,
        stateful: bool = True,
        decay: float = 0.9999,
        eps: float = 1e-4,
        shared_data: TensorDictBase | None = None,
        reduce_batch_dims: bool = False,
    ) -> None:
        if reduce_batch_dims and not stateful:
            raise RuntimeError("reduce_batch_dims=True and stateful=False are not supported.")
        if not stateful and shared_data is not None:
            raise NotImplementedError(
                "VecNormV2(stateful=False) carries its statistics in the tensordict: "
                "shared_data is not supported"
            )
        super().__init__(in_keys=in_keys, out_keys=out_keys)
        self.stateful = stateful
        self.lock = _SPAWN.Lock() if lock is None else lock
        self.decay = decay
        self.eps = eps
        self.frozen = False
        self.reduce_batch_dims = reduce_batch_dims
        self._cast_int_to_float = False
        self.register_buffer("initialized", torch.zeros((), dtype=torch.bool))
        self._loc = self._var = self._count = None
        if shared_data is not None:
            self._loc = shared_data["loc"]
            self._var = shared_data["var"]
            self._count = shared_data["count"]
            self.initialized.fill_(True)

    @property
    def has_step(self) -> bool:
        return True

    def __getstate__(self):
        state = super().__getstate__()
        state["lock"] = None
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        if self.lock is None:
            self.lock = _SPAWN.Lock()

    def freeze(self) -> VecNormV2:
        """Stops updating the statistics."""
        self.frozen = True
        return self

    def unfreeze(self) -> VecNormV2:
        self.frozen = False
        return self

    def frozen_copy(self) -> VecNormV2:
        """A frozen clone holding a copy of the current statistics."""
        if not self.stateful:
            raise RuntimeError("Cannot create a frozen copy of a stateless VecNormV2.")
        if self._loc is None:
            raise RuntimeError(
                "VecNormV2 has no statistics yet: run it on data before frozen_copy. Make sure the VecNorm has been initialized"
            )
        out = self.clone()
        return out.freeze()

    def clone(self) -> VecNormV2:
        lock, self.lock = self.lock, None
        try:
            out = super().clone()
        finally:
            self.lock = lock
        out.lock = _SPAWN.Lock()
        return out

    # ------------------------------------------------------------- statistics
    @staticmethod
    def _float(x: torch.Tensor) -> torch.Tensor:
        return x if x.is_floating_point() else x.to(torch.get_default_dtype())

    def _init_stats(self, data: TensorDictBase) -> None:
        missing = [k for k in self.in_keys if k not in data.keys(True, True)]
        if missing:
            parent = self.parent
            if parent is None:
                raise KeyError(
                    f"VecNormV2 expected in_keys {missing} in the tensordict; keys present: "
                    f"{sorted(map(str, data.keys(True, True)))}"
                )
            zero = parent.full_observation_spec.zero().update(parent.full_reward_spec.zero())
            data = zero.update(data)
        select = data.select(*self.in_keys, strict=True)
        if self.reduce_batch_dims and select.ndim:
            select = select.apply(self._float).mean(dim=tuple(range(select.ndim)))
        select = select.apply(self._float)
        self._loc = torch.zeros_like(select)
        self._var = torch.zeros_like(select)
        self._count = TensorDict(
            {k: torch.zeros((), dtype=torch.int64) for k in self.in_keys}, batch_size=[]
        )
        self.initialized.fill_(True)

    @torch.no_grad()
    def _update(self, data: TensorDictBase) -> None:
        """Folds ``data`` into the statistics, off any autograd graph (see
        :meth:`VecNorm._normalize`)."""
        nb = data.batch_dims
        for key in data.keys(True, True):
            x = self._float(data.get(key)).detach()
            loc, var, count = self._loc.get(key), self._var.get(key), self._count.get(key)
            if self.reduce_batch_dims and nb:
                n = math.prod(data.batch_size)
                dims = tuple(range(nb))
                mean, sq = x.mean(dims), x.pow(2).mean(dims)
            else:
                n = 1
                mean, sq = x, x.pow(2)
            count.add_(n)
            if self.decay != 1.0:
                weight = 1 - self.decay**n
            else:
                weight = n / int(count)
            loc.lerp_(mean.to(loc.device, loc.dtype), weight)
            var.lerp_(sq.to(var.device, var.dtype), weight)

    def _loc_scale(self, keys=None, loc_only: bool = False):
        keys = self.in_keys if keys is None else keys
        locs, scales = {}, {}
        for key in keys:
            loc = self._loc.get(key)
            count = self._count.get(key)
            if self.decay != 1.0:
                bias = (1 - (count * math.log(self.decay)).exp()).to(loc.dtype)
            else:
                bias = torch.ones((), dtype=loc.dtype)
            locs[key] = loc / bias
            if not loc_only:
                var = (self._var.get(key) - loc.pow(2)) / bias
                scales[key] = var.sqrt().clamp_min(self.eps)
        return locs, scales

    def _normalize(self, data: TensorDictBase, next_tensordict: TensorDictBase) -> None:
        keys = list(data.keys(True, True))
        locs, scales = self._loc_scale(keys)
        pairs = dict(self._io_pairs)
        for key in keys:
            value = self._float(data.get(key)) if self._cast_int_to_float else data.get(key)
            next_tensordict.set(pairs[key], (value - locs[key]) / scales[key])

    # -------------------------------------------------------------- stateless
    @property
    def prefix(self) -> str:
        """Prefix of the statistics entries of a stateless VecNormV2."""
        return self.__dict__.get("_prefix") or "_vecnorm"

    def _stats_keys(self) -> tuple[str, str, str]:
        p = self.prefix
        return f"{p}_loc", f"{p}_var", f"{p}_count"

    def _stateless_init(self, next_tensordict: TensorDictBase):
        present = set(next_tensordict.keys(True, True))
        if all(k in present for k in self.in_keys):
            data = next_tensordict.select(*self.in_keys)
        else:
            parent = self.parent
            if parent is None:
                missing = [k for k in self.in_keys if k not in present]
                raise KeyError(
                    f"VecNormV2 expected in_keys {missing} in the tensordict; keys present: "
                    f"{sorted(map(str, present))}"
                )
            data = parent.full_observation_spec.zero().update(parent.full_reward_spec.zero())
            data = data.update(next_tensordict.select(*[k for k in self.in_keys if k in present]))
            data = data.select(*self.in_keys)
        loc = torch.zeros_like(data.apply(self._float))
        return loc, loc.clone(), torch.zeros_like(data, dtype=torch.int64)

    def _stateless_step(self, tensordict, next_tensordict, keys):
        kloc, kvar, kcount = self._stats_keys()
        loc = tensordict.get(kloc, None) if tensordict is not None else None
        if loc is None:
            loc, var, count = self._stateless_init(next_tensordict)
        else:
            var, count = tensordict.get(kvar), tensordict.get(kcount)
        loc, var, count = loc.clone(), var.clone(), count.clone()
        pairs = dict(self._io_pairs)
        outs = {}
        for key in keys:
            x = self._float(next_tensordict.get(key))
            mean, sq, n = loc.get(key), var.get(key), count.get(key)
            if not self.frozen:
                n = n + 1
                w = 1 - self.decay if self.decay != 1.0 else 1.0 / n.to(mean.dtype)
                # the carried statistics stay off the autograd graph (the output is
                # still differentiable in x)
                stat = x.detach()
                mean, sq = mean.detach().lerp(stat, w), sq.detach().lerp(stat.pow(2), w)
                loc.set(key, mean)
                var.set(key, sq)
                count.set(key, n)
            if self.decay != 1.0:
                bias = (1 - (n * math.log(self.decay)).exp()).to(mean.dtype)
            else:
                bias = 1.0
            scale = ((sq - mean.pow(2)) / bias).sqrt().clamp_min(self.eps)
            outs[pairs[key]] = (x - mean / bias) / scale
        for key, value in outs.items():
            next_tensordict.set(key, value)
        next_tensordict.set(kloc, loc)
        next_tensordict.set(kvar, var)
        next_tensordict.set(kcount, count)
        return next_tensordict

    def _stateless_carry(self, tensordict, next_tensordict):
        """No in_key present (a reward at reset): the statistics are still written, zero
        from the env's specs when the data has none yet, so that every output the specs
        announce is there (TorchRL initialises them the same way)."""
        kloc, kvar, kcount = self._stats_keys()
        source = tensordict if tensordict is not None else next_tensordict
        if source.get(kloc, None) is not None:
            if source is not next_tensordict and next_tensordict.get(kloc, None) is None:
                for key in (kloc, kvar, kcount):
                    next_tensordict.set(key, source.get(key).clone())
            return next_tensordict
        if self.parent is None:
            return next_tensordict
        loc, var, count = self._stateless_init(next_tensordict)
        next_tensordict.set(kloc, loc)
        next_tensordict.set(kvar, var)
        next_tensordict.set(kcount, count)
        return next_tensordict

    def _present_in_keys(self, next_tensordict) -> list:
        """The ``in_keys`` present in ``next_tensordict`` (a KeyError naming the missing
        ones unless ``missing_tolerance``)."""
        present = set(next_tensordict.keys(True, True))
        keys = [k for k in self.in_keys if k in present]
        if len(keys) < len(self.in_keys) and not self.missing_tolerance:
            missing = [k for k in self.in_keys if k not in present]
            raise KeyError(
                f"VecNormV2 expected in_keys {missing} in the tensordict; keys present: "
                f"{sorted(map(str, present))}"
            )
        return keys

    def _step(self, tensordict, next_tensordict):
        if not self.stateful:
            keys = self._present_in_keys(next_tensordict)
            if not keys:
                return self._stateless_carry(tensordict, next_tensordict)
            return self._stateless_step(tensordict, next_tensordict, keys)
        with self.lock:
            if self._loc is None:
                self._init_stats(next_tensordict)
            keys = self._present_in_keys(next_tensordict)
            if not keys:
                return next_tensordict
            data = next_tensordict.select(*keys)
            if not self.frozen:
                self._update(data)
            self._normalize(data, next_tensordict)
        return next_tensordict

    def _reset(self, tensordict, tensordict_reset):
        tol, self.missing_tolerance = self.missing_tolerance, True
        try:
            return self._step(tensordict_reset, tensordict_reset)
        finally:
            self.missing_tolerance = tol

    def _call(self, next_tensordict):
        return self._step(next_tensordict, next_tensordict)

    def forward(self, tensordict):
        return self._call(tensordict)

    def denorm(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Maps normalised ``out_keys`` back to ``in_keys`` (on a shallow copy)."""
        if not self.stateful:
            raise NotImplementedError("denorm is not implemented for stateless VecNormV2.")
        if self._loc is None:
            raise RuntimeError("VecNormV2 must be initialized before calling denorm.")
        tensordict = tensordict.copy()
        locs, scales = self._loc_scale()
        present = set(tensordict.keys(True, True))
        for in_key, out_key in self._io_pairs:
            if out_key in present:
                tensordict.set(in_key, tensordict.get(out_key) * scales[in_key] + locs[in_key])
        return tensordict

    @property
    def loc(self) -> TensorDictBase:
        """The bias-corrected running mean of each key."""
        if not self.stateful:
            raise RuntimeError("loc cannot be computed with stateless vecnorm.")
        if self._loc is None:
            raise RuntimeError("VecNormV2 has no statistics yet")
        return TensorDict(self._loc_scale(loc_only=True)[0], batch_size=[])

    @property
    def scale(self) -> TensorDictBase:
        """The running standard deviation of each key (floored at ``eps``)."""
        if not self.stateful:
            raise RuntimeError("scale cannot be computed with stateless vecnorm.")
        if self._loc is None:
            raise RuntimeError("VecNormV2 has no statistics yet")
        return TensorDict(self._loc_scale()[1], batch_size=[])

    @property
    def standard_normal(self) -> bool:
        return True

    def to_observation_norm(self):
        """An :class:`ObservationNorm` (standard_normal) with the current statistics."""
        if not self.stateful:
            raise NotImplementedError("to_observation_norm needs a stateful VecNormV2")
        from ._compose import Compose

        if self._loc is None:
            raise RuntimeError("VecNormV2 has no statistics yet")
        locs, scales = self._loc_scale()
        norms = [
            ObservationNorm(
                loc=locs[i],
                scale=scales[i],
                in_keys=[i],
                out_keys=[o],
                standard_normal=True,
                eps=self.eps,
            )
            for i, o in self._io_pairs
        ]
        return norms[0] if len(norms) == 1 else Compose(*norms)

    SEP = ".-|-."

    def get_extra_state(self):
        if not self.stateful:
            return {}
        if self._loc is None:
            warnings.warn(
                "Querying state_dict on an uninitialized VecNorm transform returns no "
                "statistics; loading that state_dict into an initialized VecNorm raises.",
                UserWarning,
                stacklevel=2,
            )
            return {}
        td = TensorDict(loc=self._loc, var=self._var, count=self._count)
        return td.flatten_keys(self.SEP).to_dict()

    def set_extra_state(self, state) -> None:
        if not self.stateful:
            return
        if not state:
            if self._loc is None:
                return
            raise RuntimeError(
                "VecNormV2.set_extra_state() called with a void state-dict while the instance "
                "is initialized."
            )
        td = TensorDict(state).unflatten_keys(self.SEP)
        if self._loc is None:
            if not all(v.is_shared() for v in td.values(True, True)):
                warnings.warn(
                    "VecNorm wasn't initialized and the tensordict is not shared: the loaded "
                    "statistics are put in shared memory now; hand the transform to worker "
                    "processes after load_state_dict, not before.",
                    UserWarning,
                    stacklevel=2,
                )
                td.share_memory_()
            self._loc, self._var, self._count = td["loc"], td["var"], td["count"]
        else:
            # in place: statistics shared with other processes stay shared
            self._loc.update_(td["loc"])
            self._var.update_(td["var"])
            self._count.update_(td["count"])
        self.initialized.fill_(True)

    # ------------------------------------------------------------------ specs
    def _leaf_spec(self, spec, in_key):
        dtype = spec.dtype
        if dtype is not None and not dtype.is_floating_point:
            self._cast_int_to_float = True
            dtype = torch.get_default_dtype()
        if isinstance(spec, (Bounded,)) or dtype != spec.dtype:
            return Unbounded(shape=spec.shape, device=spec.device, dtype=dtype)
        return spec.clone()

    def _map_leaves(self, composite: Composite) -> Composite:
        present = set(composite.keys(include_nested=True, leaves_only=True))
        for in_key, out_key in self._io_pairs:
            if in_key in present:
                composite[out_key] = self._leaf_spec(composite[in_key], in_key)
        return composite

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        if self.stateful:
            return super().transform_output_spec(output_spec)
        obs = output_spec["full_observation_spec"]
        if self.__dict__.get("_prefix") is None:
            taken = "_vecnorm_loc" in obs.keys() or "_vecnorm_loc" in output_spec[
                "full_reward_spec"
            ].keys(True)
            self.__dict__["_prefix"] = "_vecnorm" + (uuid.uuid1().hex if taken else "")
        stats = {}
        for name in ("full_observation_spec", "full_reward_spec"):
            comp = output_spec[name]
            leaves = set(comp.keys(True, True))
            for in_key in self.in_keys:
                if in_key in leaves:
                    stats[in_key] = self._leaf_spec(comp[in_key], in_key)
        output_spec = super().transform_output_spec(output_spec)
        obs = output_spec["full_observation_spec"]
        kloc, kvar, kcount = self._stats_keys()
        for key in (kloc, kvar, kcount):
            obs[key] = Composite(shape=obs.shape, device=obs.device)
        for in_key, spec in stats.items():
            obs[(kloc, *_tuple(in_key))] = spec.clone()
            obs[(kvar, *_tuple(in_key))] = spec.clone()
            obs[(kcount, *_tuple(in_key))] = Unbounded(
                shape=spec.shape, device=spec.device, dtype=torch.int64
            )
        return output_spec

    def _repr_args(self) -> str:
        return f"keys={self.in_keys}, decay={self.decay}, eps={self.eps}"
