"""Logger: the interface every logging back-end implements, and the value helpers they share."""

from __future__ import annotations

import abc
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from rl.core._service_backend import normalize_service_backend

__all__ = ["Logger"]


def missing_extra(what: str, module: str, extra: str) -> ImportError:
    """The error for a back-end that is not installed, naming the extra that installs it."""
    return ImportError(
        f'{what} needs {module}, which is not installed: pip install "rl-core[{extra}]"'
    )


def to_float(value: Any) -> float:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"log_scalar expects one value, got a tensor of shape {tuple(value.shape)}"
            )
        return float(value.detach().cpu().item())
    return float(value)


def flatten_dict(cfg: Mapping, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``."""
    out: dict[str, Any] = {}
    for key, value in cfg.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten_dict(value, f"{name}."))
        else:
            out[name] = value
    return out


def as_config(cfg: Any) -> dict[str, Any]:
    """A mapping, a dataclass or an argparse namespace as a plain dict."""
    import dataclasses

    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return dataclasses.asdict(cfg)
    if isinstance(cfg, Mapping):
        return dict(cfg)
    if hasattr(cfg, "__dict__"):
        return dict(vars(cfg))
    raise TypeError(f"log_hparams expects a mapping or a dataclass, got {type(cfg).__name__}")


_PROCESS_OPTIONS = ("mp_context", "max_queue_size", "startup_timeout")


_RAY_OPTIONS = ("actor_options", "ray_init_config")


def service_backend_options_for(
    service_backend: str,
    service_backend_options: Mapping[str, Any] | None,
    use_ray_service: bool = False,
    ray_actor_options: Mapping[str, Any] | None = None,
) -> tuple[str, dict[str, Any]]:
    """The checked ``(back-end, options)`` of a logger built with ``service_backend=...``.

    ``"direct"`` takes no option; ``"process"`` takes ``context`` (or ``mp_context``),
    ``max_queue_size`` and ``startup_timeout`` (returned with ``context`` as
    ``mp_context``); ``"ray"`` (or ``use_ray_service=True``) takes ``actor_options`` and
    ``ray_init_config`` (``ray_actor_options`` is TorchRL's older ``actor_options``).
    """
    if ray_actor_options is not None and service_backend_options:
        raise ValueError("ray_actor_options and service_backend_options are mutually exclusive")
    backend = "ray" if use_ray_service else normalize_service_backend(service_backend)
    if backend not in ("direct", "process", "ray"):
        raise ValueError(f"Logger does not support service_backend={backend!r}")
    options = dict(service_backend_options or {})
    if backend == "direct":
        if options or ray_actor_options is not None:
            raise ValueError(
                "service_backend_options / ray_actor_options configure a 'process' or 'ray' "
                "logger service; the 'direct' back-end takes none"
            )
        return backend, options
    if backend == "ray":
        if ray_actor_options is not None:
            options["actor_options"] = dict(ray_actor_options)
        unknown = sorted(set(options) - set(_RAY_OPTIONS))
        if unknown:
            raise ValueError(
                f"the 'ray' logger service takes actor_options and ray_init_config, got {unknown}"
            )
        return backend, options
    if "context" in options:
        if "mp_context" in options:
            raise ValueError(
                "service_backend_options takes one of 'context' and 'mp_context', got both"
            )
        options["mp_context"] = options.pop("context")
    unknown = sorted(set(options) - set(_PROCESS_OPTIONS))
    if unknown or ray_actor_options is not None:
        raise ValueError(
            "the 'process' logger service takes context / mp_context, max_queue_size and "
            f"startup_timeout, got {unknown or ['ray_actor_options']}"
        )
    return backend, options


class _LoggerType(abc.ABCMeta):
    """Builds a logger where ``service_backend=`` asks, as TorchRL's loggers.

    ``CSVLogger(..., service_backend="process")`` is a :class:`ProcessLogger` serving a
    ``CSVLogger`` (and ``isinstance(logger, CSVLogger)`` holds for it and its clients),
    ``"ray"`` a :class:`RayLogger`; ``"direct"`` (the default) builds the logger itself.
    """

    def __call__(
        cls,
        *args: Any,
        service_backend: str = "direct",
        service_backend_options: Mapping[str, Any] | None = None,
        use_ray_service: bool = False,
        ray_actor_options: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        backend, options = service_backend_options_for(
            service_backend, service_backend_options, use_ray_service, ray_actor_options
        )
        if backend == "direct":
            return super().__call__(*args, **kwargs)
        if backend == "ray":
            from ._ray import RayLogger

            return RayLogger(
                cls,
                *args,
                ray_actor_options=options.get("actor_options"),
                ray_init_config=options.get("ray_init_config"),
                **kwargs,
            )
        from ._process import ProcessLogger

        return ProcessLogger(cls, *args, **options, **kwargs)

    def __instancecheck__(cls, instance: Any) -> bool:
        if super().__instancecheck__(instance):
            return True
        served = getattr(instance, "served_class", None)
        return isinstance(served, type) and issubclass(served, cls)


class Logger(metaclass=_LoggerType):
    """One interface over the logging back-ends (``torchrl.record.loggers.Logger``).

    Subclasses create their back-end's run in :meth:`_create_experiment` and implement
    :meth:`log_scalar`, :meth:`log_video`, :meth:`log_hparams` and :meth:`log_histogram`.
    :meth:`state_dict` / :meth:`load_state_dict` keep what a resumed run needs to continue
    the same logs (the trainer's checkpoints hold them).

    Every logger also takes TorchRL's construction keywords ``service_backend`` (``"direct"``,
    the default; ``"process"``: the logger is then built in its own process and a
    :class:`ProcessLogger` is returned; ``"ray"``: it is built in a Ray actor and a
    :class:`RayLogger` is returned) and ``service_backend_options`` (``context``,
    ``max_queue_size``, ``startup_timeout`` for a process; ``actor_options``,
    ``ray_init_config`` for Ray).

    Args:
        exp_name: the experiment (run) name.
        log_dir: where the back-end writes.
    """

    def __init__(self, exp_name: str, log_dir: str | os.PathLike | None) -> None:
        self.exp_name = exp_name
        self.log_dir = log_dir
        self.experiment = self._create_experiment()

    # TorchRL's service life cycle, for a logger that runs in the calling process: code
    # written for a logger service (a ProcessLogger) runs unchanged with a direct logger
    @property
    def service_backend(self) -> str:
        """``"direct"``: this logger runs in the calling process."""
        return "direct"

    @property
    def is_alive(self) -> bool:
        """Whether :meth:`shutdown` has not been called yet."""
        return not getattr(self, "_shut_down", False)

    def start(self) -> Logger:
        """Returns this logger (a direct logger is started when built).

        Raises:
            RuntimeError: the logger was shut down.
        """
        if not self.is_alive:
            raise RuntimeError(f"{type(self).__name__} was shut down and cannot be started again")
        return self

    def client(self) -> Logger:
        """Returns this logger: a direct logger is its own client."""
        return self

    def flush(self, timeout: float | None = None) -> None:
        """Flushes the back-end's run when it has a ``flush`` (``timeout`` is not used)."""
        flush = getattr(self.experiment, "flush", None)
        if callable(flush):
            flush()

    def shutdown(self, timeout: float | None = None) -> None:
        """Flushes and closes the back-end's run (:meth:`close`) once; later calls do nothing."""
        if not self.is_alive:
            return
        self.flush()
        self.close()
        self._shut_down = True

    @abc.abstractmethod
    def _create_experiment(self) -> Any: ...

    @abc.abstractmethod
    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        """Logs one scalar ``value`` under ``name`` at ``step``."""

    @abc.abstractmethod
    def log_video(self, name: str, video: Any, step: int | None = None, **kwargs: Any) -> None:
        """Logs a video (see :func:`video_frames` for the accepted layouts)."""

    @abc.abstractmethod
    def log_hparams(self, cfg: Any) -> None:
        """Logs the run's configuration (a mapping or a dataclass)."""

    @abc.abstractmethod
    def log_histogram(self, name: str, data: Sequence | torch.Tensor, **kwargs: Any) -> None:
        """Logs the histogram of ``data`` (keyword ``step``, ``bins``)."""

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Logs several scalars at the same step."""
        for name, value in metrics.items():
            self.log_scalar(name, value, step=step)

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to continue these logs (plain values)."""
        return {
            "exp_name": self.exp_name,
            "log_dir": None if self.log_dir is None else str(self.log_dir),
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        return None

    def close(self) -> None:
        """Flushes and closes the back-end's run."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(exp_name={self.exp_name!r}, log_dir={str(self.log_dir)!r})"
