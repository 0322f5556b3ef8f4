"""LoggerMonitor and Every: which polls log, the rates they carry, what reaches a real logger."""

from __future__ import annotations

import logging
import threading
import time
import types

import pytest

from rl.core.loggers import CSVLogger, Every, Logger, LoggerMonitor, _monitor


class RecordingLogger(Logger):
    """Keeps every ``(name, value, step)`` it is given."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float, int | None]] = []
        super().__init__("recording", None)

    def _create_experiment(self) -> None:
        return None

    def log_scalar(self, name, value, step=None):
        self.calls.append((name, value, step))

    def log_video(self, name, video, step=None, **kwargs):
        raise AssertionError("not used")

    def log_hparams(self, cfg):
        raise AssertionError("not used")

    def log_histogram(self, name, data, **kwargs):
        raise AssertionError("not used")


class Source:
    """A ``stats()`` provider with settable counters."""

    def __init__(self) -> None:
        self.counters = {"frames": 0, "write_count": 0}
        self.error: Exception | None = None

    def stats(self):
        if self.error is not None:
            raise self.error
        return {**self.counters, "status": "running", "ready": True, "nan": float("nan")}


@pytest.fixture
def clock(monkeypatch):
    """The monitor's clock, advanced by hand (``clock.now``)."""
    fake = types.SimpleNamespace(now=100.0)
    fake.monotonic = lambda: fake.now
    monkeypatch.setattr(_monitor, "time", fake)
    return fake


