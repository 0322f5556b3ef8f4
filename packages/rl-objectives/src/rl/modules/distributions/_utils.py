"""Numerical helpers shared by the distributions: safe tanh / atanh and argument checks."""

from __future__ import annotations

import math
from numbers import Number

import torch
import torch.nn.functional as F
from torch import distributions as D

_LOG2 = math.log(2.0)


def _tanh_limit(dtype: torch.dtype) -> float:
    """The largest magnitude below 1 that a tanh output is clamped to, for ``dtype``."""
    return 1.0 - torch.finfo(dtype).resolution


def safe_tanh(x: torch.Tensor) -> torch.Tensor:
    """``tanh(x)`` clamped to ``[-1 + eps, 1 - eps]`` (``eps`` the dtype's resolution).

    The clamp keeps the value invertible by :func:`safe_atanh`; the gradient is the one of
    ``tanh`` (straight through the clamp), so saturated samples still pass a gradient.

    Args:
        x: any shape.

    Returns:
        A tensor of the shape of ``x``.
    """
    y = x.tanh()
    lim = _tanh_limit(x.dtype)
    # the correction is computed off the graph (no clamp or difference recorded by
    # autograd or forward-mode AD, only the sum); it also turns a -0 into +0
    plain = y.detach()
    return y + plain.clamp(-lim, lim).sub_(plain)


def safe_atanh(y: torch.Tensor) -> torch.Tensor:
    """``atanh(y)`` with ``y`` first clamped to ``[-1 + eps, 1 - eps]``: finite at ``y = +-1``.

    The gradient is ``1 / (1 - clamp(y)^2)`` (straight through the clamp), finite everywhere.

    Args:
        y: any shape, values in ``[-1, 1]``.

    Returns:
        A tensor of the shape of ``y``.
    """
    lim = _tanh_limit(y.dtype)
    if not y.requires_grad:  # data (e.g. a stored action): no gradient to pass through
        return y.clamp(-lim, lim).atanh()
    y = y + (y.clamp(-lim, lim) - y).detach()
    return y.atanh()


class _ClampedTanh(torch.autograd.Function):
    """``tanh`` clamped to ``[-1 + eps, 1 - eps]``, differentiated as ``1 - y^2`` at the
    clamped output ``y`` (so that :class:`_ClampedAtanh` after it has a unit gradient)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, eps):
        lim = 1.0 - eps
        return x.tanh().clamp(-lim, lim)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * (1 - y * y), None


class _ClampedAtanh(torch.autograd.Function):
    """``atanh`` of the input clamped to ``[-1 + eps, 1 - eps]``, differentiated as
    ``1 / (1 - c^2)`` at the clamped input ``c`` (finite at ``+-1``)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(y, eps):
        lim = 1.0 - eps
        return y.clamp(-lim, lim).atanh()

    @staticmethod
    def setup_context(ctx, inputs, output):
        y, eps = inputs
        ctx.save_for_backward(y)
        ctx.eps = eps

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        lim = 1.0 - ctx.eps
        c = y.clamp(-lim, lim)
        return grad / (1 - c * c), None


def safetanh(x: torch.Tensor, eps: float | None = None) -> torch.Tensor:
    """TorchRL's ``safetanh``: ``tanh(x)`` clamped to ``[-1 + eps, 1 - eps]`` (``eps``
    defaults to the dtype's resolution), whose gradient is ``1 - y^2`` at the clamped
    output ``y``: ``safeatanh(safetanh(x, eps), eps)`` has a gradient of exactly one, even
    where ``tanh`` saturates. Works under ``vmap``.

    Args:
        x: any shape.
        eps: the margin kept from ``+-1``.
    """
    return _ClampedTanh.apply(x, _tanh_eps(x, eps))


