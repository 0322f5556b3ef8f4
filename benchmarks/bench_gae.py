"""Speed and memory of rl.objectives.value.functional.vec_generalized_advantage_estimate.

Inputs are ``[B, T, 1]`` float32 values, next values and rewards with done flags drawn
with probability 0.01 (half of them terminated, half truncated). The floor, measured in
the same run and on one thread, is the per-step Python loop in torch that training
scripts write (CleanRL's: per step, the not-done mask, the TD error and the recursion on
``[B, 1]`` slices). Also timed: a leaner torch loop (TD errors computed at once, only the
recursion per step: TorchRL's non-vectorized GAE), the same loop in numpy (SB3's), the
pure-torch fallback (rl-cpp absent: doubling scan) and, when a TorchRL 0.14 scratch
install is present at ~/torchrl-ref, TorchRL's vectorized GAE against the same loop in
its own process.

Peak memory: each implementation runs in a fresh process on ``[8, T, 1]`` for several
``T``; the table gives the peak RSS growth over the inputs (``ru_maxrss``) divided by the
input bytes, which stays flat when memory is linear in the input.

Usage:
    python benchmarks/bench_gae.py [--quick]
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

import numpy as np
import torch

from rl.objectives.value import _scan
from rl.objectives.value.functional import vec_generalized_advantage_estimate

GAMMA, LMBDA = 0.99, 0.95
TORCHRL_PY = Path.home() / "torchrl-ref" / "bin" / "python"


def make_inputs(b: int, t: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    value, next_value, reward = torch.randn(3, b, t, 1, generator=g).unbind(0)
    done = torch.rand(b, t, 1, generator=g) < 0.01
    terminated = done & (torch.rand(b, t, 1, generator=g) < 0.5)
    return value.contiguous(), next_value.contiguous(), reward.contiguous(), done, terminated


def loop_cleanrl(value, next_value, reward, done, terminated):
    """The floor: CleanRL's per-step GAE loop, in torch."""
    advantages = torch.zeros_like(reward)
    lastgaelam = 0
    for t in reversed(range(reward.shape[-2])):
        nextnonterminal = 1.0 - done[:, t].float()
        nextvalues = next_value[:, t] * (1.0 - terminated[:, t].float())
        delta = reward[:, t] + GAMMA * nextvalues - value[:, t]
        advantages[:, t] = lastgaelam = delta + GAMMA * LMBDA * nextnonterminal * lastgaelam
    return advantages, advantages + value


def loop_lean(value, next_value, reward, done, terminated):
    """TD errors at once, only the recursion per step (TorchRL's non-vectorized GAE)."""
    delta = reward + GAMMA * (~terminated) * next_value - value
    discount = GAMMA * LMBDA * (~done)
    advantages = torch.empty_like(reward)
    running = torch.zeros_like(reward[:, 0])
    for t in reversed(range(reward.shape[-2])):
        running = advantages[:, t] = delta[:, t] + discount[:, t] * running
    return advantages, advantages + value


def loop_numpy(value, next_value, reward, done, terminated):
    """SB3's per-step loop, in numpy."""
    v, nv, r = value.numpy(), next_value.numpy(), reward.numpy()
    d, term = done.numpy(), terminated.numpy()
    advantages = np.zeros_like(r)
    last = 0.0
    for t in reversed(range(r.shape[1])):
        delta = r[:, t] + GAMMA * nv[:, t] * (1.0 - term[:, t]) - v[:, t]
        last = delta + GAMMA * LMBDA * (1.0 - d[:, t]) * last
        advantages[:, t] = last
    return advantages, advantages + v


def rl_compiled(*inputs):
    _scan._cpp = None
    return vec_generalized_advantage_estimate(GAMMA, LMBDA, *inputs)


def rl_torch(*inputs):
    _scan._cpp = False
    try:
        return vec_generalized_advantage_estimate(GAMMA, LMBDA, *inputs)
    finally:
        _scan._cpp = None


IMPLS = {
    "loop_cleanrl": loop_cleanrl,
    "loop_lean": loop_lean,
    "loop_numpy": loop_numpy,
    "rl_compiled": rl_compiled,
    "rl_torch": rl_torch,
}


