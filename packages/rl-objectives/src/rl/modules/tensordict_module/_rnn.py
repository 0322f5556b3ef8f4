"""Recurrent policies: LSTMModule and GRUModule, their env primers.

A recurrent module reads an input and its hidden state(s) from the tensordict and writes
its output and the next hidden state under ``"next"``, so that the environment carries the
state to the next step (the keys must be primed by the transform
``make_tensordict_primer()`` returns). ``is_init`` (from an ``InitTracker`` transform)
marks the first step of each trajectory, where the state is reset to zero.

Two modes, chosen by :class:`~rl.modules.set_recurrent_mode` (or
``default_recurrent_mode``):

- step by step (default), for acting: each call is one step, any batch shape;
- recurrent, for training: the last batch dim is time; sequences are cut where
  ``is_init`` is set and each piece starts from the hidden state stored at its first step,
  so the outputs equal those computed step by step during the rollout.

In both modes a stored state is zeroed where ``is_init`` is set (TorchRL zeroes it in the
step mode only and relies on the env's primer having written zeros in the recurrent
mode; the two agree on data from a rollout). The layer is ``module.lstm`` /
``module.gru``, so state dicts carry over from TorchRL.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase, unravel_key_list
from tensordict.nn import TensorDictModuleBase, dispatch
from tensordict.utils import NestedKey
from torch import nn

from rl.core import Unbounded

from ._rnn_layers import GRU, LSTM, recurrent_mode

__all__ = [
    "GRUModule",
    "LSTMModule",
    "canonicalize_rnn_subset",
    "get_env_transforms_from_module",
    "get_primers_from_module",
]

_ENVS_HINT = "make_tensordict_primer() needs rl.envs: pip install rl-envs"


def _import_envs_transforms() -> Any:
    try:
        from rl.envs import transforms
    except ImportError as err:
        raise ImportError(_ENVS_HINT) from err
    return transforms


def _segments(is_init: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Cuts ``[N, T]`` rows into trajectory pieces where ``is_init`` is set.

    Returns, over the ``N * T`` flattened steps: each step's piece and position in it,
    the flat index of each piece's first step, and each piece's length.
    """
    starts = is_init.clone()
    starts[:, 0] = True
    flat = starts.reshape(-1)
    seg_id = flat.long().cumsum(0) - 1
    start_idx = flat.nonzero().squeeze(-1)
    pos = torch.arange(flat.numel(), device=flat.device) - start_idx[seg_id]
    lengths = torch.bincount(seg_id, minlength=start_idx.numel())
    return seg_id, pos, start_idx, lengths


_BACKENDS = ("auto", "pad", "scan", "triton")
_RECOMPUTE = ("none", "full")
_PRECISIONS = ("auto", "fast", "high-prec", "ieee", "tf32", "tf32x3")


@functools.cache
def _onednn_computes(dtype: torch.dtype) -> bool:
    """Whether this CPU's oneDNN has kernels for ``dtype`` (AVX-512 BF16/FP16 or AMX)."""
    if not torch.backends.mkldnn.is_available():
        return False
    if dtype is torch.bfloat16:
        return torch.ops.mkldnn._is_mkldnn_bf16_supported()
    if dtype is torch.float16:
        return torch.ops.mkldnn._is_mkldnn_fp16_supported()
    return True


def _compute_in(device: torch.device, dtype: torch.dtype) -> contextlib.AbstractContextManager:
    """Autocast to ``dtype`` on ``device``; on a CPU whose oneDNN lacks ``dtype``'s kernels,
    with oneDNN off, so ATen's own RNN kernels compute (oneDNN's LSTM primitive fails
    to build there instead of falling back)."""
    autocast = torch.autocast(device.type, dtype=dtype)
    if device.type != "cpu" or _onednn_computes(dtype):
        return autocast
    stack = contextlib.ExitStack()
    stack.enter_context(_onednn_off())
    stack.enter_context(autocast)
    return stack


