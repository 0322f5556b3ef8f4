"""ToyVLAEnv: TorchRL's VLA observation layout, echo and tracking modes.

Reference values are TorchRL 0.14.1's ``ToyVLAEnv`` with the same seed.
"""

from __future__ import annotations

import pytest
import torch

from rl.envs import MultiAction, ToyVLAEnv, TransformedEnv
from rl.envs.custom import ToyVLAEnv as CustomToyVLAEnv


class TestToyVLAEnv:
    def test_specs_and_echo_mode(self):
        env = ToyVLAEnv(batch_size=[2], seed=0)
        td = env.reset()
        assert td["language_instruction"] == ["push the T-shaped block onto the target"] * 2
        assert td["observation", "image"].dtype == torch.uint8 and td[
            "observation", "image"
        ].shape == (2, 3, 16, 16)
        td["action"] = torch.tensor([[0.3, 0.4, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
        out = env.step(td)["next"]
        torch.testing.assert_close(out["reward"], torch.tensor([[-0.5], [-1.0]]))
        # the state echoes the executed action
        torch.testing.assert_close(out["observation", "state"][:, :4], td["action"])
        assert not out["done"].any() and CustomToyVLAEnv is ToyVLAEnv

    def test_tracking_mode_matches_torchrl(self):
        env = ToyVLAEnv(
            2, 4, batch_size=[2], success_steps=2, seed=3, from_pixels=True, render_size=8
        )
        td = env.reset()
        torch.testing.assert_close(
            td["observation", "state"],
            torch.tensor([[0.0, 0.0, -0.495736, -0.394431], [0.0, 0.0, -0.214158, -0.473045]]),
        )
        rewards, dones = [], []
        for i in range(3):  # the oracle: the target read back from the state (0 first)
            td["action"] = td["observation", "state"][..., 2:4] * (1.0 if i else 0.0)
            out = env.step(td)
            rewards.append(out["next", "reward"].flatten().tolist())
            dones.append(out["next", "done"].flatten().tolist())
            td = out["next"]
        torch.testing.assert_close(torch.tensor(rewards[0]), torch.tensor([-0.633506, -0.519264]))
        assert rewards[1:] == [[0.0, 0.0], [0.0, 0.0]]
        assert dones == [[False, False], [False, False], [True, True]]
        assert out["next", "pixels"].shape == (2, 8, 8, 3)

    def test_group_repeats(self):
        env = ToyVLAEnv(2, 4, success_steps=1, group_repeats=2, seed=0)
        ids, targets = [], []
        for _ in range(3):
            r = env.reset()
            ids.append(int(r["group_id"]))
            targets.append(float(r["observation", "state"][2]))
        assert ids == [0, 0, 1] and targets[0] == targets[1] != targets[2]

    def test_with_multi_action(self):
        env = TransformedEnv(ToyVLAEnv(2, 4, seed=0), MultiAction())
        td = env.reset()
        td["action"] = torch.zeros(3, 2)
        assert env.step(td)["next", "reward"].shape == (3, 1)

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            (
                {"action_dim": 4, "state_dim": 3},
                r"state_dim \(3\) must be at least action_dim \(4\)",
            ),
            ({"success_steps": 2}, r"at least 2 \* action_dim \(8\) in tracking mode"),
            ({"success_steps": 0, "state_dim": 8}, "success_steps must be >= 1"),
            ({"success_steps": 1, "state_dim": 8, "success_tol": 0.7}, "success_tol must be in"),
            ({"group_repeats": 2}, "group_repeats needs the tracking mode"),
            ({"render_size": 0}, "render_size must be >= 1"),
        ],
    )
    def test_bad_arguments(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            ToyVLAEnv(**kwargs)
