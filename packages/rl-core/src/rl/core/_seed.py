"""Seeding torch, numpy and python's ``random`` in one call."""

from __future__ import annotations

import random

import numpy as np
import torch

__all__ = ["seed_everything"]


def seed_everything(seed: int) -> int:
    """Seeds python's ``random``, numpy's global generator and torch (every device).

    Args:
        seed: an int in ``[0, 2**32)`` (numpy's range).

    Returns:
        The seed, so that ``seed = seed_everything(seed)`` can be logged.

    Raises:
        TypeError: if ``seed`` is not an int.
        ValueError: if ``seed`` is outside ``[0, 2**32)``.

    Examples:
        >>> import torch
        >>> from rl.core import seed_everything
        >>> _ = seed_everything(0); a = torch.rand(2)
        >>> _ = seed_everything(0); b = torch.rand(2)
        >>> torch.equal(a, b)
        True
    """
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise TypeError(f"seed_everything expects an int seed, got {type(seed).__name__} {seed!r}")
    seed = int(seed)
    if not 0 <= seed < 2**32:
        raise ValueError(f"seed_everything expects a seed in [0, 2**32), got {seed}")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    return seed
