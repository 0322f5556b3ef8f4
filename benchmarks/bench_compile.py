"""Whole training scripts, eager against ``--compile``, on the same budget and seed.

For each algorithm the example script runs twice, eager and compiled, one after the
other (interleaved: the two runs of an algorithm are neighbours in time, on the same
load), each in a fresh process (a compiled run pays its own compilation, as a user's
run does). The table gives the training frames per second of both (the script's own
clock: collection and updates, compilation included, evaluation excluded), the ratio,
the seed README's figure, and the final evaluation return of both runs, with the
``torch._dynamo`` counters of the compiled run (graphs, graph breaks, recompilations).

Budgets are cut from the scripts' learning targets so that the whole run fits in about
25 minutes on a 2-core CPU; the returns are therefore those of short runs, compared
between eager and compiled on the same seed, not the learning targets.

Usage:
    python benchmarks/bench_compile.py [--algos ppo sac ...] [--scale 1.0] [--seed 0]

Results go to benchmarks/results/compile.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "compile.md"
#: the seed README's whole-script torch.compile speed-ups on CPU
SEED_RATIO = {
    "dqn": 1.53,
    "ddpg": 1.54,
    "iql": 2.55,
    "cql": 1.91,
    "td3": 1.79,
    "a2c": 1.76,
    "ppo": 2.67,
    "sac": 2.01,
    "redq": 2.35,
}
#: algorithm -> (script, preset or None, Config overrides); budgets sized for ~25 min
RUNS = {
    "ppo": ("ppo", "cartpole", {"total_frames": 40_960}),
    "a2c": ("a2c", None, {"total_frames": 40_000}),
    "dqn": ("dqn", None, {"total_frames": 20_000, "eval_interval": 0}),
    "ddpg": ("ddpg", None, {"total_frames": 5_000}),
    "td3": ("td3", None, {"total_frames": 5_000}),
    "sac": ("sac", None, {"total_frames": 5_000}),
    "redq": ("redq", None, {"total_frames": 3_000}),
    "iql": ("offline", None, {"algo": "iql", "num_updates": 3_000, "eval_interval": 10**9}),
    "cql": ("offline", None, {"algo": "cql", "num_updates": 2_000, "eval_interval": 10**9}),
}
COMMON = {"eval_episodes": 5, "progress": False}


def run_one(algo: str, compile: bool, seed: int, scale: float, dataset: str | None) -> dict:
    """Runs one script in this process; returns its figures (called in a child)."""
    import dataclasses
    import importlib.util

    import torch._dynamo.utils as dynamo_utils

    script, preset, overrides = RUNS[algo]
    path = ROOT / "examples" / f"{script}.py"
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(script, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[script] = module
    spec.loader.exec_module(module)
    presets = getattr(module, "PRESETS", None)
    cfg = presets[preset or next(iter(presets))][1] if presets else module.Config()
    overrides = dict(overrides)
    for key in ("total_frames", "num_updates"):
        if key in overrides:
            overrides[key] = max(int(overrides[key] * scale), 1)
    if script == "offline":
        overrides["dataset"] = dataset
    log_dir = tempfile.mkdtemp(prefix=f"bench_compile_{algo}_")
    cfg = dataclasses.replace(
        cfg, **COMMON, **overrides, seed=seed, compile=compile, log_dir=log_dir
    )
    summary = module.main(cfg)
    counters = dynamo_utils.counters
    return {
        "frames": summary["frames"],
        "seconds": summary["seconds"],
        "fps": summary["fps"],
        "eval_mean": summary["eval_mean"],
        "graph_breaks": sum(counters["graph_break"].values()),
        "break_reasons": sorted({k.split("\n")[0] for k in counters["graph_break"]}),
        "graphs": counters["stats"].get("unique_graphs", 0),
        "recompiles": sum(counters["recompiles"].values()),
    }


def child(algo: str, compile: bool, seed: int, scale: float, dataset: str | None) -> dict:
    cmd = [sys.executable, __file__, "--child", algo, "--seed", str(seed), "--scale", str(scale)]
    if compile:
        cmd.append("--compile")
    if dataset:
        cmd += ["--dataset", dataset]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode:
        raise RuntimeError(f"{algo} (compile={compile}) failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def make_dataset(seed: int, scale: float) -> str:
    """The offline runs' dataset: an eager SAC run that keeps its replay buffer."""
    path = Path(tempfile.mkdtemp(prefix="bench_compile_data_")) / "data"
    cmd = [
        sys.executable,
        str(ROOT / "examples" / "sac.py"),
        "--total-frames",
        str(max(int(5_000 * scale), 1_500)),
        "--eval-episodes",
        "2",
        "--no-progress",
        "--seed",
        str(seed),
        "--log-dir",
        str(path.parent / "runs"),
        "--save-buffer",
        str(path),
    ]
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
    return str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", nargs="+", default=list(RUNS), choices=list(RUNS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every budget")
    parser.add_argument("--child", choices=list(RUNS), help=argparse.SUPPRESS)
    parser.add_argument("--compile", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dataset", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    if args.child:
        result = run_one(args.child, args.compile, args.seed, args.scale, args.dataset)
        print(json.dumps(result))
        return

    dataset = None
    if {"iql", "cql"} & set(args.algos):
        dataset = make_dataset(args.seed, args.scale)
    rows, start = [], time.perf_counter()
    for i, algo in enumerate(args.algos):
        # alternate which mode runs first, so neither always gets the other's warm caches
        order = (False, True) if i % 2 == 0 else (True, False)
        res = {mode: child(algo, mode, args.seed, args.scale, dataset) for mode in order}
        eager, compiled = res[False], res[True]
        row = {"algo": algo, "eager": eager, "compiled": compiled}
        row["ratio"] = compiled["fps"] / eager["fps"]
        rows.append(row)
        print(
            f"{algo:5s} eager {eager['fps']:8.1f} fps  compiled {compiled['fps']:8.1f} fps  "
            f"ratio {row['ratio']:.2f}x (seed {SEED_RATIO[algo]:.2f}x)  return eager "
            f"{eager['eval_mean']:.1f} compiled {compiled['eval_mean']:.1f}  breaks "
            f"{compiled['graph_breaks']} graphs {compiled['graphs']} recompiles "
            f"{compiled['recompiles']}",
            flush=True,
        )
    total = time.perf_counter() - start
    write_table(rows, args, total)


def write_table(rows: list[dict], args, total: float) -> None:
    unit = {"iql": "updates", "cql": "updates"}
    lines = [
        "# Whole training scripts: eager against `--compile` (CPU)",
        "",
        f"`python benchmarks/bench_compile.py --seed {args.seed} --scale {args.scale}`; "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch "
        f"{_torch_version()}, one thread, each run in its own process (the compiled run "
        f"pays its compilation), eager and compiled interleaved; total {total / 60:.1f} min.",
        "",
        "Frames/s is the script's training clock (collection and updates, compilation "
        "included; the offline rows count gradient steps). Returns are the final "
        "evaluation (5 deterministic episodes) of short runs, eager and compiled on the "
        "same seed. Breaks / graphs / recompiles: `torch._dynamo` counters of the "
        "compiled run.",
        "",
        "| algorithm | budget | eager /s | compiled /s | ratio | seed's ratio | reached | "
        "eval return eager | eval return compiled | breaks | graphs | recompiles |",
        "| --- | ---: | ---: | ---: | ---: | ---: | :---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        e, c, algo = row["eager"], row["compiled"], row["algo"]
        lines.append(
            f"| {algo} | {e['frames']} {unit.get(algo, 'frames')} | {e['fps']:.1f} | "
            f"{c['fps']:.1f} | {row['ratio']:.2f}x | {SEED_RATIO[algo]:.2f}x | "
            f"{'yes' if row['ratio'] >= SEED_RATIO[algo] else 'no'} | {e['eval_mean']:.1f} | "
            f"{c['eval_mean']:.1f} | {c['graph_breaks']} | {c['graphs']} | {c['recompiles']} |"
        )
    reasons = sorted({r for row in rows for r in row["compiled"]["break_reasons"]})
    lines += ["", "Graph-break reasons seen in the compiled runs:", ""]
    lines += [f"- {r}" for r in reasons] or ["- none"]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"written {args.out}")


def _torch_version() -> str:
    import torch

    return torch.__version__


if __name__ == "__main__":
    main()
