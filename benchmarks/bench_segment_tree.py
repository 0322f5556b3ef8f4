"""Prioritized-sampling throughput of rl.cpp's SumSegmentTree against a numpy tree.

One step is what a prioritized replay buffer does per training batch: update the
priorities of ``batch`` random indices, then draw ``batch`` samples with
``scan_lower_bound(uniform * total)``. The floor is the same array-based tree written
with vectorized numpy (level-by-level parent recomputation, level-by-level descent),
measured in the same run. When a CUDA device is present the CUDA tree is timed too
(with torch tensors already on the device).

Usage:
    python benchmarks/bench_segment_tree.py [--capacity 1000000] [--batch 256]
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np
import torch

from rl.cpp import SumSegmentTree, cuda_compiled, cuda_device_count


class NumpySumTree:
    """Array-based sum tree, vectorized over the batch with numpy (the floor)."""

    def __init__(self, capacity: int, dtype) -> None:
        self.size = 1 << max(0, int(np.ceil(np.log2(capacity))))
        self.depth = self.size.bit_length() - 1
        self.nodes = np.zeros(2 * self.size, dtype=dtype)

    def update(self, indices: np.ndarray, values: np.ndarray) -> None:
        nodes = indices + self.size
        self.nodes[nodes] = values
        for _ in range(self.depth):
            nodes >>= 1
            self.nodes[nodes] = self.nodes[2 * nodes] + self.nodes[2 * nodes + 1]

    def total(self) -> float:
        return float(self.nodes[1])

    def scan_lower_bound(self, values: np.ndarray) -> np.ndarray:
        node = np.ones(values.shape, dtype=np.int64)
        rest = values.copy()
        for _ in range(self.depth):
            left = 2 * node
            left_sum = self.nodes[left]
            right = left_sum <= rest
            rest = np.where(right, rest - left_sum, rest)
            node = left + right
        return node - self.size


def _rate(step, iterations: int, sync=None) -> float:
    """Steps per second over ``iterations`` consecutive steps."""
    start = time.perf_counter()
    for k in range(iterations):
        step(k)
    if sync is not None:
        sync()
    return iterations / (time.perf_counter() - start)


def _best_rates(steps: dict, iterations: int, repeats: int) -> dict:
    """Best rate of each step over ``repeats`` rounds; the implementations take turns in
    every round, so load from other processes on the shared machine hits them alike."""
    best = dict.fromkeys(steps, 0.0)
    for _ in range(repeats):
        for name, (step, sync) in steps.items():
            best[name] = max(best[name], _rate(step, iterations, sync))
    return best


def run(capacity: int, batch: int, iterations: int, repeats: int) -> list[dict]:
    rows = []
    for dtype in (np.float32, np.float64):
        rows += _measure(dtype, capacity, batch, iterations, repeats)
    return rows


def _measure(dtype, capacity: int, batch: int, iterations: int, repeats: int) -> list[dict]:
    rng = np.random.default_rng(0)
    indices = rng.integers(0, capacity, size=(iterations, batch))
    priorities = rng.random((iterations, batch)).astype(dtype) + dtype(0.01)
    uniforms = rng.random((iterations, batch)).astype(dtype)
    fill = np.arange(capacity, dtype=np.int64)
    start_values = rng.random(capacity).astype(dtype)

    ref = NumpySumTree(capacity, dtype)
    ref.update(fill, start_values)

    def numpy_step(k):
        ref.update(indices[k], priorities[k])
        ref.scan_lower_bound(uniforms[k] * dtype(ref.total()))

    tree = SumSegmentTree(capacity, dtype=dtype)
    tree.update(fill, start_values)

    def cpp_step(k):
        tree.update(indices[k], priorities[k])
        tree.scan_lower_bound(uniforms[k] * dtype(tree.total()))

    t_indices = torch.from_numpy(indices)
    t_priorities = torch.from_numpy(priorities)
    t_uniforms = torch.from_numpy(uniforms)
    torch_tree = SumSegmentTree(capacity, dtype=dtype)
    torch_tree.update(fill, start_values)

    def cpp_torch_step(k):
        torch_tree.update(t_indices[k], t_priorities[k])
        torch_tree.scan_lower_bound(t_uniforms[k] * torch_tree.total())

    steps = {
        "numpy vectorized tree (floor)": (numpy_step, None),
        "rl.cpp CPU, numpy arrays": (cpp_step, None),
        "rl.cpp CPU, torch tensors": (cpp_torch_step, None),
    }
    if torch.cuda.is_available() and cuda_compiled() and cuda_device_count() > 0:
        dev = torch.device("cuda")
        g_indices = t_indices.to(dev)
        g_priorities = t_priorities.to(dev)
        g_uniforms = t_uniforms.to(dev)
        gpu_tree = SumSegmentTree(capacity, dtype=dtype, device=dev)
        gpu_tree.update(torch.from_numpy(fill).to(dev), torch.from_numpy(start_values).to(dev))

        def cuda_step(k):
            gpu_tree.update(g_indices[k], g_priorities[k])
            gpu_tree.scan_lower_bound(g_uniforms[k] * gpu_tree.total())

        steps["rl.cpp CUDA, torch CUDA tensors"] = (cuda_step, torch.cuda.synchronize)
    results = _best_rates(steps, iterations, repeats)
    # The same priorities were written in the same order: the trees agree.
    np.testing.assert_allclose(tree.total(), ref.total(), rtol=1e-4)
    floor = results["numpy vectorized tree (floor)"]
    return [
        {"dtype": np.dtype(dtype).name, "impl": name, "rate": rate, "ratio": rate / floor}
        for name, rate in results.items()
    ]


def to_markdown(rows: list[dict], capacity: int, batch: int) -> str:
    lines = [
        f"Capacity {capacity:,}, batches of {batch}: one step = `update` of {batch} random "
        f"indices + `scan_lower_bound` of {batch} values (`uniform * total()`). "
        "Best of several repeats; ratio against the vectorized numpy tree of the same run.",
        "",
        "| dtype | implementation | steps/s | items/s (update + sample) | µs/step | ratio |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['dtype']} | {r['impl']} | {r['rate']:,.0f} | {2 * batch * r['rate']:,.0f} "
            f"| {1e6 / r['rate']:.1f} | {r['ratio']:.1f}x |"
        )
    lines.append("")
    lines.append(
        "The torch rows pay torch's own per-op cost for the caller's slicing and "
        "`uniform * total()` (a few µs per op on a CPU tensor), the tree calls included."
    )
    lines.append(
        f"Machine: {platform.machine()}, {platform.processor() or 'cpu'}, Python "
        f"{platform.python_version()}, numpy {np.__version__}, torch {torch.__version__}, "
        f"CUDA device used: {'yes' if any('CUDA' in r['impl'] for r in rows) else 'no'}."
    )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "segment_tree.md"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = run(args.capacity, args.batch, args.iterations, args.repeats)
    table = to_markdown(rows, args.capacity, args.batch)
    print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("# Segment tree benchmark\n\n" + table)


if __name__ == "__main__":
    main()
