"""``LLMMaskedCategorical``: a categorical over the vocabulary at each token position."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import distributions as D

__all__ = ["LLMMaskedCategorical"]


class LLMMaskedCategorical(D.Distribution):
    """Categorical over a vocabulary, per position, with masked positions or tokens.

    Args:
        logits (torch.Tensor): ``[*B, T, C]`` unnormalised scores.
        mask (torch.Tensor): ``[*B, T]`` (positions to score) or ``[*B, T, C]`` (tokens
            allowed at each position), booleans.
        ignore_index (int): token id that marks a position to skip in ``log_prob``.
            Defaults to ``-100``.

    ``log_prob`` of a masked position (or of ``ignore_index``) is ``0``; of a masked token
    (token-level mask) ``-inf``. ``entropy`` is ``0`` on masked positions. Sampling never
    draws a masked token.

    Raises:
        ValueError: a mask whose shape is neither ``logits.shape[:-1]`` nor ``logits.shape``.

    Examples:
        >>> import torch
        >>> from rl.modules.llm import LLMMaskedCategorical
        >>> logits = torch.zeros(1, 3, 4)
        >>> mask = torch.tensor([[False, True, True]])
        >>> LLMMaskedCategorical(logits, mask).log_prob(torch.tensor([[0, 1, 2]]))
        tensor([[ 0.0000, -1.3863, -1.3863]])
    """

    arg_constraints = {}

    def __init__(self, logits: torch.Tensor, mask: torch.Tensor, ignore_index: int = -100):
        if mask.shape != logits.shape[:-1] and mask.shape != logits.shape:
            raise ValueError(
                f"mask has shape {tuple(mask.shape)}, expected {tuple(logits.shape[:-1])} "
                f"(positions) or {tuple(logits.shape)} (tokens) from logits"
            )
        self.logits = logits
        self._mask = mask.bool()
        self.ignore_index = ignore_index
        self._position_level = mask.shape == logits.shape[:-1]
        super().__init__(batch_shape=logits.shape[:-1], validate_args=False)

    @property
    def mask(self) -> torch.Tensor:
        """``[*B, T]`` positions that count (any allowed token for a token-level mask)."""
        return self._mask if self._position_level else self._mask.any(-1)

    def _masked_logits(self) -> torch.Tensor:
        mask = self._mask.unsqueeze(-1) if self._position_level else self._mask
        return self.logits.masked_fill(~mask, torch.finfo(self.logits.dtype).min)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """``[*B, T]`` log-probabilities of the token ids ``value``."""
        if self._position_level:
            target = torch.where(self._mask, value, torch.full_like(value, self.ignore_index))
            target = torch.where(target == self.ignore_index, target, target.clamp_min(0))
            logits = self.logits.reshape(-1, self.logits.shape[-1])
            out = -F.cross_entropy(
                logits, target.reshape(-1), ignore_index=self.ignore_index, reduction="none"
            )
            return out.reshape(value.shape) + 0.0  # no -0.0 on ignored positions
        valid = value != self.ignore_index
        logp = self._masked_logits().log_softmax(-1)
        allowed = self._mask.gather(-1, value.clamp_min(0).unsqueeze(-1)).squeeze(-1)
        out = logp.gather(-1, value.clamp_min(0).unsqueeze(-1)).squeeze(-1)
        out = torch.where(allowed, out, torch.full_like(out, -float("inf")))
        return torch.where(valid & self.mask, out, torch.zeros_like(out))

    def entropy(self) -> torch.Tensor:
        logp = self._masked_logits().log_softmax(-1)
        ent = -(logp.exp() * logp).sum(-1)
        return torch.where(self.mask, ent, torch.zeros_like(ent))

    def sample(self, sample_shape: torch.Size | tuple = ()) -> torch.Tensor:
        with torch.no_grad():
            return D.Categorical(logits=self._masked_logits()).sample(sample_shape)

    @property
    def mode(self) -> torch.Tensor:
        return self._masked_logits().argmax(-1)
