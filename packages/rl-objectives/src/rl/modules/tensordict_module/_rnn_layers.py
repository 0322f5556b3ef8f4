"""Python (not cuDNN) LSTM and GRU layers with per-step resets, and the recurrent-mode switch.

``LSTM`` and ``GRU`` hold the same parameters as :class:`torch.nn.LSTM` /
:class:`torch.nn.GRU` (their state dicts are interchangeable) and run the recurrence as a
Python loop over time, which ``torch.vmap`` and ``torch.compile`` can trace. Their
``forward`` also takes a ``mask`` of the valid steps: the state does not move on padded
steps, so padded sequences of different lengths end with their own final state.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils._contextlib import _DecoratorContextManager

__all__ = ["GRU", "LSTM", "recurrent_mode", "set_recurrent_mode"]

_RECURRENT_MODE: list[bool | None] = [None]


def recurrent_mode() -> bool | None:
    """The mode set by :class:`set_recurrent_mode` (``None`` outside of it).

    ``True``: recurrent modules read whole sequences (the last batch dim is time);
    ``False``: one step at a time. With ``None``, each module uses its
    ``default_recurrent_mode``.
    """
    return _RECURRENT_MODE[0]


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
        self._prev = _RECURRENT_MODE[0]
        _RECURRENT_MODE[0] = self.mode

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        _RECURRENT_MODE[0] = self._prev


def _keep_valid(new: torch.Tensor, old: torch.Tensor, mask: torch.Tensor | None, t: int):
    if mask is None:
        return new
    return torch.where(mask[:, t].reshape(-1, 1), new, old)


def _check_python_based(rnn: nn.RNNBase) -> None:
    if rnn.bidirectional:
        raise ValueError(f"the python-based {type(rnn).__name__} does not support bidirectional")
    if getattr(rnn, "proj_size", 0):
        raise ValueError("the python-based LSTM does not support proj_size")


class LSTM(nn.LSTM):
    """An LSTM written in Python, with the parameters (and state dict) of :class:`torch.nn.LSTM`.

    Same arguments as :class:`torch.nn.LSTM` (``batch_first`` defaults to ``True``);
    bidirectional and ``proj_size`` are not supported.

    Examples:
        >>> import torch
        >>> from rl.modules import LSTM
        >>> lstm = LSTM(3, 5, num_layers=2)
        >>> ref = torch.nn.LSTM(3, 5, num_layers=2, batch_first=True)
        >>> _ = ref.load_state_dict(lstm.state_dict())
        >>> x = torch.randn(4, 7, 3)
        >>> torch.testing.assert_close(lstm(x)[0], ref(x)[0])
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, **kwargs: Any):
        kwargs.setdefault("batch_first", True)
        super().__init__(input_size, hidden_size, num_layers, **kwargs)
        _check_python_based(self)

    def forward(  # type: ignore[override]
        self,
        input: torch.Tensor,
        hx: tuple[torch.Tensor, torch.Tensor] | None = None,
        mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Runs the recurrence.

        Args:
            input: ``[B, T, F]`` (``[T, B, F]`` if not ``batch_first``).
            hx: initial ``(h, c)``, each ``[num_layers, B, H]`` (zeros when ``None``).
            mask: optional boolean ``[B, T]`` of the valid steps; the state is kept
                unchanged through the others (padding).

        Returns:
            The last layer's outputs (shaped like ``input``) and the final ``(h, c)``.
        """
        x = input if self.batch_first else input.transpose(0, 1)
        batch, steps = x.shape[:2]
        if hx is None:
            zeros = x.new_zeros(self.num_layers, batch, self.hidden_size)
            hx = (zeros, zeros)
        h_n, c_n = [], []
        for layer in range(self.num_layers):
            w_ih, w_hh = getattr(self, f"weight_ih_l{layer}"), getattr(self, f"weight_hh_l{layer}")
            gates_x = F.linear(x, w_ih, getattr(self, f"bias_ih_l{layer}", None))
            b_hh = getattr(self, f"bias_hh_l{layer}", None)
            h, c = hx[0][layer], hx[1][layer]
            outs = []
            for t in range(steps):
                gates = gates_x[:, t] + F.linear(h, w_hh, b_hh)
                i, f, g, o = gates.chunk(4, -1)
                c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h_new = torch.sigmoid(o) * torch.tanh(c_new)
                h, c = _keep_valid(h_new, h, mask, t), _keep_valid(c_new, c, mask, t)
                outs.append(h)
            x = torch.stack(outs, 1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, training=True)
            h_n.append(h)
            c_n.append(c)
        out = x if self.batch_first else x.transpose(0, 1)
        return out, (torch.stack(h_n), torch.stack(c_n))


class GRU(nn.GRU):
    """A GRU written in Python, with the parameters (and state dict) of :class:`torch.nn.GRU`.

    Same arguments as :class:`torch.nn.GRU` (``batch_first`` defaults to ``True``);
    bidirectional is not supported.

    Examples:
        >>> import torch
        >>> from rl.modules import GRU
        >>> gru = GRU(3, 5)
        >>> ref = torch.nn.GRU(3, 5, batch_first=True)
        >>> _ = ref.load_state_dict(gru.state_dict())
        >>> x = torch.randn(4, 7, 3)
        >>> torch.testing.assert_close(gru(x)[0], ref(x)[0])
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, **kwargs: Any):
        kwargs.setdefault("batch_first", True)
        super().__init__(input_size, hidden_size, num_layers, **kwargs)
        _check_python_based(self)

    def forward(  # type: ignore[override]
        self,
        input: torch.Tensor,
        hx: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Runs the recurrence (see :meth:`LSTM.forward`; ``hx`` is ``[num_layers, B, H]``)."""
        x = input if self.batch_first else input.transpose(0, 1)
        batch, steps = x.shape[:2]
        if hx is None:
            hx = x.new_zeros(self.num_layers, batch, self.hidden_size)
        h_n = []
        for layer in range(self.num_layers):
            w_ih, w_hh = getattr(self, f"weight_ih_l{layer}"), getattr(self, f"weight_hh_l{layer}")
            gates_x = F.linear(x, w_ih, getattr(self, f"bias_ih_l{layer}", None))
            b_hh = getattr(self, f"bias_hh_l{layer}", None)
            h = hx[layer]
            outs = []
            for t in range(steps):
                x_r, x_z, x_n = gates_x[:, t].chunk(3, -1)
                h_r, h_z, h_n_ = F.linear(h, w_hh, b_hh).chunk(3, -1)
                r = torch.sigmoid(x_r + h_r)
                z = torch.sigmoid(x_z + h_z)
                n = torch.tanh(x_n + r * h_n_)
                h = _keep_valid((1 - z) * n + z * h, h, mask, t)
                outs.append(h)
            x = torch.stack(outs, 1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, training=True)
            h_n.append(h)
        out = x if self.batch_first else x.transpose(0, 1)
        return out, torch.stack(h_n)
