"""Generalized state-dependent exploration (gSDE): noise that is a function of the state.

Raffin, Kober & Stulp 2021, "Smooth Exploration for Robotic Reinforcement Learning",
https://arxiv.org/abs/2005.05719. The exploration noise is ``(sigma * eps) @ state``
with ``eps ~ N(0, 1)`` ``[*B, A, S]`` held fixed between resets, so that the same state
gives the same perturbation during an episode (smooth, reproducible exploration).
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import distributions as d
from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter

from rl.core import ExplorationType, exploration_type

__all__ = ["LazygSDEModule", "gSDEModule"]


def _inv_softplus(x):
    if isinstance(x, torch.Tensor):
        return x.expm1().log()
    return math.log(math.expm1(x))


class gSDEModule(nn.Module):
    """Adds state-dependent exploration noise to a mean action.

    ``forward(mu, state, _eps_gSDE)`` with ``mu`` ``[*B, A]``, ``state`` ``[*B, S]`` and the
    noise ``_eps_gSDE`` ``[*B, A, S]`` returns ``(mu, scale, action, _eps_gSDE)``:

    - ``action = mu + ((sigma * eps) @ state)`` under ``ExplorationType.RANDOM``,
      ``mu`` under the deterministic types;
    - ``scale = sqrt(sum_s (sigma * state_s) ** 2)`` ``[*B, A]``, the standard deviation
      of that action (for a Normal distribution over it);
    - the noise is drawn when missing (RANDOM) or all zeros (the value ``gSDENoise``
      writes at reset), zeros when missing in a deterministic mode.

    ``sigma`` ``[A, S]`` is ``softplus(log_sigma)`` (learned, ``learn_sigma=True``) or a
    buffer, clamped to ``[scale_min, scale_max]``.

    Args:
        action_dim (int): ``A``.
        state_dim (int): ``S``.
        sigma_init (float, optional): initial sigma. Defaults to
            ``sqrt((1 - scale_min) / state_dim)``.
        scale_min (float): lower bound of sigma. Defaults to ``0.01``.
        scale_max (float): upper bound of sigma. Defaults to ``10.0``.
        learn_sigma (bool): make sigma a parameter. Defaults to ``True``.
        transform (torch.distributions.Transform, optional): applied to the action.
        device: where the parameters live.

    Raises:
        RuntimeError: ``mu``/``state``/noise batch shapes that do not match, or an
            exploration type other than random or deterministic ones.

    Examples:
        >>> import torch
        >>> from rl.core import ExplorationType, set_exploration_type
        >>> from rl.modules import gSDEModule
        >>> gsde = gSDEModule(action_dim=2, state_dim=3)
        >>> mu, state = torch.zeros(4, 2), torch.randn(4, 3)
        >>> with set_exploration_type(ExplorationType.RANDOM):
        ...     loc, scale, action, eps = gsde(mu, state, None)
        >>> action.shape, scale.shape, eps.shape
        (torch.Size([4, 2]), torch.Size([4, 2]), torch.Size([4, 2, 3]))
    """

    def __init__(
        self,
        action_dim: int,
        state_dim: int,
        sigma_init: float | None = None,
        scale_min: float = 0.01,
        scale_max: float = 10.0,
        learn_sigma: bool = True,
        transform: d.Transform | None = None,
        device=None,
    ) -> None:
        super().__init__()
        self.action_dim = action_dim
        self.state_dim = state_dim
        self.scale_min = scale_min
        self.scale_max = scale_max
        self.transform = transform
        self.learn_sigma = learn_sigma
        default = math.sqrt((1.0 - scale_min) / state_dim) if state_dim else 0.0
        if sigma_init is None:
            sigma_init = default
        if learn_sigma:
            init = _inv_softplus(sigma_init) if sigma_init > 0 else 0.0
            self.log_sigma = nn.Parameter(torch.full((action_dim, state_dim), init, device=device))
        else:
            self.register_buffer(
                "_sigma", torch.full((action_dim, state_dim), sigma_init, device=device)
            )
        self.register_buffer("sigma_init", torch.as_tensor(sigma_init, device=device))

    @property
    def sigma(self) -> torch.Tensor:
        """The noise scale ``[A, S]`` (at least ``scale_min``)."""
        raw = nn.functional.softplus(self.log_sigma) if self.learn_sigma else self._sigma
        return raw.clamp_min(self.scale_min)

    def forward(self, mu: torch.Tensor, state: torch.Tensor, _eps_gSDE: torch.Tensor | None):
        sigma = self.sigma.clamp_max(self.scale_max)
        mode = exploration_type()
        if state.shape[:-1] != mu.shape[:-1]:
            raise RuntimeError(
                "gSDEModule: mu and state must have the same batch shape, got "
                f"{tuple(mu.shape)} and {tuple(state.shape)}"
            )
        batch = state.shape[:-1]
        if _eps_gSDE is not None and _eps_gSDE.shape[: len(batch)] != batch:
            raise RuntimeError(
                "gSDEModule: the noise and state must have the same batch shape, got "
                f"{tuple(_eps_gSDE.shape)} and {tuple(state.shape)}"
            )
        random = mode == ExplorationType.RANDOM
        deterministic = mode in (
            ExplorationType.MODE,
            ExplorationType.MEAN,
            ExplorationType.DETERMINISTIC,
        )
        if not (random or deterministic):
            raise RuntimeError(
                f"gSDEModule: exploration type {mode} is not supported; use RANDOM or a "
                "deterministic type (MODE, MEAN, DETERMINISTIC)"
            )
        shape = (*batch, *sigma.shape)
        if _eps_gSDE is None:
            _eps_gSDE = (
                torch.randn(shape, device=sigma.device, dtype=sigma.dtype)
                if random
                else sigma.new_zeros(shape)
            )
        elif _eps_gSDE.numel() == math.prod(batch) and bool((_eps_gSDE == 0).all()):
            # gSDENoise writes a zero placeholder at reset: draw this episode's noise
            _eps_gSDE = torch.randn(shape, device=sigma.device, dtype=sigma.dtype)
        noise = ((sigma * _eps_gSDE) @ state.unsqueeze(-1)).squeeze(-1)
        action = mu + noise if random else mu
        scale = (sigma * state.unsqueeze(-2)).pow(2).sum(-1).clamp_min(1e-5).sqrt()
        if not torch.isfinite(scale).all():
            warnings.warn("gSDEModule: the scale is not finite", RuntimeWarning, stacklevel=2)
        if self.transform is not None:
            action = self.transform(action)
        return mu, scale, action, _eps_gSDE


class LazygSDEModule(LazyModuleMixin, gSDEModule):
    """:class:`gSDEModule` whose dimensions (and sigma) are set by the first call.

    The initial sigma is chosen so that the action noise has standard deviation
    ``sigma_init`` (1 when ``None``) for states like the first batch:
    ``sigma = sigma_init * sqrt(1 / (S * E[state ** 2]))`` per state feature.

    Args:
        sigma_init (float, optional): the target noise standard deviation.
        scale_min, scale_max, learn_sigma, transform, device: as :class:`gSDEModule`.

    Examples:
        >>> import torch
        >>> from rl.core import ExplorationType, set_exploration_type
        >>> from rl.modules import LazygSDEModule
        >>> gsde = LazygSDEModule()
        >>> with set_exploration_type(ExplorationType.RANDOM):
        ...     _, scale, _, _ = gsde(torch.zeros(1000, 2), torch.randn(1000, 5) * 3, None)
        >>> abs(scale.mean().item() - 1.0) < 0.2
        True
    """

    cls_to_become = gSDEModule

    def __init__(
        self,
        sigma_init: float | None = None,
        scale_min: float = 0.01,
        scale_max: float = 10.0,
        learn_sigma: bool = True,
        transform: d.Transform | None = None,
        device=None,
    ) -> None:
        super().__init__(
            0,
            0,
            sigma_init=0.0,
            scale_min=scale_min,
            scale_max=scale_max,
            learn_sigma=learn_sigma,
            transform=transform,
            device=device,
        )
        kwargs = {"device": device, "dtype": torch.get_default_dtype()}
        self._sigma_init = sigma_init
        self.sigma_init = UninitializedBuffer(**kwargs)
        if learn_sigma:
            self.log_sigma = UninitializedParameter(**kwargs)
        else:
            self._sigma = UninitializedBuffer(**kwargs)

    def reset_parameters(self) -> None:
        pass

    def initialize_parameters(self, mu: torch.Tensor, state: torch.Tensor, _eps_gSDE) -> None:
        if not self.has_uninitialized_params():
            return
        action_dim, state_dim = mu.shape[-1], state.shape[-1]
        self.action_dim, self.state_dim = action_dim, state_dim
        with torch.no_grad():
            flat = state.reshape(-1, state_dim)
            if flat.shape[0] == 1:
                inv_var = torch.ones(1, device=mu.device, dtype=mu.dtype)
            else:
                inv_var = flat.pow(2).mean(0).reciprocal()
            target = 1.0 if self._sigma_init is None else self._sigma_init
            sigma0 = target * (inv_var.clamp_min(self.scale_min) / state_dim).sqrt()
            self.sigma_init.materialize(sigma0.shape)
            if self.learn_sigma:
                self.sigma_init.copy_(_inv_softplus(sigma0))
                self.log_sigma.materialize((action_dim, state_dim))
                self.log_sigma.copy_(self.sigma_init.expand(action_dim, state_dim))
            else:
                self.sigma_init.copy_(sigma0)
                self._sigma.materialize((action_dim, state_dim))
                self._sigma.copy_(sigma0.expand(action_dim, state_dim))
