"""TanhNormal: a Normal squashed by tanh and rescaled to ``[low, high]``."""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence
from numbers import Number

import torch
import torch.nn.functional as F
from torch import distributions as D
from torch.distributions import constraints

from . import _utils
from ._utils import (
    as_tensor_like,
    check_broadcast,
    check_low_high,
    safe_atanh,
    safe_tanh,
    sum_rightmost,
    tanh_log_abs_det_jacobian,
)

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
_LOG2 = math.log(2.0)
# fixed-point iterations of TanhNormal.mode (linear convergence; 1e-6 for 2 scale^2 < 0.8)
_MODE_ITERATIONS = 64


def _all_unit(low, high, loc: torch.Tensor) -> bool:
    """Whether the bounds are -1 and 1 everywhere (decided eagerly; not when traced)."""
    if _utils.traced(loc):
        return False
    low = torch.as_tensor(low)
    high = torch.as_tensor(high)
    return bool((low == -1).all()) and bool((high == 1).all())


def _derive_bounds(low, high, loc: torch.Tensor) -> tuple:
    """The bounds as TanhNormal stores them, computed from scratch (no validation):
    ``(numeric, low, high, trivial, mid, half, log_half)``, the last five Python floats
    for numeric bounds, else tensors on loc's device with loc's dtype."""
    # Python-number bounds stay numbers: no tensor op for the default [-1, 1] (float
    # first: a Python float skips the ABC check of Number).
    numeric = isinstance(low, (float, Number)) and isinstance(high, (float, Number))
    if not numeric and _all_unit(low, high, loc):
        # bounds of -1 and 1 everywhere leave tanh alone, as in TorchRL: the sample
        # keeps loc's shape instead of broadcasting to the bounds' shape
        low, high, numeric = -1.0, 1.0, True
    if numeric:
        low, high = float(low), float(high)
        mid, half = (high + low) / 2, (high - low) / 2
        return True, low, high, low == -1.0 and high == 1.0, mid, half, math.log(half)
    low = as_tensor_like(low, loc)
    high = as_tensor_like(high, loc)
    mid, half = (high + low) / 2, (high - low) / 2  # in this order: the same compiled graph
    return False, low, high, False, mid, half, half.log()


# Tensor bounds that passed check_low_high, with what _derive_bounds made of them. An
# actor passes the same low / high tensors (its spec's) to every TanhNormal it builds,
# once per environment step in a collector and once per update in a loss; validating them
# and deriving mid / half / log(half) again each time costs three host reads (.all())
# and about ten small tensor ops, more than the sample itself costs. Keyed by
# (id(low), id(high), loc's dtype, loc's device, the device's current stream, inference
# mode); an entry holds weak references to low and high and their version counters, so it
# is used only for the very same tensors, unchanged since: an in-place write to a bound
# (through torch, which bumps its version) makes the next construction validate and
# derive again, and a bad value raises there as it always did (a failed check is never
# stored). Writes that bypass the version counter (through ``.data`` or a NumPy view) are
# not seen, as autograd does not see them either. Only bounds that need no conversion
# (loc's dtype and device already) are stored, and never the bounds themselves: each
# distribution holds the caller's tensors as before (no copy shared between live
# distributions), and an entry dies with its bounds.
_BOUNDS_CACHE: dict[tuple, tuple] = {}
_BOUNDS_CACHE_SIZE = 64


def _bounds_key(low, high, loc: torch.Tensor) -> tuple | None:
    """The cache key of ``low`` / ``high`` for ``loc``, or ``None`` where they are not cached.

    Cached: plain tensors outside autograd (derived values of bounds that require grad
    carry a graph) that track their version (inference tensors do not), outside dispatch
    modes (fake tensors and tracers must see every op), for a ``loc`` on the CPU or a CUDA
    device. On CUDA the derived tensors are written on the current stream, so an entry is
    reused on that stream only, and never while a CUDA graph is captured (the graph would
    read tensors it does not own; the checks' host reads fail there, as they always did).
    Tensors made in inference mode cannot be saved for backward outside it, so entries
    made inside it are kept apart.
    """
    if (
        type(low) is not torch.Tensor
        or type(high) is not torch.Tensor
        or low.requires_grad
        or high.requires_grad
        or low.is_inference()
        or high.is_inference()
        or torch._C._len_torch_dispatch_stack()
        or torch.jit.is_tracing()  # a trace records the ops on the bounds, not their values
        or _functorch_active()
    ):
        return None
    device = loc.device
    if device.type == "cpu":
        stream = None
    elif device.type == "cuda" and not torch.cuda.is_current_stream_capturing():
        stream = torch.cuda.current_stream(device).stream_id
    else:  # other devices: not cached
        return None
    return id(low), id(high), loc.dtype, device, stream, torch.is_inference_mode_enabled()


