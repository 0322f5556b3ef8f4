"""``SatelliteEnv``: slew a satellite with control moment gyros, avoiding singularities."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

import torch

from rl.core import Bounded, Composite, Unbounded

from ._env import MujocoEnv

__all__ = ["SatelliteEnv", "cmg_geometry", "cmg_jacobian", "quat_log", "quat_mul"]

_PYRAMID_SKEW = math.atan(math.sqrt(2.0))  # 54.74 deg: a spherical momentum envelope


def cmg_geometry(num_cmgs: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(gimbal_axes, rotor_axes)``, each ``[3, num_cmgs]`` float64 unit columns in the
    bus frame (rotor axes at zero gimbal angle, each orthogonal to its gimbal axis).

    ``4``: the textbook pyramid, one CMG per side face (``+x, +y, -x, -y``), gimbal axes in
    the ``xy`` plane, rotors tilted from ``+z`` towards their face by ``atan(sqrt(2))``.
    ``6``: one CMG per face (``+x, -x, +y, -y, +z, -z``), each principal axis carrying
    two rotors at zero gimbal angles (TorchRL's orthogonal cluster).
    """
    if num_cmgs == 4:
        sb, cb = math.sin(_PYRAMID_SKEW), math.cos(_PYRAMID_SKEW)
        gimbal = [[0, 1, 0], [-1, 0, 0], [0, -1, 0], [1, 0, 0]]
        rotor = [[sb, 0, cb], [0, sb, cb], [-sb, 0, cb], [0, -sb, cb]]
    elif num_cmgs == 6:
        gimbal = [[0, 1, 0], [0, 0, 1], [0, 0, 1], [1, 0, 0], [1, 0, 0], [0, 1, 0]]
        rotor = [[0, 0, 1], [0, 1, 0], [1, 0, 0], [0, 0, 1], [0, 1, 0], [1, 0, 0]]
    else:
        raise ValueError(f"num_cmgs must be 4 or 6, got {num_cmgs}")
    as_columns = lambda rows: torch.tensor(rows, dtype=torch.float64).T  # noqa: E731
    return as_columns(gimbal), as_columns(rotor)


def cmg_jacobian(
    gimbal_angles: torch.Tensor, gimbal_axes: torch.Tensor, rotor_axes: torch.Tensor, h: float
) -> torch.Tensor:
    """``[*B, 3, N]``: column ``i`` is ``h * g_i x r_i(θ_i)``, the rate of change of CMG
    ``i``'s rotor momentum per unit gimbal rate (``r_i(θ)``: ``r_i`` turned by ``θ``
    about ``g_i``).

    Args:
        gimbal_angles: ``[*B, N]`` radians.
        gimbal_axes, rotor_axes: ``[3, N]`` unit columns (:func:`cmg_geometry`).
        h: the rotors' angular momentum.
    """
    cos = torch.cos(gimbal_angles).unsqueeze(-2)
    sin = torch.sin(gimbal_angles).unsqueeze(-2)
    g, r = gimbal_axes, rotor_axes
    # Rodrigues; g is orthogonal to r, so the (g . r) g term vanishes
    turned = cos * r + sin * torch.linalg.cross(g, r, dim=0)
    return h * torch.linalg.cross(g.expand_as(turned), turned, dim=-2)