@contextlib.contextmanager
def _onednn_off():
    # torch.backends.mkldnn.flags() would also reset oneDNN's TF32 flag, which warns
    enabled = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        yield
    finally:
        torch._C._set_mkldnn_enabled(enabled)


def _check_backend(
    backend: str, recompute: str, compute_dtype: torch.dtype, precision: str
) -> None:
    """TorchRL's checks of the recurrent-mode options, with its wording."""
    if backend not in _BACKENDS:
        raise ValueError(
            f"recurrent_backend must be one of 'auto', 'pad', 'scan' or 'triton'. Got {backend}."
        )
    if backend == "triton":
        # rl ships no triton kernels: 'scan' computes the same recurrence on any device
        raise RuntimeError(
            "recurrent_backend='triton' requires the triton package and TorchRL's triton "
            "kernels, which rl does not ship: use recurrent_backend='scan' (a step loop with "
            "resets, any device) or 'pad'"
        )
    if recompute not in _RECOMPUTE:
        raise ValueError(f"recurrent_recompute must be one of 'none' or 'full'. Got {recompute}.")
    if recompute != "none" and backend in ("pad", "auto"):
        raise ValueError(
            "recurrent_recompute is only supported for recurrent_backend 'scan' and 'triton'. "
            "Set recurrent_backend explicitly ('auto' selects 'pad', whose backward keeps "
            "its own activations)."
        )
    if not compute_dtype.is_floating_point:
        raise ValueError(f"recurrent_compute_dtype must be a floating dtype, got {compute_dtype}")
    if precision not in _PRECISIONS:
        raise ValueError(
            f"Invalid recurrent_matmul_precision={precision!r}. Expected one of "
            f"{sorted(_PRECISIONS)}."
        )


def canonicalize_rnn_subset(
    data: TensorDictBase, modules: Sequence[Any], *, inplace: bool = False
) -> TensorDictBase:
    """Makes contiguous only the entries the recurrent ``modules`` read and write (the
    union of their :attr:`~LSTMModule.canonical_keys`); other entries keep their storage.

    Args:
        data: the tensordict.
        modules: :class:`LSTMModule` / :class:`GRUModule` instances.
        inplace: write into ``data`` (and return it) instead of a shallow copy.
    """
    out = data if inplace else data.copy()
    seen = set()
    for module in modules:
        for key in module.canonical_keys:
            key = (key,) if isinstance(key, str) else tuple(key)
            if key in seen:
                continue
            seen.add(key)
            value = out.get(key, None)
            if isinstance(value, torch.Tensor) and not _is_canonical(value):
                out.set(key, value.clone(memory_format=torch.contiguous_format))
    return out


def _is_canonical(value: torch.Tensor) -> bool:
    """Whether ``value`` has the row-major strides of its shape (``is_contiguous`` also
    accepts any stride on a size-1 dim)."""
    stride, expected = value.stride(), 1
    for size, st in zip(reversed(value.shape), reversed(stride)):
        if st != expected:
            return False
        expected *= size
    return True


