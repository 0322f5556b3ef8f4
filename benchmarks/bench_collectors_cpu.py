"""Collector(SerialEnv(8)) and Collector(GymEnv(num_envs=8)) against the plain loop of
benchmarks/bench_collectors.py, in CPU time of this process.

Single-process rows only: the CPU time a process used does not count the time another
job held the core, so on a shared machine it gives the ratio an idle machine would give
better than wall-clock time does. Median of 5 interleaved rounds of 2 batches.

The second part runs the same collectors with two actors, ``rl.modules.ProbabilisticActor``
(which hands the collector its own tensor twin, ``_rl_tensor_forward``) and tensordict's
own (a TensorDictModule then a ProbabilisticTensorDictModule), each once with the
collector's tensor fast path and once with it switched off (the general path: what the
collector ran for ``ProbabilisticActor`` before it had a twin), interleaved, so that the
two paths are compared in the same run. The load average is printed at the end.

    python benchmarks/bench_collectors_cpu.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import torch
from tensordict.nn import (
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)

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
    fast_vs_general()


def _prob_policy():
    return ProbabilisticTensorDictSequential(
        TensorDictModule(b.mlp(), ["observation"], ["logits"]),
        ProbabilisticTensorDictModule(
            in_keys=["logits"],
            out_keys=["action"],
            distribution_class=torch.distributions.Categorical,
            return_log_prob=True,
        ),
    )


def fast_vs_general() -> None:
    """Collector(GymEnv(num_envs=8)) and Collector(SerialEnv(8)) with each actor: the
    tensor fast path against the general path, interleaved."""
    makers = {
        "GymEnv(num_envs=8)": lambda: GymEnv(
            "CartPole-v1", num_envs=b.N, categorical_action_encoding=True
        ),
        "SerialEnv(8)": lambda: SerialEnv(b.N, b.cartpole),
    }
    actors = {"ProbabilisticActor": b.td_policy, "tensordict actor": _prob_policy}
    collectors = {}
    for name, make in makers.items():
        for actor, policy in actors.items():
            for path in ("fast", "general"):
                collector = Collector(make(), policy(), frames_per_batch=b.FRAMES)
                if path == "general":
                    collector._tensor_policy = None
                else:
                    assert collector._tensor_policy is not None, actor
                collectors[name, actor, path] = collector
                b.run_collector(collector, 1)
    runs = {key: [] for key in collectors}
    for _ in range(5):
        for key, collector in collectors.items():
            runs[key].append(cpu_fps(b.run_collector, collector, 2))
    for name in makers:
        for actor in actors:
            fast = statistics.median(runs[name, actor, "fast"])
            general = statistics.median(runs[name, actor, "general"])
            print(
                f"Collector({name}), {actor}: tensor path {fast:,.0f}, general path "
                f"{general:,.0f} frames per CPU-second: {fast / general:.2f}x"
            )
    for collector in collectors.values():
        collector.shutdown()
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
