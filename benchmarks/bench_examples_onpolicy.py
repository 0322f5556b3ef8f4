"""Reruns the on-policy learning targets of examples/README.md, several seeds each.

Targets (issue "Examples that learn"): PPO CartPole-v1 >= 475 evaluation return within
150k frames on every seed, PPO Pendulum-v1 >= -250, A2C CartPole-v1 >= 400. The
evaluation return is the mean over 10 deterministic episodes after training.

Writes benchmarks/results/examples_onpolicy.md (a row per run, appended as runs finish so
that a long session keeps what it measured) and, per algorithm, the learning curves of its
seeds (mean and band, drawn by ``rl.core.plot`` from the example's own CSV logs) to
examples/images/<run>.png.

    python benchmarks/bench_examples_onpolicy.py [--seeds 0 1 2] [--runs ppo-cartpole a2c-cartpole]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import a2c  # noqa: E402
import ppo  # noqa: E402

from rl.core.plot import plot_runs  # noqa: E402

RUNS = {
    "ppo-cartpole": (ppo, ppo.PRESETS["cartpole"][1], 475.0),
    "ppo-pendulum": (ppo, ppo.PRESETS["pendulum"][1], -250.0),
    "a2c-cartpole": (a2c, a2c.Config(), 400.0),
}
RESULTS = ROOT / "benchmarks" / "results" / "examples_onpolicy.md"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--runs", nargs="+", default=list(RUNS), choices=list(RUNS))
    args = parser.parse_args()
    if not RESULTS.exists():
        RESULTS.write_text(
            "# On-policy learning targets (examples/ppo.py, examples/a2c.py)\n\n"
            "| run | seed | frames | wall time | frames/s | eval return (10 episodes) "
            "| target | met |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n"
        )
    images = ROOT / "examples" / "images"
    images.mkdir(exist_ok=True)
    for name in args.runs:
        module, preset, target = RUNS[name]
        tmp = tempfile.mkdtemp(prefix=f"{name}-")
        for seed in args.seeds:
            cfg = dataclasses.replace(
                preset, seed=seed, log_dir=tmp, exp_name=f"{name}_seed{seed}", progress=False
            )
            out = module.main(cfg)
            row = (
                f"| {name} | {seed} | {out['frames']:,} | {out['seconds']:.0f} s | "
                f"{out['fps']:,.0f} | {out['eval_mean']:.1f} | {target:g} | "
                f"{'yes' if out['eval_mean'] >= target else 'no'} |\n"
            )
            print(row, end="", flush=True)
            with RESULTS.open("a") as f:
                f.write(row)
            plot_runs([tmp], images / f"{name}.png", keys=["train/episode_return"], smooth=5)


if __name__ == "__main__":
    main()