def quat_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Hamilton product of ``[*B, 4]`` quaternions ``(w, x, y, z)`` (MuJoCo's order)."""
    aw, av = a[..., :1], a[..., 1:]
    bw, bv = b[..., :1], b[..., 1:]
    w = aw * bw - (av * bv).sum(-1, keepdim=True)
    v = aw * bv + bw * av + torch.linalg.cross(av, bv, dim=-1)
    return torch.cat([w, v], -1)


def quat_log(q: torch.Tensor) -> torch.Tensor:
    """``[*B, 4] -> [*B, 3]``: the rotation vector (angle in ``[0, π]`` times the unit
    axis) of a quaternion, taking the shorter of ``q`` and ``-q``."""
    q = q / q.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    q = torch.where(q[..., :1] < 0, -q, q)
    v = q[..., 1:]
    sin_half = v.norm(dim=-1, keepdim=True)
    angle = 2.0 * torch.atan2(sin_half, q[..., :1])
    return v * (angle / sin_half.clamp_min(1e-12))


def _conj(q: torch.Tensor) -> torch.Tensor:
    return torch.cat([q[..., :1], -q[..., 1:]], -1)


def _unit_or_identity(q: torch.Tensor) -> torch.Tensor:
    norm = q.norm(dim=-1, keepdim=True)
    identity = torch.zeros_like(q)
    identity[..., 0] = 1.0
    return torch.where(norm > 1e-12, q / norm.clamp_min(1e-12), identity)


def _fmt(values) -> str:
    return " ".join(f"{float(v):.6g}" for v in values)


def satellite_xml(num_cmgs: int, timestep: float = 0.005) -> str:
    """The MJCF model of :class:`SatelliteEnv`: a free-floating 1 m cube bus (100 kg) in
    zero gravity with one CMG on each face (a gimbal hinge about ``g_i`` carrying a 5 kg
    rotor disc spinning about ``r_i``), velocity servos on gimbals and rotors (gimbals
    first), and a camera. Joint order: the bus's free joint, then (gimbal, rotor) per CMG.
    """
    gimbal, rotor = cmg_geometry(num_cmgs)
    faces = [(0.75, 0, 0), (0, 0.75, 0), (-0.75, 0, 0), (0, -0.75, 0)]
    if num_cmgs == 6:
        faces = [
            (0.75, 0, 0),
            (-0.75, 0, 0),
            (0, 0.75, 0),
            (0, -0.75, 0),
            (0, 0, 0.75),
            (0, 0, -0.75),
        ]
    cmgs, servos, spins = [], [], []
    for i in range(num_cmgs):
        g, r = gimbal[:, i], rotor[:, i]
        cmgs.append(
            f"""
      <body name="gimbal{i}" pos="{_fmt(faces[i])}">
        <joint name="gimbal{i}" type="hinge" axis="{_fmt(g)}"/>
        <geom type="sphere" size="0.06" mass="1" rgba="0.6 0.6 0.6 1"/>
        <body name="rotor{i}">
          <joint name="rotor{i}" type="hinge" axis="{_fmt(r)}"/>
          <geom type="cylinder" size="0.15" fromto="{_fmt(-0.03 * r)} {_fmt(0.03 * r)}"
                mass="5" rgba="0.9 0.7 0.2 1"/>
        </body>
      </body>"""
        )
        servos.append(f'<velocity joint="gimbal{i}" kv="50" ctrlrange="-10 10"/>')
        spins.append(f'<velocity joint="rotor{i}" kv="20" ctrlrange="0 400"/>')
    return f"""<mujoco model="satellite_{num_cmgs}cmg">
  <option timestep="{timestep}" gravity="0 0 0" integrator="implicitfast"/>
  <visual><global offwidth="640" offheight="480"/></visual>
  <worldbody>
    <light name="sun" pos="0 0 6" dir="0 0 -1" directional="true"/>
    <camera name="side" pos="4 -4 3" xyaxes="0.707 0.707 0 -0.35 0.35 0.87"/>
    <body name="bus">
      <freejoint name="root"/>
      <geom type="box" size="0.5 0.5 0.5" mass="100" rgba="0.3 0.4 0.8 1"/>
      <geom type="box" size="1.2 0.02 0.35" pos="0 0 0" mass="0.001" rgba="0.1 0.1 0.3 1"
            contype="0" conaffinity="0"/>{"".join(cmgs)}
    </body>
  </worldbody>
  <actuator>
    {chr(10).join("    " + a for a in servos + spins).strip()}
  </actuator>
</mujoco>
"""


class SatelliteEnv(MujocoEnv):
    r"""Attitude control with 4 or 6 control moment gyros (TorchRL's ``SatelliteEnv``).

    A free-floating bus carries CMGs whose rotors spin at a constant speed; the action
    ``[num_envs, num_cmgs]`` in ``[-1, 1]`` commands the gimbal rates
    (``action_scale * action`` rad/s), and turning a spinning rotor's momentum turns the
    bus. Each episode draws a target attitude uniformly on SO(3) (or takes
    ``"target_quat"`` from the reset input; ``"init_bus_quat"`` there sets the starting
    attitude; as in TorchRL, a reset input that carries the previous ``"target_quat"``
    keeps it). The reward is

    ``-attitude_weight * |log(q^-1 q_target)| - singularity penalty
    - ctrl_cost_weight * |a|² - omega_weight * |ω|²``

    with the singularity penalty ``singularity_weight / max(m / h³, clamp)``
    (``"inverse"``) or ``singularity_weight * exp(-k m / h³)`` (``"exp"``), where
    ``m = sqrt(det(J Jᵀ) + 1e-8)`` is the manipulability of the CMG Jacobian ``J``
    (:func:`cmg_jacobian`) and ``h`` the rotor momentum. Episodes never terminate; they
    are truncated after ``max_episode_steps``.

    Observations: ``"bus_quat"`` (4), ``"quat_err"`` (3, the rotation vector to the
    target), ``"bus_omega"`` (3, body frame), ``"gimbal_angles"`` (``2 N``: sines then
    cosines), ``"gimbal_rates"`` (N), ``"manipulability"`` (1, ``m``) and
    ``"target_quat"`` (4). The model (:func:`satellite_xml`) is rl's own.

    Args:
        num_cmgs: ``4`` (pyramid) or ``6`` (one per face).
        attitude_weight, singularity_weight, ctrl_cost_weight, omega_weight: the reward
            weights (1, 0.5, 0.01, 0.1).
        singularity_clamp_min: lower clamp of ``m / h³`` in the inverse penalty.
        singularity_mode: ``"inverse"`` or ``"exp"``.
        singularity_exp_k: ``k`` of the ``"exp"`` penalty.
        action_scale: gimbal rate (rad/s) of a unit action. Defaults to 3.
        rotor_h: the ``h`` of the Jacobian; defaults to the rotor speed (100 rad/s for
            4 CMGs, 200 for 6), as TorchRL.
        **kwargs: :class:`MujocoEnv`'s arguments (``frame_skip`` defaults to 10,
            ``reset_noise_scale`` to 0.001).

    Raises:
        ValueError: ``num_cmgs`` not 4 or 6, an unknown ``singularity_mode``.

    Examples:
        >>> import torch
        >>> from rl.envs import SatelliteEnv
        >>> env = SatelliteEnv(num_cmgs=4, num_envs=2, seed=0)
        >>> td = env.rollout(3)
        >>> td["next", "quat_err"].shape, td["next", "gimbal_angles"].shape
        (torch.Size([2, 3, 3]), torch.Size([2, 3, 8]))
    """

    FRAME_SKIP = 10
    RESET_NOISE_SCALE = 0.001
    ROTOR_SPEED_4 = 100.0
    ROTOR_SPEED_6 = 200.0

    def __init__(
        self,
        *,
        num_cmgs: Literal[4, 6] = 4,
        attitude_weight: float = 1.0,
        singularity_weight: float = 0.5,
        singularity_clamp_min: float = 1e-6,
        singularity_mode: Literal["inverse", "exp"] = "inverse",
        singularity_exp_k: float = 5.0,
        ctrl_cost_weight: float = 0.01,
        omega_weight: float = 0.1,
        action_scale: float = 3.0,
        rotor_h: float | None = None,
        **kwargs,
    ) -> None:
        if num_cmgs not in (4, 6):
            raise ValueError(f"num_cmgs must be 4 or 6, got {num_cmgs}")
        if singularity_mode not in ("inverse", "exp"):
            raise ValueError(
                f"singularity_mode must be 'inverse' or 'exp', got {singularity_mode!r}"
            )
        self.__dict__["num_cmgs"] = num_cmgs
        self.__dict__["N_GIMBALS"] = num_cmgs
        self.__dict__["ROTOR_SPEED"] = self.ROTOR_SPEED_4 if num_cmgs == 4 else self.ROTOR_SPEED_6
        super().__init__(**kwargs)
        self.attitude_weight = float(attitude_weight)
        self.singularity_weight = float(singularity_weight)
        self.singularity_clamp_min = float(singularity_clamp_min)
        self.singularity_mode = singularity_mode
        self.singularity_exp_k = float(singularity_exp_k)
        self.ctrl_cost_weight = float(ctrl_cost_weight)
        self.omega_weight = float(omega_weight)
        self.action_scale = float(action_scale)
        self.rotor_h = float(self.ROTOR_SPEED if rotor_h is None else rotor_h)
        self._gimbal_axes, self._rotor_axes = cmg_geometry(num_cmgs)
        n = self.num_envs
        self._target_quat = torch.zeros(n, 4, dtype=torch.float64)
        self._target_quat[:, 0] = 1.0
        self._last_manip = self._manipulability(torch.from_numpy(self._sim.qpos()))

    # -- model and specs --------------------------------------------------------------

    def _load_xml(self, xml_path: str | Path | None, patch_xml: bool) -> str:
        if xml_path is not None:
            return super()._load_xml(xml_path, patch_xml)
        return satellite_xml(self.num_cmgs)

    @classmethod
    def _patch_xml(cls, xml: str) -> str:
        return xml  # in space: no floor

    def _make_obs_spec(self) -> Composite:
        n, g = self.num_envs, self.N_GIMBALS
        sizes = {
            "bus_quat": 4,
            "quat_err": 3,
            "bus_omega": 3,
            "gimbal_angles": 2 * g,
            "gimbal_rates": g,
            "manipulability": 1,
            "target_quat": 4,
        }
        specs = {
            key: Unbounded(shape=(n, size), dtype=self.dtype, device=self.device)
            for key, size in sizes.items()
        }
        return Composite(specs, shape=(n,), device=self.device)

    def _make_specs(self) -> None:
        super()._make_specs()
        n = self.num_envs
        self.action_spec = Bounded(
            -1.0, 1.0, shape=(n, self.N_GIMBALS), dtype=self.dtype, device=self.device
        )

    # -- state ------------------------------------------------------------------------

    def _gimbal_index(self, offset: int) -> list[int]:
        return [offset + 2 * i for i in range(self.N_GIMBALS)]

    def _manipulability(self, qpos: torch.Tensor) -> torch.Tensor:
        """``[N, 1]`` ``sqrt(det(J Jᵀ) + 1e-8)`` at the gimbal angles of ``qpos``."""
        jac = cmg_jacobian(
            qpos[:, self._gimbal_index(7)],
            self._gimbal_axes.cpu(),
            self._rotor_axes.cpu(),
            self.rotor_h,
        )
        det = torch.linalg.det(jac @ jac.transpose(-1, -2))
        return torch.sqrt(det.clamp_min(0.0) + 1e-8).unsqueeze(-1)

    def _sample_initial_state(self, n, tensordict=None):
        qpos, qvel = super()._sample_initial_state(n, tensordict)
        qvel[:, self._gimbal_index(7)] = self.ROTOR_SPEED  # rotor rates: 7, 9, ...
        if tensordict is not None and "init_bus_quat" in tensordict.keys():
            quat = torch.as_tensor(tensordict.get("init_bus_quat")).to("cpu", torch.float64)
            qpos[:, 3:7] = _unit_or_identity(quat.reshape(n, 4))
        return qpos, qvel

    def _on_reset(self, rows, tensordict) -> None:
        if tensordict is not None and "target_quat" in tensordict.keys():
            target = torch.as_tensor(tensordict.get("target_quat")).to("cpu", torch.float64)
            target = _unit_or_identity(target.reshape(self.num_envs, 4))
        else:
            # normalised Gaussian 4-vectors: uniform on SO(3)
            target = torch.randn(
                self.num_envs, 4, generator=self._generator, device=self._generator.device
            ).to("cpu", torch.float64)
            target = _unit_or_identity(target)
        # new tensors, not in-place writes: observations handed out may alias them
        reset = torch.zeros(self.num_envs, 1, dtype=torch.bool)
        reset[rows] = True
        self._target_quat = torch.where(reset, target, self._target_quat.cpu())
        manip = self._manipulability(torch.from_numpy(self._sim.qpos()))
        self._last_manip = torch.where(reset, manip, self._last_manip.cpu())

    def _prepare_ctrl(self, action: torch.Tensor) -> torch.Tensor:
        spin = torch.full_like(action, self.ROTOR_SPEED)
        return torch.cat([action * self.action_scale, spin], -1)

    # -- the task ---------------------------------------------------------------------

    def _attitude_error(self, qpos: torch.Tensor) -> torch.Tensor:
        """``[N, 3]`` rotation vector from the bus attitude to the target."""
        return quat_log(quat_mul(_conj(qpos[:, 3:7]), self._target_quat.cpu()))

    def _make_obs_dict(self, state: dict) -> dict:
        qpos, qvel = state["qpos"], state["qvel"]
        angles = qpos[:, self._gimbal_index(7)]
        return {
            "bus_quat": qpos[:, 3:7],
            "quat_err": self._attitude_error(qpos),
            "bus_omega": qvel[:, 3:6],
            "gimbal_angles": torch.cat([angles.sin(), angles.cos()], -1),
            "gimbal_rates": qvel[:, self._gimbal_index(6)],
            "manipulability": self._last_manip,
            "target_quat": self._target_quat,
        }

    def _compute_reward(self, state, action, next_state) -> torch.Tensor:
        qpos, qvel = next_state["qpos"], next_state["qvel"]
        manip = self._manipulability(qpos)
        self._last_manip = manip
        manip_norm = manip.squeeze(-1) / self.rotor_h**3
        if self.singularity_mode == "exp":
            penalty = self.singularity_weight * torch.exp(-self.singularity_exp_k * manip_norm)
        else:
            penalty = self.singularity_weight / manip_norm.clamp_min(self.singularity_clamp_min)
        attitude = self._attitude_error(qpos).norm(dim=-1)
        ctrl = action.to(torch.float64).square().sum(-1)
        omega = qvel[:, 3:6].square().sum(-1)
        return (
            -self.attitude_weight * attitude
            - penalty
            - self.ctrl_cost_weight * ctrl
            - self.omega_weight * omega
        )

    def _compute_done(self, state, next_state) -> torch.Tensor:
        return torch.zeros(self.num_envs, dtype=torch.bool)
