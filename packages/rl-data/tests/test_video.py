"""VideoClipRef: lazy addressing, PyAV decoding, rebinning, storage and the decoder cache.

The videos are written losslessly with gray level ``base + 11 i`` in frame ``i``, so every
decoded pixel is compared exactly with the level of the frame it should be.
"""

from __future__ import annotations

import gc
import os
import pickle

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
    SamplerWithoutReplacement,
    SliceSampler,
    VideoClipRef,
    _video,  # this package's own module: its per-process cache
    clear_video_decoder_cache,
    set_video_decoder_cache_size,
)


def _frames(levels) -> torch.Tensor:
    """The expected frames ``[*shape(levels), 3, 8, 12]`` of the given gray levels."""
    levels = torch.as_tensor(levels, dtype=torch.uint8)
    return levels[..., None, None, None].expand(*levels.shape, 3, 8, 12)


def _cached() -> list:
    return list(_video._DECODER_CACHE)


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_video_decoder_cache()
    yield
    set_video_decoder_cache_size(8)
    clear_video_decoder_cache()


@pytest.fixture
def mp4(tmp_path, write_gray_video):
    path = str(tmp_path / "clip.mp4")
    write_gray_video(path, 20)
    return path


@pytest.fixture
def two_files(tmp_path, write_gray_video):
    """An mp4 of 10 frames (levels 0..99) and a Matroska file of 6 (levels 130..185)."""
    a, b = str(tmp_path / "a.mp4"), str(tmp_path / "b.mkv")
    write_gray_video(a, 10)
    write_gray_video(b, 6, base=130, codec="ffv1")
    return a, b


class TestAddressing:
    def test_bare_path_reads_the_frame_count(self, mp4):
        ref = VideoClipRef(mp4)
        assert ref.batch_size == torch.Size([20])
        assert ref.frame_index.dtype == torch.long
        assert ref.frame_index.tolist() == list(range(20))
        assert ref.file_id.tolist() == [0] * 20
        assert ref.sources == (mp4,)
        assert ref.source == mp4
        assert _cached() == [(mp4, None)]  # opened once, for its frame count

    def test_matroska_without_a_stored_frame_count(self, two_files):
        _, mkv = two_files
        assert VideoClipRef.from_file(mkv).batch_size == torch.Size([6])

    def test_explicit_indices_open_no_file(self, tmp_path):
        missing = str(tmp_path / "not_written_yet.mp4")
        ref = VideoClipRef(missing, frame_index=torch.tensor([[3, 1], [9, 9]]))
        assert ref.batch_size == torch.Size([2, 2])
        assert VideoClipRef.from_file(missing, num_frames=7).frame_index.tolist() == list(range(7))
        assert VideoClipRef.from_file(missing, frame_index=[4, 2]).frame_index.tolist() == [4, 2]
        assert _cached() == []

    def test_slicing_stays_lazy(self, mp4):
        ref = VideoClipRef.from_file(mp4, num_frames=20)
        clip = ref[4:8]
        assert isinstance(clip, VideoClipRef)
        assert clip.frame_index.tolist() == [4, 5, 6, 7]
        assert clip.source == mp4
        picked = ref[torch.tensor([9, 2])]
        assert picked.frame_index.tolist() == [9, 2]
        assert _cached() == []  # nothing opened, nothing decoded

    def test_from_files_concatenates_and_dedupes(self, two_files):
        a, b = two_files
        ref = VideoClipRef.from_files([a, b, a], num_frames_per_file=[10, 6, 2])
        assert ref.sources == (a, b)
        assert ref.frame_index.tolist() == list(range(10)) + list(range(6)) + [0, 1]
        assert ref.file_id.tolist() == [0] * 10 + [1] * 6 + [0] * 2
        assert list(ref[8:12].source) == [a, a, b, b]
        read = VideoClipRef.from_files([a, b])  # counts read from the files
        assert read.batch_size == torch.Size([16])
        same = VideoClipRef.from_files([a, a], num_frames_per_file=3)
        assert same.frame_index.tolist() == [0, 1, 2, 0, 1, 2]

    def test_from_timestamps_rounds_to_the_nearest_frame(self, two_files):
        a, mkv = two_files
        # 10 frames per second; 5.0 s is past the end and clamps to the last frame
        ref = VideoClipRef.from_timestamps(mkv, torch.tensor([0.0, 0.26, 0.5, 5.0]))
        assert ref.frame_index.tolist() == [0, 3, 5, 5]
        assert VideoClipRef.from_timestamps(a, [0.5, 0.9], fps=4).frame_index.tolist() == [2, 4]
        torch.testing.assert_close(ref.decode(), _frames([130, 163, 185, 185]))

    def test_stack_keeps_each_reference_file(self, two_files):
        a, b = two_files
        refs = [VideoClipRef(a)[7], VideoClipRef(b)[2], VideoClipRef(a)[0]]
        stacked = torch.stack(refs)
        assert isinstance(stacked, VideoClipRef)
        assert stacked.frame_index.tolist() == [7, 2, 0]
        assert list(stacked.source) == [a, b, a]
        torch.testing.assert_close(stacked.decode(), _frames([77, 152, 0]))

    def test_pickle_round_trip(self, two_files):
        a, b = two_files
        ref = VideoClipRef.from_files([a, b])
        ref[8:12].decode()
        back = pickle.loads(pickle.dumps(ref))
        assert back.sources == (a, b)
        assert torch.equal(back.file_id, ref.file_id)
        assert torch.equal(back.frame_index, ref.frame_index)
        clear_video_decoder_cache()
        torch.testing.assert_close(back[8:12].decode(), _frames([88, 99, 130, 141]))


