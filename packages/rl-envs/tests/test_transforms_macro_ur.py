"""URScriptPrimitiveTransform: UR-arm macro actions expanded into [*B, T, 7] sequences."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rl.core import Composite
from rl.envs.transforms import (
    CartesianSolver,
    Compose,
    MultiAction,
    RobotMacroAction,
    URScriptPrimitive,
    URScriptPrimitiveTransform,
)


def _td(action, qpos=None, gripper=None):
    return TensorDict(
        {
            "action": action,
            "robot_qpos": torch.zeros(1, 6) if qpos is None else qpos,
            "gripper_qpos": torch.zeros(1, 2) if gripper is None else gripper,
        },
        [1],
    )


def _ik(target_pose, start_action):
    out = start_action.clone()
    out[..., :3] = target_pose[..., :3]
    return out


def _ik_path(target_pose, start_action, *, orientation_mask=None, waypoints=None):
    if waypoints is None:
        return _ik(target_pose, start_action)
    out = start_action.unsqueeze(-2).expand(*start_action.shape[:-1], waypoints, 7).clone()
    out[..., :6] = torch.arange(1, waypoints + 1, dtype=out.dtype).unsqueeze(-1)
    return out


class TestURScriptPrimitiveTransform:
    def test_reach_joints_from_observed_state(self):
        t = URScriptPrimitiveTransform(macro_steps=4)
        qpos = torch.full((1, 6), 2.0)
        out = t.inv(
            _td(
                RobotMacroAction.reach_joints(joints=torch.ones(6), steps=4),
                qpos,
                torch.full((1, 2), 7.0),
            )
        )
        # joints from 2 to 1 in four steps; the gripper (keep) holds the observed 7
        torch.testing.assert_close(out["action"][0, :, 0], torch.tensor([1.75, 1.5, 1.25, 1.0]))
        assert (out["action"][0, :, -1] == 7.0).all()

    def test_gripper_primitives_keep_the_arm(self):
        t = URScriptPrimitiveTransform(macro_steps=2)
        qpos = torch.arange(6.0).view(1, 6)
        out = t.inv(_td(RobotMacroAction.close_gripper(steps=2), qpos))["action"]
        torch.testing.assert_close(out[0, :, :6], qpos.expand(2, 6))
        torch.testing.assert_close(out[0, :, -1], torch.tensor([127.5, 255.0]))
        out = t.inv(_td(RobotMacroAction.close_gripper(command=154.0, steps=2), qpos))["action"]
        assert out[0, -1, -1] == 154.0
        out = t.inv(_td(RobotMacroAction.open_gripper(steps=2), gripper=torch.full((1, 2), 100.0)))[
            "action"
        ]
        torch.testing.assert_close(out[0, :, -1], torch.tensor([50.0, 0.0]))

    def test_reach_pose_solver_and_held_gripper_command(self):
        t = URScriptPrimitiveTransform(macro_steps=1, cartesian_solver=_ik)
        a = RobotMacroAction.reach_pose(
            position=torch.tensor([1.0, 2.0, 3.0]), gripper="closed", steps=3, settle_steps=2
        )
        out = t.inv(_td(a))["action"]
        assert out.shape == (1, 5, 7)
        torch.testing.assert_close(out[0, 2, :3], torch.tensor([1.0, 2.0, 3.0]))
        # a motion with a gripper command holds it from the first step
        assert (out[0, :, -1] == 255.0).all()

    def test_cartesian_path_follows_waypoints(self):
        t = URScriptPrimitiveTransform(cartesian_solver=_ik_path)
        a = RobotMacroAction.reach_pose(
            position=torch.ones(3), path="cartesian", steps=3, settle_steps=2
        )
        out = t.inv(_td(a))["action"]
        torch.testing.assert_close(out[0, :, 0], torch.tensor([1.0, 2.0, 3.0, 3.0, 3.0]))

    def test_reset_goes_home(self):
        class Parent:
            robot_home_qpos = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)

        class WithHome(URScriptPrimitiveTransform):
            @property
            def parent(self):
                return Parent()

        out = WithHome(macro_steps=2).inv(_td(RobotMacroAction.RESET))["action"]
        torch.testing.assert_close(out[0, -1], torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.0]))
        with pytest.raises(RuntimeError, match="needs the parent env's robot_home_qpos"):
            URScriptPrimitiveTransform(macro_steps=2).inv(_td(RobotMacroAction.RESET))

    def test_solver_contract_errors(self):
        assert isinstance(_ik, CartesianSolver) and isinstance(_ik_path, CartesianSolver)
        masked = RobotMacroAction.reach_pose(
            position=torch.ones(3), orientation_mask=(1.0, 1.0, 0.0), steps=2
        )
        with pytest.raises(TypeError, match="orientation_mask=.*needs a Cartesian solver"):
            URScriptPrimitiveTransform(macro_steps=2).inv(_td(masked))
        with pytest.raises(
            TypeError, match=r"does not take the keyword argument\(s\) \['waypoints'\]"
        ):
            URScriptPrimitiveTransform(cartesian_solver=_ik).inv(
                _td(RobotMacroAction.reach_pose(position=torch.ones(3), path="cartesian", steps=2))
            )
        with pytest.raises(ValueError, match="path must be 'joint' or 'cartesian', got 'linear'"):
            RobotMacroAction.reach_pose(position=torch.zeros(3), path="linear")
        with pytest.raises(ValueError, match="gripper must be one of"):
            RobotMacroAction.reach_joints(joints=torch.zeros(6), gripper="half")

    def test_misc(self):
        assert (
            int(URScriptPrimitive.MOVEL) == 2
            and str(URScriptPrimitive.OPEN_GRIPPER) == "open_gripper"
        )
        composed = URScriptPrimitiveTransform(execute=True)
        assert isinstance(composed, Compose) and isinstance(composed[0], MultiAction)
        action = URScriptPrimitiveTransform().low_level_action(torch.ones(2, 6), gripper=0.5)
        torch.testing.assert_close(
            action, torch.cat([torch.ones(2, 6), torch.full((2, 1), 0.5)], -1)
        )
        spec = URScriptPrimitiveTransform().transform_input_spec(Composite(shape=(2,)))[
            "full_action_spec"
        ]
        assert spec["action", "joints"].shape == (2, 6) and spec["action", "mode"].n == 6
