"""PPO training speed of examples/ppo.py against a CleanRL-style PPO, measured in one run.

Both train CartPole-v1 with CleanRL's default hyperparameters (4 envs x 128 steps, 4
epochs of 4 minibatches, 64x64 tanh networks): the floor is
``benchmarks/cleanrl_style_ppo.py`` (plain PyTorch, gymnasium's ``SyncVectorEnv``, a
Python GAE loop); ours is ``examples/ppo.py`` (``GymEnv(num_envs=4)``, ``Collector``,
``GAE``, ``ClipPPOLoss``, with logging). Each process uses one torch thread. Reported:

- training throughput (collection and updates together), frames/s, best of ``--repeats``
  runs taken alternately; ratio = ours / floor (higher is better); and the same per
  CPU-second of the process (median of the runs), which a shared machine's load does
  not skew;
- start-up: wall time from launching the command to its first optimizer step, for each
  script launched as a fresh ``python`` process (imports included).

Writes benchmarks/results/ppo_train.md.

    python benchmarks/bench_ppo_train.py [--frames 51200] [--repeats 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import cleanrl_style_ppo  # noqa: E402
import ppo  # noqa: E402

# A child process that reports the time of its first optimizer step, then exits.
_FIRST_STEP = """
import sys, time, torch
sys.path[:0] = [{examples!r}, {benchmarks!r}]
_step = torch.optim.Adam.step
def _first(self, *a, **k):
    print("FIRST_STEP", time.time(), flush=True)
    raise SystemExit(0)
torch.optim.Adam.step = _first
{body}
"""
_OURS = (
    "import dataclasses, ppo; ppo.main(dataclasses.replace(ppo.PRESETS['cleanrl'][1], "
    "total_frames=512, log_dir={tmp!r}, exp_name='s', progress=False))"
)
_FLOOR = "import cleanrl_style_ppo; cleanrl_style_ppo.train(total_frames=512)"


def time_to_first_step(body: str) -> float:
    code = _FIRST_STEP.format(
        examples=str(ROOT / "examples"), benchmarks=str(ROOT / "benchmarks"), body=body
    )
    start = time.time()
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True
    ).stdout
    stamp = next(line for line in out.splitlines() if line.startswith("FIRST_STEP"))
    return float(stamp.split()[1]) - start


def train_ours(frames: int, log_dir: str) -> tuple[float, float]:
    cfg = dataclasses.replace(
        ppo.PRESETS["cleanrl"][1],
        total_frames=frames,
        log_dir=log_dir,
        exp_name="bench",
        progress=False,
        eval_episodes=1,
    )
    out = ppo.main(cfg)
    return out["fps"], out["cpu_fps"]


def train_floor(frames: int) -> tuple[float, float]:
    out = cleanrl_style_ppo.train(total_frames=frames)
    return out["fps"], out["cpu_fps"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=51_200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)

    ours, floor, ours_cpu, floor_cpu = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for runs, cpu_runs, fps in (
                (floor, floor_cpu, train_floor(args.frames)),
                (ours, ours_cpu, train_ours(args.frames, tmp)),
            ):
                runs.append(fps[0])
                cpu_runs.append(fps[1])
        start_ours = min(time_to_first_step(_OURS.format(tmp=tmp)) for _ in range(args.repeats))
    start_floor = min(time_to_first_step(_FLOOR) for _ in range(args.repeats))

    lines = [
        "# PPO training speed: examples/ppo.py vs a CleanRL-style PPO",
        "",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__}, one torch thread; CartPole-v1, CleanRL's defaults, "
        f"{args.frames} frames, best of {args.repeats}.",
        "",
        "| | CleanRL-style (floor) | examples/ppo.py | ratio |",
        "| --- | ---: | ---: | ---: |",
        f"| training frames/s | {max(floor):,.0f} | {max(ours):,.0f} | "
        f"{max(ours) / max(floor):.2f}x |",
        f"| training frames per CPU-second (median) | {median(floor_cpu):,.0f} | "
        f"{median(ours_cpu):,.0f} | {median(ours_cpu) / median(floor_cpu):.2f}x |",
        f"| command to first optimizer step | {start_floor:.1f} s | {start_ours:.1f} s | "
        f"{start_ours / start_floor:.2f}x |",
        "",
        f"All runs (frames/s): floor {[round(f) for f in floor]}, ours {[round(f) for f in ours]}; "
        f"per CPU-second: floor {[round(f) for f in floor_cpu]}, ours {[round(f) for f in ours_cpu]}.",
        "",
        "Frames per CPU-second count only the time the process ran (its user and system time), "
        "so they hold on a shared machine where wall-clock rates swing with the load; the "
        "wall-clock row is the figure to compare on an idle machine.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    out = ROOT / "benchmarks" / "results" / "ppo_train.md"
    out.write_text(text)


if __name__ == "__main__":
    main()
