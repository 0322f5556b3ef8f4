"""PILCO's saturating cost, in expectation over a Gaussian state belief."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey

from ._loss import LossModule
from ._reduction import _check_reduction

__all__ = ["ExponentialQuadraticCost"]


def _sqrt_psd(mat: torch.Tensor) -> torch.Tensor:
    """The symmetric square root of a positive semi-definite matrix."""
    evals, evecs = torch.linalg.eigh(mat)
    return evecs @ torch.diag_embed(evals.clamp_min(0.0).sqrt()) @ evecs.mT


class ExponentialQuadraticCost(LossModule):
    """Expected saturating cost ``E[1 - exp(-(x - t)^T W (x - t) / 2)]`` for
    ``x ~ N(mean, var)`` (Deisenroth & Rasmussen 2011, PILCO, eqs. 24-25,
    https://dl.acm.org/doi/10.5555/3104482.3104541).

    In closed form, with ``U = W^(1/2)`` and ``A = I + U var U``:
    ``1 - |A|^(-1/2) exp(-(U (m - t))^T A^-1 (U (m - t)) / 2)``, which lies in ``[0, 1]``
    and is differentiable in the belief, so a policy can be trained through imagined
    rollouts (:class:`~rl.envs.ImaginedEnv`).

    Args:
        target: the target state ``t`` ``[D]`` (default the origin).
        weights: the precision ``W`` ``[D, D]`` (symmetric, positive semi-definite;
            default the identity).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` over the batch.

    Keys (``set_keys``): ``loc`` (``("observation", "mean")``, ``[*B, D]``), ``scale``
    (``("observation", "var")``, ``[*B, D, D]``), ``loss_cost`` (the output).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.objectives import ExponentialQuadraticCost
        >>> cost = ExponentialQuadraticCost(reduction="none")
        >>> td = TensorDict(
        ...     {("observation", "mean"): torch.zeros(2, 3),
        ...      ("observation", "var"): torch.zeros(2, 3, 3)},
        ...     batch_size=[2],
        ... )
        >>> cost(td)["loss_cost"].round(decimals=4)  # zero cost at the target, with certainty
        tensor([0., 0.])
    """

    @dataclass
    class _AcceptedKeys:
        """Keys read and written by ExponentialQuadraticCost.

        Attributes:
            loc: the belief's mean ``[*B, D]``.
            scale: the belief's covariance ``[*B, D, D]``.
            loss_cost: where the (reduced) expected cost is written.
        """

        loc: NestedKey = ("observation", "mean")
        scale: NestedKey = ("observation", "var")
        loss_cost: NestedKey = "loss_cost"

    default_keys = _AcceptedKeys

    def __init__(
        self,
        target: torch.Tensor | None = None,
        weights: torch.Tensor | None = None,
        reduction: Literal["mean", "sum", "none"] = "mean",
    ) -> None:
        super().__init__()
        self.reduction = _check_reduction(reduction)
        self.register_buffer("target", target)
        self.register_buffer("weights", weights)

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        m = self._get(tensordict, "loc")
        s = self._get(tensordict, "scale")
        d = m.shape[-1]
        if s.shape[-2:] != (d, d) or s.shape[:-2] != m.shape[:-1]:
            raise ValueError(
                f"{self.tensor_keys.scale!r} has shape {tuple(s.shape)}, expected "
                f"{(*m.shape[:-1], d, d)} from {self.tensor_keys.loc!r} of shape {tuple(m.shape)}"
            )
        eye = torch.eye(d, dtype=m.dtype, device=m.device)
        w = eye if self.weights is None else self.weights.to(m)
        t = torch.zeros_like(m) if self.target is None else self.target.to(m)
        if w.shape != (d, d) or t.shape[-1] != d:
            raise ValueError(
                f"weights {tuple(w.shape)} and target {tuple(t.shape)} do not fit a state of size {d}"
            )
        u = _sqrt_psd(w)
        a = eye + u @ s @ u + 1e-6 * eye  # jitter: a zero covariance keeps A invertible
        chol = torch.linalg.cholesky(a)
        v = ((m - t) @ u)[..., None]  # U (m - t), U symmetric
        quad = (v * torch.cholesky_solve(v, chol)).sum((-2, -1))
        det_term = torch.exp(-torch.log(chol.diagonal(dim1=-2, dim2=-1)).sum(-1))
        cost = 1.0 - det_term * torch.exp(-0.5 * quad)
        if self.reduction == "mean":
            cost, batch = cost.mean(), []
        elif self.reduction == "sum":
            cost, batch = cost.sum(), []
        else:
            batch = cost.shape
        return TensorDict({self.tensor_keys.loss_cost: cost}, batch_size=batch)
