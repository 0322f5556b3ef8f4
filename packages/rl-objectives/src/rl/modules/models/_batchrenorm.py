"""BatchRenorm1d: batch renormalization (the normalization layer of CrossQ)."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["BatchRenorm1d"]


class BatchRenorm1d(nn.Module):
    """Batch renormalization (Ioffe, 2017, https://arxiv.org/abs/1702.03275).

    In training, a batch is normalized with its own statistics and then corrected towards
    the running ones: ``x_hat = (x - mu_B) / sigma_B * r + d`` with
    ``r = clamp(sigma_B / sigma, 1/max_r, max_r)`` and
    ``d = clamp((mu_B - mu) / sigma, -max_d, max_d)`` (``r`` and ``d`` without gradient,
    ``sigma = sqrt(running_var + eps)``). During the first ``warmup_steps`` batches
    ``r = 1, d = 0`` (plain batch norm); with ``smooth=True`` they move linearly from
    there to their clamped values over the warm-up. In eval mode the running statistics
    are used. The output is ``weight * x_hat + bias``. The running mean and (unbiased)
    variance follow ``running += momentum * (batch - running)``. Used by CrossQ
    (Bhatt et al., 2024, https://arxiv.org/abs/1902.05605).

    Unlike TorchRL 0.14, the warm-up factor stops at 1 after ``warmup_steps`` (TorchRL's
    step counter keeps growing and multiplies ``r - 1`` and ``d`` by 2, 3, ... later on).

    Args:
        num_features (int): number of features (dimension 1 of the input).

    Keyword Args:
        momentum (float, optional): running-statistics rate. Defaults to ``0.01``.
        eps (float, optional): added to variances. Defaults to ``1e-5``.
        max_r (float, optional): bound of ``r``. Defaults to ``3.0``.
        max_d (float, optional): bound of ``d``. Defaults to ``5.0``.
        warmup_steps (int, optional): plain batch-norm steps. Defaults to ``10000``.
        smooth (bool, optional): linear warm-up. Defaults to ``False``.

    Examples:
        >>> import torch
        >>> from rl.modules import BatchRenorm1d
        >>> layer = BatchRenorm1d(3, warmup_steps=0)
        >>> layer(torch.randn(8, 3)).shape
        torch.Size([8, 3])
        >>> int(layer.num_batches_tracked)
        1
    """

    def __init__(
        self,
        num_features: int,
        *,
        momentum: float = 0.01,
        eps: float = 1e-5,
        max_r: float = 3.0,
        max_d: float = 5.0,
        warmup_steps: int = 10000,
        smooth: bool = False,
    ) -> None:
        super().__init__()
        self.num_features = num_features
        self.momentum = momentum
        self.eps = eps
        self.max_r = max_r
        self.max_d = max_d
        self.warmup_steps = warmup_steps
        self.smooth = smooth
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))

    def _warmup_factor(self) -> torch.Tensor:
        steps = self.num_batches_tracked.to(self.running_mean.dtype)
        if self.warmup_steps <= 0:
            return torch.ones_like(steps)
        if self.smooth:
            return (steps / self.warmup_steps).clamp_max(1.0)
        return (steps >= self.warmup_steps).to(steps.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalizes ``x`` of shape ``[N, num_features, *rest]``."""
        if x.dim() < 2 or x.shape[1] != self.num_features:
            raise ValueError(
                f"BatchRenorm1d expects inputs of shape [N, {self.num_features}, ...], "
                f"got {tuple(x.shape)}"
            )
        view = [1, self.num_features] + [1] * (x.dim() - 2)
        running_std = (self.running_var + self.eps).sqrt()
        if self.training:
            dims = [i for i in range(x.dim()) if i != 1]
            n = x.numel() // self.num_features
            b_mean = x.mean(dims)
            b_var = x.var(dims, unbiased=False)
            b_std = (b_var + self.eps).sqrt()
            r = (b_std.detach() / running_std).clamp(1 / self.max_r, self.max_r)
            d = ((b_mean.detach() - self.running_mean) / running_std).clamp(-self.max_d, self.max_d)
            factor = self._warmup_factor()
            r = 1.0 + (r - 1.0) * factor
            d = d * factor
            out = (x - b_mean.view(view)) / b_std.view(view) * r.view(view) + d.view(view)
            with torch.no_grad():
                unbiased = b_var * n / max(n - 1, 1)
                self.running_var += self.momentum * (unbiased - self.running_var)
                self.running_mean += self.momentum * (b_mean - self.running_mean)
                self.num_batches_tracked += 1
        else:
            out = (x - self.running_mean.view(view)) / running_std.view(view)
        return self.weight.view(view) * out + self.bias.view(view)
