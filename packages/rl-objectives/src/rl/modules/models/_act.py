"""ACTModel: Action Chunking with Transformers, a CVAE that predicts a chunk of actions.

Paper: Zhao et al., "Learning Fine-Grained Bimanual Manipulation with Low-Cost
Hardware", 2023, https://arxiv.org/abs/2304.13705.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["ACTModel"]


def _sinusoidal_pos_enc(length: int, dim: int) -> torch.Tensor:
    """The ``[length, dim]`` sine/cosine position table of "Attention is all you need"."""
    if dim % 2:
        raise ValueError(f"a sinusoidal position encoding needs an even dim, got {dim}")
    position = torch.arange(length, dtype=torch.float32)[:, None]
    frequency = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.empty(length, dim)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency)
    return table


class ACTModel(nn.Module):
    """Action Chunking with Transformers: predicts ``chunk_size`` actions from one observation.

    A conditional VAE. In training (``action_chunk`` given) a Transformer encoder reads
    ``[CLS, a_0 .. a_{T-1}, obs]`` (with sine position codes) and its CLS output gives
    the latent's ``mu`` and ``log_var``; a latent ``z`` is drawn with the
    reparameterisation trick. At inference (``action_chunk=None``) ``z`` is the prior
    mean, zero, and ``mu``/``log_var`` are zeros. A DETR-style Transformer decoder then
    turns ``chunk_size`` learned queries, attending to ``[obs, z]``, into the chunk.
    Train it with :class:`~rl.objectives.ACTLoss`. Paper:
    https://arxiv.org/abs/2304.13705.

    Args:
        obs_dim (int): the observation (proprioceptive state) size.
        action_dim (int): the action size.
        chunk_size (int): the number of actions predicted per call (``T``).
        hidden_dim (int): the Transformer width. Defaults to ``256``.
        nheads (int): attention heads. Defaults to ``8``.
        num_encoder_layers (int): CVAE encoder depth. Defaults to ``4``.
        num_decoder_layers (int): action decoder depth. Defaults to ``7``.
        latent_dim (int): the latent size. Defaults to ``32``.
        dropout (float): dropout in the Transformer layers. Defaults to ``0.1``.
        dim_feedforward (int, optional): feed-forward width. Defaults to
            ``4 * hidden_dim``.

    Shapes:
        ``observation`` ``[*B, obs_dim]``, ``action_chunk`` ``[*B, T, action_dim]``;
        returns ``(action_pred [*B, T, action_dim], mu [*B, latent_dim],
        log_var [*B, latent_dim])``.

    Examples:
        >>> import torch
        >>> from rl.modules import ACTModel
        >>> model = ACTModel(obs_dim=14, action_dim=7, chunk_size=10, hidden_dim=32, nheads=4)
        >>> pred, mu, log_var = model(torch.randn(4, 14), torch.randn(4, 10, 7))
        >>> pred.shape, mu.shape
        (torch.Size([4, 10, 7]), torch.Size([4, 32]))
        >>> bool(model(torch.randn(4, 14))[1].eq(0).all())  # inference: the prior
        True
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        chunk_size: int,
        hidden_dim: int = 256,
        nheads: int = 8,
        num_encoder_layers: int = 4,
        num_decoder_layers: int = 7,
        latent_dim: int = 32,
        dropout: float = 0.1,
        dim_feedforward: int | None = None,
    ) -> None:
        super().__init__()
        self.obs_dim = obs_dim
        self.action_dim = action_dim
        self.chunk_size = chunk_size
        self.hidden_dim = hidden_dim
        self.latent_dim = latent_dim
        feedforward = 4 * hidden_dim if dim_feedforward is None else dim_feedforward

        def layer(kind):
            return kind(
                d_model=hidden_dim,
                nhead=nheads,
                dim_feedforward=feedforward,
                dropout=dropout,
                batch_first=True,
            )

        self.obs_proj = nn.Linear(obs_dim, hidden_dim)
        # CVAE encoder, used in training only
        self.cls_embed = nn.Embedding(1, hidden_dim)
        self.action_proj = nn.Linear(action_dim, hidden_dim)
        self.cvae_encoder = nn.TransformerEncoder(
            layer(nn.TransformerEncoderLayer),
            num_layers=num_encoder_layers,
            enable_nested_tensor=False,
        )
        self.register_buffer(
            "enc_pos", _sinusoidal_pos_enc(chunk_size + 2, hidden_dim), persistent=False
        )
        self.latent_proj = nn.Linear(hidden_dim, 2 * latent_dim)
        self.latent_out_proj = nn.Linear(latent_dim, hidden_dim)
        # action decoder: one learned query per step of the chunk
        self.action_queries = nn.Embedding(chunk_size, hidden_dim)
        self.transformer_decoder = nn.TransformerDecoder(
            layer(nn.TransformerDecoderLayer), num_layers=num_decoder_layers
        )
        self.action_head = nn.Linear(hidden_dim, action_dim)

    def forward(
        self, observation: torch.Tensor, action_chunk: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Predict a chunk of actions.

        Args:
            observation: ``[*B, obs_dim]``.
            action_chunk: ``[*B, T, action_dim]`` expert chunk (training), or ``None``
                (inference: ``z = 0``).

        Returns:
            ``(action_pred, mu, log_var)``: ``[*B, T, action_dim]``, ``[*B, latent_dim]``
            and ``[*B, latent_dim]``.
        """
        batch = observation.shape[:-1]
        if observation.shape[-1] != self.obs_dim:
            raise ValueError(
                f"observation has shape {tuple(observation.shape)}, expected [..., {self.obs_dim}]"
            )
        n = math.prod(batch)
        obs_token = self.obs_proj(observation.reshape(n, self.obs_dim)).unsqueeze(1)
        if action_chunk is None:
            mu = obs_token.new_zeros(n, self.latent_dim)
            log_var = obs_token.new_zeros(n, self.latent_dim)
            z = obs_token.new_zeros(n, self.latent_dim)
        else:
            expected = (*batch, self.chunk_size, self.action_dim)
            if action_chunk.shape != expected:
                raise ValueError(
                    f"action_chunk has shape {tuple(action_chunk.shape)}, expected {expected} "
                    "(batch, chunk_size, action_dim)"
                )
            action_tokens = self.action_proj(
                action_chunk.reshape(n, self.chunk_size, self.action_dim)
            )
            cls = self.cls_embed.weight.expand(n, 1, self.hidden_dim)
            tokens = torch.cat([cls, action_tokens, obs_token], dim=1) + self.enc_pos
            mu, log_var = self.latent_proj(self.cvae_encoder(tokens)[:, 0]).chunk(2, dim=-1)
            z = mu + (0.5 * log_var).exp() * torch.randn_like(mu)
        memory = torch.cat([obs_token, self.latent_out_proj(z).unsqueeze(1)], dim=1)
        queries = self.action_queries.weight.expand(n, self.chunk_size, self.hidden_dim)
        action_pred = self.action_head(self.transformer_decoder(queries, memory))
        return (
            action_pred.reshape(*batch, self.chunk_size, self.action_dim),
            mu.reshape(*batch, self.latent_dim),
            log_var.reshape(*batch, self.latent_dim),
        )
