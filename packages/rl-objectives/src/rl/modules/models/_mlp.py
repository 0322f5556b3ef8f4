"""MLP: the multi-layer perceptron every actor and critic is built from."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from numbers import Number

import torch
from torch import nn

from ._noisy import NoisyLazyLinear, NoisyLinear
from ._utils import check_layer_factory, create_on_device, iter_kwargs

__all__ = ["MLP"]

# layer class -> the lazy class used when in_features is None
_LAZY_LAYERS: dict = {nn.Linear: nn.LazyLinear, NoisyLinear: NoisyLazyLinear}


class _SharedBias(nn.Module):
    """One scalar bias added to every output feature."""

    def __init__(self, device=None, dtype=None) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(1, device=device, dtype=dtype))

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.bias)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return input + self.bias


class MLP(nn.Sequential):
    """A multi-layer perceptron: ``[layer, (dropout), (norm), activation] * depth + layer``.

    Several inputs are concatenated along the last dimension first (``mlp(obs, action)``
    for a Q-network). The layer order (hence the ``state_dict`` keys) is TorchRL's.

    Args:
        in_features (int, optional): input size; ``None`` makes the first layer lazy
            (``nn.LazyLinear``), sized at the first call.
        out_features (int or sequence of int): output size; a shape reshapes the output's
            last dimension to it.
        depth (int, optional): number of hidden layers. With ``num_cells`` an int, it is
            required; with a list it must equal the list's length. Defaults to ``0`` hidden
            layers when neither is given.
        num_cells (int or sequence of int, optional): hidden sizes. Defaults to ``32`` per
            hidden layer when only ``depth`` is given.
        activation_class (type or callable, optional): activation constructor. Defaults to
            ``nn.Tanh``.
        activation_kwargs (dict or list of dicts, optional): its kwargs, one dict for all
            or one per activation (``depth + activate_last_layer``).
        norm_class (type or callable, optional): normalization layer after each hidden
            layer (before the activation).
        norm_kwargs (dict or list of dicts, optional): its kwargs.
        dropout (float, optional): dropout probability after each hidden layer.
        bias_last_layer (bool, optional): bias on the last layer. Defaults to ``True``.
        single_bias_last_layer (bool, optional): one scalar bias shared by all outputs of
            the last layer. Defaults to ``False``.
        layer_class (type or callable, optional): linear layer constructor, called as
            ``layer_class(in, out, bias=...)``. Defaults to ``nn.Linear``.
        layer_kwargs (dict or list of dicts, optional): its kwargs, one per layer
            (``depth + 1``) as a list.
        activate_last_layer (bool, optional): add an activation after the last layer.
            Defaults to ``False``.
        device (torch.device, optional): device of the parameters.

    Raises:
        ValueError: if ``out_features`` is missing, or ``depth`` and ``num_cells``
            disagree, or ``single_bias_last_layer`` is used with ``NoisyLinear``.
        TypeError: if ``activation_class``, ``norm_class`` or ``layer_class`` is not a
            class or callable (for example the string ``"relu"``).

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from rl.modules import MLP
        >>> mlp = MLP(num_cells=[32, 64], out_features=4, activation_class=nn.ELU)
        >>> mlp(torch.zeros(10, 3)).shape
        torch.Size([10, 4])
        >>> MLP(in_features=3, out_features=(2, 5), depth=1, num_cells=8)(torch.zeros(3)).shape
        torch.Size([2, 5])
    """

    def __init__(
        self,
        in_features: int | None = None,
        out_features: int | torch.Size | Sequence[int] | None = None,
        depth: int | None = None,
        num_cells: Sequence[int] | int | None = None,
        activation_class: type[nn.Module] | Callable = nn.Tanh,
        activation_kwargs: dict | list[dict] | None = None,
        norm_class: type[nn.Module] | Callable | None = None,
        norm_kwargs: dict | list[dict] | None = None,
        dropout: float | None = None,
        bias_last_layer: bool = True,
        single_bias_last_layer: bool = False,
        layer_class: type[nn.Module] | Callable = nn.Linear,
        layer_kwargs: dict | list[dict] | None = None,
        activate_last_layer: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        if out_features is None:
            raise ValueError("MLP needs out_features (an int or a shape)")
        check_layer_factory("activation_class", activation_class, "MLP")
        check_layer_factory("layer_class", layer_class, "MLP")
        if norm_class is not None:
            check_layer_factory("norm_class", norm_class, "MLP")
        if num_cells is None:
            num_cells = [] if depth is None else [32] * depth
        if isinstance(num_cells, Sequence):
            num_cells = list(num_cells)
            if depth is not None and depth != len(num_cells):
                raise ValueError(
                    f"MLP got depth={depth} and num_cells={num_cells} of length "
                    f"{len(num_cells)}: give a list of length depth, or an int"
                )
        else:
            if depth is None:
                raise ValueError(
                    f"MLP got num_cells={num_cells} (an int) without a depth; give a "
                    "depth or a list of sizes"
                )
            num_cells = [int(num_cells)] * depth
        self.in_features = in_features
        self.out_features = out_features
        self._reshape_out = not isinstance(out_features, (int, Number))
        self._out_features_num = int(out_features) if not self._reshape_out else prod(out_features)
        self.num_cells = num_cells
        self.depth = len(num_cells)
        self.activation_class = activation_class
        self.activation_kwargs = activation_kwargs
        self.norm_class = norm_class
        self.norm_kwargs = norm_kwargs
        self.dropout = dropout
        self.bias_last_layer = bias_last_layer
        self.single_bias_last_layer = single_bias_last_layer
        self.layer_class = layer_class
        self.layer_kwargs = layer_kwargs
        self.activate_last_layer = activate_last_layer
        super().__init__(*self._make_net(device))

    def _make_net(self, device) -> list[nn.Module]:
        n_act = self.depth + int(self.activate_last_layer)
        act_kwargs = iter_kwargs(self.activation_kwargs, n_act, "activation_kwargs", "MLP")
        norm_kwargs = iter_kwargs(self.norm_kwargs, n_act, "norm_kwargs", "MLP")
        layer_kwargs = iter_kwargs(self.layer_kwargs, self.depth + 1, "layer_kwargs", "MLP")
        sizes_in = [self.in_features, *self.num_cells]
        sizes_out = [*self.num_cells, self._out_features_num]
        layers: list[nn.Module] = []
        for i, (n_in, n_out) in enumerate(zip(sizes_in, sizes_out)):
            last = i == self.depth
            kwargs = next(layer_kwargs)
            bias = kwargs.pop("bias", self.bias_last_layer if last else True)
            single_bias = last and self.single_bias_last_layer and bias
            if single_bias and self.layer_class in (NoisyLinear, NoisyLazyLinear):
                raise ValueError("MLP single_bias_last_layer=True is incompatible with NoisyLinear")
            if n_in is not None:
                layer = create_on_device(
                    self.layer_class,
                    device,
                    n_in,
                    n_out,
                    bias=bias and not single_bias,
                    **kwargs,
                )
            else:
                lazy = _LAZY_LAYERS.get(self.layer_class)
                if lazy is None:
                    raise ValueError(
                        f"MLP has no lazy version of layer_class={self.layer_class!r}; "
                        "give in_features"
                    )
                layer = create_on_device(
                    lazy, device, n_out, bias=bias and not single_bias, **kwargs
                )
            layers.append(layer)
            if single_bias:
                layers.append(_SharedBias(device=device))
            if not last or self.activate_last_layer:
                if self.dropout is not None:
                    layers.append(nn.Dropout(p=self.dropout))
                norm_kw = next(norm_kwargs)
                if self.norm_class is not None:
                    layers.append(create_on_device(self.norm_class, device, **norm_kw))
                layers.append(create_on_device(self.activation_class, device, **next(act_kwargs)))
        return layers

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        """Concatenates ``inputs`` along the last dimension and maps ``[*B, in]`` to ``[*B, *out]``."""
        if len(inputs) > 1:
            input = torch.cat(inputs, -1)
        else:
            (input,) = inputs
        out = super().forward(input)
        if self._reshape_out:
            out = out.view(*out.shape[:-1], *self.out_features)
        return out
