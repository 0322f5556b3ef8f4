"""``_LeRobotSnapshot``: reads a LeRobot dataset folder (format v2.x or v3.x) from disk.

A LeRobot dataset as the Hugging Face hub serves it is a folder::

    meta/info.json                 codebase_version, fps, features, data/video path templates
    meta/tasks.jsonl               v2.x: {"task_index", "task"} per line
    meta/tasks.parquet             v3.x: a task_index column, the text as column or index
    meta/episodes.jsonl            v2.x: {"episode_index", "tasks", "length"} per line
    meta/episodes/*/*.parquet      v3.x: the same, plus where each camera's frames are
    data/**/*.parquet              one row per frame: state, action, indices, timestamp
    videos/**/*.mp4                one file per camera and episode (v2.x), or per camera
                                   and chunk, episodes back to back (v3.x)

pyarrow reads the parquet files (``pip install "rl-data[lerobot]"``); neither ``lerobot``
nor ``huggingface_hub`` is needed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

logger = logging.getLogger(__name__)

_SUPPORTED_MAJOR_VERSIONS = (2, 3)


def _import_parquet():
    try:
        import pyarrow as pa  # noqa: PLC0415 - optional back-end, imported where used
        import pyarrow.parquet as pq  # noqa: PLC0415
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            'reading a LeRobot dataset needs pyarrow: pip install "rl-data[lerobot]"'
        ) from err
    return pa, pq


def _read_jsonl(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _arrow_column(name: str, column: Any) -> torch.Tensor | list[str] | None:
    """A parquet column as a ``[N, ...]`` tensor, a list of strings, or None (skipped)."""
    pa, _ = _import_parquet()
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return column.to_pylist()
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
        return torch.from_numpy(np.asarray(column.to_numpy(zero_copy_only=False)).copy())
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        values = column.to_numpy(zero_copy_only=False)
        try:
            return torch.from_numpy(np.stack([np.asarray(v) for v in values]))
        except (ValueError, TypeError):
            pass
    logger.warning(
        "LeRobotExperienceReplay: skipping column %r of type %s, which is not a number, a "
        "string or a fixed-length list of numbers",
        name,
        kind,
    )
    return None


class _LeRobotSnapshot:
    """The frames, tasks, episodes and video files of a LeRobot dataset folder.

    Args:
        root: the dataset folder (the one holding ``meta/info.json``).
        episodes: keep only these episode indices (default: all).

    Raises:
        FileNotFoundError: a file the format requires is missing (named).
        ValueError: an unsupported ``codebase_version``, or episode ids the dataset does
            not have.
    """

    def __init__(self, root: str | Path, episodes: Sequence[int] | None = None) -> None:
        self.root = Path(root)
        info_path = self.root / "meta" / "info.json"
        if not info_path.is_file():
            raise FileNotFoundError(
                f"{info_path} is missing: a LeRobot dataset folder holds meta/info.json"
            )
        with open(info_path) as f:
            self.info = json.load(f)
        # TorchRL reads a file without a version as the current format, v3
        version = str(self.info.get("codebase_version", "v3.0"))
        try:
            self.major_version = int(version.lstrip("v").split(".")[0])
        except ValueError:
            self.major_version = None
        if self.major_version not in _SUPPORTED_MAJOR_VERSIONS:
            raise ValueError(
                f"{info_path} has codebase_version {version!r}; LeRobot formats v2.x and "
                "v3.x are supported"
            )
        self.version = version
        self.fps = float(self.info["fps"])
        features = self.info.get("features", {})
        self.video_keys = [k for k, f in features.items() if f.get("dtype") == "video"]
        self.tasks = self._load_tasks()
        self.episodes = self._load_episodes()
        self.columns = self._load_frames()
        if episodes is not None:
            self._select(episodes)

    # -- metadata ---------------------------------------------------------------------
    def _load_tasks(self) -> dict[int, str]:
        meta = self.root / "meta"
        if (meta / "tasks.parquet").is_file():
            _, pq = _import_parquet()
            tasks = {}
            for row in pq.read_table(meta / "tasks.parquet").to_pylist():
                # lerobot writes the task text as the pandas index of the table
                text = row.get("task", row.get("__index_level_0__"))
                if row.get("task_index") is not None and isinstance(text, str):
                    tasks[int(row["task_index"])] = text
            return tasks
        if (meta / "tasks.jsonl").is_file():
            return {int(r["task_index"]): str(r["task"]) for r in _read_jsonl(meta / "tasks.jsonl")}
        return {}

    def _load_episodes(self) -> list[dict] | None:
        meta = self.root / "meta"
        if (meta / "episodes").is_dir():
            _, pq = _import_parquet()
            rows = []
            for file in sorted((meta / "episodes").rglob("*.parquet")):
                rows.extend(pq.read_table(file).to_pylist())
        elif (meta / "episodes.jsonl").is_file():
            rows = _read_jsonl(meta / "episodes.jsonl")
        else:
            return None
        return sorted(rows, key=lambda row: int(row["episode_index"]))

    def _load_frames(self) -> dict[str, Any]:
        pa, pq = _import_parquet()
        files = sorted((self.root / "data").rglob("*.parquet"))
        if not files:
            raise FileNotFoundError(
                f"no data parquet file under {self.root / 'data'}: a LeRobot dataset keeps "
                "its frames in data/**/*.parquet"
            )
        table = pa.concat_tables([pq.read_table(file) for file in files], promote_options="default")
        if "index" in table.column_names:
            table = table.sort_by("index")
        elif {"episode_index", "frame_index"} <= set(table.column_names):
            table = table.sort_by([("episode_index", "ascending"), ("frame_index", "ascending")])
        columns = {}
        for name in table.column_names:
            value = _arrow_column(name, table.column(name))
            if value is not None:
                columns[name] = value
        if "episode_index" not in columns:
            raise ValueError(
                f"the data parquet files under {self.root / 'data'} have no 'episode_index' "
                f"column (columns {table.column_names})"
            )
        return columns

    def _select(self, episodes: Sequence[int]) -> None:
        wanted = torch.as_tensor(list(episodes), dtype=torch.long).reshape(-1)
        present = self.columns["episode_index"].long()
        missing = sorted(set(wanted.tolist()) - set(present.unique().tolist()))
        if missing:
            raise ValueError(
                f"episodes {missing} are not in the LeRobot dataset at {self.root}, which "
                f"holds episodes {present.min().item()}..{present.max().item()} "
                f"({present.unique().numel()} episodes)"
            )
        rows = torch.isin(present, wanted).nonzero().squeeze(-1)
        self.columns = {
            name: value[rows]
            if isinstance(value, torch.Tensor)
            else [value[i] for i in rows.tolist()]
            for name, value in self.columns.items()
        }

    # -- videos -----------------------------------------------------------------------
    def video_frames(self, key: str) -> tuple[list[str], torch.Tensor, torch.Tensor]:
        """Where each row's frame of camera ``key`` is: ``(paths, file_id, frame_index)``.

        A row's frame sits at ``from_timestamp + timestamp`` seconds of its file
        (``from_timestamp`` is 0 for v2.x, where each episode has its own file), as
        lerobot reads it; without a ``timestamp`` column the ``frame_index`` is used.

        Raises:
            FileNotFoundError: the episode metadata or a video file is missing.
        """
        episode = self.columns["episode_index"].long()
        if "timestamp" in self.columns:
            offset = self.columns["timestamp"].double()
        elif "frame_index" in self.columns:
            offset = self.columns["frame_index"].double() / self.fps
        else:
            raise ValueError(
                f"the LeRobot dataset at {self.root} has neither a 'timestamp' nor a "
                f"'frame_index' column to place the frames of video {key!r}"
            )
        template = self.info.get("video_path")
        if template is None:
            raise ValueError(f"{self.root / 'meta' / 'info.json'} has no 'video_path' template")
        by_episode: dict[int, tuple[str, float]] = {}
        # only the episodes read (``episodes=``): the files of the others may be absent
        present = set(episode.unique().tolist())
        if self.major_version >= 3:
            if self.episodes is None:
                raise FileNotFoundError(
                    f"{self.root / 'meta' / 'episodes'} is missing: a v3 LeRobot dataset "
                    f"says there which file holds each episode of video {key!r}"
                )
            for row in self.episodes:
                if int(row["episode_index"]) not in present:
                    continue
                path = template.format(
                    video_key=key,
                    chunk_index=int(row[f"videos/{key}/chunk_index"]),
                    file_index=int(row[f"videos/{key}/file_index"]),
                )
                start = float(row.get(f"videos/{key}/from_timestamp") or 0.0)
                by_episode[int(row["episode_index"])] = (path, start)
        else:
            chunks_size = int(self.info.get("chunks_size", 1000))
            for e in sorted(present):
                path = template.format(
                    episode_chunk=e // chunks_size, video_key=key, episode_index=e
                )
                by_episode[e] = (path, 0.0)
        unknown = sorted(present - set(by_episode))
        if unknown:
            raise ValueError(
                f"episodes {unknown} of the LeRobot dataset at {self.root} have no entry in "
                f"its episode metadata, so the frames of video {key!r} cannot be found"
            )
        paths: list[str] = []
        file_of: dict[str, int] = {}
        starts = torch.zeros(max(by_episode) + 1, dtype=torch.float64)
        files = torch.zeros_like(starts, dtype=torch.long)
        for e, (path, start) in by_episode.items():
            full = str(self.root / path)
            if full not in file_of:
                if not Path(full).is_file():
                    raise FileNotFoundError(
                        f"video file {full} of camera {key!r} (episode {e}) is missing"
                    )
                file_of[full] = len(paths)
                paths.append(full)
            files[e] = file_of[full]
            starts[e] = start
        frame_index = torch.round((starts[episode] + offset) * self.fps).long()
        return paths, files[episode], frame_index
