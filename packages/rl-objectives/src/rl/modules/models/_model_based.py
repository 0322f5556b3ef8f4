"""Dreamer (v1) networks: pixel encoder/decoder, the RSSM prior/posterior and rollout, the actor.

Names, arguments and defaults follow ``torchrl.modules.models.model_based`` (TorchRL 0.14.1).
The RSSM keeps two latents: a stochastic ``state`` (``[*B, state_dim]``) and a deterministic
``belief`` (``[*B, rnn_hidden_dim]``), the hidden state of a GRU cell.
"""

from __future__ import annotations

import warnings

import torch
from tensordict.nn import NormalParamExtractor, TensorDictModuleBase, TensorDictSequential
from torch import nn

from ._mlp import MLP

__all__ = [
    "DreamerActor",
    "ObsDecoder",
    "ObsEncoder",
    "RSSMPosterior",
    "RSSMPrior",
    "RSSMRollout",
]


def _check_last_dim(name: str, tensor: torch.Tensor, expected: int | None, module: str) -> None:
    if expected is not None and tensor.shape[-1] != expected:
        raise ValueError(
            f"{module}: {name} has last dimension {tensor.shape[-1]} (shape "
            f"{tuple(tensor.shape)}), expected {expected}"
        )


class DreamerActor(nn.Module):
    """Dreamer's actor: an MLP of ``(state, belief)`` to the ``loc`` and ``scale`` of the action.

    Reference: https://arxiv.org/abs/1912.01603

    Args:
        out_features (int): the action dimension.
        depth (int, optional): hidden layers. Defaults to ``4``.
        num_cells (int, optional): units per hidden layer. Defaults to ``200``.
        activation_class (type, optional): activation. Defaults to :class:`torch.nn.ELU`.
        std_bias (float, optional): bias of the softplus scale mapping. Defaults to ``5.0``.
        std_min_val (float, optional): smallest scale. Defaults to ``1e-4``.
        device (torch.device, optional): where to create the parameters.

    Examples:
        >>> import torch
        >>> from rl.modules import DreamerActor
        >>> actor = DreamerActor(2, depth=1, num_cells=8)
        >>> loc, scale = actor(torch.zeros(3, 4), torch.zeros(3, 5))
        >>> loc.shape, bool((scale > 0).all())
        (torch.Size([3, 2]), True)
    """

    def __init__(
        self,
        out_features,
        depth=4,
        num_cells=200,
        activation_class=nn.ELU,
        std_bias=5.0,
        std_min_val=1e-4,
        device=None,
    ):
        super().__init__()
        self.backbone = MLP(
            out_features=2 * out_features,
            depth=depth,
            num_cells=num_cells,
            activation_class=activation_class,
            device=device,
        )
        self.backbone.append(
            NormalParamExtractor(scale_mapping=f"biased_softplus_{std_bias}_{std_min_val}")
        )

    def forward(self, state, belief):
        loc, scale = self.backbone(state, belief)
        return loc, scale


class ObsEncoder(nn.Module):
    """Pixel encoder: ``num_layers`` stride-2 4x4 convolutions (ReLU), flattened.

    Reference: https://arxiv.org/abs/1803.10122

    Args:
        channels (int, optional): channels of the first layer, doubled at each next one.
            Defaults to ``32``.
        num_layers (int, optional): number of convolutions. Defaults to ``4``.
        in_channels (int, optional): input channels; ``None`` uses a lazy first layer.
        depth (int, optional): deprecated name of ``channels`` (warns).
        device (torch.device, optional): where to create the parameters.

    ``forward(observation)`` maps ``[*B, C, H, W]`` to ``[*B, features]``
    (64x64 inputs give ``channels * 8 * 2 * 2`` features with the defaults).

    Examples:
        >>> import torch
        >>> from rl.modules import ObsEncoder
        >>> ObsEncoder(channels=4, in_channels=3)(torch.zeros(2, 5, 3, 64, 64)).shape
        torch.Size([2, 5, 128])
    """

    def __init__(self, channels=32, num_layers=4, in_channels=None, depth=None, device=None):
        if depth is not None:
            warnings.warn(
                f"The depth argument of {type(self).__name__} is deprecated: use channels "
                "for the layer size and num_layers for the depth.",
                stacklevel=2,
            )
            channels = depth
        if num_layers < 1:
            raise RuntimeError("num_layers cannot be smaller than 1.")
        super().__init__()
        if in_channels is not None:
            first = nn.Conv2d(in_channels, channels, 4, stride=2, device=device)
        else:
            first = nn.LazyConv2d(channels, 4, stride=2, device=device)
        layers: list[nn.Module] = [first, nn.ReLU()]
        width = channels
        for _ in range(1, num_layers):
            layers += [nn.Conv2d(width, 2 * width, 4, stride=2, device=device), nn.ReLU()]
            width *= 2
        self.encoder = nn.Sequential(*layers)

    def forward(self, observation):
        if observation.ndim < 3:
            raise ValueError(
                f"ObsEncoder expects pixels [*B, C, H, W], got shape {tuple(observation.shape)}"
            )
        *batch, c, h, w = observation.shape
        latent = self.encoder(observation.reshape(-1, c, h, w))
        return latent.reshape(*batch, -1)


