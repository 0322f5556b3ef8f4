"""The satellite preset of the macro actions: slew the bus to a target attitude with
control-moment gyroscopes (CMGs) (TorchRL's ``SatelliteMacroAction`` /
``SatelliteAttitudeTransform``).

The low-level action is one gimbal rate per CMG in ``[-1, 1]``. A target attitude
quaternion (``w, x, y, z``) becomes the gimbal rates of a PD attitude law,
``J⁺ (k_att log(q⁻¹ q*) - k_rate ω)``, ``J`` the CMG torque Jacobian at the observed
gimbal angles.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from rl.core import Categorical, Composite, Unbounded

from ._macro import MacroAction, MacroPrimitive, MacroPrimitiveTransform, TargetMacroAction

__all__ = ["SatelliteAttitudeTransform", "SatelliteMacroAction"]


def _unit_or_identity(q: torch.Tensor) -> torch.Tensor:
    norm = q.norm(dim=-1, keepdim=True)
    identity = torch.zeros_like(q)
    identity[..., 0] = 1.0
    return torch.where(norm > 1e-12, q / norm.clamp_min(1e-12), identity)


def _quat_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    w1, x1, y1, z1 = a.unbind(-1)
    w2, x2, y2, z2 = b.unbind(-1)
    return torch.stack(
        [
            w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
            w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
            w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        ],
        -1,
    )


def _quat_conj(q: torch.Tensor) -> torch.Tensor:
    return q * torch.tensor([1.0, -1.0, -1.0, -1.0], dtype=q.dtype, device=q.device)


def _quat_log(q: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """The rotation vector (axis times angle) of ``q``, on the short way round."""
    q = q / q.norm(dim=-1, keepdim=True).clamp_min(eps)
    q = q * torch.where(q[..., :1] < 0, -1.0, 1.0)
    v = q[..., 1:]
    v_norm = v.norm(dim=-1, keepdim=True).clamp_min(eps)
    return v / v_norm * 2.0 * torch.atan2(v_norm, q[..., :1].clamp(-1.0, 1.0))


def _geometry(num_cmgs: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Gimbal axes and reference rotor axes ``[3, n]`` of TorchRL's 4-CMG pyramid (skew
    54.7356 deg) or 6-CMG orthogonal cluster."""
    if num_cmgs == 4:
        cb, sb = math.cos(math.radians(54.7356)), math.sin(math.radians(54.7356))
        gimbal = torch.tensor([[0.0, -1.0, 0.0, 1.0], [1.0, 0.0, -1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
        rotor = torch.tensor([[sb, 0.0, -sb, 0.0], [0.0, sb, 0.0, -sb], [cb, cb, cb, cb]])
        return gimbal, rotor
    gimbal = torch.tensor(
        [
            [0.0, 0.0, 0.0, 1.0, 1.0, 0.0],
            [1.0, 0.0, 0.0, 0.0, 0.0, 1.0],
            [0.0, 1.0, 1.0, 0.0, 0.0, 0.0],
        ]
    )
    rotor = torch.tensor(
        [
            [0.0, 0.0, 1.0, 0.0, 0.0, 1.0],
            [0.0, 1.0, 0.0, 0.0, 1.0, 0.0],
            [1.0, 0.0, 0.0, 1.0, 0.0, 0.0],
        ]
    )
    return gimbal, rotor


def _cmg_jacobian(
    angles: torch.Tensor, gimbal: torch.Tensor, rotor: torch.Tensor, h: float
) -> torch.Tensor:
    """``[*B, 3, n]``: the torque direction ``h g × r(θ)`` of each CMG, ``r(θ)`` the rotor
    axis turned by ``θ`` about the gimbal axis (Rodrigues)."""
    cos, sin = torch.cos(angles).unsqueeze(-2), torch.sin(angles).unsqueeze(-2)
    rotated = (
        cos * rotor
        + sin * torch.linalg.cross(gimbal, rotor, dim=0)
        + (1.0 - cos) * (gimbal * rotor).sum(0) * gimbal
    )
    return h * torch.linalg.cross(gimbal.expand_as(rotated), rotated, dim=-2)


class SatelliteMacroAction(TargetMacroAction):
    """A slew to a target attitude quaternion.

    Examples:
        >>> SatelliteMacroAction.slew_attitude(torch.tensor([2.0, 0.0, 0.0, 0.0])).target
        tensor([[1., 0., 0., 0.]])
    """

    @classmethod
    def slew_attitude(
        cls, target_quat: torch.Tensor, *, steps: int = 36, settle_steps: int = 8
    ) -> SatelliteMacroAction:
        """Slew to ``target_quat`` ``[*B, 4]`` (normalized; a zero one is the identity).

        Raises:
            ValueError: a target without a trailing dim of 4.
        """
        if target_quat.ndim == 0 or target_quat.shape[-1] != 4:
            raise ValueError(
                f"target_quat must have a trailing dim of 4, got shape {tuple(target_quat.shape)}"
            )
        return cls.move(_unit_or_identity(target_quat), steps=steps, settle_steps=settle_steps)


class SatelliteAttitudeTransform(MacroPrimitiveTransform):
    """Turns a target attitude into gimbal-rate sequences for a CMG-actuated satellite.

    The macro action (a :class:`SatelliteMacroAction`, a TensorDict with ``target``,
    ``attitude`` or ``target_quat``, or a raw quaternion) becomes the gimbal rates
    ``clamp(-J⁺ (attitude_gain * log(q⁻¹ q*) - angular_rate_gain * ω) / action_scale, -1, 1)``
    from the env's ``bus_quat``, ``bus_omega`` and ``gimbal_angles`` (sines then cosines);
    the sequence ramps from zero to them. ``WAIT`` holds zero.

    Args:
        num_cmgs: 4 (pyramid) or 6 (orthogonal cluster).
        action_scale: the gimbal rate of a unit action (default: the parent env's
            ``action_scale``, else 3).
        attitude_gain: the proportional gain on the attitude error.
        angular_rate_gain: the derivative gain on the body rate.
        jacobian_rotor_h: the rotor momentum in the Jacobian.
        execute: return ``Compose(MultiAction(...), transform)`` (see the base class).
        multi_action_dim: the ``MultiAction`` ``dim``.
        stack_rewards: the ``MultiAction`` ``stack_rewards``.
        stack_observations: the ``MultiAction`` ``stack_observations``.
        action_key: the low-level action key.
        macro_steps: default interpolated steps.
        settle_steps: default held steps.

    Raises:
        ValueError: ``num_cmgs`` other than 4 or 6.
    """

    def __init__(
        self,
        *,
        num_cmgs: Literal[4, 6] = 4,
        action_scale: float | None = None,
        attitude_gain: float = 5.0,
        angular_rate_gain: float = 8.0,
        jacobian_rotor_h: float = 1.0,
        execute: bool = False,
        multi_action_dim: int = 1,
        stack_rewards: bool = True,
        stack_observations: bool = False,
        action_key: NestedKey = "action",
        macro_steps: int = 36,
        settle_steps: int = 8,
    ) -> None:
        if num_cmgs not in (4, 6):
            raise ValueError(f"num_cmgs must be 4 or 6, got {num_cmgs}")
        super().__init__(
            action_key=action_key,
            macro_steps=macro_steps,
            settle_steps=settle_steps,
            action_dim=num_cmgs,
        )
        self.num_cmgs = int(num_cmgs)
        self.action_scale = None if action_scale is None else float(action_scale)
        self.attitude_gain = float(attitude_gain)
        self.angular_rate_gain = float(angular_rate_gain)
        self.jacobian_rotor_h = float(jacobian_rotor_h)
        self.gimbal_axes, self.rotor_axes_ref = _geometry(self.num_cmgs)

    def current_action(self, tensordict, batch_shape, device, dtype, action_dim) -> torch.Tensor:
        return torch.zeros(*batch_shape, self.action_dim, dtype=dtype, device=device)

    def _resolve(self, tensordict: TensorDictBase, action: Any) -> tuple:
        quat, steps, settle, mode = self._target_quat(tensordict, action)
        target = self.attitude_action_target(tensordict, quat)
        start = torch.zeros_like(target)
        if mode is not None:
            mode = mode.to(target.device).reshape(*target.shape[:-1], 1)
            target = torch.where(mode == int(MacroPrimitive.WAIT), start, target)
        return start, target, steps, settle

    def _target_quat(self, tensordict, action) -> tuple:
        steps, settle, mode = self.macro_steps, self.settle_steps, None
        if action is None:
            raise RuntimeError(
                f"{type(self).__name__} found no attitude action under {self.action_key!r}"
            )
        if isinstance(action, torch.Tensor):
            quat = action
        elif isinstance(action, (TensorDictBase, MacroAction)):
            keys = action.keys(True, True)
            name = next((k for k in ("target", "attitude", "target_quat") if k in keys), None)
            if name is None:
                raise RuntimeError(
                    f"{type(self).__name__} expected a 'target' (or 'attitude') quaternion under "
                    f"{self.action_key!r}, got keys {tuple(keys)}"
                )
            quat = action.get(name)
            steps = self._field_int(action, "steps", steps)
            settle = self._field_int(action, "settle_steps", settle)
            mode = action.get("mode").to(torch.long) if "mode" in keys else None
        else:
            raise TypeError(
                f"{type(self).__name__} expected a SatelliteMacroAction, a TensorDict or an attitude "
                f"quaternion, got {type(action).__name__}"
            )
        expected = (*tensordict.batch_size, 4)
        if tuple(quat.shape) != expected:
            raise ValueError(
                f"{type(self).__name__} expected an attitude quaternion of shape {expected}, "
                f"got {tuple(quat.shape)}"
            )
        return quat, steps, settle, mode

    def attitude_action_target(
        self, tensordict: TensorDictBase, target_quat: torch.Tensor
    ) -> torch.Tensor:
        """The clamped gimbal-rate action ``[*B, num_cmgs]`` that steers toward ``target_quat``.

        Raises:
            RuntimeError: the satellite observations are missing.
        """
        required = ("bus_quat", "bus_omega", "gimbal_angles")
        missing = tuple(k for k in required if k not in tensordict.keys())
        if missing:
            raise RuntimeError(
                f"SatelliteAttitudeTransform needs the satellite observations {required}; missing {missing}"
            )
        q = _unit_or_identity(tensordict["bus_quat"])
        dtype, device = q.dtype, q.device
        target = _unit_or_identity(target_quat.to(dtype=dtype, device=device))
        error = _quat_log(_quat_mul(_quat_conj(q), target))
        omega = tensordict["bus_omega"].to(dtype=dtype, device=device)
        obs = tensordict["gimbal_angles"].to(dtype=dtype, device=device)
        n = self.num_cmgs
        angles = torch.atan2(obs[..., :n], obs[..., n:])
        jac = _cmg_jacobian(
            angles,
            self.gimbal_axes.to(dtype=dtype, device=device),
            self.rotor_axes_ref.to(dtype=dtype, device=device),
            self.jacobian_rotor_h,
        )
        accel = self.attitude_gain * error - self.angular_rate_gain * omega
        rate = -torch.linalg.pinv(jac).matmul(accel.unsqueeze(-1)).squeeze(-1)
        return (rate / self._scale()).clamp(-1.0, 1.0)

    def _scale(self) -> float:
        if self.action_scale is not None:
            return self.action_scale
        env = self._find_parent_env_with("action_scale")
        return 3.0 if env is None else float(env.action_scale)

    def transform_input_spec(self, input_spec):
        input_spec = input_spec.clone()
        bs, device = input_spec.shape, input_spec.device
        dtype = torch.get_default_dtype()
        for part, key in (
            ("full_observation_spec", "bus_quat"),
            ("full_state_spec", "target_quat"),
            ("full_action_spec", self.action_key),
        ):
            spec = input_spec.get(part, None)
            if isinstance(spec, Composite) and key in spec.keys(True, True):
                dtype = spec[key].dtype
                break
        full = Composite(shape=bs, device=device)
        full[self.action_key] = Composite(
            mode=Categorical(
                n=len(MacroPrimitive), shape=(*bs, 1), dtype=torch.long, device=device
            ),
            target=Unbounded(shape=(*bs, 4), dtype=dtype, device=device),
            shape=bs,
            device=device,
        )
        input_spec["full_action_spec"] = full
        return input_spec
