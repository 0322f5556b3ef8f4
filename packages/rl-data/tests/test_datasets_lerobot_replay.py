"""LeRobotExperienceReplay over tiny LeRobot folders (formats v2.1 and v3.0) written here."""

from __future__ import annotations

import json
import math
import shutil
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from rl.data import SamplerWithoutReplacement, SliceSampler
from rl.data.datasets import LeRobotExperienceReplay, load_dataset

FPS = 10
LENGTHS = [5, 4]  # frames of episode 0 and episode 1
TASKS = ["pick the cube", "place the cube"]
N = sum(LENGTHS)
REPO = "user/tiny"


def _rows() -> dict[str, list]:
    """The frames written: row r of episode e has state [r, -r], action [2r, 1], task e."""
    episode = [e for e, n in enumerate(LENGTHS) for _ in range(n)]
    frame = [i for n in LENGTHS for i in range(n)]
    return {
        "observation.state": [[float(r), -float(r)] for r in range(N)],
        "action": [[2.0 * r, 1.0] for r in range(N)],
        "episode_index": episode,
        "frame_index": frame,
        "timestamp": [i / FPS for i in frame],
        "task_index": episode,
        "index": list(range(N)),
    }


def _table(rows: dict[str, list], select: list[int]) -> pa.Table:
    types = {
        "observation.state": pa.list_(pa.float32(), 2),
        "action": pa.list_(pa.float32(), 2),
        "timestamp": pa.float32(),
    }
    return pa.table(
        {
            k: pa.array([v[i] for i in select], type=types.get(k, pa.int64()))
            for k, v in rows.items()
        }
    )


def _level(camera: str, row: int) -> int:
    """The gray level of the frame of ``row`` in ``camera``'s video."""
    return (0 if camera == "top" else 100) + 11 * row


def _write_snapshot(folder, version: str, write_gray_video) -> None:
    """A LeRobot dataset folder: two episodes, cameras "top" and "wrist".

    v2.1: one parquet and one video per camera per episode. v3.0: one parquet for both
    episodes; camera "top" keeps both episodes back to back in one file, camera "wrist"
    has one file per episode (file_index 0 and 1).
    """
    rows = _rows()
    starts = [sum(LENGTHS[:e]) for e in range(len(LENGTHS))]
    meta = folder / "meta"
    meta.mkdir(parents=True)
    features = {
        "observation.state": {"dtype": "float32", "shape": [2]},
        "action": {"dtype": "float32", "shape": [2]},
        "observation.images.top": {"dtype": "video", "shape": [8, 12, 3]},
        "observation.images.wrist": {"dtype": "video", "shape": [8, 12, 3]},
    }
    info = {"codebase_version": version, "fps": FPS, "features": features}
    if version.startswith("v2"):
        info["chunks_size"] = 1000
        info["video_path"] = (
            "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
        )
        with open(meta / "tasks.jsonl", "w") as f:
            for i, task in enumerate(TASKS):
                f.write(json.dumps({"task_index": i, "task": task}) + "\n")
        with open(meta / "episodes.jsonl", "w") as f:
            for e, n in enumerate(LENGTHS):
                f.write(json.dumps({"episode_index": e, "tasks": [TASKS[e]], "length": n}) + "\n")
        for e, (start, n) in enumerate(zip(starts, LENGTHS)):
            data = folder / "data" / "chunk-000"
            data.mkdir(parents=True, exist_ok=True)
            pq.write_table(
                _table(rows, list(range(start, start + n))), data / f"episode_{e:06d}.parquet"
            )
            for camera in ("top", "wrist"):
                video = folder / "videos" / "chunk-000" / f"observation.images.{camera}"
                video.mkdir(parents=True, exist_ok=True)
                write_gray_video(video / f"episode_{e:06d}.mp4", n, base=_level(camera, start))
    else:
        info["video_path"] = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
        pq.write_table(
            pa.table({"task_index": list(range(len(TASKS))), "__index_level_0__": TASKS}),
            meta / "tasks.parquet",
        )
        (folder / "data" / "chunk-000").mkdir(parents=True)
        # rows written out of order: the reader sorts them by "index"
        pq.write_table(
            _table(rows, list(range(N))[::-1]), folder / "data/chunk-000/file-000.parquet"
        )
        top = folder / "videos/observation.images.top/chunk-000"
        top.mkdir(parents=True)
        write_gray_video(top / "file-000.mp4", N, base=_level("top", 0))
        wrist = folder / "videos/observation.images.wrist/chunk-000"
        wrist.mkdir(parents=True)
        episodes = {k: [] for k in ("episode_index", "length", "tasks")}
        for e, (start, n) in enumerate(zip(starts, LENGTHS)):
            write_gray_video(wrist / f"file-{e:03d}.mp4", n, base=_level("wrist", start))
            episodes["episode_index"].append(e)
            episodes["length"].append(n)
            episodes["tasks"].append([TASKS[e]])
            for camera, file_index, from_ts in (("top", 0, start / FPS), ("wrist", e, 0.0)):
                prefix = f"videos/observation.images.{camera}/"
                episodes.setdefault(prefix + "chunk_index", []).append(0)
                episodes.setdefault(prefix + "file_index", []).append(file_index)
                episodes.setdefault(prefix + "from_timestamp", []).append(from_ts)
                episodes.setdefault(prefix + "to_timestamp", []).append(from_ts + n / FPS)
        (meta / "episodes" / "chunk-000").mkdir(parents=True)
        pq.write_table(pa.table(episodes), meta / "episodes/chunk-000/file-000.parquet")
    with open(meta / "info.json", "w") as f:
        json.dump(info, f)


