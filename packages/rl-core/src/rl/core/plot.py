"""Learning curves from CSV logs: ``python -m rl.core.plot LOGDIR [LOGDIR ...] -o curves.png``.

Every directory under a LOGDIR that holds a ``scalars/`` folder (what :class:`CSVLogger`
writes) is a run. Runs whose names differ only by a seed suffix (``..._seed3``,
``...-seed_3``) form one curve: the mean over seeds, with the band of one standard
deviation shaded. Each scalar gets its own panel; curves of every LOGDIR share the panels.
Needs matplotlib (``pip install "rl-core[plot]"``).
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["group_runs", "load_runs", "main", "plot_runs"]

_SEED = re.compile(r"[_-]?seed[_-]?\d+$")
Curve = tuple[np.ndarray, np.ndarray]


def _read_csv(path: Path) -> Curve:
    rows = [line.split(",")[:2] for line in path.read_text().splitlines() if line.strip()]
    data = np.array(rows, dtype=np.float64).reshape(-1, 2)
    order = np.argsort(data[:, 0], kind="stable")
    return data[order, 0], data[order, 1]


def load_runs(logdir: str | Path) -> dict[str, dict[str, Curve]]:
    """``{run name: {scalar name: (steps, values)}}`` for every run under ``logdir``.

    Raises:
        FileNotFoundError: ``logdir`` does not exist.
    """
    root = Path(logdir)
    if not root.exists():
        raise FileNotFoundError(f"no log directory at '{root}'")
    runs: dict[str, dict[str, Curve]] = {}
    for scalars in sorted(root.rglob("scalars")):
        if not scalars.is_dir():
            continue
        run = scalars.parent
        name = run.name if run != root else root.name
        curves = {}
        for csv in sorted(scalars.rglob("*.csv")):
            steps, values = _read_csv(csv)
            if len(steps):
                curves[csv.relative_to(scalars).with_suffix("").as_posix()] = (steps, values)
        if curves:
            runs[str(run.relative_to(root)) if run != root else name] = curves
    return runs


def group_runs(runs: dict[str, dict[str, Curve]]) -> dict[str, list[dict[str, Curve]]]:
    """Groups runs by their name without the seed suffix."""
    groups: dict[str, list[dict[str, Curve]]] = {}
    for name, curves in runs.items():
        groups.setdefault(_SEED.sub("", Path(name).name) or name, []).append(curves)
    return groups


def _smooth(values: np.ndarray, window: int) -> np.ndarray:
    if window <= 1 or len(values) < 2:
        return values
    kernel = np.ones(min(window, len(values)))
    return np.convolve(values, kernel, "same") / np.convolve(np.ones_like(values), kernel, "same")


def _mean_band(curves: list[Curve], smooth: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seeds interpolated on the union of their steps (up to the shortest run)."""
    end = min(c[0][-1] for c in curves)
    grid = np.unique(np.concatenate([c[0][c[0] <= end] for c in curves]))
    ys = np.stack([_smooth(np.interp(grid, s, v), smooth) for s, v in curves])
    return grid, ys.mean(0), ys.std(0)


def plot_runs(
    logdirs: Sequence[str | Path],
    output: str | Path = "curves.png",
    keys: Sequence[str] | None = None,
    smooth: int = 1,
) -> Path:
    """Draws the learning curves of the runs under ``logdirs`` into ``output`` (a PNG).

    Args:
        logdirs: CSV log directories (one or more runs each).
        output: the image file.
        keys: the scalars to draw (default: every scalar found, at most 9).
        smooth: moving-average window over logged points.

    Raises:
        ImportError: matplotlib is not installed (``pip install "rl-core[plot]"``).
        ValueError: no run or no requested scalar was found.

    Examples:
        >>> plot_runs(["logs/ppo", "logs/sac"], "curves.png", keys=["r_evaluation"])  # doctest: +SKIP
    """
    if importlib.util.find_spec("matplotlib") is None:
        raise ImportError('plotting needs matplotlib: pip install "rl-core[plot]"')
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labelled: list[tuple[str, list[dict[str, Curve]]]] = []
    for logdir in logdirs:
        groups = group_runs(load_runs(logdir))
        for name, runs in groups.items():
            label = Path(logdir).name if len(groups) == 1 else f"{Path(logdir).name}/{name}"
            labelled.append((label, runs))
    if not labelled:
        raise ValueError(
            f"no CSV run (a folder with scalars/*.csv) under {', '.join(map(str, logdirs))}"
        )
    found = sorted({k for _, runs in labelled for run in runs for k in run})
    if keys is None:
        keys = found[:9]
    missing = [k for k in keys if k not in found]
    if missing:
        raise ValueError(f"no scalar {missing[0]!r} in the logs; they have {found}")
    cols = min(3, len(keys))
    rows = -(-len(keys) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        for i, (label, runs) in enumerate(labelled):
            curves = [run[key] for run in runs if key in run]
            if not curves:
                continue
            x, mean, std = _mean_band(curves, smooth)
            color = f"C{i % 10}"
            seeds = f" ({len(curves)} seeds)" if len(curves) > 1 else ""
            ax.plot(x, mean, color=color, label=label + seeds)
            if len(curves) > 1:
                ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.25, linewidth=0)
        ax.set_title(key)
        ax.set_xlabel("frames")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    for ax in list(axes.flat)[len(keys) :]:
        ax.set_visible(False)
    fig.tight_layout()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=100)
    plt.close(fig)
    return output


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rl.core.plot", description="Learning curves from CSVLogger directories."
    )
    parser.add_argument("logdirs", nargs="+", help="CSV log directories (one curve group each)")
    parser.add_argument("-o", "--output", default="curves.png", help="the PNG to write")
    parser.add_argument("-k", "--key", action="append", dest="keys", help="a scalar to draw")
    parser.add_argument("--smooth", type=int, default=1, help="moving-average window")
    args = parser.parse_args(argv)
    try:
        out = plot_runs(args.logdirs, args.output, keys=args.keys, smooth=args.smooth)
    except (FileNotFoundError, ValueError, ImportError) as err:
        parser.exit(2, f"error: {err}\n")
    sys.stdout.write(f"{out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
