"""rl.envs.transforms.functional: cat_frames against a plain loop."""

from __future__ import annotations

import pytest
import torch

from rl.envs.transforms.functional import cat_frames


def _loop(x, N, padding, value):
    # x: [T, F]; window of frames t-N+1..t along the feature dim
    T = x.shape[0]
    rows = []
    for t in range(T):
        parts = []
        for s in range(t - N + 1, t + 1):
            if s >= 0:
                parts.append(x[s])
            elif padding == "same":
                parts.append(x[0])
            else:
                parts.append(torch.full_like(x[0], value))
        rows.append(torch.cat(parts))
    return torch.stack(rows)


class TestCatFrames:
    def test_literal(self):
        frames = torch.arange(8.0).view(4, 2)
        out = cat_frames(frames, N=3, dim=-1, time_dim=-2, padding="constant")
        expected = torch.tensor(
            [[0.0, 0, 0, 0, 0, 1], [0, 0, 0, 1, 2, 3], [0, 1, 2, 3, 4, 5], [2, 3, 4, 5, 6, 7]]
        )
        torch.testing.assert_close(out, expected)

    @pytest.mark.parametrize("padding", ["same", "constant"])
    @pytest.mark.parametrize("N", [1, 2, 4])
    def test_against_loop(self, padding, N):
        x = torch.randn(2, 7, 3)
        out = cat_frames(x, N=N, dim=-1, time_dim=-2, padding=padding, padding_value=-1.5)
        for b in range(2):
            torch.testing.assert_close(out[b], _loop(x[b], N, padding, -1.5))

    def test_feature_dims_after_time(self):
        # images [B, T, C, H, W] stacked along C
        x = torch.randn(2, 5, 3, 4, 4)
        out = cat_frames(x, N=2, dim=-3, time_dim=-4)
        assert out.shape == (2, 5, 6, 4, 4)
        torch.testing.assert_close(out[:, 1:, :3], x[:, :-1])
        torch.testing.assert_close(out[:, 0, :3], x[:, 0])

    def test_done_mask_pads_across_trajectory_starts(self):
        x = torch.arange(5.0).view(5, 1)  # a trajectory starts at t=3
        mask = torch.zeros(5, 2, dtype=torch.bool)
        mask[3, 0] = True  # window of t=3 reaches back into the previous trajectory
        out = cat_frames(x, N=2, dim=-1, time_dim=-2, done_mask=mask)
        torch.testing.assert_close(out[3], torch.tensor([3.0, 3.0]))
        out = cat_frames(x, N=2, dim=-1, time_dim=-2, done_mask=mask, padding="constant")
        torch.testing.assert_close(out[3], torch.tensor([0.0, 3.0]))

    def test_done_mask_with_feature_singleton(self):
        # the unfolded ("next", "done") mask of CatFrames is [*B, T, 1, N]
        x = torch.arange(5.0).view(5, 1)
        mask = torch.zeros(5, 1, 2, dtype=torch.bool)
        mask[3, 0, 0] = True
        out = cat_frames(x, N=2, dim=-1, time_dim=-2, done_mask=mask, padding="constant")
        torch.testing.assert_close(out[3], torch.tensor([0.0, 3.0]))
        with pytest.raises(ValueError, match="singleton dims allowed before N"):
            cat_frames(x, N=2, dim=-1, time_dim=-2, done_mask=torch.zeros(5, 3, 2).bool())

    def test_keeps_dtype(self):
        x = torch.arange(6).view(3, 2)
        out = cat_frames(x, N=2, dim=-1, time_dim=-2, padding="constant", padding_value=7)
        assert out.dtype == torch.int64 and out[0].tolist() == [7, 7, 0, 1]

    def test_errors(self):
        x = torch.randn(1, 5, 2)
        with pytest.raises(ValueError, match="dim must be < 0"):
            cat_frames(x, N=2, dim=0, time_dim=-2)
        with pytest.raises(ValueError, match="time_dim must be < 0"):
            cat_frames(x, N=2, dim=-1, time_dim=1)
        with pytest.raises(ValueError, match="padding must be one of"):
            cat_frames(x, N=2, dim=-1, time_dim=-2, padding="zeros")
        with pytest.raises(ValueError, match=r"done_mask must have shape \(1, 5, 2\)"):
            cat_frames(x, N=2, dim=-1, time_dim=-2, done_mask=torch.zeros(5, 2, dtype=torch.bool))
