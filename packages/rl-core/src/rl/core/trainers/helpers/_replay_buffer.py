"""The replay buffer of a config-driven script (TorchRL's ``trainers.helpers.replay_buffer``).

The buffer comes from rl-data (``pip install "rl-core[helpers]"``), imported when the
builder runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ._config import field, require

__all__ = ["ReplayArgsConfig", "make_replay_buffer"]


def make_replay_buffer(device: torch.device | str | int, cfg: Any) -> Any:
    """A ``TensorDictReplayBuffer`` built from ``cfg`` (:class:`ReplayArgsConfig` fields).

    ``cfg.buffer_size`` transitions in a ``LazyMemmapStorage`` (in
    ``cfg.buffer_scratch_dir``, a temporary directory when None), sampled uniformly or,
    with ``cfg.prb``, by priority (``alpha=0.7``, ``beta=0.5``), ``cfg.batch_size`` at a
    time with ``cfg.buffer_prefetch`` batches prefetched; the samples are pinned when
    ``device`` is not the CPU (the storage itself stays on the CPU).

    Args:
        device: where the samples will be used.
        cfg: the config.

    Returns:
        The replay buffer.

    Examples:
        >>> from types import SimpleNamespace
        >>> cfg = SimpleNamespace(buffer_size=100, prb=False, buffer_scratch_dir=None,
        ...                       buffer_prefetch=0, batch_size=4)
        >>> rb = make_replay_buffer("cpu", cfg)
        >>> type(rb).__name__, rb.batch_size
        ('TensorDictReplayBuffer', 4)
    """
    needed = "make_replay_buffer"
    decl = "ReplayArgsConfig"
    data = require("rl.data", needed)
    device = torch.device(device)
    size = field(cfg, "buffer_size", needed, decl)
    if field(cfg, "prb", needed, decl):
        sampler = data.PrioritizedSampler(max_capacity=size, alpha=0.7, beta=0.5)
    else:
        sampler = data.RandomSampler()
    prefetch = field(cfg, "buffer_prefetch", needed, decl)
    return data.TensorDictReplayBuffer(
        storage=data.LazyMemmapStorage(
            size, scratch_dir=field(cfg, "buffer_scratch_dir", needed, decl)
        ),
        sampler=sampler,
        pin_memory=device.type != "cpu",
        prefetch=prefetch or None,
        batch_size=field(cfg, "batch_size", needed, "TrainerConfig"),
    )


@dataclass
class ReplayArgsConfig:
    """The replay-buffer fields of a script's config."""

    buffer_size: int = 1000000
    """Transitions the buffer holds."""
    prb: bool = False
    """Sample by priority rather than uniformly."""
    buffer_scratch_dir: str | None = None
    """Directory of the memory-mapped storage (``None``: a temporary one)."""
    buffer_prefetch: int = 10
    """Batches sampled ahead in a background thread."""
