"""Action tokenizers: continuous actions <-> discrete token ids (token VLA policies).

An autoregressive VLA policy (RT-2, OpenVLA) emits actions through a language-model
head: each action dimension is one token. A tokenizer is the codec, applied element-wise
over the trailing action dim, so it serves per-step actions ``[*B, A]`` and action
chunks ``[*B, T, H, A]`` alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from ._robot_metadata import RobotDatasetMetadata

__all__ = ["ActionTokenizerBase", "UniformActionTokenizer", "VocabTailActionTokenizer"]


class ActionTokenizerBase(nn.Module):
    """Base class of action tokenizers (as TorchRL's): a subclass implements
    :meth:`encode`, :meth:`decode` and :attr:`vocab_size`; the base raises
    ``NotImplementedError`` naming the subclass and the missing member."""

    def encode(self, actions: torch.Tensor) -> torch.Tensor:
        """Continuous actions ``[..., A]`` to token ids (``long``, same shape)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement encode")

    def decode(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token ids ``[..., A]`` to continuous actions (same shape)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement decode")

    @property
    def vocab_size(self) -> int:
        """How many token ids one action dimension can take."""
        raise NotImplementedError(f"{type(self).__name__} does not implement vocab_size")


class UniformActionTokenizer(ActionTokenizerBase):
    """Equal-width bins per action dimension (RT-2 / OpenVLA style).

    ``encode`` gives the index of the bin of ``[low, high]`` an action falls in (actions
    outside are clamped), ``decode`` the bin's centre: a round trip is off by at most
    half a bin, ``(high - low) / (2 * num_bins)``.

    Args:
        num_bins: bins per dimension (the vocabulary size), ``>= 1``.
        low: lower bound, a float or a per-dimension tensor ``[A]``.
        high: upper bound, same shape as ``low``; strictly above it.
        action_dim: repeats scalar bounds to ``[action_dim]``.

    Raises:
        ValueError: ``num_bins < 1``, bounds of different shapes, or ``high <= low``.

    Examples:
        >>> tok = UniformActionTokenizer(256, low=-1.0, high=1.0)
        >>> tok.encode(torch.tensor([-1.0, 0.0, 1.0]))
        tensor([  0, 128, 255])
        >>> tok.decode(torch.tensor([0, 255]))
        tensor([-0.9961,  0.9961])
    """

    def __init__(
        self,
        num_bins: int,
        *,
        low: float | torch.Tensor,
        high: float | torch.Tensor,
        action_dim: int | None = None,
    ) -> None:
        super().__init__()
        if num_bins < 1:
            raise ValueError(f"num_bins must be >= 1, got {num_bins}")
        low = torch.as_tensor(low, dtype=torch.float32)
        high = torch.as_tensor(high, dtype=torch.float32)
        if action_dim is not None:
            low = low.repeat(action_dim) if low.ndim == 0 else low
            high = high.repeat(action_dim) if high.ndim == 0 else high
        if low.shape != high.shape:
            raise ValueError(
                f"low and high must have the same shape, got {tuple(low.shape)} and {tuple(high.shape)}"
            )
        if not bool((high > low).all()):
            raise ValueError(
                f"high must be above low in every dimension, got low={low} and high={high}"
            )
        self.num_bins = int(num_bins)
        self.register_buffer("low", low)
        self.register_buffer("high", high)

    @property
    def vocab_size(self) -> int:
        return self.num_bins

    @property
    def action_dim(self) -> int | None:
        """The size of the per-dimension bounds, ``None`` for scalar bounds."""
        return self.low.shape[-1] if self.low.ndim else None

    def encode(self, actions: torch.Tensor) -> torch.Tensor:
        unit = (actions - self.low) / (self.high - self.low)
        return (unit * self.num_bins).floor().long().clamp_(0, self.num_bins - 1)

    def decode(self, tokens: torch.Tensor) -> torch.Tensor:
        centre = (tokens.to(self.low.dtype) + 0.5) / self.num_bins
        return self.low + centre * (self.high - self.low)

    @classmethod
    def from_metadata(cls, metadata: RobotDatasetMetadata, num_bins: int) -> UniformActionTokenizer:
        """The tokenizer over the ``action_low`` / ``action_high`` bounds of ``metadata``.

        Raises:
            ValueError: the metadata has no action bounds.
        """
        if metadata.action_low is None or metadata.action_high is None:
            raise ValueError(
                f"metadata {metadata.dataset_id!r} has no action bounds: set action_low and "
                "action_high for a uniform tokenizer"
            )
        return cls(num_bins, low=metadata.action_low, high=metadata.action_high)


class VocabTailActionTokenizer(ActionTokenizerBase):
    """OpenVLA's action tokens: the last ``num_bins`` ids of a language-model vocabulary.

    An action in ``[-1, 1]`` is digitized over the ``num_bins`` edges of uniform bins
    (``d = bucketize(a, linspace(-1, 1, num_bins), right=True)``) and written as
    ``num_bins - d`` (window ids, default) or ``full_vocab_size - d`` (raw vocabulary
    ids). Decoding returns the centre of bin ``d - 1`` (there are ``num_bins - 1``
    centres). OpenVLA: https://arxiv.org/abs/2406.09246.

    With dataset statistics (``norm_low`` = q01, ``norm_high`` = q99), the masked dims
    are normalized before encoding and mapped back after decoding:
    ``a_env = 0.5 * (a + 1) * (q99 - q01 + 1e-8) + q01``. The unmasked dims (a gripper)
    pass through, optionally binarized to -1 / +1 and sign-inverted.

    Args:
        num_bins: bin edges per dimension.
        full_vocab_size: give raw vocabulary ids (e.g. 32000 for LLaMA-2).
        norm_low: per-dimension q01 statistics.
        norm_high: per-dimension q99 statistics (with ``norm_low``).
        norm_mask: the dims to (un)normalize (default: all).
        gripper_binarize: binarize the unmasked dims after decoding.
        gripper_binarize_threshold: values above it become +1, the others -1.
        gripper_invert: flip the sign of the unmasked dims after decoding.

    Raises:
        ValueError: ``num_bins < 2``, ``full_vocab_size < num_bins``, or only one of
            ``norm_low`` / ``norm_high``.

    Examples:
        >>> tok = VocabTailActionTokenizer(256)
        >>> tok.encode(torch.tensor([-1.0, 0.0, 1.0]))
        tensor([255, 128,   0])
        >>> VocabTailActionTokenizer(256, full_vocab_size=32000).encode(torch.tensor([1.0]))
        tensor([31744])
    """

    def __init__(
        self,
        num_bins: int = 256,
        *,
        full_vocab_size: int | None = None,
        norm_low: torch.Tensor | None = None,
        norm_high: torch.Tensor | None = None,
        norm_mask: torch.Tensor | None = None,
        gripper_binarize: bool = False,
        gripper_binarize_threshold: float = 0.0,
        gripper_invert: bool = False,
    ) -> None:
        super().__init__()
        if num_bins < 2:
            raise ValueError(f"num_bins must be >= 2, got {num_bins}")
        if full_vocab_size is not None and full_vocab_size < num_bins:
            raise ValueError(
                f"full_vocab_size ({full_vocab_size}) must be at least num_bins ({num_bins})"
            )
        if (norm_low is None) != (norm_high is None):
            raise ValueError("norm_low and norm_high must be given together")
        self.num_bins = int(num_bins)
        self.full_vocab_size = None if full_vocab_size is None else int(full_vocab_size)
        self.gripper_binarize = bool(gripper_binarize)
        self.gripper_binarize_threshold = float(gripper_binarize_threshold)
        self.gripper_invert = bool(gripper_invert)
        bins = torch.linspace(-1.0, 1.0, num_bins)
        self.register_buffer("bins", bins)
        self.register_buffer("bin_centers", (bins[:-1] + bins[1:]) / 2)
        if norm_low is not None:
            norm_low = torch.as_tensor(norm_low, dtype=torch.float64)
            norm_high = torch.as_tensor(norm_high, dtype=torch.float64)
            mask = torch.ones_like(norm_low, dtype=torch.bool) if norm_mask is None else norm_mask
            self.register_buffer("norm_low", norm_low)
            self.register_buffer("norm_high", norm_high)
            self.register_buffer("norm_mask", torch.as_tensor(mask, dtype=torch.bool))
        else:
            self.norm_low = self.norm_high = self.norm_mask = None

    @property
    def vocab_size(self) -> int:
        return self.num_bins if self.full_vocab_size is None else self.full_vocab_size

    @property
    def _top(self) -> int:
        return self.num_bins if self.full_vocab_size is None else self.full_vocab_size

    def encode(self, actions: torch.Tensor) -> torch.Tensor:
        if self.norm_low is not None:
            low = self.norm_low.to(actions.device, actions.dtype)
            high = self.norm_high.to(actions.device, actions.dtype)
            normalized = 2.0 * (actions - low) / (high - low + 1e-8) - 1.0
            actions = torch.where(self.norm_mask.to(actions.device), normalized, actions)
        digitized = torch.bucketize(
            actions.clamp(-1.0, 1.0), self.bins.to(actions.device), right=True
        )
        return self._top - digitized

    def decode(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.norm_low is None:
            centers = self.bin_centers.to(tokens.device)
            return centers[(self._top - tokens - 1).clamp(0, centers.shape[0] - 1)]
        # with statistics: computed in float64 (OpenVLA's reference runs it in numpy
        # float64), then cast to float32
        bins = torch.linspace(-1.0, 1.0, self.num_bins, dtype=torch.float64, device=tokens.device)
        centers = (bins[:-1] + bins[1:]) / 2
        actions = centers[(self._top - tokens - 1).clamp(0, centers.shape[0] - 1)]
        low, high = self.norm_low.to(tokens.device), self.norm_high.to(tokens.device)
        mask = self.norm_mask.to(tokens.device)
        actions = torch.where(mask, 0.5 * (actions + 1.0) * (high - low + 1e-8) + low, actions)
        if self.gripper_binarize:
            binary = (actions > self.gripper_binarize_threshold).to(actions.dtype) * 2.0 - 1.0
            actions = torch.where(~mask, binary, actions)
        if self.gripper_invert:
            actions = torch.where(~mask, -actions, actions)
        return actions.to(self.bin_centers.dtype)

    @classmethod
    def from_norm_stats(
        cls,
        norm_stats: dict,
        unnorm_key: str,
        *,
        num_bins: int = 256,
        full_vocab_size: int | None = None,
        gripper_binarize: bool = False,
        gripper_binarize_threshold: float = 0.0,
        gripper_invert: bool = False,
    ) -> VocabTailActionTokenizer:
        """From the ``norm_stats`` of an OpenVLA checkpoint: ``norm_stats[unnorm_key]["action"]``
        holds ``q01``, ``q99`` and an optional ``mask``.

        Raises:
            KeyError: ``unnorm_key`` is not in ``norm_stats`` (the message lists them).
        """
        if unnorm_key not in norm_stats:
            raise KeyError(
                f"unnorm_key {unnorm_key!r} is not in norm_stats; available: {sorted(norm_stats)}"
            )
        stats = norm_stats[unnorm_key]["action"]
        low = torch.as_tensor(stats["q01"], dtype=torch.float64)
        return cls(
            num_bins,
            full_vocab_size=full_vocab_size,
            norm_low=low,
            norm_high=torch.as_tensor(stats["q99"], dtype=torch.float64),
            norm_mask=torch.as_tensor(stats.get("mask", [True] * low.numel()), dtype=torch.bool),
            gripper_binarize=gripper_binarize,
            gripper_binarize_threshold=gripper_binarize_threshold,
            gripper_invert=gripper_invert,
        )
