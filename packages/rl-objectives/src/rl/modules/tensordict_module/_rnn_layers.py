"""Python (not cuDNN) LSTM and GRU layers with per-step resets, and the recurrent-mode switch.

``LSTM`` and ``GRU`` hold the same parameters as :class:`torch.nn.LSTM` /
:class:`torch.nn.GRU` (their state dicts are interchangeable) and run the recurrence as a
Python loop over time, which ``torch.vmap`` and ``torch.compile`` can trace. Their
``forward`` also takes a ``mask`` of the valid steps: the state does not move on padded
steps, so padded sequences of different lengths end with their own final state.
"""

from __future__ import annotations

import contextvars
from typing import Any, Literal

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils._contextlib import _DecoratorContextManager

__all__ = ["GRU", "LSTM", "recurrent_mode", "set_recurrent_mode"]

# The mode is per thread (and per asyncio task): a ContextVar. Dynamo cannot trace
# ContextVar.get, so a compiled call reads a plain mirror that every set also writes
# (a compiled region runs in one thread).
_RECURRENT_MODE = contextvars.ContextVar("rl_recurrent_mode", default=None)
_COMPILE_MIRROR: list[bool | None] = [None]


def recurrent_mode() -> bool | None:
    """The mode set by :class:`set_recurrent_mode` in this thread (``None`` outside of it).

    ``True``: recurrent modules read whole sequences (the last batch dim is time);
    ``False``: one step at a time. With ``None``, each module uses its
    ``default_recurrent_mode``. Other threads do not see the mode set here.
    """
    if torch.compiler.is_compiling():
        return _COMPILE_MIRROR[0]
    return _RECURRENT_MODE.get()


def _set_mode(mode: bool | None) -> None:
    _COMPILE_MIRROR[0] = mode
    if not torch.compiler.is_compiling():
        _RECURRENT_MODE.set(mode)


class set_recurrent_mode(_DecoratorContextManager):
    """Context manager (or decorator) setting the mode of every recurrent module.

    Args:
        mode: ``True`` or ``"recurrent"`` to process sequences (training on stored
            trajectories), ``False`` or ``"sequential"`` for one step per call (acting in an
            environment), ``None`` to let each module use its default. Defaults to ``True``.

    Examples:
        >>> from rl.modules import recurrent_mode, set_recurrent_mode
        >>> with set_recurrent_mode(True):
        ...     recurrent_mode()
        True
        >>> recurrent_mode() is None
        True
    """

    def __init__(self, mode: bool | Literal["recurrent", "sequential"] | None = True):
        super().__init__()
        if isinstance(mode, str):
            if mode.lower() not in ("recurrent", "sequential"):
                raise ValueError(
                    f"set_recurrent_mode expects a bool, 'recurrent' or 'sequential', got {mode!r}"
                )
            mode = mode.lower() == "recurrent"
        self.mode = mode

    def clone(self) -> set_recurrent_mode:
        return type(self)(self.mode)

    def __enter__(self) -> None:
        self._prev = recurrent_mode()
        _set_mode(self.mode)

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        _set_mode(self._prev)


def _recur(cell, state: tuple[torch.Tensor, ...], gates_x: torch.Tensor, mask, use_scan: bool):
    """Runs ``cell(gates_x[:, t], *state) -> state`` over time (``gates_x``: ``[B, T, G]``).

    Where ``mask[:, t]`` (``[B, T]`` bool) is ``False`` the state is kept. Returns the
    outputs ``[B, T, H]`` (the first state entry at each step) and the final state.
    ``use_scan`` runs the loop as ``torch._higher_order_ops.scan`` (one traced step).
    """
    if mask is None and not use_scan:  # every step kept: no mask, no select, no copy
        outs = []
        for t in range(gates_x.shape[1]):
            state = tuple(cell(gates_x[:, t], *state))
            outs.append(state[0])
        return torch.stack(outs, 1), state
    if mask is None:
        mask = torch.ones(gates_x.shape[:2], dtype=torch.bool, device=gates_x.device)

    def step(carry, inputs):
        g_t, m_t = inputs
        new = cell(g_t, *carry)
        keep = m_t.unsqueeze(-1)
        new = tuple(torch.where(keep, n, o) for n, o in zip(new, carry))
        return new, new[0].clone()

    if use_scan:
        from torch._higher_order_ops.scan import scan

        final, outs = scan(step, tuple(state), (gates_x.transpose(0, 1), mask.transpose(0, 1)))
        return outs.transpose(0, 1), final
    outs = []
    for t in range(gates_x.shape[1]):
        state, out = step(state, (gates_x[:, t], mask[:, t]))
        outs.append(out)
    return torch.stack(outs, 1), state


