"""Collector(SerialEnv(8)) and Collector(GymEnv(num_envs=8)) against the plain loop of
benchmarks/bench_collectors.py, in CPU time of this process.

Single-process rows only: the CPU time a process used does not count the time another
job held the core, so on a shared machine it gives the ratio an idle machine would give
better than wall-clock time does. Median of 5 interleaved rounds of 2 batches.

    python benchmarks/bench_collectors_cpu.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import bench_collectors as b  # noqa: E402

from rl.collectors import Collector  # noqa: E402
from rl.envs import GymEnv, SerialEnv  # noqa: E402


def cpu_fps(fn, *args) -> float:
    start = time.process_time()
    frames = fn(*args)
    return frames / (time.process_time() - start)


def main() -> None:
    torch.set_num_threads(1)
    floor = b.FloorLoop(b.sync_vector())
    serial = Collector(SerialEnv(b.N, b.cartpole), b.td_policy(), frames_per_batch=b.FRAMES)
    gym_vec = Collector(
        GymEnv("CartPole-v1", num_envs=b.N, categorical_action_encoding=True),
        b.td_policy(),
        frames_per_batch=b.FRAMES,
    )
    runs = {"floor": [], "serial": [], "gym": []}
    floor(1)
    b.run_collector(serial, 1)
    b.run_collector(gym_vec, 1)
    for _ in range(5):
        runs["floor"].append(cpu_fps(floor, 2))
        runs["serial"].append(cpu_fps(b.run_collector, serial, 2))
        runs["gym"].append(cpu_fps(b.run_collector, gym_vec, 2))
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(f"frames per CPU-second: floor SyncVectorEnv(8) + policy {med['floor']:,.0f}")
    print(f"Collector(SerialEnv(8)) {med['serial']:,.0f}: {med['serial'] / med['floor']:.2f}x")
    print(f"Collector(GymEnv(num_envs=8)) {med['gym']:,.0f}: {med['gym'] / med['floor']:.2f}x")
    serial.shutdown()
    gym_vec.shutdown()


if __name__ == "__main__":
    main()
