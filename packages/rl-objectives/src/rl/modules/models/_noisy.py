"""Noisy linear layers (NoisyNet exploration)."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter

from rl.core import ExplorationType, exploration_type

__all__ = ["NoisyLazyLinear", "NoisyLinear", "reset_noise"]


def _scaled_noise(size: int, device, dtype) -> torch.Tensor:
    x = torch.randn(size, device=device, dtype=dtype)
    return x.sign() * x.abs().sqrt()


class NoisyLinear(nn.Linear):
    """A linear layer with learned, factorised Gaussian noise on its weights.

    ``weight = weight_mu + weight_sigma * weight_epsilon`` and the same for the bias, with
    ``weight_epsilon = f(e_out) f(e_in)^T``, ``f(x) = sign(x) sqrt(|x|)`` (Fortunato et
    al., 2017, https://arxiv.org/abs/1706.10295). The noise is drawn by
    :meth:`reset_noise` only (at construction and when the caller asks, e.g.
    ``module.apply(reset_noise)`` after each optimizer step), never by ``forward``.

    The noise is used when the exploration type is ``ExplorationType.RANDOM``; under
    ``DETERMINISTIC``, ``MODE`` or ``MEAN`` only the mean weights are used. When no
    exploration type is set, the module's training mode decides (noise in ``train()``,
    mean weights in ``eval()``). With ``use_exploration_type=False`` only the training
    mode decides.

    Args:
        in_features (int): input size.
        out_features (int): output size.
        bias (bool, optional): add a (noisy) bias. Defaults to ``True``.
        device (torch.device, optional): device of the parameters.
        dtype (torch.dtype, optional): dtype of the parameters.
        std_init (float, optional): initial noise scale ``sigma_0``; ``weight_sigma``
            starts at ``sigma_0 / sqrt(in_features)``. Defaults to ``0.5``.
        use_exploration_type (bool, optional): see above. Defaults to ``True``.

    Examples:
        >>> import torch
        >>> from rl.modules import NoisyLinear
        >>> layer = NoisyLinear(3, 2)
        >>> x = torch.ones(1, 3)
        >>> torch.equal(layer(x), layer(x))
        True
        >>> y0 = layer(x)
        >>> layer.reset_noise()
        >>> torch.equal(y0, layer(x))
        False
        >>> _ = layer.eval()
        >>> torch.allclose(layer(x), x @ layer.weight_mu.T + layer.bias_mu)
        True
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        std_init: float = 0.5,
        use_exploration_type: bool | None = True,
    ) -> None:
        nn.Module.__init__(self)
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        self.std_init = std_init
        self._use_exploration_type = use_exploration_type is not False
        kw = {"device": device, "dtype": dtype}
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features, **kw))
        self.weight_sigma = nn.Parameter(torch.empty(out_features, in_features, **kw))
        self.register_buffer("weight_epsilon", torch.empty(out_features, in_features, **kw))
        if bias:
            self.bias_mu = nn.Parameter(torch.empty(out_features, **kw))
            self.bias_sigma = nn.Parameter(torch.empty(out_features, **kw))
            self.register_buffer("bias_epsilon", torch.empty(out_features, **kw))
        else:
            self.register_parameter("bias_mu", None)
            self.register_parameter("bias_sigma", None)
            self.register_buffer("bias_epsilon", None)
        self.reset_parameters()
        self.reset_noise()

    def reset_parameters(self) -> None:
        """``mu ~ U(-1/sqrt(in), 1/sqrt(in))``; ``sigma = std_init / sqrt(fan)``."""
        bound = 1 / math.sqrt(self.in_features)
        with torch.no_grad():
            self.weight_mu.uniform_(-bound, bound)
            self.weight_sigma.fill_(self.std_init / math.sqrt(self.in_features))
            if self.bias_mu is not None:
                self.bias_mu.uniform_(-bound, bound)
                self.bias_sigma.fill_(self.std_init / math.sqrt(self.out_features))

    @torch.no_grad()
    def reset_noise(self) -> None:
        """Draws new factorised noise into ``weight_epsilon`` and ``bias_epsilon``."""
        kw = {"device": self.weight_mu.device, "dtype": self.weight_mu.dtype}
        eps_in = _scaled_noise(self.in_features, **kw)
        eps_out = _scaled_noise(self.out_features, **kw)
        self.weight_epsilon.copy_(torch.outer(eps_out, eps_in))
        if self.bias_mu is not None:
            self.bias_epsilon.copy_(eps_out)

    def _use_noise(self) -> bool:
        if self._use_exploration_type:
            current = exploration_type()
            if current is not None:
                return current is ExplorationType.RANDOM
        return self.training

    @property
    def weight(self) -> torch.Tensor:
        if self._use_noise():
            return self.weight_mu + self.weight_sigma * self.weight_epsilon
        return self.weight_mu

    @property
    def bias(self) -> torch.Tensor | None:
        if self.bias_mu is None:
            return None
        if self._use_noise():
            return self.bias_mu + self.bias_sigma * self.bias_epsilon
        return self.bias_mu

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias_mu is not None}, std_init={self.std_init}"
        )