class TestEvery:
    def test_factories(self):
        assert Every.seconds(5) == Every(kind="seconds", interval=5.0)
        assert Every.counter("frames", 100) == Every(kind="counter", interval=100, key="frames")

    @pytest.mark.parametrize(
        "kwargs, match",
        [
            ({"kind": "seconds", "interval": 0}, "interval must be strictly positive, got 0"),
            ({"kind": "counter", "interval": -3, "key": "f"}, "strictly positive, got -3"),
            ({"kind": "counter", "interval": 10}, "needs a non-empty counter key"),
            (
                {"kind": "minutes", "interval": 10},
                "kind must be 'seconds' or 'counter', got 'minutes'",
            ),
        ],
    )
    def test_bad_schedules_raise(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            Every(**kwargs)


class TestWatches:
    def test_numeric_entries_are_logged_under_the_watch_name(self):
        logger, source = RecordingLogger(), Source()
        monitor = LoggerMonitor(logger, background=False)
        monitor.watch(source, name="src")
        logged = monitor.step()
        # strings and NaN are left out, a boolean counts as 0 / 1
        assert logged == {"src": {"src/frames": 0.0, "src/write_count": 0.0, "src/ready": 1.0}}
        assert sorted(logger.calls) == [
            ("src/frames", 0.0, None),
            ("src/ready", 1.0, None),
            ("src/write_count", 0.0, None),
        ]

    def test_names_default_to_the_class_and_must_be_unique(self):
        monitor = LoggerMonitor(RecordingLogger(), background=False)
        assert monitor.watch(Source()) == "source"
        assert monitor.watch(Source()) == "source_1"
        with pytest.raises(ValueError, match="a watch named 'source' is already registered"):
            monitor.watch(Source(), name="source")
        monitor.unwatch("source_1")
        with pytest.raises(KeyError, match="no watch named 'source_1'; watched: \\['source'\\]"):
            monitor.unwatch("source_1")

    def test_a_target_without_stats_needs_stats_fn(self):
        monitor = LoggerMonitor(RecordingLogger(), background=False)
        with pytest.raises(
            TypeError, match="cannot watch a 'object' object: it has no callable stats"
        ):
            monitor.watch(object())
        monitor.watch(
            object(), name="fn", stats_fn=lambda scale: {"x": 2 * scale}, stats_kwargs={"scale": 3}
        )
        assert monitor.step() == {"fn": {"fn/x": 6.0}}

    @pytest.mark.parametrize(
        "kwargs, match",
        [
            ({"on_error": "explode"}, "on_error must be 'warn'"),
            ({"poll_interval": 0}, "poll_interval must be positive"),
        ],
    )
    def test_bad_arguments_raise(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            LoggerMonitor(RecordingLogger(), **kwargs)


class TestSchedules:
    def test_counter_thresholds(self, clock):
        logger, source = RecordingLogger(), Source()
        monitor = LoggerMonitor(logger, background=False)
        monitor.watch(source, name="src", schedule=Every.counter("frames", 100), log_on_start=False)
        logged_at = []
        for frames in (0, 50, 120, 180, 199, 410, 420, 500):
            source.counters["frames"] = frames
            clock.now += 1.0
            if monitor.step():
                logged_at.append(frames)
        # 120 crosses 100; 410 jumps over 200, 300 and 400 and logs once; 500 crosses 500
        assert logged_at == [120, 410, 500]
        # the counter is the step of a counter schedule
        assert [step for name, _, step in logger.calls if name == "src/frames"] == [120, 410, 500]

    def test_rates_against_a_hand_computation(self, clock):
        logger, source = RecordingLogger(), Source()
        monitor = LoggerMonitor(logger, background=False)
        monitor.watch(source, name="src", step="write_count")
        monitor.step()  # t = 100 s, frames 0
        clock.now += 2.0
        source.counters.update(frames=100, write_count=30)
        logged = monitor.step()["src"]
        assert logged["src/frames_per_second"] == pytest.approx(50.0)
        assert logged["src/writes_per_second"] == pytest.approx(15.0)
        assert ("src/frames", 100.0, 30) in logger.calls
        clock.now += 4.0
        source.counters.update(frames=300)
        assert monitor.step()["src"]["src/frames_per_second"] == pytest.approx(50.0)

    def test_rate_keys_choose_the_counters(self, clock):
        source = Source()
        monitor = LoggerMonitor(RecordingLogger(), background=False)
        monitor.watch(source, name="src", rate_keys=("write_count",), log_on_start=False)
        monitor.step()
        clock.now += 0.5
        source.counters.update(frames=10, write_count=10)
        logged = monitor.step()["src"]
        assert logged["src/writes_per_second"] == pytest.approx(20.0)
        assert "src/frames_per_second" not in logged

    def test_counter_reset_starts_again_without_negative_rates(self, clock):
        logger, source = RecordingLogger(), Source()
        monitor = LoggerMonitor(logger, background=False)
        monitor.watch(source, name="src", schedule=Every.counter("frames", 100), log_on_start=False)
        monitor.step()
        clock.now += 1.0
        source.counters["frames"] = 410
        assert monitor.step() != {}
        clock.now += 1.0
        source.counters["frames"] = 10  # the source was emptied
        assert monitor.step() == {}
        clock.now += 2.0
        source.counters["frames"] = 120  # crosses 100 again, measured from the reset
        logged = monitor.step()["src"]
        assert logged["src/frames"] == 120.0
        assert logged["src/frames_per_second"] == pytest.approx((120 - 10) / 2.0)
        assert all(v >= 0 for n, v, _ in logger.calls if n.endswith("_per_second"))

    def test_seconds_schedule(self, clock):
        source = Source()
        monitor = LoggerMonitor(RecordingLogger(), background=False)
        monitor.watch(source, name="src", schedule=Every.seconds(5))
        logged = []
        for _ in range(12):
            logged.append(bool(monitor.step()))
            clock.now += 1.0
        # the first poll, then every 5 s
        assert [i for i, done in enumerate(logged) if done] == [0, 5, 10]

    def test_log_on_start_false_makes_the_first_log_carry_rates(self, clock):
        source = Source()
        monitor = LoggerMonitor(RecordingLogger(), background=False)
        monitor.watch(source, name="src", log_on_start=False)
        assert monitor.step() == {}
        clock.now += 4.0
        source.counters["frames"] = 100
        assert monitor.step()["src"]["src/frames_per_second"] == pytest.approx(25.0)


class TestErrorsAndLifeCycle:
    def test_on_error_raise(self):
        source = Source()
        source.error = RuntimeError("stats failure")
        monitor = LoggerMonitor(RecordingLogger(), background=False, on_error="raise")
        monitor.watch(source, name="src")
        with pytest.raises(RuntimeError, match="stats failure"):
            monitor.step()

    def test_on_error_warn_once_per_streak(self, caplog):
        source = Source()
        source.error = RuntimeError("stats failure")
        monitor = LoggerMonitor(RecordingLogger(), background=False, on_error="warn")
        monitor.watch(source, name="src")
        with caplog.at_level(logging.WARNING, logger="rl.core.loggers"):
            assert monitor.step() == {} and monitor.step() == {}
            source.error = None
            assert monitor.step() != {}
            source.error = RuntimeError("again")
            monitor.step()
        messages = [r.getMessage() for r in caplog.records]
        assert len(messages) == 2
        assert (
            "could not poll or log the watch 'src'" in messages[0]
            and "stats failure" in messages[0]
        )

    def test_on_error_ignore(self, caplog):
        source = Source()
        source.error = RuntimeError("stats failure")
        monitor = LoggerMonitor(RecordingLogger(), background=False, on_error="ignore")
        monitor.watch(source, name="src")
        with caplog.at_level(logging.WARNING, logger="rl.core.loggers"):
            assert monitor.step() == {}
        assert not caplog.records

    def test_stop_logs_the_last_snapshot_once(self):
        logger, source = RecordingLogger(), Source()
        with LoggerMonitor(logger, poll_interval=60.0) as monitor:
            monitor.watch(source, name="src")
            monitor.watch(Source(), name="quiet", log_on_close=False)
            source.counters["frames"] = 7
            monitor.stop()
            assert ("src/frames", 7.0, None) in logger.calls
            assert not any(name.startswith("quiet/") for name, _, _ in logger.calls)
            calls = len(logger.calls)
        assert len(logger.calls) == calls  # leaving the block does not log again

    def test_background_thread_polls_and_ends(self):
        logger, source = RecordingLogger(), Source()
        with LoggerMonitor(logger, poll_interval=0.01) as monitor:
            monitor.watch(source, name="src", log_on_close=False)
            deadline = time.monotonic() + 5.0
            while not logger.calls and time.monotonic() < deadline:
                time.sleep(0.01)
        assert ("src/frames", 0.0, None) in logger.calls
        assert not any(t.name == "LoggerMonitor" for t in threading.enumerate())
        calls = len(logger.calls)
        time.sleep(0.05)
        assert len(logger.calls) == calls

    def test_a_stuck_thread_is_not_a_second_poller_after_start(self, monkeypatch, caplog):
        monkeypatch.setattr(_monitor, "_STOP_JOIN_S", 0.2)
        entered, release = threading.Event(), threading.Event()
        pollers = []  # the thread of each stats() call

        def stats():
            pollers.append(threading.current_thread())
            if len(pollers) == 1:  # the first call hangs until released
                entered.set()
                release.wait(10.0)
            return {"frames": len(pollers)}

        logger = RecordingLogger()
        monitor = LoggerMonitor(logger, poll_interval=0.01)
        monitor.watch(object(), name="src", stats_fn=stats, log_on_close=False)
        monitor.start()
        assert entered.wait(5.0)
        stuck = pollers[0]
        with caplog.at_level(logging.WARNING, logger="rl.core.loggers"):
            monitor.stop()  # the thread is stuck in stats(): stop() gives up on it
        assert stuck.is_alive() and "did not stop in time" in caplog.text
        monitor.start()
        release.set()
        stuck.join(5.0)
        assert not stuck.is_alive()  # it saw its own stop event, not the new thread's
        calls = len(pollers)
        deadline = time.monotonic() + 5.0
        while len(pollers) < calls + 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        alive = [t for t in threading.enumerate() if t.name == "LoggerMonitor"]
        assert len(alive) == 1 and alive[0] is not stuck
        assert set(pollers[calls:]) == {alive[0]}
        monitor.stop()
        assert not any(t.name == "LoggerMonitor" for t in threading.enumerate())


def test_csv_logger_writes_what_the_monitor_logs(tmp_path, clock):
    logger, source = CSVLogger("monitor", log_dir=tmp_path), Source()
    monitor = LoggerMonitor(logger, background=False)
    monitor.watch(source, name="rb", step="write_count")
    monitor.step()
    clock.now += 2.0
    source.counters.update(write_count=10)
    monitor.step()
    logger.close()
    scalars = tmp_path / "monitor" / "scalars" / "rb"
    assert (scalars / "write_count.csv").read_text() == "0,0.0\n10,10.0\n"
    assert (scalars / "writes_per_second.csv").read_text() == "10,5.0\n"
