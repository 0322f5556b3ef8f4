"""MLFlowLogger: MLflow runs in a tracking store, e.g. a local directory (``rl-core[mlflow]``)."""

from __future__ import annotations

import importlib.util
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import torch

from ._logger import Logger, as_config, flatten_dict, missing_extra, to_float
from ._video import video_frames, write_video

__all__ = ["MLFlowLogger"]

_has_mlflow = importlib.util.find_spec("mlflow") is not None


def _is_local(uri: str) -> bool:
    scheme = urlparse(uri).scheme
    return scheme in ("", "file") or len(scheme) == 1  # a bare path (or a Windows drive)


class MLFlowLogger(Logger):
    """Logs to an MLflow run of experiment ``exp_name`` through an ``MlflowClient`` (no global
    "active run" is touched).

    ``tracking_uri`` may be a local directory (or ``file:`` URI): MLflow's file store, which
    MLflow keeps in maintenance mode behind ``MLFLOW_ALLOW_FILE_STORE``, is allowed for it;
    a database (``sqlite:///mlflow.db``) or server URI is used as is.

    Args:
        exp_name: the experiment name (created when missing).
        tracking_uri: the tracking store.
        tags: tags of the run.

    Keyword Args:
        artifact_location: where the experiment stores its runs' artifacts (videos,
            histograms), used when the experiment is created; ``None`` (default): MLflow's
            default, or ``tracking_uri`` itself when it is given as a ``file:`` URI (as
            TorchRL).
        video_fps: frames per second of logged videos.
        run_id: continue this run instead of starting one.

    Raises:
        ImportError: mlflow is not installed (``pip install "rl-core[mlflow]"``).

    Examples:
        >>> logger = MLFlowLogger("run", tracking_uri="/tmp/mlruns")  # doctest: +SKIP
        >>> logger.log_scalar("loss", 0.5, step=1)  # doctest: +SKIP
    """

    def __init__(
        self,
        exp_name: str,
        tracking_uri: str | os.PathLike,
        tags: dict[str, Any] | None = None,
        *,
        artifact_location: str | None = None,
        video_fps: int = 30,
        run_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        uri = os.fspath(tracking_uri)
        if artifact_location is None and uri.startswith("file:"):
            artifact_location = uri
        self.artifact_location = artifact_location
        if _is_local(uri) and not uri.startswith("file:"):
            uri = Path(uri).resolve().as_uri()
        self.tracking_uri = uri
        self.tags = dict(tags or {})
        self.video_fps = video_fps
        self._run_id = run_id
        super().__init__(exp_name, uri)

    def _create_experiment(self) -> Any:
        if not _has_mlflow:
            raise missing_extra("MLFlowLogger", "mlflow", "mlflow")
        if _is_local(self.tracking_uri):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=self.tracking_uri)
        if self._run_id is not None:
            return self.client.get_run(self._run_id)
        experiment = self.client.get_experiment_by_name(self.exp_name)
        exp_id = (
            experiment.experiment_id
            if experiment is not None
            else self.client.create_experiment(
                self.exp_name, artifact_location=self.artifact_location
            )
        )
        tags = {k: str(v) for k, v in self.tags.items()}
        return self.client.create_run(exp_id, tags=tags, run_name=self.exp_name)

    @property
    def run_id(self) -> str:
        return self.experiment.info.run_id

    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        self.client.log_metric(self.run_id, name, to_float(value), step=step)

    def log_video(
        self, name: str, video: Any, step: int | None = None, fps: int | None = None, **kwargs: Any
    ) -> None:
        frames = video_frames(video)
        stem = name.replace("/", "_") + (f"_step_{int(step)}" if step is not None else "")
        with tempfile.TemporaryDirectory() as tmp:
            path = write_video(frames, Path(tmp) / f"{stem}.mp4", fps or self.video_fps)
            self.client.log_artifact(self.run_id, str(path), "videos")

    def log_hparams(self, cfg: Any) -> None:
        for key, value in flatten_dict(as_config(cfg)).items():
            self.client.log_param(self.run_id, key, value)

    def log_histogram(
        self,
        name: str,
        data: Sequence | torch.Tensor,
        step: int | None = None,
        bins: int = 64,
        **kwargs: Any,
    ) -> None:
        """Logs ``histograms/<name>[_step_<step>].json`` (bin edges and counts) as an artifact:
        MLflow has no histogram type."""
        values = np.asarray(torch.as_tensor(data).detach().cpu().double().reshape(-1))
        counts, edges = np.histogram(values, bins=bins)
        stem = name.replace("/", "_") + (f"_step_{int(step)}" if step is not None else "")
        self.client.log_dict(
            self.run_id,
            {"step": step, "edges": edges.tolist(), "counts": counts.tolist()},
            f"histograms/{stem}.json",
        )

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "run_id": self.run_id}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        saved = state_dict.get("run_id")
        if saved and saved != self.run_id:
            raise RuntimeError(
                f"this MLFlowLogger writes run {self.run_id!r} but the checkpoint was written by "
                f"run {saved!r}: build the logger with run_id={saved!r} to continue it"
            )

    def close(self) -> None:
        self.client.set_terminated(self.run_id)

    def __repr__(self) -> str:
        return f"MLFlowLogger(exp_name={self.exp_name!r}, tracking_uri={self.tracking_uri!r})"
