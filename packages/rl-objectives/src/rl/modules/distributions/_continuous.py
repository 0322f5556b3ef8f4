"""Continuous distributions: IndependentNormal, TruncatedNormal, Delta and TanhDelta (and
the removed NormalParamWrapper, which says what replaces it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from tensordict.nn.distributions import Delta
from tensordict.nn.distributions import TruncatedNormal as _TruncatedNormal
from torch import distributions as D
from torch import nn
from torch.distributions import constraints

from . import _utils
from ._utils import (
    SafeTanhTransform,
    as_tensor_like,
    check_broadcast,
    check_low_high,
    safe_tanh,
)

__all__ = ["Delta", "IndependentNormal", "NormalParamWrapper", "TanhDelta", "TruncatedNormal"]


def _scale_tensor(scale, loc: torch.Tensor) -> torch.Tensor:
    if callable(scale) and not isinstance(scale, torch.Tensor):
        scale = scale(loc)
    return as_tensor_like(scale, loc)


class NormalParamWrapper(nn.Module):
    """TorchRL's removed wrapper that split a network's output into ``loc`` and ``scale``.

    TorchRL 0.14.1 keeps the name only to tell its users what replaces it, and so does rl:
    building one raises. Put :class:`tensordict.nn.NormalParamExtractor` after the network
    instead; it takes the same ``scale_mapping`` and ``scale_lb``.

    Args:
        operator: the network whose last dimension held ``loc`` and the raw scale.
        scale_mapping: how the raw scale became positive (see
            :func:`rl.modules.utils.mappings`).
        scale_lb: the lower bound of the scale.

    Raises:
        RuntimeError: always, naming ``tensordict.nn.NormalParamExtractor``.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tensordict.nn import NormalParamExtractor
        >>> net = nn.Sequential(nn.Linear(3, 4), NormalParamExtractor())  # not NormalParamWrapper
        >>> loc, scale = net(torch.zeros(3))
        >>> loc.shape, bool((scale > 0).all())
        (torch.Size([2]), True)
    """

    def __init__(
        self,
        operator: nn.Module,
        scale_mapping: str = "biased_softplus_1.0",
        scale_lb: float = 1e-4,
    ) -> None:
        raise RuntimeError(
            "NormalParamWrapper has been deprecated in favor of "
            "`tensordict.nn.NormalParamExtractor`: build "
            f"nn.Sequential(operator, NormalParamExtractor(scale_mapping={scale_mapping!r}, "
            f"scale_lb={scale_lb!r})) instead of NormalParamWrapper(operator, ...)"
        )


class IndependentNormal(D.Independent):
    """A diagonal Normal whose ``event_dim`` last dimensions form one event.

    With ``tanh_loc=True`` the location is first squashed to
    ``upscale * tanh(loc / upscale)``, which keeps it in ``[-upscale, upscale]``.

    Args:
        loc (torch.Tensor): the mean, shape ``[*batch, *event]``.
        scale (torch.Tensor, float or callable): the standard deviation, of a shape that
            broadcasts with ``loc``; a callable is called on ``loc``.
        upscale (float, optional): see ``tanh_loc``. Defaults to ``5.0``.
        tanh_loc (bool, optional): squash the location. Defaults to ``False``.
        event_dim (int, optional): number of trailing event dimensions. Defaults to ``1``.
        **kwargs: passed to :class:`torch.distributions.Normal`.

    Raises:
        ValueError: if ``loc`` and ``scale`` do not broadcast.

    Examples:
        >>> import torch
        >>> from rl.modules import IndependentNormal
        >>> dist = IndependentNormal(torch.zeros(4, 2), torch.ones(4, 2))
        >>> dist.log_prob(torch.zeros(4, 2)).shape
        torch.Size([4])
        >>> dist.deterministic_sample.shape
        torch.Size([4, 2])
    """

    num_params: int = 2

    def __init__(
        self,
        loc: torch.Tensor,
        scale: torch.Tensor | float | Callable[[torch.Tensor], torch.Tensor],
        upscale: float = 5.0,
        tanh_loc: bool = False,
        event_dim: int = 1,
        **kwargs,
    ) -> None:
        self.tanh_loc = tanh_loc
        self.upscale = upscale
        self._event_dim = event_dim
        self._kwargs = kwargs
        self.update(loc, scale)

    def update(self, loc: torch.Tensor, scale) -> None:
        """Replaces the parameters (``tanh_loc`` applies to the new ``loc``)."""
        if self.tanh_loc:
            loc = self.upscale * (loc / self.upscale).tanh()
        scale = _scale_tensor(scale, loc)
        shape = check_broadcast(type(self).__name__, loc=loc, scale=scale)
        if len(shape) < self._event_dim:
            raise ValueError(
                f"{type(self).__name__} got event_dim={self._event_dim} but its "
                f"parameters have shape {tuple(shape)}"
            )
        super().__init__(D.Normal(loc, scale, **self._kwargs), self._event_dim)

    @property
    def mode(self) -> torch.Tensor:
        return self.base_dist.mean

    @property
    def deterministic_sample(self) -> torch.Tensor:
        """The mean."""
        return self.base_dist.mean


class TruncatedNormal(D.Independent):
    """A Normal truncated to ``[low, high]``, with its last dimension as the event.

    Values outside ``[low, high]`` have log-probability ``-inf``; values on the bounds are
    scored a hair inside them. :attr:`deterministic_sample` is the mean of the truncated
    distribution and :attr:`mode` is ``loc`` clamped to the bounds.

    Args:
        loc (torch.Tensor): mean of the Normal before truncation, shape ``[*batch, d]``.
        scale (torch.Tensor): its standard deviation, of a shape that broadcasts.
        upscale (float, optional): with ``tanh_loc=True``, ``loc`` becomes
            ``upscale * tanh(loc / upscale)``. Defaults to ``5.0``.
        low (torch.Tensor or float, optional): lower bound. Defaults to ``-1.0``.
        high (torch.Tensor or float, optional): upper bound. Defaults to ``1.0``.
        tanh_loc (bool, optional): squash the location. Defaults to ``False``.

    Raises:
        ValueError: if ``high <= low`` somewhere, or the parameters do not broadcast.

    Examples:
        >>> import torch
        >>> from rl.modules import TruncatedNormal
        >>> dist = TruncatedNormal(torch.zeros(3, 2), torch.ones(3, 2))
        >>> sample = dist.sample()
        >>> bool(((sample >= -1) & (sample <= 1)).all())
        True
        >>> dist.log_prob(torch.full((3, 2), 2.0))
        tensor([-inf, -inf, -inf])
    """

    num_params: int = 2
    arg_constraints = {
        "loc": constraints.real,
        "scale": constraints.greater_than(1e-6),
    }

    def __init__(
        self,
        loc: torch.Tensor,
        scale: torch.Tensor,
        upscale: torch.Tensor | float = 5.0,
        low: torch.Tensor | float = -1.0,
        high: torch.Tensor | float = 1.0,
        tanh_loc: bool = False,
    ) -> None:
        if not torch.compiler.is_compiling():
            check_low_high(type(self).__name__, low, high)
        self.tanh_loc = tanh_loc
        self.upscale = upscale
        self.low = as_tensor_like(low, loc)
        self.high = as_tensor_like(high, loc)
        self.update(loc, scale)

    @property
    def device(self) -> torch.device:
        """Where the distribution's parameters live."""
        return self.base_dist.loc.device

    def update(self, loc: torch.Tensor, scale: torch.Tensor) -> None:
        """Replaces the parameters (``tanh_loc`` applies to the new ``loc``)."""
        if self.tanh_loc:
            loc = (loc / self.upscale).tanh() * self.upscale
        scale = _scale_tensor(scale, loc)
        shape = check_broadcast(
            type(self).__name__, loc=loc, scale=scale, low=self.low, high=self.high
        )
        if len(shape) < 1:
            raise ValueError(
                f"{type(self).__name__} needs parameters with at least one dimension "
                f"(the event), got shape {tuple(shape)}"
            )
        self.loc = loc.expand(shape)
        self.scale = scale.expand(shape)
        base = _TruncatedNormal(
            self.loc, self.scale, a=self.low.expand(shape), b=self.high.expand(shape)
        )
        super().__init__(base, 1, validate_args=False)

    @property
    def mode(self) -> torch.Tensor:
        return torch.maximum(torch.minimum(self.loc, self.high), self.low)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        """The mean of the truncated distribution."""
        return self.mean

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        outside = ((value < self.low) | (value > self.high)).any(-1)
        tiny = torch.finfo(value.dtype).resolution
        inside = torch.maximum(
            torch.minimum(value, self.high - tiny * self.high.abs().clamp_min(1)),
            self.low + tiny * self.low.abs().clamp_min(1),
        )
        lp = super().log_prob(inside)
        return lp.masked_fill(outside, float("-inf"))