def _refuse_bidirectional(name: str, bidirectional: bool) -> None:
    if bidirectional:
        raise ValueError(f"the python-based {name} does not support bidirectional=True")


class LSTM(nn.LSTM):
    """An LSTM written in Python, with the parameters (and state dict) of :class:`torch.nn.LSTM`.

    The recurrence is a Python loop over time (or a ``torch`` scan), which
    ``torch.vmap`` and ``torch.compile`` can trace; ``forward`` also takes a ``mask`` of
    the valid steps. Bidirectional layers are not supported.

    Args:
        input_size: input features.
        hidden_size: hidden (cell) features.
        num_layers: stacked layers. Defaults to ``1``.
        batch_first: inputs and outputs are ``[B, T, F]`` (else ``[T, B, F]``).
            Defaults to ``True``.
        bias: use biases. Defaults to ``True``.
        dropout: dropout on the outputs of each layer but the last, in training.
            Defaults to ``0.0``.
        bidirectional: must be ``False`` (raises ``ValueError`` otherwise).
        proj_size: project ``h`` to this size (``torch.nn.LSTM``'s ``weight_hr``);
            ``h`` then has ``proj_size`` features. Defaults to ``0`` (none).
        device: where the parameters live.
        dtype: the parameters' dtype.
        use_scan: run the time loop as ``torch._higher_order_ops.scan`` instead of a
            Python loop (same values; one traced step under ``torch.compile``).
            Defaults to ``False``.

    Examples:
        >>> import torch
        >>> from rl.modules import LSTM
        >>> lstm = LSTM(3, 5, num_layers=2)
        >>> ref = torch.nn.LSTM(3, 5, num_layers=2, batch_first=True)
        >>> _ = ref.load_state_dict(lstm.state_dict())
        >>> x = torch.randn(4, 7, 3)
        >>> torch.testing.assert_close(lstm(x)[0], ref(x)[0])
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        batch_first: bool = True,
        bias: bool = True,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        use_scan: bool = False,
    ) -> None:
        _refuse_bidirectional("LSTM", bidirectional)
        super().__init__(
            input_size,
            hidden_size,
            num_layers,
            bias=bias,
            batch_first=batch_first,
            dropout=dropout,
            bidirectional=False,
            proj_size=proj_size,
            device=device,
            dtype=dtype,
        )
        self.use_scan = bool(use_scan)

    def forward(  # type: ignore[override]
        self,
        input: torch.Tensor,
        hx: tuple[torch.Tensor, torch.Tensor] | None = None,
        mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Runs the recurrence.

        Args:
            input: ``[B, T, F]`` (``[T, B, F]`` if not ``batch_first``).
            hx: initial ``(h, c)``, ``[num_layers, B, H_out]`` and ``[num_layers, B, H]``
                (zeros when ``None``; ``H_out`` is ``proj_size`` or ``hidden_size``).
            mask: optional boolean ``[B, T]`` (``[T, B]`` if not ``batch_first``) of the
                valid steps; the state is kept unchanged through the others (padding).

        Returns:
            The last layer's outputs (shaped like ``input``) and the final ``(h, c)``.
        """
        if input.dim() != 3:
            raise ValueError(f"LSTM expects a 3-D input, got {input.dim()}-D")
        x = input if self.batch_first else input.transpose(0, 1)
        if mask is not None and not self.batch_first:
            mask = mask.transpose(0, 1)
        batch = x.shape[0]
        h_size = self.proj_size or self.hidden_size
        if hx is None:
            hx = (
                x.new_zeros(self.num_layers, batch, h_size),
                x.new_zeros(self.num_layers, batch, self.hidden_size),
            )
        h_n, c_n = [], []
        for layer in range(self.num_layers):
            w_hh = getattr(self, f"weight_hh_l{layer}")
            b_hh = getattr(self, f"bias_hh_l{layer}", None)
            w_hr = getattr(self, f"weight_hr_l{layer}", None)
            gates_x = F.linear(
                x, getattr(self, f"weight_ih_l{layer}"), getattr(self, f"bias_ih_l{layer}", None)
            )

            def cell(g_x, h, c, w_hh=w_hh, b_hh=b_hh, w_hr=w_hr):
                i, f, g, o = (g_x + F.linear(h, w_hh, b_hh)).chunk(4, -1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
                return (h if w_hr is None else F.linear(h, w_hr)), c

            x, (h, c) = _recur(cell, (hx[0][layer], hx[1][layer]), gates_x, mask, self.use_scan)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, training=True)
            h_n.append(h)
            c_n.append(c)
        out = x if self.batch_first else x.transpose(0, 1)
        return out, (torch.stack(h_n), torch.stack(c_n))


