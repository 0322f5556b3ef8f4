"""``benchmarks/bench_compile.py``'s repeat order and averaging (``--repeats``), and the
table of ``bench_compile_torchrl.py``."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _compile_checks import load_path  # noqa: E402

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_compile.py"


def _bench():
    return load_path("bench_compile", BENCH)


def test_repeats_run_in_abba_order_starting_with_the_given_mode():
    bench = _bench()
    assert bench.abba(1, False) == [False, True]
    assert bench.abba(1, True) == [True, False]
    assert bench.abba(2, False) == [False, True, True, False]
    assert bench.abba(3, True) == [True, False, False, True, True, False]


def test_rates_are_averaged_over_the_runs_of_a_mode_the_rest_from_the_first():
    bench = _bench()
    runs = [
        {"fps": 100.0, "steady_fps": 200.0, "steady_cpu_fps": 210.0, "eval_mean": -5.0},
        {"fps": 300.0, "steady_fps": 100.0, "steady_cpu_fps": 110.0, "eval_mean": -7.0},
    ]
    mean = bench.mean_run(runs)
    assert mean == {
        "fps": 200.0,
        "steady_fps": 150.0,
        "steady_cpu_fps": 160.0,
        "eval_mean": -5.0,
        "runs": 2,
    }
    assert runs[0]["fps"] == 100.0  # the runs are left as they were


def test_interleaved_rates_time_each_step_in_alternating_blocks():
    bench = _bench()
    calls: list[bool] = []
    steps = {False: lambda data: calls.append(False), True: lambda data: calls.append(True)}
    slow, fast = bench.interleaved_rates(steps, None, rounds=4, block=3)
    assert (
        calls
        == [False] * 3
        + [True] * 3
        + [True] * 3
        + [False] * 3
        + [False] * 3
        + [True] * 3
        + [True] * 3
        + [False] * 3
    )
    assert slow > 0 and fast > 0


def test_the_batched_ab_runs_each_step_under_its_own_setting_and_restores_it(monkeypatch):
    """--batched-ab: each step always runs with the flag it was built under (a compiled
    step never retraces for the other setting), and the flag is on again afterwards."""
    from rl.objectives import _loss

    bench = _bench()
    seen: list[tuple[bool, bool, bool]] = []

    def builder(compiled, data):
        built_under = _loss._BATCHED_ENSEMBLES

        def step(batch):
            seen.append((compiled, built_under, _loss._BATCHED_ENSEMBLES))
            return {"loss": float(built_under)}

        return step, data

    monkeypatch.setitem(bench.MICRO, "fake", builder)
    result = bench.micro_batched("fake", rounds=2, block=2)
    assert set(result) == {"eager", "compiled"}
    assert all(under == flag for _, under, flag in seen)
    for compiled in (False, True):
        calls = [under for c, under, _ in seen if c is compiled]
        assert calls.count(True) == calls.count(False) == 1 + 2 * 2  # first call + 2 blocks of 2
        mode = result["compiled" if compiled else "eager"]
        assert mode["members"] > 0 and mode["batched"] > 0
        assert mode["gain"] == mode["batched"] / mode["members"]
        assert mode["max_diff"] == 1.0  # the logs of the two settings, as the steps returned them
    assert _loss._BATCHED_ENSEMBLES is True


def test_an_ab_without_micro_or_two_abs_at_once_are_refused():
    import subprocess

    for args, message in (
        (["--batched-ab"], "give --micro"),
        (["--cse-ab"], "give --micro"),
        (["--narrow-ab"], "give --micro"),
        (["--micro", "sac", "--batched-ab", "--cse-ab"], "give one"),
        (["--micro", "sac", "--cse-ab", "--narrow-ab"], "give one"),
    ):
        out = subprocess.run(
            [sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 2 and message in out.stderr, (args, out.stderr[-500:])


def _torchrl_bench():
    sys.path.insert(0, str(BENCH.parent))  # it imports bench_compile's seed ratios
    return load_path("bench_compile_torchrl", BENCH.parent / "bench_compile_torchrl.py")


def test_torchrl_table_gives_each_librarys_ratio_beside_the_seeds(tmp_path):
    """``bench_compile_torchrl.py``'s table: each library's compiled / eager rate, the GEMM
    cap, the seed's ratio and rl's compiled rate over TorchRL's, above the earlier runs."""
    bench = _torchrl_bench()
    out = tmp_path / "compile_torchrl.md"
    out.write_text("# title\n\n## an earlier run\n")
    rows = [
        {
            "algo": "iql",
            "rl": {"eager": 80.0, "compiled": 120.0, "ratio_cap": 2.1},
            "torchrl": {"eager": 50.0, "compiled": 60.0, "graphs": 6, "graph_breaks": 6},
        }
    ]
    args = SimpleNamespace(algos=["iql"], rounds=10, block=20, out=str(out))
    bench.write_table(rows, args, total=60.0)
    text = out.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| iql |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # TorchRL 60/50, rl 120/80, the seed's 2.55x, rl compiled over TorchRL compiled 2x
    assert cells == ["iql", "50.0", "60.0", "1.20x", "80.0", "120.0", "1.50x", "2.10x", "2.55x",
                     "2.00x", "6 / 6"]  # fmt: skip
    assert text.startswith("# ") and text.index("| iql |") < text.index("## an earlier run")


def test_torchrl_bench_names_a_missing_interpreter(tmp_path, monkeypatch, capsys):
    bench = _torchrl_bench()
    missing = tmp_path / "no-python"
    monkeypatch.setattr(sys, "argv", ["bench", "--torchrl-python", str(missing)])
    with pytest.raises(SystemExit):
        bench.main()
    assert f"no TorchRL interpreter at {missing}" in capsys.readouterr().err
