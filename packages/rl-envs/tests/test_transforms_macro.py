"""MacroPrimitiveTransform: a macro action expanded into a linear low-level sequence."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rl.core import Categorical, Composite
from rl.envs import PendulumEnv, TransformedEnv
from rl.envs.transforms import (
    Compose,
    HumanoidMacroAction,
    MacroPrimitive,
    MacroPrimitiveTransform,
    MultiAction,
    TargetMacroAction,
)


def _plain_loop(start, target, steps, settle):
    rows = [start + (i / steps) * (target - start) for i in range(1, steps + 1)]
    return torch.stack(rows + [target] * settle, -2)


class TestMacroPrimitiveTransform:
    @pytest.mark.parametrize(("steps", "settle"), [(4, 0), (3, 2), (1, 1)])
    def test_move_matches_plain_loop(self, steps, settle):
        t = MacroPrimitiveTransform(action_dim=3)
        target = torch.tensor([[1.0, -2.0, 4.0], [0.5, 0.0, -1.0]])
        td = TensorDict(
            {"action": TargetMacroAction.move(target, steps=steps, settle_steps=settle)}, [2]
        )
        out = t.inv(td)["action"]
        torch.testing.assert_close(out, _plain_loop(torch.zeros(2, 3), target, steps, settle))

    def test_raw_tensor_and_plain_tensordict(self):
        t = MacroPrimitiveTransform(action_dim=2, macro_steps=2, settle_steps=1)
        out = t.inv(TensorDict({"action": torch.tensor([[2.0, 4.0]])}, [1]))["action"]
        torch.testing.assert_close(out, torch.tensor([[[1.0, 2.0], [2.0, 4.0], [2.0, 4.0]]]))
        plain = TensorDict(
            {
                "mode": torch.tensor([[1]]),
                "target": torch.tensor([[3.0, 3.0]]),
                "steps": torch.tensor([[3]]),
            },
            [1],
        )
        out = t.inv(TensorDict({"action": plain}, [1]))["action"]
        # steps from the action, settle_steps from the transform
        torch.testing.assert_close(
            out, _plain_loop(torch.zeros(1, 2), torch.tensor([[3.0, 3.0]]), 3, 1)
        )

    def test_wait_holds_and_nested_key(self):
        t = MacroPrimitiveTransform(action_key=("agent", "action"), action_dim=3, macro_steps=2)
        td = TensorDict({("agent", "action"): TargetMacroAction.wait(action_dim=3, steps=2)}, [1])
        torch.testing.assert_close(t.inv(td)["agent", "action"], torch.zeros(1, 2, 3))
        humanoid = HumanoidMacroAction.reach_control(torch.ones(1, 3), steps=3, settle_steps=1)
        assert t.inv(TensorDict({("agent", "action"): humanoid}, [1]))["agent", "action"].shape == (
            1,
            4,
            3,
        )

    def test_spec_and_execute_in_env(self):
        t = MacroPrimitiveTransform(action_dim=5)
        spec = t.transform_input_spec(Composite(shape=(1,)))["full_action_spec"]
        assert isinstance(spec["action", "mode"], Categorical) and spec["action", "mode"].n == 2
        assert spec["action", "target"].shape == (1, 5)
        composed = MacroPrimitiveTransform(macro_steps=4, execute=True)
        assert isinstance(composed, Compose) and isinstance(composed[0], MultiAction)
        env = TransformedEnv(PendulumEnv(), composed)
        td = env.reset()
        td["action"] = TargetMacroAction.move(torch.tensor([1.0]), steps=4)[0]
        # four low-level Pendulum steps in one outer step: four rewards
        assert env.step(td)["next", "reward"].shape == (4, 1)
        assert int(MacroPrimitive.MOVE) == 1 and str(MacroPrimitive.WAIT) == "wait"

    def test_errors(self):
        t = MacroPrimitiveTransform(action_dim=3)
        with pytest.raises(RuntimeError, match="found no action under 'action'"):
            t.inv(TensorDict({}, [1]))
        with pytest.raises(RuntimeError, match="expected a macro action with a 'target'"):
            t.inv(TensorDict({"action": TensorDict({"mode": torch.ones(1, 1)}, [1])}, [1]))
        with pytest.raises(ValueError, match="macro_steps must be strictly positive, got 0"):
            MacroPrimitiveTransform(macro_steps=0)
        with pytest.raises(ValueError, match="steps must be strictly positive, got 0"):
            TargetMacroAction.move(torch.ones(3), steps=0)
        with pytest.raises(RuntimeError, match="needs action_dim"):
            MacroPrimitiveTransform().transform_input_spec(Composite(shape=()))
