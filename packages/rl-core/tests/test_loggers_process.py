"""ProcessLogger: the logger runs in its own process; what clients log is read back from disk."""

from __future__ import annotations

import gc
import inspect
import multiprocessing as mp
import os
import pickle
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from rl.core.loggers import (
    CSVLogger,
    Logger,
    ProcessLogger,
    TensorboardLogger,
    _process,
    get_logger,
)

# fork keeps these tests fast; the default start method ("spawn") is the same code path
# apart from how the child starts, and one test runs it (TestSpawn)
FORK = "fork"


class FileLogger:
    """A minimal served logger (any class with ``log_*`` methods works) that writes files."""

    def __init__(self, log_dir, fail_flush=False):
        self.exp_name = "file-logger"
        self.log_dir = str(log_dir)
        self.fail_flush = fail_flush
        with open(os.path.join(self.log_dir, "built"), "a") as f:
            f.write(f"{os.getpid()}\n")

    def log_scalar(self, name, value, step=None):
        with open(os.path.join(self.log_dir, "events"), "a") as f:
            f.write(f"{name}:{value}:{step}\n")

    def log_video(self, name, video, step=None, **kwargs):
        torch.save(
            {"video": video, "step": step, "kwargs": kwargs}, os.path.join(self.log_dir, "video.pt")
        )

    def log_fail(self):
        raise ValueError("the logger refused")

    def log_plus_one(self, value):
        return value + 1

    def flush(self):
        if self.fail_flush:
            raise OSError("disk full")

    def __repr__(self):
        return "FileLogger()"


class BufferedLogger:
    """A served logger that keeps its rows in memory until flush() or close(), as back-ends
    with a write buffer do; ``close_delay`` makes its close slow."""

    def __init__(self, log_dir, close_delay=0.0):
        self.log_dir = str(log_dir)
        self.close_delay = close_delay
        self.rows = []

    def log_scalar(self, name, value, step=None):
        self.rows.append(f"{name},{step},{value}")

    def flush(self):
        with open(os.path.join(self.log_dir, "rows.csv"), "a") as f:
            f.writelines(row + "\n" for row in self.rows)
        self.rows.clear()

    def close(self):
        time.sleep(self.close_delay)
        self.flush()
        with open(os.path.join(self.log_dir, "closed"), "a") as f:
            f.write("closed\n")


class _Run:
    pass


class RunObjectLogger:
    """A served logger whose experiment is a run object (as TensorBoard's or W&B's)."""

    def __init__(self):
        self.exp_name, self.log_dir, self.experiment = "run-object", "/nowhere", _Run()

    def log_scalar(self, name, value, step=None):
        pass


