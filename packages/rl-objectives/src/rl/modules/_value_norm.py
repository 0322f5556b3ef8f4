"""Value normalisers: running location and scale of the value targets.

A critic regresses on ``normalize(target)`` so that its loss keeps one scale while the
returns grow (MAPPO, Yu et al., 2022, https://arxiv.org/abs/2103.01955, where it is
PopArt's normaliser), and ``denormalize`` maps a normalised prediction back to returns.
``scale()`` alone rescales quantities that are already centred, such as advantages.

- :class:`PopArtValueNorm`: debiased exponential moving averages of the mean and of the
  mean square (van Hasselt et al., 2016, https://arxiv.org/abs/1809.04474).
- :class:`RunningValueNorm`: the exact mean and variance of every target seen.
- :class:`PercentileValueNorm`: moving averages of a low and a high quantile, scale
  ``max(min_scale, high - low)`` (DreamerV3, Hafner et al., 2023,
  https://arxiv.org/abs/2301.04104).
"""

from __future__ import annotations

import math
import warnings
from abc import ABCMeta, abstractmethod

import torch
from torch import nn

__all__ = ["PercentileValueNorm", "PopArtValueNorm", "RunningValueNorm", "ValueNorm"]


class ValueNorm(nn.Module, metaclass=ABCMeta):
    """Base of the value normalisers.

    Tensors given to :meth:`update`, :meth:`normalize` and :meth:`denormalize` end with
    ``shape`` (the value's own shape, usually ``(1,)``); :meth:`update` reduces every
    leading dimension (batch, time, agents). Statistics are buffers, so they follow
    ``.to()`` and ``state_dict()``.

    Subclasses implement ``update``, ``normalize``, ``denormalize`` and ``scale``. As in
    TorchRL, a subclass without ``scale`` still builds, with a ``DeprecationWarning``, and
    its ``scale()`` raises ``NotImplementedError``.

    Keyword Args:
        shape (int or tuple of int): trailing shape of the values. Defaults to ``1``.
        epsilon (float): floor of the variance. Defaults to ``1e-5``.
        device (torch.device, optional): device of the statistics.

    Examples:
        >>> import torch
        >>> from rl.modules import RunningValueNorm, ValueNorm
        >>> isinstance(RunningValueNorm(shape=1), ValueNorm)
        True
    """

    shape: tuple[int, ...]

    def __init__(
        self,
        *,
        shape: int | tuple[int, ...] = 1,
        epsilon: float = 1e-5,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        self.shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self.epsilon = epsilon
        self._device = device
        if type(self).scale is ValueNorm.scale:
            warnings.warn(
                f"{type(self).__name__} does not define scale(); it will be required in a "
                "later release (define it to keep the class instantiable)",
                DeprecationWarning,
                stacklevel=2,
            )

    @abstractmethod
    def update(self, value_target: torch.Tensor) -> None:
        """Fold a batch of targets ``[*B, *shape]`` into the statistics."""

    @abstractmethod
    def normalize(self, value_target: torch.Tensor) -> torch.Tensor:
        """Targets ``[*B, *shape]`` on the normalised scale."""

    @abstractmethod
    def denormalize(self, normalised_value: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`normalize`."""

    def scale(self) -> torch.Tensor:
        """The divisor :meth:`normalize` applies, ``[*shape]``."""
        raise NotImplementedError(
            f"{type(self).__name__} does not define scale(), which rescaling advantages needs"
        )

    def _reduced_dims(self, value_target: torch.Tensor) -> tuple[int, ...]:
        """The leading dimensions of ``value_target`` (checked to end with ``shape``)."""
        n = len(self.shape)
        if value_target.ndim < n or tuple(value_target.shape[-n:]) != self.shape:
            raise ValueError(
                f"{type(self).__name__} was built with shape={self.shape}, but the value_target "
                f"has trailing shape {tuple(value_target.shape[-n:])} (full shape "
                f"{tuple(value_target.shape)})"
            )
        return tuple(range(value_target.ndim - n))


class PopArtValueNorm(ValueNorm):
    """Debiased exponential moving averages of the targets' mean and mean square.

    After each ``update(x)``: ``m <- beta * m + (1 - beta) * mean(x)``, ``s <- beta * s +
    (1 - beta) * mean(x**2)``, ``d <- beta * d + (1 - beta)``; the statistics are
    ``mean = m / d``, ``var = max(s / d - mean**2, epsilon)`` (``d`` floored at
    ``epsilon``), so the zero start does not bias the early estimates.

    Keyword Args:
        shape (int or tuple of int): trailing shape of the values. Defaults to ``1``.
        beta (float): decay of the averages. Defaults to ``0.99999`` (MAPPO's).
        epsilon (float): floor of the variance and of ``d``. Defaults to ``1e-5``.
        device (torch.device, optional): device of the statistics.

    Examples:
        >>> import torch
        >>> vn = PopArtValueNorm(shape=1)
        >>> vn.update(torch.tensor([[1.0], [3.0]]))
        >>> vn.normalize(torch.tensor([[3.0]])).round(decimals=3)
        tensor([[1.]])
        >>> vn.denormalize(torch.tensor([[1.0]])).round(decimals=3)
        tensor([[3.]])
    """

    def __init__(
        self,
        *,
        shape: int | tuple[int, ...] = 1,
        beta: float = 0.99999,
        epsilon: float = 1e-5,
        device: torch.device | None = None,
    ) -> None:
        super().__init__(shape=shape, epsilon=epsilon, device=device)
        self.beta = beta
        self.register_buffer("running_mean", torch.zeros(self.shape, device=device))
        self.register_buffer("running_mean_sq", torch.zeros(self.shape, device=device))
        self.register_buffer("debiasing_term", torch.zeros((), device=device))

    def _running_stats(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The debiased ``(mean, var)``, each ``[*shape]``."""
        weight = self.debiasing_term.clamp_min(self.epsilon)
        mean = self.running_mean / weight
        var = (self.running_mean_sq / weight - mean.square()).clamp_min(self.epsilon)
        return mean, var

    def _mean_std(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, sqrt(var))``, computed once per state of the statistics.

        A loss normalises its target and its prediction with the same statistics: the
        second call reuses the first's. The cache is keyed on the buffers themselves and
        their version counters, so an update, a ``load_state_dict``, a ``.to()`` or any
        in-place change of a buffer recomputes them.
        """
        if torch.compiler.is_compiling() or torch.is_inference_mode_enabled():
            # nothing cached from or for inference mode: its tensors cannot be saved for
            # a later backward
            mean, var = self._running_stats()
            return mean, var.sqrt()
        buffers = (self.running_mean, self.running_mean_sq, self.debiasing_term)
        versions = tuple(b._version for b in buffers)
        cached = self.__dict__.get("_stats_cache")
        if (
            cached is not None
            and cached[1] == versions
            and all(b is c for b, c in zip(buffers, cached[0], strict=True))
        ):
            return cached[2]
        with torch.no_grad():
            mean, var = self._running_stats()
            stats = (mean, var.sqrt())
        self.__dict__["_stats_cache"] = (buffers, versions, stats)
        return stats

    @torch.no_grad()
    def update(self, value_target: torch.Tensor) -> None:
        """Fold ``value_target`` ``[*B, *shape]`` into the averages."""
        dims = self._reduced_dims(value_target)
        x = value_target.detach()
        w = 1.0 - self.beta
        self.running_mean.mul_(self.beta).add_(x.mean(dims) if dims else x, alpha=w)
        self.running_mean_sq.mul_(self.beta).add_(
            x.square().mean(dims) if dims else x.square(), alpha=w
        )
        self.debiasing_term.mul_(self.beta).add_(w)

    def normalize(self, value_target: torch.Tensor) -> torch.Tensor:
        """``(value_target - mean) / std``."""
        mean, std = self._mean_std()
        return (value_target - mean) / std

    def denormalize(self, normalised_value: torch.Tensor) -> torch.Tensor:
        """``normalised_value * std + mean``."""
        mean, std = self._mean_std()
        return normalised_value * std + mean

    def scale(self) -> torch.Tensor:
        """The standard deviation ``[*shape]``."""
        return self._running_stats()[1].sqrt()


class RunningValueNorm(ValueNorm):
    """The exact mean and (population) variance of every target seen, without decay.

    Batches are merged with Chan et al.'s parallel update of the count, the mean and the
    sum of squared deviations ``m2``; ``var = max(m2 / count, epsilon)``.

    Keyword Args:
        shape (int or tuple of int): trailing shape of the values. Defaults to ``1``.
        epsilon (float): floor of the variance. Defaults to ``1e-5``.
        device (torch.device, optional): device of the statistics.

    Examples:
        >>> import torch
        >>> vn = RunningValueNorm(shape=1)
        >>> vn.update(torch.full((10, 1), 1.0)); vn.update(torch.full((10, 1), 5.0))
        >>> vn.mean, vn.scale()
        (tensor([3.]), tensor([2.]))
    """

    def __init__(
        self,
        *,
        shape: int | tuple[int, ...] = 1,
        epsilon: float = 1e-5,
        device: torch.device | None = None,
    ) -> None:
        super().__init__(shape=shape, epsilon=epsilon, device=device)
        self.register_buffer("mean", torch.zeros(self.shape, device=device))
        self.register_buffer("m2", torch.zeros(self.shape, device=device))
        self.register_buffer("count", torch.zeros((), device=device))

    @torch.no_grad()
    def update(self, value_target: torch.Tensor) -> None:
        """Fold ``value_target`` ``[*B, *shape]`` into the statistics."""
        dims = self._reduced_dims(value_target)
        x = value_target.detach()
        if dims:
            # a Python count: no device tensor, no sync
            n = float(math.prod(x.shape[d] for d in dims))
            batch_mean = x.mean(dims)
            batch_m2 = x.var(dims, correction=0) * n
        else:
            n, batch_mean, batch_m2 = 1.0, x, torch.zeros_like(x)
        total = self.count + n
        delta = batch_mean - self.mean
        self.m2.add_(batch_m2 + delta.square() * (self.count * n / total))
        self.mean.add_(delta * (n / total))
        self.count.copy_(total)

    def _var(self) -> torch.Tensor:
        return (self.m2 / self.count.clamp_min(1.0)).clamp_min(self.epsilon)

    def normalize(self, value_target: torch.Tensor) -> torch.Tensor:
        """``(value_target - mean) / std``."""
        return (value_target - self.mean) / self._var().sqrt()

    def denormalize(self, normalised_value: torch.Tensor) -> torch.Tensor:
        """``normalised_value * std + mean``."""
        return normalised_value * self._var().sqrt() + self.mean

    def scale(self) -> torch.Tensor:
        """The standard deviation ``[*shape]``."""
        return self._var().sqrt()


class PercentileValueNorm(ValueNorm):
    """Moving averages of a low and a high quantile; scale ``max(min_scale, high - low)``.

    Each ``update(x)`` moves ``low`` and ``high`` a fraction ``rate`` of the way to the
    batch's ``quantiles``. The floor ``min_scale`` shrinks large returns without blowing up
    small or noisy ones (DreamerV3's return normalisation). By default ``normalize`` only
    divides (advantages are centred already); ``center=True`` also subtracts ``low``,
    mapping the tracked range onto ``[0, 1]``.

    Keyword Args:
        shape (int or tuple of int): trailing shape of the values. Defaults to ``1``.
        quantiles (tuple of float): the low and high quantiles, ``0 <= low < high <= 1``.
            Defaults to ``(0.05, 0.95)``.
        rate (float): step of the averages towards the batch quantiles, in ``[0, 1]``.
            Defaults to ``0.01``.
        min_scale (float): floor of the scale, positive. Defaults to ``1.0``.
        center (bool): subtract ``low`` in :meth:`normalize`. Defaults to ``False``.
        epsilon (float): accepted like the other normalisers; ``min_scale`` bounds the
            divisor. Defaults to ``1e-5``.
        device (torch.device, optional): device of the statistics.

    Raises:
        ValueError: for quantiles, a rate or a min_scale out of range.

    Examples:
        >>> import torch
        >>> vn = PercentileValueNorm(shape=1, rate=1.0)
        >>> vn.update(torch.linspace(0.0, 100.0, 101).unsqueeze(-1))
        >>> vn.scale(), vn.normalize(torch.tensor([45.0]))
        (tensor([90.]), tensor([0.5000]))
    """

    def __init__(
        self,
        *,
        shape: int | tuple[int, ...] = 1,
        quantiles: tuple[float, float] = (0.05, 0.95),
        rate: float = 0.01,
        min_scale: float = 1.0,
        center: bool = False,
        epsilon: float = 1e-5,
        device: torch.device | None = None,
    ) -> None:
        super().__init__(shape=shape, epsilon=epsilon, device=device)
        low, high = quantiles
        if not 0 <= low < high <= 1:
            raise ValueError(f"quantiles must satisfy 0 <= low < high <= 1, got {quantiles}")
        if not 0 <= rate <= 1:
            raise ValueError(f"rate must be in [0, 1], got {rate}")
        if min_scale <= 0:
            raise ValueError(f"min_scale must be positive, got {min_scale}")
        self.quantiles = (float(low), float(high))
        self.rate = rate
        self.min_scale = min_scale
        self.center = center
        self.register_buffer("low", torch.zeros(self.shape, device=device))
        self.register_buffer("high", torch.zeros(self.shape, device=device))
        self.register_buffer("_q", torch.tensor(self.quantiles, device=device), persistent=False)

    @torch.no_grad()
    def update(self, value_target: torch.Tensor) -> None:
        """Move ``low`` and ``high`` towards the quantiles of ``value_target`` ``[*B, *shape]``."""
        self._reduced_dims(value_target)
        flat = value_target.detach().reshape(-1, *self.shape).to(self.low.dtype)
        q = self._q.to(device=flat.device, dtype=flat.dtype)
        batch_low, batch_high = torch.quantile(flat, q, dim=0)
        self.low.lerp_(batch_low, self.rate)
        self.high.lerp_(batch_high, self.rate)

    def normalize(self, value_target: torch.Tensor) -> torch.Tensor:
        """``value_target / scale`` (``(value_target - low) / scale`` with ``center``)."""
        if self.center:
            return (value_target - self.low) / self.scale()
        return value_target / self.scale()

    def denormalize(self, normalised_value: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`normalize`."""
        if self.center:
            return normalised_value * self.scale() + self.low
        return normalised_value * self.scale()

    def scale(self) -> torch.Tensor:
        """``max(min_scale, high - low)``, ``[*shape]``."""
        return (self.high - self.low).clamp_min(self.min_scale)