def _functorch_active() -> bool:
    """Whether a ``torch.func`` transform is running: derived bounds made inside one are
    its wrapped tensors, not to be kept past it."""
    peek = getattr(torch._C._functorch, "peek_interpreter_stack", None)
    return peek is None or peek() is not None


def _cached_bounds(key: tuple, low: torch.Tensor, high: torch.Tensor) -> tuple | None:
    """The stored bounds under ``key`` if they were derived from ``low`` and ``high`` as
    they are now, else ``None``."""
    entry = _BOUNDS_CACHE.get(key)
    if entry is None:
        return None
    low_ref, high_ref, versions, bounds = entry
    if low_ref() is not low or high_ref() is not high:  # a recycled id
        return None
    if (low._version, high._version) != versions:
        return None
    if bounds[0]:  # unit bounds, stored as numbers
        return bounds
    return (False, low, high, *bounds[3:])  # the caller's own bounds, not kept in the entry


def _store_bounds(key: tuple, low: torch.Tensor, high: torch.Tensor, bounds: tuple) -> None:
    """Stores ``bounds`` under ``key``: what was derived from ``low`` and ``high``, without
    them. Bounds converted to loc's dtype or device are not stored (each distribution
    gets its own copy, as it always did)."""
    if not bounds[0]:
        if bounds[1] is not low or bounds[2] is not high:
            return
        bounds = (False, None, None, *bounds[3:])
    if len(_BOUNDS_CACHE) >= _BOUNDS_CACHE_SIZE:
        _BOUNDS_CACHE.clear()

    # the entry dies with either bound (the dict bound now: module globals may be gone
    # when a bound dies at interpreter exit)
    def drop(_ref, key=key, cache=_BOUNDS_CACHE) -> None:
        cache.pop(key, None)

    versions = (low._version, high._version)
    _BOUNDS_CACHE[key] = (weakref.ref(low, drop), weakref.ref(high, drop), versions, bounds)