class ObsDecoder(nn.Module):
    """Pixel decoder: a linear layer of ``cat(state, belief)`` then transposed convolutions.

    Reference: https://arxiv.org/abs/1803.10122

    Args:
        channels (int, optional): channels before the last layer. Defaults to ``32``.
        num_layers (int, optional): transposed convolutions. Defaults to ``4``.
        kernel_sizes (int or list of int, optional): kernel of each layer; defaults to
            ``[5, 5, 6, 6]`` for 4 layers (64x64 output), else ``5`` for all.
        latent_dim (int, optional): ``state_dim + rnn_hidden_dim``; ``None`` uses a lazy
            first layer.
        out_channels (int, optional): output channels. Defaults to ``3``.
        depth (int, optional): deprecated name of ``channels`` (warns).
        device (torch.device, optional): where to create the parameters.

    Examples:
        >>> import torch
        >>> from rl.modules import ObsDecoder
        >>> dec = ObsDecoder(channels=4, latent_dim=9)
        >>> dec(torch.zeros(2, 5, 4), torch.zeros(2, 5, 5)).shape
        torch.Size([2, 5, 3, 64, 64])
    """

    def __init__(
        self,
        channels=32,
        num_layers=4,
        kernel_sizes=None,
        latent_dim=None,
        out_channels=3,
        depth=None,
        device=None,
    ):
        if depth is not None:
            warnings.warn(
                f"The depth argument of {type(self).__name__} is deprecated: use channels "
                "for the layer size and num_layers for the depth.",
                stacklevel=2,
            )
            channels = depth
        if num_layers < 1:
            raise RuntimeError("num_layers cannot be smaller than 1.")
        super().__init__()
        linear_out = channels * 8 * 2 * 2
        self.latent_dim = latent_dim
        if latent_dim is not None:
            first = nn.Linear(latent_dim, linear_out, device=device)
        else:
            first = nn.LazyLinear(linear_out, device=device)
        self.state_to_latent = nn.Sequential(first, nn.ReLU())
        if kernel_sizes is None:
            kernel_sizes = [5, 5, 6, 6] if num_layers == 4 else 5
        if isinstance(kernel_sizes, int):
            kernel_sizes = [kernel_sizes] * num_layers
        kernel_sizes = list(kernel_sizes)
        if len(kernel_sizes) != num_layers:
            raise ValueError(
                f"ObsDecoder: {len(kernel_sizes)} kernel_sizes for num_layers={num_layers}"
            )
        # layer j < n-1 outputs channels * 2**(n-2-j); the last one outputs out_channels
        out_widths = [channels * 2 ** (num_layers - 2 - j) for j in range(num_layers - 1)]
        out_widths.append(out_channels)
        in_widths = [linear_out] + out_widths[:-1]
        layers: list[nn.Module] = []
        for j in range(num_layers):
            if j > 0:
                layers.append(nn.ReLU())
            layers.append(
                nn.ConvTranspose2d(
                    in_widths[j], out_widths[j], kernel_sizes[j], stride=2, device=device
                )
            )
        self.decoder = nn.Sequential(*layers)
        self._depth = channels

    def forward(self, state, rnn_hidden):
        latent = self.state_to_latent(torch.cat([state, rnn_hidden], dim=-1))
        *batch, d = latent.shape
        decoded = self.decoder(latent.reshape(-1, d, 1, 1))
        _, c, h, w = decoded.shape
        return decoded.reshape(*batch, c, h, w)


