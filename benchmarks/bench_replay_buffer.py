"""Replay-buffer throughput against its floors, measured in the same run.

1. ``sample(256)`` from a ``LazyTensorStorage(1_000_000)`` holding 200k transitions
   (observation [17], action [6], reward, done, next observation) vs the plain-torch floor:
   ``torch.randint`` + indexing the same preallocated tensors (the faster of ``t[idx]`` and
   ``t.index_select(0, idx)``). Target: ratio >= 0.5.
2. Prioritized ``sample(256)`` + ``update_priority`` on the same data vs the bare rl-cpp
   tree calls (scan, read, weights, two updates) plus the same plain-torch gather
   (target: ratio >= 0.5), and vs the vectorized numpy sum tree of
   ``bench_segment_tree.py`` (``update`` of 256 priorities + ``scan_lower_bound`` of 256
   values on a tree of the same capacity; target: ratio >= 3.5).
3. ``LazyMemmapStorage.extend`` of 1,000-item chunks vs the disk's sequential write
   bandwidth: a numpy memmap write of the same bytes (page cache, like the storage) and
   ``dd conv=fdatasync`` (the disk). Target: ratio >= 0.3 to either. The durable variant
   (extend, then ``fsync`` every file) is reported against ``dd`` for information.

Run: ``.venv/bin/python benchmarks/bench_replay_buffer.py`` (``--quick`` for a smoke run).
Prints a markdown table and writes it to ``benchmarks/results/replay_buffer.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from bench_segment_tree import NumpySumTree
from tensordict import TensorDict

import rl.cpp
from rl.data import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ReplayBuffer,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)

CAPACITY = 1_000_000
FILLED = 200_000
BATCH = 256
ALPHA, BETA, EPS = 0.7, 0.5, 1e-8


def best_times(fns: dict, calls: int, repeats: int) -> dict:
    """Best mean seconds per call of each function, in CPU time of this thread (other
    processes on the shared machine do not count); the functions take turns in every
    round, so that what load remains (shared caches) hits floors and ours alike."""
    for fn in fns.values():
        for _ in range(min(calls, 50)):
            fn()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.thread_time()
            for _ in range(calls):
                fn()
            best[name] = min(best[name], (time.thread_time() - start) / calls)
    return best


def transitions(n: int) -> TensorDict:
    return TensorDict(
        {
            "observation": torch.randn(n, 17),
            "action": torch.randn(n, 6),
            "next": {
                "observation": torch.randn(n, 17),
                "reward": torch.randn(n, 1),
                "done": torch.rand(n, 1) < 0.01,
            },
        },
        batch_size=[n],
    )


def leaves(storage: LazyTensorStorage) -> list[torch.Tensor]:
    td = storage._storage
    keys = ["observation", "action", ("next", "observation"), ("next", "reward"), ("next", "done")]
    return [td[k].as_subclass(torch.Tensor) for k in keys]


def bench_uniform(calls: int, repeats: int) -> list[tuple]:
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(CAPACITY), batch_size=BATCH)
    rb.extend(transitions(FILLED))
    plain = ReplayBuffer(storage=rb.storage, batch_size=BATCH)
    tensors = leaves(rb.storage)

    def floor_getitem():
        idx = torch.randint(FILLED, (BATCH,))
        return [t[idx] for t in tensors]

    def floor_index_select():
        idx = torch.randint(FILLED, (BATCH,))
        return [t.index_select(0, idx) for t in tensors]

    t = best_times(
        {
            "getitem": floor_getitem,
            "index_select": floor_index_select,
            "td": rb.sample,
            "plain": plain.sample,
        },
        calls,
        repeats,
    )
    f1, f2, td_time, plain_time = t["getitem"], t["index_select"], t["td"], t["plain"]
    floor = min(f1, f2)
    return [
        ("uniform", "floor: randint + t[idx] (5 tensors)", f1, None, ""),
        ("uniform", "floor: randint + index_select (5 tensors)", f2, None, ""),
        ("uniform", "TensorDictReplayBuffer.sample(256)", td_time, floor / td_time, ">= 0.5"),
        (
            "uniform",
            "ReplayBuffer.sample(256) (same storage)",
            plain_time,
            floor / plain_time,
            ">= 0.5",
        ),
    ]


def bench_prioritized(calls: int, repeats: int) -> list[tuple]:
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=ALPHA, beta=BETA, eps=EPS, storage=LazyTensorStorage(CAPACITY), batch_size=BATCH
    )
    rb.extend(transitions(FILLED))
    rb.update_priority(torch.arange(FILLED), torch.rand(FILLED) + 0.01)
    tensors = leaves(rb.storage)
    sum_tree = rl.cpp.SumSegmentTree(CAPACITY, dtype="float32", device="cpu")
    min_tree = rl.cpp.MinSegmentTree(CAPACITY, dtype="float32", device="cpu")
    init = (torch.rand(FILLED) + 0.01 + EPS) ** ALPHA
    sum_tree.update(torch.arange(FILLED), init)
    min_tree.update(torch.arange(FILLED), init)
    new_priority = torch.rand(BATCH) + 0.01

    def floor():
        total = sum_tree.query(0, FILLED)
        p_min = min_tree.query(0, FILLED)
        idx = sum_tree.scan_lower_bound(torch.rand(BATCH) * total)
        weight = (sum_tree[idx] / p_min) ** -BETA
        out = [t.index_select(0, idx) for t in tensors]
        value = (new_priority + EPS) ** ALPHA
        sum_tree.update(idx, value)
        min_tree.update(idx, value)
        return out, weight

    arrays = [t.numpy() for t in tensors]
    np_priority = new_priority.numpy()

    def fused_floor():
        # the two fused rl-cpp calls and numpy take: what the buffer costs without Python
        uniform = torch.rand(BATCH).numpy()
        idx, weight, _ = rl.cpp.prioritized_sample(sum_tree, min_tree, FILLED, uniform, BETA)
        out = [a.take(idx, axis=0) for a in arrays]
        rl.cpp.prioritized_update(sum_tree, min_tree, idx, np_priority, EPS, ALPHA)
        return out, weight

    gather = rl.cpp.RowGather(arrays)

    def rows_floor():
        # the compiled calls the buffer makes (draw + gather in one), without TensorDict
        uniform = torch.rand(BATCH).numpy()
        idx, weight, _, out = rl.cpp.prioritized_sample_rows(
            sum_tree, min_tree, FILLED, uniform, BETA, gather
        )
        rl.cpp.prioritized_update(sum_tree, min_tree, idx, np_priority, EPS, ALPHA)
        return out, weight

    def ours():
        batch = rb.sample()
        rb.update_priority(batch["index"], new_priority)
        return batch

    np_tree = NumpySumTree(CAPACITY, np.float32)
    np_tree.update(np.arange(FILLED), init.numpy())
    rng = np.random.default_rng(0)

    def numpy_floor():
        np_tree.update(rng.integers(0, FILLED, BATCH), rng.random(BATCH, dtype=np.float32) + 0.01)
        return np_tree.scan_lower_bound(rng.random(BATCH, dtype=np.float32) * np_tree.total())

    t = best_times(
        {
            "floor": floor,
            "fused": fused_floor,
            "rows": rows_floor,
            "numpy": numpy_floor,
            "ours": ours,
        },
        calls,
        repeats,
    )
    f, n, o = t["floor"], t["numpy"], t["ours"]
    what = "TensorDictPrioritizedReplayBuffer sample(256) + update_priority"
    return [
        ("prioritized", "floor: bare rl-cpp trees + index_select gather", f, None, ""),
        (
            "prioritized",
            "info: fused rl-cpp sample/update + numpy take (no TensorDict), vs numpy tree",
            t["fused"],
            n / t["fused"],
            "",
        ),
        (
            "prioritized",
            "info: prioritized_sample_rows + prioritized_update (no TensorDict), vs numpy tree",
            t["rows"],
            n / t["rows"],
            "",
        ),
        ("prioritized", "floor: vectorized numpy sum tree, update(256) + scan(256)", n, None, ""),
        ("prioritized", f"{what}, vs rl-cpp trees", o, f / o, ">= 0.5"),
        ("prioritized", f"{what}, vs numpy tree", o, n / o, ">= 3.5"),
    ]


def _fsync_tree(path: Path) -> None:
    for root, _, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def bench_memmap(items: int, repeats: int) -> list[tuple]:
    chunk = 1000
    data = transitions(chunk)
    item_bytes = sum(v.numel() * v.element_size() for v in data.values(True, True)) // chunk
    total_bytes = item_bytes * items
    base = Path(tempfile.mkdtemp(prefix="rl-bench-memmap-", dir=os.environ.get("BENCH_DIR")))
    try:

        def run_storage(sync: bool) -> float:
            path = base / f"storage-{time.monotonic_ns()}"
            rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(items, scratch_dir=path))
            rb.extend(data)  # allocation (file creation) is not part of the steady state
            rb.empty()
            start = time.perf_counter()
            for _ in range(items // chunk):
                rb.extend(data)
            if sync:
                _fsync_tree(path)
            elapsed = time.perf_counter() - start
            del rb
            shutil.rmtree(path)
            return elapsed

        def run_numpy(sync: bool) -> float:
            path = base / f"numpy-{time.monotonic_ns()}.bin"
            mm = np.memmap(path, dtype=np.uint8, mode="w+", shape=(total_bytes,))
            # like the storage, which reserves its blocks when it allocates its files
            fd = os.open(path, os.O_RDWR)
            os.posix_fallocate(fd, 0, total_bytes)
            os.close(fd)
            block = np.random.randint(0, 255, size=item_bytes * chunk, dtype=np.uint8)
            start = time.perf_counter()
            for k in range(items // chunk):
                mm[k * block.size : (k + 1) * block.size] = block
            if sync:
                mm.flush()
            elapsed = time.perf_counter() - start
            del mm
            path.unlink()
            return elapsed

        def run_dd() -> float:
            path = base / "dd.bin"
            mib = max(1, total_bytes // 2**20)
            start = time.perf_counter()
            subprocess.run(
                ["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mib}", "conv=fdatasync"],
                check=True,
                capture_output=True,
            )
            elapsed = time.perf_counter() - start
            path.unlink()
            return elapsed * total_bytes / (mib * 2**20)

        ours = ours_sync = np_time = dd_time = float("inf")
        for _ in range(repeats):  # interleaved, as in best_times
            np_time = min(np_time, run_numpy(False))
            ours = min(ours, run_storage(False))
            dd_time = min(dd_time, run_dd())
            ours_sync = min(ours_sync, run_storage(True))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    gbps = lambda t: total_bytes / t / 1e9  # noqa: E731
    return [
        (
            "memmap",
            f"floor: numpy memmap write, page cache ({total_bytes / 1e6:.0f} MB)",
            np_time,
            None,
            gbps(np_time),
            "",
        ),
        ("memmap", "floor: dd conv=fdatasync, disk (same bytes)", dd_time, None, gbps(dd_time), ""),
        (
            "memmap",
            "LazyMemmapStorage.extend x1000 items, vs numpy memmap",
            ours,
            np_time / ours,
            gbps(ours),
            ">= 0.3",
        ),
        (
            "memmap",
            "LazyMemmapStorage.extend x1000 items, vs dd bandwidth",
            ours,
            dd_time / ours,
            gbps(ours),
            ">= 0.3",
        ),
        (
            "memmap",
            "extend x1000 + fsync of the files, vs dd (durable; info)",
            ours_sync,
            dd_time / ours_sync,
            gbps(ours_sync),
            "",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls, for a smoke run")
    parser.add_argument(
        "--out", default=str(Path(__file__).parent / "results" / "replay_buffer.md")
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    # many short interleaved rounds: on a shared machine the best round is the quiet one
    calls, repeats, items = (200, 3, 50_000) if args.quick else (200, 40, 500_000)

    rows = bench_uniform(calls, repeats) + bench_prioritized(calls, repeats)
    memmap_rows = bench_memmap(items, 3 if not args.quick else 1)

    lines = [
        "# Replay buffer benchmark",
        "",
        f"`benchmarks/bench_replay_buffer.py`; torch {torch.__version__}, 1 thread, "
        f"{platform.processor() or platform.machine()}, best of {repeats} interleaved runs of {calls} calls "
        "(thread CPU time for the uniform and prioritized rows, wall time for memmap). "
        "Ratio = floor time / our time (higher is better; the target is given per row). "
        f"Machine load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores "
        "(shared; ratios are taken from interleaved runs).",
        "",
        "| case | what | time | ratio to floor | target |",
        "| --- | --- | --- | --- | --- |",
    ]
    for case, what, t, ratio, target in rows:
        r = "(floor)" if ratio is None else f"{ratio:.2f}"
        lines.append(f"| {case} | {what} | {t * 1e6:.1f} us | {r} | {target} |")
    for case, what, t, ratio, gbps, target in memmap_rows:
        r = "(floor)" if ratio is None else f"{ratio:.2f}"
        lines.append(f"| {case} | {what} | {t * 1e3:.1f} ms ({gbps:.2f} GB/s) | {r} | {target} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.quick:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