class TanhNormal(D.Distribution):
    """A Normal distribution squashed by ``tanh`` and rescaled to ``[low, high]``.

    A sample is ``mid + half * tanh(x)`` with ``x ~ Normal(loc, scale)``,
    ``mid = (high + low) / 2`` and ``half = (high - low) / 2``: the action distribution of
    SAC (`Haarnoja et al., 2018 <https://arxiv.org/abs/1801.01290>`_). The log-probability
    subtracts the log-Jacobian of the squashing, computed as
    ``log(1 - tanh(x)^2) = 2 (log 2 - x - softplus(-2x))``; with ``safe_tanh=True`` the
    pre-image of a value is taken at a clamped ``tanh`` value so that the log-probability
    stays finite at ``low`` and ``high`` and for extreme ``loc`` and ``scale``.

    There is no closed form for the mean, the mode or the entropy: :attr:`mean` raises
    ``NotImplementedError`` (as in TorchRL; tensordict's ``InteractionType.MEAN`` then
    averages samples), :attr:`mode` is found numerically and :meth:`entropy` is a
    Monte-Carlo estimate. :attr:`deterministic_sample` is ``mid + half * tanh(loc)``.

    Args:
        loc (torch.Tensor): location of the Normal, shape ``[*batch, *event]``.
        scale (torch.Tensor, float or callable): standard deviation of the Normal, of a
            shape that broadcasts with ``loc``; a callable is called on ``loc`` (for
            example ``torch.ones_like``).
        upscale (float, optional): with ``tanh_loc=True``, ``loc`` becomes
            ``upscale * tanh(loc / upscale)``. Defaults to ``5.0``.
        low (torch.Tensor or float, optional): lower bound of the support. Defaults to
            ``-1.0``.
        high (torch.Tensor or float, optional): upper bound of the support. Defaults to
            ``1.0``.
        event_dims (int, optional): number of trailing dimensions of ``loc`` that form one
            event (summed in :meth:`log_prob`). Defaults to ``min(1, loc.ndim)``.
        tanh_loc (bool, optional): squash ``loc`` as described for ``upscale``. Defaults
            to ``False``.
        safe_tanh (bool, optional): clamp ``tanh`` values away from ``+-1`` so that they
            can be inverted. Defaults to ``True``.

    Raises:
        ValueError: if ``high <= low`` somewhere, or ``loc`` and ``scale`` do not
            broadcast, or ``event_dims`` exceeds ``loc.ndim``. Tensor bounds of loc's
            dtype and device are checked (and ``mid`` / ``half`` derived) once, then
            again only after an in-place write to them (an actor passes the same bounds
            at every call); bounds converted to loc's dtype or device, at every
            construction.

    Examples:
        >>> import torch
        >>> from rl.modules import TanhNormal
        >>> dist = TanhNormal(torch.zeros(3, 2), torch.ones(3, 2), low=-2.0, high=2.0)
        >>> action = dist.rsample()
        >>> action.shape, dist.log_prob(action).shape
        (torch.Size([3, 2]), torch.Size([3]))
        >>> dist.deterministic_sample
        tensor([[0., 0.],
                [0., 0.],
                [0., 0.]])
        >>> bool(dist.log_prob(torch.full((3, 2), 2.0)).isfinite().all())
        True
    """

    arg_constraints = {
        "loc": constraints.real,
        "scale": constraints.greater_than(1e-6),
    }
    has_rsample = True
    # entropy() is a Monte Carlo estimate (see has_analytic_entropy)
    analytic_entropy = False
    num_params: int = 2

    def __init__(
        self,
        loc: torch.Tensor,
        scale: torch.Tensor | float | Callable[[torch.Tensor], torch.Tensor],
        upscale: torch.Tensor | Number = 5.0,
        low: torch.Tensor | Number = -1.0,
        high: torch.Tensor | Number = 1.0,
        event_dims: int | None = None,
        tanh_loc: bool = False,
        safe_tanh: bool = True,
    ) -> None:
        if not isinstance(loc, torch.Tensor):
            loc = torch.as_tensor(loc, dtype=torch.get_default_dtype())
        # tensor bounds already validated and derived (see _BOUNDS_CACHE); under
        # torch.compile or a CUDA graph's capture the bounds are neither checked nor
        # cached (no host read)
        key = bounds = None
        compiling = _utils.traced(loc)
        if not compiling and isinstance(low, torch.Tensor) and isinstance(high, torch.Tensor):
            key = _bounds_key(low, high, loc)
            if key is not None:
                bounds = _cached_bounds(key, low, high)
        if bounds is None and not compiling:
            check_low_high(type(self).__name__, low, high)
        if event_dims is None:
            event_dims = min(1, loc.ndim)
        if event_dims > loc.ndim:
            raise ValueError(
                f"{type(self).__name__} got event_dims={event_dims} but loc has only "
                f"{loc.ndim} dimensions (shape {tuple(loc.shape)})"
            )
        if bounds is None:
            bounds = _derive_bounds(low, high, loc)
            if key is not None:
                _store_bounds(key, low, high, bounds)
        (
            self._numeric_bounds,
            self._low,
            self._high,
            self._trivial_bounds,
            self._mid,
            self._half,
            self._log_half,
        ) = bounds
        self.upscale = upscale
        self.tanh_loc = tanh_loc
        self.safe_tanh = safe_tanh
        self._event_dims = event_dims
        self.update(loc, scale)

    def update(
        self,
        loc: torch.Tensor,
        scale: torch.Tensor | float | Callable[[torch.Tensor], torch.Tensor],
    ) -> None:
        """Replaces the parameters (``tanh_loc`` applies to the new ``loc``)."""
        if self.tanh_loc:
            loc = (loc / self.upscale).tanh() * self.upscale
        if callable(scale) and not isinstance(scale, torch.Tensor):
            scale = scale(loc)
        scale = as_tensor_like(scale, loc)
        shape = loc.shape
        # equal shapes (an actor's loc and scale; bounds of the event's shape) need no
        # broadcast, as check_broadcast would find, without building its arguments
        if self._numeric_bounds:
            if scale.shape != shape:
                shape = check_broadcast(type(self).__name__, loc=loc, scale=scale)
        elif not (scale.shape == shape == self._low.shape == self._high.shape):
            shape = check_broadcast(
                type(self).__name__, loc=loc, scale=scale, low=self._low, high=self._high
            )
        if loc.shape != shape:
            loc = loc.expand(shape)
        if scale.shape != shape:
            scale = scale.expand(shape)
        self.loc = loc
        self.scale = scale
        split = len(shape) - self._event_dims
        super().__init__(shape[:split], shape[split:], validate_args=False)

    @property
    def low(self) -> torch.Tensor:
        """Lower bound of the support, as a tensor."""
        return as_tensor_like(self._low, self.loc)

    @property
    def high(self) -> torch.Tensor:
        """Upper bound of the support, as a tensor."""
        return as_tensor_like(self._high, self.loc)

    @property
    def event_dims(self) -> int:
        """Number of trailing dimensions that form one event."""
        return self._event_dims

    @property
    def root_dist(self) -> D.Normal:
        """The Normal of the pre-tanh values, one per element."""
        return D.Normal(self.loc, self.scale, validate_args=False)

    @property
    def base_dist(self) -> D.Distribution:
        """The pre-tanh Normal with this distribution's batch and event shapes."""
        root = self.root_dist
        if self._event_dims == 0:
            return root
        return D.Independent(root, self._event_dims, validate_args=False)

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self) -> constraints.Constraint:
        return constraints.interval(self.low, self.high)

    def _squash(self, x: torch.Tensor) -> torch.Tensor:
        y = safe_tanh(x) if self.safe_tanh else x.tanh()
        if self._trivial_bounds:
            return y
        return self._mid + self._half * y

    def _log_prob_pre_tanh(self, x: torch.Tensor) -> torch.Tensor:
        z = (x - self.loc) / self.scale
        lp = -0.5 * z.pow(2) - self.scale.log() - _HALF_LOG_2PI
        lp = lp - tanh_log_abs_det_jacobian(x)
        if not self._trivial_bounds:
            lp = lp - self._log_half
        return sum_rightmost(lp, self._event_dims)

    def _log_prob_of_draw(self, x: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
        """:meth:`_log_prob_pre_tanh` of a draw ``x = loc + eps * scale``, from its noise.

        The Normal's standardised value ``(x - loc) / scale`` is ``eps`` itself (up to
        rounding), a constant of the parameters: its terms are summed off the graph, in
        place, and only ``2 (x + softplus(-2x)) - log(scale)`` (the squashing's
        ``-log(1 - tanh(x)^2)`` without its constant, and the scale) is differentiated.
        The same density and gradients as scoring ``x``, with half the operations.
        """
        const = _HALF_LOG_2PI + 2 * _LOG2
        if self._numeric_bounds and not self._trivial_bounds:
            const = const + self._log_half
        # eps takes no gradient: its term is a constant of the graph (a fresh tensor
        # written in place)
        lp = torch.add(eps.square().mul_(-0.5).sub_(const), x + F.softplus(-2.0 * x), alpha=2.0)
        lp = lp - self.scale.log()
        if not self._numeric_bounds:
            lp = lp - self._log_half
        return sum_rightmost(lp, self._event_dims)

    def rsample(self, sample_shape: torch.Size | Sequence[int] = ()) -> torch.Tensor:
        shape = self._extended_shape(torch.Size(sample_shape))
        eps = torch.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self._squash(self.loc + eps * self.scale)

    def sample(self, sample_shape: torch.Size | Sequence[int] = ()) -> torch.Tensor:
        if not torch.is_grad_enabled() and not torch.compiler.is_compiling():
            return self.rsample(sample_shape)  # already under no_grad (a collector)
        with torch.no_grad():
            return self.rsample(sample_shape)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """Log-density of ``value`` (shape ``[*sample, *batch, *event]``), summed over the event."""
        y = value if self._trivial_bounds else (value - self._mid) / self._half
        x = safe_atanh(y) if self.safe_tanh else y.atanh()
        return self._log_prob_pre_tanh(x)

    def rsample_and_log_prob(
        self, sample_shape: torch.Size | Sequence[int] = ()
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterized sample and its log-probability, scored at its exact pre-tanh value.

        Scoring the pre-tanh value avoids inverting a saturated ``tanh``; it is scored from
        the draw's noise ``eps`` (``(x - loc) / scale`` is ``eps``): the same density and
        gradients as :meth:`log_prob` of the pre-tanh value up to rounding, with fewer
        operations and without the cancelling terms of ``(x - loc) / scale`` in the
        gradients (closer to the exact ones in float32 where ``x`` saturates).
        """
        shape = self._extended_shape(torch.Size(sample_shape))
        eps = torch.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        x = self.loc + eps * self.scale
        return self._squash(x), self._log_prob_of_draw(x, eps)

    def sample_and_log_prob(
        self, sample_shape: torch.Size | Sequence[int] = ()
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A detached sample and its log-probability (differentiable in the parameters)."""
        with torch.no_grad():
            shape = self._extended_shape(torch.Size(sample_shape))
            eps = torch.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
            x = self.loc + eps * self.scale
            sample = self._squash(x)
        return sample, self._log_prob_pre_tanh(x)

    def entropy(self, num_samples: int = 1) -> torch.Tensor:
        """Monte-Carlo estimate of the entropy, ``-mean(log_prob(a))`` over ``num_samples`` draws.

        It has no closed form; the estimate is differentiable (reparameterized draws).

        Returns:
            A tensor of shape ``batch_shape``.
        """
        _, lp = self.rsample_and_log_prob((num_samples,))
        return -lp.mean(0)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        """``mid + half * tanh(loc)``: the squashed location."""
        return self._squash(self.loc)

    @property
    def mode(self) -> torch.Tensor:
        """The most likely value, per element, found numerically.

        In pre-tanh coordinates the density's stationary points solve
        ``x = loc + 2 scale^2 tanh(x)``. Iterating that increasing map from
        ``loc + 2 scale^2`` (resp. ``loc - 2 scale^2``) converges to the largest (resp.
        smallest) solution, which are the local maxima; the higher of the two is the mode
        (the density is bimodal only when ``2 scale^2 > 1``). It differs from
        :attr:`deterministic_sample` (``tanh(loc)``) when ``scale`` is large. TorchRL
        raises here.
        """
        loc, var2 = self.loc.detach(), 2 * self.scale.detach().pow(2)
        hi, lo = loc + var2, loc - var2
        for _ in range(_MODE_ITERATIONS):
            hi = loc + var2 * hi.tanh()
            lo = loc + var2 * lo.tanh()

        def log_density(x: torch.Tensor) -> torch.Tensor:
            return -(x - loc).pow(2) / var2 - tanh_log_abs_det_jacobian(x)

        x = torch.where(log_density(hi) >= log_density(lo), hi, lo)
        return self._squash(x)

    def get_mode(self) -> torch.Tensor:
        """The mode, as :attr:`mode` (TorchRL's name; TorchRL estimates it with Adam steps
        on the log-density, here it is solved by the fixed-point iteration of
        :attr:`mode`). Detached from the parameters."""
        return self.mode.detach()

    @property
    def mean(self) -> torch.Tensor:
        raise NotImplementedError(
            f"{type(self).__name__} has no closed-form mean; estimate it with "
            "dist.sample((N,)).mean(0) for a large N"
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(batch_shape={tuple(self.batch_shape)}, "
            f"event_shape={tuple(self.event_shape)})"
        )
