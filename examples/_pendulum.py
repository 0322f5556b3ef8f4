"""Pendulum-v1 as a known model, for planning (``mpc.py``): its reward as a function of
the state and the action, and its true dynamics, rl's native torch ``PendulumEnv``
stepped from given states. Actions are normalized to ``[-1, 1]``."""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import nn

from rl.envs import PendulumEnv

__all__ = ["MAX_TORQUE", "TruePendulum", "pendulum_reward"]

MAX_TORQUE = 2.0  # Pendulum-v1's action bound; the planner acts in [-1, 1]


def pendulum_reward(observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """Pendulum-v1's reward ``-(theta^2 + 0.1 thetadot^2 + 0.001 u^2)`` ``[*B, 1]``, for
    an action normalized to ``[-1, 1]`` (the torque is ``MAX_TORQUE * action``)."""
    theta = torch.atan2(observation[..., 1:2], observation[..., 0:1])
    u = MAX_TORQUE * action.clamp(-1.0, 1.0)
    return -(theta.square() + 0.1 * observation[..., 2:3].square() + 0.001 * u.square())


class TruePendulum(nn.Module):
    """The true dynamics: rl's ``PendulumEnv`` set to each imagined state and stepped (a
    simulator per batch shape, on the device of the first states it is given)."""

    def __init__(self) -> None:
        super().__init__()
        self.sims: dict[torch.Size, PendulumEnv] = {}

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        batch = observation.shape[:-1]
        sim = self.sims.get(batch)
        if sim is None:
            sim = self.sims[batch] = PendulumEnv(batch_size=batch, device=observation.device)
        theta = torch.atan2(observation[..., 1], observation[..., 0])
        sim.state = torch.stack([theta, observation[..., 2]], -1)
        out = sim.step(TensorDict(action=MAX_TORQUE * action, batch_size=batch))
        return out["next", "observation"]
