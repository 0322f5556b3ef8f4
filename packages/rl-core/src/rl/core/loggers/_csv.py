"""CSVLogger: one CSV file per scalar, videos as tensor or mp4 files; no extra dependency."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TextIO

import numpy as np
import torch
from tensordict import MemoryMappedTensor

from ._logger import Logger, as_config, to_float
from ._video import video_frames, write_video

__all__ = ["CSVLogger"]


class CSVLogger(Logger):
    """Writes ``<log_dir>/<exp_name>/scalars/<name>.csv`` (``step,value`` rows, one file per
    scalar), videos under ``videos/``, histograms under ``histograms/`` and the
    configuration as ``hparams.json``.

    Needs nothing beyond rl-core, except PyAV for mp4 videos (``rl-core[video]``). Rows are
    flushed as they are written (each scalar's file stays open between rows, as TorchRL's
    does, until :meth:`close`: one file descriptor per scalar name); a run resumed from a
    trainer checkpoint truncates each file to the rows it had at the checkpoint, so no row
    is written twice.
    ``python -m rl.core.plot <log_dir>`` draws the scalars.

    Args:
        exp_name: the experiment name (a sub-directory of ``log_dir``).
        log_dir: the root directory (default ``"csv_logs"``).
        video_format: how :meth:`log_video` saves a video, as TorchRL: ``"pt"`` (default;
            the video tensor as given, with ``torch.save``, ``<name>_<step>.pt``),
            ``"memmap"`` (the same tensor as a :class:`~tensordict.MemoryMappedTensor`
            file, ``<name>_<step>.memmap``) or ``"mp4"`` (needs PyAV).
        video_fps: frames per second of the mp4 files.

    Raises:
        ValueError: unknown ``video_format``.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> logger = CSVLogger("run", log_dir=tempfile.mkdtemp())
        >>> logger.log_scalar("r_training", 1.5, step=100)
        >>> logger.log_scalar("r_training", 2.5, step=200)
        >>> (Path(logger.experiment) / "scalars" / "r_training.csv").read_text()
        '100,1.5\\n200,2.5\\n'
    """

    def __init__(
        self,
        exp_name: str,
        log_dir: str | os.PathLike | None = None,
        video_format: Literal["pt", "memmap", "mp4"] = "pt",
        video_fps: int = 30,
    ) -> None:
        if video_format not in ("pt", "memmap", "mp4"):
            raise ValueError(
                f"CSVLogger video_format must be 'pt', 'memmap' or 'mp4', got {video_format!r}"
            )
        self.video_format = video_format
        self.video_fps = video_fps
        self._rows: dict[str, int] = defaultdict(int)
        self._videos: dict[str, int] = defaultdict(int)
        # scalar name -> its open file (append mode): one file descriptor per scalar name
        self._files: dict[str, TextIO] = {}
        super().__init__(exp_name, "csv_logs" if log_dir is None else log_dir)

    def _create_experiment(self) -> Path:
        path = Path(self.log_dir) / self.exp_name
        (path / "scalars").mkdir(parents=True, exist_ok=True)
        return path

    def _scalar_file(self, name: str) -> Path:
        return self.experiment / "scalars" / f"{name}.csv"

    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        if step is None:
            step = self._rows[name]
        f = self._files.get(name)
        if f is None or f.closed:
            path = self._scalar_file(name)
            path.parent.mkdir(parents=True, exist_ok=True)
            f = self._files[name] = open(path, "a")  # noqa: SIM115 (kept open; close())
        f.write(f"{int(step)},{to_float(value)!r}\n")
        f.flush()
        self._rows[name] += 1

    def close(self) -> None:
        """Closes the scalar files (a later :meth:`log_scalar` opens its file again)."""
        files, self._files = self._files, {}
        for f in files.values():
            f.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_files"] = {}  # open files do not pickle: a copy opens its own
        return state

    def log_video(
        self, name: str, video: Any, step: int | None = None, fps: int | None = None, **kwargs: Any
    ) -> None:
        frames = video_frames(video)  # checks the layout
        if step is None:
            step = self._videos[name]
        self._videos[name] += 1
        path = self.experiment / "videos" / f"{name}_{int(step)}.{self.video_format}"
        if self.video_format in ("pt", "memmap"):
            # the tensor as given, as TorchRL (a [N, T, C, H, W] video stays so)
            raw = video if isinstance(video, torch.Tensor) else torch.as_tensor(np.asarray(video))
            raw = raw.detach().cpu()
            path.parent.mkdir(parents=True, exist_ok=True)
            if self.video_format == "pt":
                torch.save(raw, path)
            else:
                MemoryMappedTensor.from_tensor(raw, filename=path)
        else:
            write_video(frames, path, fps or self.video_fps)

    def log_hparams(self, cfg: Any) -> None:
        path = self.experiment / "hparams.json"
        path.write_text(json.dumps(as_config(cfg), indent=2, sort_keys=True, default=str))

    def log_histogram(
        self,
        name: str,
        data: Sequence | torch.Tensor,
        step: int | None = None,
        bins: int = 64,
        **kwargs: Any,
    ) -> None:
        """Appends ``step,low,high,count_0,...,count_{bins-1}`` (equal-width bins) to
        ``histograms/<name>.csv``."""
        values = np.asarray(torch.as_tensor(data).detach().cpu().double().reshape(-1))
        counts, edges = np.histogram(values, bins=bins)
        path = self.experiment / "histograms" / f"{name}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        key = f"histogram:{name}"
        if step is None:
            step = self._rows[key]
        self._rows[key] += 1
        with open(path, "a") as f:
            f.write(
                ",".join(
                    [
                        str(int(step)),
                        repr(float(edges[0])),
                        repr(float(edges[-1])),
                        *map(str, counts),
                    ]
                )
                + "\n"
            )

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "rows": dict(self._rows), "videos": dict(self._videos)}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Truncates every scalar and histogram file to the rows it had when ``state_dict``
        was taken (rows a killed run wrote after its last checkpoint are dropped)."""
        rows = dict(state_dict.get("rows", {}))
        self.close()
        for folder in ("scalars", "histograms"):
            root = self.experiment / folder
            if not root.exists():
                continue
            for path in root.rglob("*.csv"):
                name = path.relative_to(root).with_suffix("").as_posix()
                key = name if folder == "scalars" else f"histogram:{name}"
                keep = int(rows.get(key, 0))
                with open(path) as f:
                    lines = f.readlines()
                if len(lines) > keep:
                    with open(path, "w") as f:
                        f.writelines(lines[:keep])
        self._rows = defaultdict(int, rows)
        self._videos = defaultdict(int, state_dict.get("videos", {}))

    def __repr__(self) -> str:
        return f"CSVLogger(exp_name={self.exp_name!r}, experiment={str(self.experiment)!r})"
