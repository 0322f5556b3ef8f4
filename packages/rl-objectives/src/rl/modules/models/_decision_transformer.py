"""The Decision Transformer: a GPT-2 over (return-to-go, state, action) tokens, and its actors.

Chen et al. 2021, "Decision Transformer: Reinforcement Learning via Sequence Modeling",
https://arxiv.org/abs/2106.01345; Zheng et al. 2022, "Online Decision Transformer",
https://arxiv.org/abs/2202.05607.

The backbone is a Hugging Face ``GPT2Model`` built from a configuration (no weights are
downloaded); ``transformers`` comes with the ``llm`` extra
(``pip install "rl-objectives[llm]"``) and is imported when a model is built.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Mapping
from contextlib import nullcontext
from typing import Any

import torch
from torch import nn

__all__ = ["DTActor", "DecisionTransformer", "OnlineDTActor"]

_has_transformers = importlib.util.find_spec("transformers") is not None


@dataclasses.dataclass
class DTConfig:
    """Architecture of the GPT-2 backbone of a :class:`DecisionTransformer`.

    Attributes:
        n_embd: width of the token embeddings and of the hidden states.
        n_layer: transformer blocks.
        n_head: attention heads per block (``n_embd`` must be a multiple of it).
        n_inner: width of the blocks' feed-forward layer.
        activation: the feed-forward activation (a ``transformers`` activation name).
        n_positions: longest token sequence (3 tokens per time step).
        resid_pdrop: dropout of the residual branches (the embeddings keep GPT-2's 0.1).
        attn_pdrop: dropout of the attention weights.
    """

    n_embd: Any = 256
    n_layer: Any = 4
    n_head: Any = 4
    n_inner: Any = 1024
    activation: Any = "relu"
    n_positions: Any = 1024
    resid_pdrop: Any = 0.1
    attn_pdrop: Any = 0.1

    def __repr__(self) -> str:
        fields = ", ".join(f"{f.name}: {getattr(self, f.name)}" for f in dataclasses.fields(self))
        return f"{type(self).__name__}({fields})"


def _as_config(config: Any, default: DTConfig) -> DTConfig:
    """``config`` (a :class:`DTConfig`, a mapping or ``None``) as a :class:`DTConfig`."""
    if config is None:
        return default
    if isinstance(config, DTConfig):
        return config
    if not isinstance(config, Mapping):
        raise TypeError(
            f"Config of type {type(config).__name__} is not supported: expected a "
            "DecisionTransformer.DTConfig or a dict of its fields"
        )
    known = {f.name for f in dataclasses.fields(DTConfig)}
    unknown = sorted(set(config) - known)
    if unknown:
        raise TypeError(
            f"unknown DecisionTransformer config entries {unknown}; valid ones are {sorted(known)}"
        )
    return dataclasses.replace(default, **dict(config))


def _gpt2(config: DTConfig) -> nn.Module:
    if not _has_transformers:
        raise ImportError(
            "DecisionTransformer needs the transformers package: "
            'pip install "rl-objectives[llm]" (or pip install transformers)'
        )
    from transformers import GPT2Config, GPT2Model

    gpt_config = GPT2Config(
        n_embd=config.n_embd,
        n_layer=config.n_layer,
        n_head=config.n_head,
        n_inner=config.n_inner,
        activation_function=config.activation,
        n_positions=config.n_positions,
        resid_pdrop=config.resid_pdrop,
        attn_pdrop=config.attn_pdrop,
        vocab_size=1,  # the tokens are embedded by the model's own heads, never looked up
        bos_token_id=None,
        eos_token_id=None,
    )
    return GPT2Model(gpt_config)


class DecisionTransformer(nn.Module):
    """A GPT-2 reading interleaved (return-to-go, state, action) tokens; returns the state tokens' hidden states.

    Each time step ``t`` becomes three tokens ``(R_t, s_t, a_t)`` (one linear embedding per
    modality, a layer norm over the sequence, GPT-2's learned positions); the causal
    transformer's output at ``s_t`` has seen ``R_<=t, s_<=t, a_<t`` and predicts ``a_t``.

    Args:
        state_dim (int): observation size.
        action_dim (int): action size.
        config (DTConfig or dict, optional): the backbone's architecture (fields of
            :class:`DecisionTransformer.DTConfig`; missing ones take its defaults).
            Defaults to :meth:`default_config`.
        device (torch.device, optional): where the parameters are created.

    Raises:
        TypeError: when ``config`` is neither a ``DTConfig`` nor a mapping of its fields.
        ImportError: when ``transformers`` is not installed.

    Examples:
        >>> import torch
        >>> from rl.modules import DecisionTransformer
        >>> config = DecisionTransformer.DTConfig(n_embd=16, n_layer=1, n_head=2, n_inner=32)
        >>> model = DecisionTransformer(state_dim=3, action_dim=1, config=config)
        >>> obs, act, rtg = torch.randn(8, 10, 3), torch.randn(8, 10, 1), torch.randn(8, 10, 1)
        >>> model(obs, act, rtg).shape
        torch.Size([8, 10, 16])
    """

    DTConfig = DTConfig

    @classmethod
    def default_config(cls) -> DTConfig:
        """The default architecture: 4 blocks of width 256, 4 heads, feed-forward 1024."""
        return DTConfig()

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        config: DTConfig | Mapping | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        config = _as_config(config, self.default_config())
        super().__init__()
        self.state_dim = state_dim
        self.action_dim = action_dim
        self.hidden_size = config.n_embd
        with torch.device(device) if device is not None else nullcontext():
            self.transformer = _gpt2(config)
            self.embed_return = nn.Linear(1, self.hidden_size)
            self.embed_state = nn.Linear(state_dim, self.hidden_size)
            self.embed_action = nn.Linear(action_dim, self.hidden_size)
            self.embed_ln = nn.LayerNorm(self.hidden_size)

    def forward(
        self,
        observation: torch.Tensor,
        action: torch.Tensor,
        return_to_go: torch.Tensor,
    ) -> torch.Tensor:
        """The hidden state at every state token.

        Args:
            observation (Tensor): ``[*B, T, state_dim]``.
            action (Tensor): ``[*B, T, action_dim]``.
            return_to_go (Tensor): ``[*B, T, 1]``.

        Returns:
            ``[*B, T, n_embd]``.

        Raises:
            ValueError: when the three inputs disagree on ``[*B, T]`` or a feature size
                is not the model's.
        """
        self._check_inputs(observation, action, return_to_go)
        *batch, steps, _ = observation.shape
        tokens = torch.stack(
            (
                self.embed_return(return_to_go),
                self.embed_state(observation),
                self.embed_action(action),
            ),
            dim=-2,
        )  # [*B, T, 3, H]: the sequence R_1, s_1, a_1, R_2, ...
        tokens = self.embed_ln(tokens.reshape(-1, 3 * steps, self.hidden_size))
        hidden = self.transformer(inputs_embeds=tokens, use_cache=False).last_hidden_state
        return hidden[:, 1::3].reshape(*batch, steps, self.hidden_size)

    def _check_inputs(
        self, observation: torch.Tensor, action: torch.Tensor, return_to_go: torch.Tensor
    ) -> None:
        expected = {"observation": self.state_dim, "action": self.action_dim, "return_to_go": 1}
        given = {"observation": observation, "action": action, "return_to_go": return_to_go}
        for name, tensor in given.items():
            if tensor.ndim < 2 or tensor.shape[-1] != expected[name]:
                raise ValueError(
                    f"DecisionTransformer: {name} has shape {tuple(tensor.shape)}, expected "
                    f"[*B, T, {expected[name]}]"
                )
        lead = {name: tuple(t.shape[:-1]) for name, t in given.items()}
        if len(set(lead.values())) != 1:
            raise ValueError(
                "DecisionTransformer: observation, action and return_to_go must share their "
                f"batch and time dimensions [*B, T], got {lead}"
            )


def _orthogonal_zero_bias(layer: nn.Linear) -> None:
    nn.init.orthogonal_(layer.weight)
    nn.init.zeros_(layer.bias)


def _actor_config(transformer_config: Any) -> DTConfig:
    return _as_config(transformer_config, DTActor.default_config())


class DTActor(nn.Module):
    """Decision Transformer actor: a :class:`DecisionTransformer` and a linear action head.

    Outputs one deterministic action per time step (squash it with ``TanhDelta`` or
    ``TanhModule``); Chen et al. 2021, https://arxiv.org/abs/2106.01345.

    Args:
        state_dim (int): observation size.
        action_dim (int): action size.
        transformer_config (DTConfig or dict, optional): the backbone's architecture.
            Defaults to :meth:`default_config`.
        device (torch.device, optional): where the parameters are created.

    Examples:
        >>> import torch
        >>> from rl.modules import DecisionTransformer, DTActor
        >>> config = DecisionTransformer.DTConfig(n_embd=16, n_layer=1, n_head=2, n_inner=32)
        >>> actor = DTActor(state_dim=3, action_dim=1, transformer_config=config)
        >>> actor(torch.randn(8, 10, 3), torch.randn(8, 10, 1), torch.randn(8, 10, 1)).shape
        torch.Size([8, 10, 1])
    """

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        transformer_config: DTConfig | Mapping | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        config = _actor_config(transformer_config)
        self.transformer = DecisionTransformer(state_dim, action_dim, config, device=device)
        self.action_layer = nn.Linear(config.n_embd, action_dim, device=device)
        _orthogonal_zero_bias(self.action_layer)

    @classmethod
    def default_config(cls) -> DTConfig:
        """The actors' default backbone: 4 blocks of width 512, 4 heads, feed-forward 2048."""
        return DTConfig(n_embd=512, n_layer=4, n_head=4, n_inner=2048)

    def forward(
        self,
        observation: torch.Tensor,
        action: torch.Tensor,
        return_to_go: torch.Tensor,
    ) -> torch.Tensor:
        """``[*B, T, state_dim]``, ``[*B, T, action_dim]``, ``[*B, T, 1]`` -> actions ``[*B, T, action_dim]``."""
        return self.action_layer(self.transformer(observation, action, return_to_go))


class OnlineDTActor(nn.Module):
    """Online Decision Transformer actor: the mean and standard deviation of a Gaussian per step.

    The log standard deviation is a ``tanh`` mapped into ``[log_std_min, log_std_max] =
    [-5, 2]``; feed ``(loc, scale)`` to a ``TanhNormal``. Zheng et al. 2022,
    https://arxiv.org/abs/2202.05607.

    Args:
        state_dim (int): observation size.
        action_dim (int): action size.
        transformer_config (DTConfig or dict, optional): the backbone's architecture.
            Defaults to :meth:`default_config`.
        device (torch.device, optional): where the parameters are created.

    Examples:
        >>> import torch
        >>> from rl.modules import DecisionTransformer, OnlineDTActor
        >>> config = DecisionTransformer.DTConfig(n_embd=16, n_layer=1, n_head=2, n_inner=32)
        >>> actor = OnlineDTActor(state_dim=3, action_dim=1, transformer_config=config)
        >>> loc, scale = actor(torch.randn(8, 10, 3), torch.randn(8, 10, 1), torch.randn(8, 10, 1))
        >>> loc.shape, scale.shape
        (torch.Size([8, 10, 1]), torch.Size([8, 10, 1]))
    """

    log_std_min: float = -5.0
    log_std_max: float = 2.0

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        transformer_config: DTConfig | Mapping | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        config = _actor_config(transformer_config)
        self.transformer = DecisionTransformer(state_dim, action_dim, config, device=device)
        self.action_layer_mean = nn.Linear(config.n_embd, action_dim, device=device)
        self.action_layer_logstd = nn.Linear(config.n_embd, action_dim, device=device)
        _orthogonal_zero_bias(self.action_layer_mean)
        _orthogonal_zero_bias(self.action_layer_logstd)

    @classmethod
    def default_config(cls) -> DTConfig:
        """The actors' default backbone: 4 blocks of width 512, 4 heads, feed-forward 2048."""
        return DTActor.default_config()

    def forward(
        self,
        observation: torch.Tensor,
        action: torch.Tensor,
        return_to_go: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``[*B, T, state_dim]``, ``[*B, T, action_dim]``, ``[*B, T, 1]`` -> ``(loc, scale)``, each ``[*B, T, action_dim]``."""
        hidden = self.transformer(observation, action, return_to_go)
        squashed = torch.tanh(self.action_layer_logstd(hidden))  # in [-1, 1]
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (squashed + 1)
        return self.action_layer_mean(hidden), log_std.exp()
