"""The update benchmarks (``benchmarks/bench_*_update.py``) and their shared timing
helpers (``benchmarks/_timing.py``): each script runs at its tiniest settings and writes
the table it prints."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str):
    """A benchmark script (or ``_timing``) imported by path: benchmarks/ is no package."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def timing():
    return load("_timing")


class TestTiming:
    def test_interleaved_rounds_and_order(self, timing):
        calls = []
        fns = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
        times = timing.interleaved(fns, iters=2, rounds=3, warmup=1)
        assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3}
        # warm-up once each, then rounds alternate the candidates in their order
        assert calls == ["a", "b"] + (["a", "a", "b", "b"] * 3)
        assert all(t >= 0 for v in times.values() for t in v)

    def test_per_call_divides_by_iters(self, timing):
        ticks = iter([10.0, 16.0])
        assert timing.per_call(lambda: None, 3, clock=lambda: next(ticks)) == 2.0

    def test_summaries(self, timing):
        times = {"plain": [2.0, 4.0, 3.0], "ours": [3.0, 4.0, 6.0]}
        assert timing.best(times) == {"plain": 2.0, "ours": 3.0}
        assert timing.median(times) == {"plain": 3.0, "ours": 4.0}
        # per-round ratios 1.5, 1.0, 2.0
        assert timing.paired_ratio(times, "ours", "plain") == 1.5

    def test_paired_ratio_needs_equal_rounds(self, timing):
        with pytest.raises(ValueError, match="same rounds.*1 rounds of 'a' and 2 of 'b'"):
            timing.paired_ratio({"a": [1.0], "b": [1.0, 2.0]}, "a", "b")

    def test_markdown_table(self, timing):
        lines = timing.markdown_table(["case", "x", "y"], [["c", "1", ""]], align="---:")
        assert lines == ["| case | x | y |", "| --- | ---: | ---: |", "| c | 1 |  |"]

    def test_write_report_prints_what_it_writes(self, timing, tmp_path, capsys):
        out = tmp_path / "r.md"
        timing.write_report(["# t", "", "| a |"], out)
        assert out.read_text() == "# t\n\n| a |\n" == capsys.readouterr().out


def run(name: str, argv: list[str], tmp_path, capsys) -> str:
    out = tmp_path / f"{name}.md"
    load(f"bench_{name}_update").main([*argv, "--out", str(out)])
    text = out.read_text()
    assert capsys.readouterr().out.endswith(text)
    return text


class TestEagerRuns:
    def test_sac(self, tmp_path, capsys):
        text = run("sac", ["--iters", "1", "--repeats", "1", "--no-compile"], tmp_path, capsys)
        assert "| Pendulum (obs 3, act 1) |" in text
        assert "| HalfCheetah (obs 17, act 6) |" in text
        # no compiled columns without compilation
        assert "| SACLoss, UpdateStep compiled (ms/update) |" in text
        assert text.count("| - | - | - | - | - | - |") == 2

    def test_sac_by_cpu_time(self, tmp_path, capsys):
        argv = ["--iters", "1", "--repeats", "2", "--no-compile", "--cpu-time"]
        text = run("sac", argv, tmp_path, capsys)
        assert "measured alternately in one run by process CPU time;" in text
        assert "| Pendulum (obs 3, act 1) |" in text

    def test_ppo(self, tmp_path, capsys):
        text = run("ppo", ["--steps", "1", "--blocks", "1", "--no-compile"], tmp_path, capsys)
        assert "| plain PyTorch, eager (floor) |" in text and "| 1.000x |" in text
        assert "| rl ClipPPOLoss, eager |" in text
        assert "| speed vs plain eager |" in text and "whole step" not in text

    def test_mappo(self, tmp_path, capsys):
        argv = ["--steps", "1", "--blocks", "1", "--batch", "32"]
        text = run("mappo", argv, tmp_path, capsys)
        assert "Minibatch of 32 environment steps" in text
        assert "| rl MAPPOLoss, eager |" in text and "| rl IPPOLoss, eager |" in text

    def test_gail(self, tmp_path, capsys):
        text = run("gail", ["--iters", "1", "--repeats", "1"], tmp_path, capsys)
        assert "| BCE + gradient penalty |" in text

    def test_rnd(self, tmp_path, capsys):
        text = run("rnd", ["--iters", "1", "--repeats", "1"], tmp_path, capsys)
        assert "| RNDLoss (ms/update) |" in text

    def test_chunking(self, tmp_path, capsys):
        argv = ["--iters", "1", "--act-iters", "1", "--repeats", "1"]
        text = run("chunking", argv, tmp_path, capsys)
        assert "| ACTLoss (batch 32" in text

    @pytest.mark.slow
    def test_dreamer(self, capsys):
        load("bench_dreamer_update").main(["--iters", "1", "--repeats", "1"])
        assert "ratio to plain torch 1.00x" in capsys.readouterr().out


def table_rows(text: str, first: str) -> list[list[str]]:
    """The cells of the table rows whose first cell starts with ``first``."""
    rows = [line.strip("|").split(" | ") for line in text.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row] for row in rows if row[0].strip().startswith(first)]


@pytest.mark.slow
@pytest.mark.timeout(1200)
class TestCompiledRuns:
    """The whole-step columns: rl's update compiled with UpdateStep and the plain update
    compiled whole, each with its speed over the plain eager loop (minutes: inductor)."""

    def test_sac(self, tmp_path, capsys):
        text = run("sac", ["--iters", "1", "--repeats", "1"], tmp_path, capsys)
        for case in ("Pendulum", "HalfCheetah"):
            (row,) = table_rows(text, case)
            _, plain, *_, plain_whole, plain_speed, ours_whole, ours_speed = row
            for ms, speed in ((plain_whole, plain_speed), (ours_whole, ours_speed)):
                assert float(speed.rstrip("x")) == pytest.approx(float(plain) / float(ms), abs=0.01)

    def test_ppo(self, tmp_path, capsys):
        text = run("ppo", ["--steps", "1", "--blocks", "1"], tmp_path, capsys)
        assert "failed" not in text
        (floor,) = table_rows(text, "plain PyTorch, eager")
        for label in ("plain PyTorch, whole step", "rl ClipPPOLoss, whole step compiled"):
            (row,) = table_rows(text, label)
            ms, speed = float(row[1]), float(row[4].rstrip("x"))
            assert speed == pytest.approx(float(floor[1]) / ms, abs=0.01)
        assert "Whole step compiled: rl (UpdateStep) at" in text
