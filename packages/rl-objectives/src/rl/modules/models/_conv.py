"""Convolutional networks: ConvNet (2d) and Conv3dNet."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from ._utils import (
    SquashDims,
    Squeeze2dLayer,
    SqueezeLayer,
    check_layer_factory,
    create_on_device,
    find_depth,
    iter_kwargs,
)

__all__ = ["Conv2dNet", "Conv3dNet", "ConvNet"]


class _ConvNetBase(nn.Sequential):
    """``[conv, activation, (norm)] * depth + aggregator``, over any number of batch dims."""

    _spatial_dims: int
    _conv: type[nn.Module]
    _lazy_conv: type[nn.Module]

    def __init__(
        self,
        in_features: int | None,
        depth: int | None,
        num_cells: Sequence[int] | int | None,
        kernel_sizes,
        strides,
        paddings,
        activation_class,
        activation_kwargs,
        norm_class,
        norm_kwargs,
        bias_last_layer: bool,
        aggregator_class,
        aggregator_kwargs,
        squeeze_output: bool,
        device,
    ) -> None:
        name = type(self).__name__
        check_layer_factory("activation_class", activation_class, name)
        if norm_class is not None:
            check_layer_factory("norm_class", norm_class, name)
        if aggregator_class is not None:
            check_layer_factory("aggregator_class", aggregator_class, name)
        if num_cells is None:
            num_cells = [32] * depth if depth is not None else [32, 32, 32]
        depth = find_depth(
            depth,
            name,
            num_cells=num_cells,
            kernel_sizes=kernel_sizes,
            strides=strides,
            paddings=paddings,
        )
        if depth == 0:
            raise ValueError(
                f"Null depth is not permitted with {name}: a depth of at least 1 is needed"
            )

        def as_list(value):
            return list(value) if isinstance(value, (list, tuple)) else [value] * depth

        self.in_features = in_features
        self.num_cells = as_list(num_cells)
        self.kernel_sizes = as_list(kernel_sizes)
        self.strides = as_list(strides)
        self.paddings = as_list(paddings)
        self.depth = depth
        self.out_features = self.num_cells[-1]
        self.activation_class = activation_class
        self.norm_class = norm_class
        self.bias_last_layer = bias_last_layer
        self.aggregator_class = aggregator_class
        self.aggregator_kwargs = (
            aggregator_kwargs
            if aggregator_kwargs is not None
            else {"ndims_in": self._spatial_dims + 1}
        )
        self.squeeze_output = squeeze_output
        act_kwargs = iter_kwargs(activation_kwargs, depth, "activation_kwargs", name)
        norm_kw = iter_kwargs(norm_kwargs, depth, "norm_kwargs", name)
        layers: list[nn.Module] = []
        sizes_in = [in_features, *self.num_cells[:-1]]
        for i, (n_in, n_out) in enumerate(zip(sizes_in, self.num_cells)):
            bias = i < depth - 1 or bias_last_layer
            conv_kwargs = {
                "kernel_size": self.kernel_sizes[i],
                "stride": self.strides[i],
                "padding": self.paddings[i],
                "bias": bias,
                "device": device,
            }
            if n_in is None:
                layers.append(self._lazy_conv(n_out, **conv_kwargs))
            else:
                layers.append(self._conv(n_in, n_out, **conv_kwargs))
            layers.append(create_on_device(activation_class, device, **next(act_kwargs)))
            kw = next(norm_kw)
            if norm_class is not None:
                layers.append(create_on_device(norm_class, device, **kw))
        if aggregator_class is not None:
            layers.append(create_on_device(aggregator_class, device, **self.aggregator_kwargs))
        if squeeze_output:
            layers.append(self._squeeze_layer())
        super().__init__(*layers)

    def _squeeze_layer(self) -> nn.Module:
        raise NotImplementedError

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """Maps ``[*B, C, *spatial]`` to ``[*B, *out]`` (any number of batch dims)."""
        n_feature_dims = self._spatial_dims + 1
        if inputs.ndim < n_feature_dims:
            raise ValueError(
                f"{type(self).__name__} inputs must have at least {n_feature_dims} "
                f"dimensions (channels and {self._spatial_dims} spatial), got shape "
                f"{tuple(inputs.shape)}"
            )
        batch = inputs.shape[: inputs.ndim - n_feature_dims]
        if len(batch) > 1:
            inputs = inputs.flatten(0, len(batch) - 1)
        out = super().forward(inputs)
        if len(batch) > 1:
            out = out.unflatten(0, batch)
        return out


class ConvNet(_ConvNetBase):
    """A 2d convolutional network: ``[Conv2d, activation, (norm)] * depth + aggregator``.

    Inputs are ``[*B, C, H, W]`` with any number of batch dimensions; the default
    aggregator :class:`SquashDims` flattens ``C, H, W`` so the output is ``[*B, F]``.

    Args:
        in_features (int, optional): input channels; ``None`` makes the first layer a
            ``nn.LazyConv2d``.
        depth (int, optional): number of conv layers; inferred from the list arguments.
        num_cells (int or sequence of int, optional): output channels per layer. Defaults
            to ``[32, 32, 32]``.
        kernel_sizes (int or sequence, optional): per layer or for all. Defaults to ``3``.
        strides (int or sequence, optional): per layer or for all. Defaults to ``1``.
        paddings (int or sequence, optional): per layer or for all. Defaults to ``0``.
        activation_class (type or callable, optional): defaults to ``nn.ELU``.
        activation_kwargs (dict or list of dicts, optional): its kwargs.
        norm_class (type or callable, optional): normalization after each activation.
        norm_kwargs (dict or list of dicts, optional): its kwargs.
        bias_last_layer (bool, optional): bias on the last conv. Defaults to ``True``.
        aggregator_class (type or callable, optional): final layer. Defaults to
            :class:`SquashDims`; ``None`` for none.
        aggregator_kwargs (dict, optional): defaults to ``{"ndims_in": 3}``.
        squeeze_output (bool, optional): squeeze the two last (singleton) dims, e.g.
            after ``nn.AdaptiveAvgPool2d(1)``. Defaults to ``False``.
        device (torch.device, optional): device of the parameters.

    Raises:
        ValueError: if list arguments disagree in length or the depth is 0.
        TypeError: for a class argument that is not a class or callable.

    Examples:
        >>> import torch
        >>> from rl.modules import ConvNet, SquashDims
        >>> net = ConvNet(
        ...     num_cells=[32, 64], kernel_sizes=[8, 4], strides=[2, 1],
        ...     aggregator_class=SquashDims,
        ... )
        >>> net(torch.zeros(10, 3, 32, 32)).shape
        torch.Size([10, 6400])
    """

    _spatial_dims = 2
    _conv = nn.Conv2d
    _lazy_conv = nn.LazyConv2d

    def __init__(
        self,
        in_features: int | None = None,
        depth: int | None = None,
        num_cells: Sequence[int] | int | None = None,
        kernel_sizes: Sequence[int | Sequence[int]] | int = 3,
        strides: Sequence[int] | int = 1,
        paddings: Sequence[int] | int = 0,
        activation_class: type[nn.Module] | Callable = nn.ELU,
        activation_kwargs: dict | list[dict] | None = None,
        norm_class: type[nn.Module] | Callable | None = None,
        norm_kwargs: dict | list[dict] | None = None,
        bias_last_layer: bool = True,
        aggregator_class: type[nn.Module] | Callable | None = SquashDims,
        aggregator_kwargs: dict | None = None,
        squeeze_output: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(
            in_features,
            depth,
            num_cells,
            kernel_sizes,
            strides,
            paddings,
            activation_class,
            activation_kwargs,
            norm_class,
            norm_kwargs,
            bias_last_layer,
            aggregator_class,
            aggregator_kwargs,
            squeeze_output,
            device,
        )

    def _squeeze_layer(self) -> nn.Module:
        return Squeeze2dLayer()

    @classmethod
    def default_atari_dqn(cls, num_actions: int) -> nn.Sequential:
        """The network of the DQN paper (Mnih et al., 2015): 3 convs and a 512-unit MLP."""
        from ._mlp import MLP

        cnn = cls(
            activation_class=nn.ReLU,
            num_cells=[32, 64, 64],
            kernel_sizes=[8, 4, 3],
            strides=[4, 2, 1],
        )
        mlp = MLP(activation_class=nn.ReLU, out_features=num_actions, num_cells=[512])
        return nn.Sequential(cnn, mlp)


Conv2dNet = ConvNet


class Conv3dNet(_ConvNetBase):
    """A 3d convolutional network; inputs ``[*B, C, D, H, W]``.

    Same arguments as :class:`ConvNet` (``nn.Conv3d`` layers, aggregator
    ``SquashDims(ndims_in=4)`` by default, ``squeeze_output`` squeezes the three last
    dims).

    Examples:
        >>> import torch
        >>> from rl.modules import Conv3dNet
        >>> net = Conv3dNet(in_features=1, num_cells=[4, 8], kernel_sizes=3)
        >>> net(torch.zeros(2, 5, 1, 7, 7, 7)).shape
        torch.Size([2, 5, 216])
    """

    _spatial_dims = 3
    _conv = nn.Conv3d
    _lazy_conv = nn.LazyConv3d

    def __init__(
        self,
        in_features: int | None = None,
        depth: int | None = None,
        num_cells: Sequence[int] | int | None = None,
        kernel_sizes: Sequence[int | Sequence[int]] | int = 3,
        strides: Sequence[int] | int = 1,
        paddings: Sequence[int] | int = 0,
        activation_class: type[nn.Module] | Callable = nn.ELU,
        activation_kwargs: dict | list[dict] | None = None,
        norm_class: type[nn.Module] | Callable | None = None,
        norm_kwargs: dict | list[dict] | None = None,
        bias_last_layer: bool = True,
        aggregator_class: type[nn.Module] | Callable | None = SquashDims,
        aggregator_kwargs: dict | None = None,
        squeeze_output: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(
            in_features,
            depth,
            num_cells,
            kernel_sizes,
            strides,
            paddings,
            activation_class,
            activation_kwargs,
            norm_class,
            norm_kwargs,
            bias_last_layer,
            aggregator_class,
            aggregator_kwargs,
            squeeze_output,
            device,
        )

    def _squeeze_layer(self) -> nn.Module:
        return SqueezeLayer((-3, -2, -1))