class TestDecode:
    @pytest.mark.parametrize("which", [0, 1], ids=["mp4-keyframe-every-5", "mkv-ffv1"])
    def test_contiguous_and_scattered_indices(self, two_files, which):
        path = two_files[which]
        base, n = (0, 10) if which == 0 else (130, 6)
        levels = [base + 11 * i for i in range(n)]
        ref = VideoClipRef(path)
        torch.testing.assert_close(ref.decode(), _frames(levels))
        torch.testing.assert_close(ref[2:5].decode(), _frames(levels[2:5]))
        scattered = [n - 1, 1, 4, 1, 0]  # out of order, repeated, across keyframes
        decoded = ref[torch.tensor(scattered)].decode()
        torch.testing.assert_close(decoded, _frames([levels[i] for i in scattered]))

    @pytest.mark.parametrize(
        "codec,name,options",
        [("libx264", "b.mp4", {"bf": "3", "g": "12"}), ("mpeg4", "b.avi", {"bf": "2", "g": "10"})],
    )
    def test_b_frames_match_a_sequential_decode(self, tmp_path, codec, name, options):
        # frames stored out of display order (B-frames; AVI seeks by decode time): each
        # frame is compared with the same frame of one plain pass over the whole file
        import av
        import numpy as np

        path = str(tmp_path / name)
        with av.open(path, "w") as container:
            stream = container.add_stream(codec, rate=25, options=options)
            stream.width, stream.height, stream.pix_fmt = 32, 24, "yuv420p"
            for i in range(40):
                image = np.full((24, 32, 3), 6 * i, dtype=np.uint8)
                image[: i % 24, : i % 32] = 255 - 6 * i
                container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
            container.mux(stream.encode())
        with av.open(path) as container:
            plain = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
        plain = torch.from_numpy(np.stack(plain)).permute(0, 3, 1, 2)
        index = torch.tensor([39, 3, 17, 18, 19, 30, 0, 25, 25, 38])
        ref = VideoClipRef(path)
        assert ref.batch_size == torch.Size([40])
        assert torch.equal(ref[index].decode(), plain[index])
        assert torch.equal(ref[11:29].decode(), plain[11:29])

    def test_keeps_the_batch_shape(self, mp4):
        ref = VideoClipRef(mp4, frame_index=torch.tensor([[0, 5, 19], [3, 3, 12]]))
        torch.testing.assert_close(ref.decode(), _frames([[0, 55, 209], [33, 33, 132]]))
        single = VideoClipRef(mp4)[7].decode()
        torch.testing.assert_close(single, _frames(77))

    def test_dtype_and_device(self, mp4):
        ref = VideoClipRef.from_file(mp4, dtype=torch.float32)
        assert ref[0:2].frames.dtype == torch.float32
        out = VideoClipRef(mp4)[1:3].decode(dtype=torch.float64, device="cpu")
        torch.testing.assert_close(out, _frames([11, 22]).double())

    @pytest.mark.gpu
    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
    def test_cuda_output(self, mp4):
        # decoded on the CPU, then moved: out_device, the reference's device, decode(device=)
        on_object = VideoClipRef.from_file(mp4, device="cuda")[0:2].decode()
        assert on_object.device.type == "cuda"
        torch.testing.assert_close(on_object.cpu(), _frames([0, 11]))
        td = TensorDict({"frame": VideoClipRef(mp4)}, batch_size=[20]).to("cuda")
        assert td["frame"][3:5].decode().device.type == "cuda"
        assert td["frame"][3:5].decode(device="cpu").device.type == "cpu"

    def test_auto_decode_indexing_returns_frames(self, mp4):
        ref = VideoClipRef.from_file(mp4, auto_decode=True)
        torch.testing.assert_close(ref[1:4], _frames([11, 22, 33]))
        assert isinstance(ref.rebin(2), VideoClipRef)  # rebin stays lazy

    def test_multi_file_slice_decodes_per_file(self, two_files):
        a, b = two_files
        ref = VideoClipRef(
            sources=(a, b),
            frame_index=torch.tensor([1, 2, 1, 9]),
            file_id=torch.tensor([0, 1, 1, 0]),
        )
        torch.testing.assert_close(ref.decode(), _frames([11, 152, 141, 99]))
        cat = VideoClipRef.from_files([a, b])
        torch.testing.assert_close(cat[8:12].decode(), _frames([88, 99, 130, 141]))


