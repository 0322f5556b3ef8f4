"""The UR-arm preset of the macro actions: URScript-style primitives for a 6-joint arm
and a gripper (TorchRL's ``RobotMacroAction`` / ``URScriptPrimitiveTransform``).

The low-level action is ``[*B, 7]``: six joint targets, then the gripper control. A
:class:`RobotMacroAction` asks for a joint target (``MOVEJ``), a Cartesian pose
(``MOVEL``, solved into joints by a :class:`CartesianSolver`), a gripper motion, a wait or
a return home; the transform starts the motion from the observed joints
(``robot_qpos``) and gripper (``gripper_qpos``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from enum import IntEnum
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from rl.core import Categorical, Composite, Unbounded

from ._macro import (
    MacroAction,
    MacroPrimitive,
    MacroPrimitiveTransform,
    _durations,
    interpolate_sequence,
)

__all__ = [
    "CartesianSolver",
    "RobotMacroAction",
    "RobotMacroActionMode",
    "URScriptPrimitive",
    "URScriptPrimitiveTransform",
]

GripperCommand = Literal["keep", "open", "closed"]


@runtime_checkable
class CartesianSolver(Protocol):
    """Solves a Cartesian pose into a low-level (joint) action.

    ``solver(target_pose, start_action)`` maps the pose ``[*B, 7]`` (position, then a
    ``w, x, y, z`` quaternion) to an action ``[*B, A]``; with ``waypoints=n`` it returns
    the ``[*B, n, A]`` actions of a straight Cartesian path; ``orientation_mask`` ``[*B, 3]``
    weighs the rotation axes (0 frees one).
    """

    def __call__(
        self,
        target_pose: torch.Tensor,
        start_action: torch.Tensor,
        *,
        orientation_mask: torch.Tensor | None = None,
        waypoints: int | None = None,
    ) -> torch.Tensor: ...


class URScriptPrimitive(IntEnum):
    """The UR primitives; ``WAIT`` and ``MOVEJ`` share the generic ids."""

    WAIT = int(MacroPrimitive.WAIT)
    MOVEJ = int(MacroPrimitive.MOVE)
    MOVEL = 2
    OPEN_GRIPPER = 3
    CLOSE_GRIPPER = 4

    def __str__(self) -> str:
        return self.name.lower()


class RobotMacroActionMode(IntEnum):
    """The ``mode`` ids of a :class:`RobotMacroAction` (``RESET``: back to the env's home)."""

    WAIT = int(URScriptPrimitive.WAIT)
    REACH_JOINTS = int(URScriptPrimitive.MOVEJ)
    REACH_POSE = int(URScriptPrimitive.MOVEL)
    OPEN_GRIPPER = int(URScriptPrimitive.OPEN_GRIPPER)
    CLOSE_GRIPPER = int(URScriptPrimitive.CLOSE_GRIPPER)
    RESET = len(URScriptPrimitive)


class _Reset:
    """``RobotMacroAction.RESET``: a marker resolved against the parent env's home joints."""

    def __repr__(self) -> str:
        return "RobotMacroAction.RESET"


_GRIPPER_CODES = {"keep": -1, "open": 0, "closed": 1}
_SOLVER_FEATURES = {
    "orientation_mask": "RobotMacroAction.reach_pose(orientation_mask=...)",
    "waypoints": "RobotMacroAction.reach_pose(path='cartesian')",
}


def _batched(value: torch.Tensor, size: int, name: str) -> torch.Tensor:
    if value.shape[-1] != size:
        raise ValueError(
            f"{name} must have a trailing dim of {size}, got shape {tuple(value.shape)}"
        )
    return value.unsqueeze(0) if value.ndim == 1 else value


def _command(value, batch_size: torch.Size, dtype, device) -> torch.Tensor:
    """The gripper command ``[*B, 1]``; NaN when none is given (the mode decides)."""
    if value is None:
        return torch.full((*batch_size, 1), float("nan"), dtype=dtype, device=device)
    value = torch.as_tensor(value, dtype=dtype, device=device)
    if value.ndim == 0:
        return value.expand(*batch_size, 1).clone()
    return value.reshape(*batch_size, 1)


class RobotMacroAction(MacroAction):
    """A UR-arm macro action: a mode, a pose and/or joint target, a gripper command.

    Build it with the class methods (:meth:`reach_pose`, :meth:`reach_joints`,
    :meth:`home`, :meth:`open_gripper`, :meth:`close_gripper`, :meth:`wait`,
    :meth:`reset`), or put :attr:`RESET` under the action key to go to the env's
    ``robot_home_qpos``. ``gripper`` is ``-1`` (keep), ``0`` (open) or ``1`` (closed);
    a finite ``gripper_command`` overrides the open / close control value.

    Examples:
        >>> a = RobotMacroAction.reach_joints(joints=torch.ones(6), steps=4)
        >>> a.joints.shape, int(a.mode[0, 0])
        (torch.Size([1, 6]), 1)
    """

    position: torch.Tensor
    quaternion: torch.Tensor
    joints: torch.Tensor
    gripper: torch.Tensor
    gripper_command: torch.Tensor
    orientation_mask: torch.Tensor | None = None
    path: torch.Tensor | None = None

    GRIPPER_KEEP: ClassVar[int] = -1
    GRIPPER_OPEN: ClassVar[int] = 0
    GRIPPER_CLOSED: ClassVar[int] = 1
    PATH_JOINT: ClassVar[int] = 0
    PATH_CARTESIAN: ClassVar[int] = 1
    RESET: ClassVar[_Reset]

    @classmethod
    def reach_pose(
        cls,
        *,
        position: torch.Tensor,
        quaternion: torch.Tensor | None = None,
        orientation_mask: torch.Tensor | tuple[float, float, float] | None = None,
        path: Literal["joint", "cartesian"] = "joint",
        gripper: GripperCommand = "keep",
        gripper_command: float | torch.Tensor | None = None,
        steps: int = 16,
        settle_steps: int = 0,
    ) -> RobotMacroAction:
        """Move the tool to ``position`` ``[*B, 3]`` (and ``quaternion``): in joint space
        between the endpoints (``path="joint"``) or along a straight Cartesian line.

        Raises:
            ValueError: a ``path`` other than ``"joint"`` / ``"cartesian"``.
        """
        if path not in ("joint", "cartesian"):
            raise ValueError(f"path must be 'joint' or 'cartesian', got {path!r}")
        position = _batched(position, 3, "position")
        if quaternion is None:  # zeros: the solver's own orientation (TorchRL)
            quaternion = torch.zeros(
                *position.shape[:-1], 4, dtype=position.dtype, device=position.device
            )
        if orientation_mask is not None:
            orientation_mask = _batched(
                torch.as_tensor(orientation_mask, dtype=position.dtype, device=position.device),
                3,
                "orientation_mask",
            )
        return cls._make(
            RobotMacroActionMode.REACH_POSE,
            position=position,
            quaternion=quaternion,
            orientation_mask=orientation_mask,
            path=cls.PATH_CARTESIAN if path == "cartesian" else cls.PATH_JOINT,
            gripper=gripper,
            gripper_command=gripper_command,
            steps=steps,
            settle_steps=settle_steps,
        )

    @classmethod
    def reach_joints(
        cls,
        *,
        joints: torch.Tensor,
        gripper: GripperCommand = "keep",
        gripper_command: float | torch.Tensor | None = None,
        steps: int = 16,
        settle_steps: int = 0,
    ) -> RobotMacroAction:
        """Move to the joint target ``joints`` ``[*B, 6]``."""
        return cls._make(
            RobotMacroActionMode.REACH_JOINTS,
            joints=_batched(joints, 6, "joints"),
            gripper=gripper,
            gripper_command=gripper_command,
            steps=steps,
            settle_steps=settle_steps,
        )

    @classmethod
    def home(
        cls,
        *,
        joints: torch.Tensor,
        gripper: GripperCommand = "open",
        gripper_command: float | torch.Tensor | None = None,
        steps: int = 16,
        settle_steps: int = 0,
    ) -> RobotMacroAction:
        """Move to the home joints ``joints``, opening the gripper by default."""
        return cls.reach_joints(
            joints=joints,
            gripper=gripper,
            gripper_command=gripper_command,
            steps=steps,
            settle_steps=settle_steps,
        )

    @classmethod
    def reset(cls, *, gripper: GripperCommand = "open", **kwargs) -> RobotMacroAction:
        """Return to the env's ``robot_home_qpos`` (``batch_size``, ``dtype``, ``device``,
        ``steps``, ``settle_steps``, ``gripper_command`` as for :meth:`wait`)."""
        return cls._without_target(RobotMacroActionMode.RESET, gripper=gripper, **kwargs)

    @classmethod
    def open_gripper(cls, **kwargs) -> RobotMacroAction:
        """Open the gripper, the arm holding still."""
        return cls._without_target(RobotMacroActionMode.OPEN_GRIPPER, gripper="open", **kwargs)

    @classmethod
    def close_gripper(
        cls, *, command: float | torch.Tensor | None = None, **kwargs
    ) -> RobotMacroAction:
        """Close the gripper (to ``command`` when given), the arm holding still."""
        return cls._without_target(
            RobotMacroActionMode.CLOSE_GRIPPER, gripper="closed", gripper_command=command, **kwargs
        )

    @classmethod
    def wait(
        cls, *, gripper: GripperCommand = "keep", steps: int = 1, **kwargs
    ) -> RobotMacroAction:
        """Hold the arm (and the gripper unless told) for ``steps`` steps."""
        return cls._without_target(
            RobotMacroActionMode.WAIT, gripper=gripper, steps=steps, **kwargs
        )

    @classmethod
    def _without_target(
        cls,
        mode: RobotMacroActionMode,
        *,
        gripper: GripperCommand,
        gripper_command: float | torch.Tensor | None = None,
        steps: int = 16,
        settle_steps: int = 0,
        batch_size: torch.Size | tuple[int, ...] | None = None,
        dtype: torch.dtype | None = None,
        device: torch.device | None = None,
    ) -> RobotMacroAction:
        batch_size = torch.Size([1] if batch_size is None else batch_size)
        position = torch.zeros(
            *batch_size, 3, dtype=dtype or torch.get_default_dtype(), device=device
        )
        return cls._make(
            mode,
            position=position,
            gripper=gripper,
            gripper_command=gripper_command,
            steps=steps,
            settle_steps=settle_steps,
        )

    @classmethod
    def _make(
        cls,
        mode: RobotMacroActionMode,
        *,
        position: torch.Tensor | None = None,
        quaternion: torch.Tensor | None = None,
        joints: torch.Tensor | None = None,
        orientation_mask: torch.Tensor | None = None,
        path: int = 0,
        gripper: GripperCommand = "keep",
        gripper_command: float | torch.Tensor | None = None,
        steps: int = 16,
        settle_steps: int = 0,
    ) -> RobotMacroAction:
        if gripper not in _GRIPPER_CODES:
            raise ValueError(f"gripper must be one of 'keep', 'open' or 'closed', got {gripper!r}")
        ref = position if position is not None else joints
        batch_size, dtype, device = ref.shape[:-1], ref.dtype, ref.device
        if position is None:
            position = torch.zeros(*batch_size, 3, dtype=dtype, device=device)
        if quaternion is None:  # identity
            quaternion = torch.zeros(*batch_size, 4, dtype=dtype, device=device)
            quaternion[..., 0] = 1.0
        quaternion = _batched(quaternion, 4, "quaternion").to(dtype=dtype, device=device)
        if joints is None:
            joints = torch.zeros(*batch_size, 6, dtype=dtype, device=device)
        if orientation_mask is None:  # NaN: no mask
            orientation_mask = torch.full(
                (*batch_size, 3), float("nan"), dtype=dtype, device=device
            )
        return cls(
            position=position,
            quaternion=quaternion,
            joints=joints,
            orientation_mask=orientation_mask.to(dtype=dtype, device=device).expand(*batch_size, 3),
            path=torch.full((*batch_size, 1), int(path), dtype=torch.long, device=device),
            gripper=torch.full(
                (*batch_size, 1), _GRIPPER_CODES[gripper], dtype=torch.long, device=device
            ),
            gripper_command=_command(gripper_command, batch_size, dtype, device),
            batch_size=batch_size,
            **_durations(mode, steps, settle_steps, batch_size, device),
        )


RobotMacroAction.RESET = _Reset()


def _missing_solver_kwargs(solver: Callable, kwargs: dict) -> set[str]:
    """The keyword arguments of ``kwargs`` that ``solver``'s signature cannot take."""
    try:
        params = inspect.signature(solver).parameters.values()
    except (TypeError, ValueError):
        return set()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return set()
    named = {
        p.name
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    return set(kwargs) - named


class URScriptPrimitiveTransform(MacroPrimitiveTransform):
    """Expands :class:`RobotMacroAction` s into ``[*B, T, 7]`` UR-arm action sequences.

    The motion starts from the observed joints (``robot_qpos_key``) and gripper
    (``gripper_qpos_key``, its first entry). ``MOVEJ`` goes to the joint target,
    ``MOVEL`` to the joints the ``cartesian_solver`` (or the parent env's
    ``_cartesian_pose_to_joint_target``) gives for the pose, following the solver's
    waypoints for a Cartesian path; the gripper primitives keep the arm still. The
    gripper column moves to ``open_gripper_ctrl`` / ``close_gripper_ctrl`` (or the
    action's ``gripper_command``), and a move with a gripper command holds it throughout.

    Args:
        execute: return ``Compose(MultiAction(...), transform)`` (see the base class).
        multi_action_dim: the ``MultiAction`` ``dim``.
        stack_rewards: the ``MultiAction`` ``stack_rewards``.
        stack_observations: the ``MultiAction`` ``stack_observations``.
        action_key: the low-level action key.
        robot_qpos_key: the observed joint positions.
        gripper_qpos_key: the observed gripper joints.
        macro_steps: default interpolated steps.
        settle_steps: default held steps.
        action_dim: the low-level action size (joints + 1 gripper), 7.
        cartesian_solver: a :class:`CartesianSolver`.
        open_gripper_ctrl: the gripper control of an open gripper.
        close_gripper_ctrl: the gripper control of a closed gripper.

    Examples:
        >>> from tensordict import TensorDict
        >>> t = URScriptPrimitiveTransform(macro_steps=2)
        >>> td = TensorDict({"action": RobotMacroAction.close_gripper(steps=2), "robot_qpos": torch.ones(1, 6)}, [1])
        >>> t.inv(td)["action"][0, -1]
        tensor([  1.,   1.,   1.,   1.,   1.,   1., 255.])
    """

    primitive_enum = URScriptPrimitive
    WAIT = URScriptPrimitive.WAIT
    MOVEJ = URScriptPrimitive.MOVEJ
    MOVEL = URScriptPrimitive.MOVEL
    OPEN_GRIPPER = URScriptPrimitive.OPEN_GRIPPER
    CLOSE_GRIPPER = URScriptPrimitive.CLOSE_GRIPPER

    def __init__(
        self,
        *,
        execute: bool = False,
        multi_action_dim: int = 1,
        stack_rewards: bool = True,
        stack_observations: bool = False,
        action_key: NestedKey = "action",
        robot_qpos_key: NestedKey = "robot_qpos",
        gripper_qpos_key: NestedKey = "gripper_qpos",
        macro_steps: int = 16,
        settle_steps: int = 0,
        action_dim: int = 7,
        cartesian_solver: CartesianSolver | Callable | None = None,
        open_gripper_ctrl: float = 0.0,
        close_gripper_ctrl: float = 255.0,
    ) -> None:
        super().__init__(
            action_key=action_key,
            macro_steps=macro_steps,
            settle_steps=settle_steps,
            action_dim=action_dim,
        )
        self.robot_qpos_key = robot_qpos_key
        self.gripper_qpos_key = gripper_qpos_key
        self.cartesian_solver = cartesian_solver
        self.open_gripper_ctrl = float(open_gripper_ctrl)
        self.close_gripper_ctrl = float(close_gripper_ctrl)

    @property
    def _joint_dim(self) -> int:
        return self.action_dim - 1

    def low_level_action(
        self, robot_qpos: torch.Tensor, gripper: float | torch.Tensor | None = None
    ) -> torch.Tensor:
        """The ``[*B, action_dim]`` action holding ``robot_qpos`` with the gripper control
        ``gripper`` (open by default)."""
        action = torch.zeros(
            *robot_qpos.shape[:-1],
            self.action_dim,
            dtype=robot_qpos.dtype,
            device=robot_qpos.device,
        )
        n = min(robot_qpos.shape[-1], self._joint_dim)
        action[..., :n] = robot_qpos[..., :n]
        if gripper is None:
            gripper = self.open_gripper_ctrl
        gripper = torch.as_tensor(gripper, dtype=robot_qpos.dtype, device=robot_qpos.device)
        action[..., -1:] = (
            gripper.reshape(-1)[0]
            if gripper.numel() == 1
            else gripper.reshape(*robot_qpos.shape[:-1], 1)
        )
        return action

    def current_action(self, tensordict, batch_shape, device, dtype, action_dim) -> torch.Tensor:
        start = torch.zeros(*batch_shape, self.action_dim, dtype=dtype, device=device)
        qpos = tensordict.get(self.robot_qpos_key, None)
        if qpos is not None:
            n = min(qpos.shape[-1], self._joint_dim)
            start[..., :n] = qpos[..., :n].to(dtype=dtype, device=device)
        gripper = tensordict.get(self.gripper_qpos_key, None)
        if gripper is not None:
            start[..., -1] = gripper[..., 0].to(dtype=dtype, device=device)
        return start

    def _dtype(self, tensordict: TensorDictBase) -> torch.dtype:
        for key in (self.robot_qpos_key, self.gripper_qpos_key):
            value = tensordict.get(key, None)
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                return value.dtype
        return torch.get_default_dtype()

    @staticmethod
    def _unwrap(action: Any) -> Any:
        data = getattr(action, "data", None)  # RESET stored in a TensorDict (non-tensor)
        return data if isinstance(data, _Reset) else action

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = self._unwrap(tensordict.get(self.action_key, None))
        start, target, steps, settle = self._resolve(tensordict, action)
        sequence = interpolate_sequence(start, target, steps, settle)
        if isinstance(action, (TensorDictBase, MacroAction)):
            sequence = self._cartesian_path(tensordict, action, start, sequence, steps)
        return tensordict.set(self.action_key, sequence)

    def _pose_fields(
        self, action, batch, dtype, device
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        identity = torch.zeros(*batch, 4, dtype=dtype, device=device)
        identity[..., 0] = 1.0
        pose = torch.cat(
            [
                self._get(action, "position", batch, dtype, device, 3),
                self._get(action, "quaternion", batch, dtype, device, 4, identity),
            ],
            -1,
        )
        mask = action.get("orientation_mask", None) if "orientation_mask" in action.keys() else None
        if mask is not None:
            mask = mask.to(dtype=dtype, device=device).reshape(*batch, 3)
            mask = mask if torch.isfinite(mask).any() else None
        return pose, mask

    @staticmethod
    def _get(action, key, batch, dtype, device, size, default=None) -> torch.Tensor:
        if key not in action.keys():
            return (
                default
                if default is not None
                else torch.zeros(*batch, size, dtype=dtype, device=device)
            )
        return action.get(key).to(dtype=dtype, device=device).reshape(*batch, size)

    def _resolve(self, tensordict: TensorDictBase, action: Any) -> tuple:
        action = self._unwrap(action)
        if action is None:
            return super()._resolve(tensordict, action)  # the base class's error
        batch = tensordict.batch_size
        dtype = self._dtype(tensordict)
        device = getattr(action, "device", None) or tensordict.device or torch.device("cpu")
        start = self.current_action(tensordict, batch, device, dtype, self.action_dim)
        if isinstance(action, _Reset):
            action = RobotMacroAction.reset(
                batch_size=batch,
                dtype=dtype,
                device=device,
                steps=self.macro_steps,
                settle_steps=self.settle_steps,
            )
        if isinstance(action, torch.Tensor):
            target = action.to(dtype=dtype, device=device).reshape(*batch, self.action_dim)
            return start, target, self.macro_steps, self.settle_steps
        if not isinstance(action, (TensorDictBase, MacroAction)):
            raise TypeError(
                f"{type(self).__name__} expected a RobotMacroAction, a TensorDict or a low-level "
                f"action tensor, got {type(action).__name__}"
            )
        if "mode" not in action.keys():
            raise RuntimeError(
                f"{type(self).__name__} expected a RobotMacroAction with a 'mode' under "
                f"{self.action_key!r}, got keys {tuple(action.keys(True, True))}"
            )
        P = self.primitive_enum
        mode = action.get("mode").to(torch.long).reshape(*batch, 1)
        steps = self._field_int(action, "steps", self.macro_steps)
        settle = self._field_int(action, "settle_steps", self.settle_steps)
        is_reset = mode == int(RobotMacroActionMode.RESET)
        mode = torch.where(is_reset, torch.full_like(mode, int(P.MOVEJ)), mode)
        nj = self._joint_dim
        joints = self._get(action, "joints", batch, dtype, device, nj, start[..., :nj])
        if is_reset.any():
            joints = torch.where(is_reset, self._home_qpos(batch, dtype, device), joints)
        pose, mask = self._pose_fields(action, batch, dtype, device)
        target = torch.where(mode == int(P.MOVEJ), self.low_level_action(joints), start)
        target = torch.where(
            mode == int(P.MOVEL), self._solve(pose, start, orientation_mask=mask), target
        )
        gripper = self._gripper(action, start, batch, dtype, device)
        if gripper is None:
            opened, closed = start.clone(), start.clone()
            opened[..., -1], closed[..., -1] = self.open_gripper_ctrl, self.close_gripper_ctrl
            target = torch.where(mode == int(P.OPEN_GRIPPER), opened, target)
            target = torch.where(mode == int(P.CLOSE_GRIPPER), closed, target)
            return start, target, steps, settle
        with_gripper = _with_gripper(target, gripper)
        held = _with_gripper(start, gripper)
        moves_gripper = (mode == int(P.OPEN_GRIPPER)) | (mode == int(P.CLOSE_GRIPPER))
        target = torch.where(moves_gripper, held, with_gripper)
        # a motion (or a wait) with a gripper command holds it from the first step
        start = torch.where(moves_gripper, start, held)
        return start, target, steps, settle

    def _gripper(self, action, start, batch, dtype, device) -> torch.Tensor | None:
        """The gripper control the action asks for ``[*B, 1]`` (``None``: no gripper field)."""
        if "gripper" not in action.keys():
            return None
        code = action.get("gripper").to(device=device, dtype=torch.long).reshape(*batch, 1)
        opened = torch.full((*batch, 1), self.open_gripper_ctrl, dtype=dtype, device=device)
        closed = torch.full((*batch, 1), self.close_gripper_ctrl, dtype=dtype, device=device)
        value = torch.where(
            code == RobotMacroAction.GRIPPER_OPEN,
            opened,
            torch.where(code == RobotMacroAction.GRIPPER_CLOSED, closed, start[..., -1:]),
        )
        if "gripper_command" not in action.keys():
            return value
        command = action.get("gripper_command").to(dtype=dtype, device=device).reshape(*batch, 1)
        return torch.where(torch.isfinite(command), command, value)

    def _cartesian_path(self, tensordict, action, start, sequence, steps) -> torch.Tensor:
        """Replaces the arm columns of a Cartesian ``MOVEL`` by the solver's waypoints."""
        if "path" not in action.keys() or "mode" not in action.keys():
            return sequence
        batch = tensordict.batch_size
        mode = action.get("mode").to(torch.long).reshape(*batch, 1)
        path = action.get("path").to(torch.long).reshape(*batch, 1)
        cartesian = (mode == int(self.primitive_enum.MOVEL)) & (
            path == RobotMacroAction.PATH_CARTESIAN
        )
        if not cartesian.any():
            return sequence
        pose, mask = self._pose_fields(action, batch, start.dtype, start.device)
        waypoints = self._solve(pose, start, orientation_mask=mask, waypoints=steps)
        nj, select = self._joint_dim, cartesian.unsqueeze(-2)
        out = sequence.clone()
        out[..., :steps, :nj] = torch.where(select, waypoints[..., :nj], out[..., :steps, :nj])
        if out.shape[-2] > steps:  # the settle steps hold the last waypoint
            out[..., steps:, :nj] = torch.where(
                select, waypoints[..., -1:, :nj], out[..., steps:, :nj]
            )
        return out

    def _solve(self, pose, start, *, orientation_mask=None, waypoints=None) -> torch.Tensor:
        kwargs = {}
        if orientation_mask is not None:
            kwargs["orientation_mask"] = orientation_mask
        if waypoints is not None:
            kwargs["waypoints"] = waypoints
        solver = self.cartesian_solver
        if solver is None:
            env = self._find_parent_env_with("_cartesian_pose_to_joint_target")
            solver = None if env is None else env._cartesian_pose_to_joint_target
        if solver is None:
            if kwargs:
                needs = " and ".join(_SOLVER_FEATURES[k] for k in sorted(kwargs))
                raise TypeError(
                    f"{needs} needs a Cartesian solver (rl.envs.CartesianSolver), and none is "
                    "configured: pass cartesian_solver=..."
                )
            return start
        missing = _missing_solver_kwargs(solver, kwargs)
        if missing:
            needs = " and ".join(_SOLVER_FEATURES[k] for k in sorted(missing))
            raise TypeError(
                f"the Cartesian solver does not take the keyword argument(s) {sorted(missing)} "
                f"that {needs} needs; give it rl.envs.CartesianSolver's signature"
            )
        return solver(pose, start, **kwargs)

    def _home_qpos(self, batch, dtype, device) -> torch.Tensor:
        env = self._find_parent_env_with("robot_home_qpos")
        home = None if env is None else env.robot_home_qpos
        home = home() if callable(home) else home
        if home is None:
            raise RuntimeError(
                "RobotMacroAction.RESET needs the parent env's robot_home_qpos; use "
                "RobotMacroAction.home(joints=...) when the env defines none"
            )
        home = torch.as_tensor(home, dtype=dtype, device=device)
        if home.shape[-1:] != (self._joint_dim,):
            raise RuntimeError(
                f"robot_home_qpos must have a trailing dim of {self._joint_dim}, got shape {tuple(home.shape)}"
            )
        return (
            home.expand(*batch, self._joint_dim).clone()
            if home.ndim == 1
            else home.reshape(*batch, self._joint_dim)
        )

    def transform_input_spec(self, input_spec):
        input_spec = input_spec.clone()
        bs, device = input_spec.shape, input_spec.device
        actions = input_spec.get("full_action_spec", None)
        dtype = torch.get_default_dtype()
        if isinstance(actions, Composite) and self.action_key in actions.keys(True, True):
            dtype = actions[self.action_key].dtype
        full = Composite(shape=bs, device=device)
        full[self.action_key] = Composite(
            mode=Categorical(
                n=len(RobotMacroActionMode), shape=(*bs, 1), dtype=torch.long, device=device
            ),
            position=Unbounded(shape=(*bs, 3), dtype=dtype, device=device),
            quaternion=Unbounded(shape=(*bs, 4), dtype=dtype, device=device),
            joints=Unbounded(shape=(*bs, self._joint_dim), dtype=dtype, device=device),
            gripper=Categorical(n=3, shape=(*bs, 1), dtype=torch.long, device=device),
            shape=bs,
            device=device,
        )
        input_spec["full_action_spec"] = full
        return input_spec


def _with_gripper(action: torch.Tensor, gripper: torch.Tensor) -> torch.Tensor:
    out = action.clone()
    out[..., -1:] = gripper
    return out
