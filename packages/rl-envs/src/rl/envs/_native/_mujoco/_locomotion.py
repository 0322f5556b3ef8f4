"""The locomotion tasks on gymnasium's MuJoCo models: Ant, Hopper, Humanoid, Walker2d.

Rewards and terminations are gymnasium's ``-v5`` ones (same model files, same frame skip,
same weights), so that an episode here scores what it scores in ``gymnasium.make``.
"""

from __future__ import annotations

import torch

from ._env import MujocoEnv, gymnasium_asset

__all__ = ["AntEnv", "HopperEnv", "HumanoidEnv", "Walker2dEnv"]


def _ctrl_cost(weight: float, ctrl: torch.Tensor) -> torch.Tensor:
    return weight * ctrl.to(torch.float64).square().sum(-1)


def _inside(value: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Gymnasium's open-interval health checks: ``low < value < high``."""
    return (value > low) & (value < high)


class HopperEnv(MujocoEnv):
    """The one-legged hopper of gymnasium's ``Hopper-v5`` (3 actuators).

    Observation ``[N, 11]``: ``qpos[1:]`` and ``qvel`` clipped to ``[-10, 10]``. Reward:
    forward speed of the torso (``Δx / dt``) ``+ 1`` while healthy
    ``- 1e-3 * |action|²``. Terminates when unhealthy: height ``qpos[1] <= 0.7``, torso
    angle ``|qpos[2]| >= 0.2`` or an entry of ``(qpos[2:], qvel)`` outside
    ``(-100, 100)``. Four physics steps of 2 ms per env step; reset noise ``±5e-3``.

    Takes :class:`MujocoEnv`'s arguments.

    Examples:
        >>> from rl.envs import HopperEnv
        >>> env = HopperEnv(num_envs=2, seed=0)
        >>> env.rollout(5)["next", "observation"].shape
        torch.Size([2, 5, 11])
    """

    XML_PATH = gymnasium_asset("hopper.xml")
    FRAME_SKIP = 4
    RESET_NOISE_SCALE = 5e-3
    SKIP_QPOS = 1
    HEALTHY_Z_MIN = 0.7
    HEALTHY_ANGLE_MAX = 0.2
    HEALTHY_STATE_MAX = 100.0
    HEALTHY_REWARD = 1.0
    CTRL_COST_WEIGHT = 1e-3

    def _make_obs(self, state: dict) -> torch.Tensor:
        return torch.cat([state["qpos"][:, 1:], state["qvel"].clamp(-10.0, 10.0)], -1)

    def _is_healthy(self, state: dict) -> torch.Tensor:
        qpos = state["qpos"]
        rest = torch.cat([qpos[:, 2:], state["qvel"]], -1)
        bound = self.HEALTHY_STATE_MAX
        return (
            _inside(rest, -bound, bound).all(-1)
            & (qpos[:, 1] > self.HEALTHY_Z_MIN)
            & _inside(qpos[:, 2], -self.HEALTHY_ANGLE_MAX, self.HEALTHY_ANGLE_MAX)
        )

    def _compute_reward(self, state, action, next_state) -> torch.Tensor:
        forward = (next_state["qpos"][:, 0] - state["qpos"][:, 0]) / self.dt
        healthy = self.HEALTHY_REWARD * self._is_healthy(next_state)
        return forward + healthy - _ctrl_cost(self.CTRL_COST_WEIGHT, action)

    def _compute_done(self, state, next_state) -> torch.Tensor:
        return ~self._is_healthy(next_state)


class Walker2dEnv(MujocoEnv):
    """The planar biped of gymnasium's ``Walker2d-v5`` (6 actuators, ``walker2d_v5.xml``).

    Observation ``[N, 17]``: ``qpos[1:]`` and ``qvel`` clipped to ``[-10, 10]``. Reward:
    forward speed ``+ 1`` while healthy ``- 1e-3 * |action|²``. Terminates when the
    height ``qpos[1]`` leaves ``(0.8, 2)`` or the torso angle ``qpos[2]`` leaves
    ``(-1, 1)``. Four physics steps of 2 ms per env step; reset noise ``±5e-3``.

    Takes :class:`MujocoEnv`'s arguments.

    Examples:
        >>> from rl.envs import Walker2dEnv
        >>> env = Walker2dEnv(seed=0)
        >>> env.action_spec.shape
        torch.Size([1, 6])
    """

    XML_PATH = gymnasium_asset("walker2d_v5.xml")
    FRAME_SKIP = 4
    RESET_NOISE_SCALE = 5e-3
    SKIP_QPOS = 1
    HEALTHY_Z_LOW = 0.8
    HEALTHY_Z_HIGH = 2.0
    HEALTHY_ANGLE_MAX = 1.0
    HEALTHY_REWARD = 1.0
    CTRL_COST_WEIGHT = 1e-3

    def _make_obs(self, state: dict) -> torch.Tensor:
        return torch.cat([state["qpos"][:, 1:], state["qvel"].clamp(-10.0, 10.0)], -1)

    def _is_healthy(self, state: dict) -> torch.Tensor:
        qpos = state["qpos"]
        return _inside(qpos[:, 1], self.HEALTHY_Z_LOW, self.HEALTHY_Z_HIGH) & _inside(
            qpos[:, 2], -self.HEALTHY_ANGLE_MAX, self.HEALTHY_ANGLE_MAX
        )

    def _compute_reward(self, state, action, next_state) -> torch.Tensor:
        forward = (next_state["qpos"][:, 0] - state["qpos"][:, 0]) / self.dt
        healthy = self.HEALTHY_REWARD * self._is_healthy(next_state)
        return forward + healthy - _ctrl_cost(self.CTRL_COST_WEIGHT, action)

    def _compute_done(self, state, next_state) -> torch.Tensor:
        return ~self._is_healthy(next_state)


class AntEnv(MujocoEnv):
    """The quadruped of gymnasium's ``Ant-v5`` (8 actuators, free-floating torso).

    Observation ``[N, 27]``: ``qpos[2:]`` and ``qvel`` (TorchRL's layout; gymnasium's
    ``Ant-v5`` with ``include_cfrc_ext_in_observation=False``). Reward, as ``Ant-v5``:
    the torso's forward speed (its body frame, ``Δx / dt``) ``+ 1`` while healthy
    ``- 0.5 * |action|² - 5e-4 * |clip(cfrc_ext, -1, 1)|²``. Terminates when the torso
    height ``qpos[2]`` leaves ``[0.2, 1]`` or the state is not finite. Five physics
    steps of 10 ms per env step; reset noise ``±0.1``.

    Takes :class:`MujocoEnv`'s arguments.

    Examples:
        >>> from rl.envs import AntEnv
        >>> env = AntEnv(seed=0)
        >>> env.observation_spec["observation"].shape
        torch.Size([1, 27])
    """

    XML_PATH = gymnasium_asset("ant.xml")
    FRAME_SKIP = 5
    RESET_NOISE_SCALE = 0.1
    SKIP_QPOS = 2
    HEALTHY_Z_LOW = 0.2
    HEALTHY_Z_HIGH = 1.0
    HEALTHY_REWARD = 1.0
    CTRL_COST_WEIGHT = 0.5
    CONTACT_COST_WEIGHT = 5e-4
    CONTACT_FORCE_RANGE = (-1.0, 1.0)

    def _state_extras(self) -> dict:
        torso = self._sim.model.body("torso").id
        return {
            "torso_xpos": self._sim.xpos()[:, torso],
            "cfrc_ext": self._sim.cfrc_ext(),
        }

    def _is_healthy(self, state: dict) -> torch.Tensor:
        qpos, qvel = state["qpos"], state["qvel"]
        finite = torch.isfinite(qpos).all(-1) & torch.isfinite(qvel).all(-1)
        z = qpos[:, 2]
        return finite & (z >= self.HEALTHY_Z_LOW) & (z <= self.HEALTHY_Z_HIGH)

    def _compute_reward(self, state, action, next_state) -> torch.Tensor:
        forward = (next_state["torso_xpos"][:, 0] - state["torso_xpos"][:, 0]) / self.dt
        healthy = self.HEALTHY_REWARD * self._is_healthy(next_state)
        contact = next_state["cfrc_ext"].clamp(*self.CONTACT_FORCE_RANGE)
        contact_cost = self.CONTACT_COST_WEIGHT * contact.square().sum((-2, -1))
        return forward + healthy - _ctrl_cost(self.CTRL_COST_WEIGHT, action) - contact_cost

    def _compute_done(self, state, next_state) -> torch.Tensor:
        return ~self._is_healthy(next_state)


class HumanoidEnv(MujocoEnv):
    """The biped of gymnasium's ``Humanoid-v5`` (17 actuators, free-floating torso).

    Observation ``[N, 45]``: ``qpos[2:]`` and ``qvel`` clipped to ``[-10, 10]``
    (TorchRL's layout; gymnasium's ``Humanoid-v5`` without the ``cinert`` / ``cvel`` /
    ``qfrc_actuator`` / ``cfrc_ext`` blocks, and unclipped). Reward, as ``Humanoid-v5``:
    ``1.25 *`` the forward speed of the centre of mass ``+ 5`` while healthy
    ``- 0.1 * |ctrl|² - min(5e-7 * |cfrc_ext|², 10)``. Terminates when the torso height
    ``qpos[2]`` leaves ``(1, 2)``. Five physics steps of 3 ms per env step; reset noise
    ``±1e-2``.

    Takes :class:`MujocoEnv`'s arguments.

    Examples:
        >>> from rl.envs import HumanoidEnv
        >>> env = HumanoidEnv(seed=0)
        >>> env.observation_spec["observation"].shape
        torch.Size([1, 45])
    """

    XML_PATH = gymnasium_asset("humanoid.xml")
    FRAME_SKIP = 5
    RESET_NOISE_SCALE = 1e-2
    SKIP_QPOS = 2
    HEALTHY_Z_LOW = 1.0
    HEALTHY_Z_HIGH = 2.0
    HEALTHY_REWARD = 5.0
    FORWARD_REWARD_WEIGHT = 1.25
    CTRL_COST_WEIGHT = 0.1
    CONTACT_COST_WEIGHT = 5e-7
    CONTACT_COST_MAX = 10.0

    def _state_extras(self) -> dict:
        mass = self._sim.model.body_mass
        center = (mass[None, :, None] * self._sim.xipos()).sum(1) / mass.sum()
        return {"mass_center": center, "cfrc_ext": self._sim.cfrc_ext(), "ctrl": self._sim.ctrl()}

    def _make_obs(self, state: dict) -> torch.Tensor:
        return torch.cat([state["qpos"][:, 2:], state["qvel"].clamp(-10.0, 10.0)], -1)

    def _is_healthy(self, state: dict) -> torch.Tensor:
        return _inside(state["qpos"][:, 2], self.HEALTHY_Z_LOW, self.HEALTHY_Z_HIGH)

    def _compute_reward(self, state, action, next_state) -> torch.Tensor:
        speed = (next_state["mass_center"][:, 0] - state["mass_center"][:, 0]) / self.dt
        healthy = self.HEALTHY_REWARD * self._is_healthy(next_state)
        contact = self.CONTACT_COST_WEIGHT * next_state["cfrc_ext"].square().sum((-2, -1))
        contact = contact.clamp(max=self.CONTACT_COST_MAX)
        ctrl_cost = _ctrl_cost(self.CTRL_COST_WEIGHT, next_state["ctrl"])
        return self.FORWARD_REWARD_WEIGHT * speed + healthy - ctrl_cost - contact

    def _compute_done(self, state, next_state) -> torch.Tensor:
        return ~self._is_healthy(next_state)