def best_time(fn, inputs, budget_s: float, max_reps: int, warmup: bool = True) -> float:
    """Median time of one call (the median, not the minimum: on a shared machine a short
    call can land in an idle moment that a long loop never gets, which would flatter it)."""
    if warmup:
        fn(*inputs)
    times = []
    start = time.perf_counter()
    while len(times) < max_reps and (len(times) < 3 or time.perf_counter() - start < budget_s):
        t0 = time.perf_counter()
        fn(*inputs)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def memory_child(impl: str, b: int, t: int) -> None:
    """Run in a fresh process: peak RSS growth of one call, inputs already in memory.

    The peak (VmHWM) is reset after the inputs are built (``clear_refs`` 5), so the
    growth is exactly what the call needs: its outputs plus its temporaries.
    """
    torch.set_num_threads(1)
    IMPLS["rl_torch"](*make_inputs(2, 8))  # load the code paths
    IMPLS["rl_compiled"](*make_inputs(2, 8))
    inputs = make_inputs(b, t)
    Path("/proc/self/clear_refs").write_text("5")
    before = _status_kib("VmRSS")
    out = IMPLS[impl](*inputs)
    growth = _status_kib("VmHWM") - before
    del out
    input_bytes = sum(x.numel() * x.element_size() for x in inputs)
    print(json.dumps({"growth_kib": growth, "input_kib": input_bytes / 1024}))


def peak_memory(impl: str, b: int, t: int) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--memory-child", impl, str(b), str(t)],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


TORCHRL_SNIPPET = r"""
import json, sys, time, torch
torch.set_num_threads(1)
from torchrl.objectives.value.functional import vec_generalized_advantage_estimate as vec
b, t = int(sys.argv[1]), int(sys.argv[2])
g = torch.Generator().manual_seed(0)
v, nv, r = torch.randn(3, b, t, 1, generator=g).unbind(0)
v, nv, r = v.contiguous(), nv.contiguous(), r.contiguous()
d = torch.rand(b, t, 1, generator=g) < 0.01
term = d & (torch.rand(b, t, 1, generator=g) < 0.5)
def loop():
    adv = torch.zeros_like(r); last = 0
    for i in reversed(range(t)):
        nn = 1.0 - d[:, i].float(); nvv = nv[:, i] * (1.0 - term[:, i].float())
        delta = r[:, i] + 0.99 * nvv - v[:, i]
        adv[:, i] = last = delta + 0.99 * 0.95 * nn * last
def best(f, reps, warm=True):
    if warm:
        f()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    return sorted(ts)[len(ts) // 2]
tl = best(loop, 1 if t > 10000 else 5, warm=t <= 10000)
tv = best(lambda: vec(0.99, 0.95, v, nv, r, d, term), 3 if t > 10000 else 10)
print(json.dumps({"loop": tl, "vec": tv}))
"""