def safeatanh(y: torch.Tensor, eps: float | None = None) -> torch.Tensor:
    """TorchRL's ``safeatanh``: ``atanh`` of ``y`` clamped to ``[-1 + eps, 1 - eps]``
    (``eps`` defaults to the dtype's resolution), finite at ``+-1``; the inverse of
    :func:`safetanh`, gradients included. Works under ``vmap``.

    Args:
        y: any shape, values in ``[-1, 1]``.
        eps: the margin kept from ``+-1``.
    """
    return _ClampedAtanh.apply(y, _tanh_eps(y, eps))


def _tanh_eps(x: torch.Tensor, eps: float | None) -> float:
    return 1.0 - _tanh_limit(x.dtype) if eps is None else float(eps)


class SafeTanhTransform(D.TanhTransform):
    """A :class:`torch.distributions.TanhTransform` that stays invertible: its outputs
    are kept ``resolution`` away from ``+-1`` (:func:`safetanh`) and its inverse clamps
    its inputs the same way (:func:`safeatanh`), so huge inputs map to finite values and
    back."""

    def _call(self, x: torch.Tensor) -> torch.Tensor:
        return safetanh(x)

    def _inverse(self, y: torch.Tensor) -> torch.Tensor:
        return safeatanh(y)


def tanh_log_abs_det_jacobian(x: torch.Tensor) -> torch.Tensor:
    """``log(1 - tanh(x)^2)`` computed as ``2 (log 2 - x - softplus(-2x))``, stable for any ``x``.

    Args:
        x: the pre-tanh value, any shape.

    Returns:
        A tensor of the shape of ``x``.
    """
    return 2.0 * (_LOG2 - x - F.softplus(-2.0 * x))


def sum_rightmost(value: torch.Tensor, ndims: int) -> torch.Tensor:
    """Sums the ``ndims`` last dimensions of ``value`` (none when ``ndims`` is 0)."""
    if ndims == 0:
        return value
    if ndims == 1:  # the usual event of one dim: an int dim dispatches faster than a tuple
        return value.sum(-1)
    return value.sum(tuple(range(-ndims, 0)))


def as_tensor_like(value: torch.Tensor | Number, ref: torch.Tensor) -> torch.Tensor:
    """``value`` as a tensor on ``ref``'s device with ``ref``'s floating dtype."""
    if isinstance(value, torch.Tensor):
        if value.device != ref.device or value.dtype != ref.dtype:
            value = value.to(device=ref.device, dtype=ref.dtype)
        return value
    return torch.as_tensor(value, device=ref.device, dtype=ref.dtype)


def check_broadcast(name: str, **tensors: torch.Tensor) -> torch.Size:
    """Returns the broadcast shape of ``tensors`` or raises a ``ValueError`` naming their shapes."""
    first, *others = (t.shape for t in tensors.values())
    if all(shape == first for shape in others):  # the usual case, without torch's Python loop
        return first
    shapes = {key: tuple(t.shape) for key, t in tensors.items()}
    try:
        return torch.broadcast_shapes(first, *others)
    except RuntimeError:
        given = ", ".join(f"{key} of shape {shape}" for key, shape in shapes.items())
        raise ValueError(f"{name} got parameters whose shapes do not broadcast: {given}") from None


def traced(tensor: torch.Tensor) -> bool:
    """Whether values cannot be read on the host now: under torch.compile, or while a
    CUDA graph is captured on ``tensor``'s device (a host read would end the capture;
    what the distributions check there was checked at the eager calls before it, as
    ``CudaGraphModule`` makes them)."""
    if torch.compiler.is_compiling():
        return True
    return tensor.is_cuda and torch.cuda.is_current_stream_capturing()


def check_low_high(name: str, low, high) -> None:
    """Raises a ``ValueError`` naming ``low`` and ``high`` unless ``high > low`` everywhere."""
    # float first: a Python float (the default bounds) skips the ABC check of Number
    if isinstance(low, (float, Number)) and isinstance(high, (float, Number)):
        if not high > low:
            raise ValueError(f"{name} needs high > low everywhere, got low={low} and high={high}")
        return
    ok = torch.as_tensor(high) > torch.as_tensor(low)
    if not bool(ok.all()):
        raise ValueError(f"{name} needs high > low everywhere, got low={low} and high={high}")