class _RecurrentModule(TensorDictModuleBase):
    """Shared key handling, modes and sequence cutting of LSTMModule and GRUModule."""

    DEFAULT_IN_KEYS: list[NestedKey]
    DEFAULT_OUT_KEYS: list[NestedKey]
    _python_cls: type[nn.RNNBase]
    _cudnn_cls: type[nn.RNNBase]
    _layer_name: str  # "lstm" or "gru": the attribute (and state_dict prefix) of the layer

    @property
    def rnn(self) -> nn.RNNBase:
        """The recurrent layer (``self.lstm`` or ``self.gru``)."""
        return getattr(self, self._layer_name)

    def _init_keys(
        self,
        in_key: NestedKey | None,
        in_keys: Sequence[NestedKey] | None,
        out_key: NestedKey | None,
        out_keys: Sequence[NestedKey] | None,
    ) -> None:
        name = type(self).__name__
        if (in_key is None) == (in_keys is None):
            raise ValueError(
                f"{name} takes either in_key or in_keys, not both and not neither; got "
                f"in_key={in_key!r}, in_keys={in_keys!r}"
            )
        if (out_key is None) == (out_keys is None):
            raise ValueError(
                f"{name} takes either out_key or out_keys, not both and not neither; got "
                f"out_key={out_key!r}, out_keys={out_keys!r}"
            )
        if in_key is not None:
            in_keys = [in_key, *self.DEFAULT_IN_KEYS]
        if out_key is not None:
            out_keys = [out_key, *self.DEFAULT_OUT_KEYS]
        # a single string is refused (tensordict's TypeError), as in TorchRL
        in_keys = unravel_key_list(in_keys)
        out_keys = unravel_key_list(out_keys)
        n = 1 + self._num_states
        if len(in_keys) == n + 1 and in_keys[-1] == "is_init":
            in_keys = in_keys[:-1]
        if len(in_keys) != n:
            raise ValueError(
                f"{name} expects {n} in_keys (the input and {self._num_states} hidden state(s), "
                f"optionally 'is_init'), got {in_keys}"
            )
        if len(out_keys) != n:
            raise ValueError(
                f"{name} expects {n} out_keys (the output and {self._num_states} next hidden "
                f"state(s)), got {out_keys}"
            )
        self.in_keys = [*in_keys, "is_init"]
        self.out_keys = out_keys

    def _build_rnn(self, rnn: nn.RNNBase | None, python_based: bool, **kwargs: Any) -> None:
        if rnn is not None:
            if not rnn.batch_first:
                raise ValueError(f"the {type(rnn).__name__} given must have batch_first=True")
            if kwargs["input_size"] is not None or kwargs["hidden_size"] is not None:
                raise ValueError(
                    "pass either a recurrent layer or input_size/hidden_size, not both"
                )
        else:
            if not kwargs["batch_first"]:
                raise ValueError(f"{type(self).__name__} needs batch_first=True")
            if not kwargs["hidden_size"]:
                raise ValueError(f"{type(self).__name__} needs hidden_size")
            cls = self._python_cls if python_based else self._cudnn_cls
            rnn = cls(**kwargs)
        if rnn.bidirectional:
            raise ValueError(
                f"{type(self).__name__} does not support bidirectional layers: a policy only "
                "sees the past"
            )
        setattr(self, self._layer_name, rnn)

    def _init_backend(
        self, backend: str, compute_dtype: torch.dtype, recompute: str, precision: str
    ) -> None:
        _check_backend(backend, recompute, compute_dtype, precision)
        self.recurrent_backend = backend
        self.recurrent_compute_dtype = compute_dtype
        self.recurrent_recompute = recompute
        self.recurrent_matmul_precision = precision

    @property
    def canonical_keys(self) -> list[NestedKey]:
        """The entries whose memory layout the module cares about: its in and out keys."""
        return [*self.in_keys, *self.out_keys]

    def canonicalize(self, data: TensorDictBase, *, inplace: bool = False) -> TensorDictBase:
        """``data`` with the module's :attr:`canonical_keys` made contiguous (row-major),
        the other entries untouched; a shallow copy unless ``inplace``."""
        return canonicalize_rnn_subset(data, [self], inplace=inplace)

    # ------------------------------------------------------------------ modes
    @property
    def recurrent_mode(self) -> bool:
        """Whether calls process sequences (see :class:`~rl.modules.set_recurrent_mode`)."""
        mode = recurrent_mode()
        return bool(self._recurrent_mode) if mode is None else mode

    @recurrent_mode.setter
    def recurrent_mode(self, value: bool) -> None:
        raise RuntimeError(
            "recurrent_mode cannot be set on a module: use the set_recurrent_mode context "
            "manager or the default_recurrent_mode argument"
        )

    def set_recurrent_mode(self, mode: bool = True) -> None:
        """Removed in TorchRL 0.8: raises, pointing to the context manager."""
        raise RuntimeError(
            f"{type(self).__name__}.set_recurrent_mode() was removed: wrap the calls in "
            "`with rl.modules.set_recurrent_mode(True):` or pass default_recurrent_mode=True"
        )

    def make_python_based(self) -> _RecurrentModule:
        """Switches (in place) to the Python recurrence, keeping the parameters."""
        return self._switch(self._python_cls)

    def make_cudnn_based(self) -> _RecurrentModule:
        """Switches (in place) to torch's (cuDNN) recurrence, keeping the parameters."""
        return self._switch(self._cudnn_cls)

    def _switch(self, cls: type[nn.RNNBase]) -> _RecurrentModule:
        if type(self.rnn) is cls:
            return self
        old = self.rnn
        kwargs = dict(
            input_size=old.input_size,
            hidden_size=old.hidden_size,
            num_layers=old.num_layers,
            bias=old.bias,
            dropout=old.dropout,
            batch_first=True,
        )
        if getattr(old, "proj_size", 0):
            kwargs["proj_size"] = old.proj_size
        param = next(old.parameters())
        new = cls(**kwargs, device=param.device, dtype=param.dtype)
        new.load_state_dict(old.state_dict())
        new.train(old.training)
        setattr(self, self._layer_name, new)
        return self

    # ------------------------------------------------------------------ primers
    def _state_shapes(self) -> list[tuple[int, int]]:
        raise NotImplementedError

    def make_tensordict_primer(self) -> Any:
        """The ``TensorDictPrimer`` that adds zero hidden states to the env's reset output.

        Requires ``rl-envs``. Append it to the env: ``TransformedEnv(env,
        Compose(InitTracker(), module.make_tensordict_primer()))``.

        Raises:
            RuntimeError: if the out_keys are not ``("next", <in_key>)`` of the state keys.
            ImportError: if rl-envs is not installed.
        """
        state_in = self.in_keys[1 : 1 + self._num_states]
        state_out = self.out_keys[1:]
        for key_in, key_out in zip(state_in, state_out):
            key_in_t = key_in if isinstance(key_in, tuple) else (key_in,)
            if key_out != ("next", *key_in_t):
                raise RuntimeError(
                    "make_tensordict_primer needs the next hidden states written at "
                    f"('next', <in_key>); got in_keys={self.in_keys} and out_keys={self.out_keys}"
                )
        transforms = _import_envs_transforms()
        specs = {
            key: Unbounded(shape=shape)
            for key, shape in zip(state_in, self._state_shapes(), strict=True)
        }
        return transforms.TensorDictPrimer(specs)

    # ------------------------------------------------------------------ running
    def _call_rnn(
        self, x: torch.Tensor, hx: list[torch.Tensor], lengths: torch.Tensor | None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        hx_arg = tuple(hx) if self._num_states > 1 else hx[0]
        if lengths is None:
            y, hn = self.rnn(x, hx_arg)
        elif isinstance(self.rnn, self._python_cls):
            steps = torch.arange(x.shape[1], device=x.device)
            y, hn = self.rnn(x, hx_arg, mask=steps < lengths.unsqueeze(-1))
        else:
            packed = nn.utils.rnn.pack_padded_sequence(
                x, lengths.cpu(), batch_first=True, enforce_sorted=False
            )
            y, hn = self.rnn(packed, hx_arg)
            y, _ = nn.utils.rnn.pad_packed_sequence(y, batch_first=True, total_length=x.shape[1])
        return y, list(hn) if self._num_states > 1 else [hn]

    def _scan(
        self, x: torch.Tensor, states: list[torch.Tensor], is_init: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The ``"scan"`` backend: one step at a time over ``[n, T]``, the state replaced
        by the stored one where a trajectory starts; the same outputs as the ``"pad"``
        backend (the next states at each trajectory's last step, zeros elsewhere).
        ``recurrent_recompute="full"`` recomputes the steps in the backward pass instead
        of keeping their activations."""
        if self.recurrent_recompute == "full" and torch.is_grad_enabled():
            flat = torch.utils.checkpoint.checkpoint(
                self._scan_steps, x, is_init, *states, use_reentrant=False
            )
        else:
            flat = self._scan_steps(x, is_init, *states)
        return flat[0], list(flat[1:])

    def _scan_steps(self, x: torch.Tensor, is_init: torch.Tensor, *states: torch.Tensor):
        n, steps = is_init.shape
        ends = torch.ones_like(is_init)
        ends[:, :-1] = is_init[:, 1:]  # a step is a trajectory's last where the next starts
        hx = [s[:, 0].transpose(0, 1) for s in states]  # [layers, n, H]
        dtype = self.recurrent_compute_dtype
        cast = dtype != x.dtype
        ys, outs = [], [[] for _ in states]
        for t in range(steps):
            if t:
                start = is_init[:, t].view(1, n, 1)
                hx = [torch.where(start, s[:, t].transpose(0, 1), h) for s, h in zip(states, hx)]
            xt = x[:, t : t + 1]
            if cast:
                with _compute_in(x.device, dtype):
                    y, hx = self._call_rnn(xt, [h.contiguous() for h in hx], None)
                y, hx = y.to(x.dtype), [h.to(x.dtype) for h in hx]
            else:
                y, hx = self._call_rnn(xt, [h.contiguous() for h in hx], None)
            ys.append(y)
            end = ends[:, t].view(n, 1, 1)
            for out, h in zip(outs, hx):
                out.append(h.transpose(0, 1).masked_fill(~end, 0.0))
        return (torch.cat(ys, 1), *[torch.stack(out, 1) for out in outs])

    def _read(self, tensordict: TensorDictBase, key: NestedKey) -> torch.Tensor:
        value = tensordict.get(key, None)
        if value is None:
            hint = " (add an InitTracker transform to the env)" if key == "is_init" else ""
            raise KeyError(
                f"{type(self).__name__} reads the key {key!r}{hint}, which is not in the input "
                f"tensordict. Keys present: {[str(k) for k in tensordict.keys(True, True)]}"
            )
        return value

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        recurrent = self.recurrent_mode
        batch = tensordict.batch_size
        if recurrent and len(batch) == 0:
            raise ValueError(
                f"{type(self).__name__} in recurrent mode needs a tensordict with a time dim "
                "(its last batch dim), got batch_size=()"
            )
        steps = batch[-1] if recurrent else 1
        n = batch.numel() // steps if steps else 0
        x = self._read(tensordict, self.in_keys[0])
        x = x.reshape(n, steps, *x.shape[len(batch) :])
        # TorchRL accepts a float is_init too (its BurnInTransform example passes one)
        is_init = self._read(tensordict, "is_init").reshape(n, steps).bool()
        shapes = self._state_shapes()
        states = [tensordict.get(key, None) for key in self.in_keys[1 : 1 + self._num_states]]
        if all(s is None for s in states):
            states = [x.new_zeros(n, steps, *shape) for shape in shapes]
        elif any(s is None for s in states):
            missing = [k for k, s in zip(self.in_keys[1:], states) if s is None]
            raise KeyError(f"{type(self).__name__} got some hidden states but not {missing}")
        else:
            states = [s.reshape(n, steps, *shape) for s, shape in zip(states, shapes)]
        # a new trajectory starts from a zero state
        reset = is_init.reshape(n, steps, 1, 1)
        states = [s.masked_fill(reset, 0.0) for s in states]
        if not recurrent or not bool(is_init[:, 1:].any()):
            hx = [s[:, 0].transpose(0, 1).contiguous() for s in states]
            y, hn = self._call_rnn(x, hx, None)
            out_states = []
            for h, shape in zip(hn, shapes):
                last = h.transpose(0, 1).unsqueeze(1)
                if steps > 1:  # the next state is written at the last step only
                    last = torch.cat([last.new_zeros(n, steps - 1, *shape), last], 1)
                out_states.append(last)
        elif self.recurrent_backend == "scan":
            y, out_states = self._scan(x, states, is_init)
        else:
            seg_id, pos, start_idx, lengths = _segments(is_init)
            flat_x = x.reshape(n * steps, *x.shape[2:])
            padded = flat_x.new_zeros(start_idx.numel(), int(lengths.max()), *x.shape[2:])
            padded[seg_id, pos] = flat_x
            hx = [
                s.reshape(n * steps, *shape)[start_idx].transpose(0, 1).contiguous()
                for s, shape in zip(states, shapes)
            ]
            y, hn = self._call_rnn(padded, hx, lengths)
            y = y[seg_id, pos].reshape(n, steps, -1)
            end_idx = start_idx + lengths - 1
            out_states = []
            for h, shape in zip(hn, shapes):
                out = h.new_zeros(n * steps, *shape)
                out[end_idx] = h.transpose(0, 1)
                out_states.append(out.reshape(n, steps, *shape))
        tensordict.set(self.out_keys[0], y.reshape(*batch, y.shape[-1]))
        for key, value, shape in zip(self.out_keys[1:], out_states, shapes):
            tensordict.set(key, value.reshape(*batch, *shape))
        return tensordict


class LSTMModule(_RecurrentModule):
    """An LSTM policy layer reading and writing its hidden states in the tensordict.

    Args:
        input_size: input features.
        hidden_size: hidden features.
        num_layers: stacked layers. Defaults to ``1``.
        bias: use biases. Defaults to ``True``.
        batch_first: must be ``True`` (time is the last batch dim of a tensordict).
        dropout: dropout between layers. Defaults to ``0``.
        proj_size: projection size of the hidden state, as in ``torch.nn.LSTM``. Defaults to ``0``.
        bidirectional: must be ``False``.
        python_based: use the Python recurrence (:class:`~rl.modules.LSTM`, traceable by
            ``vmap``/``compile``) instead of ``torch.nn.LSTM``. Defaults to ``False``.
        recurrent_backend: how the recurrent mode runs sequences cut by ``is_init``:
            ``"pad"`` (default; the pieces padded into one batch, one call of the layer),
            ``"scan"`` (one step at a time, the state replaced where a trajectory starts;
            the same values), ``"auto"`` (``"pad"``). ``"triton"`` raises: rl ships no
            triton kernels.
        recurrent_compute_dtype: the dtype the ``"scan"`` steps compute in (under
            ``torch.autocast``). Defaults to ``torch.float32``.
        recurrent_recompute: ``"full"`` recomputes the ``"scan"`` steps in the backward
            pass (activation checkpointing) instead of keeping them. Defaults to
            ``"none"``.
        recurrent_matmul_precision: the matmul precision of TorchRL's triton kernels
            (validated; as TorchRL's other backends, ``"pad"`` and ``"scan"`` run at
            torch's own matmul precision, so it has no effect in rl).

    Keyword Args:
        in_key: the input key; the states are then read at ``"recurrent_state_h"`` and
            ``"recurrent_state_c"``.
        in_keys: ``[input, h, c]`` (``"is_init"`` is always read too).
        out_key: the output key; the next states are then written at
            ``("next", "recurrent_state_h")`` and ``("next", "recurrent_state_c")``.
        out_keys: ``[output, next_h, next_c]``.
        device: where the layer lives.
        lstm: an existing ``batch_first`` LSTM to use instead of building one.
        default_recurrent_mode: the mode outside of ``set_recurrent_mode``. Defaults to
            step-by-step.

    The hidden states have shape ``[*batch, num_layers, hidden_size]``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.modules import LSTMModule, set_recurrent_mode
        >>> lstm = LSTMModule(input_size=3, hidden_size=8, in_key="obs", out_key="features")
        >>> td = TensorDict(
        ...     obs=torch.randn(4, 3), is_init=torch.ones(4, 1, dtype=torch.bool), batch_size=[4]
        ... )
        >>> td = lstm(td)
        >>> td["features"].shape, td["next", "recurrent_state_h"].shape
        (torch.Size([4, 8]), torch.Size([4, 1, 8]))
        >>> seq = TensorDict(
        ...     obs=torch.randn(4, 10, 3), is_init=torch.zeros(4, 10, 1, dtype=torch.bool),
        ...     batch_size=[4, 10],
        ... )
        >>> with set_recurrent_mode(True):
        ...     lstm(seq)["features"].shape
        torch.Size([4, 10, 8])
    """

    DEFAULT_IN_KEYS = ["recurrent_state_h", "recurrent_state_c"]
    DEFAULT_OUT_KEYS = [("next", "recurrent_state_h"), ("next", "recurrent_state_c")]
    _num_states = 2
    _layer_name = "lstm"
    _python_cls = LSTM
    _cudnn_cls = nn.LSTM

    def __init__(
        self,
        input_size: int | None = None,
        hidden_size: int | None = None,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = True,
        dropout: float = 0,
        proj_size: int = 0,
        bidirectional: bool = False,
        python_based: bool = False,
        recurrent_backend: str = "pad",
        recurrent_compute_dtype: torch.dtype = torch.float32,
        recurrent_recompute: str = "none",
        recurrent_matmul_precision: str = "auto",
        *,
        in_key: NestedKey | None = None,
        in_keys: Sequence[NestedKey] | None = None,
        out_key: NestedKey | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        device: torch.device | str | None = None,
        lstm: nn.LSTM | None = None,
        default_recurrent_mode: bool | None = None,
    ):
        super().__init__()
        self._init_backend(
            recurrent_backend,
            recurrent_compute_dtype,
            recurrent_recompute,
            recurrent_matmul_precision,
        )
        kwargs = dict(
            input_size=input_size,
            hidden_size=hidden_size,
            num_layers=num_layers,
            bias=bias,
            batch_first=batch_first,
            dropout=dropout,
            bidirectional=bidirectional,
            device=device,
        )
        if proj_size:
            kwargs["proj_size"] = proj_size
        self._build_rnn(lstm, python_based, **kwargs)
        self._init_keys(in_key, in_keys, out_key, out_keys)
        self._recurrent_mode = default_recurrent_mode

    def _state_shapes(self) -> list[tuple[int, int]]:
        lstm = self.rnn
        h_size = lstm.proj_size if getattr(lstm, "proj_size", 0) else lstm.hidden_size
        return [(lstm.num_layers, h_size), (lstm.num_layers, lstm.hidden_size)]


class GRUModule(_RecurrentModule):
    """A GRU policy layer reading and writing its hidden state in the tensordict.

    Same arguments as :class:`LSTMModule`, with one state: ``in_key`` reads it at
    ``"recurrent_state"`` and ``out_key`` writes it at ``("next", "recurrent_state")``;
    ``gru`` passes an existing layer.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.modules import GRUModule
        >>> gru = GRUModule(input_size=3, hidden_size=8, in_key="obs", out_key="features")
        >>> td = TensorDict(
        ...     obs=torch.randn(4, 3), is_init=torch.ones(4, 1, dtype=torch.bool), batch_size=[4]
        ... )
        >>> gru(td)["next", "recurrent_state"].shape
        torch.Size([4, 1, 8])
    """

    DEFAULT_IN_KEYS = ["recurrent_state"]
    DEFAULT_OUT_KEYS = [("next", "recurrent_state")]
    _num_states = 1
    _layer_name = "gru"
    _python_cls = GRU
    _cudnn_cls = nn.GRU

    def __init__(
        self,
        input_size: int | None = None,
        hidden_size: int | None = None,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = True,
        dropout: float = 0,
        bidirectional: bool = False,
        python_based: bool = False,
        recurrent_backend: str = "pad",
        recurrent_compute_dtype: torch.dtype = torch.float32,
        recurrent_recompute: str = "none",
        recurrent_matmul_precision: str = "auto",
        *,
        in_key: NestedKey | None = None,
        in_keys: Sequence[NestedKey] | None = None,
        out_key: NestedKey | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        device: torch.device | str | None = None,
        gru: nn.GRU | None = None,
        default_recurrent_mode: bool | None = None,
    ):
        super().__init__()
        self._init_backend(
            recurrent_backend,
            recurrent_compute_dtype,
            recurrent_recompute,
            recurrent_matmul_precision,
        )
        self._build_rnn(
            gru,
            python_based,
            input_size=input_size,
            hidden_size=hidden_size,
            num_layers=num_layers,
            bias=bias,
            batch_first=batch_first,
            dropout=dropout,
            bidirectional=bidirectional,
            device=device,
        )
        self._init_keys(in_key, in_keys, out_key, out_keys)
        self._recurrent_mode = default_recurrent_mode

    def _state_shapes(self) -> list[tuple[int, int]]:
        return [(self.rnn.num_layers, self.rnn.hidden_size)]


def get_primers_from_module(module: nn.Module, warn: bool = True, strict: bool = True) -> Any:
    """Collects the env primers of every submodule that has ``make_tensordict_primer``.

    Args:
        module: a policy containing recurrent modules.
        warn: warn when no submodule has a primer. Defaults to ``True``.
        strict: let errors of ``make_tensordict_primer`` propagate; with ``False`` they
            are collected into one warning. Defaults to ``True``.

    Returns:
        ``None`` (no primer), the single primer, or a ``Compose`` of them (rl.envs).
    """
    primers = []
    failures = []
    for sub in module.modules():
        make = getattr(sub, "make_tensordict_primer", None)
        if make is None:
            continue
        try:
            primers.append(make())
        except Exception as err:
            if strict:
                raise
            failures.append(f"{type(sub).__name__}: {err}")
    if failures:
        warnings.warn(
            "could not build the primers of: " + "; ".join(failures), UserWarning, stacklevel=2
        )
    if not primers:
        if warn:
            warnings.warn("no primers found in the module", UserWarning, stacklevel=2)
        return None
    if len(primers) == 1:
        return primers[0]
    return _import_envs_transforms().Compose(*primers)


def get_env_transforms_from_module(module: nn.Module, init_key: NestedKey = "is_init") -> Any:
    """The env transforms a policy with recurrent modules needs, ready for ``TransformedEnv``.

    An :class:`~rl.envs.InitTracker` (marks the first step of each trajectory at
    ``init_key``) followed by the primers of :func:`get_primers_from_module` (zero
    hidden states at reset). Requires ``rl-envs``.

    Args:
        module: the policy.
        init_key: the key ``InitTracker`` writes; the recurrent modules read
            ``"is_init"``. Defaults to ``"is_init"``.

    Returns:
        ``Compose(InitTracker, primer(s))`` when the module has primers, else the
        ``InitTracker`` alone.

    Examples:
        >>> from rl.modules import GRUModule, get_env_transforms_from_module
        >>> gru = GRUModule(input_size=4, hidden_size=8, in_key="obs", out_key="features")
        >>> [type(t).__name__ for t in get_env_transforms_from_module(gru)]
        ['InitTracker', 'TensorDictPrimer']
    """
    transforms = _import_envs_transforms()
    primer = get_primers_from_module(module, warn=False)
    tracker = transforms.InitTracker(init_key=init_key)
    if primer is None:
        return tracker
    return transforms.Compose(tracker, primer)
