"""Timing helpers shared by the update benchmarks (``benchmarks/bench_*_update.py``).

Each of those scripts times one gradient step of an rl loss against the same step
written in plain PyTorch. They measure the same way: every candidate runs a few warm-up
calls (compilation happens there), then rounds alternate the candidates so that a slow
drift of a shared machine's load falls on all of them alike; a figure is the best or the
median of a candidate's rounds, or the median over rounds of a paired ratio. What each
script reads from the rounds, and which clock it uses, stays its own choice.

    >>> times = interleaved({"a": lambda: None, "b": lambda: None}, iters=2, rounds=3)
    >>> sorted(times), len(times["a"])
    (['a', 'b'], 3)
"""

from __future__ import annotations

import ctypes
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

__all__ = [
    "best",
    "interleaved",
    "markdown_table",
    "median",
    "paired_ratio",
    "paired_table",
    "per_call",
    "raise_mmap_threshold",
    "results_path",
    "write_report",
]

RESULTS = Path(__file__).parent / "results"


def results_path(name: str) -> str:
    """``benchmarks/results/<name>``, the default ``--out`` of a benchmark."""
    return str(RESULTS / name)


def raise_mmap_threshold() -> bool:
    """Keep glibc from mmapping (and page-faulting) every large activation on each call.

    Applies to every candidate of the run; it makes the figures faster and much steadier
    on a shared machine. Returns whether it could be set (glibc only).
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_mmap_threshold, 1 << 30)) and bool(
            libc.mallopt(m_trim_threshold, 1 << 30)
        )
    except OSError:
        return False


def per_call(fn: Callable[[], object], iters: int, clock=time.perf_counter) -> float:
    """Seconds of ``clock`` per call of ``fn``, over ``iters`` calls in a row."""
    start = clock()
    for _ in range(iters):
        fn()
    return (clock() - start) / iters


def interleaved(
    fns: Mapping[str, Callable[[], object]],
    iters: int,
    rounds: int,
    *,
    warmup: int = 3,
    clock=time.perf_counter,
) -> dict[str, list[float]]:
    """Seconds per call of each candidate, one entry per round.

    Args:
        fns: candidate name -> a callable without arguments (one update step).
        iters: calls per candidate and round.
        rounds: rounds; each times every candidate once, in the order of ``fns``.
        warmup: untimed calls of each candidate before the first round.
        clock: ``time.perf_counter`` (wall time) or ``time.process_time`` (CPU time of
            the process: on a shared machine it leaves out the time another job held
            the core).

    Returns:
        name -> ``rounds`` figures (seconds per call).
    """
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(per_call(fn, iters, clock))
    return times


def best(times: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """Each candidate's fastest round."""
    return {name: min(values) for name, values in times.items()}


def median(times: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """Each candidate's median round."""
    return {name: float(statistics.median(values)) for name, values in times.items()}


def paired_ratio(times: Mapping[str, Sequence[float]], num: str, den: str) -> float:
    """Median over rounds of ``times[num] / times[den]`` within a round (it cancels slow
    drifts of the load that fall between rounds).

    Raises:
        ValueError: the two candidates were not timed over the same rounds.
    """
    a, b = times[num], times[den]
    if len(a) != len(b):
        raise ValueError(
            f"a paired ratio needs the same rounds on both sides, got {len(a)} rounds of "
            f"{num!r} and {len(b)} of {den!r}"
        )
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str = "---"):
    """The lines of a markdown table; ``align`` is the rule under each column except the
    first, which is always ``---`` (``"---:"`` right-aligns the figures)."""
    rule = ["---"] + [align] * (len(header) - 1)
    return [
        "| " + " | ".join(header) + " |",
        "| " + " | ".join(rule) + " |",
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


def write_report(lines: Sequence[str], out: str | Path) -> None:
    """Writes the report to ``out`` and prints it."""
    text = "\n".join(lines)
    Path(out).write_text(text + "\n")
    print(text)


def paired_table(loss: str, rows: Sequence[tuple]) -> list[str]:
    """The table of a two-sided benchmark (plain PyTorch against one rl loss) whose rows
    are ``(case, {"plain": s, "ours": s}, ratio of the bests, median paired ratio)``."""
    header = [
        "case",
        "plain PyTorch (ms/update)",
        f"{loss} (ms/update)",
        "ratio of bests",
        "median paired ratio (target <= 1.1)",
    ]
    table = [
        [
            label,
            f"{fastest['plain'] * 1e3:.3f}",
            f"{fastest['ours'] * 1e3:.3f}",
            f"{ratio:.3f}x",
            f"{paired:.3f}x",
        ]
        for label, fastest, ratio, paired in rows
    ]
    return markdown_table(header, table)
