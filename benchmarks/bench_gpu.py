"""The GPU path in one run: build rl-cpp with CUDA, run the ``gpu`` tests, time the device code.

It ran on an H200 on 2026-11-30 (benchmarks/results/gpu.md: the build, the CUDA-only
tests, the trees, SAC in four modes; PPO on the GPU not yet). What runs on a CPU runs
with ``--device cpu``, and ``tests/test_bench_gpu.py`` runs that mode on a tiny budget. On
a CUDA machine the whole script is meant to take under 8 minutes:

    RL_CPP_CUDA=ON uv run --all-groups python benchmarks/bench_gpu.py --out benchmarks/results/gpu.md
    uv run python benchmarks/bench_gpu.py --device cpu                 # the CPU parts only
    uv run python benchmarks/bench_gpu.py --device cpu --quick --no-compile   # a smoke run

On a machine with its own torch and no network (as the lent GPU machines), run it with
that python, the pure-Python dependencies installed from carried wheels and the packages'
``src`` folders on ``PYTHONPATH``: the build part then uses pip offline
(``benchmarks/bench_gpu_offline.sh wheels`` here, ``... run`` there). Before spending
device time, ``benchmarks/bench_gpu_offline.sh rehearse`` runs the same install with that
machine's Python and torch on this CPU, then the CPU parts and the tests part's files.

(``RL_CPP_CUDA=ON`` in the environment of ``uv run`` itself: rl-cpp's build depends on it,
so a later ``uv run`` without it rebuilds rl-cpp, with the default ``AUTO``: CUDA kernels
for the GPU present, none on a machine without one.)

Parts (``--parts`` picks some, run in the order given; ``--gpu-only`` drops the CPU rows):

1. ``build``: rl-cpp rebuilt in place with ``RL_CPP_CUDA=ON`` (CUDA kernels required) for
   the architecture of the GPU present, then ``rl.cpp.cuda_compiled()`` checked in a
   fresh interpreter. Timed.
2. ``tests``: the test files that hold a CUDA-only test (a ``gpu`` mark or a skip without
   CUDA), whole, on 8 xdist workers (``--tests`` names others).
3. ``per``: a prioritized replay buffer's ``sample()`` + ``update_priority()`` (capacity
   1M, batch 256, priorities of the sampled indices rewritten each step) with the storage
   and the trees on the GPU (rl-cpp's CUDA trees) against the same on the CPU (the CPU
   trees).
4. ``ppo``: PPO (``examples/ppo.py``'s agent, loss and update step) on a batched
   native torch ``CartPoleEnv`` of 4,096 envs; env, collector, policy, GAE and the update
   on the device, compiled, CUDA graphs around the policy and the update step. Training
   frames per second, against the same on the CPU (compiled, no CUDA graphs).
5. ``sac``: SAC updates per second (batch 256, 256x256 networks, Pendulum-sized), eager /
   compiled / compiled with CUDA graphs (the last on a GPU only).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch
from tensordict import TensorDict
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

# examples/ppo.py and examples/_common.py (the agent, loss and update steps measured here)
# are imported inside the parts, not here: they import rl.cpp, which the ``build`` part
# rebuilds first, and a module loaded before the rebuild would stay the old one

ALL_PARTS = ("build", "tests", "per", "ppo", "sac")
CPU_PARTS = ("per", "ppo", "sac")


@dataclasses.dataclass
class Sizes:
    """The budget of each part; :func:`sizes` gives the full and the ``--quick`` one."""

    per_capacity: int = 1_000_000
    per_batch: int = 256
    per_iters: int = 2_000
    ppo_envs: int = 4_096
    ppo_steps: int = 16
    ppo_epochs: int = 4
    ppo_minibatches: int = 4
    ppo_warmup: int = 3
    ppo_batches: int = 10
    sac_batch: int = 256
    sac_warmup: int = 20
    sac_iters: int = 300


def sizes(quick: bool) -> Sizes:
    if not quick:
        return Sizes()
    return Sizes(
        per_capacity=4_096,
        per_batch=32,
        per_iters=10,
        ppo_envs=32,
        ppo_steps=4,
        ppo_epochs=1,
        ppo_minibatches=1,
        ppo_warmup=1,
        ppo_batches=1,
        sac_batch=16,
        sac_warmup=1,
        sac_iters=3,
    )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ------------------------------------------------------------------------------- 1. build
def build_rl_cpp() -> dict:
    """Rebuilds rl-cpp in this environment with its CUDA kernels (``RL_CPP_CUDA=ON``:
    the build fails without a CUDA compiler) and checks them in a fresh interpreter.

    Run from the workspace's ``.venv`` (with uv on PATH), an editable reinstall there;
    from any other interpreter (a machine with its own torch and no network),
    ``pip install --no-build-isolation --no-index`` into that interpreter's environment,
    with its own scikit-build-core, nanobind, CMake and ninja."""
    # ON: the CUDA kernels are required, built for the architecture of the GPU present
    # (rl-cpp's cmake/rl_cpp_cuda.cmake asks nvidia-smi), not for five
    env = dict(os.environ, RL_CPP_CUDA="ON")
    source = str(ROOT / "packages" / "rl-cpp")
    uv = shutil.which("uv")
    # uv for the workspace's own environment (it resolves the build's requirements from
    # the index); pip, offline, for any other interpreter (a GPU machine's own torch)
    if uv is not None and Path(sys.prefix).resolve() == (ROOT / ".venv").resolve():
        command = [uv, "pip", "install", "--python", sys.executable, "--no-deps"]
        command += ["--reinstall-package", "rl-cpp", "-e", source]
    else:
        command = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index"]
        command += ["--no-build-isolation", "--force-reinstall", source]
    start = time.perf_counter()
    subprocess.run(command, check=True, env=env, cwd=ROOT)
    seconds = time.perf_counter() - start
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import rl.cpp; print(rl.cpp.cuda_compiled(), rl.cpp.cuda_device_count())",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    compiled, count = probe[0] == "True", int(probe[1])
    if not compiled:
        raise RuntimeError("rl-cpp was rebuilt with RL_CPP_CUDA=ON but reports no CUDA kernels")
    return {"seconds": seconds, "cuda_compiled": compiled, "cuda_devices": count}


# ------------------------------------------------------------------------------- 2. tests
def cuda_test_files() -> list[str]:
    """The test files with a CUDA-only test: a ``gpu`` mark or a skip where
    ``torch.cuda.is_available()`` is False (relative to the repository root)."""
    found = []
    for folder in sorted((ROOT / "packages").glob("*/tests")) + [ROOT / "tests"]:
        for path in sorted(folder.glob("test_*.py")):
            text = path.read_text()
            if path != Path(__file__) and ("cuda.is_available()" in text or "mark.gpu" in text):
                found.append(str(path.relative_to(ROOT)))
    return [f for f in found if not f.endswith("test_bench_gpu.py")]


def run_gpu_tests(
    workers: int = 8, log: Path | None = None, tests: list[str] | None = None
) -> dict:
    """The test files that hold CUDA-only tests, whole (their CPU tests too, so the
    device's torch is checked there as well), in a subprocess, on ``workers`` processes
    where pytest-xdist is installed; returns pytest's summary line (pytest's whole output
    goes to ``log`` when given)."""
    files = cuda_test_files() if tests is None else tests
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", "--tb=short"]
    try:
        import xdist  # noqa: F401

        command += ["-n", str(workers)]
    except ImportError:
        pass
    start = time.perf_counter()
    res = subprocess.run(command + files, cwd=ROOT, capture_output=True, text=True)
    if log is not None:
        log.write_text(res.stdout + res.stderr)
    lines = [line for line in res.stdout.splitlines() if line.strip()]
    summary = lines[-1] if lines else res.stderr.strip().splitlines()[-1]
    if res.returncode != 0:
        print(res.stdout[-8000:], res.stderr[-2000:], file=sys.stderr)
    return {
        "seconds": time.perf_counter() - start,
        "summary": summary,
        "rc": res.returncode,
        "files": len(files),
    }


# ----------------------------------------------------------------- 3. prioritized replay
def bench_prioritized(device: torch.device, sz: Sizes) -> dict:
    """Steps per second of ``sample()`` + ``update_priority()`` on a full prioritized
    buffer whose storage (and so whose trees) live on ``device``."""
    from rl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer

    cap, batch = sz.per_capacity, sz.per_batch
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=0.6,
        beta=0.4,
        storage=LazyTensorStorage(cap, device=device),
        batch_size=batch,
    )
    gen = torch.Generator(device=device).manual_seed(0)
    rb.extend(
        TensorDict(
            observation=torch.randn(cap, 4, device=device, generator=gen),
            td_error=torch.rand(cap, device=device, generator=gen) + 0.01,
            batch_size=[cap],
        )
    )

    def step():
        sample = rb.sample()
        new = torch.rand(batch, device=device, generator=gen) + 0.01
        rb.update_priority(sample["index"], new)

    for _ in range(max(sz.per_iters // 10, 1)):
        step()
    _sync(device)
    start = time.perf_counter()
    for _ in range(sz.per_iters):
        step()
    _sync(device)
    seconds = time.perf_counter() - start
    return {"device": str(device), "steps_per_s": sz.per_iters / seconds}


# ---------------------------------------------------------------------------------- 4. PPO
def bench_ppo(device: torch.device, sz: Sizes, compile: bool, cudagraphs: bool) -> dict:
    """Training frames per second of PPO on ``CartPoleEnv(batch_size=[ppo_envs])`` on
    ``device``: collection (env, policy), GAE and the update epochs, after
    ``ppo_warmup`` batches (compilation, CUDA-graph capture) left out of the timing."""
    import ppo
    from _common import compile_policy

    from rl.collectors import Collector
    from rl.envs import CartPoleEnv
    from rl.objectives.value import GAE

    cfg = ppo.Config(
        num_envs=sz.ppo_envs,
        num_steps=sz.ppo_steps,
        update_epochs=sz.ppo_epochs,
        num_minibatches=sz.ppo_minibatches,
        gamma=0.99,
        gae_lambda=0.95,
        anneal_lr=False,
        compile=compile,
        cudagraphs=cudagraphs,
    )
    torch.manual_seed(0)
    env = CartPoleEnv(batch_size=[cfg.num_envs], device=device, categorical_action_encoding=True)
    env.set_seed(0)
    # built under the device: the lazy first layers, the tensor learning rate of the
    # compiled optimizer and the networks all live there
    with torch.device(device):
        actor, critic = ppo.make_agent(cfg, env)
        loss_module, optimizer = ppo.make_loss(cfg, actor, critic)
    step = ppo.make_update_step(cfg, loss_module, optimizer)
    frames_per_batch = cfg.num_envs * cfg.num_steps
    minibatch = frames_per_batch // cfg.num_minibatches
    collector = Collector(
        env,
        compile_policy(actor, compile=compile, cudagraphs=cudagraphs),
        frames_per_batch=frames_per_batch,
        total_frames=-1,
    )
    advantage = torch.no_grad()(GAE(gamma=cfg.gamma, lmbda=cfg.gae_lambda, value_network=critic))
    if compile and device.type == "cuda":
        # on the CPU the advantage runs rl-cpp's scan kernel, which compiled code cannot
        # call (as in examples/ppo.py); on the GPU it is torch code and is compiled
        advantage = torch.compile(advantage)

    frames, start = 0, None
    try:
        for i, batch in enumerate(collector):
            if i == sz.ppo_warmup:
                _sync(device)
                start = time.perf_counter()
            batch = advantage(batch)
            ppo.update_epochs(cfg, loss_module, optimizer, batch, minibatch, step)
            if start is not None:
                frames += batch.numel()
            if i + 1 == sz.ppo_warmup + sz.ppo_batches:
                break
        _sync(device)
        seconds = time.perf_counter() - start
    finally:
        collector.shutdown()
    return {
        "device": str(device),
        "compile": compile,
        "cudagraphs": cudagraphs,
        "frames": frames,
        "frames_per_s": frames / seconds,
    }


# ---------------------------------------------------------------------------------- 5. SAC
def bench_sac(device: torch.device, sz: Sizes, compile: bool, cudagraphs: bool) -> dict:
    """Updates per second of one SAC update (losses, backward, Adam, Polyak targets) at
    ``sac_batch`` with 256x256 ReLU networks, observation 3 and action 1 (Pendulum)."""
    from _common import compile_update, prime_soft_update, zero_grad

    from rl.modules import (
        MLP,
        NormalParamExtractor,
        ProbabilisticActor,
        TanhNormal,
        TensorDictModule,
        ValueOperator,
    )
    from rl.objectives import SACLoss, SoftUpdate

    obs_dim, act_dim, batch = 3, 1, sz.sac_batch
    torch.manual_seed(0)
    with torch.device(device):
        actor = ProbabilisticActor(
            TensorDictModule(
                nn.Sequential(
                    MLP(
                        in_features=obs_dim,
                        out_features=2 * act_dim,
                        num_cells=[256, 256],
                        activation_class=nn.ReLU,
                    ),
                    NormalParamExtractor(),
                ),
                in_keys=["observation"],
                out_keys=["loc", "scale"],
            ),
            in_keys=["loc", "scale"],
            distribution_class=TanhNormal,
        )
        qvalue = ValueOperator(
            MLP(
                in_features=obs_dim + act_dim,
                out_features=1,
                num_cells=[256, 256],
                activation_class=nn.ReLU,
            ),
            in_keys=["observation", "action"],
        )
        loss_module = SACLoss(
            actor, qvalue, num_qvalue_nets=2, loss_function="l2", target_entropy=-float(act_dim)
        )
        target_update = SoftUpdate(loss_module, tau=0.005)
        # CUDA graphs around an eager optimizer step need its state on the device
        optimizer = torch.optim.Adam(
            loss_module.parameters(), lr=3e-4, capturable=cudagraphs and not compile
        )
        data = TensorDict(
            observation=torch.randn(batch, obs_dim),
            action=torch.rand(batch, act_dim) * 2 - 1,
            next=TensorDict(
                observation=torch.randn(batch, obs_dim),
                reward=torch.randn(batch, 1),
                done=torch.zeros(batch, 1, dtype=torch.bool),
                terminated=torch.zeros(batch, 1, dtype=torch.bool),
                batch_size=[batch],
            ),
            batch_size=[batch],
        )

    def update(sample):
        losses = loss_module(sample)
        loss = losses["loss_actor"] + losses["loss_qvalue"] + losses["loss_alpha"]
        zero_grad(optimizer)
        loss.backward()
        optimizer.step()
        target_update.step()
        return TensorDict(loss=loss.detach())  # CUDA graphs (CudaGraphModule): a TensorDict

    if compile:
        prime_soft_update(target_update)
    update = compile_update(update, compile=compile, cudagraphs=cudagraphs)
    for _ in range(sz.sac_warmup):
        update(data)
    _sync(device)
    start = time.perf_counter()
    for _ in range(sz.sac_iters):
        loss = update(data)
    _sync(device)
    seconds = time.perf_counter() - start
    loss = loss["loss"]
    if not torch.isfinite(loss).all():
        raise RuntimeError(f"SAC update on {device} gave a non-finite loss {loss}")
    return {
        "device": str(device),
        "compile": compile,
        "cudagraphs": cudagraphs,
        "updates_per_s": sz.sac_iters / seconds,
    }


# ---------------------------------------------------------------------------------- report
def _mode(row: dict) -> str:
    if row["cudagraphs"]:
        return "compiled + CUDA graphs" if row["compile"] else "CUDA graphs"
    return "compiled" if row["compile"] else "eager"


def _ratio(value: float, floor: float | None) -> str:
    return "n/a" if floor is None else f"{value / floor:.2f}x"


def report(results: dict) -> str:
    sz = results["sizes"]
    lines = [
        "# GPU path (benchmarks/bench_gpu.py)",
        "",
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
        f"{torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA device'}; "
        f"device {results['device']}{', quick sizes' if results['quick'] else ''}; "
        f"{results['seconds']:.0f} s in all.",
        "",
    ]
    for part, error in results.get("errors", {}).items():
        lines += [f"- **{part} failed**: {error}"]
    if "build" in results:
        b = results["build"]
        lines += [
            f"- build: rl-cpp with CUDA in {b['seconds']:.1f} s "
            f"(cuda_compiled={b['cuda_compiled']}, {b['cuda_devices']} device(s))"
        ]
    if "tests" in results:
        t = results["tests"]
        lines += [
            f"- tests ({t['files']} files or node ids): {t['summary']} ({t['seconds']:.0f} s)"
        ]
    if "per" in results:
        rows = results["per"]
        lines += [
            "",
            "| prioritized sample + update_priority | steps/s | vs CPU trees |",
            "| --- | ---: | ---: |",
        ]
        cpu = next((r["steps_per_s"] for r in rows if r["device"] == "cpu"), None)
        for r in rows:
            lines.append(
                f"| {r['device']} trees | {r['steps_per_s']:,.0f} | "
                f"{_ratio(r['steps_per_s'], cpu)} |"
            )
    if "ppo" in results:
        rows = results["ppo"]
        head = f"| PPO, CartPoleEnv x {sz.ppo_envs:,} envs | mode | frames/s | vs CPU |"
        lines += ["", head, "| --- | --- | ---: | ---: |"]
        cpu = next((r["frames_per_s"] for r in rows if r["device"] == "cpu"), None)
        for r in rows:
            lines.append(
                f"| {r['device']} | {_mode(r)} | {r['frames_per_s']:,.0f} | "
                f"{_ratio(r['frames_per_s'], cpu)} |"
            )
    if "sac" in results:
        rows = results["sac"]
        lines += [
            "",
            f"| SAC update, batch {sz.sac_batch}, 256x256 | mode | updates/s | vs eager |",
            "| --- | --- | ---: | ---: |",
        ]
        for r in rows:
            eager = next(
                (
                    e["updates_per_s"]
                    for e in rows
                    if e["device"] == r["device"] and not e["compile"] and not e["cudagraphs"]
                ),
                None,
            )
            lines.append(
                f"| {r['device']} | {_mode(r)} | {r['updates_per_s']:,.0f} | "
                f"{_ratio(r['updates_per_s'], eager)} |"
            )
    return "\n".join(lines) + "\n"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--device",
        choices=["cuda", "cpu"],
        default="cuda",
        help="cuda: every part, GPU against CPU; cpu: the CPU parts only",
    )
    parser.add_argument(
        "--parts",
        default=None,
        help=f"comma-separated subset of {','.join(ALL_PARTS)} "
        f"(default: all on cuda, {','.join(CPU_PARTS)} on cpu)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run)")
    parser.add_argument(
        "--no-compile", action="store_true", help="eager only (no torch.compile, no CUDA graphs)"
    )
    parser.add_argument("--out", default=None, help="also write the markdown report here")
    parser.add_argument(
        "--gpu-only",
        action="store_true",
        help="with --device cuda: the GPU rows only (no CPU baselines; ratios to the CPU "
        "print n/a)",
    )
    parser.add_argument(
        "--tests",
        default=None,
        help="comma-separated pytest node ids for the tests part (default: every test file "
        "holding a CUDA-only test)",
    )
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    parts = (
        tuple(args.parts.split(","))
        if args.parts
        else (ALL_PARTS if args.device == "cuda" else CPU_PARTS)
    )
    unknown = sorted(set(parts) - set(ALL_PARTS))
    if unknown:
        raise SystemExit(f"--parts: unknown part(s) {unknown}, expected some of {list(ALL_PARTS)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit(
            "--device cuda: torch.cuda.is_available() is False on this machine (no CUDA GPU, "
            "or a CPU-only torch build); run with --device cpu for the parts a CPU can run"
        )
    if args.device == "cpu" and "build" in parts:
        raise SystemExit("--parts build needs --device cuda (it requires the CUDA compiler)")
    torch.set_num_threads(1 if args.device == "cpu" else torch.get_num_threads())
    sz = sizes(args.quick)
    compile = not args.no_compile
    gpu = torch.device("cuda", 0) if args.device == "cuda" else None
    cpu = torch.device("cpu")
    results: dict = {"device": args.device, "quick": args.quick, "sizes": sz}
    results["errors"] = {}
    start = time.perf_counter()

    def save():
        results["seconds"] = time.perf_counter() - start
        if args.out:
            Path(args.out).write_text(report(results))

    def part(name, measure):
        # one part failing (a build error, a test failure, an error on the device) is
        # reported and the next one still runs; the report is rewritten after each part
        # and each row, so a run cut short by its time limit keeps what it measured
        if name not in parts:
            return
        try:
            results[name] = measure()
        except Exception as error:  # noqa: BLE001  (reported, then the next part runs)
            traceback.print_exc()
            results["errors"][name] = f"{type(error).__name__}: {error}"
        save()

    def rows_of(name, *measures):
        # likewise one row: a mode that fails (CUDA graphs, say) leaves the others
        rows = results.setdefault(name, [])
        for measure, device, *arguments in measures:
            try:
                rows.append(measure(device, *arguments))
            except Exception as error:  # noqa: BLE001  (reported, then the next row runs)
                traceback.print_exc()
                flags = ", ".join(map(str, arguments[1:]))
                key = f"{name} on {device}" + (f" (compile, cudagraphs: {flags})" if flags else "")
                results["errors"][key] = f"{type(error).__name__}: {error}"
            save()
        return rows

    def on_gpu(*measures):
        return measures if gpu is not None else ()

    cpu_rows = not args.gpu_only
    modes = [(False, False)] + ([(False, True), (True, False), (True, True)] if compile else [])
    measures = {
        "build": build_rl_cpp,
        "tests": lambda: run_gpu_tests(
            log=Path(args.out).with_suffix(".tests.log") if args.out else None,
            tests=args.tests.split(",") if args.tests else None,
        ),
        # the device rows first: a run cut short keeps the GPU figures
        "per": lambda: rows_of(
            "per",
            *on_gpu((bench_prioritized, gpu, sz)),
            *[(bench_prioritized, cpu, sz)][: int(cpu_rows)],
        ),
        "ppo": lambda: rows_of(
            "ppo",
            *on_gpu((bench_ppo, gpu, sz, compile, compile)),
            *[(bench_ppo, cpu, sz, compile, False)][: int(cpu_rows)],
        ),
        "sac": lambda: rows_of(
            "sac",
            *on_gpu(*[(bench_sac, gpu, sz, c, g) for c, g in modes]),
            *[(bench_sac, cpu, sz, c, False) for c, g in modes if not g and cpu_rows],
        ),
    }
    for name in parts:  # in the order asked for
        part(name, measures[name])
    results["seconds"] = time.perf_counter() - start
    text = report(results)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return results


if __name__ == "__main__":
    main()
