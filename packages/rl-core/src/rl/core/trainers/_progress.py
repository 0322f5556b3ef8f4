"""The trainer's progress bar (tqdm, an extra) and its recent-episode-return tracker."""

from __future__ import annotations

import collections
import importlib.util
import logging
import sys
import warnings

import torch
from tensordict import TensorDictBase

__all__ = ["EpisodeReturns", "ProgressBar"]

_logger = logging.getLogger("rl.core.trainers")
_has_tqdm = importlib.util.find_spec("tqdm") is not None
_TQDM_HINT = 'the progress bar needs tqdm: pip install "rl-core[progress]"'


def _is_terminal() -> bool:
    try:
        return sys.stdout.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class EpisodeReturns:
    """Sums ``("next", "reward")`` per environment across batches and keeps the returns of
    the episodes that ended (``("next", "done")``), most recent last.

    Batches are ``[*B, T]`` (time last) or ``[T]``.
    """

    def __init__(self, window: int = 10) -> None:
        self.recent: collections.deque[float] = collections.deque(maxlen=window)
        self._carry: torch.Tensor | None = None

    def update(self, batch: TensorDictBase) -> None:
        reward = batch.get(("next", "reward"), None)
        done = batch.get(("next", "done"), None)
        if reward is None or done is None or batch.batch_dims == 0:
            return
        time = batch.batch_dims - 1
        reward = reward.detach().to("cpu", torch.float64).reshape(*batch.batch_size, -1).sum(-1)
        done = done.detach().cpu().reshape(*batch.batch_size, -1).any(-1)
        reward = reward.movedim(time, -1).reshape(-1, batch.batch_size[time])
        done = done.movedim(time, -1).reshape(-1, batch.batch_size[time])
        if self._carry is None or self._carry.shape[0] != reward.shape[0]:
            self._carry = torch.zeros(reward.shape[0], dtype=torch.float64)
        csum = reward.cumsum(-1)
        base = torch.zeros_like(self._carry)
        for n, t in done.nonzero().tolist():
            self.recent.append(float(self._carry[n] + csum[n, t] - base[n]))
            base[n] = csum[n, t]
            self._carry[n] = 0.0
        self._carry += csum[:, -1] - base

    @property
    def mean(self) -> float | None:
        return sum(self.recent) / len(self.recent) if self.recent else None


class ProgressBar:
    """A tqdm bar counting frames, showing the recent episode return, the loss and the values
    hooks log with ``log_pbar=True``. Inactive (every call a no-op) when not asked for, when
    stdout/stderr is not a terminal, or when tqdm is not installed (with a warning naming
    the extra)."""

    def __init__(self, enabled: bool, total: int | None, initial: int = 0) -> None:
        self.active = bool(enabled) and _is_terminal()
        if self.active and not _has_tqdm:
            warnings.warn(_TQDM_HINT, stacklevel=3)
            self.active = False
        self.values: dict[str, float] = {}
        self.returns = EpisodeReturns()
        self._bar = None
        if self.active:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, initial=initial, unit="frame", dynamic_ncols=True)

    def observe(self, batch: TensorDictBase) -> None:
        if self.active:
            self.returns.update(batch)

    def update(self, frames: int) -> None:
        if not self.active:
            return
        postfix = {}
        if self.returns.mean is not None:
            postfix["return"] = f"{self.returns.mean:.4g}"
        for key in sorted(self.values):
            value = self.values[key]
            postfix[key] = f"{value:.4g}" if isinstance(value, float) else str(value)
        self._bar.set_postfix(postfix, refresh=False)
        self._bar.update(frames)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