@pytest.fixture(autouse=True)
def _no_hub_cache(tmp_path, monkeypatch):
    # the hub cache of the machine running the tests is never looked at
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))


@pytest.fixture(params=["v2.1", "v3.0"])
def snapshot(request, tmp_path, write_gray_video):
    _write_snapshot(tmp_path / REPO, request.param, write_gray_video)
    return tmp_path


def _expected_row(r: int) -> dict:
    rows = _rows()
    return {
        "state": rows["observation.state"][r],
        "action": rows["action"][r],
        "episode": rows["episode_index"][r],
        "frame": rows["frame_index"][r],
        "instruction": TASKS[rows["task_index"][r]],
    }


def _check_rows(sample, rows: list[int]) -> None:
    instructions = list(sample.get("language_instruction").tolist())
    for j, r in enumerate(rows):
        want = _expected_row(r)
        assert sample["observation", "state"][j].tolist() == want["state"]
        assert sample["action"][j].tolist() == want["action"]
        assert sample["episode"][j].item() == want["episode"]
        assert sample["frame"][j].item() == want["frame"]
        assert instructions[j] == want["instruction"]


class TestLeRobotSnapshot:
    def test_rows_equal_what_was_written(self, snapshot):
        rb = LeRobotExperienceReplay(
            REPO,
            root=snapshot,
            batch_size=N,
            sampler=SamplerWithoutReplacement(),
            decode_video=False,
        )
        assert len(rb) == N and rb.data_path == snapshot / REPO
        sample = rb.sample()
        rows = sample["index"].tolist()
        assert sorted(rows) == list(range(N))
        _check_rows(sample, rows)
        with pytest.raises(RuntimeError):
            rb.extend(sample)  # a dataset is read-only

    def test_slices_stay_within_episodes(self, snapshot):
        rb = LeRobotExperienceReplay(
            REPO, root=snapshot, slice_len=3, batch_size=6, decode_video=False
        )
        for _ in range(5):
            sample = rb.sample()
            for window in range(2):
                part = slice(3 * window, 3 * window + 3)
                assert sample["episode"][part].unique().numel() == 1
                frames = sample["frame"][part]
                assert (frames.diff() == 1).all()
                _check_rows(sample[part], sample["index"][part].tolist())

    def test_decoded_frames_match_the_written_ones(self, snapshot):
        rb = LeRobotExperienceReplay(REPO, root=snapshot, slice_len=4, batch_size=8)
        for _ in range(3):
            sample = rb.sample()
            rows = sample["index"].tolist()
            for camera in ("top", "wrist"):
                pixels = sample["observation", "image", camera]
                assert pixels.shape == (8, 3, 8, 12) and pixels.dtype == torch.uint8
                levels = pixels[:, :, 0, 0]
                want = torch.tensor([[_level(camera, r)] * 3 for r in rows], dtype=torch.uint8)
                torch.testing.assert_close(levels, want)

    def test_episode_selection(self, snapshot):
        rb = LeRobotExperienceReplay(REPO, root=snapshot, batch_size=4, episodes=[1])
        assert len(rb) == LENGTHS[1]
        data = rb[:]
        assert data["episode"].tolist() == [1] * LENGTHS[1]
        assert data["frame"].tolist() == list(range(LENGTHS[1]))
        assert data["observation", "state"][:, 0].tolist() == [5.0, 6.0, 7.0, 8.0]
        assert list(data.get("language_instruction").tolist()) == [TASKS[1]] * LENGTHS[1]
        levels = data["observation", "image", "wrist"][:, 0, 0, 0]  # decoded by rb[:]
        assert levels.tolist() == [_level("wrist", r) for r in range(5, 9)]

    def test_episode_selection_reads_only_their_videos(self, tmp_path, write_gray_video):
        # lerobot's episodes= is for partial downloads: the video files of the episodes
        # left out need not be on disk (v3.0: camera "wrist" has one file per episode)
        _write_snapshot(tmp_path / REPO, "v3.0", write_gray_video)
        (tmp_path / REPO / "videos/observation.images.wrist/chunk-000/file-000.mp4").unlink()
        rb = LeRobotExperienceReplay(REPO, root=tmp_path, episodes=[1])
        levels = rb[:]["observation", "image", "wrist"][:, 0, 0, 0]
        assert levels.tolist() == [_level("wrist", r) for r in range(5, 9)]

    def test_registry_routes_lerobot_ids(self, snapshot):
        rb = load_dataset(f"lerobot:{REPO}", root=snapshot, batch_size=3, decode_video=False)
        assert isinstance(rb, LeRobotExperienceReplay)
        assert len(rb) == N and rb.sample()["action"].shape == (3, 2)

    def test_key_map_renames_columns(self, snapshot):
        rb = LeRobotExperienceReplay(
            REPO,
            root=snapshot,
            decode_video=False,
            key_map={"task": "prompt", "episode_index": "traj"},
            slice_len=2,
            batch_size=4,
        )
        sample = rb.sample()
        assert "prompt" in sample.keys() and "traj" in sample.keys()
        assert sample["traj"].view(2, 2).unique(dim=1).shape[1] == 1

    def test_rehydrate_shifts_decoded_frames(self, snapshot):
        rb = LeRobotExperienceReplay(
            REPO, root=snapshot, slice_len=LENGTHS[1], batch_size=2 * LENGTHS[1], rehydrate=True
        )
        sample = rb.sample()
        rows = sample["index"].view(2, -1)
        pixels = sample["next", "observation", "image", "top"][:, 0, 0, 0].view(2, -1)
        state = sample["next", "observation", "state"][:, 0].view(2, -1)
        # inside a slice the next frame is the following row's; uint8 frames end with 0
        # and float states with NaN at a slice's end
        assert pixels[:, :-1].tolist() == [[_level("top", r) for r in w[1:]] for w in rows.tolist()]
        assert (pixels[:, -1] == 0).all() and state[:, -1].isnan().all()
        torch.testing.assert_close(state[:, :-1], rows[:, 1:].float())


