"""Shared helpers for the rl-data tests."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict


def _make_transitions(n: int, start: int = 0, obs_dim: int = 3) -> TensorDict:
    """``n`` transitions whose every entry is derived from their global id ``start + i``.

    ``observation = id``, ``next.observation = id + 1``, ``action = -id``,
    ``next.reward = 2 * id``: any torn or mixed-up item is detectable.
    """
    ids = torch.arange(start, start + n, dtype=torch.float32)
    return TensorDict(
        {
            "id": torch.arange(start, start + n),
            "observation": ids[:, None].expand(n, obs_dim).clone(),
            "action": -ids[:, None].clone(),
            "next": {
                "observation": (ids + 1)[:, None].expand(n, obs_dim).clone(),
                "reward": 2 * ids[:, None],
                "done": torch.zeros(n, 1, dtype=torch.bool),
            },
        },
        batch_size=[n],
    )


def _assert_consistent(batch: TensorDict) -> None:
    """Every item of ``batch`` was made by :func:`_make_transitions` and is whole."""
    ids = batch["id"].to(torch.float32)
    torch.testing.assert_close(batch["observation"][:, 0], ids)
    torch.testing.assert_close(batch["observation"].amax(-1), batch["observation"].amin(-1))
    torch.testing.assert_close(batch["next", "observation"][:, 0], ids + 1)
    torch.testing.assert_close(batch["action"][:, 0], -ids)
    torch.testing.assert_close(batch["next", "reward"][:, 0], 2 * ids)


def _make_episodes(lengths: list[int]) -> TensorDict:
    """Consecutive episodes of the given lengths, with ``episode`` ids and done flags."""
    episode = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])
    step = torch.cat([torch.arange(n) for n in lengths])
    done = torch.zeros(len(episode), 1, dtype=torch.bool)
    done[torch.cumsum(torch.tensor(lengths), 0) - 1] = True
    return TensorDict(
        {
            "episode": episode,
            "step": step,
            "observation": step[:, None].float(),
            ("next", "done"): done,
            ("next", "truncated"): torch.zeros_like(done),
            ("next", "reward"): torch.ones(len(episode), 1),
        },
        batch_size=[len(episode)],
    )


@pytest.fixture
def make_transitions():
    return _make_transitions


@pytest.fixture
def assert_consistent():
    return _assert_consistent


@pytest.fixture
def make_episodes():
    return _make_episodes


def _write_gray_video(path, num_frames: int, base: int = 0, codec: str = "libx264rgb") -> list[int]:
    """Encodes ``num_frames`` 8x12 frames losslessly, frame ``i`` of gray level ``base + 11 i``.

    ``libx264rgb`` (an mp4, a keyframe every 5 frames, so reads start mid-stream) or
    ``ffv1`` (a Matroska file, which stores no frame count). Returns the levels.
    """
    import av
    import numpy as np

    levels = [base + 11 * i for i in range(num_frames)]
    with av.open(str(path), "w") as container:
        if codec == "ffv1":
            stream = container.add_stream("ffv1", rate=10, options={"g": "4"})
            stream.pix_fmt = "bgr0"
        else:
            stream = container.add_stream(codec, rate=10, options={"qp": "0", "g": "5"})
            stream.pix_fmt = "rgb24"
        stream.width, stream.height = 12, 8
        for level in levels:
            image = np.full((8, 12, 3), level, dtype=np.uint8)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        container.mux(stream.encode())
    return levels


@pytest.fixture
def write_gray_video():
    return _write_gray_video
