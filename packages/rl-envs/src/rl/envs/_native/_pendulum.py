"""A batched torch Pendulum that mirrors gymnasium's ``Pendulum-v1``."""

from __future__ import annotations

import math

import torch
from tensordict import TensorDict, TensorDictBase

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
    th: torch.Tensor,
    thdot: torch.Tensor,
    u: torch.Tensor,
    *,
    max_speed: float | torch.Tensor = MAX_SPEED,
    max_torque: float | torch.Tensor = MAX_TORQUE,
    dt: float | torch.Tensor = DT,
    g: float | torch.Tensor = G,
    m: float | torch.Tensor = M,
    l: float | torch.Tensor = L,  # noqa: E741 (TorchRL's and gymnasium's name)
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step of the pendulum, as in gymnasium's ``Pendulum-v1``.

    Args:
        th: angles ``[*B]`` (0 is upright).
        thdot: angular speeds ``[*B]``.
        u: torques ``[*B]`` (clipped to ``[-max_torque, max_torque]``).
        max_speed, max_torque, dt, g, m, l: the physical parameters (gymnasium's by
            default), floats or tensors broadcasting with ``[*B]``.

    Returns:
        ``(new_th [*B], new_thdot [*B], reward [*B])`` with
        ``reward = -(norm(th)^2 + 0.1 thdot^2 + 0.001 u^2)`` computed on the old state.
    """
    u = (
        torch.clamp(u, -max_torque, max_torque)
        if isinstance(max_torque, torch.Tensor)
        else (u.clamp(-max_torque, max_torque))
    )
    norm_th = torch.remainder(th + math.pi, 2 * math.pi) - math.pi
    costs = norm_th.square() + 0.1 * thdot.square() + 0.001 * u.square()
    new_thdot = thdot + (3 * g / (2 * l) * torch.sin(th) + 3.0 / (m * l**2) * u) * dt
    if isinstance(max_speed, torch.Tensor):
        new_thdot = torch.clamp(new_thdot, -max_speed, max_speed)
    else:
        new_thdot = new_thdot.clamp(-max_speed, max_speed)
    new_th = th + new_thdot * dt
    return new_th, new_thdot, -costs


_PARAMS = ("max_speed", "max_torque", "dt", "g", "m", "l")


class PendulumEnv(NativeEnv):
    """Gymnasium's ``Pendulum-v1`` in torch, for a whole batch in one vectorized call.

    The observation ``[cos θ, sin θ, θ̇]`` is written under ``"observation"``; reward,
    torque limit (2), speed limit (8), time step (0.05), gravity (10) and reset
    distribution (``θ ∈ [-π, π]``, ``θ̇ ∈ [-1, 1]``) are gymnasium's. Like TorchRL's
    ``PendulumEnv`` it has no time limit: add ``StepCounter(max_steps=200)`` for
    gymnasium's truncation. The state ``[θ, θ̇]`` is kept in float64 (as gymnasium does)
    in :attr:`state`, which can be read and assigned.

    Args:
        td_params: the physical parameters, as TorchRL: a TensorDict with
            ``("params", name)`` entries for ``max_speed``, ``max_torque``, ``dt``, ``g``,
            ``m`` and ``l`` (see :meth:`gen_params`); entries may carry the batch dims (one
            pendulum per set of parameters). ``None``: gymnasium's values. The speed and
            torque limits set the observation and action specs' bounds.
        seed: seeds the env's generator (:meth:`set_seed`); ``None``: seeded from torch's
            global generator, as TorchRL.
        device: where the state and outputs live.
        batch_size: ``[]`` for one pendulum, ``[N]`` for N stepped together (default: the
            batch size of ``td_params``, else ``[]``).
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

    def __init__(
        self,
        td_params: TensorDictBase | None = None,
        seed: int | None = None,
        device=None,
        *,
        batch_size=None,
        run_type_checks: bool = False,
    ) -> None:
        if td_params is not None and (
            not isinstance(td_params, TensorDictBase) or "params" not in td_params.keys()
        ):
            raise TypeError(
                "td_params must be a TensorDict with a 'params' entry (see "
                f"PendulumEnv.gen_params()), got {type(td_params).__name__}"
            )
        if batch_size is None and td_params is not None:
            batch_size = td_params.batch_size
        super().__init__(device=device, batch_size=batch_size, run_type_checks=run_type_checks)
        bs = self.batch_size
        self._params = self._read_params(td_params)
        max_speed = torch.as_tensor(self._params["max_speed"], dtype=torch.float32)
        max_torque = torch.as_tensor(self._params["max_torque"], dtype=torch.float32)
        ones = torch.ones(*bs, 1)
        high = torch.cat([ones, ones, max_speed.expand(bs).unsqueeze(-1)], -1)
        self.observation_spec = Composite(
            observation=Bounded(-high, high, shape=(*bs, 3), device=self.device),
            shape=bs,
            device=self.device,
        )
        torque = max_torque.expand(bs).unsqueeze(-1)
        if max_torque.ndim == 0:
            torque = float(max_torque)
        self.action_spec = Bounded(-torque, torque, shape=(*bs, 1), device=self.device)
        self.reward_spec = Unbounded(shape=(*bs, 1), device=self.device)
        self._action_shape = torch.Size((*bs, 1))
        self._th = torch.zeros(bs, dtype=torch.float64, device=self._tensor_device)
        self._thdot = torch.zeros(bs, dtype=torch.float64, device=self._tensor_device)
        if seed is not None:
            self.set_seed(seed)

    @staticmethod
    def gen_params(g: float = 10.0, batch_size=None, device=None) -> TensorDictBase:
        """TorchRL's parameter TensorDict: ``("params", name)`` for ``max_speed`` (8),
        ``max_torque`` (2), ``dt`` (0.05), ``g``, ``m`` (1) and ``l`` (1), expanded to
        ``batch_size``.

        Examples:
            >>> from rl.envs import PendulumEnv
            >>> params = PendulumEnv.gen_params(g=9.81)
            >>> env = PendulumEnv(params, seed=0)
            >>> round(float(params["params", "g"]), 2)
            9.81
        """
        td = TensorDict(
            {
                "params": TensorDict(
                    {
                        "max_speed": MAX_SPEED,
                        "max_torque": MAX_TORQUE,
                        "dt": DT,
                        "g": g,
                        "m": M,
                        "l": L,
                    },
                    [],
                )
            },
            [],
            device=device,
        )
        if batch_size:
            td = td.expand(batch_size).contiguous()
        return td

    def _read_params(self, td_params: TensorDictBase | None) -> dict:
        if td_params is None:
            return dict(zip(_PARAMS, (MAX_SPEED, MAX_TORQUE, DT, G, M, L), strict=True))
        missing = [k for k in _PARAMS if k not in td_params["params"].keys()]
        if missing:
            raise KeyError(f"td_params['params'] lacks {missing}; expected {list(_PARAMS)}")
        out = {}
        for name in _PARAMS:
            value = td_params["params", name].detach()
            if value.ndim == 0:
                out[name] = float(value)
                continue
            try:
                value = value.to(torch.float64).expand(self.batch_size)
            except RuntimeError:
                raise ValueError(
                    f"td_params['params', {name!r}] has shape {tuple(value.shape)}, which does "
                    f"not broadcast to the batch size {tuple(self.batch_size)}"
                ) from None
            out[name] = value.to(self._tensor_device).clone()
        return out

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
        d["_th"], d["_thdot"], reward = pendulum_dynamics(d["_th"], d["_thdot"], u, **self._params)
        # no time limit and no termination: the done flags are all False (left out)
        return {"observation": self._observation(), "reward": reward.to(torch.float32)[..., None]}
