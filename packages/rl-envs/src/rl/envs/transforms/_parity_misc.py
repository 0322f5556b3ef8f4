"""Utility transforms: empty-spec pruning, finiteness checks, pinned memory, random crops in
time, batch-size changes."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from tensordict import NonTensorData, TensorDictBase, is_tensor_collection

from rl.core import Composite

from ._base import Transform
from ._spec_utils import NestedKey, normalize_key

__all__ = [
    "BatchSizeTransform",
    "FiniteTensorDictCheck",
    "PinMemoryTransform",
    "RandomCropTensorDict",
    "RemoveEmptySpecs",
]


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
