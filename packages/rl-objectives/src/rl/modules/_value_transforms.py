"""Invertible transforms of scalar values (rewards, returns) and their module forms.

A critic or reward head that predicts ``f(value)`` instead of ``value`` keeps one output
scale whatever the size of the returns; ``f^-1`` maps its predictions back before they are
used for bootstrapping.

- :func:`symlog` / :func:`symexp`: ``sign(x) log(1 + |x|)`` and its inverse (DreamerV3,
  Hafner et al., 2023, https://arxiv.org/abs/2301.04104).
- :func:`signed_hyperbolic` / :func:`signed_parabolic`: ``sign(x) (sqrt(|x| + 1) - 1) + eps x``
  and its inverse (Pohlen et al., 2018, https://arxiv.org/abs/1805.11593).

Each function keeps a derivative of ``1`` (``1/2 + eps`` for the hyperbolic one) at zero,
where ``sign`` alone would give ``0``.
"""

from __future__ import annotations

from abc import ABCMeta, abstractmethod

import torch
from torch import nn

__all__ = [
    "ComposeValueTransform",
    "IdentityValueTransform",
    "SignedHyperbolicValueTransform",
    "SymLogValueTransform",
    "ValueTransform",
    "signed_hyperbolic",
    "signed_parabolic",
    "symexp",
    "symlog",
]


def _check_epsilon(epsilon: float) -> None:
    if epsilon <= 0:
        raise ValueError(f"epsilon must be positive, got {epsilon}.")


class _SymLog(torch.autograd.Function):
    """symlog with its exact derivative ``1 / (1 + |x|)`` (also ``1`` at ``0``)."""

    @staticmethod
    def forward(value):
        return value.sign() * value.abs().log1p()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (value,) = ctx.saved_tensors
        return grad / (1 + value.abs())


class _SymExp(torch.autograd.Function):
    """symexp with its exact derivative ``exp(|x|)`` (also ``1`` at ``0``)."""

    @staticmethod
    def forward(value):
        return value.sign() * value.abs().expm1()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (value,) = ctx.saved_tensors
        return grad * value.abs().exp()


def symlog(value: torch.Tensor) -> torch.Tensor:
    """``sign(value) * log(1 + |value|)``, element-wise.

    Args:
        value (Tensor): any shape.

    Returns:
        A tensor of ``value``'s shape, dtype and device.

    Examples:
        >>> import torch
        >>> from rl.modules import symlog
        >>> symlog(torch.tensor([-100.0, 0.0, 100.0]))
        tensor([-4.6151,  0.0000,  4.6151])
    """
    # sign() has a zero derivative at 0 where symlog's is 1: the backward is written out
    return _SymLog.apply(value)


def symexp(value: torch.Tensor) -> torch.Tensor:
    """``sign(value) * (exp(|value|) - 1)``, the inverse of :func:`symlog`.

    Args:
        value (Tensor): any shape, in symlog space.

    Returns:
        A tensor of ``value``'s shape, dtype and device.

    Examples:
        >>> import torch
        >>> from rl.modules import symexp, symlog
        >>> symexp(symlog(torch.tensor([-100.0, 0.0, 100.0])))
        tensor([-100.0000,    0.0000,  100.0000])
    """
    return _SymExp.apply(value)


def signed_hyperbolic(value: torch.Tensor, epsilon: float = 1e-3) -> torch.Tensor:
    """``sign(value) * (sqrt(|value| + 1) - 1) + epsilon * value``, element-wise.

    Args:
        value (Tensor): any shape.
        epsilon (float, optional): the positive linear term that keeps the inverse
            Lipschitz. Defaults to ``1e-3``.

    Returns:
        A tensor of ``value``'s shape, dtype and device.

    Raises:
        ValueError: if ``epsilon <= 0``.

    Examples:
        >>> import torch
        >>> from rl.modules import signed_hyperbolic
        >>> signed_hyperbolic(torch.tensor([-100.0, 0.0, 100.0]))
        tensor([-9.1499,  0.0000,  9.1499])
    """
    _check_epsilon(epsilon)
    out = value.sign() * (torch.sqrt(value.abs() + 1) - 1) + epsilon * value
    return torch.where(value == 0, value * (0.5 + epsilon), out)


