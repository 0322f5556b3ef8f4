"""Running normalisation with TorchRL's newer statistics: ``VecNormV2`` and ``RunningMeanStd``."""

from __future__ import annotations

import math
import multiprocessing as mp
import uuid
from collections.abc import Sequence

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from rl.core import Bounded, Composite, Unbounded

from ._base import Transform
from ._spec_utils import NestedKey

__all__ = ["RunningMeanStd", "VecNormV2"]


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

    def update(self, x: torch.Tensor) -> None:
        """Folds the samples ``x`` ``[*N, *shape]`` (flattened over the leading dims) in."""
        x = x.float()
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
        self.lock = mp.Lock() if lock is None else lock
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
            self.lock = mp.Lock()

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
            raise RuntimeError("VecNormV2 has no statistics yet: run it on data before frozen_copy")
        out = self.clone()
        return out.freeze()

    def clone(self) -> VecNormV2:
        lock, self.lock = self.lock, None
        try:
            out = super().clone()
        finally:
            self.lock = lock
        out.lock = mp.Lock()
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

    def _update(self, data: TensorDictBase) -> None:
        nb = data.batch_dims
        for key in data.keys(True, True):
            x = self._float(data.get(key))
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
                mean, sq = mean.lerp(x, w), sq.lerp(x.pow(2), w)
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
                return next_tensordict
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
        from ._norm import ObservationNorm

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
        if self._loc is None:
            return {}
        td = TensorDict(loc=self._loc, var=self._var, count=self._count)
        return td.flatten_keys(self.SEP).to_dict()

    def set_extra_state(self, state) -> None:
        if not state:
            if self._loc is None:
                return
            raise RuntimeError(
                "VecNormV2.set_extra_state got an empty state while the transform holds statistics"
            )
        td = TensorDict(state).unflatten_keys(self.SEP)
        if self._loc is None:
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
