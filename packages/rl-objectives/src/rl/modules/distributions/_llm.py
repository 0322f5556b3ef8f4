"""A categorical over a language model's vocabulary, masked by position or by token."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import distributions as D

__all__ = ["LLMMaskedCategorical"]


class LLMMaskedCategorical(D.Distribution):
    """A categorical over the vocabulary at each position of a sequence, with a mask.

    Built for language-model losses, where the vocabulary is large: the log-probability
    of given tokens never materialises masked logits for a mask of positions (positions
    outside the mask contribute ``0``, as ``ignore_index`` does in a cross-entropy), while
    sampling, the mode and the entropy use logits with the masked entries pushed to the
    dtype's lowest value, built on first use and cached (:meth:`clear_cache` frees them).

    Args:
        logits (torch.Tensor): unnormalised scores ``[*B, T, C]`` (``C`` the vocabulary).
        mask (torch.Tensor): boolean; ``[*B, T]`` masks positions (``True``: the position
            counts, every token allowed), ``[*B, T, C]`` masks tokens (``True``: the token
            is allowed there; costs a masked copy of the logits).
        ignore_index (int, optional): the token value that marks a position to skip in
            :meth:`log_prob` (its log-probability is ``0``). Defaults to ``-100``.

    Log-probabilities: a token outside a token mask gets ``-inf``; a position outside a
    position mask (or with no allowed token), or holding ``ignore_index``, gets ``0``. The
    entropy is ``0`` at such positions too (TorchRL returns the entropy of the uniform
    distribution its masking leaves there: a value no loss should count).

    Examples:
        >>> import torch
        >>> logits = torch.zeros(2, 3, 4)
        >>> mask = torch.tensor([[True, True, False], [True, True, True]])
        >>> dist = LLMMaskedCategorical(logits, mask)
        >>> dist.log_prob(torch.tensor([[0, 1, 2], [3, -100, 1]]))
        tensor([[-1.3863, -1.3863,  0.0000],
                [-1.3863,  0.0000, -1.3863]])
        >>> dist.sample().shape
        torch.Size([2, 3])
    """

    arg_constraints: dict = {}
    has_rsample = False

    def __init__(self, logits: torch.Tensor, mask: torch.Tensor, ignore_index: int = -100):
        if mask.shape != logits.shape[:-1] and mask.shape != logits.shape:
            raise ValueError(
                f"LLMMaskedCategorical: the mask has shape {tuple(mask.shape)}; expected "
                f"the logits' batch shape {tuple(logits.shape[:-1])} (a mask of positions) "
                f"or the logits' shape {tuple(logits.shape)} (a mask of tokens)"
            )
        if mask.dtype is not torch.bool:
            raise TypeError(f"LLMMaskedCategorical: the mask must be boolean, got {mask.dtype}")
        self._original_logits = logits
        self._mask = mask
        self.ignore_index = ignore_index
        self._position_level_masking = mask.shape == logits.shape[:-1]
        self._masked_logits = None  # built on first use (sampling, mode, entropy)
        self._masked_dist = None
        super().__init__(batch_shape=logits.shape[:-1], event_shape=logits.shape[-1:])

    # -------------------------------------------------------------- masked logits
    @property
    def masked_logits(self) -> torch.Tensor:
        """The logits with masked entries at the dtype's lowest value (cached)."""
        if self._masked_logits is None:
            logits, mask = self._original_logits, self._mask
            if self._position_level_masking:
                mask = mask.unsqueeze(-1)
            self._masked_logits = logits.masked_fill(~mask, torch.finfo(logits.dtype).min)
        return self._masked_logits

    @property
    def masked_dist(self) -> D.Categorical:
        """A :class:`torch.distributions.Categorical` over :attr:`masked_logits` (cached)."""
        if self._masked_dist is None:
            logits = self.masked_logits
            if not bool(logits.isfinite().all()):  # keeps softmax / multinomial finite
                logits = torch.nan_to_num(logits, nan=0.0, posinf=1e4, neginf=-1e4)
            self._masked_dist = D.Categorical(logits=logits)
        return self._masked_dist

    def clear_cache(self) -> None:
        """Drops the cached masked logits and distribution."""
        self._masked_logits = None
        self._masked_dist = None

    # ----------------------------------------------------------------- properties
    @property
    def mask(self) -> torch.Tensor:
        return self._mask

    @property
    def logits(self) -> torch.Tensor:
        """The logits as given (unmasked)."""
        return self._original_logits

    @property
    def probs(self) -> torch.Tensor:
        """``softmax`` of the unmasked logits."""
        return torch.softmax(self._original_logits, dim=-1)

    @property
    def position_level_masking(self) -> bool:
        """Whether the mask selects positions (``[*B, T]``) rather than tokens."""
        return self._position_level_masking

    # ---------------------------------------------------------------- statistics
    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """Log-probabilities of the tokens ``value`` (``[*B, T]``); see the class notes."""
        ignore = (value == self.ignore_index) | ~self._positions()
        if self._position_level_masking:
            logits = self._original_logits
        else:
            logits = self.masked_logits
        target = value.masked_fill(ignore, self.ignore_index)
        flat = 0.0 - F.cross_entropy(  # 0 - 0 is +0 where ignored (-x would print -0)
            logits.reshape(-1, logits.shape[-1]),
            target.reshape(-1),
            reduction="none",
            ignore_index=self.ignore_index,
        )
        out = flat.reshape(value.shape)
        if not self._position_level_masking:  # a disallowed token is impossible
            allowed = self._mask.gather(-1, target.clamp_min(0).unsqueeze(-1)).squeeze(-1)
            out = out.masked_fill(~allowed & ~ignore, float("-inf"))
        return out

    def sample(self, sample_shape: torch.Size | Sequence[int] = ()) -> torch.Tensor:
        """Token indices ``[*sample_shape, *B, T]``, never masked ones."""
        return self.masked_dist.sample(torch.Size(sample_shape))

    def rsample(self, sample_shape: torch.Size | Sequence[int] = ()) -> torch.Tensor:
        """Same as :meth:`sample` (a categorical has no reparametrised sample; TorchRL's
        name is kept so that code calling it runs)."""
        return self.sample(sample_shape)

    @property
    def mode(self) -> torch.Tensor:
        """The most likely allowed token at each position."""
        return self.masked_logits.argmax(dim=-1)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return self.mode

    def entropy(self) -> torch.Tensor:
        """The entropy of the masked distribution at each position (``0`` where no token
        is allowed)."""
        return self.masked_dist.entropy().masked_fill(~self._positions(), 0.0)

    def _positions(self) -> torch.Tensor:
        """``[*B, T]``: the positions where some token is allowed."""
        return self._mask if self._position_level_masking else self._mask.any(-1)
