"""A radial-basis-function policy on Gaussian state beliefs (PILCO's controller)."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["RBFController"]


def _eye_like(mat: torch.Tensor) -> torch.Tensor:
    return torch.eye(mat.shape[-1], dtype=mat.dtype, device=mat.device)


class RBFController(nn.Module):
    """An RBF network policy that maps a Gaussian state belief to a Gaussian action,
    by exact moment matching (Deisenroth & Rasmussen 2011, PILCO,
    https://dl.acm.org/doi/10.5555/3104482.3104541; Deisenroth 2010, thesis, A.3).

    The policy is ``u(x) = sum_i w_i k(x, c_i)``, ``k(x, c) = s exp(-(x - c)^T L^-1 (x - c) / 2)``
    with ``L = diag(lengthscales^2)`` and ``s = 1``, then (when ``max_action`` is given)
    squashed by ``max_action * sin(u)`` (:meth:`squash_sin`). For ``x ~ N(mean,
    covariance)`` it returns the mean and covariance of the action and the
    cross-covariance term ``C = covariance^-1 cov[x, u]`` (PILCO's convention: the
    cross-covariance is ``covariance @ C``), which :class:`GPWorldModel` reads as
    ``("action", "cross_covariance")``. Everything is differentiable.

    Args:
        input_dim: ``D``, the state size.
        output_dim: ``K``, the action size.
        max_action: the action bound (a float or a ``[K]`` tensor); ``None`` leaves the
            action unsquashed.
        n_basis: ``N``, the number of basis functions.

    Shapes:
        ``mean [*B, D]``, ``covariance [*B, D, D]`` in; ``action_mean [*B, K]``,
        ``action_covariance [*B, K, K]``, ``cross_covariance [*B, D, K]`` out.

    Examples:
        >>> import torch
        >>> from rl.modules import RBFController
        >>> policy = RBFController(input_dim=3, output_dim=1, max_action=2.0, n_basis=8)
        >>> m, s = torch.zeros(5, 3), 0.1 * torch.eye(3).expand(5, 3, 3)
        >>> [t.shape for t in policy(m, s)]
        [torch.Size([5, 1]), torch.Size([5, 1, 1]), torch.Size([5, 3, 1])]
    """

    def __init__(
        self,
        input_dim: int,
        output_dim: int,
        max_action: float | torch.Tensor | None,
        n_basis: int = 10,
    ) -> None:
        super().__init__()
        self.input_dim = input_dim
        self.output_dim = output_dim
        self.max_action = max_action
        self.n_basis = n_basis
        self.centers = nn.Parameter(0.5 * torch.randn(n_basis, input_dim))
        self.weights = nn.Parameter(0.1 * torch.randn(n_basis, output_dim))
        self.lengthscales = nn.Parameter(torch.ones(input_dim))
        self.variance = 1.0  # the kernel's signal variance s, fixed as in PILCO

    @staticmethod
    def squash_sin(
        mean: torch.Tensor, covariance: torch.Tensor, max_action: float | torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Moments of ``y = max_action * sin(x)`` for ``x ~ N(mean, covariance)``.

        Args:
            mean: ``[*B, K]``.
            covariance: ``[*B, K, K]``.
            max_action: a float or a ``[K]`` (or one-element) tensor.

        Returns:
            ``(mean [*B, K], covariance [*B, K, K], C [*B, K, K])`` where
            ``C = covariance^-1 cov[x, y]`` (diagonal).
        """
        a = torch.as_tensor(max_action, dtype=mean.dtype, device=mean.device).reshape(-1)
        a = a.expand(mean.shape[-1])
        var = covariance.diagonal(dim1=-2, dim2=-1)  # [*B, K]
        decay = torch.exp(-var / 2)
        y_mean = a * decay * torch.sin(mean)
        # E[sin x_i sin x_j] - E[sin x_i] E[sin x_j], from the cosines of sums and differences
        lq = -(var[..., :, None] + var[..., None, :]) / 2
        q = lq.exp()
        cov = (torch.exp(lq + covariance) - q) * torch.cos(
            mean[..., :, None] - mean[..., None, :]
        ) - (torch.exp(lq - covariance) - q) * torch.cos(mean[..., :, None] + mean[..., None, :])
        y_cov = a[:, None] * a[None, :] * cov / 2
        c = torch.diag_embed(a * decay * torch.cos(mean))
        return y_mean, y_cov, c

    def forward(
        self, mean: torch.Tensor, covariance: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if mean.shape[-1] != self.input_dim or covariance.shape[-2:] != (
            self.input_dim,
            self.input_dim,
        ):
            raise ValueError(
                f"RBFController(input_dim={self.input_dim}) got a mean of shape "
                f"{tuple(mean.shape)} and a covariance of shape {tuple(covariance.shape)}; "
                f"expected [*B, {self.input_dim}] and [*B, {self.input_dim}, {self.input_dim}]"
            )
        batch = mean.shape[:-1]
        d, n, k = self.input_dim, self.n_basis, self.output_dim
        m = mean.reshape(-1, d)
        s = covariance.reshape(-1, d, d)
        lam = self.lengthscales.square()  # diagonal of L
        w = self.weights

        # E[k(x, c_i)] = s |S L^-1 + I|^-1/2 exp(-(c_i - m)^T (S + L)^-1 (c_i - m) / 2)
        s_lam = s + torch.diag_embed(lam)
        diff = self.centers - m[:, None, :]  # [B, N, D]
        sol = torch.linalg.solve(s_lam, diff.mT).mT  # (S + L)^-1 (c_i - m)
        logdet = torch.linalg.slogdet(s_lam)[1] - lam.log().sum()
        q = self.variance * torch.exp(-0.5 * logdet[:, None] - 0.5 * (diff * sol).sum(-1))
        u_mean = q @ w  # [B, K]
        # S^-1 cov[x, u] = sum_i (S + L)^-1 (c_i - m) q_i w_i^T
        cross = torch.einsum("bnd,bn,nk->bdk", sol, q, w)

        # E[k(x, c_i) k(x, c_j)]: a kernel at the midpoint with L / 2
        half = lam / 2
        s_half = s + torch.diag_embed(half)
        cdiff = self.centers[:, None, :] - self.centers[None, :, :]  # [N, N, D]
        e1 = -0.25 * (cdiff.square() / lam).sum(-1)  # [N, N]
        z = ((self.centers[:, None, :] + self.centers[None, :, :]) / 2).reshape(1, n * n, d)
        z = z - m[:, None, :]  # [B, N*N, D]
        e2 = -0.5 * (z * torch.linalg.solve(s_half, z.mT).mT).sum(-1).reshape(-1, n, n)
        scale = torch.exp(0.5 * (half.log().sum() - torch.linalg.slogdet(s_half)[1]))
        big_q = self.variance**2 * scale[:, None, None] * torch.exp(e1 + e2)  # [B, N, N]
        u_cov = w.T @ big_q @ w - u_mean[:, :, None] * u_mean[:, None, :]
        u_cov = (u_cov + u_cov.mT) / 2 + 1e-6 * _eye_like(u_cov)

        if self.max_action is not None:
            u_mean, u_cov, c = self.squash_sin(u_mean, u_cov, self.max_action)
            cross = cross @ c
        return (
            u_mean.reshape(*batch, k),
            u_cov.reshape(*batch, k, k),
            cross.reshape(*batch, d, k),
        )