class TestRebin:
    @staticmethod
    def _loop(n, bins, k=None):
        """The bin positions computed one bin at a time."""
        edges = [round(n * j / bins) for j in range(bins + 1)]
        out = []
        for j in range(bins):
            first = min(edges[j], n - 1)
            last = max(min(edges[j + 1] - 1, n - 1), first)
            if k is None:
                out.append(int(torch.tensor((first + last) / 2).round()))
            else:
                out.append(
                    [
                        int(torch.tensor(first + s / max(k - 1, 1) * (last - first)).round())
                        for s in range(k)
                    ]
                    if k > 1
                    else [first]
                )
        return out

    def test_middle_frame_per_bin(self, mp4):
        ref = VideoClipRef(mp4).rebin(5)
        assert ref.batch_size == torch.Size([5])
        assert ref.frame_index.tolist() == [2, 6, 10, 14, 18]
        torch.testing.assert_close(ref.decode(), _frames([22, 66, 110, 154, 198]))

    def test_frames_per_bin(self, mp4):
        ref = VideoClipRef.from_file(mp4, num_bins=5, frames_per_bin=2)
        assert ref.frame_index.tolist() == [[0, 3], [4, 7], [8, 11], [12, 15], [16, 19]]
        torch.testing.assert_close(ref.decode()[0], _frames([0, 33]))
        full = VideoClipRef.from_file(mp4, num_bins=5, frames_per_bin=4)
        torch.testing.assert_close(full.decode().flatten(0, 1), VideoClipRef(mp4).decode())

    @pytest.mark.parametrize("bins,k", [(7, None), (7, 4), (3, 5), (20, None), (13, 2)])
    def test_matches_a_plain_loop(self, bins, k):
        ref = VideoClipRef("unused.mp4", frame_index=torch.arange(100, 120))
        positions = self._loop(20, bins, k)
        expected = torch.tensor(positions) + 100
        assert torch.equal(ref.rebin(bins, k).frame_index, expected)

    def test_after_a_slice_and_across_files(self, two_files):
        a, b = two_files
        assert VideoClipRef(a)[2:8].rebin(3).frame_index.tolist() == [2, 4, 6]
        ref = VideoClipRef.from_files([a, b]).rebin(4)  # 16 frames: middles 2, 6, 10, 14
        assert ref.file_id.tolist() == [0, 0, 1, 1]
        torch.testing.assert_close(ref.decode(), _frames([22, 66, 130, 174]))
        binned = VideoClipRef.from_files([a, b], num_bins=4, frames_per_bin=2)
        assert torch.equal(
            binned.frame_index, VideoClipRef.from_files([a, b]).rebin(4, 2).frame_index
        )

    def test_bad_arguments(self, mp4):
        ref = VideoClipRef.from_file(mp4, num_frames=20)
        with pytest.raises(ValueError, match="num_bins must be >= 1, got 0"):
            ref.rebin(0)
        with pytest.raises(ValueError, match="frames_per_bin must be >= 1, got 0"):
            ref.rebin(2, 0)
        with pytest.raises(ValueError, match="mutually exclusive"):
            VideoClipRef.from_file(mp4, num_bins=5, frame_index=[0, 1])
        with pytest.raises(ValueError, match="frames_per_bin needs num_bins"):
            VideoClipRef.from_file(mp4, frames_per_bin=2)
        with pytest.raises(ValueError, match="frames_per_bin needs num_bins"):
            VideoClipRef.from_files([mp4], frames_per_bin=2)


