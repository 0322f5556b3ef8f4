"""Ready-made value and policy networks: dueling DQN heads and the DDPG actors and critics."""

from __future__ import annotations

import torch
from torch import nn

from ._conv import ConvNet
from ._mlp import MLP
from ._utils import SquashDims

__all__ = [
    "DdpgCnnActor",
    "DdpgCnnQNet",
    "DdpgMlpActor",
    "DdpgMlpQNet",
    "DuelingCnnDQNet",
    "DuelingMlpDQNet",
    "ddpg_init_last_layer",
]


def _merged(defaults: dict, overrides: dict | None) -> dict:
    out = dict(defaults)
    out.update(overrides or {})
    return out


def _dueling(value: torch.Tensor, advantage: torch.Tensor) -> torch.Tensor:
    return value + advantage - advantage.mean(dim=-1, keepdim=True)


def _zero_biases(module: nn.Module) -> None:
    for layer in module.modules():
        bias = getattr(layer, "bias", None)
        # lazy layers are initialized at their first call (by their own reset)
        if (
            isinstance(layer, (nn.Conv2d, nn.Linear))
            and isinstance(bias, torch.Tensor)
            and not isinstance(bias, nn.parameter.UninitializedParameter)
        ):
            with torch.no_grad():
                layer.bias.zero_()


