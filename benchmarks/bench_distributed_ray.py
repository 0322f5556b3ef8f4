"""Frames/s of RayCollector with 1 and 2 actors on an env whose step costs 1 ms of CPU
work, Ray's start-up cost, and the weight-broadcast latency of a 1M-parameter policy.

The env is the native CartPole plus a busy loop that spins until its thread has used 1 ms
of CPU time (``time.thread_time``: a loaded machine makes it last longer on the wall
clock, never shorter). The floor is a ``Collector`` over the same env in this process:
the plain loop with no Ray in it. Each round builds a RayCollector (async mode, policy
``None``: random actions), collects one warm-up batch, times ``--frames`` frames and
shuts down; rounds alternate 1 and 2 actors, and the median is reported. Ratios: 2 actors
/ 1 actor (target >= 1.6x on 2 CPUs) and 1 actor / the floor (Ray's overhead).

The broadcast latency is the extra time of a sync batch of one step per actor (2 actors)
when ``update_policy_weights_()`` precedes it: ``ray.put`` of the weights here, the
fetch from the object store in each actor and the copy into its policy.

    uv run python benchmarks/bench_distributed_ray.py            # writes results/distributed_ray.md
    uv run python benchmarks/bench_distributed_ray.py --frames 1000 --rounds 2
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")  # actors use this interpreter

import ray  # noqa: E402
import torch  # noqa: E402
from tensordict.nn import TensorDictModule  # noqa: E402
from torch import nn  # noqa: E402

from rl.collectors import Collector  # noqa: E402
from rl.collectors.distributed import RayCollector  # noqa: E402
from rl.envs import CartPoleEnv  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "distributed_ray.md"
STEP_CPU_S = 1e-3


class BusyCartPole(CartPoleEnv):
    """CartPole whose every step also burns 1 ms of this thread's CPU time."""

    def __init__(self):
        super().__init__(categorical_action_encoding=True)

    def _step(self, tensordict):
        end = time.thread_time() + STEP_CPU_S
        while time.thread_time() < end:
            pass
        return super()._step(tensordict)


class BigPolicy(nn.Module):
    """About 1M parameters: 4 -> 1000 -> 1000 -> 2, acting greedily."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(4, 1000), nn.Tanh(), nn.Linear(1000, 1000), nn.Tanh(), nn.Linear(1000, 2)
        )

    def forward(self, obs):
        return self.net(obs).argmax(-1)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (from /proc: Linux)."""
    with open(f"/proc/{pid}/stat") as file:
        fields = file.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _busy_steps(steps: int) -> None:
    for _ in range(steps):
        end = time.thread_time() + STEP_CPU_S
        while time.thread_time() < end:
            pass


