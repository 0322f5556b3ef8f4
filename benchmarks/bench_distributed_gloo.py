"""Frames/s of DistributedDataCollector with 1 and 2 gloo worker ranks on an env whose
step costs about 1 ms of CPU work, against a Collector in this process (the floor).

The env is the native CartPole plus a busy loop calibrated here to 1 ms of CPU time per
step (``time.process_time``, so that a loaded machine does not shorten it). Each row is
the median of interleaved rounds; a round builds the collector (its start-up cost is
reported apart), collects ``--frames`` frames after one warm-up batch, and shuts down.
Also measured: the weight-broadcast latency of a 1M-parameter policy (the extra time a
batch takes when ``update_policy_weights_()`` precedes it), 2 ranks, sync mode.

    uv run python benchmarks/bench_distributed_gloo.py            # writes results/distributed_gloo.md
    uv run python benchmarks/bench_distributed_gloo.py --frames 600 --rounds 2
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time
from pathlib import Path

import torch
from tensordict.nn import TensorDictModule
from torch import nn

from rl.collectors import Collector
from rl.collectors.distributed import DistributedDataCollector, DistributedSyncDataCollector
from rl.envs import CartPoleEnv

RESULTS = Path(__file__).parent / "results" / "distributed_gloo.md"


def burn(iters: int) -> int:
    total = 0
    for i in range(iters):
        total += i
    return total


def calibrate(ms: float = 1.0) -> int:
    """Loop iterations that take ``ms`` of CPU time in this process."""
    iters = 10_000
    while True:
        start = time.process_time()
        for _ in range(20):
            burn(iters)
        per_call = (time.process_time() - start) / 20
        if per_call > 2e-4:
            return max(1, int(iters * ms * 1e-3 / per_call))
        iters *= 4


class BurnCartPole(CartPoleEnv):
    """CartPole whose step also burns ``iters`` loop iterations (about 1 ms of CPU)."""

    def __init__(self, iters: int):
        super().__init__(categorical_action_encoding=True)
        self.iters = iters

    def _step(self, tensordict):
        burn(self.iters)
        return super()._step(tensordict)


class SleepCartPole(CartPoleEnv):
    """CartPole whose step also waits 1 ms (a simulator in another process or machine)."""

    def __init__(self):
        super().__init__(categorical_action_encoding=True)

    def _step(self, tensordict):
        time.sleep(1e-3)
        return super()._step(tensordict)


class PoleSign(nn.Module):
    def forward(self, obs):
        return (obs[..., 2] > 0).long()


class BigPolicy(nn.Module):
    """PoleSign that carries a 1M-parameter layer (weights to broadcast, unused to act)."""

    def __init__(self):
        super().__init__()
        self.big = nn.Linear(1000, 1000)

    def forward(self, obs):
        return (obs[..., 2] > 0).long()


def policy(module=None) -> TensorDictModule:
    return TensorDictModule(module or PoleSign(), in_keys=["observation"], out_keys=["action"])


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(collector, frames: int, pids: list[int]) -> tuple[float, float, float]:
    """frames/s, CPU ms per frame (this process and ``pids``), cores busy on average."""
    collector.next()  # warm-up
    cpu0 = time.process_time() + sum(proc_cpu(p) for p in pids)
    start = time.perf_counter()
    got = 0
    while got < frames:
        got += collector.next().numel()
    wall = time.perf_counter() - start
    cpu = time.process_time() + sum(proc_cpu(p) for p in pids) - cpu0
    return got / wall, cpu / got * 1e3, cpu / wall


def run_local(env_fn, frames: int, fpb: int) -> tuple[float, float, float]:
    collector = Collector(env_fn(), policy(), frames_per_batch=fpb)
    out = timed(collector, frames, [])
    collector.shutdown()
    return out


def run_distributed(env_fn, workers: int, frames: int, fpb: int, sync: bool):
    start = time.perf_counter()
    collector = DistributedDataCollector(
        env_fn,
        policy(),
        num_workers=workers,
        sync=sync,
        frames_per_batch=fpb * (workers if sync else 1),
    )
    startup = time.perf_counter() - start
    out = timed(collector, frames, collector.worker_pids)
    collector.shutdown()
    return out, startup


def broadcast_latency(reps: int = 10) -> tuple[float, int]:
    """Median extra seconds of a tiny sync batch preceded by a 1M-parameter update."""
    module = BigPolicy()
    n_params = sum(p.numel() for p in module.parameters())
    collector = DistributedSyncDataCollector(
        functools.partial(CartPoleEnv, categorical_action_encoding=True),
        policy(module),
        num_workers=2,
        frames_per_batch=2,
        update_interval=10**9,
    )
    collector.next()
    plain, with_update = [], []
    for _ in range(reps):
        start = time.perf_counter()
        collector.next()
        plain.append(time.perf_counter() - start)
        start = time.perf_counter()
        collector.update_policy_weights_()
        collector.next()
        with_update.append(time.perf_counter() - start)
    collector.shutdown()
    return statistics.median(with_update) - statistics.median(plain), n_params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=1000, help="frames timed per run")
    parser.add_argument("--fpb", type=int, default=100, help="frames per batch of a worker")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    torch.set_num_threads(1)
    iters = calibrate()
    env_fn = functools.partial(BurnCartPole, iters)
    load_before = os.getloadavg()
    rows: dict[str, list[tuple]] = {"local": [], "1 rank": [], "2 ranks": [], "2 ranks sync": []}
    startups: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(args.rounds):
        rows["local"].append(run_local(env_fn, args.frames, args.fpb))
        out, t = run_distributed(env_fn, 1, args.frames, args.fpb, sync=False)
        rows["1 rank"].append(out)
        startups[1].append(t)
        out, t = run_distributed(env_fn, 2, 2 * args.frames, args.fpb, sync=False)
        rows["2 ranks"].append(out)
        startups[2].append(t)
        out, _ = run_distributed(env_fn, 2, 2 * args.frames, args.fpb, sync=True)
        rows["2 ranks sync"].append(out)
    waits: dict[str, list[tuple]] = {"1 rank": [], "2 ranks": [], "2 ranks sync": []}
    for _ in range(args.rounds):
        waits["1 rank"].append(run_distributed(SleepCartPole, 1, args.frames, args.fpb, False)[0])
        waits["2 ranks"].append(
            run_distributed(SleepCartPole, 2, 2 * args.frames, args.fpb, False)[0]
        )
        waits["2 ranks sync"].append(
            run_distributed(SleepCartPole, 2, 2 * args.frames, args.fpb, True)[0]
        )
    latency, n_params = broadcast_latency()
    load_after = os.getloadavg()
    med = {k: [statistics.median(col) for col in zip(*v)] for k, v in rows.items()}
    one = med["1 rank"][0]
    scaling = med["2 ranks"][0] / one
    lines = [
        "# torch.distributed collectors (gloo, loopback): scaling with worker ranks",
        "",
        f"Env: native CartPole + {iters} loop iterations per step (1 ms of CPU time here, "
        f"calibrated); {args.fpb} frames per worker batch; {args.frames} frames per worker "
        f"timed per run; median of {args.rounds} interleaved rounds; fork start; "
        f"{os.cpu_count()} CPUs; load average (1, 5, 15 min) "
        f"{tuple(round(x, 1) for x in load_before)} before, "
        f"{tuple(round(x, 1) for x in load_after)} after.",
        "",
        "CPU ms per frame counts the learner and its worker processes together; cores busy "
        "is that CPU time over the wall-clock time (how much of the machine the run got).",
        "",
        "| collector | frames/s | vs 1 rank | vs local Collector | CPU ms per frame | cores busy |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, label in (("local", "Collector in the learner process (floor)"),
                        ("1 rank", "DistributedDataCollector, 1 worker rank"),
                        ("2 ranks", "DistributedDataCollector, 2 worker ranks (async)"),
                        ("2 ranks sync", "DistributedDataCollector, 2 worker ranks, sync=True")):  # fmt: skip
        fps, cpu_ms, cores = med[name]
        lines.append(
            f"| {label} | {fps:,.0f} | {fps / one:.2f}x | {fps / med['local'][0]:.2f}x "
            f"| {cpu_ms:.2f} | {cores:.2f} |"
        )
    lines += [
        "",
        f"Target: 2 ranks >= 1.6x 1 rank in frames/s: {scaling:.2f}x "
        f"({'met' if scaling >= 1.6 else 'NOT met'}). Per core the run got: 1 rank "
        f"{one / med['1 rank'][2]:,.0f} frames/s/core, 2 ranks "
        f"{med['2 ranks'][0] / med['2 ranks'][2]:,.0f} frames/s/core.",
        "",
        "The same collectors on a CartPole whose step waits 1 ms (`time.sleep`, as a "
        "simulator in another process would) instead of computing: the workers then need "
        "little CPU, so the row shows whether the learner side serializes them.",
        "",
        "| collector (1 ms wait per step) | frames/s | vs 1 rank | CPU ms per frame | cores busy |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    wmed = {k: [statistics.median(col) for col in zip(*v)] for k, v in waits.items()}
    for name in waits:
        fps, cpu_ms, cores = wmed[name]
        lines.append(
            f"| DistributedDataCollector, {name} | {fps:,.0f} | {fps / wmed['1 rank'][0]:.2f}x "
            f"| {cpu_ms:.2f} | {cores:.2f} |"
        )
    lines += [
        "",
        f"Start-up (construction until every worker is ready, fork): 1 rank "
        f"{statistics.median(startups[1]):.2f} s, 2 ranks {statistics.median(startups[2]):.2f} s.",
        "",
        f"Weight broadcast, {n_params / 1e6:.2f}M float32 parameters to 2 ranks (extra time of "
        f"the next tiny sync batch): {latency * 1e3:.1f} ms.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        RESULTS.write_text(text)


if __name__ == "__main__":
    main()
