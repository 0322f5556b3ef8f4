"""A Gaussian-process dynamics model with moment matching (PILCO)."""

from __future__ import annotations

import torch
from tensordict import NestedKey, TensorDictBase
from torch import nn

__all__ = ["GPWorldModel"]

_IN_KEYS = [
    ("action", "mean"),
    ("action", "var"),
    ("action", "cross_covariance"),
    ("observation", "mean"),
    ("observation", "var"),
]
_OUT_KEYS = [("next", "observation", "mean"), ("next", "observation", "var")]


def _nonzero(cov: torch.Tensor | None) -> bool:
    return cov is not None and bool((cov != 0).any())


class GPWorldModel(nn.Module):
    """One Gaussian process per state dimension, predicting the change of the state
    from the state and the action (Deisenroth & Rasmussen 2011, PILCO,
    https://dl.acm.org/doi/10.5555/3104482.3104541, Sec. 2.1-2.2).

    Each GP ``a`` has a squared-exponential kernel ``alpha_a^2 exp(-(x - x')^T L_a^-1
    (x - x') / 2)``, ``L_a = diag(ell_a^2)`` over ``x~ = [x, u]``, and a noise variance
    ``sigma_a^2``; :meth:`fit` sets them by maximising the marginal likelihood (L-BFGS
    on their logarithms, in plain torch: no GPyTorch or BoTorch needed).

    :meth:`forward` reads a belief over the state (``("observation", "mean")``,
    ``("observation", "var")``) and over the action with its cross-covariance term (as
    :class:`RBFController` writes them) and writes the next state's belief. With any
    non-zero covariance it propagates the Gaussian exactly in its first two moments
    (:meth:`uncertain_forward`, eqs. 10-23); otherwise it returns the GP posterior at
    the point (:meth:`deterministic_forward`). Both predict the latent dynamics (no
    observation noise), so the first is the limit of the second as the covariances
    vanish.

    Args:
        obs_dim: ``D``.
        action_dim: ``F``.
        in_keys: five keys: action mean, action covariance, the cross-covariance term
            (``covariance^-1 cov[x, u]`` ``[*B, D, F]``), state mean, state covariance.
        out_keys: two keys: the next state's mean and covariance.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.modules import GPWorldModel
        >>> _ = torch.manual_seed(0)
        >>> x, u = torch.randn(30, 2, dtype=torch.float64), torch.randn(30, 1, dtype=torch.float64)
        >>> data = TensorDict(
        ...     {"observation": x, "action": u, ("next", "observation"): x + 0.1 * u},
        ...     batch_size=[30],
        ... )
        >>> model = GPWorldModel(obs_dim=2, action_dim=1).double()
        >>> model.fit(data)
        >>> query = TensorDict(
        ...     {("observation", "mean"): x[:3], ("action", "mean"): u[:3]}, batch_size=[3]
        ... )
        >>> pred = model(query)["next", "observation", "mean"]
        >>> bool((pred - (x[:3] + 0.1 * u[:3])).abs().max() < 0.05)
        True
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        in_keys: list[NestedKey] | None = None,
        out_keys: list[NestedKey] | None = None,
    ) -> None:
        super().__init__()
        self.obs_dim = obs_dim
        self.action_dim = action_dim
        self.state_action_dim = obs_dim + action_dim
        self.in_keys = list(_IN_KEYS if in_keys is None else in_keys)
        self.out_keys = list(_OUT_KEYS if out_keys is None else out_keys)
        if len(self.in_keys) != 5 or len(self.out_keys) != 2:
            raise ValueError(
                f"GPWorldModel takes 5 in_keys and 2 out_keys, got {self.in_keys} and {self.out_keys}"
            )
        self.register_buffer("X_tilde_train", torch.empty(0))
        self.register_buffer("ell", torch.ones(obs_dim, self.state_action_dim))
        self.register_buffer("alpha_sq", torch.ones(obs_dim, 1))
        self.register_buffer("sigma_sq_eps", torch.ones(obs_dim))
        self.register_buffer("_cached_inv_K_noisy", None)
        self.register_buffer("_cached_beta", None)

    @property
    def device(self) -> torch.device:
        return self.ell.device

    # ------------------------------------------------------------------ fitting
    def fit(self, dataset: TensorDictBase, max_iter: int = 200) -> None:
        """Fits the GPs to transitions ``("observation", "action", ("next", "observation"))``.

        Args:
            dataset: a flat ``[n]`` tensordict (``reshape(-1)`` a ``[B, T]`` one).
            max_iter: L-BFGS iterations on the negative log marginal likelihood.
        """
        dtype = self.ell.dtype
        # fitted in float64 whatever the module's dtype: Gram matrices are ill-conditioned
        x = dataset.get("observation").to(self.device, torch.float64)
        u = dataset.get("action").to(self.device, torch.float64)
        x_next = dataset.get(("next", "observation")).to(self.device, torch.float64)
        if x.ndim != 2 or x.shape[-1] != self.obs_dim or u.shape[-1] != self.action_dim:
            raise ValueError(
                f"GPWorldModel.fit needs 'observation' [n, {self.obs_dim}] and 'action' "
                f"[n, {self.action_dim}], got {tuple(x.shape)} and {tuple(u.shape)}"
            )
        inputs = torch.cat([x, u], -1).detach()
        targets = (x_next - x).detach().T  # [D, n]
        n = inputs.shape[0]
        eye = torch.eye(n, dtype=torch.float64, device=self.device)
        spread = inputs.std(0).clamp_min(1e-3)
        y_var = targets.var(-1).clamp_min(1e-8)
        # a noise floor of 1e-4 of the targets' variance (BoTorch's floor on standardised
        # outcomes): without it the likelihood of a few noisy points drives the noise to 0
        floor = 1e-4 * y_var
        log_ell = spread.log().expand(self.obs_dim, -1).clone().requires_grad_(True)
        log_alpha = y_var.log().clone().requires_grad_(True)
        log_noise = (0.01 * y_var).log().clone().requires_grad_(True)

        def gram(ell, alpha_sq, noise):
            k = self._kernel(inputs, inputs, ell, alpha_sq)
            return k + noise[:, None, None] * eye

        def nll() -> torch.Tensor:
            k = gram(log_ell.exp(), log_alpha.exp(), log_noise.exp() + floor)
            chol = torch.linalg.cholesky(k)
            alpha = torch.cholesky_solve(targets[..., None], chol)
            fit_term = 0.5 * (targets[..., None] * alpha).sum()
            return fit_term + chol.diagonal(dim1=-2, dim2=-1).log().sum()

        optim = torch.optim.LBFGS(
            [log_ell, log_alpha, log_noise], max_iter=max_iter, line_search_fn="strong_wolfe"
        )

        def closure():
            optim.zero_grad()
            loss = nll()
            loss.backward()
            return loss

        with torch.enable_grad():
            optim.step(closure)
        with torch.no_grad():
            ell, alpha_sq = log_ell.exp(), log_alpha.exp()
            noise = log_noise.exp() + floor
            chol = torch.linalg.cholesky(gram(ell, alpha_sq, noise))
            inv_k = torch.cholesky_solve(eye.expand(self.obs_dim, n, n), chol)
            beta = torch.cholesky_solve(targets[..., None], chol)[..., 0]
            self.X_tilde_train = inputs.to(dtype)
            self.ell = ell.to(dtype)
            self.alpha_sq = alpha_sq[:, None].to(dtype)
            self.sigma_sq_eps = noise.to(dtype)
            self._cached_inv_K_noisy = inv_k.to(dtype)
            self._cached_beta = beta.to(dtype)

    @staticmethod
    def _kernel(a: torch.Tensor, b: torch.Tensor, ell: torch.Tensor, alpha_sq: torch.Tensor):
        """``[D, n_a, n_b]`` SE kernels of the ``D`` GPs (``ell`` ``[D, E]``, ``alpha_sq`` ``[D]``)."""
        sa = a / ell[:, None, :]
        sb = b / ell[:, None, :]
        sq = (sa[:, :, None, :] - sb[:, None, :, :]).square().sum(-1)
        return alpha_sq[:, None, None] * torch.exp(-0.5 * sq)

    def compute_factorizations(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``((K_a + sigma_a^2 I)^-1 [D, n, n], beta_a = (K_a + sigma_a^2 I)^-1 y_a [D, n])``."""
        if self._cached_beta is None:
            raise RuntimeError("GPWorldModel has not been fitted: call fit(dataset) first")
        return self._cached_inv_K_noisy, self._cached_beta

    # ------------------------------------------------------------------ prediction
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Writes the next state's belief; moment matching when any covariance is non-zero."""
        _, u_var_key, cross_key, _, x_var_key = self.in_keys
        x_var = tensordict.get(x_var_key, None)
        if x_var is not None and x_var.ndim < 2:
            raise ValueError(
                f"{x_var_key!r} must be a covariance [..., D, D], got shape {tuple(x_var.shape)}; "
                "turn per-dimension variances into one with torch.diag_embed"
            )
        uncertain = any(
            _nonzero(tensordict.get(key, None)) for key in (x_var_key, u_var_key, cross_key)
        )
        if uncertain:
            return self.uncertain_forward(tensordict)
        return self.deterministic_forward(tensordict)

    def deterministic_forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """GP posterior at the point ``[x, u]``: mean ``x + mu_delta``, covariance
        ``diag(var_delta)``. Inputs ``[*B, D]`` / ``[*B, F]`` (any batch shape)."""
        inv_k, beta = self.compute_factorizations()
        u_key, _, _, x_key, _ = self.in_keys
        x = tensordict.get(x_key)
        u = tensordict.get(u_key)
        dtype = self.X_tilde_train.dtype
        batch = x.shape[:-1]
        query = torch.cat([x.reshape(-1, self.obs_dim), u.reshape(-1, self.action_dim)], -1)
        k_star = self._kernel(query.to(dtype), self.X_tilde_train, self.ell, self.alpha_sq[:, 0])
        mean = torch.einsum("dmn,dn->md", k_star, beta)  # [M, D]
        var = self.alpha_sq[:, 0] - torch.einsum("dmn,dnk,dmk->md", k_star, inv_k, k_star)
        var = var.clamp_min(0.0)
        mean_key, var_key = self.out_keys
        tensordict.set(mean_key, x + mean.reshape(*batch, self.obs_dim).to(x.dtype))
        tensordict.set(
            var_key, torch.diag_embed(var).reshape(*batch, self.obs_dim, self.obs_dim).to(x.dtype)
        )
        return tensordict

    def uncertain_forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Moment matching: the mean and covariance of the next state for a Gaussian
        ``[x, u]`` (PILCO eqs. 10-23). Inputs ``[B, *]`` or unbatched."""
        inv_k, beta = self.compute_factorizations()
        u_key, u_var_key, cross_key, x_key, x_var_key = self.in_keys
        mx, sx = tensordict.get(x_key), tensordict.get(x_var_key)
        mu, su, c = tensordict.get(u_key), tensordict.get(u_var_key), tensordict.get(cross_key)
        out_dtype = mx.dtype
        unbatched = mx.ndim == 1
        mx, sx, mu, su, c = (t.unsqueeze(0) if unbatched else t for t in (mx, sx, mu, su, c))
        dtype = self.X_tilde_train.dtype
        mx, sx, mu, su, c = (t.to(dtype) for t in (mx, sx, mu, su, c))
        d, e = self.obs_dim, self.state_action_dim
        xs = self.X_tilde_train  # [n, E]
        lam = self.ell.square()  # [D, E], diagonals of L_a
        alpha_sq = self.alpha_sq[:, 0]  # [D]

        # the joint belief over [x, u]
        sxc = sx @ c  # cov[x, u]
        m = torch.cat([mx, mu], -1)  # [B, E]
        s = torch.cat([torch.cat([sx, sxc], -1), torch.cat([sxc.mT, su], -1)], -2)  # [B, E, E]
        nu = xs - m[:, None, :]  # [B, n, E]

        # mean: q_ai = alpha_a^2 |S L_a^-1 + I|^-1/2 exp(-nu_i^T (S + L_a)^-1 nu_i / 2)
        s_lam = s[:, None] + torch.diag_embed(lam)  # [B, D, E, E]
        sol = torch.linalg.solve(s_lam, nu[:, None].mT).mT  # [B, D, n, E]
        logdet = torch.linalg.slogdet(s_lam)[1] - lam.log().sum(-1)  # [B, D]
        q = alpha_sq[:, None] * torch.exp(
            -0.5 * logdet[..., None] - 0.5 * (nu[:, None] * sol).sum(-1)
        )  # [B, D, n]
        bq = beta * q  # [B, D, n]
        mean_delta = bq.sum(-1)  # [B, D]
        # cov[[x, u], delta_a] = S sum_i beta_ai q_ai (S + L_a)^-1 nu_i
        cov_in_delta = s @ torch.einsum("bdn,bdne->bed", bq, sol)  # [B, E, D]

        # second moments: Q_abij = k_a(x_i, m) k_b(x_j, m) |R|^-1/2 exp(z^T R^-1 S z / 2),
        # R = S (L_a^-1 + L_b^-1) + I, z = L_a^-1 nu_i + L_b^-1 nu_j
        inv_lam = 1.0 / lam  # [D, E]
        ka = torch.log(alpha_sq)[:, None] - 0.5 * (nu[:, None].square() * inv_lam[:, None]).sum(-1)
        za = nu[:, None] * inv_lam[:, None]  # [B, D, n, E]
        inv_sum = inv_lam[:, None] + inv_lam[None]  # [D, D, E]
        r = s[:, None, None] * inv_sum[None, :, :, None, :] + torch.eye(
            e, dtype=dtype, device=m.device
        )
        r_inv_s = torch.linalg.solve(r, s[:, None, None].expand_as(r))  # [B, D, D, E, E]
        r_inv_s = (r_inv_s + r_inv_s.mT) / 2
        z = za[:, :, None, :, None, :] + za[:, None, :, None, :, :]  # [B, D, D, n, n, E]
        quad = ((z @ r_inv_s[:, :, :, None]) * z).sum(-1)  # [B, D, D, n, n]
        logdet_r = torch.linalg.slogdet(r)[1]  # [B, D, D]
        big_q = torch.exp(
            ka[:, :, None, :, None]
            + ka[:, None, :, None, :]
            - 0.5 * logdet_r[..., None, None]
            + 0.5 * quad
        )  # [B, D, D, n, n]
        # beta_a^T Q_ab beta_b
        cov_delta = (beta[None, :, None, :, None] * big_q * beta[None, None, :, None, :]).sum(
            (-2, -1)
        )
        # E[var_f(delta_a)] on the diagonal: alpha_a^2 - tr((K_a + sigma^2 I)^-1 Q_aa)
        diag_q = big_q.diagonal(dim1=1, dim2=2).movedim(-1, 1)  # [B, D, n, n]
        expected_var = alpha_sq - (inv_k * diag_q).sum((-2, -1))
        cov_delta = cov_delta + torch.diag_embed(expected_var)
        cov_delta = cov_delta - mean_delta[:, :, None] * mean_delta[:, None, :]

        cov_x_delta = cov_in_delta[:, :d]  # [B, D, D]
        mean_next = mx + mean_delta
        cov_next = sx + cov_delta + cov_x_delta + cov_x_delta.mT
        cov_next = (cov_next + cov_next.mT) / 2
        if unbatched:
            mean_next, cov_next = mean_next[0], cov_next[0]
        mean_key, var_key = self.out_keys
        tensordict.set(mean_key, mean_next.to(out_dtype))
        tensordict.set(var_key, cov_next.to(out_dtype))
        return tensordict