class TanhDelta(D.Distribution):
    """A Delta at ``mid + half * tanh(param)``: the deterministic policy of DDPG and TD3.

    ``mid = (high + low) / 2`` and ``half = (high - low) / 2``. :meth:`sample`,
    :meth:`rsample`, :attr:`mode`, :attr:`mean` and :attr:`deterministic_sample` return
    that point (``rsample`` with gradients); :meth:`log_prob` is ``inf`` there (within
    ``atol``/``rtol``) and ``-inf`` elsewhere.

    Args:
        param (torch.Tensor): the pre-tanh value, shape ``[*batch, *event]``.
        low (torch.Tensor or float, optional): lower bound. Defaults to ``-1.0``.
        high (torch.Tensor or float, optional): upper bound. Defaults to ``1.0``.
        event_dims (int, optional): number of trailing event dimensions. Defaults to ``1``.
        atol (float, optional): absolute tolerance of :meth:`log_prob`. Defaults to ``1e-6``.
        rtol (float, optional): relative tolerance of :meth:`log_prob`. Defaults to ``1e-6``.
        safe (bool, optional): clamp ``tanh`` away from ``+-1``. Defaults to ``True``.

    Raises:
        ValueError: if ``high <= low`` somewhere, or ``event_dims`` exceeds ``param.ndim``.

    Examples:
        >>> import torch
        >>> from rl.modules import TanhDelta
        >>> dist = TanhDelta(torch.zeros(2, 3), low=0.0, high=2.0)
        >>> dist.sample()
        tensor([[1., 1., 1.],
                [1., 1., 1.]])
        >>> dist.log_prob(torch.ones(2, 3))
        tensor([inf, inf])
    """

    arg_constraints: dict = {}
    has_rsample = True

    def __init__(
        self,
        param: torch.Tensor,
        low: torch.Tensor | float = -1.0,
        high: torch.Tensor | float = 1.0,
        event_dims: int = 1,
        atol: float = 1e-6,
        rtol: float = 1e-6,
        safe: bool = True,
    ) -> None:
        if not _utils.traced(param):  # no host read under compile or a CUDA graph's capture
            check_low_high(type(self).__name__, low, high)
        if event_dims > param.ndim:
            raise ValueError(
                f"{type(self).__name__} got event_dims={event_dims} but param has shape "
                f"{tuple(param.shape)}"
            )
        self.low = as_tensor_like(low, param)
        self.high = as_tensor_like(high, param)
        self.atol = atol
        self.rtol = rtol
        self.safe = safe
        self._event_dims = event_dims
        self.update(param)

    def update(self, param: torch.Tensor) -> None:
        """Replaces ``param``."""
        shape = check_broadcast(type(self).__name__, param=param, low=self.low, high=self.high)
        self.param = param.expand(shape)
        split = len(shape) - self._event_dims
        super().__init__(shape[:split], shape[split:], validate_args=False)

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self) -> constraints.Constraint:
        return constraints.interval(self.low, self.high)

    @property
    def mode(self) -> torch.Tensor:
        y = safe_tanh(self.param) if self.safe else self.param.tanh()
        return (self.high + self.low) / 2 + (self.high - self.low) / 2 * y

    @property
    def mean(self) -> torch.Tensor:
        return self.mode

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return self.mode

    @property
    def transforms(self) -> list[D.Transform]:
        """The distribution seen as a transformed :class:`Delta` (TorchRL's layout):
        ``[param -> mode]``, a (safe) tanh then the affine map to ``[low, high]``; its
        ``inv`` maps a point back to ``param``."""
        tanh = SafeTanhTransform() if self.safe else D.TanhTransform()
        affine = D.AffineTransform((self.high + self.low) / 2, (self.high - self.low) / 2)
        return [D.ComposeTransform([tanh, affine])]

    @property
    def base_dist(self) -> Delta:
        """The :class:`Delta` at ``param`` that :attr:`transforms` map to this one."""
        split = self.param.ndim - self._event_dims
        return Delta(
            self.param,
            atol=self.atol,
            rtol=self.rtol,
            batch_shape=self.param.shape[:split],
            event_shape=self.param.shape[split:],
        )

    def rsample(self, sample_shape: torch.Size | Sequence[int] = ()) -> torch.Tensor:
        value = self.mode
        return value.expand(*sample_shape, *value.shape)

    def sample(self, sample_shape: torch.Size | Sequence[int] = ()) -> torch.Tensor:
        with torch.no_grad():
            return self.rsample(sample_shape)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        point = self.mode.expand_as(value)
        is_equal = (value - point).abs() <= self.atol + self.rtol * point.abs()
        for _ in range(self._event_dims):
            is_equal = is_equal.all(-1)
        out = torch.full_like(is_equal, -np.inf, dtype=value.dtype)
        return out.masked_fill(is_equal, np.inf)

    def entropy(self) -> torch.Tensor:
        """``-inf`` (a point mass); shape ``batch_shape``."""
        return torch.full(
            self.batch_shape, -np.inf, dtype=self.param.dtype, device=self.param.device
        )