def _gone(pid):
    """Whether no process ``pid`` runs (absent, or an exited zombie nobody reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def _log_from_worker(client, name, count):
    for step in range(count):
        client.log_scalar(name, step, step=step)


@pytest.fixture
def served(tmp_path):
    logger = ProcessLogger(FileLogger, tmp_path, mp_context=FORK)
    yield logger
    logger.shutdown(timeout=10)


class TestProcessLogger:
    def test_owner_and_clients_log_in_order_in_one_process(self, served, tmp_path):
        assert served.is_alive and served.service_backend == "process"
        assert served.exp_name == "file-logger" and served.log_dir == str(tmp_path)
        worker = mp.get_context(FORK).Process(
            target=_log_from_worker, args=(served.client(), "worker", 5)
        )
        worker.start()
        _log_from_worker(served.client(), "parent", 5)
        served.log_scalar("owner", torch.tensor(2.5), step=9)  # a tensor travels as a number
        worker.join(20)
        assert worker.exitcode == 0
        served.flush(timeout=10)
        built = (tmp_path / "built").read_text().split()
        assert len(built) == 1 and int(built[0]) == served._process.pid != os.getpid()
        events = (tmp_path / "events").read_text().splitlines()
        for name in ("parent", "worker"):
            assert [e for e in events if e.startswith(name)] == [
                f"{name}:{s}:{s}" for s in range(5)
            ]
        assert "owner:2.5:9" in events

    def test_results_errors_and_videos_come_back(self, served, tmp_path):
        client = served.client()
        assert client.log_plus_one(4) == 5
        with pytest.raises(
            RuntimeError,
            match=r"FileLogger.log_fail failed in the logger process: ValueError\('the logger refused'\)",
        ):
            client.log_fail()
        assert client.log_plus_one(1) == 2  # the service goes on after an error
        video = torch.arange(2 * 3 * 4 * 5, dtype=torch.uint8).reshape(1, 2, 3, 4, 5)
        client.log_video("eval", video, step=7, fps=8)
        saved = torch.load(tmp_path / "video.pt", weights_only=True)
        assert saved["step"] == 7 and saved["kwargs"] == {"fps": 8}
        torch.testing.assert_close(saved["video"], video)
        assert repr(client) == "ProcessLoggerClient(FileLogger())"

    def test_a_client_pickles_and_has_no_life_cycle(self, served, tmp_path):
        client = pickle.loads(pickle.dumps(served.client()))
        client.log_scalar("pickled", 1, step=3)
        assert (tmp_path / "events").read_text() == "pickled:1:3\n"
        for name in ("start", "shutdown", "client", "flush"):
            assert not hasattr(client, name)
        with pytest.raises(AttributeError, match="only the logger's log_\\* methods are served"):
            client.print_log_dir()
        with pytest.raises(TypeError, match="send logger.client\\(\\) instead"):
            pickle.dumps(served)

    def test_a_dead_process_is_reported_and_start_runs_it_again(self, served, tmp_path):
        client = served.client()
        pid = served._process.pid
        assert repr(served) == f"ProcessLogger(FileLogger(), running, pid {pid})"
        served._process.kill()
        served._process.join(10)
        # repr is local: it works, and says so, with the process dead
        assert (
            repr(served) == "ProcessLogger(FileLogger(), stopped, exit code -9 (killed by SIGKILL))"
        )
        assert repr(client) == "ProcessLoggerClient(FileLogger())"
        with pytest.raises(
            RuntimeError,
            match="logger process stopped \\(exit code -9 \\(killed by SIGKILL\\)\\); call start\\(\\)",
        ):
            served.flush(timeout=5)
        with pytest.raises(RuntimeError, match="not running"):
            client.log_scalar("lost", 0)
        served.start()
        assert served.is_alive
        client.log_scalar("after", 1, step=1)  # an older client reaches the new process
        assert len((tmp_path / "built").read_text().split()) == 2
        assert (tmp_path / "events").read_text() == "after:1:1\n"

    def test_shutdown_is_idempotent_and_keeps_the_first_error(self, tmp_path):
        logger = ProcessLogger(FileLogger, tmp_path, fail_flush=True, mp_context=FORK)
        process = logger._process
        with pytest.raises(
            RuntimeError,
            match="FileLogger.flush failed in the logger process: OSError\\('disk full'\\)",
        ):
            logger.shutdown(timeout=10)
        assert not process.is_alive() and not logger.is_alive
        logger.shutdown()  # nothing left to do
        with pytest.raises(RuntimeError, match="was shut down"):
            logger.log_scalar("late", 0)
        with pytest.raises(RuntimeError, match="cannot be started again"):
            logger.start()

    def test_a_logger_that_fails_to_build_raises_its_error(self, tmp_path):
        with pytest.raises(
            RuntimeError, match="could not start: FileLogger\\(...\\) failed: FileNotFoundError"
        ):
            ProcessLogger(FileLogger, tmp_path / "missing", mp_context=FORK)
        with pytest.raises(ValueError, match="max_queue_size must be a positive int, got 0"):
            ProcessLogger(FileLogger, tmp_path, max_queue_size=0)


class TestWithoutShutdown:
    """An owner that is dropped, or whose interpreter exits, without shutdown() still
    flushes and closes its logger, within a bound."""

    def test_dropping_the_owner_flushes_and_closes_the_logger(self, tmp_path):
        logger = ProcessLogger(BufferedLogger, tmp_path, mp_context=FORK)
        for step in range(3):
            logger.log_scalar("loss", step / 2, step=step)
        assert not (tmp_path / "rows.csv").exists()  # still in the logger's buffer
        process, directory = logger._process, logger._dir
        del logger
        gc.collect()
        process.join(10)
        assert process.exitcode == 0  # it closed the logger and exited, not killed
        assert (tmp_path / "rows.csv").read_text() == "loss,0,0.0\nloss,1,0.5\nloss,2,1.0\n"
        assert (tmp_path / "closed").read_text() == "closed\n"
        assert not os.path.exists(directory)

    def test_a_close_that_hangs_is_cut_after_the_bound(self, tmp_path, monkeypatch):
        monkeypatch.setattr(_process, "_CLOSE_ON_STOP_S", 1.0)
        logger = ProcessLogger(BufferedLogger, tmp_path, close_delay=60, mp_context=FORK)
        logger.log_scalar("loss", 1.0, step=4)
        process = logger._process
        del logger
        gc.collect()
        process.join(10)
        assert not process.is_alive()  # the bound (1 s) cut the close (60 s)
        assert process.exitcode != 0  # ended by the bound, not by its close
        # the flush before the close went through; the close itself never finished
        assert (tmp_path / "rows.csv").read_text() == "loss,4,1.0\n"
        assert not (tmp_path / "closed").exists()

    def test_an_interpreter_that_exits_without_shutdown_closes_the_logger(self, tmp_path):
        # the default start method ("spawn": the served class is pickled by reference, the
        # owner's handles cross the process boundary) and the interpreter's exit path, in one
        # child interpreter (each costs an interpreter start with torch)
        script = tmp_path / "owner.py"
        script.write_text(
            "\n".join(
                [
                    "import os, pickle, sys, time",
                    "from rl.core.loggers import ProcessLogger",
                    textwrap.dedent(inspect.getsource(BufferedLogger)),
                    "if __name__ == '__main__':",
                    "    out = sys.argv[1]",
                    "    logger = ProcessLogger(BufferedLogger, out)  # spawn, the default",
                    "    assert type(logger._process).__name__ == 'SpawnProcess'",
                    "    client = pickle.loads(pickle.dumps(logger.client()))",
                    "    for step in range(3):",
                    "        logger.log_scalar('reward', step, step=step)",
                    "    client.log_scalar('reward', 3, step=3)",
                    "    with open(os.path.join(out, 'pid'), 'w') as f:",
                    "        f.write(str(logger._process.pid))",
                    "    # no shutdown(): the interpreter exits with the logger still open",
                ]
            )
        )
        done = subprocess.run(
            [sys.executable, str(script), str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "rows.csv").read_text() == (
            "reward,0,0\nreward,1,1\nreward,2,2\nreward,3,3\n"
        )
        assert (tmp_path / "closed").read_text() == "closed\n"
        assert _gone(int((tmp_path / "pid").read_text()))


class TestShutdownTimeout:
    def test_a_close_within_the_timeout_completes(self, tmp_path):
        logger = ProcessLogger(BufferedLogger, tmp_path, close_delay=0.5, mp_context=FORK)
        logger.log_scalar("loss", 3.0, step=1)
        process = logger._process
        logger.shutdown(timeout=5.0)
        assert process.exitcode == 0
        assert (tmp_path / "rows.csv").read_text() == "loss,1,3.0\n"
        assert (tmp_path / "closed").read_text() == "closed\n"

    def test_a_close_past_the_timeout_is_reported_and_stopped(self, tmp_path):
        logger = ProcessLogger(BufferedLogger, tmp_path, close_delay=60, mp_context=FORK)
        logger.log_scalar("loss", 3.0, step=1)
        process = logger._process
        began = time.monotonic()
        with pytest.raises(
            TimeoutError,
            match=r"BufferedLogger.close\(\) did not finish within timeout=0.5 s; the logger "
            r"process was stopped .* needs a larger timeout, or None",
        ):
            logger.shutdown(timeout=0.5)
        elapsed = time.monotonic() - began
        # the close had its 0.5 s, then SIGTERM (which cannot cut it) and SIGKILL 1 s later
        assert 0.5 <= elapsed < 30.0  # far under the close's 60 s
        assert not process.is_alive() and not logger.is_alive
        assert (tmp_path / "rows.csv").read_text() == "loss,1,3.0\n"  # the flush step
        assert not (tmp_path / "closed").exists()
        logger.shutdown()  # nothing left to do


class TestExperiment:
    def test_a_csv_logger_s_run_directory_is_read_locally(self, tmp_path):
        logger = ProcessLogger(CSVLogger, "exp", log_dir=tmp_path, mp_context=FORK)
        try:
            client = pickle.loads(pickle.dumps(logger.client()))
            assert logger.experiment == client.experiment == tmp_path / "exp"
            client.log_scalar("loss", 0.25, step=2)
            assert (Path(logger.experiment) / "scalars" / "loss.csv").read_text() == "2,0.25\n"
        finally:
            logger.shutdown()
        assert logger.experiment == tmp_path / "exp"  # still readable once shut down

    def test_a_run_object_raises_a_clear_error(self, tmp_path):
        logger = ProcessLogger(RunObjectLogger, mp_context=FORK)
        try:
            for handle in (logger, logger.client()):
                with pytest.raises(
                    AttributeError,
                    match=r"has no experiment: the served RunObjectLogger's experiment \(a _Run\) "
                    r"lives in the logger process",
                ):
                    _ = handle.experiment
                assert getattr(handle, "experiment", None) is None
                assert handle.exp_name == "run-object" and handle.log_dir == "/nowhere"
        finally:
            logger.shutdown()

    def test_a_logger_without_experiment_says_so(self, served):
        with pytest.raises(AttributeError, match="the served FileLogger has no experiment"):
            _ = served.experiment


def test_get_logger_process_backend_writes_csv(tmp_path):
    logger = get_logger(
        "csv", tmp_path, "exp", service_backend="process", service_backend_options={"context": FORK}
    )
    assert isinstance(logger, ProcessLogger) and isinstance(logger, Logger)
    assert logger.exp_name == "exp"
    logged = logger.log_metrics({"loss": torch.tensor(0.5), "lr": 1e-3}, step=4)
    assert logged == {"loss": 0.5, "lr": 1e-3}
    state = logger.state_dict()  # the served CSVLogger's
    logger.shutdown()
    scalars = Path(tmp_path) / "exp" / "scalars"
    assert (scalars / "loss.csv").read_text() == "4,0.5\n"
    assert (scalars / "lr.csv").read_text() == "4,0.001\n"
    assert state["exp_name"] == "exp" and state["log_dir"] == str(tmp_path)
    # the same class served directly gives the same files
    direct = CSVLogger("direct", log_dir=tmp_path)
    direct.log_metrics({"loss": 0.5}, step=4)
    direct.close()
    assert (Path(tmp_path) / "direct" / "scalars" / "loss.csv").read_text() == "4,0.5\n"


class TestServiceBackendKeyword:
    def test_a_logger_class_builds_a_process_logger(self, tmp_path):
        logger = CSVLogger(
            "exp",
            log_dir=tmp_path,
            video_format="pt",
            service_backend="process",
            service_backend_options={"context": FORK, "max_queue_size": 4},
        )
        try:
            assert type(logger) is ProcessLogger and logger.served_class is CSVLogger
            assert isinstance(logger, CSVLogger) and isinstance(logger.client(), CSVLogger)
            assert not isinstance(logger, TensorboardLogger)
            logger.log_scalar("loss", 1.0, step=0)
            assert (tmp_path / "exp" / "scalars" / "loss.csv").read_text() == "0,1.0\n"
        finally:
            logger.shutdown()
        assert isinstance(
            CSVLogger("direct", log_dir=tmp_path, service_backend="direct"), CSVLogger
        )

    @pytest.mark.parametrize(
        "kwargs, error, match",
        [
            (
                {"service_backend": "ray", "service_backend_options": {"context": FORK}},
                ValueError,
                r"takes actor_options and ray_init_config, got \['context'\]",
            ),
            (
                {"service_backend_options": {"context": FORK}},
                ValueError,
                "the 'direct' back-end takes none",
            ),
            ({"service_backend": "gpu"}, ValueError, "Unsupported service backend 'gpu'"),
        ],
    )
    def test_refused_backends_and_options(self, tmp_path, kwargs, error, match):
        with pytest.raises(error, match=match):
            CSVLogger("exp", log_dir=tmp_path, **kwargs)


class _Run:
    def __init__(self):
        self.flushes = 0

    def flush(self):
        self.flushes += 1


class _DirectLogger(Logger):
    def __init__(self):
        self.closes = 0
        super().__init__("direct", None)

    def _create_experiment(self):
        return _Run()

    def log_scalar(self, name, value, step=None):
        pass

    log_video = log_hparams = log_histogram = log_scalar

    def close(self):
        self.closes += 1


class TestDirectLifeCycle:
    def test_a_direct_logger_is_its_own_client(self, tmp_path):
        logger = CSVLogger("direct", log_dir=tmp_path)
        assert logger.client() is logger and logger.start() is logger
        assert logger.service_backend == "direct" and logger.is_alive
        logger.log_scalar("a", 1.0, step=0)
        logger.shutdown()
        assert not logger.is_alive
        assert (tmp_path / "direct" / "scalars" / "a.csv").read_text() == "0,1.0\n"
        with pytest.raises(
            RuntimeError, match="CSVLogger was shut down and cannot be started again"
        ):
            logger.start()

    def test_shutdown_flushes_and_closes_once(self):
        logger = _DirectLogger()
        logger.flush(timeout=1.0)
        assert logger.experiment.flushes == 1
        logger.shutdown()
        logger.shutdown()
        assert logger.experiment.flushes == 2 and logger.closes == 1