class NoisyLazyLinear(LazyModuleMixin, NoisyLinear):
    """A :class:`NoisyLinear` whose ``in_features`` is read from its first input.

    Args:
        out_features (int): output size.
        bias, device, dtype, std_init, use_exploration_type: as for :class:`NoisyLinear`.

    Examples:
        >>> import torch
        >>> from rl.modules import NoisyLazyLinear, NoisyLinear
        >>> layer = NoisyLazyLinear(2)
        >>> layer(torch.zeros(4, 5)).shape
        torch.Size([4, 2])
        >>> type(layer) is NoisyLinear, layer.in_features
        (True, 5)
    """

    cls_to_become = NoisyLinear

    def __init__(
        self,
        out_features: int,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        std_init: float = 0.5,
        use_exploration_type: bool | None = True,
    ) -> None:
        super().__init__(
            0,
            0,
            False,
            device=device,
            dtype=dtype,
            std_init=std_init,
            use_exploration_type=use_exploration_type,
        )
        kw = {"device": device, "dtype": dtype}
        self.out_features = out_features
        self.weight_mu = UninitializedParameter(**kw)
        self.weight_sigma = UninitializedParameter(**kw)
        self.register_buffer("weight_epsilon", UninitializedBuffer(**kw))
        if bias:
            self.bias_mu = UninitializedParameter(**kw)
            self.bias_sigma = UninitializedParameter(**kw)
            self.register_buffer("bias_epsilon", UninitializedBuffer(**kw))

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_features != 0:
            super().reset_parameters()

    def reset_noise(self) -> None:
        if not self.has_uninitialized_params() and self.in_features != 0:
            super().reset_noise()

    def initialize_parameters(self, input: torch.Tensor) -> None:
        if self.has_uninitialized_params():
            with torch.no_grad():
                self.in_features = input.shape[-1]
                shape = (self.out_features, self.in_features)
                self.weight_mu.materialize(shape)
                self.weight_sigma.materialize(shape)
                self.weight_epsilon.materialize(shape)
                if self.bias_mu is not None:
                    self.bias_mu.materialize((self.out_features,))
                    self.bias_sigma.materialize((self.out_features,))
                    self.bias_epsilon.materialize((self.out_features,))
                self.reset_parameters()
                self.reset_noise()

    @property
    def weight(self) -> torch.Tensor:
        if self.has_uninitialized_params():
            return self.weight_mu
        return super().weight

    @property
    def bias(self) -> torch.Tensor | None:
        if self.bias_mu is None or self.has_uninitialized_params():
            return self.bias_mu
        return super().bias


def reset_noise(layer: nn.Module) -> None:
    """Calls ``layer.reset_noise()`` when it has one: ``module.apply(reset_noise)``."""
    if hasattr(layer, "reset_noise"):
        layer.reset_noise()
