"""DecodeVideoTransform: VideoClipRef entries decoded on a replay buffer's sample path.

The videos are lossless (FFV1) with gray level ``base + 11 i`` in frame ``i``, so every
decoded pixel is compared exactly with the level of the frame it should be.
"""

from __future__ import annotations

import av
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rl.data import (
    LazyMemmapStorage,
    LazyStackStorage,
    LazyTensorStorage,
    ListStorage,
    RandomSampler,
    ReplayBuffer,
    SliceSampler,
    VideoClipRef,
    clear_video_decoder_cache,
)
from rl.envs import Compose, DecodeVideoTransform, transforms


def _write(path, num_frames: int, base: int = 0) -> str:
    with av.open(str(path), "w") as container:
        stream = container.add_stream("ffv1", rate=10, options={"g": "4"})
        stream.width, stream.height, stream.pix_fmt = 12, 8, "bgr0"
        for i in range(num_frames):
            image = np.full((8, 12, 3), base + 11 * i, dtype=np.uint8)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        container.mux(stream.encode())
    return str(path)


def _frames(levels) -> torch.Tensor:
    levels = torch.as_tensor(levels, dtype=torch.uint8)
    return levels[..., None, None, None].expand(*levels.shape, 3, 8, 12)


@pytest.fixture
def two_files(tmp_path):
    clear_video_decoder_cache()
    yield _write(tmp_path / "a.mkv", 10), _write(tmp_path / "b.mkv", 6, base=130)
    clear_video_decoder_cache()


class TestDecodeVideoTransform:
    def test_exported_from_transforms(self):
        assert transforms.DecodeVideoTransform is DecodeVideoTransform

    def test_keys(self):
        with pytest.raises(TypeError, match="needs in_keys"):
            DecodeVideoTransform(in_keys=None)
        t = DecodeVideoTransform(in_keys=["frame"])
        assert t.out_keys == t.in_keys == ["frame"]
        with pytest.raises(TypeError):
            DecodeVideoTransform(["frame"])  # keyword-only, as TorchRL

    def test_decodes_into_out_keys(self, two_files):
        a, _ = two_files
        td = TensorDict({"frame": VideoClipRef(a)[2:6]}, batch_size=[4])
        out = DecodeVideoTransform(in_keys=["frame"], out_keys=["pixels"])(td)
        torch.testing.assert_close(out["pixels"], _frames([22, 33, 44, 55]))
        assert isinstance(out["frame"], VideoClipRef)  # the reference stays beside

    def test_replaces_in_place_with_dtype(self, two_files):
        a, b = two_files
        ref = VideoClipRef.from_files([a, b])[torch.tensor([9, 10, 0])]
        td = TensorDict({"obs": {"cam": ref}}, batch_size=[3])
        out = DecodeVideoTransform(in_keys=[("obs", "cam")], dtype=torch.float32)(td)
        torch.testing.assert_close(out["obs", "cam"], _frames([99, 130, 0]).float())

    def test_errors_name_the_key(self, two_files):
        td = TensorDict({"frame": torch.zeros(4, 3, 8, 12)}, batch_size=[4])
        t = DecodeVideoTransform(in_keys=["frame"], out_keys=["pixels"])
        with pytest.raises(TypeError, match="expects a VideoClipRef at 'frame', got Tensor"):
            t(td)
        with pytest.raises(KeyError, match="in_key 'frame'"):
            t(TensorDict({"other": torch.zeros(4)}, batch_size=[4]))

    @pytest.mark.parametrize(
        "storage,sampler",
        [
            (ListStorage, RandomSampler),
            (LazyStackStorage, lambda: SliceSampler(slice_len=4, traj_key="episode")),
            (LazyTensorStorage, lambda: SliceSampler(slice_len=4, traj_key="episode")),
            (LazyMemmapStorage, lambda: SliceSampler(slice_len=4, traj_key="episode")),
        ],
        ids=["list-random", "lazystack-slices", "lazytensor-slices", "lazymemmap-slices"],
    )
    def test_replay_buffer_samples_decoded_frames(self, two_files, storage, sampler):
        a, b = two_files
        episodes = [
            TensorDict(
                {"frame": VideoClipRef(a), "episode": torch.zeros(10, dtype=torch.long)}, [10]
            ),
            TensorDict({"frame": VideoClipRef(b), "episode": torch.ones(6, dtype=torch.long)}, [6]),
        ]
        rb = ReplayBuffer(
            storage=storage(16),
            sampler=sampler(),
            batch_size=8,
            transform=Compose(DecodeVideoTransform(in_keys=["frame"], out_keys=["pixels"])),
        )
        for episode in episodes:
            rb.extend(episode)
        for _ in range(3):
            sample = rb.sample()
            assert sample["pixels"].shape == torch.Size([8, 3, 8, 12])
            bases = [130 * e for e in sample["episode"].tolist()]
            index = sample["frame"].frame_index.tolist()
            expected = [base + 11 * i for base, i in zip(bases, index)]
            torch.testing.assert_close(sample["pixels"], _frames(expected))
            if isinstance(rb.sampler, SliceSampler):  # two windows of 4 consecutive frames
                for window in torch.tensor(index).split(4):
                    assert torch.equal(window, window[0] + torch.arange(4))
        assert len(rb) == 16  # the storage still holds references, not frames
