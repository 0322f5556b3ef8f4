"""TorchRL's own update steps beside rl's, eager and compiled, on this CPU.

The seed README gives, for each algorithm, the whole-script speed-up of ``torch.compile``
over eager on CPU, measured on another machine (issue #34 asks rl's examples for at least
as much on this one). This benchmark asks what TorchRL 0.14.1 itself reaches here, at the
level of one update step: for each algorithm it times TorchRL's update step (built and
compiled as its sota-implementations do, with rl's sizes and loss options,
``_torchrl_updates.py``, run by a scratch TorchRL install) and rl's (the example's
``UpdateStep``, as ``bench_compile.py --micro`` times it, with the examples' inductor
options), eager and compiled, at the same sizes (batch 256, Pendulum-sized transitions),
one thread, each library in its own process, eager and compiled interleaved in blocks.

For the offline algorithms (IQL, CQL) an update step's ratio bounds the whole script's
from above: the rest of the script (sampling the dataset) is the same eager code in both
modes. The online scripts (SAC, REDQ) also compile the collector's policy, which is not
timed here: for them a step's ratio is not a bound of the script's.

    python3 -m venv ~/torchrl-ref && ~/torchrl-ref/bin/pip install torchrl==0.14.1 "tensordict<0.15"
    python benchmarks/bench_compile_torchrl.py [--algos sac redq iql cql] [--torchrl-python P]

The measured run installed torchrl and tensordict with ``--no-deps`` into such a venv and
reused this workspace's torch (a ``.pth`` file naming its site-packages); the table says
which versions ran.

Writes benchmarks/results/compile_torchrl.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from bench_compile import SEED_RATIO

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "compile_torchrl.md"
ALGOS = ("sac", "redq", "iql", "cql")
#: rl's side, in a child of this interpreter: bench_compile.micro's figures as JSON
RL_CHILD = (
    "import json, sys; sys.path.insert(0, {bench!r}); import bench_compile as b; "
    "print(json.dumps(b.micro({algo!r}, {rounds}, {block})))"
)


def run_rl(algo: str, rounds: int, block: int) -> dict:
    code = RL_CHILD.format(bench=str(ROOT / "benchmarks"), algo=algo, rounds=rounds, block=block)
    return _last_json([sys.executable, "-c", code], f"rl's {algo} update")


def run_torchrl(python: str, algo: str, rounds: int, block: int) -> dict:
    script = ROOT / "benchmarks" / "_torchrl_updates.py"
    return _last_json(
        [python, str(script), algo, str(rounds), str(block)], f"TorchRL's {algo} update"
    )


def _last_json(cmd: list[str], what: str) -> dict:
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({cmd[0]}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", nargs="+", default=list(ALGOS), choices=list(ALGOS))
    parser.add_argument(
        "--torchrl-python", default=str(Path.home() / "torchrl-ref" / "bin" / "python")
    )
    parser.add_argument("--rounds", type=int, default=10, help="timed blocks per mode")
    parser.add_argument("--block", type=int, default=20, help="updates per block")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    if not Path(args.torchrl_python).exists():
        parser.error(f"no TorchRL interpreter at {args.torchrl_python} (see the module doc)")

    rows, start = [], time.perf_counter()
    for i, algo in enumerate(args.algos):
        # alternate which library runs first, so neither always follows the other
        order = ("rl", "torchrl") if i % 2 == 0 else ("torchrl", "rl")
        row = {"algo": algo}
        for lib in order:
            if lib == "rl":
                row[lib] = run_rl(algo, args.rounds, args.block)
            else:
                row[lib] = run_torchrl(args.torchrl_python, algo, args.rounds, args.block)
        rows.append(row)
        r, t = row["rl"], row["torchrl"]
        print(
            f"{algo:5s} TorchRL eager {t['eager']:7.1f}/s compiled {t['compiled']:7.1f}/s "
            f"({t['compiled'] / t['eager']:.2f}x)   rl eager {r['eager']:7.1f}/s compiled "
            f"{r['compiled']:7.1f}/s ({r['compiled'] / r['eager']:.2f}x)   seed "
            f"{SEED_RATIO[algo]:.2f}x",
            flush=True,
        )
    write_table(rows, args, time.perf_counter() - start)


def write_table(rows: list[dict], args, total: float) -> None:
    """Puts this run's table at the top of ``args.out``, above the earlier ones."""
    lines = [
        f"## {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
        f"`bench_compile_torchrl.py --algos {' '.join(args.algos)}`",
        "",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, one thread; "
        f"TorchRL side: {rows[0]['torchrl'].get('versions', 'versions not reported')}; "
        f"{args.rounds} blocks of {args.block} updates per mode, medians; total "
        f"{total / 60:.1f} min. Updates per second. GEMM cap: the speed-up rl's compiled "
        "step would reach if everything but its matrix products took no time. rl's "
        "compiled steps are one graph each (tests/test_examples_compile.py).",
        "",
        "| algorithm | TorchRL eager | TorchRL compiled | TorchRL ratio | rl eager | "
        "rl compiled | rl ratio | rl GEMM cap | seed's ratio | rl compiled / TorchRL "
        "compiled | TorchRL graphs / breaks |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        r, t, algo = row["rl"], row["torchrl"], row["algo"]
        lines.append(
            f"| {algo} | {t['eager']:.1f} | {t['compiled']:.1f} | "
            f"{t['compiled'] / t['eager']:.2f}x | {r['eager']:.1f} | {r['compiled']:.1f} | "
            f"{r['compiled'] / r['eager']:.2f}x | {r['ratio_cap']:.2f}x | "
            f"{SEED_RATIO[algo]:.2f}x | {r['compiled'] / t['compiled']:.2f}x | "
            f"{t['graphs']} / {t['graph_breaks']} |"
        )
    out = Path(args.out)
    title = "# TorchRL's own update steps beside rl's, eager and compiled, on this CPU"
    earlier = out.read_text().split("\n", 1)[1].lstrip("\n") if out.exists() else ""
    out.write_text("\n".join([title, "", *lines, "", earlier]).rstrip("\n") + "\n")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
