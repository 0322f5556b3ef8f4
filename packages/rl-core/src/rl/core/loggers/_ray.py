"""RayLogger: one logger built and run in a Ray actor, fed by picklable clients.

The same service as :class:`ProcessLogger`, with a Ray actor in place of the logger
process: the owner builds the actor, which builds the logger once; each client (in any
Ray worker or process of the driver's cluster) waits for the answer of every call, so a
client's calls reach the logger in the order it made them and a failure in the logger is
raised at the call that caused it.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

from rl.core.ray_runtime import acquire_runtime, import_ray, release_runtime

from ._client import LoggerClient, close_logger, flush_logger, logger_meta

__all__ = ["RayLogger"]

_EXTRA = "rl-core[ray]"


class _LoggerActor:
    """The Ray actor's class: builds the logger and runs the calls its clients send."""

    def __init__(self, logger_cls: type, args: tuple, kwargs: dict[str, Any]) -> None:
        self._cls = logger_cls
        self._logger = logger_cls(*args, **kwargs)

    def meta(self) -> dict[str, Any]:
        return logger_meta(self._logger, self._cls)

    def call(self, method: str, args: tuple, kwargs: dict[str, Any]) -> tuple[bool, Any]:
        """``(True, result)``, or ``(False, message)`` when the logger's method failed."""
        try:
            if method == "flush":
                return True, flush_logger(self._logger)
            if method == "close":
                return True, close_logger(self._logger)
            return True, getattr(self._logger, method)(*args, **kwargs)
        except Exception as err:
            return False, f"{self._cls.__name__}.{method} failed in the Ray actor: {err!r}"


def _kill(ray: Any, actor: Any, held: bool) -> None:
    """Ends the actor of an owner that was not shut down, and gives its runtime lease back."""
    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # the runtime is already gone
        pass
    release_runtime(ray, held)