class TestReplayBuffer:
    @pytest.mark.parametrize(
        "storage,sampler",
        [
            (ListStorage, RandomSampler),
            (LazyStackStorage, SamplerWithoutReplacement),
            (LazyStackStorage, lambda: SliceSampler(slice_len=3, traj_key="episode")),
        ],
        ids=["list-random", "lazystack-without-replacement", "lazystack-slices"],
    )
    def test_sampled_references_decode_their_own_frames(self, two_files, storage, sampler):
        a, b = two_files
        data = TensorDict(
            {"frame": VideoClipRef.from_files([a, b]), "episode": torch.tensor([0] * 10 + [1] * 6)},
            batch_size=[16],
        )
        rb = ReplayBuffer(storage=storage(16), sampler=sampler(), batch_size=6)
        rb.extend(data)
        for _ in range(3):
            sample = rb.sample()
            ref = sample["frame"]
            assert isinstance(ref, VideoClipRef)
            bases = [0 if e == 0 else 130 for e in sample["episode"].tolist()]
            levels = [base + 11 * i for base, i in zip(bases, ref.frame_index.tolist())]
            torch.testing.assert_close(ref.decode(), _frames(levels))

    @pytest.mark.parametrize("storage", [LazyTensorStorage, LazyMemmapStorage])
    def test_tensor_storages_keep_references(self, two_files, storage):
        # the sources tuple is non-tensor data: one value per stored row, as TorchRL
        a, b = two_files
        data = TensorDict(
            {"frame": VideoClipRef.from_files([a, b]), "episode": torch.tensor([0] * 10 + [1] * 6)},
            batch_size=[16],
        )
        rb = ReplayBuffer(
            storage=storage(16),
            sampler=SliceSampler(slice_len=3, traj_key="episode"),
            batch_size=6,
        )
        rb.extend(data)
        for _ in range(3):
            sample = rb.sample()
            ref = sample["frame"]
            assert isinstance(ref, VideoClipRef)
            bases = [0 if e == 0 else 130 for e in sample["episode"].tolist()]
            levels = [base + 11 * i for base, i in zip(bases, ref.frame_index.tolist())]
            torch.testing.assert_close(ref.decode(), _frames(levels))
            for window in ref.frame_index.split(3):  # two windows of consecutive frames
                assert torch.equal(window, window[0] + torch.arange(3))
        # a checkpoint keeps the paths (into a storage that has seen a reference once)
        restored = storage(16)
        restored.set(0, data[0])
        restored.load_state_dict(rb.storage.state_dict())
        ref = restored.get(torch.tensor([15, 2]))["frame"]
        torch.testing.assert_close(ref.decode(), _frames([130 + 55, 22]))


