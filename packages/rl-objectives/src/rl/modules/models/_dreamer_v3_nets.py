"""DreamerV3's networks: RMS-normalised MLPs, the block-diagonal GRU and the image codec.

Every hidden layer is ``linear -> RMSNorm (learned scale, no shift) -> SiLU``; linear
weights are drawn from a truncated normal of std ``1.1368 / sqrt(fan_in)`` with zero
biases, as in the reference implementation (Hafner et al., 2023,
https://arxiv.org/abs/2301.04104). The recurrent core splits its state into ``num_blocks``
groups, each updated by its own dense layer (a block-diagonal weight), which keeps a wide
state cheap.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import torch
from torch import nn
from torch.nn import functional as F

__all__ = [
    "DreamerV3BlockGRU",
    "DreamerV3BlockGRUCell",
    "DreamerV3ImageDecoder",
    "DreamerV3ImageEncoder",
    "DreamerV3MLP",
]


def _truncated_normal_(weight: torch.Tensor, fan_in: int) -> None:
    std = 1.1368 / fan_in**0.5
    nn.init.trunc_normal_(weight, std=std, a=-2 * std, b=2 * std)


def _dreamer_v3_init(module: nn.Module) -> None:
    """Reference initialisation of a linear or (transposed) convolution layer."""
    if isinstance(module, nn.Linear):
        fan_in = module.in_features
    elif isinstance(module, (nn.Conv2d, nn.ConvTranspose2d)):
        fan_in = module.in_channels * module.kernel_size[0] * module.kernel_size[1]
    else:
        return
    _truncated_normal_(module.weight, fan_in)
    if module.bias is not None:
        nn.init.zeros_(module.bias)


class _RMSNorm(nn.Module):
    """RMS normalisation of the last dim with a learned scale; computed in float32."""

    def __init__(self, features: int, eps: float = 1e-4, device=None) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(features, device=device))

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        out = F.rms_norm(value.float(), (self.weight.shape[0],), self.weight.float(), self.eps)
        return out.to(value.dtype)


class _ChannelRMSNorm(_RMSNorm):
    """:class:`_RMSNorm` over the channel dim of ``[..., C, H, W]`` maps."""

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        return super().forward(value.movedim(-3, -1)).movedim(-1, -3)


class _BlockLinear(nn.Module):
    """``num_blocks`` independent linear maps of equal feature groups (a block-diagonal weight).

    ``weight`` is ``[num_blocks, in/num_blocks, out/num_blocks]``; its fan-in for the
    initialisation is the whole ``in_features``, as in the reference.
    """

    def __init__(self, in_features: int, out_features: int, num_blocks: int, *, device=None):
        super().__init__()
        if in_features % num_blocks or out_features % num_blocks:
            raise ValueError(
                f"in_features ({in_features}) and out_features ({out_features}) must be "
                f"divisible by num_blocks ({num_blocks})."
            )
        self.in_features = in_features
        self.out_features = out_features
        self.num_blocks = num_blocks
        self.weight = nn.Parameter(
            torch.empty(
                num_blocks, in_features // num_blocks, out_features // num_blocks, device=device
            )
        )
        self.bias = nn.Parameter(torch.zeros(out_features, device=device))
        _truncated_normal_(self.weight, in_features)

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        batch = value.shape[:-1]
        grouped = value.reshape(-1, self.num_blocks, self.in_features // self.num_blocks)
        out = torch.bmm(grouped.transpose(0, 1), self.weight.to(value.dtype)).transpose(0, 1)
        return out.reshape(*batch, self.out_features) + self.bias.to(value.dtype)


def _norm_silu_layers(sizes: list[int], eps: float, device) -> list[nn.Module]:
    """``linear -> RMSNorm -> SiLU`` for each consecutive pair of ``sizes``."""
    layers: list[nn.Module] = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        layers += [
            nn.Linear(fan_in, fan_out, device=device),
            _RMSNorm(fan_out, eps, device=device),
            nn.SiLU(),
        ]
    return layers


def _block_gru_update(
    features: torch.Tensor,
    hidden: torch.Tensor,
    dynamics: Callable[[torch.Tensor], torch.Tensor],
    gates: _BlockLinear,
    num_blocks: int,
    update_bias: float,
) -> torch.Tensor:
    """One block-GRU update of ``hidden [*B, H]`` from shared ``features [*B, F]``.

    Each of the ``num_blocks`` groups of ``hidden`` sees its own slice of the state and
    all of ``features``; ``dynamics`` (block-linear layers) then the gates give the
    ``reset``, ``candidate`` and ``update`` logits per group:
    ``h' = u * tanh(r * c) + (1 - u) * h`` with ``u = sigmoid(update + update_bias)``.
    """
    size = hidden.shape[-1]
    group = size // num_blocks
    grouped = hidden.reshape(*hidden.shape[:-1], num_blocks, group)
    shared = features.unsqueeze(-2).expand(*features.shape[:-1], num_blocks, features.shape[-1])
    mixed = dynamics(torch.cat([grouped, shared], -1).flatten(-2))
    logits = gates(mixed).reshape(*mixed.shape[:-1], num_blocks, 3, group)
    reset, candidate, update = (part.flatten(-2) for part in logits.unbind(-2))
    candidate = torch.tanh(torch.sigmoid(reset) * candidate)
    update = torch.sigmoid(update + update_bias)
    return update * candidate + (1 - update) * hidden


class DreamerV3MLP(nn.Module):
    """DreamerV3's MLP: ``depth`` layers of linear -> RMSNorm -> SiLU, then a linear output.

    Several inputs are concatenated along the last dim.

    Args:
        in_features (int): input size (of the concatenated inputs).
        out_features (int or None): output size; ``None`` returns the last hidden layer.
        depth (int, optional): hidden layers. Defaults to ``3``.
        num_cells (int, optional): hidden size. Defaults to ``1024``.
        outscale (float, optional): factor on the output layer's initial weights
            (``0.0`` makes a head that starts at zero). Defaults to ``1.0``.
        norm_eps (float, optional): RMSNorm epsilon. Defaults to ``1e-4``.
        device (torch.device, optional): parameter device.

    Examples:
        >>> import torch
        >>> from rl.modules import DreamerV3MLP
        >>> DreamerV3MLP(6, 4, depth=2, num_cells=8)(torch.randn(3, 2), torch.randn(3, 4)).shape
        torch.Size([3, 4])
    """

    def __init__(
        self,
        in_features: int,
        out_features: int | None,
        depth: int = 3,
        num_cells: int = 1024,
        outscale: float = 1.0,
        norm_eps: float = 1e-4,
        device=None,
    ) -> None:
        super().__init__()
        self.in_features = in_features
        layers = _norm_silu_layers([in_features] + [num_cells] * depth, norm_eps, device)
        output = None
        if out_features is not None:
            output = nn.Linear(num_cells if depth else in_features, out_features, device=device)
            layers.append(output)
        self.model = nn.Sequential(*layers)
        self.model.apply(_dreamer_v3_init)
        if output is not None:
            with torch.no_grad():
                output.weight.mul_(outscale)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        value = inputs[0] if len(inputs) == 1 else torch.cat(inputs, -1)
        if value.shape[-1] != self.in_features:
            raise ValueError(
                f"DreamerV3MLP expects {self.in_features} input features, got "
                f"{value.shape[-1]} (inputs of shapes {[tuple(i.shape) for i in inputs]})."
            )
        return self.model(value)


class DreamerV3BlockGRUCell(nn.Module):
    """One step of DreamerV3's block-diagonal GRU.

    The input and the hidden state are each projected to ``projection_size`` (linear ->
    RMSNorm -> activation); each of the ``num_blocks`` state groups then goes through
    ``num_layers`` block-linear layers and the gates (see :class:`DreamerV3BlockGRU`).

    Args:
        input_size (int): input features.
        hidden_size (int): state size, divisible by ``num_blocks``.

    Keyword Args:
        projection_size (int, optional): width of the input and state projections.
            Defaults to ``512``.
        num_blocks (int, optional): state groups. Defaults to ``8``.
        num_layers (int, optional): block-linear layers before the gates. Defaults to ``1``.
        activation_class (type or callable, optional): a parameter-free element-wise
            activation. Defaults to :class:`torch.nn.SiLU`.
        norm_eps (float, optional): RMSNorm epsilon. Defaults to ``1e-4``.
        update_bias (float, optional): offset of the update-gate logit. Defaults to ``-1.0``.
        device (torch.device, optional): parameter device.

    Examples:
        >>> import torch
        >>> from rl.modules import DreamerV3BlockGRUCell
        >>> cell = DreamerV3BlockGRUCell(6, 8, projection_size=4, num_blocks=2)
        >>> cell(torch.randn(3, 6), torch.zeros(3, 8)).shape
        torch.Size([3, 8])
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        projection_size: int = 512,
        num_blocks: int = 8,
        num_layers: int = 1,
        activation_class: type[nn.Module] | Callable = nn.SiLU,
        norm_eps: float = 1e-4,
        update_bias: float = -1.0,
        device=None,
    ) -> None:
        super().__init__()
        if num_blocks <= 0:
            raise ValueError(f"num_blocks must be positive, got {num_blocks}.")
        if hidden_size % num_blocks:
            raise ValueError(
                f"hidden_size must be divisible by num_blocks, got {hidden_size} and {num_blocks}."
            )
        if num_layers < 1:
            raise ValueError(f"num_layers must be positive, got {num_layers}.")
        activation = activation_class() if isinstance(activation_class, type) else activation_class
        if not callable(activation):
            raise TypeError("activation_class must construct a callable activation.")
        if isinstance(activation, nn.Module) and next(activation.parameters(), None) is not None:
            raise ValueError("activation_class must not have learnable parameters.")
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.projection_size = projection_size
        self.num_blocks = num_blocks
        self.num_layers = num_layers
        self.norm_eps = norm_eps
        self.update_bias = update_bias
        self.activation = activation
        self.input_linear = nn.Linear(input_size, projection_size, device=device)
        self.input_norm = _RMSNorm(projection_size, norm_eps, device=device)
        self.hidden_linear = nn.Linear(hidden_size, projection_size, device=device)
        self.hidden_norm = _RMSNorm(projection_size, norm_eps, device=device)
        first = hidden_size + 2 * projection_size * num_blocks
        self.dynamic_linears = nn.ModuleList(
            _BlockLinear(first if i == 0 else hidden_size, hidden_size, num_blocks, device=device)
            for i in range(num_layers)
        )
        self.dynamic_norms = nn.ModuleList(
            _RMSNorm(hidden_size, norm_eps, device=device) for _ in range(num_layers)
        )
        self.gates = _BlockLinear(hidden_size, 3 * hidden_size, num_blocks, device=device)
        self.apply(_dreamer_v3_init)

    def _dynamics(self, value: torch.Tensor) -> torch.Tensor:
        for linear, norm in zip(self.dynamic_linears, self.dynamic_norms):
            value = self.activation(norm(linear(value)))
        return value

    def _project_input(self, value: torch.Tensor) -> torch.Tensor:
        return self.activation(self.input_norm(self.input_linear(value)))

    def _step_projected(self, projected: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        hidden_features = self.activation(self.hidden_norm(self.hidden_linear(hidden)))
        features = torch.cat((projected, hidden_features), -1)
        return _block_gru_update(
            features, hidden, self._dynamics, self.gates, self.num_blocks, self.update_bias
        )

    def forward(self, input: torch.Tensor, hidden: torch.Tensor | None = None) -> torch.Tensor:
        """The next state ``[*B, hidden_size]`` from ``input [*B, input_size]``.

        ``hidden`` defaults to zeros.
        """
        if input.shape[-1] != self.input_size:
            raise ValueError(
                f"input has shape {tuple(input.shape)}, expected a last dim of "
                f"input_size={self.input_size}."
            )
        if hidden is None:
            hidden = input.new_zeros(*input.shape[:-1], self.hidden_size)
        if hidden.shape != (*input.shape[:-1], self.hidden_size):
            raise ValueError(
                f"hidden has shape {tuple(hidden.shape)}, expected "
                f"{(*input.shape[:-1], self.hidden_size)} (input batch, hidden_size)."
            )
        return self._step_projected(self._project_input(input), hidden)


class DreamerV3BlockGRU(nn.Module):
    """DreamerV3's block-diagonal GRU over a batch-major sequence ``[B, T, input_size]``.

    The input projection runs once for the whole sequence; the state then steps through
    time, zeroed before each step that ``is_init`` marks (the first step of an episode).

    Args:
        input_size (int): input features.
        hidden_size (int): state size.

    Keyword Args:
        projection_size, num_blocks, num_layers, activation_class, norm_eps, update_bias:
            as :class:`DreamerV3BlockGRUCell`.
        recurrent_backend (str, optional): ``"reference"``, a loop of the cell in plain
            autograd (``torch.compile`` it to fuse the step). TorchRL's hand-written
            ``"scan"`` and ``"triton"`` backward kernels are not provided here.
            Defaults to ``"reference"``.
        device (torch.device, optional): parameter device.

    Returns (from ``forward``):
        ``(output [B, T, hidden_size], last_hidden [B, hidden_size])``.

    Examples:
        >>> import torch
        >>> from rl.modules import DreamerV3BlockGRU
        >>> gru = DreamerV3BlockGRU(6, 8, projection_size=4, num_blocks=2)
        >>> output, hidden = gru(torch.randn(3, 5, 6))
        >>> output.shape, hidden.shape
        (torch.Size([3, 5, 8]), torch.Size([3, 8]))
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        projection_size: int = 512,
        num_blocks: int = 8,
        num_layers: int = 1,
        activation_class: type[nn.Module] | Callable = nn.SiLU,
        norm_eps: float = 1e-4,
        update_bias: float = -1.0,
        recurrent_backend: Literal["reference", "scan", "triton"] = "reference",
        device=None,
    ) -> None:
        super().__init__()
        if recurrent_backend in ("scan", "triton"):
            raise NotImplementedError(
                f"recurrent_backend={recurrent_backend!r} (TorchRL's fused backward kernels) "
                "is not provided by rl; use 'reference' and torch.compile."
            )
        if recurrent_backend != "reference":
            raise ValueError(
                f"recurrent_backend must be 'reference', 'scan', or 'triton', got "
                f"{recurrent_backend!r}."
            )
        self.recurrent_backend = recurrent_backend
        self.cell = DreamerV3BlockGRUCell(
            input_size,
            hidden_size,
            projection_size=projection_size,
            num_blocks=num_blocks,
            num_layers=num_layers,
            activation_class=activation_class,
            norm_eps=norm_eps,
            update_bias=update_bias,
            device=device,
        )

    def forward(
        self,
        input: torch.Tensor,
        hidden: torch.Tensor | None = None,
        is_init: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        cell = self.cell
        if input.ndim != 3 or input.shape[-1] != cell.input_size:
            raise ValueError(
                f"input must have shape [batch, time, input_size={cell.input_size}], got "
                f"{tuple(input.shape)}."
            )
        batch, time, _ = input.shape
        if time == 0:
            raise ValueError("input must contain at least one timestep.")
        if hidden is None:
            hidden = input.new_zeros(batch, cell.hidden_size)
        if hidden.shape != (batch, cell.hidden_size):
            raise ValueError(
                f"hidden must have shape {(batch, cell.hidden_size)}, got {tuple(hidden.shape)}."
            )
        if is_init is None:
            is_init = torch.zeros(batch, time, dtype=torch.bool, device=input.device)
        elif is_init.ndim == 3 and is_init.shape[-1] == 1:
            is_init = is_init.squeeze(-1)
        if is_init.shape != (batch, time) or is_init.dtype is not torch.bool:
            raise ValueError(
                f"is_init must be boolean with shape {(batch, time)} or {(batch, time, 1)}, "
                f"got {tuple(is_init.shape)} and {is_init.dtype}."
            )
        projected = cell._project_input(input)
        outputs = []
        for projected_t, init_t in zip(projected.unbind(1), is_init.unbind(1)):
            hidden = torch.where(init_t.unsqueeze(-1), 0, hidden)
            hidden = cell._step_projected(projected_t, hidden)
            outputs.append(hidden)
        return torch.stack(outputs, 1), hidden


class DreamerV3ImageEncoder(nn.Module):
    """DreamerV3's image encoder: stride-2 convolutions, each with channel RMSNorm and SiLU.

    Stage ``i`` outputs ``depth * mults[i]`` channels and halves the resolution (rounding
    up). Images ``[*B, C, H, W]``, ``uint8`` in ``[0, 255]`` or float in ``[0, 1]``, are
    mapped to ``[-0.5, 0.5]``; the output is the flattened last feature map.

    Args:
        in_channels (int, optional): image channels. Defaults to ``3``.
        depth (int, optional): base channel count. Defaults to ``64``.
        mults (tuple of int, optional): channel multiplier per stage. Defaults to
            ``(2, 3, 4, 4)``.
        kernel_size (int, optional): odd kernel size. Defaults to ``5``.
        norm_eps (float, optional): RMSNorm epsilon. Defaults to ``1e-4``.
        device (torch.device, optional): parameter device.

    Examples:
        >>> import torch
        >>> from rl.modules import DreamerV3ImageEncoder
        >>> encoder = DreamerV3ImageEncoder(depth=8, mults=(1, 2))
        >>> encoder(torch.randint(0, 256, (4, 3, 16, 16), dtype=torch.uint8)).shape
        torch.Size([4, 256])
        >>> encoder.output_features((3, 16, 16))
        256
    """

    def __init__(
        self,
        in_channels: int = 3,
        depth: int = 64,
        mults: tuple[int, ...] = (2, 3, 4, 4),
        kernel_size: int = 5,
        norm_eps: float = 1e-4,
        device=None,
    ) -> None:
        super().__init__()
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be a positive odd integer, got {kernel_size}.")
        if not mults:
            raise ValueError("mults must contain at least one stage.")
        self.in_channels = in_channels
        layers: list[nn.Module] = []
        channels = in_channels
        for mult in mults:
            layers += [
                nn.Conv2d(
                    channels,
                    depth * mult,
                    kernel_size,
                    stride=2,
                    padding=kernel_size // 2,
                    device=device,
                ),
                _ChannelRMSNorm(depth * mult, norm_eps, device=device),
                nn.SiLU(),
            ]
            channels = depth * mult
        self.layers = nn.Sequential(*layers)
        self.layers.apply(_dreamer_v3_init)
        self.out_channels = channels
        self.num_stages = len(mults)

    def output_features(self, image_shape: tuple[int, int, int]) -> int:
        """Flattened output size for a ``(C, H, W)`` image."""
        _, height, width = image_shape
        for _ in range(self.num_stages):
            height, width = -(-height // 2), -(-width // 2)
        return self.out_channels * height * width

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        if image.ndim < 3 or image.shape[-3] != self.in_channels:
            raise ValueError(
                f"image has shape {tuple(image.shape)}, expected [*batch, "
                f"{self.in_channels}, H, W]."
            )
        if not image.is_floating_point():
            image = image.float() / 255.0
        batch = image.shape[:-3]
        features = self.layers(image.reshape(-1, *image.shape[-3:]) - 0.5)
        return features.reshape(*batch, -1)


class DreamerV3ImageDecoder(nn.Module):
    """DreamerV3's image decoder: a (block-)linear projection then stride-2 transposed convs.

    The latent is projected to the smallest feature map (``depth * mults[-1]`` channels at
    ``H / 2**len(mults)``), normalised and activated; each transposed convolution doubles
    the resolution, the last one outputs the image channels (no norm), shifted by ``0.5``.

    Args:
        in_features (int): latent size (several inputs are concatenated).
        image_shape (tuple of int, optional): ``(C, H, W)``, with ``H`` and ``W``
            divisible by ``2 ** len(mults)``. Defaults to ``(3, 64, 64)``.
        depth (int, optional): base channel count. Defaults to ``64``.
        mults (tuple of int, optional): the encoder's multipliers, mirrored. Defaults to
            ``(2, 3, 4, 4)``.
        kernel_size (int, optional): odd kernel size. Defaults to ``5``.
        num_blocks (int, optional): blocks of the input projection; ``1`` is a dense
            layer. Defaults to ``8``.
        norm_eps (float, optional): RMSNorm epsilon. Defaults to ``1e-4``.
        device (torch.device, optional): parameter device.

    Examples:
        >>> import torch
        >>> from rl.modules import DreamerV3ImageDecoder
        >>> decoder = DreamerV3ImageDecoder(12, image_shape=(3, 16, 16), depth=8,
        ...                                 mults=(1, 2), num_blocks=2)
        >>> decoder(torch.randn(4, 8), torch.randn(4, 4)).shape
        torch.Size([4, 3, 16, 16])
    """

    def __init__(
        self,
        in_features: int,
        image_shape: tuple[int, int, int] = (3, 64, 64),
        depth: int = 64,
        mults: tuple[int, ...] = (2, 3, 4, 4),
        kernel_size: int = 5,
        num_blocks: int = 8,
        norm_eps: float = 1e-4,
        device=None,
    ) -> None:
        super().__init__()
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be a positive odd integer, got {kernel_size}.")
        if not mults:
            raise ValueError("mults must contain at least one stage.")
        channels, height, width = image_shape
        factor = 2 ** len(mults)
        if height % factor or width % factor:
            raise ValueError(
                f"The image height and width {tuple(image_shape[1:])} must be divisible by "
                f"2 ** len(mults) = {factor}."
            )
        self.in_features = in_features
        self.initial_shape = (depth * mults[-1], height // factor, width // factor)
        size = math.prod(self.initial_shape)
        if num_blocks > 1:
            self.projection = _BlockLinear(in_features, size, num_blocks, device=device)
        else:
            self.projection = nn.Linear(in_features, size, device=device)
            _dreamer_v3_init(self.projection)
        self.projection_norm = _ChannelRMSNorm(self.initial_shape[0], norm_eps, device=device)
        layers: list[nn.Module] = []
        in_channels = self.initial_shape[0]
        for stage in reversed(range(len(mults))):
            out_channels = channels if stage == 0 else depth * mults[stage - 1]
            layers.append(
                nn.ConvTranspose2d(
                    in_channels,
                    out_channels,
                    kernel_size,
                    stride=2,
                    padding=kernel_size // 2,
                    output_padding=1,
                    device=device,
                )
            )
            if stage:
                layers += [_ChannelRMSNorm(out_channels, norm_eps, device=device), nn.SiLU()]
            in_channels = out_channels
        self.layers = nn.Sequential(*layers)
        self.layers.apply(_dreamer_v3_init)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        value = inputs[0] if len(inputs) == 1 else torch.cat(inputs, -1)
        if value.shape[-1] != self.in_features:
            raise ValueError(
                f"DreamerV3ImageDecoder expects {self.in_features} latent features, got "
                f"{value.shape[-1]} (inputs of shapes {[tuple(i.shape) for i in inputs]})."
            )
        batch = value.shape[:-1]
        hidden = self.projection(value.reshape(-1, value.shape[-1]))
        hidden = F.silu(self.projection_norm(hidden.reshape(-1, *self.initial_shape)))
        image = self.layers(hidden) + 0.5
        return image.reshape(*batch, *image.shape[-3:])
