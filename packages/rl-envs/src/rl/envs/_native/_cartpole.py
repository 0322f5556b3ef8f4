"""A batched torch CartPole that mirrors gymnasium's ``CartPole-v1``."""

from __future__ import annotations

import math

import torch

from rl.core import Bounded, Categorical, Composite, OneHot, Unbounded

from ._base import NativeEnv

__all__ = ["CartPoleEnv", "cartpole_dynamics"]

GRAVITY = 9.8
MASSCART = 1.0
MASSPOLE = 0.1
TOTAL_MASS = MASSCART + MASSPOLE
LENGTH = 0.5
POLEMASS_LENGTH = MASSPOLE * LENGTH
FORCE_MAG = 10.0
TAU = 0.02
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4


def cartpole_dynamics(state: torch.Tensor, push_right: torch.Tensor) -> torch.Tensor:
    """One Euler step of the cart-pole, as in gymnasium's ``CartPole-v1``.

    Args:
        state: ``[*B, 4]`` as ``(x, x_dot, theta, theta_dot)``.
        push_right: ``[*B]`` bool, the force is ``+10`` when True and ``-10`` otherwise.

    Returns:
        the new state ``[*B, 4]``.
    """
    x, x_dot, theta, theta_dot = state.unbind(-1)
    force = torch.where(push_right, FORCE_MAG, -FORCE_MAG).to(state.dtype)
    costheta = torch.cos(theta)
    sintheta = torch.sin(theta)
    temp = (force + POLEMASS_LENGTH * theta_dot.square() * sintheta) / TOTAL_MASS
    thetaacc = (GRAVITY * sintheta - costheta * temp) / (
        LENGTH * (4.0 / 3.0 - MASSPOLE * costheta.square() / TOTAL_MASS)
    )
    xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
    return torch.stack(
        [x + TAU * x_dot, x_dot + TAU * xacc, theta + TAU * theta_dot, theta_dot + TAU * thetaacc],
        -1,
    )


class CartPoleEnv(NativeEnv):
    """Gymnasium's ``CartPole-v1`` in torch, for a whole batch in one vectorized call.

    Same dynamics (Euler integration), observation ``(x, ẋ, θ, θ̇)`` under
    ``"observation"``, reward 1 per step, termination when ``|x| > 2.4`` or
    ``|θ| > 12°`` and truncation after ``max_episode_steps`` (500, as ``CartPole-v1``'s
    time limit; ``None`` disables it). Actions are one-hot of size 2 like
    ``GymEnv("CartPole-v1")`` (``categorical_action_encoding=True`` for an integer).

    Args:
        batch_size: ``[]`` for one cart-pole, ``[N]`` for N stepped together.
        device: where the state and outputs live.
        max_episode_steps: the time limit (truncation), ``None`` for none.
        categorical_action_encoding: integer actions (``Categorical(2)``) instead of
            one-hot ones.
        run_type_checks: check actions against ``action_spec`` at every step.

    Examples:
        >>> from rl.envs import CartPoleEnv
        >>> env = CartPoleEnv(batch_size=[16])
        >>> _ = env.set_seed(0)
        >>> rollout = env.rollout(50, break_when_any_done=False)
        >>> rollout["next", "reward"].shape
        torch.Size([16, 50, 1])
        >>> bool(rollout["next", "terminated"].any())
        True
    """

    def __init__(
        self,
        batch_size=None,
        device=None,
        max_episode_steps: int | None = 500,
        categorical_action_encoding: bool = False,
        run_type_checks: bool = False,
    ) -> None:
        super().__init__(device=device, batch_size=batch_size, run_type_checks=run_type_checks)
        bs = self.batch_size
        high = torch.tensor([X_THRESHOLD * 2, math.inf, THETA_THRESHOLD * 2, math.inf])
        self.observation_spec = Composite(
            observation=Bounded(-high, high, shape=(*bs, 4), device=self.device),
            shape=bs,
            device=self.device,
        )
        self.categorical_action_encoding = categorical_action_encoding
        if categorical_action_encoding:
            self.action_spec = Categorical(2, shape=bs, device=self.device)
        else:
            self.action_spec = OneHot(2, shape=(*bs, 2), dtype=torch.int64, device=self.device)
        self._action_shape = self.action_spec.shape
        self.reward_spec = Unbounded(shape=(*bs, 1), device=self.device)
        self.max_episode_steps = max_episode_steps
        dev = self._tensor_device
        self.state = torch.zeros((*bs, 4), dtype=torch.float64, device=dev)
        self.elapsed_steps = torch.zeros(bs, dtype=torch.int64, device=dev)
        self._was_terminated = torch.zeros(bs, dtype=torch.bool, device=dev)

    def _reset_entries(self, mask: torch.Tensor | None) -> dict:
        new = self._uniform(-0.05, 0.05, 4)
        d = self.__dict__  # per-step state: plain dict writes, not nn.Module.__setattr__
        if mask is None:
            d["state"] = new
            d["elapsed_steps"] = torch.zeros_like(self.elapsed_steps)
            d["_was_terminated"] = torch.zeros_like(self._was_terminated)
        else:
            d["state"] = torch.where(mask.unsqueeze(-1), new, self.state)
            d["elapsed_steps"] = self.elapsed_steps.masked_fill(mask, 0)
            d["_was_terminated"] = self._was_terminated & ~mask
        return {"observation": d["state"].to(torch.float32)}

    def _step_entries(self, action: torch.Tensor) -> dict:
        push_right = (action == 1) if self.categorical_action_encoding else action[..., 1].bool()
        d = self.__dict__  # per-step state: plain dict writes, not nn.Module.__setattr__
        d["state"] = state = cartpole_dynamics(d["state"], push_right)
        x = state[..., 0]
        theta = state[..., 2]
        terminated = (x.abs() > X_THRESHOLD) | (theta.abs() > THETA_THRESHOLD)
        # as gymnasium: reward 1 up to and including the terminating step, 0 after it
        was_terminated = d["_was_terminated"]
        reward = (~was_terminated).to(torch.float32).unsqueeze(-1)
        d["_was_terminated"] = was_terminated | terminated
        d["elapsed_steps"] = elapsed = d["elapsed_steps"] + 1
        if self.max_episode_steps is None:
            truncated = torch.zeros_like(terminated)
        else:
            truncated = elapsed >= self.max_episode_steps
        return {
            "observation": state.to(torch.float32),
            "reward": reward,
            **self._flags(terminated, truncated),
        }
