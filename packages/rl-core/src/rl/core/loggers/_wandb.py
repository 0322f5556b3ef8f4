"""WandbLogger: Weights & Biases runs, online or offline (``rl-core[wandb]``)."""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import sys
import tempfile
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ._logger import Logger, as_config, missing_extra, to_float
from ._video import video_frames, write_video

__all__ = ["WandbLogger"]

_has_wandb = importlib.util.find_spec("wandb") is not None


def _env_metadata() -> dict[str, Any]:
    """The Python runtime, the installed distributions' versions and the editable ones'
    source locations: what ``log_env_packages=True`` records under ``config["env"]``."""
    packages: dict[str, str] = {}
    editable: dict[str, str | None] = {}
    for dist in metadata.distributions():
        name = dist.metadata.get("Name")
        if name is None:
            continue
        packages[name] = dist.version
        direct_url = dist.read_text("direct_url.json")
        if direct_url is not None:
            info = json.loads(direct_url)
            if (info.get("dir_info") or {}).get("editable"):
                editable[name] = info.get("url")
    return {
        "python": {
            "version": sys.version,
            "executable": sys.executable,
            "prefix": sys.prefix,
            "base_prefix": sys.base_prefix,
            "platform": platform.platform(),
        },
        "packages": dict(sorted(packages.items())),
        "editable_sources": dict(sorted(editable.items())),
    }


class WandbLogger(Logger):
    """Logs to a W&B run; ``offline=True`` writes the run under ``save_dir`` with no network
    (upload it later with ``wandb sync``).

    Args:
        exp_name: the run name.
        offline: keep the run local.
        save_dir: where W&B writes its files (``log_dir`` is accepted as an alias).
        id: the run id (to resume a run).
        project: the W&B project.
        base_url: the W&B server URL (a self-hosted server): set as the run's
            ``wandb.Settings(base_url=...)`` (merged into a ``settings`` keyword if one is
            given), and, online, logged in to with ``wandb.login(host=base_url)``.

    Keyword Args:
        video_fps: frames per second of logged videos (32, as TorchRL).
        log_env_packages: record the Python runtime, the installed packages' versions and
            the editable installs' source locations under ``config["env"]`` (default
            ``True``, as TorchRL).
        **kwargs: passed to ``wandb.init``.

    Raises:
        ImportError: wandb is not installed (``pip install "rl-core[wandb]"``).
        ValueError: both ``save_dir`` and ``log_dir`` are given.

    Examples:
        >>> logger = WandbLogger("run", offline=True, save_dir="/tmp/wandb", project="rl")  # doctest: +SKIP
        >>> logger.log_scalar("r_training", 1.0, step=100)  # doctest: +SKIP
    """

    def __init__(
        self,
        exp_name: str,
        offline: bool = False,
        save_dir: str | os.PathLike | None = None,
        id: str | None = None,
        project: str | None = None,
        base_url: str | None = None,
        *,
        video_fps: int = 32,
        log_env_packages: bool = True,
        **kwargs: Any,
    ) -> None:
        log_dir = kwargs.pop("log_dir", None)
        if save_dir is not None and log_dir is not None:
            raise ValueError("WandbLogger: pass save_dir or log_dir, not both")
        save_dir = save_dir if save_dir is not None else log_dir
        if save_dir is not None:
            save_dir = os.path.expanduser(os.fspath(save_dir))
            os.makedirs(save_dir, exist_ok=True)
        self.offline = offline
        self.save_dir = save_dir
        self.id = id
        self.project = project
        self.base_url = base_url
        self.video_fps = video_fps
        self.log_env_packages = log_env_packages
        self._wandb_kwargs = {
            "name": exp_name,
            "dir": save_dir,
            "id": id,
            "project": project,
            "resume": "allow",
            **kwargs,
        }
        if offline:
            self._wandb_kwargs["mode"] = "offline"
        super().__init__(exp_name, save_dir)
        if log_env_packages:
            self.experiment.config.update({"env": _env_metadata()}, allow_val_change=True)

    def _create_experiment(self) -> Any:
        if not _has_wandb:
            raise missing_extra("WandbLogger", "wandb", "wandb")
        import wandb

        if self.base_url is not None:
            settings = self._wandb_kwargs.get("settings")
            if settings is None:
                settings = wandb.Settings(base_url=self.base_url)
            elif isinstance(settings, Mapping):
                settings = wandb.Settings(**{**settings, "base_url": self.base_url})
            else:
                settings.base_url = self.base_url
            self._wandb_kwargs["settings"] = settings
            if not self.offline:
                wandb.login(host=self.base_url, key=getattr(settings, "api_key", None))
        return wandb.init(**self._wandb_kwargs)

    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        self.experiment.log({name: to_float(value)}, step=step)

    def log_video(
        self, name: str, video: Any, step: int | None = None, fps: int | None = None, **kwargs: Any
    ) -> None:
        import wandb

        frames = video_frames(video)
        with tempfile.TemporaryDirectory() as tmp:
            path = write_video(
                frames, Path(tmp) / f"{name.replace('/', '_')}.mp4", fps or self.video_fps
            )
            self.experiment.log({name: wandb.Video(str(path), format="mp4")}, step=step)

    def log_hparams(self, cfg: Any) -> None:
        self.experiment.config.update(as_config(cfg), allow_val_change=True)

    def log_histogram(
        self,
        name: str,
        data: Sequence | torch.Tensor,
        step: int | None = None,
        bins: int = 64,
        **kwargs: Any,
    ) -> None:
        import wandb

        values = np.asarray(torch.as_tensor(data).detach().cpu().double().reshape(-1))
        hist = wandb.Histogram(np_histogram=np.histogram(values, bins=bins))
        self.experiment.log({name: hist}, step=step)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "id": self.experiment.id}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        saved = state_dict.get("id")
        if saved and saved != self.experiment.id:
            raise RuntimeError(
                f"this WandbLogger writes run {self.experiment.id!r} but the checkpoint was "
                f"written by run {saved!r}: build the logger with id={saved!r} to continue it"
            )

    def close(self) -> None:
        self.experiment.finish()

    def __repr__(self) -> str:
        return f"WandbLogger(exp_name={self.exp_name!r}, offline={self.offline}, save_dir={self.save_dir!r})"
