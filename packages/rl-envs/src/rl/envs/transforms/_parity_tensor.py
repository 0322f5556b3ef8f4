"""Tensor-op transforms: stacking, expanding, permuting, cropping."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from tensordict import TensorDictBase

from rl.core import Bounded, Composite

from ._base import Transform, _missing_key_error
from ._spec_utils import NestedKey, normalize_key, spec_with, tget

__all__ = ["Crop", "ExpandAs", "PermuteTransform", "Stack"]


class Stack(Transform):
    """Stacks several entries into one along a new dim ``dim`` (and unstacks on ``inv``).

    Args:
        in_keys: the entries to stack (same shape and dtype).
        out_key: the stacked entry.
        in_key_inv: the stacked entry read by ``inv`` (outer side).
        out_keys_inv: the entries ``inv`` unstacks it into (inner side).
        dim: the new dim, negative unless ``allow_positive_dim``.
        allow_positive_dim: accept ``dim >= 0``.
        del_keys: remove the stacked entries (default ``True``).

    Raises:
        ValueError: a non-negative ``dim``, only one of ``in_key_inv`` / ``out_keys_inv``, or
            ``out_key`` among ``in_keys``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"a": torch.zeros(2), "b": torch.ones(2)}, [])
        >>> out = Stack(in_keys=["a", "b"], out_key="ab")(td)
        >>> out["ab"].shape, "a" in out.keys()
        (torch.Size([2, 2]), False)
    """

    invertible = True

    def __init__(
        self,
        in_keys: Sequence[NestedKey],
        out_key: NestedKey,
        in_key_inv: NestedKey | None = None,
        out_keys_inv: Sequence[NestedKey] | None = None,
        dim: int = -1,
        allow_positive_dim: bool = False,
        *,
        del_keys: bool = True,
    ):
        if not allow_positive_dim and dim >= 0:
            raise ValueError(
                f"Stack dim should be negative to work with any batch size, got dim={dim}; "
                "pass allow_positive_dim=True to use a positive dim"
            )
        if in_key_inv is None and out_keys_inv is not None:
            raise ValueError("Stack got out_keys_inv but no in_key_inv")
        if in_key_inv is not None and out_keys_inv is None:
            raise ValueError("Stack got in_key_inv but no out_keys_inv")
        # the inner (env) side holds the separate entries: inv reads the stack (outer)
        super().__init__(
            in_keys=in_keys,
            out_keys=None,
            in_keys_inv=None if out_keys_inv is None else out_keys_inv,
            out_keys_inv=None if out_keys_inv is None else [in_key_inv] * len(out_keys_inv),
        )
        self._out_key = normalize_key(out_key)
        if self._out_key in self.in_keys:
            raise ValueError(f"Stack out_key {self._out_key!r} cannot be one of in_keys")
        self._in_key_inv = None if in_key_inv is None else normalize_key(in_key_inv)
        self._out_keys_inv_list = (
            [] if out_keys_inv is None else [normalize_key(k) for k in out_keys_inv]
        )
        parents = []
        for key in self.in_keys:
            if isinstance(key, tuple):
                for level in range(1, len(key)):
                    p = key[:-level]
                    p = p[0] if len(p) == 1 else p
                    if p not in parents:
                        parents.append(p)
        self._maybe_del_parent_keys = sorted(
            parents, key=lambda k: 1 if isinstance(k, str) else len(k), reverse=True
        )
        self.dim = dim
        self._del_keys = del_keys

    @property
    def out_keys(self) -> list[NestedKey]:
        out = self.__dict__.get("_out_key")
        return list(self._in_keys) if out is None else [out]

    @out_keys.setter
    def out_keys(self, value) -> None:
        self._on_keys_changed()

    def _on_keys_changed(self) -> None:
        d = self.__dict__
        if "_in_keys" not in d or "_in_keys_inv" not in d:
            return
        d["_io_pairs"] = []
        d["_io_pairs_inv"] = list(zip(d["_in_keys_inv"], self.out_keys_inv))
        self.empty_cache()

    @property
    def has_step(self) -> bool:
        return True

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        values = []
        for in_key in self.in_keys:
            value = tget(next_tensordict, in_key)
            if value is not None:
                values.append(value)
            elif not self.missing_tolerance:
                raise _missing_key_error(self, in_key, next_tensordict)
        if not values:
            return next_tensordict
        next_tensordict.set(self._out_key, torch.stack(values, dim=self.dim))
        if self._del_keys:
            next_tensordict.exclude(*self.in_keys, inplace=True)
            for parent in self._maybe_del_parent_keys:
                sub = next_tensordict.get(parent, None)
                if sub is not None and len(sub.keys()) == 0:
                    next_tensordict.exclude(parent, inplace=True)
        return next_tensordict

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._in_key_inv is None:
            return tensordict
        value = tensordict.get(self._in_key_inv, None)
        if value is None:
            return tensordict
        parts = torch.unbind(value, dim=self.dim)
        if len(parts) != len(self._out_keys_inv_list):
            raise ValueError(
                f"Stack inv: {self._in_key_inv!r} has {len(parts)} entries along dim {self.dim}, "
                f"expected {len(self._out_keys_inv_list)} for {self._out_keys_inv_list}"
            )
        for part, key in zip(parts, self._out_keys_inv_list):
            tensordict.set(key, part)
        return tensordict.exclude(self._in_key_inv)

    @property
    def has_inverse(self) -> bool:
        return self._in_key_inv is not None

    def _transform_spec(self, spec: Composite, keys, out_key) -> Composite:
        present = set(spec.keys(True, True))
        found = [k for k in keys if k in present]
        if not found:
            return spec
        spec[out_key] = torch.stack([spec[k] for k in found], dim=self.dim)
        if self._del_keys:
            for k in found:
                del spec[k]
            for parent in self._maybe_del_parent_keys:
                if parent in spec.keys(True) and len(spec[parent].keys()) == 0:
                    del spec[parent]
        return spec

    def transform_observation_spec(self, observation_spec):
        return self._transform_spec(observation_spec, self.in_keys, self._out_key)

    def transform_reward_spec(self, reward_spec):
        return self._transform_spec(reward_spec, self.in_keys, self._out_key)

    def transform_done_spec(self, done_spec):
        return self._transform_spec(done_spec, self.in_keys, self._out_key)

    def transform_action_spec(self, action_spec):
        if self._in_key_inv is None:
            return action_spec
        return self._transform_spec(action_spec, self._out_keys_inv_list, self._in_key_inv)

    def transform_state_spec(self, state_spec):
        if self._in_key_inv is None:
            return state_spec
        return self._transform_spec(state_spec, self._out_keys_inv_list, self._in_key_inv)

    def __repr__(self) -> str:
        return f"Stack(in_keys={self.in_keys}, out_key={self._out_key}, dim={self.dim})"


def _expand_as_right(value: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    if value.ndim > ref.ndim:
        raise RuntimeError(
            f"ExpandAs cannot expand a value of shape {tuple(value.shape)} to the reference "
            f"shape {tuple(ref.shape)}: it has more dims"
        )
    return value.reshape(*value.shape, *((1,) * (ref.ndim - value.ndim))).expand(ref.shape)


class ExpandAs(Transform):
    """Expands ``in_key`` (adding trailing dims) to the shape of ``ref_key``.

    Args:
        in_key: the entry to expand.
        ref_key: the entry whose shape is the target.
        out_key: where to write (default ``in_key``).

    Raises:
        KeyError: ``in_key`` or ``ref_key`` is not in the env's output specs.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"done": torch.ones(1, dtype=torch.bool), "obs": torch.zeros(1, 3)}, [])
        >>> ExpandAs("done", "obs", out_key="done_obs")(td)["done_obs"].shape
        torch.Size([1, 3])
    """

    def __init__(self, in_key: NestedKey, ref_key: NestedKey, out_key: NestedKey | None = None):
        if out_key is None:
            out_key = in_key
        super().__init__(in_keys=[in_key], out_keys=[out_key])
        self.in_key = normalize_key(in_key)
        self.ref_key = normalize_key(ref_key)
        self.out_key = normalize_key(out_key)

    @staticmethod
    def _find_key_spec(output_spec: Composite, key: NestedKey):
        for name in ("full_observation_spec", "full_reward_spec", "full_done_spec"):
            if name in output_spec.keys() and key in output_spec[name].keys(True, True):
                return name, output_spec[name][key]
        raise KeyError(f"ExpandAs key {key!r} was not found in the env's output specs")

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        ref = next_tensordict.get(self.ref_key, None)
        value = next_tensordict.get(self.in_key, None)
        for key, v in ((self.ref_key, ref), (self.in_key, value)):
            if v is None:
                if self.missing_tolerance:
                    return next_tensordict
                raise _missing_key_error(self, key, next_tensordict)
        next_tensordict.set(self.out_key, _expand_as_right(value, ref))
        return next_tensordict

    def _reset(self, tensordict, tensordict_reset):
        tol, self.missing_tolerance = self.missing_tolerance, True
        try:
            tensordict_reset = self._call(tensordict_reset)
        finally:
            self.missing_tolerance = tol
        if self.out_key in tensordict_reset.keys(True, True):
            return tensordict_reset
        value = tensordict_reset.get(self.in_key, None)
        if value is None:
            return tensordict_reset
        parent = self.parent
        ref_spec = None
        if parent is not None:
            try:
                _, ref_spec = self._find_key_spec(parent.output_spec, self.ref_key)
            except KeyError:
                ref_spec = None
        if ref_spec is None:
            tensordict_reset.set(self.out_key, value)
        else:
            ref = torch.empty(ref_spec.shape, dtype=value.dtype, device=value.device)
            tensordict_reset.set(self.out_key, _expand_as_right(value, ref))
        return tensordict_reset

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        output_spec = output_spec.clone()
        _, ref_spec = self._find_key_spec(output_spec, self.ref_key)
        name, in_spec = self._find_key_spec(output_spec, self.in_key)
        if name == "full_done_spec" and self.out_key != self.in_key:
            name = "full_observation_spec"
        while len(in_spec.shape) < len(ref_spec.shape):
            in_spec = in_spec.unsqueeze(-1)
        output_spec[name][self.out_key] = in_spec.expand(ref_spec.shape)
        return output_spec

    def _repr_args(self) -> str:
        return f"in_key={self.in_key!r}, ref_key={self.ref_key!r}, out_key={self.out_key!r}"


def _invert_permutation(p: Sequence[int]) -> list[int]:
    n = len(p)
    pos = [d % n for d in p]
    inv = [0] * n
    for j, d in enumerate(pos):
        inv[d] = j - n if p[j] < 0 else j
    return inv


class PermuteTransform(Transform):
    """Permutes the trailing dims of entries (``[..., *dims]``); ``inv`` permutes back.

    Args:
        dims: a permutation of the trailing dims, as negative indices (``[-1, -3, -2]``).
        in_keys: keys of the forward map (default none).
        out_keys: where to write (default ``in_keys``).
        in_keys_inv: keys written by ``inv`` (default none).
        out_keys_inv: keys read by ``inv`` (default ``in_keys_inv``).

    Raises:
        ValueError: ``dims`` is not a permutation of ``-len(dims) .. -1``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> t = PermuteTransform((-1, -3, -2), in_keys=["pixels"])
        >>> t(TensorDict(pixels=torch.zeros(2, 3, 4, 5), batch_size=[2]))["pixels"].shape
        torch.Size([2, 5, 3, 4])
    """

    def __init__(self, dims, in_keys=None, out_keys=None, in_keys_inv=None, out_keys_inv=None):
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        self.dims = list(dims)
        if sorted(self.dims) != list(range(-len(self.dims), 0)):
            raise ValueError(
                f"PermuteTransform only permutes trailing dims given as negative indices "
                f"(a permutation of {list(range(-len(self.dims), 0))}), got {list(dims)}"
            )

    @property
    def _elementwise(self) -> bool:  # type: ignore[override]
        return not self._io_pairs_inv

    def _permute(self, x: torch.Tensor, dims) -> torch.Tensor:
        lead = list(range(x.ndim - len(dims)))
        return x.permute(*lead, *dims)

    def _apply_transform(self, obs: torch.Tensor) -> torch.Tensor:
        return self._permute(obs, self.dims)

    def _inv_apply_transform(self, state: torch.Tensor) -> torch.Tensor:
        return self._permute(state, _invert_permutation(self.dims))

    def _spec_permuted(self, spec, dims):
        shape = spec.shape
        new_shape = torch.Size([*shape[: -len(dims)], *[shape[d] for d in dims]])
        if isinstance(spec, Bounded):
            low = self._permute(spec.low.expand(shape), dims)
            high = self._permute(spec.high.expand(shape), dims)
            return spec_with(spec, shape=new_shape, low=low, high=high)
        if new_shape == shape:
            return spec.clone()
        return spec_with(spec, shape=new_shape)

    def _leaf_spec(self, spec, in_key):
        return self._spec_permuted(spec, self.dims)

    def _leaf_spec_inv(self, spec, in_key):
        # outer = inner permuted forward, so that inv (outer -> inner) lands on the inner spec
        return self._spec_permuted(spec, self.dims)

    def _repr_args(self) -> str:
        return f"dims={self.dims}, {super()._repr_args()}"


class Crop(Transform):
    """Crops images ``[..., H, W]`` from ``(top, left)``, as TorchRL's ``Crop``.

    As in TorchRL (which calls ``torchvision.transforms.functional.crop(img, top, left,
    w, h)``), the output has height ``w`` and width ``h``; regions outside the image are
    zero-padded.

    Args:
        w: the first (height) extent of the crop.
        h: the second (width) extent (default ``w``).
        top: first row.
        left: first column.
        in_keys: image keys (default ``["pixels"]``).
        out_keys: where to write (default ``in_keys``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> Crop(2, 3)(TensorDict(pixels=torch.zeros(3, 8, 8)))["pixels"].shape
        torch.Size([3, 2, 3])
    """

    _elementwise = True

    def __init__(
        self,
        w: int,
        h: int | None = None,
        top: int = 0,
        left: int = 0,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
    ):
        super().__init__(["pixels"] if in_keys is None else in_keys, out_keys)
        self.w = int(w)
        self.h = int(h) if h else self.w
        self.top = int(top)
        self.left = int(left)
        if self.w < 1 or self.h < 1:
            raise ValueError(f"Crop sizes must be positive, got w={w} and h={h}")

    def _apply_transform(self, obs: torch.Tensor) -> torch.Tensor:
        if obs.ndim < 2:
            raise ValueError(f"Crop needs an image [..., H, W], got shape {tuple(obs.shape)}")
        H, W = obs.shape[-2:]
        rows, cols = self.w, self.h
        r0, c0 = self.top, self.left
        r1, c1 = r0 + rows, c0 + cols
        pad = (max(0, -c0), max(0, c1 - W), max(0, -r0), max(0, r1 - H))
        out = obs[..., max(r0, 0) : min(r1, H), max(c0, 0) : min(c1, W)]
        if any(pad):
            out = (
                F.pad(out, pad)
                if out.is_floating_point()
                else F.pad(out.float(), pad).to(obs.dtype)
            )
        return out

    def _leaf_spec(self, spec, in_key):
        shape = torch.Size([*spec.shape[:-2], self.w, self.h])
        if isinstance(spec, Bounded):
            low = self._apply_transform(spec.low.expand(spec.shape))
            high = self._apply_transform(spec.high.expand(spec.shape))
            return spec_with(spec, shape=shape, low=low, high=high)
        return spec_with(spec, shape=shape)

    def _repr_args(self) -> str:
        return f"w={self.w}, h={self.h}, top={self.top}, left={self.left}, keys={self.in_keys}"
