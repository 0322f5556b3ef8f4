"""Shape transforms: flatten, unsqueeze, squeeze, permute and expand entries; change the
batch size of the data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from tensordict import TensorDictBase

from rl.core import Bounded, Composite

from ._base import ObservationTransform, Transform, _missing_key_error
from ._spec_utils import NestedKey, normalize_key, spec_with

__all__ = [
    "BatchSizeTransform",
    "ExpandAs",
    "FlattenObservation",
    "PermuteTransform",
    "SqueezeTransform",
    "UnsqueezeTransform",
]


def _check_negative(dim: int, who: str, allow_positive_dim: bool) -> None:
    if not isinstance(dim, int):
        raise TypeError(f"{who} dim must be an int, got {dim!r}")
    if dim >= 0 and not allow_positive_dim:
        raise ValueError(
            f"{who} dims count from the end of the feature shape: got dim={dim}, expected a "
            "negative int (or pass allow_positive_dim=True)"
        )


class FlattenObservation(ObservationTransform):
    """Flattens dims ``first_dim..last_dim`` (negative, counted from the end) of entries.

    Args:
        first_dim: first dim to flatten (negative).
        last_dim: last dim to flatten (negative, ``>= first_dim``).
        in_keys: keys (default ``["pixels"]``).
        out_keys: where to write (default ``in_keys``).
        allow_positive_dim: accept non-negative dims (counted from the start of the full
            tensor, batch dims included).

    Raises:
        ValueError: positive dims without ``allow_positive_dim``, or ``first_dim > last_dim``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> t = FlattenObservation(-3, -1, in_keys=["pixels"])
        >>> t(TensorDict({"pixels": torch.zeros(4, 3, 8, 8)}, [4]))["pixels"].shape
        torch.Size([4, 192])
    """

    _elementwise = True

    def __init__(
        self,
        first_dim: int,
        last_dim: int,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        allow_positive_dim: bool = False,
    ):
        _check_negative(first_dim, "FlattenObservation", allow_positive_dim)
        _check_negative(last_dim, "FlattenObservation", allow_positive_dim)
        if first_dim > last_dim and (first_dim < 0) == (last_dim < 0):
            raise ValueError(
                f"FlattenObservation needs first_dim <= last_dim, got {first_dim} and {last_dim}"
            )
        super().__init__(["pixels"] if in_keys is None else in_keys, out_keys)
        self.first_dim = first_dim
        self.last_dim = last_dim

    def _apply_transform(self, obs):
        return obs.flatten(self.first_dim, self.last_dim)

    def _leaf_spec(self, spec, in_key):
        shape = torch.zeros(spec.shape, device="meta").flatten(self.first_dim, self.last_dim).shape
        if isinstance(spec, Bounded):
            return spec_with(
                spec,
                shape=shape,
                low=spec.low.flatten(self.first_dim, self.last_dim),
                high=spec.high.flatten(self.first_dim, self.last_dim),
            )
        return spec_with(spec, shape=shape)

    def _repr_args(self) -> str:
        return f"first_dim={self.first_dim}, last_dim={self.last_dim}, keys={self.in_keys}"


class UnsqueezeTransform(Transform):
    """Inserts a size-1 dim at ``dim`` (negative: counted from the end); ``inv`` removes it.

    Args:
        dim: where to insert (negative).
        in_keys / out_keys: forward keys.
        in_keys_inv / out_keys_inv: inverse keys (squeezed before reaching the env).
        allow_positive_dim: accept a non-negative ``dim`` (full-tensor index).

    Raises:
        TypeError: ``dim`` is not given.
        ValueError: non-negative ``dim`` without ``allow_positive_dim``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> t = UnsqueezeTransform(-1, in_keys=["x"])
        >>> t(TensorDict({"x": torch.zeros(3)}, []))["x"].shape
        torch.Size([3, 1])
    """

    _elementwise = True

    invertible = True

    def __init__(
        self,
        dim: int | None = None,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        in_keys_inv: Sequence[NestedKey] | None = None,
        out_keys_inv: Sequence[NestedKey] | None = None,
        allow_positive_dim: bool = False,
    ):
        if dim is None:
            # TorchRL 0.14 also defaults ``dim`` to None and requires it
            raise TypeError(f"dim must be passed to {type(self).__name__} constructor")
        _check_negative(dim, type(self).__name__, allow_positive_dim)
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        self.dim = dim

    def _apply_transform(self, obs):
        return obs.unsqueeze(self.dim)

    def _inv_apply_transform(self, state):
        return state.squeeze(self.dim)

    def _unsqueezed(self, spec):
        like = torch.zeros(spec.shape, device="meta").unsqueeze(self.dim)
        if isinstance(spec, Bounded):
            return spec_with(
                spec,
                shape=like.shape,
                low=spec.low.expand(spec.shape).unsqueeze(self.dim),
                high=spec.high.expand(spec.shape).unsqueeze(self.dim),
            )
        return _reshaped(spec, like.shape)

    def _squeezed(self, spec, key):
        if spec.shape[self.dim] != 1:
            raise ValueError(
                f"{type(self).__name__} cannot squeeze dim {self.dim} of {key!r}: spec shape "
                f"{tuple(spec.shape)} has size {spec.shape[self.dim]} there, expected 1"
            )
        like = torch.zeros(spec.shape, device="meta").squeeze(self.dim)
        if isinstance(spec, Bounded):
            return spec_with(
                spec,
                shape=like.shape,
                low=spec.low.expand(spec.shape).squeeze(self.dim),
                high=spec.high.expand(spec.shape).squeeze(self.dim),
            )
        return _reshaped(spec, like.shape)

    def _leaf_spec(self, spec, in_key):
        return self._unsqueezed(spec)

    def _leaf_spec_inv(self, spec, in_key):
        return self._unsqueezed(spec)

    def _repr_args(self) -> str:
        return f"dim={self.dim}, {super()._repr_args()}"


class SqueezeTransform(UnsqueezeTransform):
    """Removes the size-1 dim at ``dim`` (negative); ``inv`` puts it back.

    Args:
        dim: the dim to remove (negative).
        in_keys / out_keys / in_keys_inv / out_keys_inv: as in :class:`UnsqueezeTransform`.

    Raises:
        TypeError: ``dim`` is not given.
        ValueError: non-negative ``dim``; at spec time, the dim does not have size 1.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> SqueezeTransform(-1, in_keys=["x"])(TensorDict({"x": torch.zeros(3, 1)}, []))["x"].shape
        torch.Size([3])
    """

    def _apply_transform(self, obs):
        return obs.squeeze(self.dim)

    def _inv_apply_transform(self, state):
        return state.unsqueeze(self.dim)

    def _leaf_spec(self, spec, in_key):
        return self._squeezed(spec, in_key)

    def _leaf_spec_inv(self, spec, in_key):
        return self._squeezed(spec, in_key)


def _reshaped(spec, shape):
    """A leaf spec with a new shape of the same number of elements (discrete kept)."""
    if hasattr(spec, "n") and not isinstance(spec, Bounded):
        try:
            return type(spec)(spec.n, shape=shape, device=spec.device, dtype=spec.dtype)
        except TypeError:
            pass
    return spec_with(spec, shape=shape)


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
                "Only tailing dims with negative indices are supported by PermuteTransform: "
                f"dims must be a permutation of {list(range(-len(self.dims), 0))}, got "
                f"{list(dims)}"
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
