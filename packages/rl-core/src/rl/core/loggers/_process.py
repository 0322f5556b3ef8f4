"""ProcessLogger: one logger built and run in its own process, fed by picklable clients.

The owner starts a process that builds the logger once and serves a local socket
(``multiprocessing.connection``, authenticated with a random key). Each client, in any
process (collector workers, a trainer), opens its own connection on first use and waits
for the answer of every call, so its calls reach the logger in the order it made them and
a failure in the logger is raised at the call that caused it.

The logger is always closed before its process ends: on :meth:`ProcessLogger.shutdown`
(a close command), and when the owner is garbage-collected or its interpreter exits
without a shutdown (SIGTERM, which the logger process answers by closing its logger
within a bounded time; SIGKILL after that).
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import signal
import tempfile
import threading
import weakref
from multiprocessing import get_context
from multiprocessing.connection import Client, Connection, Listener, wait
from multiprocessing.context import BaseContext
from typing import Any

from rl.core.workers import die_with_parent, exit_description, ignore_interrupts, stop_processes

from ._client import LoggerClient, close_logger, flush_logger, logger_meta

__all__ = ["ProcessLogger"]

_log = logging.getLogger("rl.core.loggers")

_FLUSH, _CLOSE = "__flush__", "__close__"
# seconds the logger process gets to flush and close its logger once told to stop by a
# signal (the owner was dropped without shutdown(), or its interpreter exits)
_CLOSE_ON_STOP_S = 10.0
# seconds a logger process that has closed its logger gets to exit on its own
_EXIT_S = 5.0


def _wake(fd: int) -> None:
    try:
        os.write(fd, b"x")
    except BlockingIOError:  # the pipe is full: a wake-up is pending anyway
        pass


def _serve(logger_cls, args, kwargs, address, authkey, ready, parent_pid, close_s) -> None:
    """The logger process: build the logger, then answer the clients until told to close.

    SIGTERM (the owner was dropped without ``shutdown()``, or its interpreter exits) ends
    the service after the call in progress, then the logger is flushed and closed; a close
    that takes more than ``close_s`` seconds ends the process without it.
    """
    die_with_parent(parent_pid, signal_parent_thread=False)
    ignore_interrupts()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)  # written from a signal handler: it must never block
    stopping = threading.Event()

    def on_sigterm(signum: int, frame: Any) -> None:
        stopping.set()
        _wake(wake_w)

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        logger = logger_cls(*args, **kwargs)
        if os.path.exists(address):  # left by a killed predecessor (a restart)
            os.unlink(address)
        listener = Listener(address, family="AF_UNIX", authkey=authkey)
    except BaseException as err:
        ready.send((False, f"{logger_cls.__name__}(...) failed: {err!r}"))
        raise
    meta = logger_meta(logger, logger_cls)
    ready.send((True, meta))
    ready.close()

    conns: list[Connection] = []
    lock = threading.Lock()

    def accept() -> None:
        while True:
            try:
                conn = listener.accept()
            except OSError:  # closed
                return
            except Exception:  # a client that failed the handshake
                continue
            with lock:
                conns.append(conn)
            _wake(wake_w)

    threading.Thread(target=accept, name="ProcessLogger-accept", daemon=True).start()
    closed = False
    while not closed and not stopping.is_set():
        with lock:
            watched = list(conns)
        for ready_conn in wait([*watched, wake_r]):
            if ready_conn == wake_r:
                os.read(wake_r, 4096)
                continue
            if closed:  # the close command came first: the logger is gone
                break
            try:
                method, call_args, call_kwargs = ready_conn.recv()
            except (EOFError, OSError):  # that client is gone
                with lock:
                    conns.remove(ready_conn)
                continue
            try:
                if method == _FLUSH:
                    result = flush_logger(logger)
                elif method == _CLOSE:
                    closed = True  # the service ends even if the logger fails to close
                    result = close_logger(logger)
                else:
                    result = getattr(logger, method)(*call_args, **call_kwargs)
                reply = (True, result)
            except Exception as err:
                what = {_FLUSH: "flush", _CLOSE: "close"}.get(method, method)
                reply = (
                    False,
                    f"{type(logger).__name__}.{what} failed in the logger process: {err!r}",
                )
            try:
                ready_conn.send(reply)
            except (OSError, ValueError):
                pass
            except Exception as err:  # a result that does not pickle
                ready_conn.send((False, f"the result of {method} cannot be sent back: {err!r}"))
    listener.close()
    if not closed:  # told to stop by SIGTERM: close the logger, within a bound
        timer = threading.Timer(close_s, os._exit, (1,))
        timer.daemon = True
        timer.start()
        try:
            close_logger(logger)
        except Exception as err:
            _log.warning(
                "ProcessLogger: %s failed to close when its process was stopped: %r",
                logger_cls.__name__,
                err,
            )


class _ProcessLoggerClient(LoggerClient):
    """A handle on a :class:`ProcessLogger`'s logger: picklable, without its life cycle.

    A :class:`LoggerClient` whose calls travel over a local socket to the logger
    process; ``close()`` closes only this handle's connection.
    """

    _where = "the logger process"
    _kind = "ProcessLoggerClient"

    def __init__(self, address: str, authkey: bytes, *, served_class: type) -> None:
        super().__init__(served_class=served_class)
        self._address = address
        self._authkey = authkey
        self._conn: Connection | None = None
        self._conn_pid: int | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_conn=None, _conn_pid=None, _lock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _not_running(self) -> str:
        return "the ProcessLogger's logger process is not running (it stopped or was shut down)"

    def _connection(self) -> Connection:
        if self._conn is None or self._conn_pid != os.getpid():  # a forked copy opens its own
            try:
                self._conn = Client(self._address, family="AF_UNIX", authkey=self._authkey)
            except OSError as err:
                raise RuntimeError(f"{self._not_running()}: {err}") from None
            self._conn_pid = os.getpid()
        return self._conn

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _call(self, method: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        with self._lock:
            conn = self._connection()
            try:
                conn.send((method, args, kwargs))
                answered = timeout is None or conn.poll(timeout)
                if answered:
                    ok, result = conn.recv()
            except (EOFError, OSError) as err:
                self._drop_connection()
                raise RuntimeError(f"{self._not_running()}: {err!r}") from None
            if not answered:
                self._drop_connection()  # its late answer must not reach the next call
                what = {_FLUSH: "flush()", _CLOSE: "close()"}.get(method, method)
                raise TimeoutError(f"the logger process did not answer {what} within {timeout} s")
        if not ok:
            raise RuntimeError(result)
        return result

    def close(self) -> None:
        """Closes this handle's connection (the logger process keeps running)."""
        with self._lock:
            self._drop_connection()