class RSSMPrior(nn.Module):
    """The RSSM's prior (transition) network.

    From the previous ``state``, ``belief`` and ``action``: ``belief' = GRU(ELU(W[state,
    action]), belief)``, then ``(prior_mean, prior_std) = head(belief')`` (``std`` a
    softplus with lower bound ``scale_lb``), and ``state' = mean + noise * std``.

    Reference: https://arxiv.org/abs/1811.04551

    Args:
        action_spec (TensorSpec): the action spec (its shape is kept as ``action_shape``).
        hidden_dim (int, optional): width of the projections (GRU input). Defaults to ``200``.
        rnn_hidden_dim (int, optional): the belief size. Defaults to ``200``.
        state_dim (int, optional): the state size. Defaults to ``30``.
        scale_lb (float, optional): lower bound of ``prior_std``. Defaults to ``0.1``.
        action_dim (int, optional): the action size; with it the first layer is a plain
            ``Linear(state_dim + action_dim, hidden_dim)`` (else lazy).
        device (torch.device, optional): where to create the parameters.

    ``forward(state, belief, action, noise=None)`` returns
    ``(prior_mean, prior_std, state, belief)``.

    Examples:
        >>> import torch
        >>> from rl.core import Unbounded
        >>> from rl.modules import RSSMPrior
        >>> prior = RSSMPrior(Unbounded(2), hidden_dim=8, rnn_hidden_dim=6, state_dim=4, action_dim=2)
        >>> mean, std, state, belief = prior(torch.zeros(3, 4), torch.zeros(3, 6), torch.zeros(3, 2))
        >>> state.shape, belief.shape, bool((std >= 0.1).all())
        (torch.Size([3, 4]), torch.Size([3, 6]), True)
    """

    def __init__(
        self,
        action_spec,
        hidden_dim=200,
        rnn_hidden_dim=200,
        state_dim=30,
        scale_lb=0.1,
        action_dim=None,
        device=None,
    ):
        super().__init__()
        from ..tensordict_module._rnn_cells import GRUCell

        self.rnn = GRUCell(hidden_dim, rnn_hidden_dim, device=device)
        if action_dim is not None:
            first = nn.Linear(state_dim + action_dim, hidden_dim, device=device)
        else:
            first = nn.LazyLinear(hidden_dim, device=device)
        self.action_state_projector = nn.Sequential(first, nn.ELU())
        self.rnn_to_prior_projector = nn.Sequential(
            nn.Linear(rnn_hidden_dim, hidden_dim, device=device),
            nn.ELU(),
            nn.Linear(hidden_dim, 2 * state_dim, device=device),
            NormalParamExtractor(scale_lb=scale_lb, scale_mapping="softplus"),
        )
        self.state_dim = state_dim
        self.rnn_hidden_dim = rnn_hidden_dim
        self.action_dim = action_dim
        self.action_shape = action_spec.shape

    def forward(self, state, belief, action, noise=None):
        _check_last_dim("state", state, self.state_dim, "RSSMPrior")
        if belief is not None:
            _check_last_dim("belief", belief, self.rnn_hidden_dim, "RSSMPrior")
        _check_last_dim("action", action, self.action_dim, "RSSMPrior")
        action_state = self.action_state_projector(torch.cat([state, action.to(state.dtype)], -1))
        unsqueeze = action_state.ndim == 1
        if unsqueeze:
            action_state = action_state.unsqueeze(0)
            belief = belief.unsqueeze(0) if belief is not None else None
        dtype = action_state.dtype
        with torch.amp.autocast(device_type=action_state.device.type, enabled=False):
            belief = self.rnn(action_state.float(), belief.float() if belief is not None else None)
        belief = belief.to(dtype)
        if unsqueeze:
            belief = belief.squeeze(0)
        prior_mean, prior_std = self.rnn_to_prior_projector(belief)
        if noise is None:
            noise = torch.randn_like(prior_std)
        state = prior_mean + noise * prior_std
        return prior_mean, prior_std, state, belief


