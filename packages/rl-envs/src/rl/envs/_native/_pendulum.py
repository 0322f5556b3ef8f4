"""A batched torch Pendulum that mirrors gymnasium's ``Pendulum-v1``."""

from __future__ import annotations

import math

import torch

from rl.core import Bounded, Composite, Unbounded

from ._base import NativeEnv

__all__ = ["PendulumEnv", "pendulum_dynamics"]

MAX_SPEED = 8.0
MAX_TORQUE = 2.0
DT = 0.05
G = 10.0
M = 1.0
L = 1.0


def pendulum_dynamics(
    th: torch.Tensor, thdot: torch.Tensor, u: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step of the pendulum, as in gymnasium's ``Pendulum-v1``.

    Args:
        th: angles ``[*B]`` (0 is upright).
        thdot: angular speeds ``[*B]``.
        u: torques ``[*B]`` (clipped to ``[-2, 2]``).

    Returns:
        ``(new_th [*B], new_thdot [*B], reward [*B])`` with
        ``reward = -(norm(th)^2 + 0.1 thdot^2 + 0.001 u^2)`` computed on the old state.
    """
    u = u.clamp(-MAX_TORQUE, MAX_TORQUE)
    norm_th = torch.remainder(th + math.pi, 2 * math.pi) - math.pi
    costs = norm_th.square() + 0.1 * thdot.square() + 0.001 * u.square()
    new_thdot = thdot + (3 * G / (2 * L) * torch.sin(th) + 3.0 / (M * L**2) * u) * DT
    new_thdot = new_thdot.clamp(-MAX_SPEED, MAX_SPEED)
    new_th = th + new_thdot * DT
    return new_th, new_thdot, -costs


class PendulumEnv(NativeEnv):
    """Gymnasium's ``Pendulum-v1`` in torch, for a whole batch in one vectorized call.

    The observation ``[cos θ, sin θ, θ̇]`` is written under ``"observation"``; reward,
    torque limit (2), speed limit (8), time step (0.05), gravity (10) and reset
    distribution (``θ ∈ [-π, π]``, ``θ̇ ∈ [-1, 1]``) are gymnasium's. Like TorchRL's
    ``PendulumEnv`` it has no time limit: add ``StepCounter(max_steps=200)`` for
    gymnasium's truncation. The state ``[θ, θ̇]`` is kept in float64 (as gymnasium does)
    in :attr:`state`, which can be read and assigned.

    Args:
        batch_size: ``[]`` for one pendulum, ``[N]`` for N stepped together.
        device: where the state and outputs live.
        run_type_checks: check actions against ``action_spec`` at every step.

    Examples:
        >>> import torch
        >>> from rl.envs import PendulumEnv
        >>> env = PendulumEnv(batch_size=[8])
        >>> _ = env.set_seed(0)
        >>> rollout = env.rollout(100)
        >>> rollout.batch_size
        torch.Size([8, 100])
        >>> rollout["next", "observation"].shape
        torch.Size([8, 100, 3])
    """

    def __init__(self, batch_size=None, device=None, run_type_checks: bool = False) -> None:
        super().__init__(device=device, batch_size=batch_size, run_type_checks=run_type_checks)
        bs = self.batch_size
        high = torch.tensor([1.0, 1.0, MAX_SPEED])
        self.observation_spec = Composite(
            observation=Bounded(-high, high, shape=(*bs, 3), device=self.device),
            shape=bs,
            device=self.device,
        )
        self.action_spec = Bounded(-MAX_TORQUE, MAX_TORQUE, shape=(*bs, 1), device=self.device)
        self.reward_spec = Unbounded(shape=(*bs, 1), device=self.device)
        self._action_shape = torch.Size((*bs, 1))
        self._th = torch.zeros(bs, dtype=torch.float64, device=self._tensor_device)
        self._thdot = torch.zeros(bs, dtype=torch.float64, device=self._tensor_device)

    @property
    def state(self) -> torch.Tensor:
        """``[*batch_size, 2]`` float64 tensor of ``(θ, θ̇)`` (a copy; assign to set it)."""
        return torch.stack([self._th, self._thdot], -1)

    @state.setter
    def state(self, value: torch.Tensor) -> None:
        value = torch.as_tensor(value, dtype=torch.float64, device=self._tensor_device)
        if value.shape != (*self.batch_size, 2):
            raise ValueError(
                f"state must have shape {(*self.batch_size, 2)} (θ, θ̇), got {tuple(value.shape)}"
            )
        self.__dict__["_th"], self.__dict__["_thdot"] = value.unbind(-1)

    def _observation(self) -> torch.Tensor:
        th = self._th
        return torch.stack([torch.cos(th), torch.sin(th), self._thdot], -1).to(torch.float32)

    def _reset_entries(self, mask: torch.Tensor | None) -> dict:
        th = self._uniform(-math.pi, math.pi)
        thdot = self._uniform(-1.0, 1.0)
        d = self.__dict__  # per-step state: plain dict writes, not nn.Module.__setattr__
        if mask is None:
            d["_th"], d["_thdot"] = th, thdot
        else:
            d["_th"] = torch.where(mask, th, d["_th"])
            d["_thdot"] = torch.where(mask, thdot, d["_thdot"])
        return {"observation": self._observation()}

    def _step_entries(self, action: torch.Tensor) -> dict:
        u = action.to(torch.float64).squeeze(-1)
        d = self.__dict__  # per-step state: plain dict writes, not nn.Module.__setattr__
        d["_th"], d["_thdot"], reward = pendulum_dynamics(d["_th"], d["_thdot"], u)
        # no time limit and no termination: the done flags are all False (left out)
        return {"observation": self._observation(), "reward": reward.to(torch.float32)[..., None]}