class TestLeRobotErrors:
    def test_no_local_copy(self, tmp_path):
        with pytest.raises(
            RuntimeError, match=r"'user/absent' has no local copy .*downloads are unavailable"
        ):
            LeRobotExperienceReplay("user/absent", root=tmp_path)
        with pytest.raises(
            RuntimeError, match=r"'user/absent' not found \(looked in .*user/absent"
        ):
            LeRobotExperienceReplay("user/absent", root=tmp_path, download=False)

    def test_missing_files_are_named(self, tmp_path, write_gray_video):
        _write_snapshot(tmp_path / REPO, "v3.0", write_gray_video)
        video = tmp_path / REPO / "videos/observation.images.wrist/chunk-000/file-001.mp4"
        video.unlink()
        with pytest.raises(
            FileNotFoundError, match=r"file-001.mp4 of camera 'observation.images.wrist'"
        ):
            LeRobotExperienceReplay(REPO, root=tmp_path)
        shutil.rmtree(tmp_path / REPO / "meta/episodes")
        with pytest.raises(FileNotFoundError, match=r"meta/episodes is missing"):
            LeRobotExperienceReplay(REPO, root=tmp_path)
        shutil.rmtree(tmp_path / REPO / "data")
        with pytest.raises(FileNotFoundError, match=r"no data parquet file under .*data"):
            LeRobotExperienceReplay(REPO, root=tmp_path)
        (tmp_path / REPO / "meta/info.json").unlink()
        with pytest.raises(FileNotFoundError, match=r"meta/info.json is missing"):
            LeRobotExperienceReplay(REPO, root=tmp_path)

    @pytest.mark.parametrize("version", ["v1.6", "v4.0", "latest"])
    def test_unknown_version(self, tmp_path, write_gray_video, version):
        _write_snapshot(tmp_path / REPO, "v2.1", write_gray_video)
        path = tmp_path / REPO / "meta/info.json"
        info = json.loads(path.read_text())
        path.write_text(json.dumps({**info, "codebase_version": version}))
        with pytest.raises(
            ValueError, match=f"codebase_version '{version}'; LeRobot formats v2.x and v3.x"
        ):
            LeRobotExperienceReplay(REPO, root=tmp_path)

    def test_bad_episode_ids(self, snapshot):
        with pytest.raises(
            ValueError, match=r"episodes \[2, 7\] are not in the LeRobot dataset .* 0\.\.1"
        ):
            LeRobotExperienceReplay(REPO, root=snapshot, episodes=[0, 7, 2])

    def test_without_pyarrow_the_extra_is_named(self, snapshot, monkeypatch):
        monkeypatch.setitem(sys.modules, "pyarrow", None)
        monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
        with pytest.raises(ModuleNotFoundError, match=r'pip install "rl-data\[lerobot\]"'):
            LeRobotExperienceReplay(REPO, root=snapshot)

    def test_slices_and_length_together(self, snapshot):
        with pytest.raises(ValueError, match="num_slices or slice_len, not both"):
            LeRobotExperienceReplay(REPO, root=snapshot, num_slices=2, slice_len=2)


class TestFromColumns:
    def test_in_memory_columns_and_rehydrate(self):
        columns = {
            "observation.state": torch.arange(8.0).view(8, 1),
            "action": torch.zeros(8, 2),
            "episode_index": torch.arange(2).repeat_interleave(4),
            "frame_index": torch.arange(4).repeat(2),
            "task": ["pick"] * 4 + ["place"] * 4,
        }
        rb = LeRobotExperienceReplay.from_columns(
            columns,
            sampler=SliceSampler(slice_len=4, traj_key="episode"),
            batch_size=8,
            rehydrate=True,
        )
        sample = rb.sample()
        state = sample["observation", "state"].view(2, 4)
        nxt = sample["next", "observation", "state"].view(2, 4)
        # the next state is the following row inside a slice, NaN at a slice's end
        torch.testing.assert_close(nxt[:, :3], state[:, 1:])
        assert all(math.isnan(v) for v in nxt[:, 3].tolist())