class GRU(nn.GRU):
    """A GRU written in Python, with the parameters (and state dict) of :class:`torch.nn.GRU`.

    As :class:`LSTM`: a Python (or scan) loop over time that ``vmap`` and ``compile``
    trace, a ``mask`` of valid steps in ``forward``, no bidirectional layers.

    Args:
        input_size: input features.
        hidden_size: hidden features.
        num_layers: stacked layers. Defaults to ``1``.
        bias: use biases. Defaults to ``True``.
        batch_first: inputs and outputs are ``[B, T, F]`` (else ``[T, B, F]``).
            Defaults to ``True``.
        dropout: dropout on the outputs of each layer but the last, in training.
            Defaults to ``0.0``.
        bidirectional: must be ``False`` (raises ``ValueError`` otherwise).
        device: where the parameters live.
        dtype: the parameters' dtype.
        use_scan: run the time loop as ``torch._higher_order_ops.scan``. Defaults to
            ``False``.

    Examples:
        >>> import torch
        >>> from rl.modules import GRU
        >>> gru = GRU(3, 5)
        >>> ref = torch.nn.GRU(3, 5, batch_first=True)
        >>> _ = ref.load_state_dict(gru.state_dict())
        >>> x = torch.randn(4, 7, 3)
        >>> torch.testing.assert_close(gru(x)[0], ref(x)[0])
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = True,
        dropout: float = 0.0,
        bidirectional: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        use_scan: bool = False,
    ) -> None:
        _refuse_bidirectional("GRU", bidirectional)
        super().__init__(
            input_size,
            hidden_size,
            num_layers,
            bias=bias,
            batch_first=batch_first,
            dropout=dropout,
            bidirectional=False,
            device=device,
            dtype=dtype,
        )
        self.use_scan = bool(use_scan)

    def forward(  # type: ignore[override]
        self,
        input: torch.Tensor,
        hx: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Runs the recurrence (see :meth:`LSTM.forward`; ``hx`` is ``[num_layers, B, H]``)."""
        if input.dim() != 3:
            raise ValueError(f"GRU expects a 3-D input, got {input.dim()}-D")
        x = input if self.batch_first else input.transpose(0, 1)
        if mask is not None and not self.batch_first:
            mask = mask.transpose(0, 1)
        if hx is None:
            hx = x.new_zeros(self.num_layers, x.shape[0], self.hidden_size)
        h_n = []
        for layer in range(self.num_layers):
            w_hh = getattr(self, f"weight_hh_l{layer}")
            b_hh = getattr(self, f"bias_hh_l{layer}", None)
            gates_x = F.linear(
                x, getattr(self, f"weight_ih_l{layer}"), getattr(self, f"bias_ih_l{layer}", None)
            )

            def cell(g_x, h, w_hh=w_hh, b_hh=b_hh):
                x_r, x_z, x_n = g_x.chunk(3, -1)
                h_r, h_z, h_n_ = F.linear(h, w_hh, b_hh).chunk(3, -1)
                r = torch.sigmoid(x_r + h_r)
                z = torch.sigmoid(x_z + h_z)
                n = torch.tanh(x_n + r * h_n_)
                return ((1 - z) * n + z * h,)

            x, (h,) = _recur(cell, (hx[layer],), gates_x, mask, self.use_scan)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, training=True)
            h_n.append(h)
        out = x if self.batch_first else x.transpose(0, 1)
        return out, torch.stack(h_n)