class RSSMPosterior(nn.Module):
    """The RSSM's posterior (representation) network.

    ``(posterior_mean, posterior_std) = head(cat(belief, obs_embedding))`` (``std`` a
    softplus with lower bound ``scale_lb``) and ``state = mean + noise * std``.

    Reference: https://arxiv.org/abs/1811.04551

    Args:
        hidden_dim (int, optional): hidden width. Defaults to ``200``.
        state_dim (int, optional): the state size. Defaults to ``30``.
        scale_lb (float, optional): lower bound of ``posterior_std``. Defaults to ``0.1``.
        rnn_hidden_dim (int, optional): the belief size; with ``obs_embed_dim`` the first
            layer is a plain ``Linear`` (else lazy).
        obs_embed_dim (int, optional): the embedding size.
        device (torch.device, optional): where to create the parameters.

    ``forward(belief, obs_embedding, noise=None)`` returns
    ``(posterior_mean, posterior_std, state)``.

    Examples:
        >>> import torch
        >>> from rl.modules import RSSMPosterior
        >>> post = RSSMPosterior(hidden_dim=8, state_dim=4, rnn_hidden_dim=6, obs_embed_dim=5)
        >>> mean, std, state = post(torch.zeros(3, 6), torch.zeros(3, 5))
        >>> state.shape
        torch.Size([3, 4])
    """

    def __init__(
        self,
        hidden_dim=200,
        state_dim=30,
        scale_lb=0.1,
        rnn_hidden_dim=None,
        obs_embed_dim=None,
        device=None,
    ):
        super().__init__()
        if rnn_hidden_dim is not None and obs_embed_dim is not None:
            first = nn.Linear(rnn_hidden_dim + obs_embed_dim, hidden_dim, device=device)
            self._in_dim = rnn_hidden_dim + obs_embed_dim
        else:
            first = nn.LazyLinear(hidden_dim, device=device)
            self._in_dim = None
        self.obs_rnn_to_post_projector = nn.Sequential(
            first,
            nn.ELU(),
            nn.Linear(hidden_dim, 2 * state_dim, device=device),
            NormalParamExtractor(scale_lb=scale_lb, scale_mapping="softplus"),
        )
        self.hidden_dim = hidden_dim
        self.state_dim = state_dim
        self.rnn_hidden_dim = rnn_hidden_dim
        self.obs_embed_dim = obs_embed_dim

    def forward(self, belief, obs_embedding, noise=None):
        if self._in_dim is not None:
            _check_last_dim("belief", belief, self.rnn_hidden_dim, "RSSMPosterior")
            _check_last_dim("obs_embedding", obs_embedding, self.obs_embed_dim, "RSSMPosterior")
        posterior_mean, posterior_std = self.obs_rnn_to_post_projector(
            torch.cat([belief, obs_embedding], dim=-1)
        )
        if noise is None:
            noise = torch.randn_like(posterior_std)
        state = posterior_mean + noise * posterior_std
        return posterior_mean, posterior_std, state


class RSSMRollout(TensorDictModuleBase):
    """Unrolls the RSSM (prior then posterior) over the last (time) dimension of a TensorDict.

    At each step ``t`` the prior module reads ``state``/``belief``/``action`` and writes the
    ``("next", ...)`` prior entries and belief; the posterior module reads them with the
    encoded observation and writes ``("next", "state")``. The next step starts from
    ``("next", "state")`` and ``("next", "belief")`` (the posterior sample feeds the next
    prior). The output stacks every step along the time dimension.

    Reference: https://arxiv.org/abs/1811.04551

    Args:
        rssm_prior (TensorDictModule): the prior module.
        rssm_posterior (TensorDictModule): the posterior module.
        use_scan (bool, optional): accepted for TorchRL compatibility; the rollout here is
            always a Python loop over time. Defaults to ``False``.
        compile_step (bool, optional): compile the per-step function with
            :func:`torch.compile`. Defaults to ``False``.
        compile_backend (str, optional): backend of the compiled step. Defaults to ``"inductor"``.
        compile_mode (str, optional): mode of the compiled step.
    """

    def __init__(
        self,
        rssm_prior,
        rssm_posterior,
        use_scan: bool = False,
        compile_step: bool = False,
        compile_backend: str = "inductor",
        compile_mode: str | None = None,
    ):
        super().__init__()
        seq = TensorDictSequential(rssm_prior, rssm_posterior)
        self.in_keys = seq.in_keys
        self.out_keys = seq.out_keys
        self.rssm_prior = rssm_prior
        self.rssm_posterior = rssm_posterior
        self.use_scan = use_scan
        self.compile_step = compile_step
        self.compile_backend = compile_backend
        self.compile_mode = compile_mode
        self._compiled_step = None

    def _step(self, td):
        self.rssm_prior(td)
        self.rssm_posterior(td)
        return td

    def _get_step_fn(self):
        if not self.compile_step:
            return self._step
        if self._compiled_step is None:
            self._compiled_step = torch.compile(
                self._step, backend=self.compile_backend, mode=self.compile_mode
            )
        return self._compiled_step

    def forward(self, tensordict):
        if tensordict.ndim == 0:
            raise ValueError("RSSMRollout needs a TensorDict with a time dimension (batch [*B, T])")
        steps = tensordict.exclude(*self.out_keys).unbind(-1)
        output_keys = list(steps[0].keys(include_nested=True, leaves_only=True)) + list(
            self.out_keys
        )
        step_fn = self._get_step_fn()
        outs = []
        td = steps[0]
        for t in range(len(steps)):
            td = step_fn(td)
            outs.append(td.select(*output_keys, strict=False))
            if t < len(steps) - 1:
                next_state = td.get(("next", "state"))
                next_belief = td.get(("next", "belief"))
                td = steps[t + 1]
                td.set("state", next_state)
                td.set("belief", next_belief)
        return torch.stack(outs, tensordict.ndim - 1)
