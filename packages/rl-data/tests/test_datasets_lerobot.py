"""lerobot_columns_to_tensordict: LeRobot's dotted columns into the VLA TensorDict layout."""

from __future__ import annotations

import pytest
import torch

from rl.core import validate_vla_tensordict
from rl.data import (
    LazyStackStorage,
    ReplayBuffer,
    SliceSampler,
    VideoClipRef,
    lerobot_columns_to_tensordict,
)


def _columns(n: int = 6) -> dict:
    return {
        "observation.state": torch.arange(n * 3, dtype=torch.float32).view(n, 3),
        "observation.images.wrist": torch.arange(n, dtype=torch.uint8)
        .view(n, 1, 1, 1)
        .expand(n, 3, 2, 2),
        "action": torch.arange(n * 2, dtype=torch.float32).view(n, 2),
        "episode_index": torch.tensor([0] * (n // 2) + [1] * (n - n // 2)),
        "frame_index": list(range(n // 2)) + list(range(n - n // 2)),
        "task": ["pick"] * (n // 2) + ["place"] * (n - n // 2),
        "next.reward": torch.arange(n, dtype=torch.float32),
        "next.done": torch.tensor([False, False, True] * (n // 3)),
        "observation.extra.velocity": torch.ones(n, 4),
    }


class TestLeRobotColumns:
    def test_layout_and_values(self):
        cols = _columns()
        td = lerobot_columns_to_tensordict(cols)
        assert td.batch_size == torch.Size([6])
        assert torch.equal(td["observation", "state"], cols["observation.state"])
        assert torch.equal(td["observation", "image", "wrist"], cols["observation.images.wrist"])
        assert torch.equal(td["action"], cols["action"])
        assert td["episode"].tolist() == [0, 0, 0, 1, 1, 1]
        assert td["frame"].tolist() == [0, 1, 2, 0, 1, 2]
        assert td.get("language_instruction").tolist() == ["pick"] * 3 + ["place"] * 3
        # per-step signals under "next" get the trailing dim of a transition
        assert td["next", "reward"].shape == (6, 1)
        assert td["next", "reward"].squeeze(-1).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        assert td["next", "done"].shape == (6, 1) and td["next", "done"].dtype == torch.bool
        assert td["observation", "extra", "velocity"].shape == (6, 4)
        assert validate_vla_tensordict(td) == []

    def test_key_map_overrides_the_defaults(self):
        td = lerobot_columns_to_tensordict(
            {"action": torch.zeros(2, 1), "task": ["a", "b"]},
            key_map={"task": "prompt", "action": ("policy", "action")},
        )
        assert td.get("prompt").tolist() == ["a", "b"]
        assert td["policy", "action"].shape == (2, 1)

    def test_video_column_stays_a_reference(self):
        ref = VideoClipRef("never_opened.mp4", frame_index=torch.arange(4))
        td = lerobot_columns_to_tensordict(
            {"observation.images.top": ref, "action": torch.zeros(4, 2)}
        )
        stored = td.get(("observation", "image", "top"))
        assert isinstance(stored, VideoClipRef)
        assert stored.frame_index.tolist() == [0, 1, 2, 3]

    def test_slices_follow_the_episodes(self):
        td = lerobot_columns_to_tensordict(_columns(12))
        rb = ReplayBuffer(
            storage=LazyStackStorage(12),
            sampler=SliceSampler(slice_len=3, traj_key="episode"),
            batch_size=6,
        )
        rb.extend(td)
        sample = rb.sample()
        for window in sample["episode"].view(2, 3):
            assert window.unique().numel() == 1  # a window never crosses an episode

    def test_errors_name_the_column(self):
        with pytest.raises(
            ValueError, match="column 'action' holds 3 frames, column 'observation.state' holds 2"
        ):
            lerobot_columns_to_tensordict(
                {"observation.state": torch.zeros(2, 3), "action": torch.zeros(3, 2)}
            )
        with pytest.raises(ValueError, match="column 'task' mixes strings and other values"):
            lerobot_columns_to_tensordict({"action": torch.zeros(2, 1), "task": ["a", 3]})
        with pytest.raises(ValueError, match="could not tell the number of frames"):
            lerobot_columns_to_tensordict({"fps": 30})
