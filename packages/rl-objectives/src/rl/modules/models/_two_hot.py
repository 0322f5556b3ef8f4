"""Two-hot categorical regression of scalars on a symexp-spaced support (DreamerV3).

A scalar target ``x`` between two support points ``b[i] <= x < b[i+1]`` is the
distribution with mass ``(b[i+1] - x) / (b[i+1] - b[i])`` on ``i`` and the rest on
``i + 1``; a head predicting logits over the support is trained by cross entropy against
it and read back as the expectation ``sum(softmax(logits) * b)``. The default support is
``symexp(linspace(-20, 20, num_bins))``, dense near zero and wide enough for any return
(Hafner et al., 2023, https://arxiv.org/abs/2301.04104).
"""

from __future__ import annotations

import torch
from torch import nn

from .._value_transforms import symexp

__all__ = [
    "SymExpTwoHot",
    "two_hot_cross_entropy",
    "two_hot_decode",
    "two_hot_encode",
]

_DEFAULT_NUM_BINS = 255
_BIN_RANGE = 20.0


def _default_bins(
    num_bins: int = _DEFAULT_NUM_BINS,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """``symexp`` of ``num_bins`` evenly spaced points of ``[-20, 20]``, exactly symmetric.

    The negative half is computed and mirrored, so ``bins == -bins.flip(0)`` bit for bit
    (and the middle bin of an odd support is exactly ``0``).
    """
    if num_bins < 2:
        raise ValueError(f"num_bins must be at least 2, got {num_bins}.")
    dtype = dtype or torch.get_default_dtype()
    # the device named, else the default one (a ``with torch.device(...)`` block's): given
    # explicitly, since transformers' meta-device model loading leaves torch's device
    # blocks no longer applying to ``torch.linspace`` for the rest of the process
    device = torch.get_default_device() if device is None else device
    half = num_bins // 2
    if num_bins % 2:
        negative = symexp(torch.linspace(-_BIN_RANGE, 0, half + 1, device=device, dtype=dtype))
        return torch.cat((negative, -negative[:-1].flip(0)))
    step = 2 * _BIN_RANGE / (num_bins - 1)
    negative = symexp(-_BIN_RANGE + step * torch.arange(half, device=device, dtype=dtype))
    return torch.cat((negative, -negative.flip(0)))


def _check_bins(bins: torch.Tensor) -> None:
    if bins.ndim != 1 or bins.numel() < 2:
        raise ValueError(
            f"bins must be a one-dimensional tensor with at least 2 values, got shape "
            f"{tuple(bins.shape)}."
        )


def two_hot_encode(x: torch.Tensor, bins: torch.Tensor) -> torch.Tensor:
    """Two-hot distributions of raw scalars ``x`` on the ascending support ``bins``.

    Values beyond the support put all their mass on its end point.

    Args:
        x (Tensor): raw targets, any shape ``[*B]``.
        bins (Tensor): the ascending support, ``[K]``.

    Returns:
        ``[*B, K]``, rows summing to one, in ``x``'s dtype and device.

    Raises:
        ValueError: if ``bins`` is not 1-D with at least two values.

    Examples:
        >>> import torch
        >>> from rl.objectives import two_hot_encode
        >>> two_hot_encode(torch.tensor([0.25]), torch.tensor([-1.0, 0.0, 1.0]))
        tensor([[0.0000, 0.7500, 0.2500]])
    """
    _check_bins(bins)
    bins = bins.to(device=x.device, dtype=x.dtype)
    num_bins = bins.numel()
    x = x.clamp(bins[0], bins[-1])
    lower = (torch.searchsorted(bins, x.contiguous(), right=True) - 1).clamp(0, num_bins - 2)
    low_value = bins[lower]
    upper_weight = (x - low_value) / (bins[lower + 1] - low_value)
    target = torch.zeros(*x.shape, num_bins, device=x.device, dtype=x.dtype)
    target.scatter_(-1, lower.unsqueeze(-1), (1 - upper_weight).unsqueeze(-1))
    target.scatter_(-1, (lower + 1).unsqueeze(-1), upper_weight.unsqueeze(-1))
    return target


def two_hot_decode(logits: torch.Tensor, bins: torch.Tensor) -> torch.Tensor:
    """The expectation ``sum(softmax(logits) * bins)`` of categorical logits.

    Mirrored support points are added pairwise before the sum, so that a distribution
    symmetric about zero decodes to exactly ``0`` however wide the support.

    Args:
        logits (Tensor): ``[*B, K]``.
        bins (Tensor): the support, ``[K]``.

    Returns:
        ``[*B]`` in ``logits``'s dtype and device.

    Raises:
        ValueError: if ``bins`` is not 1-D or ``K`` differs from its size.

    Examples:
        >>> import torch
        >>> from rl.objectives import two_hot_decode
        >>> two_hot_decode(torch.zeros(2, 3), torch.tensor([-1.0, 0.0, 1.0]))
        tensor([0., 0.])
    """
    _check_bins(bins)
    if logits.shape[-1] != bins.numel():
        raise ValueError(
            f"logits have {logits.shape[-1]} categories (shape {tuple(logits.shape)}) "
            f"but the support has {bins.numel()} bins."
        )
    bins = bins.to(device=logits.device, dtype=logits.dtype)
    weighted = torch.softmax(logits, dim=-1) * bins
    size = logits.shape[-1]
    half = size // 2
    paired = (weighted[..., :half].flip(-1) + weighted[..., size - half :]).sum(-1)
    if size % 2:
        return weighted[..., half] + paired
    return paired


def two_hot_cross_entropy(
    logits: torch.Tensor, target: torch.Tensor, bins: torch.Tensor
) -> torch.Tensor:
    """Cross entropy of ``logits`` against the two-hot encoding of raw ``target``.

    Args:
        logits (Tensor): ``[*B, K]``.
        target (Tensor): raw scalars, ``[*B]`` or ``[*B, 1]``.
        bins (Tensor): the support, ``[K]``.

    Returns:
        ``[*B]``, unreduced.

    Raises:
        ValueError: if ``target``'s shape is neither ``[*B]`` nor ``[*B, 1]``.

    Examples:
        >>> import torch
        >>> from rl.objectives import two_hot_cross_entropy
        >>> two_hot_cross_entropy(torch.zeros(2, 3), torch.tensor([-0.5, 0.5]),
        ...                       torch.tensor([-1.0, 0.0, 1.0]))
        tensor([1.0986, 1.0986])
    """
    batch = logits.shape[:-1]
    if target.shape == (*batch, 1):
        target = target.squeeze(-1)
    if target.shape != batch:
        raise ValueError(
            f"target has shape {tuple(target.shape)}, expected {tuple(batch)} or "
            f"{(*batch, 1)} to match logits of shape {tuple(logits.shape)}."
        )
    encoded = two_hot_encode(target, bins)
    return -(encoded * torch.log_softmax(logits, dim=-1)).sum(-1)


class SymExpTwoHot(nn.Module):
    """A two-hot head on the ``symexp(linspace(-20, 20, num_bins))`` support.

    ``forward(logits)`` decodes ``[*B, num_bins]`` logits to ``[*B, 1]`` raw values;
    :meth:`encode`, :meth:`decode` and :meth:`loss` are the functional forms bound to the
    support, a buffer ``bins`` (saved in the ``state_dict``).

    Args:
        num_bins (int, optional): support size. Defaults to ``255``.

    Examples:
        >>> import torch
        >>> from rl.modules import SymExpTwoHot
        >>> head = SymExpTwoHot(num_bins=5)
        >>> target = torch.tensor([-10.0, 0.0, 10.0])
        >>> torch.allclose(head.decode(head.encode(target).log()), target, atol=1e-3)
        True
    """

    def __init__(self, num_bins: int = _DEFAULT_NUM_BINS) -> None:
        super().__init__()
        self.num_bins = num_bins
        self.register_buffer("bins", _default_bins(num_bins))

    def encode(self, target: torch.Tensor) -> torch.Tensor:
        """Two-hot targets ``[*B, num_bins]`` of raw scalars ``[*B]``."""
        return two_hot_encode(target, self.bins)

    def decode(self, logits: torch.Tensor) -> torch.Tensor:
        """Raw values ``[*B]`` of logits ``[*B, num_bins]``."""
        return two_hot_decode(logits, self.bins)

    def loss(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Unreduced two-hot cross entropy ``[*B]``."""
        return two_hot_cross_entropy(logits, target, self.bins)

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return self.decode(logits).unsqueeze(-1)