def _cleanup(process: Any, directory: str, owner_pid: int, close_s: float) -> None:
    """Ends the logger process of an owner that was not shut down (garbage collection,
    interpreter exit): SIGTERM makes it close its logger, SIGKILL ``close_s`` later."""
    if os.getpid() != owner_pid:  # a forked copy of the owner: the process is not its own
        return
    if process is not None and process.pid is not None and process.is_alive():
        stop_processes([process], grace_s=0.0, kill_after_s=close_s)
    shutil.rmtree(directory, ignore_errors=True)


class ProcessLogger(_ProcessLoggerClient):
    """Runs a logger in a process of its own; :meth:`client` gives handles for other processes.

    ``logger_cls(*args, **kwargs)`` is built once, in the logger process. This owner logs
    like the logger itself (``log_scalar``, ``log_metrics``, any ``log_*`` method), and
    :meth:`client` returns picklable handles that collector workers or other processes
    use the same way; only the owner can :meth:`flush`, :meth:`shutdown` or restart
    (:meth:`start`) the process. Every call waits for the logger's answer: a client's
    calls keep their order, and an error of the logger is raised at the call that caused
    it (as a ``RuntimeError`` naming the method). ``CSVLogger(..., service_backend="process")``
    (any logger class) and ``get_logger(..., service_backend="process")`` build one, as in
    TorchRL; the owner and its clients pass ``isinstance`` checks against the served class.
    ``exp_name``, ``log_dir``, ``experiment`` (a path only) and ``repr()`` are read here,
    without a call to the logger process (see the client's notes).

    Call :meth:`shutdown` when the run ends (a :class:`~rl.core.trainers.Trainer`'s
    ``shutdown()`` leaves its logger open, as TorchRL's). An owner that is garbage-collected
    or whose interpreter exits without it still closes the logger: the logger process is
    sent SIGTERM, finishes the call in progress, flushes and closes the logger, and is
    killed if that takes more than 10 seconds. The logger process also ends (without
    closing) when its owner's process dies.

    Args:
        logger_cls: the logger class (:class:`CSVLogger`, ...; any class whose ``log_*``
            methods are the service).
        *args: positional arguments of ``logger_cls``.

    Keyword Args:
        mp_context: a start method name or a multiprocessing context (default ``"spawn"``).
        max_queue_size: TorchRL's bound on the commands waiting in its queue (> 0). It is
            checked but has nothing to bound here: every call waits for its answer, so at
            most one command per client is ever pending.
        startup_timeout: seconds to wait for ``logger_cls`` to be built.
        **kwargs: keyword arguments of ``logger_cls``.

    Raises:
        ValueError: ``max_queue_size`` is not a positive integer.
        RuntimeError: building the logger failed (the message has its error).
        TimeoutError: the logger was not built within ``startup_timeout``.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from rl.core.loggers import CSVLogger
        >>> logger = ProcessLogger(CSVLogger, "run", log_dir=tempfile.mkdtemp(), mp_context="fork")
        >>> worker_logger = logger.client()  # picklable: give it to a worker process
        >>> worker_logger.log_scalar("loss", 0.5, step=1)
        >>> logger.shutdown()
        >>> (Path(logger.experiment) / "scalars" / "loss.csv").read_text()
        '1,0.5\\n'
    """

    def __init__(
        self,
        logger_cls: type,
        *args: Any,
        mp_context: str | BaseContext | None = None,
        max_queue_size: int = 1000,
        startup_timeout: float = 60.0,
        **kwargs: Any,
    ) -> None:
        if (
            isinstance(max_queue_size, bool)
            or not isinstance(max_queue_size, int)
            or max_queue_size <= 0
        ):
            raise ValueError(
                f"ProcessLogger max_queue_size must be a positive int, got {max_queue_size!r}"
            )
        self._ctx = (
            get_context(mp_context or "spawn")
            if not isinstance(mp_context, BaseContext)
            else mp_context
        )
        self._logger_cls = logger_cls
        self._logger_args = args
        self._logger_kwargs = kwargs
        self.startup_timeout = float(startup_timeout)
        self._dir = tempfile.mkdtemp(prefix="rl_process_logger_")
        self._process = None
        self._closed = False
        super().__init__(
            os.path.join(self._dir, "socket"), secrets.token_bytes(32), served_class=logger_cls
        )
        self._finalizer = weakref.finalize(
            self, _cleanup, None, self._dir, os.getpid(), _CLOSE_ON_STOP_S
        )
        self.start()

    def __reduce__(self):
        raise TypeError(
            "a ProcessLogger owns its process and does not pickle: send logger.client() instead"
        )

    @property
    def service_backend(self) -> str:
        """``"process"``: where this logger runs."""
        return "process"

    @property
    def is_alive(self) -> bool:
        """Whether the logger process is running."""
        return self._process is not None and self._process.is_alive()

    def start(self) -> ProcessLogger:
        """Starts the logger process (again, after it died); a no-op while it runs.

        Returns:
            this owner.

        Raises:
            RuntimeError: the owner was shut down, or building the logger failed.
            TimeoutError: the logger was not built within ``startup_timeout``.
        """
        if self._closed:
            raise RuntimeError("a ProcessLogger that was shut down cannot be started again")
        if self.is_alive:
            return self
        if self._process is not None:
            stop_processes([self._process], grace_s=0.0)
        with self._lock:
            self._drop_connection()
        close_s = _CLOSE_ON_STOP_S
        ready_r, ready_w = self._ctx.Pipe(duplex=False)
        self._process = self._ctx.Process(
            target=_serve,
            args=(
                self._logger_cls,
                self._logger_args,
                self._logger_kwargs,
                self._address,
                self._authkey,
                ready_w,
                os.getpid(),
                close_s,
            ),
            name=f"ProcessLogger[{self._logger_cls.__name__}]",
            daemon=True,
        )
        self._process.start()
        ready_w.close()  # the child holds the only write end: its death ends the wait below
        self._finalizer.detach()
        self._finalizer = weakref.finalize(
            self, _cleanup, self._process, self._dir, os.getpid(), close_s
        )
        try:
            if not ready_r.poll(self.startup_timeout):
                stop_processes([self._process], grace_s=0.0)
                raise TimeoutError(
                    f"ProcessLogger: {self._logger_cls.__name__} was not built within {self.startup_timeout} s"
                )
            try:
                ok, payload = ready_r.recv()
            except EOFError:
                self._process.join(1.0)
                raise RuntimeError(
                    f"ProcessLogger: the logger process ended before building {self._logger_cls.__name__} "
                    f"({exit_description(self._process.exitcode)})"
                ) from None
        finally:
            ready_r.close()
        if not ok:
            self._process.join(5.0)
            raise RuntimeError(f"ProcessLogger could not start: {payload}")
        self._set_meta(payload)
        return self

    def _not_running(self) -> str:
        if self._closed:
            return "the ProcessLogger was shut down"
        if self._process is not None and not self._process.is_alive():
            return f"the ProcessLogger's logger process stopped ({exit_description(self._process.exitcode)}); call start() to run it again"
        return super()._not_running()

    def client(self) -> _ProcessLoggerClient:
        """A picklable handle on the logger, for other processes (no flush / shutdown).

        Raises:
            RuntimeError: the logger process is not running.
        """
        if not self.is_alive:
            raise RuntimeError(f"{self._not_running()}: no client to give")
        client = _ProcessLoggerClient(self._address, self._authkey, served_class=self._logger_cls)
        client._set_meta(self._meta())
        return client

    def flush(self, timeout: float | None = None) -> None:
        """Waits until the logger has written what it was given (its ``flush``).

        Raises:
            RuntimeError: the logger process is not running, or its flush failed.
            TimeoutError: no answer within ``timeout`` seconds.
        """
        self._call(_FLUSH, timeout=timeout)

    def shutdown(self, timeout: float | None = 5.0) -> None:
        """Flushes and closes the logger, then ends its process; a second call does nothing.

        ``timeout`` bounds each of the two steps on its own: the logger's flush, then its
        close (``close()``, which ends a W&B run with ``wandb.finish()``). The process is
        stopped only after the close answered or had its full ``timeout``; a close that
        takes longer is reported by a ``TimeoutError`` that names the logger and the
        timeout, and what it had not written by then may be lost. A slow close (a large
        W&B upload) needs a larger ``timeout``, or ``None`` to wait without bound. Every
        step is tried; the first error met is raised at the end.

        Raises:
            TimeoutError: the flush or the close did not finish within ``timeout``.
            RuntimeError: the logger's flush or close failed (the message has its error).
        """
        if self._closed:
            return
        error: BaseException | None = None
        timed_out = False
        if self.is_alive:
            for method, step in ((_FLUSH, "flush()"), (_CLOSE, "close()")):
                try:
                    self._call(method, timeout=timeout)
                except TimeoutError:
                    timed_out = True
                    error = error or TimeoutError(
                        f"ProcessLogger.shutdown: {self._logger_cls.__name__}.{step} did not "
                        f"finish within timeout={timeout} s; the logger process was stopped and "
                        "what the logger had not written may be lost (a slow close, such as "
                        "wandb.finish(), needs a larger timeout, or None to wait without bound)"
                    )
                except Exception as err:
                    error = error or err
        with self._lock:
            self._drop_connection()
        self._closed = True
        if self._process is not None:
            # after a close that answered, the process is exiting; after one that timed out,
            # SIGTERM cannot cut the close short, and SIGKILL follows a second later
            stop_processes([self._process], grace_s=0.0 if timed_out else _EXIT_S)
        self._finalizer()
        if error is not None:
            raise error

    def close(self, timeout: float | None = 5.0) -> None:
        """The same as :meth:`shutdown`."""
        self.shutdown(timeout=timeout)

    def __repr__(self) -> str:
        if self._closed:
            state = "shut down"
        elif self._process is None:
            state = "not started"
        elif self._process.is_alive():
            state = f"running, pid {self._process.pid}"
        else:
            state = f"stopped, {exit_description(self._process.exitcode)}"
        return f"{type(self).__name__}({self._served_repr}, {state})"