def plain_fps(workers: int, frames: int) -> float:
    """The machine's ceiling: ``workers`` plain processes doing only the 1 ms steps."""
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_busy_steps, args=(frames // workers,)) for _ in range(workers)]
    start = time.perf_counter()
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    return frames / (time.perf_counter() - start)


def floor_fps(frames: int, batch: int) -> float:
    collector = Collector(BusyCartPole(), None, frames_per_batch=batch, total_frames=-1)
    collector.next()  # warm-up
    start = time.perf_counter()
    done = 0
    while done < frames:
        done += collector.next().numel()
    fps = done / (time.perf_counter() - start)
    collector.shutdown()
    return fps


def ray_round(workers: int, frames: int, batch: int) -> tuple[float, float, float]:
    """(frames/s, start-up s: construction to the end of the first batch, frames per
    CPU-second of the actor processes)."""
    start = time.perf_counter()
    collector = RayCollector(
        [BusyCartPole] * workers, None, frames_per_batch=batch, total_frames=-1, sync=False
    )
    collector.next()
    startup = time.perf_counter() - start
    pids = collector.worker_pids
    cpu = sum(cpu_seconds(pid) for pid in pids)
    start = time.perf_counter()
    done = 0
    while done < frames:
        done += collector.next().numel()
    fps = done / (time.perf_counter() - start)
    cpu = sum(cpu_seconds(pid) for pid in pids) - cpu
    collector.shutdown()
    return fps, startup, done / cpu


def broadcast_latency(repeats: int) -> dict:
    module = BigPolicy()
    params = sum(p.numel() for p in module.parameters())
    policy = TensorDictModule(module, in_keys=["observation"], out_keys=["action"])
    collector = RayCollector(
        [BusyCartPole] * 2, policy, frames_per_batch=2, total_frames=-1, sync=True
    )
    for _ in range(2):
        collector.next()
        collector.update_policy_weights_()
    plain, updated, puts = [], [], []
    for _ in range(repeats):
        start = time.perf_counter()
        collector.next()
        plain.append(time.perf_counter() - start)
        with torch.no_grad():
            module.net[0].bias.add_(1.0)  # a training step
        start = time.perf_counter()
        collector.update_policy_weights_()
        puts.append(time.perf_counter() - start)
        batch = collector.next()
        updated.append(time.perf_counter() - start)
    # the last batch acted with the last weights
    expected = policy(batch.exclude("action").clone())["action"]
    assert torch.equal(batch["action"], expected), "stale weights"
    collector.shutdown()
    return {
        "params": params,
        "plain_ms": 1e3 * statistics.median(plain),
        "updated_ms": 1e3 * statistics.median(updated),
        "put_ms": 1e3 * statistics.median(puts),
        "latency_ms": 1e3 * (statistics.median(updated) - statistics.median(plain)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--broadcasts", type=int, default=10)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    load_start = os.getloadavg()

    start = time.perf_counter()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    init_s = time.perf_counter() - start

    floors, fps, startups = [], {1: [], 2: []}, {1: [], 2: []}
    plain, cpu_fps = {1: [], 2: []}, {1: [], 2: []}
    for _ in range(args.rounds):
        floors.append(floor_fps(args.frames, args.batch))
        for workers in (1, 2):
            plain[workers].append(plain_fps(workers, args.frames))
            rate, startup, per_cpu = ray_round(workers, args.frames, args.batch)
            fps[workers].append(rate)
            startups[workers].append(startup)
            cpu_fps[workers].append(per_cpu)
    bcast = broadcast_latency(args.broadcasts)
    start = time.perf_counter()
    ray.shutdown()
    shutdown_s = time.perf_counter() - start
    load_end = os.getloadavg()
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()

    floor = statistics.median(floors)
    one, two = statistics.median(fps[1]), statistics.median(fps[2])
    p1, p2 = statistics.median(plain[1]), statistics.median(plain[2])
    c1, c2 = statistics.median(cpu_fps[1]), statistics.median(cpu_fps[2])
    met = "met" if two / one >= 1.6 else "NOT met"
    lines = [
        "# Distributed collection on Ray: scaling, start-up, weight broadcast",
        "",
        f"`uv run python benchmarks/bench_distributed_ray.py --frames {args.frames} "
        f"--batch {args.batch} --rounds {args.rounds}`; {platform.machine()}, "
        f"{os.cpu_count()} CPUs, ray {ray.__version__}, torch {torch.__version__}. Env: "
        "native CartPole + 1 ms of CPU work per step (busy loop on the thread's CPU time); "
        f"{args.batch}-frame batches, async mode, random actions; median of "
        f"{args.rounds} interleaved rounds; a local Ray instance with `num_cpus=2`.",
        "",
        f"Load average (1, 5, 15 min): {load_start[0]:.1f}, {load_start[1]:.1f}, "
        f"{load_start[2]:.1f} at the start, {load_end[0]:.1f}, {load_end[1]:.1f}, "
        f"{load_end[2]:.1f} at the end (`{uptime}`): other jobs share the 2 CPUs, so the "
        "absolute figures are below an idle machine's and the ratios are what to read.",
        "",
        "| collector | frames/s | ratio | target |",
        "| --- | ---: | ---: | --- |",
        f"| floor: Collector in this process | {floor:,.0f} | 1.00x (floor) | |",
        f"| RayCollector, 1 actor | {one:,.0f} | {one / floor:.2f}x the floor | |",
        f"| RayCollector, 2 actors | {two:,.0f} | {two / one:.2f}x 1 actor | >= 1.6x ({met}) |",
        f"| ceiling: 1 plain process doing only the 1 ms steps | {p1:,.0f} | | |",
        f"| ceiling: 2 plain processes | {p2:,.0f} | {p2 / p1:.2f}x 1 process | |",
        "",
        f"The ceiling rows measure what this machine gave two processes instead of one at "
        f"the time of the run ({p2 / p1:.2f}x): the RayCollector's 2-actor scaling is "
        f"{(two / one) / (p2 / p1):.2f} of it. Per CPU-second of the actor processes "
        f"(independent of how much CPU the other jobs leave): {c1:,.0f} frames with 1 actor, "
        f"{c2:,.0f} with 2 ({c2 / c1:.2f}x; the 1 ms step alone allows "
        f"{1 / STEP_CPU_S:,.0f}): each actor does the same work per frame, so two actors "
        f"with a free CPU each would give {2 * c2 / c1:.2f}x one (a projection from the "
        "CPU times, not a measurement).",
        "",
        "Rounds (frames/s): floor "
        + ", ".join(f"{v:,.0f}" for v in floors)
        + "; 1 actor "
        + ", ".join(f"{v:,.0f}" for v in fps[1])
        + "; 2 actors "
        + ", ".join(f"{v:,.0f}" for v in fps[2])
        + "; plain processes 1: "
        + ", ".join(f"{v:,.0f}" for v in plain[1])
        + ", 2: "
        + ", ".join(f"{v:,.0f}" for v in plain[2])
        + ".",
        "",
        "Start-up and broadcast:",
        "",
        "| what | time |",
        "| --- | ---: |",
        f"| `ray.init(address='local', num_cpus=2)` | {init_s:.1f} s |",
        f"| RayCollector, 1 actor: construction to the end of its first batch | "
        f"{statistics.median(startups[1]):.1f} s |",
        f"| RayCollector, 2 actors: construction to the end of the first batch | "
        f"{statistics.median(startups[2]):.1f} s |",
        f"| `ray.shutdown()` | {shutdown_s:.1f} s |",
        f"| `update_policy_weights_()` of {bcast['params']:,} parameters (`ray.put`) | "
        f"{bcast['put_ms']:.1f} ms |",
        f"| a 1-step batch of 2 actors, no update | {bcast['plain_ms']:.1f} ms |",
        f"| the same after `update_policy_weights_()` | {bcast['updated_ms']:.1f} ms |",
        f"| weight-broadcast latency (difference) | {bcast['latency_ms']:.1f} ms |",
        "",
        "Notes. The 1 ms step is CPU time, so each actor needs a CPU of its own: with two "
        "actors on two CPUs the scaling is bounded by what the other jobs on the machine "
        "leave free. Start-up is dominated by starting the actors' worker processes "
        "(importing torch and rl in each); the Ray runtime itself is started once. The "
        "broadcast is one `ray.put` of the state (4 MB for 1M float32 parameters) that "
        "both actors read from the shared-memory object store before their next batch.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        RESULTS.write_text(text)


if __name__ == "__main__":
    main()
