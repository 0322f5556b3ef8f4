"""The client side of a logger service: a picklable handle whose ``log_*`` calls run where
the logger lives (a process of its own: ``ProcessLogger``; a Ray actor: ``RayLogger``).

A service defines how one call travels (``_call``); the handle, the values it sends and
the description of the served logger are the same for every service.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

__all__: list[str] = []


def as_plain(value: Any) -> Any:
    """A tensor as a Python number (one element) or a list; anything else as it is."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return value.item() if value.numel() == 1 else value.tolist()
    return value


def flush_logger(logger: Any) -> None:
    """Flushes a served logger (its ``flush``, or its run's)."""
    for owner in (logger, getattr(logger, "experiment", None)):
        flush = getattr(owner, "flush", None)
        if callable(flush):
            flush()
            return


def close_logger(logger: Any) -> None:
    """Flushes and closes a served logger."""
    flush_logger(logger)
    close = getattr(logger, "close", None)
    if callable(close):
        close()


def _describe(value: Any, cls: type) -> str:
    try:
        return repr(value)
    except Exception:
        return f"{cls.__name__}(...)"


def logger_meta(logger: Any, logger_cls: type) -> dict[str, Any]:
    """What a service reports about the logger it built, for its clients."""
    experiment = getattr(logger, "experiment", None)
    return {
        "exp_name": getattr(logger, "exp_name", None),
        "log_dir": getattr(logger, "log_dir", None),
        # a run directory (CSVLogger's) is usable anywhere; a run object (a SummaryWriter,
        # a wandb run) only where the logger lives, so only its type travels
        "experiment": experiment if isinstance(experiment, (str, os.PathLike)) else None,
        "experiment_type": type(experiment).__name__,
        "repr": _describe(logger, logger_cls),
    }


class LoggerClient(abc.ABC):
    """A handle on a served logger: picklable, without the service's life cycle.

    Its ``log_*`` calls (any ``log_*`` method of the served logger, including custom ones)
    run where the logger lives and return what the logger returned; a call that fails
    there raises ``RuntimeError`` here. It is not a :class:`Logger` subclass, but
    ``isinstance(client, Logger)`` (or ``CSVLogger``...) holds when the served class is one.

    ``exp_name`` and ``log_dir`` are the served logger's. ``experiment`` is its run
    directory when the served logger's ``experiment`` is a path (:class:`CSVLogger`: the
    ``<log_dir>/<exp_name>`` folder); a run object (TensorBoard's writer, a W&B run) lives
    with the logger only, and reading it raises ``AttributeError`` saying so.
    ``repr()`` is local: the served logger's ``repr`` when it was built.
    """

    #: where the served logger lives, as messages name it
    _where = "the logger service"
    #: the name ``repr()`` gives this kind of handle
    _kind = "LoggerClient"

    def __init__(self, *, served_class: type) -> None:
        #: the class of the served logger (``isinstance`` checks against it hold)
        self.served_class = served_class
        self.exp_name: Any = None
        self.log_dir: Any = None
        self._experiment_type: str | None = None
        self._served_repr = f"{served_class.__name__}(...)"

    @abc.abstractmethod
    def _call(self, method: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        """Runs ``method`` of the served logger and returns its result."""

    @abc.abstractmethod
    def close(self) -> None:
        """Closes this handle (the served logger keeps running)."""

    def _set_meta(self, meta: Mapping[str, Any]) -> None:
        """Takes what the service reported once its logger was built."""
        self.exp_name, self.log_dir = meta["exp_name"], meta["log_dir"]
        self._experiment_type = meta["experiment_type"]
        self._served_repr = meta["repr"]
        if meta["experiment"] is None:
            self.__dict__.pop("experiment", None)  # reads go to __getattr__, which explains
        else:
            self.experiment = meta["experiment"]

    def _meta(self) -> dict[str, Any]:
        return {
            "exp_name": self.exp_name,
            "log_dir": self.log_dir,
            "experiment": self.__dict__.get("experiment"),
            "experiment_type": self._experiment_type,
            "repr": self._served_repr,
        }

    def log_scalar(self, name: str, value: float, step: int | None = None, **kwargs: Any) -> None:
        """Logs one scalar where the logger lives."""
        return self._call("log_scalar", name, as_plain(value), step=step, **kwargs)

    def log_video(self, name: str, video: Any, step: int | None = None, **kwargs: Any) -> None:
        """Logs a video where the logger lives (a tensor travels as a CPU tensor)."""
        if isinstance(video, torch.Tensor):
            video = video.detach().cpu()
        return self._call("log_video", name, video, step=step, **kwargs)

    def log_hparams(self, cfg: Any) -> None:
        """Logs the run's configuration where the logger lives."""
        return self._call("log_hparams", cfg)

    def log_histogram(self, name: str, data: Sequence | torch.Tensor, **kwargs: Any) -> None:
        """Logs a histogram where the logger lives."""
        return self._call("log_histogram", name, as_plain(data), **kwargs)

    def log_metrics(
        self, metrics: Mapping[str, Any], step: int | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Logs several scalars at ``step`` where the logger lives.

        Tensors become Python numbers (or lists) here, before they travel.

        Returns:
            the metrics as sent.
        """
        plain = {key: as_plain(value) for key, value in metrics.items()}
        self._call("log_metrics", plain, step=step, **kwargs)
        return plain

    def state_dict(self) -> dict[str, Any]:
        """The served logger's :meth:`~Logger.state_dict`."""
        return self._call("state_dict")

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restores the served logger's state (:meth:`~Logger.load_state_dict`)."""
        return self._call("load_state_dict", dict(state_dict))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("served_class", "_experiment_type"):
            raise AttributeError(name)  # (read before __init__ / __setstate__ ran)
        if name == "experiment":
            served = self.served_class.__name__
            if self._experiment_type in (None, "NoneType"):
                raise AttributeError(f"the served {served} has no experiment")
            raise AttributeError(
                f"{type(self).__name__} has no experiment: the served {served}'s experiment "
                f"(a {self._experiment_type}) lives in {self._where}; log through the "
                "log_* methods (exp_name and log_dir are available here)"
            )
        if not name.startswith("log_"):
            raise AttributeError(
                f"{type(self).__name__} has no attribute {name!r}: only the logger's log_* "
                "methods are served"
            )

        def remote(*args: Any, **kwargs: Any) -> Any:
            return self._call(name, *args, **kwargs)

        remote.__name__ = name
        return remote

    def __repr__(self) -> str:
        return f"{self._kind}({self._served_repr})"
