"""SatelliteAttitudeTransform: a target attitude turned into CMG gimbal-rate sequences.

The reference values are TorchRL 0.14.1's on the same random inputs.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rl.core import Bounded, Composite, Unbounded
from rl.envs.transforms import MacroPrimitive, SatelliteAttitudeTransform, SatelliteMacroAction


def _td(action, n=4, batch=1, g=None):
    if g is None:
        return TensorDict(
            {
                "action": action,
                "bus_quat": torch.tensor([[1.0, 0.0, 0.0, 0.0]]),
                "bus_omega": torch.zeros(1, 3),
                "gimbal_angles": torch.cat([torch.zeros(1, n), torch.ones(1, n)], -1),
            },
            [1],
        )
    return TensorDict(
        {
            "action": action,
            "bus_quat": torch.randn(batch, 4, generator=g),
            "bus_omega": torch.randn(batch, 3, generator=g) * 0.1,
            "gimbal_angles": torch.randn(batch, 2 * n, generator=g),
        },
        [batch],
    )


class TestSatelliteAttitudeTransform:
    def test_values_match_torchrl(self):
        g = torch.Generator().manual_seed(0)
        expected = {
            4: [[-1 / 3, -2 / 3, -1.0, -1.0], [-0.146817, -0.293635, -0.440452, -0.440452]],
            6: [[-0.271890, -0.543781, -0.815671, -0.815671], [1 / 3, 2 / 3, 1.0, 1.0]],
        }
        for n in (4, 6):
            t = SatelliteAttitudeTransform(
                num_cmgs=n, macro_steps=3, settle_steps=1, action_scale=2.0
            )
            # same draw order as the reference run: bus_quat, target, omega, gimbals
            q, target = torch.randn(2, 4, generator=g), torch.randn(2, 4, generator=g)
            td = TensorDict(
                {
                    "action": target,
                    "bus_quat": q,
                    "bus_omega": torch.randn(2, 3, generator=g) * 0.1,
                    "gimbal_angles": torch.randn(2, 2 * n, generator=g),
                },
                [2],
            )
            out = t.inv(td)["action"]
            assert out.shape == (2, 4, n)
            torch.testing.assert_close(out[:, :, 0], torch.tensor(expected[n]), atol=1e-5, rtol=0)

    def test_identity_and_wait_hold_zero(self):
        t = SatelliteAttitudeTransform(macro_steps=2, settle_steps=0)
        identity = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
        for action in (
            SatelliteMacroAction.slew_attitude(identity, steps=2, settle_steps=0),
            identity,
        ):
            assert t.inv(_td(action))["action"].abs().sum() == 0
        turn = torch.tensor([[0.70710678, 0.0, 0.0, 0.70710678]])
        assert t.inv(_td(turn.clone()))["action"].abs().sum() > 0
        wait = TensorDict({"mode": torch.tensor([[int(MacroPrimitive.WAIT)]]), "target": turn}, [1])
        assert t.inv(_td(wait))["action"].abs().sum() == 0

    def test_spec_dtype_follows_bus_quat(self):
        spec = Composite(
            full_action_spec=Composite(action=Bounded(-1.0, 1.0, shape=(1, 4)), shape=(1,)),
            full_observation_spec=Composite(
                bus_quat=Unbounded(shape=(1, 4), dtype=torch.float64), shape=(1,)
            ),
            shape=(1,),
        )
        out = SatelliteAttitudeTransform().transform_input_spec(spec)["full_action_spec"]
        assert out["action", "target"].dtype is torch.float64 and out["action", "mode"].n == 2

    def test_errors(self):
        with pytest.raises(ValueError, match="num_cmgs must be 4 or 6, got 5"):
            SatelliteAttitudeTransform(num_cmgs=5)
        with pytest.raises(ValueError, match="trailing dim of 4"):
            SatelliteMacroAction.slew_attitude(torch.zeros(3))
        td = TensorDict({"action": torch.tensor([[1.0, 0.0, 0.0, 0.0]])}, [1])
        with pytest.raises(RuntimeError, match="needs the satellite observations"):
            SatelliteAttitudeTransform().inv(td)
        with pytest.raises(ValueError, match=r"quaternion of shape \(1, 4\), got \(1, 3\)"):
            SatelliteAttitudeTransform().inv(_td(torch.zeros(1, 3)))