def torchrl_times(b: int, t: int) -> dict | None:
    if not TORCHRL_PY.exists():
        return None
    try:
        out = subprocess.run(
            [str(TORCHRL_PY), "-c", TORCHRL_SNIPPET, str(b), str(t)],
            check=True,
            capture_output=True,
            text=True,
            timeout=900,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        ).stdout
        return json.loads(out.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError):
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument(
        "--memory-child", nargs=3, metavar=("IMPL", "B", "T"), help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--memory-only",
        action="store_true",
        help="re-run the memory section of an existing results file",
    )
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "gae.md"))
    args = parser.parse_args()
    if args.memory_child:
        impl, b, t = args.memory_child
        memory_child(impl, int(b), int(t))
        return
    torch.set_num_threads(1)
    has_cpp = _scan.cpp_kernels() is not None
    sizes = [(64, 1000), (8, 100_000)] if not args.quick else [(8, 200), (2, 5000)]
    if args.memory_only:
        sizes = []
    targets = {(64, 1000): 80, (8, 100_000): 375}
    lines = [
        "# GAE benchmark",
        "",
        "`vec_generalized_advantage_estimate` on `[B, T, 1]` float32 (done probability 0.01, half "
        "terminated, half truncated), one thread, median of several runs. Ratios are against the "
        "per-step Python loop in torch (CleanRL's GAE loop) timed in the same run.",
        "",
        "| shape | implementation | time | ratio to the loop | target |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for b, t in sizes:
        inputs = make_inputs(b, t)
        ref = loop_cleanrl(*inputs)
        for name in ("rl_compiled", "rl_torch", "loop_lean", "loop_numpy"):
            if name == "rl_compiled" and not has_cpp:
                continue
            got = IMPLS[name](*inputs)
            np.testing.assert_allclose(np.asarray(got[0]), ref[0].numpy(), rtol=1e-3, atol=1e-3)
        big = t > 10_000
        floor = best_time(loop_cleanrl, inputs, 5.0, 3 if big else 5, warmup=not big)
        rows = [("per-step loop, torch (CleanRL; floor)", floor)]
        rows.append(
            (
                "per-step loop, torch (TD errors vectorized)",
                best_time(loop_lean, inputs, 5.0, 3 if big else 5, warmup=not big),
            )
        )
        rows.append(
            (
                "per-step loop, numpy (SB3)",
                best_time(loop_numpy, inputs, 5.0, 3 if big else 5, warmup=not big),
            )
        )
        if has_cpp:
            rows.append(("rl, compiled kernel (rl-cpp)", best_time(rl_compiled, inputs, 2.0, 200)))
        rows.append(
            ("rl, pure torch (no rl-cpp: doubling scan)", best_time(rl_torch, inputs, 2.0, 50))
        )
        for label, secs in rows:
            target = (
                f"{targets[(b, t)]}x"
                if label.startswith("rl, compiled") and (b, t) in targets
                else ""
            )
            lines.append(
                f"| [{b}, {t}, 1] | {label} | {secs * 1e3:.3f} ms | {floor / secs:.1f}x | {target} |"
            )
        trl = torchrl_times(b, t)
        if trl is not None:
            lines.append(
                f"| [{b}, {t}, 1] | TorchRL 0.14 vectorized GAE (its own process, vs the same loop there) | "
                f"{trl['vec'] * 1e3:.3f} ms | {trl['loop'] / trl['vec']:.1f}x | |"
            )
        print("\n".join(lines[-len(rows) - (trl is not None) :]), flush=True)

    if args.memory_only:
        previous = Path(args.out).read_text()
        lines = previous[: previous.index("## Peak memory")].rstrip("\n").splitlines()
    lines += [
        "",
        "## Peak memory",
        "",
        "Each call runs in a fresh process on `[8, T, 1]`: the peak RSS (VmHWM, reset once the inputs "
        "exist) minus the RSS before the call, over the bytes of the five inputs (3 float32 + 2 bool "
        "arrays, 14 bytes per step). The outputs (advantage and value target, 8 bytes per step, "
        "0.57 of the inputs) are part of the growth; a flat column means memory linear in the input.",
        "",
        "| implementation | T | inputs | peak RSS growth | growth / inputs |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    mem_sizes = [25_000, 50_000, 100_000, 200_000] if not args.quick else [5000, 10000]
    for impl, label in (("rl_compiled", "rl, compiled kernel"), ("rl_torch", "rl, pure torch")):
        if impl == "rl_compiled" and not has_cpp:
            continue
        for t in mem_sizes:
            m = peak_memory(impl, 8, t)
            lines.append(
                f"| {label} | {t:,} | {m['input_kib'] / 1024:.1f} MiB | {m['growth_kib'] / 1024:.1f} MiB | "
                f"{m['growth_kib'] / m['input_kib']:.2f} |"
            )
            print(lines[-1], flush=True)
    lines += [
        "",
        f"Machine: {platform.machine()}, {platform.processor() or 'cpu'}, Python {platform.python_version()}, "
        f"torch {torch.__version__}, numpy {np.__version__}, rl-cpp kernel: {'yes' if has_cpp else 'no'}, "
        f"threads: {torch.get_num_threads()}.",
    ]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
