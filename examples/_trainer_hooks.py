"""Hooks the example scripts add to ``rl.core.trainers.Trainer`` (``dqn_trainer.py``):
:class:`EpisodeReturnLog` logs the returns of the episodes that end while training (its
running sums in the checkpoints), :class:`OnDevice` runs a policy on the device for
``LogValidationReward``'s rollouts of a CPU env."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rl.core.trainers import Trainer, TrainerHookBase

sys.path.insert(0, str(Path(__file__).parent))
from _common import EpisodeReturns  # noqa: E402

__all__ = ["EpisodeReturnLog", "OnDevice"]


class EpisodeReturnLog(TrainerHookBase):
    """Logs the mean return of the recent finished training episodes as
    ``train/episode_return`` (``pre_steps_log``); its running sums go into checkpoints."""

    def __init__(self, window: int = 20) -> None:
        self.returns = EpisodeReturns(window=window)

    def __call__(self, batch) -> dict[str, Any] | None:
        if batch is None:  # the collector writes into the buffer itself: no batch here
            return None
        self.returns.update(batch)
        mean = self.returns.mean
        return None if mean is None else {"train/episode_return": mean, "log_pbar": True}

    def state_dict(self) -> dict[str, Any]:
        carry = self.returns._carry
        return {
            "recent": list(self.returns.recent),
            "carry": torch.zeros(0, dtype=torch.float64) if carry is None else carry.clone(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.returns.recent.clear()
        self.returns.recent.extend(float(r) for r in state_dict["recent"])
        carry = state_dict["carry"]
        self.returns._carry = carry.clone() if carry.numel() else None

    def register(self, trainer: Trainer, name: str = "episode_return_log") -> None:
        trainer.register_op("pre_steps_log", self)
        trainer.register_module(name, self)


class OnDevice(nn.Module):
    """``policy`` (on ``device``) acting in a CPU env: each tensordict the env hands it is
    moved to ``device`` and the policy's output back to the CPU (LogValidationReward's
    rollouts of the CPU evaluation env, with the weights being trained)."""

    def __init__(self, policy: nn.Module, device: torch.device) -> None:
        super().__init__()
        self.policy, self.device = policy, device

    def forward(self, tensordict):
        return self.policy(tensordict.to(self.device)).cpu()