class DuelingMlpDQNet(nn.Module):
    """Dueling Q-network on an MLP trunk: ``Q = V + A - mean(A)``.

    Wang et al., 2016, https://arxiv.org/abs/1511.06581.

    Args:
        out_features (int): number of actions (advantage outputs).
        out_features_value (int, optional): value outputs. Defaults to ``1``.
        mlp_kwargs_feature (dict, optional): overrides of the trunk MLP's kwargs
            (defaults ``num_cells=[256, 256], out_features=256, activation_class=nn.ELU,
            activate_last_layer=True``).
        mlp_kwargs_output (dict, optional): overrides of the value and advantage MLPs'
            kwargs (defaults ``depth=1, num_cells=512, activation_class=nn.ELU``).
        device (torch.device, optional): device of the parameters.

    Examples:
        >>> import torch
        >>> from rl.modules import DuelingMlpDQNet
        >>> net = DuelingMlpDQNet(2, mlp_kwargs_feature={"num_cells": [16]})
        >>> net(torch.zeros(3, 5)).shape
        torch.Size([3, 2])
    """

    def __init__(
        self,
        out_features: int,
        out_features_value: int = 1,
        mlp_kwargs_feature: dict | None = None,
        mlp_kwargs_output: dict | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        feature_kwargs = _merged(
            {
                "num_cells": [256, 256],
                "out_features": 256,
                "activation_class": nn.ELU,
                "activate_last_layer": True,
            },
            mlp_kwargs_feature,
        )
        output_kwargs = _merged(
            {
                "depth": 1,
                "activation_class": nn.ELU,
                "num_cells": 512,
                "bias_last_layer": True,
            },
            mlp_kwargs_output,
        )
        self.out_features = out_features
        self.out_features_value = out_features_value
        self.features = MLP(device=device, **feature_kwargs)
        self.advantage = MLP(out_features=out_features, device=device, **output_kwargs)
        self.value = MLP(out_features=out_features_value, device=device, **output_kwargs)
        _zero_biases(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        return _dueling(self.value(x), self.advantage(x))


class DuelingCnnDQNet(nn.Module):
    """Dueling Q-network on a ConvNet trunk (the Atari dueling DQN).

    Args:
        out_features (int): number of actions.
        out_features_value (int, optional): value outputs. Defaults to ``1``.
        cnn_kwargs (dict, optional): overrides of the ConvNet kwargs (defaults
            ``num_cells=[32, 64, 64], strides=[4, 2, 1], kernel_sizes=[8, 4, 3]``).
        mlp_kwargs (dict, optional): overrides of the value and advantage MLPs' kwargs
            (defaults ``depth=1, num_cells=512, activation_class=nn.ELU``).
        device (torch.device, optional): device of the parameters.

    Examples:
        >>> import torch
        >>> from rl.modules import DuelingCnnDQNet
        >>> net = DuelingCnnDQNet(4, cnn_kwargs={"num_cells": [8, 8, 8]}, mlp_kwargs={"num_cells": 16})
        >>> net(torch.zeros(2, 3, 84, 84)).shape
        torch.Size([2, 4])
    """

    def __init__(
        self,
        out_features: int,
        out_features_value: int = 1,
        cnn_kwargs: dict | None = None,
        mlp_kwargs: dict | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        cnn_kwargs = _merged(
            {"num_cells": [32, 64, 64], "strides": [4, 2, 1], "kernel_sizes": [8, 4, 3]},
            cnn_kwargs,
        )
        mlp_kwargs = _merged(
            {
                "depth": 1,
                "activation_class": nn.ELU,
                "num_cells": 512,
                "bias_last_layer": True,
            },
            mlp_kwargs,
        )
        self.out_features = out_features
        self.out_features_value = out_features_value
        self.features = ConvNet(device=device, **cnn_kwargs)
        self.advantage = MLP(out_features=out_features, device=device, **mlp_kwargs)
        self.value = MLP(out_features=out_features_value, device=device, **mlp_kwargs)
        _zero_biases(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        return _dueling(self.value(x), self.advantage(x))


def ddpg_init_last_layer(
    module: nn.Sequential,
    scale: float = 6e-4,
    device: torch.device | str | None = None,
) -> None:
    """Draws the last linear/conv layer's weights and bias from ``U(-scale/2, scale/2)``.

    The small last layer of DDPG (Lillicrap et al., 2015, https://arxiv.org/abs/1509.02971).

    Raises:
        RuntimeError: if ``module`` holds no ``nn.Linear`` or ``nn.Conv2d``.
    """
    for last_layer in reversed(module):
        if isinstance(last_layer, (nn.Linear, nn.Conv2d)):
            break
    else:
        raise RuntimeError("ddpg_init_last_layer found no nn.Linear / nn.Conv2d to initialize")
    with torch.no_grad():
        last_layer.weight.uniform_(-scale / 2, scale / 2)
        if last_layer.bias is not None:
            last_layer.bias.uniform_(-scale / 2, scale / 2)


def _ddpg_conv_defaults(num_cells: list[int], use_avg_pooling: bool) -> dict:
    return {
        "in_features": None,
        "num_cells": num_cells,
        "kernel_sizes": [8, 4, 3],
        "strides": [4, 2, 1],
        "paddings": [0, 0, 1],
        "activation_class": nn.ELU,
        "norm_class": None,
        "aggregator_class": nn.AdaptiveAvgPool2d if use_avg_pooling else SquashDims,
        "aggregator_kwargs": {"output_size": (1, 1)} if use_avg_pooling else {"ndims_in": 3},
        "squeeze_output": use_avg_pooling,
    }


class DdpgMlpActor(nn.Module):
    """DDPG actor: an MLP ``obs -> action`` (hidden ``[400, 300]``, ELU) with a small last layer.

    Args:
        action_dim (int): action size.
        mlp_net_kwargs (dict, optional): overrides of the MLP kwargs.
        device (torch.device, optional): device of the parameters.

    Examples:
        >>> import torch
        >>> from rl.modules import DdpgMlpActor
        >>> DdpgMlpActor(2)(torch.zeros(5, 3)).shape
        torch.Size([5, 2])
    """

    def __init__(
        self,
        action_dim: int,
        mlp_net_kwargs: dict | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        kwargs = _merged(
            {
                "in_features": None,
                "out_features": action_dim,
                "depth": 2,
                "num_cells": [400, 300],
                "activation_class": nn.ELU,
                "bias_last_layer": True,
            },
            mlp_net_kwargs,
        )
        self.mlp = MLP(device=device, **kwargs)
        ddpg_init_last_layer(self.mlp, 6e-3, device=device)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.mlp(observation)


class DdpgMlpQNet(nn.Module):
    """DDPG critic: ``mlp2(cat(mlp1(obs), action))`` (400 then 300 units, ELU).

    Args:
        mlp_net_kwargs_net1 (dict, optional): overrides of the observation MLP's kwargs.
        mlp_net_kwargs_net2 (dict, optional): overrides of the joint MLP's kwargs.
        device (torch.device, optional): device of the parameters.

    Examples:
        >>> import torch
        >>> from rl.modules import DdpgMlpQNet
        >>> DdpgMlpQNet()(torch.zeros(5, 3), torch.zeros(5, 2)).shape
        torch.Size([5, 1])
    """

    def __init__(
        self,
        mlp_net_kwargs_net1: dict | None = None,
        mlp_net_kwargs_net2: dict | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        kwargs1 = _merged(
            {
                "in_features": None,
                "out_features": 400,
                "depth": 0,
                "num_cells": [],
                "activation_class": nn.ELU,
                "bias_last_layer": True,
                "activate_last_layer": True,
            },
            mlp_net_kwargs_net1,
        )
        kwargs2 = _merged(
            {
                "in_features": None,
                "out_features": 1,
                "num_cells": [300],
                "activation_class": nn.ELU,
                "bias_last_layer": True,
            },
            mlp_net_kwargs_net2,
        )
        self.mlp1 = MLP(device=device, **kwargs1)
        self.mlp2 = MLP(device=device, **kwargs2)
        ddpg_init_last_layer(self.mlp2, 6e-3, device=device)

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.mlp2(torch.cat([self.mlp1(observation), action], -1))


class DdpgCnnActor(nn.Module):
    """DDPG actor on pixels: ConvNet then MLP; returns ``(action, hidden)``.

    Args:
        action_dim (int): action size.
        conv_net_kwargs (dict, optional): overrides of the ConvNet kwargs.
        mlp_net_kwargs (dict, optional): overrides of the MLP kwargs (defaults: depth 2,
            200 units, ELU).
        use_avg_pooling (bool, optional): average-pool instead of flattening. Defaults to
            ``False``.
        device (torch.device, optional): device of the parameters.

    Examples:
        >>> import torch
        >>> from rl.modules import DdpgCnnActor
        >>> action, hidden = DdpgCnnActor(2)(torch.zeros(1, 3, 64, 64))
        >>> action.shape
        torch.Size([1, 2])
    """

    def __init__(
        self,
        action_dim: int,
        conv_net_kwargs: dict | None = None,
        mlp_net_kwargs: dict | None = None,
        use_avg_pooling: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        conv_kwargs = _merged(_ddpg_conv_defaults([32, 64, 64], use_avg_pooling), conv_net_kwargs)
        mlp_kwargs = _merged(
            {
                "in_features": None,
                "out_features": action_dim,
                "depth": 2,
                "num_cells": 200,
                "activation_class": nn.ELU,
                "bias_last_layer": True,
            },
            mlp_net_kwargs,
        )
        self.convnet = ConvNet(device=device, **conv_kwargs)
        self.mlp = MLP(device=device, **mlp_kwargs)
        ddpg_init_last_layer(self.mlp, 6e-4, device=device)

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.convnet(observation)
        return self.mlp(hidden), hidden


class DdpgCnnQNet(nn.Module):
    """DDPG critic on pixels: ``mlp(cat(convnet(obs), action))``.

    Args:
        conv_net_kwargs (dict, optional): overrides of the ConvNet kwargs.
        mlp_net_kwargs (dict, optional): overrides of the MLP kwargs.
        use_avg_pooling (bool, optional): average-pool instead of flattening. Defaults to
            ``True``.
        device (torch.device, optional): device of the parameters.

    Examples:
        >>> import torch
        >>> from rl.modules import DdpgCnnQNet
        >>> DdpgCnnQNet()(torch.zeros(1, 3, 64, 64), torch.zeros(1, 2)).shape
        torch.Size([1, 1])
    """

    def __init__(
        self,
        conv_net_kwargs: dict | None = None,
        mlp_net_kwargs: dict | None = None,
        use_avg_pooling: bool = True,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        conv_kwargs = _merged(_ddpg_conv_defaults([32, 64, 128], use_avg_pooling), conv_net_kwargs)
        mlp_kwargs = _merged(
            {
                "in_features": None,
                "out_features": 1,
                "depth": 2,
                "num_cells": 200,
                "activation_class": nn.ELU,
                "bias_last_layer": True,
            },
            mlp_net_kwargs,
        )
        self.convnet = ConvNet(device=device, **conv_kwargs)
        self.mlp = MLP(device=device, **mlp_kwargs)
        ddpg_init_last_layer(self.mlp, 6e-4, device=device)

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.mlp(torch.cat([self.convnet(observation), action], -1))
