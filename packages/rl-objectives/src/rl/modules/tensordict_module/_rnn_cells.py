"""GRU and LSTM cells written in plain PyTorch operations (vmap- and compile-friendly).

They hold the parameters of ``nn.GRUCell`` / ``nn.LSTMCell`` under the same names, so a
state dict moves between the two, and compute the same function; unlike the fused cuDNN
kernels they run under :func:`torch.vmap` and trace through :func:`torch.compile`.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["GRUCell", "LSTMCell"]


def _check_dims(name: str, what: str, t: torch.Tensor) -> None:
    if t.dim() not in (1, 2):
        raise ValueError(f"{name}: expected {what} to be 1D or 2D, got {t.dim()}D instead")


def _check_features(name: str, what: str, t: torch.Tensor, size: int) -> None:
    if t.shape[-1] != size:
        raise ValueError(
            f"{name}: {what} has {t.shape[-1]} features (shape {tuple(t.shape)}), expected {size}"
        )


class LSTMCell(nn.RNNCellBase):
    """One LSTM step, ``nn.LSTMCell``'s function in plain PyTorch operations.

    ``i, f, g, o = W_ih x + b_ih + W_hh h + b_hh`` (split in four), ``c' = sigmoid(f) * c +
    sigmoid(i) * tanh(g)``, ``h' = sigmoid(o) * tanh(c')``. Parameters ``weight_ih``
    ``[4H, I]``, ``weight_hh`` ``[4H, H]``, ``bias_ih``/``bias_hh`` ``[4H]`` as
    ``nn.LSTMCell``.

    Args:
        input_size (int): features of the input ``I``.
        hidden_size (int): features of the hidden and cell states ``H``.
        bias (bool): use the biases. Defaults to ``True``.
        device, dtype: where and how the parameters are created.

    Inputs: ``input`` ``[B, I]`` or ``[I]``, ``hx`` an optional ``(h, c)`` pair ``[B, H]``
    or ``[H]`` (zeros when ``None``). Returns ``(h', c')`` of the same batch shape.

    Raises:
        ValueError: an input or state that is not 1D or 2D, or has the wrong features.

    Examples:
        >>> import torch
        >>> from rl.modules import LSTMCell
        >>> cell = LSTMCell(input_size=10, hidden_size=20)
        >>> x, h, c = torch.randn(2, 10), torch.zeros(2, 20), torch.zeros(2, 20)
        >>> h1, c1 = cell(x, (h, c))
        >>> h1.shape
        torch.Size([2, 20])
        >>> # vectorised over a leading dimension, which nn.LSTMCell does not allow
        >>> h1, c1 = torch.vmap(lambda x, h, c: cell(x, (h, c)))(
        ...     torch.randn(4, 2, 10), torch.zeros(4, 2, 20), torch.zeros(4, 2, 20)
        ... )
        >>> h1.shape
        torch.Size([4, 2, 20])
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(input_size, hidden_size, bias, num_chunks=4, device=device, dtype=dtype)

    def forward(
        self, input: torch.Tensor, hx: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        _check_dims("LSTMCell", "input", input)
        _check_features("LSTMCell", "input", input, self.input_size)
        if hx is not None:
            for idx, value in enumerate(hx):
                _check_dims("LSTMCell", f"hx[{idx}]", value)
                _check_features("LSTMCell", f"hx[{idx}]", value, self.hidden_size)
        batched = input.dim() == 2
        if not batched:
            input = input.unsqueeze(0)
        if hx is None:
            h = c = input.new_zeros(input.shape[0], self.hidden_size)
        else:
            h, c = hx
            if not batched:
                h, c = h.unsqueeze(0), c.unsqueeze(0)
        h, c = self.lstm_cell(input, h, c)
        if not batched:
            h, c = h.squeeze(0), c.squeeze(0)
        return h, c

    def lstm_cell(
        self, x: torch.Tensor, hx: torch.Tensor, cx: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The step on batched tensors ``x`` ``[B, I]``, ``hx``/``cx`` ``[B, H]``."""
        gates = F.linear(x, self.weight_ih, self.bias_ih) + F.linear(
            hx, self.weight_hh, self.bias_hh
        )
        i, f, g, o = gates.chunk(4, -1)
        cy = f.sigmoid() * cx + i.sigmoid() * g.tanh()
        hy = o.sigmoid() * cy.tanh()
        return hy, cy


class GRUCell(nn.RNNCellBase):
    """One GRU step, ``nn.GRUCell``'s function in plain PyTorch operations.

    ``r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)``, ``z = sigmoid(W_iz x + b_iz + W_hz h +
    b_hz)``, ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, ``h' = (1 - z) * n + z * h``.
    Parameters ``weight_ih`` ``[3H, I]``, ``weight_hh`` ``[3H, H]``, ``bias_ih``/``bias_hh``
    ``[3H]`` as ``nn.GRUCell``.

    Args:
        input_size (int): features of the input ``I``.
        hidden_size (int): features of the hidden state ``H``.
        bias (bool): use the biases. Defaults to ``True``.
        device, dtype: where and how the parameters are created.

    Inputs: ``input`` ``[B, I]`` or ``[I]``, ``hx`` ``[B, H]`` or ``[H]`` (zeros when
    ``None``). Returns ``h'`` of the same batch shape.

    Raises:
        ValueError: an input or state that is not 1D or 2D, or has the wrong features.

    Examples:
        >>> import torch
        >>> from rl.modules import GRUCell
        >>> cell = GRUCell(input_size=10, hidden_size=20)
        >>> cell(torch.randn(2, 10), torch.zeros(2, 20)).shape
        torch.Size([2, 20])
        >>> torch.vmap(cell)(torch.randn(4, 2, 10), torch.zeros(4, 2, 20)).shape
        torch.Size([4, 2, 20])
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(input_size, hidden_size, bias, num_chunks=3, device=device, dtype=dtype)

    def forward(self, input: torch.Tensor, hx: torch.Tensor | None = None) -> torch.Tensor:
        _check_dims("GRUCell", "input", input)
        _check_features("GRUCell", "input", input, self.input_size)
        if hx is not None:
            _check_dims("GRUCell", "hidden", hx)
            _check_features("GRUCell", "hidden", hx, self.hidden_size)
        batched = input.dim() == 2
        if not batched:
            input = input.unsqueeze(0)
        if hx is None:
            hx = input.new_zeros(input.shape[0], self.hidden_size)
        elif not batched:
            hx = hx.unsqueeze(0)
        out = self.gru_cell(input, hx)
        return out if batched else out.squeeze(0)

    def gru_cell(self, x: torch.Tensor, hx: torch.Tensor) -> torch.Tensor:
        """The step on batched tensors ``x`` ``[B, I]``, ``hx`` ``[B, H]``."""
        i_r, i_z, i_n = F.linear(x, self.weight_ih, self.bias_ih).chunk(3, -1)
        h_r, h_z, h_n = F.linear(hx, self.weight_hh, self.bias_hh).chunk(3, -1)
        r = (i_r + h_r).sigmoid()
        z = (i_z + h_z).sigmoid()
        n = (i_n + r * h_n).tanh()
        return n + z * (hx - n)