class TestDecoderCache:
    def test_least_recently_used_file_is_dropped(self, tmp_path, write_gray_video):
        paths = [str(tmp_path / f"{name}.mp4") for name in "abc"]
        for path in paths:
            write_gray_video(path, 3)
        a, b, c = paths
        set_video_decoder_cache_size(2)
        for path in (a, b, a, c):
            VideoClipRef.from_file(path, num_frames=3)[0:2].decode()
        assert _cached() == [(a, None), (c, None)]
        set_video_decoder_cache_size(1)
        assert _cached() == [(c, None)]
        clear_video_decoder_cache()
        assert _cached() == []

    def test_size_zero_keeps_nothing_open(self, mp4):
        set_video_decoder_cache_size(0)
        torch.testing.assert_close(VideoClipRef(mp4)[3:5].decode(), _frames([33, 44]))
        assert _cached() == []

    @pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
    def test_dropped_files_are_closed_at_once(self, tmp_path, write_gray_video):
        # a PyAV container sits in a reference cycle (its streams point back at it), so a
        # file the cache drops stays open until the cyclic GC runs, unless it is closed
        paths = [str(tmp_path / f"{i}.mp4") for i in range(6)]
        for path in paths:
            write_gray_video(path, 3)

        def open_files() -> int:
            return len(os.listdir("/proc/self/fd"))

        gc.collect()
        gc.disable()
        try:
            base = open_files()
            set_video_decoder_cache_size(0)
            for path in paths:
                VideoClipRef(path)[0:2].decode()  # counts the frames, then decodes
            assert open_files() == base
            set_video_decoder_cache_size(2)
            for path in paths:
                VideoClipRef.from_file(path, num_frames=3)[1:3].decode()
            assert open_files() == base + 2
            clear_video_decoder_cache()
            assert open_files() == base
        finally:
            gc.enable()

    def test_negative_size(self):
        with pytest.raises(ValueError, match="maxsize must be >= 0, got -1"):
            set_video_decoder_cache_size(-1)


class TestErrors:
    def test_missing_file_is_named(self, tmp_path):
        missing = str(tmp_path / "nowhere.mp4")
        ref = VideoClipRef.from_file(missing, num_frames=3)
        with pytest.raises(FileNotFoundError, match="nowhere.mp4"):
            ref.decode()
        with pytest.raises(FileNotFoundError, match="nowhere.mp4"):
            VideoClipRef(missing)

    def test_frame_index_out_of_range(self, mp4):
        ref = VideoClipRef(mp4, frame_index=torch.tensor([3, 25]))
        with pytest.raises(
            IndexError, match=r"frame index 25 is out of range .*clip\.mp4.* 20 frames"
        ):
            ref.decode()
        with pytest.raises(IndexError, match="frame index -1"):
            VideoClipRef(mp4, frame_index=torch.tensor([-1])).decode()

    def test_bad_file_id_and_shapes(self, two_files):
        a, b = two_files
        ref = VideoClipRef(sources=(a, b), frame_index=torch.tensor([0]), file_id=torch.tensor([2]))
        with pytest.raises(IndexError, match="file_id 2 is out of range"):
            ref.decode()
        with pytest.raises(ValueError, match=r"file_id has shape \(2,\), expected .* \(3,\)"):
            VideoClipRef(sources=(a,), frame_index=torch.arange(3), file_id=torch.zeros(2))

    def test_bad_stream_and_arguments(self, mp4):
        with pytest.raises(ValueError, match="stream 3 does not exist"):
            VideoClipRef.from_file(mp4, stream=3)
        with pytest.raises(ValueError, match="needs at least one path"):
            VideoClipRef.from_files([])
        with pytest.raises(ValueError, match="1 counts for 2 paths"):
            VideoClipRef.from_files([mp4, mp4], num_frames_per_file=[10])

    def test_files_of_different_frame_sizes(self, tmp_path, mp4):
        import av
        import numpy as np

        other = str(tmp_path / "big.mkv")
        with av.open(other, "w") as container:
            stream = container.add_stream("ffv1", rate=10)
            stream.width, stream.height, stream.pix_fmt = 4, 4, "bgr0"
            container.mux(stream.encode(av.VideoFrame.from_ndarray(np.zeros((4, 4, 3), np.uint8))))
            container.mux(stream.encode())
        ref = VideoClipRef.from_files([mp4, other], num_frames_per_file=[1, 1])
        with pytest.raises(ValueError, match="must share a frame size"):
            ref.decode()
