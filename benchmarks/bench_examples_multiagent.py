"""Reruns the multi-agent learning measurements of examples/multiagent/README.md.

MAPPO and IPPO on VMAS ``navigation`` (3 agents), QMIX on VMAS ``navigation`` with
discrete actions, each on several seeds with the scripts' default budgets. The figures:
the mean episode return of the first training batch, the last training return (mean of
the episodes of the last batch) and the evaluation return (20 deterministic episodes
after training). A return is the mean over agents of each agent's summed reward, as
BenchMARL reports it.

Writes benchmarks/results/examples_multiagent.md (a row per run, appended as runs finish)
and, per algorithm, the learning curves of its seeds to examples/multiagent/images/.

    python benchmarks/bench_examples_multiagent.py [--seeds 0 1 2] [--runs mappo ippo qmix]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import importlib
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "multiagent"))

from rl.core.plot import plot_runs  # noqa: E402

#: run name -> (script module, config overrides)
RUNS = {
    "mappo": ("mappo", {}),
    "ippo": ("mappo", {"centralised_critic": False}),
    "qmix": ("qmix", {}),
}
RESULTS = ROOT / "benchmarks" / "results" / "examples_multiagent.md"


def _returns(run_dir: Path) -> list[float]:
    path = run_dir / "scalars" / "train" / "episode_return.csv"
    with path.open() as f:
        return [float(row[1]) for row in csv.reader(f) if row]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--runs", nargs="+", default=list(RUNS), choices=list(RUNS))
    parser.add_argument("--preset", default="navigation", choices=["navigation", "balance"])
    parser.add_argument(
        "--log-dir", help="keep the runs' logs here (default: a temporary folder per script)"
    )
    args = parser.parse_args()
    if not RESULTS.exists():
        RESULTS.write_text(
            "# Multi-agent learning (examples/multiagent/, VMAS)\n\n"
            "| run | scenario | seed | frames | wall time | first train return "
            "| last train return | eval return (20 episodes) |\n"
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n"
        )
    images = ROOT / "examples" / "multiagent" / "images"
    images.mkdir(exist_ok=True)
    for name in args.runs:
        module_name, overrides = RUNS[name]
        module = importlib.import_module(module_name)
        log_dir = Path(args.log_dir or tempfile.mkdtemp()) / f"{name}-{args.preset}"
        for seed in args.seeds:
            cfg = dataclasses.replace(
                module.PRESETS[args.preset][1],
                **overrides,
                seed=seed,
                log_dir=str(log_dir),
                exp_name=f"{name}_seed{seed}",
                progress=False,
            )
            out = module.main(cfg)
            train = _returns(log_dir / cfg.exp_name)
            row = (
                f"| {name} | {cfg.scenario} | {seed} | {out['frames']:,} | "
                f"{out['seconds']:.0f} s | {train[0]:.2f} | {train[-1]:.2f} | "
                f"{out['eval_mean']:.2f} |\n"
            )
            print(row, end="", flush=True)
            with RESULTS.open("a") as f:
                f.write(row)
            # every seed found in the log folder (seeds may run in parallel processes)
            plot_runs(
                [log_dir], images / f"{name}-{args.preset}.png", keys=["train/episode_return"]
            )


if __name__ == "__main__":
    main()
