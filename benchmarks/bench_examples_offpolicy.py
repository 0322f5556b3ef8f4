"""Learning targets of the off-policy examples, rerun with several seeds.

Each algorithm's example runs with its default Config (the learning target's budget)
for every seed, each run in its own process; the table gives the frames, the wall time
and the final evaluation return (10 deterministic episodes) per seed, against the target:

- DQN CartPole-v1: evaluation return >= 475 within 100k frames;
- SAC, TD3, DDPG, REDQ, CrossQ Pendulum-v1: >= -200 within 20k frames;
- SAC HalfCheetah-v5 (``--algos sac-halfcheetah``; 256-wide networks, lr 1e-3, 5k random
  frames): >= 3000 within 100k frames;
- offline IQL and CQL on the Pendulum dataset that ``sac.py --save-buffer`` wrote (one
  per seed): normalised score >= 80, i.e. 80% of the way from uniformly random actions
  to the data-collecting policy's evaluation return.

Usage:
    python benchmarks/bench_examples_offpolicy.py [--seeds 0 1 2] [--algos sac td3 ...]
        [--set total_frames=8000] [--jobs 3]

``--set`` overrides a Config field of the online runs (the table says so). Results go to
benchmarks/results/examples_offpolicy.md (and .json next to it, merged with earlier
runs by algorithm and seed).
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "examples_offpolicy"
ONLINE = {
    "dqn": ("CartPole-v1", 475.0, 100_000),
    "sac": ("Pendulum-v1", -200.0, 20_000),
    "td3": ("Pendulum-v1", -200.0, 20_000),
    "ddpg": ("Pendulum-v1", -200.0, 20_000),
    "redq": ("Pendulum-v1", -200.0, 20_000),
    "crossq": ("Pendulum-v1", -200.0, 20_000),
    "sac-halfcheetah": ("HalfCheetah-v5", 3000.0, 100_000),
}
#: online rows that run a script with settings of their own: (script, Config overrides)
VARIANTS = {
    "sac-halfcheetah": (
        "sac",
        {
            "env_id": "HalfCheetah-v5",
            "total_frames": 100_000,
            "init_random_frames": 5_000,
            "hidden": 256,
            "lr": 1e-3,
        },
    ),
}
OFFLINE = ("iql", "cql")

_RUNNER = """
import importlib.util, json, sys
name, overrides, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
spec = importlib.util.spec_from_file_location("example_" + name, "examples/" + name + ".py")
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
summary = module.main(module.Config(**overrides))
keep = ("frames", "seconds", "eval_mean", "eval_returns", "score", "data_return", "random_return")
json.dump({k: summary[k] for k in keep if k in summary}, open(out, "w"))
"""


def run(name: str, overrides: dict, log_dir: Path) -> dict:
    """Runs one example in a fresh process; returns its summary and the wall time."""
    overrides = {"progress": False, "log_dir": str(log_dir), **overrides}
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _RUNNER, name, json.dumps(overrides), out],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{name} {overrides} failed:\n{proc.stderr[-3000:]}")
    summary = json.loads(Path(out).read_text())
    os.unlink(out)
    summary["wall"] = wall
    return summary


def parse_sets(items: list[str]) -> dict:
    sets = {}
    for item in items:
        key, _, value = item.partition("=")
        sets[key] = json.loads(value)
    return sets


def bench_seed(algo: str, seed: int, sets: dict, work: Path) -> list[dict]:
    rows = []

    def online_row(name: str, s: dict) -> dict:
        env_id, target, budget = ONLINE[name]
        return {
            "algo": name,
            "seed": seed,
            "env": env_id,
            "frames": s["frames"],
            "wall": s["wall"],
            "seconds": s["seconds"],
            "return": s["eval_mean"],
            "target": f">= {target:g} within {budget // 1000}k frames",
            "met": s["eval_mean"] >= target and s["frames"] <= budget,
            "overrides": sets,
        }

    if algo in ONLINE:
        script, preset = VARIANTS.get(algo, (algo, {}))
        rows.append(online_row(algo, run(script, {"seed": seed, **preset, **sets}, work / "runs")))
    else:  # "offline": a default SAC run that saves its buffer (its own row), then IQL and CQL
        data = work / f"pendulum-s{seed}"
        s = run("sac", {"seed": seed, "save_buffer": str(data), **sets}, work / "runs")
        rows.append(online_row("sac", s))
        for offline in OFFLINE:
            o = run("offline", {"seed": seed, "dataset": str(data), "algo": offline}, work / "runs")
            rows.append(
                {
                    "algo": f"offline {offline}",
                    "seed": seed,
                    "env": "Pendulum-v1 dataset",
                    "frames": s["frames"],
                    "wall": o["wall"],
                    "seconds": o["seconds"],
                    "return": o["eval_mean"],
                    "data_return": o["data_return"],
                    "random_return": o["random_return"],
                    "score": o["score"],
                    "target": "score >= 80",
                    "met": o["score"] >= 80,
                    "overrides": sets,
                }
            )
    return rows


def write(rows: list[dict]) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    old = (
        json.loads(RESULTS.with_suffix(".json").read_text())
        if RESULTS.with_suffix(".json").exists()
        else []
    )
    merged = {(r["algo"], r["seed"]): r for r in old}
    merged.update({(r["algo"], r["seed"]): r for r in rows})
    rows = sorted(merged.values(), key=lambda r: (r["algo"], r["seed"]))
    RESULTS.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    lines = [
        "# Off-policy examples: learning targets",
        "",
        f"Measured with `benchmarks/bench_examples_offpolicy.py` on {platform.node()} "
        f"({os.cpu_count()} CPU cores, shared with other jobs: wall times are upper bounds), "
        "torch threads 1. Return: mean over 10 deterministic evaluation episodes at the end. "
        "Offline rows: frames of the SAC run that wrote the dataset; wall time of the offline "
        "run alone; score = 100 (R - R_random) / (R_data - R_random).",
        "",
        "| algorithm | env | seed | frames | wall (s) | eval return | target | met | overrides |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ret = f"{r['return']:.1f}"
        if "score" in r:
            ret += f" (score {r['score']:.0f}; data {r['data_return']:.1f}, random {r['random_return']:.1f})"
        sets = ", ".join(f"{k}={v}" for k, v in r["overrides"].items()) or "defaults"
        lines.append(
            f"| {r['algo']} | {r['env']} | {r['seed']} | {r['frames']} | {r['wall']:.0f} | "
            f"{ret} | {r['target']} | {'yes' if r['met'] else 'no'} | {sets} |"
        )
    RESULTS.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--algos",
        nargs="+",
        default=[a for a in ONLINE if a not in ("sac", "sac-halfcheetah")] + ["offline"],
        help='"offline" runs sac.py --save-buffer (its sac row), then IQL and CQL on that data; '
        '"sac-halfcheetah" (MuJoCo, rl-envs[mujoco]; hours on 2 CPU cores) only when named',
    )
    parser.add_argument("--set", nargs="*", default=[], help="Config overrides, key=json")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once")
    parser.add_argument("--work", default=None, help="folder of the logs and datasets")
    args = parser.parse_args()
    sets = parse_sets(args.set)
    work = Path(args.work or tempfile.mkdtemp(prefix="bench_offpolicy_"))
    jobs = [(algo, seed) for algo in args.algos for seed in args.seeds]
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(bench_seed, algo, seed, sets, work) for algo, seed in jobs]
        for future in futures:
            try:
                rows = future.result()
            except RuntimeError as err:
                print(err, file=sys.stderr)
                continue
            write(rows)  # as each finishes: a long run interrupted keeps what it measured


if __name__ == "__main__":
    main()
