"""Backward linear recurrences over time, the one computation behind every estimator.

GAE, TD(lambda), TD(1), V-trace and reward-to-go are all ``y[t] = x[t] + c[t] * y[t+1]``
run backwards over time with ``y[T] = 0``. :func:`reverse_linear_scan` solves it with a
doubling (Hillis-Steele) scan: ``ceil(log2(T))`` tensor operations instead of a Python loop
over ``T``, on whatever device the inputs live (CUDA tensors stay on the device), and
differentiable. When rl-cpp is installed, GAE and TD(lambda) on CPU tensors that need no
gradient go through its fused single-pass kernel (:func:`cpp_kernels`).
"""

from __future__ import annotations

import importlib.util
from types import ModuleType

import torch

__all__: list[str] = []

_has_rl_cpp = importlib.util.find_spec("rl.cpp") is not None
_cpp: ModuleType | None | bool = None  # None: not looked up yet; False: unavailable


def cpp_kernels() -> ModuleType | None:
    """``rl.cpp`` when it exposes the value kernels (its public
    ``generalized_advantage_estimate`` and ``td_lambda_return_estimate``), else ``None``."""
    global _cpp
    if _cpp is None:
        _cpp = False
        if _has_rl_cpp:
            try:
                import rl.cpp as cpp
            except ImportError:  # a broken build: fall back to torch
                cpp = None
            if cpp is not None and hasattr(cpp, "generalized_advantage_estimate"):
                _cpp = cpp
    return _cpp or None


def use_cpp(*tensors: torch.Tensor) -> bool:
    """Whether the compiled kernel may run on these tensors (same answer as torch would)."""
    # compiling first: a trace never reads (nor sets) the lookup's module global, so a
    # graph traced before the first eager call is not recompiled once the lookup is done
    if torch.compiler.is_compiling() or cpp_kernels() is None:
        return False
    first = tensors[0]
    if first.device.type != "cpu" or first.dtype not in (torch.float32, torch.float64):
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if t.device.type != "cpu" or (grad and t.requires_grad):
            return False
        if t.is_floating_point() and t.dtype != first.dtype:
            return False
    return True


def reverse_linear_scan(x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Solves ``y[t] = x[t] + c[t] * y[t+1]`` backwards over time, with ``y[T] = 0``.

    Args:
        x (Tensor): the inputs, ``[*B, T, F]`` (time at ``-2``).
        c (Tensor): the per-step decays, broadcastable to ``x``.

    Returns:
        ``y``, shaped like ``x``.
    """
    c = c.to(x.dtype).expand_as(x)
    n = x.shape[-2]
    if n <= 1:
        return x.clone()
    if torch.is_grad_enabled() and (x.requires_grad or c.requires_grad):
        return _scan_autograd(x, c, n)
    if torch.compiler.is_compiling():  # out= into strided views breaks a graph; the
        return _scan_autograd(x, c, n)  # compiler fuses the out-of-place steps instead
    return _scan_inplace(x, c, n)


def _scan_autograd(x: torch.Tensor, c: torch.Tensor, n: int) -> torch.Tensor:
    # Out-of-place doubling: after the step with offset d, y[t] sums the terms of
    # x over [t, t + 2d) and a[t] is the product of c over the same window.
    y, a = x, c
    d = 1
    while d < n:
        y = torch.cat(
            [torch.addcmul(y[..., :-d, :], a[..., :-d, :], y[..., d:, :]), y[..., -d:, :]], -2
        )
        if 2 * d < n:
            a = torch.cat([a[..., :-d, :] * a[..., d:, :], a[..., -d:, :]], -2)
        d *= 2
    return y


def _scan_inplace(x: torch.Tensor, c: torch.Tensor, n: int) -> torch.Tensor:
    # The same doubling with two ping-pong buffers per operand and `out=` kernels:
    # no allocation per step. The tail rows a buffer keeps from an older step only
    # ever meet windows that run past T, whose products are never used.
    y, y_next = x.clone(), x.clone()
    a, a_next = c.clone(), c.clone()
    d = 1
    while d < n:
        torch.addcmul(y[..., :-d, :], a[..., :-d, :], y[..., d:, :], out=y_next[..., :-d, :])
        y_next[..., -d:, :] = y[..., -d:, :]
        y, y_next = y_next, y
        if 2 * d < n:
            torch.mul(a[..., :-d, :], a[..., d:, :], out=a_next[..., :-d, :])
            a, a_next = a_next, a
        d *= 2
    return y