def signed_parabolic(value: torch.Tensor, epsilon: float = 1e-3) -> torch.Tensor:
    """The inverse of :func:`signed_hyperbolic` with the same ``epsilon``.

    Args:
        value (Tensor): any shape, in signed-hyperbolic space.
        epsilon (float, optional): the ``epsilon`` of the forward transform. Defaults to
            ``1e-3``.

    Returns:
        A tensor of ``value``'s shape, dtype and device.

    Raises:
        ValueError: if ``epsilon <= 0``.

    Examples:
        >>> import torch
        >>> from rl.modules import signed_hyperbolic, signed_parabolic
        >>> signed_parabolic(signed_hyperbolic(torch.tensor([-100.0, 0.0, 100.0])))
        tensor([-100.0000,    0.0000,  100.0000])
    """
    _check_epsilon(epsilon)
    magnitude = value.abs()
    # sqrt(|x| + 1) solves eps * s**2 + s - (|y| + 1 + eps) = 0; the root is written as
    # 2c / (1 + sqrt(1 + 4 eps c)) so that a small eps does not cancel digits
    c = magnitude + 1 + epsilon
    root = 2 * c / (torch.sqrt(1 + 4 * epsilon * c) + 1)
    out = value.sign() * (root.square() - 1)
    return torch.where(value == 0, value / (0.5 + epsilon), out)


class ValueTransform(nn.Module, metaclass=ABCMeta):
    """An invertible element-wise map of scalar values: ``forward`` and ``inverse``.

    Examples:
        >>> import torch
        >>> from rl.modules import ValueTransform
        >>> class Double(ValueTransform):
        ...     def forward(self, value):
        ...         return value * 2
        ...     def inverse(self, value):
        ...         return value / 2
        >>> Double().inverse(Double()(torch.tensor([1.0, -3.0])))
        tensor([ 1., -3.])
    """

    @abstractmethod
    def forward(self, value: torch.Tensor) -> torch.Tensor:
        """Map raw values to the prediction space."""

    @abstractmethod
    def inverse(self, value: torch.Tensor) -> torch.Tensor:
        """Map predictions back to raw values."""


class IdentityValueTransform(ValueTransform):
    """Values unchanged both ways.

    Examples:
        >>> import torch
        >>> from rl.modules import IdentityValueTransform
        >>> IdentityValueTransform()(torch.tensor([-1.0, 2.0]))
        tensor([-1.,  2.])
    """

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        return value

    def inverse(self, value: torch.Tensor) -> torch.Tensor:
        return value


class SymLogValueTransform(ValueTransform):
    """:func:`symlog` forward, :func:`symexp` inverse (DreamerV3).

    Examples:
        >>> import torch
        >>> from rl.modules import SymLogValueTransform
        >>> SymLogValueTransform()(torch.tensor([-100.0, 0.0, 100.0]))
        tensor([-4.6151,  0.0000,  4.6151])
    """

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        return symlog(value)

    def inverse(self, value: torch.Tensor) -> torch.Tensor:
        return symexp(value)


class SignedHyperbolicValueTransform(ValueTransform):
    """:func:`signed_hyperbolic` forward, :func:`signed_parabolic` inverse.

    Args:
        epsilon (float, optional): the positive linear term. Defaults to ``1e-3``.

    Raises:
        ValueError: if ``epsilon <= 0``.

    Examples:
        >>> import torch
        >>> from rl.modules import SignedHyperbolicValueTransform
        >>> t = SignedHyperbolicValueTransform()
        >>> t.inverse(t(torch.tensor([-100.0, 0.0, 100.0])))
        tensor([-100.0000,    0.0000,  100.0000])
    """

    def __init__(self, epsilon: float = 1e-3) -> None:
        super().__init__()
        _check_epsilon(epsilon)
        self.epsilon = epsilon

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        return signed_hyperbolic(value, self.epsilon)

    def inverse(self, value: torch.Tensor) -> torch.Tensor:
        return signed_parabolic(value, self.epsilon)


class ComposeValueTransform(ValueTransform):
    """Transforms applied in order forward, in reverse order by ``inverse``.

    Args:
        *transforms (ValueTransform): at least one.

    Raises:
        ValueError: with no transform.
        TypeError: if one is not a :class:`ValueTransform`.

    Examples:
        >>> import torch
        >>> from rl.modules import (
        ...     ComposeValueTransform, SignedHyperbolicValueTransform, SymLogValueTransform
        ... )
        >>> t = ComposeValueTransform(SignedHyperbolicValueTransform(), SymLogValueTransform())
        >>> t(torch.tensor([-100.0, 0.0, 100.0]))
        tensor([-2.3175,  0.0000,  2.3175])
    """

    def __init__(self, *transforms: ValueTransform) -> None:
        super().__init__()
        if not transforms:
            raise ValueError("ComposeValueTransform requires at least one transform.")
        for transform in transforms:
            if not isinstance(transform, ValueTransform):
                raise TypeError(
                    f"ComposeValueTransform takes ValueTransform instances, got "
                    f"{type(transform).__name__}."
                )
        self.transforms = nn.ModuleList(transforms)

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        for transform in self.transforms:
            value = transform(value)
        return value

    def inverse(self, value: torch.Tensor) -> torch.Tensor:
        for transform in reversed(self.transforms):
            value = transform.inverse(value)
        return value