class _RayLoggerClient(LoggerClient):
    """A handle on a :class:`RayLogger`'s logger: picklable (it holds the actor's handle),
    without the service's life cycle; ``close()`` does nothing."""

    _where = "the Ray actor"
    _kind = "RayLoggerClient"

    def __init__(self, actor: Any, *, served_class: type) -> None:
        super().__init__(served_class=served_class)
        self._actor = actor

    def _not_running(self) -> str:
        return "the RayLogger's actor is not running (it died or was shut down)"

    def _call(self, method: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        ray = import_ray("RayLogger", _EXTRA)
        if self._actor is None:
            raise RuntimeError(self._not_running())
        try:
            ok, result = ray.get(self._actor.call.remote(method, args, kwargs), timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise TimeoutError(
                f"the RayLogger's actor did not answer {method} within {timeout} s"
            ) from None
        except ray.exceptions.RayActorError as err:
            raise RuntimeError(f"{self._not_running()}: {err}") from None
        if not ok:
            raise RuntimeError(result)
        return result

    def close(self) -> None:
        """Does nothing: a Ray handle holds no connection (the logger keeps running)."""


class RayLogger(_RayLoggerClient):
    """Runs a logger in a Ray actor; :meth:`client` gives handles for Ray workers.

    ``logger_cls(*args, **kwargs)`` is built once, in the actor. This owner logs like the
    logger itself (``log_scalar``, ``log_metrics``, any ``log_*`` method), and
    :meth:`client` returns picklable handles that collectors' actors or other Ray tasks
    use the same way; only the owner can :meth:`flush` or :meth:`shutdown` the actor.
    Every call waits for the logger's answer: a client's calls keep their order, and an
    error of the logger is raised at the call that caused it (a ``RuntimeError`` naming
    the method). ``CSVLogger(..., service_backend="ray")`` (any logger class) and
    ``get_logger(..., service_backend="ray")`` build one, as in TorchRL; the owner and its
    clients pass ``isinstance`` checks against the served class. It is the Ray twin of
    :class:`ProcessLogger` and shares its client.

    Ray is started (``ray.init(**ray_init_config)``) when it is not running, and shut
    down again by the last rl object that uses the runtime (see
    :mod:`rl.core.ray_runtime`). An owner that is garbage-collected without
    :meth:`shutdown` kills its actor (TorchRL flushes first and warns that it will stop
    doing so; here a run should call :meth:`shutdown`, which flushes and closes).

    Args:
        logger_cls: the logger class (:class:`CSVLogger`, ...; any class whose ``log_*``
            methods are the service). The actor must be able to import it.
        *args: positional arguments of ``logger_cls``.

    Keyword Args:
        ray_actor_options: options of ``ray.remote()`` for the actor (``num_cpus``,
            ``name``, ...); ``max_pending_calls`` defaults to 1000 as in TorchRL.
        ray_init_config: keyword arguments of ``ray.init()`` when Ray is not running.
        **kwargs: keyword arguments of ``logger_cls``.

    Raises:
        ImportError: Ray is not installed (``pip install "rl-core[ray]"``).
        RuntimeError: building the logger in the actor failed (the message has its error).

    Examples:
        >>> import tempfile
        >>> from rl.core.loggers import CSVLogger, RayLogger
        >>> logger = RayLogger(CSVLogger, "run", log_dir=tempfile.mkdtemp())  # doctest: +SKIP
        >>> logger.client().log_scalar("loss", 0.5, step=1)  # doctest: +SKIP
        >>> logger.shutdown()  # doctest: +SKIP
    """

    def __init__(
        self,
        logger_cls: type,
        *args: Any,
        ray_actor_options: Mapping[str, Any] | None = None,
        ray_init_config: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        ray = import_ray("RayLogger", _EXTRA)
        super().__init__(None, served_class=logger_cls)
        self._closed = False
        held = acquire_runtime(ray, ray_init_config)
        options = {"max_pending_calls": 1000, "num_cpus": 0, **(ray_actor_options or {})}
        try:
            actor = ray.remote(**options)(_LoggerActor).remote(logger_cls, args, kwargs)
        except BaseException:
            release_runtime(ray, held)
            raise
        self._finalizer = weakref.finalize(self, _kill, ray, actor, held)
        self._actor = actor
        try:
            meta = ray.get(actor.meta.remote())
        except ray.exceptions.RayError as err:
            self._finalizer()
            self._actor = None
            self._closed = True
            cause = getattr(err, "cause", None) or err
            raise RuntimeError(
                f"RayLogger could not start: {logger_cls.__name__}(...) failed in the Ray "
                f"actor: {cause!r}"
            ) from None
        self._set_meta(meta)

    def __reduce__(self):
        raise TypeError(
            "a RayLogger owns its actor and does not pickle: send logger.client() instead"
        )

    @property
    def service_backend(self) -> str:
        """``"ray"``: where this logger runs."""
        return "ray"

    @property
    def is_alive(self) -> bool:
        """Whether :meth:`shutdown` has not been called (the actor is this owner's)."""
        return not self._closed and self._actor is not None

    def _not_running(self) -> str:
        if self._closed:
            return "the RayLogger was shut down"
        return super()._not_running()

    def start(self) -> RayLogger:
        """Returns this owner (its actor starts when it is built).

        Raises:
            RuntimeError: the owner was shut down (a RayLogger cannot start again).
        """
        if not self.is_alive:
            raise RuntimeError("a RayLogger that was shut down cannot be started again")
        return self

    def client(self) -> _RayLoggerClient:
        """A picklable handle on the logger, for Ray workers (no flush / shutdown).

        Raises:
            RuntimeError: the owner was shut down.
        """
        if not self.is_alive:
            raise RuntimeError(f"{self._not_running()}: no client to give")
        client = _RayLoggerClient(self._actor, served_class=self.served_class)
        client._set_meta(self._meta())
        return client

    def flush(self, timeout: float | None = None) -> None:
        """Waits until the logger has written what it was given (its ``flush``).

        Raises:
            RuntimeError: the actor is not running, or the logger's flush failed.
            TimeoutError: no answer within ``timeout`` seconds.
        """
        self._call("flush", timeout=timeout)

    def shutdown(self, timeout: float | None = 5.0) -> None:
        """Flushes and closes the logger, then kills its actor; a second call does nothing.

        ``timeout`` bounds the flush and the close each. Every step is tried; the first
        error met is raised at the end.

        Raises:
            TimeoutError: the flush or the close did not answer within ``timeout``.
            RuntimeError: the logger's flush or close failed (the message has its error).
        """
        if self._closed:
            return
        error: BaseException | None = None
        for step in ("flush", "close"):
            try:
                self._call(step, timeout=timeout)
            except Exception as err:
                error = error or err
        self._closed = True
        self._actor = None
        self._finalizer()
        if error is not None:
            raise error

    def close(self, timeout: float | None = 5.0) -> None:
        """The same as :meth:`shutdown`."""
        self.shutdown(timeout=timeout)

    def __repr__(self) -> str:
        state = "shut down" if self._closed else "running"
        return f"{type(self).__name__}({self._served_repr}, {state})"
