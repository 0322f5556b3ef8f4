"""Whole training scripts, eager against ``--compile``, on the same budget and seed.

For each algorithm the example script runs twice, eager and compiled, one after the
other (interleaved: the two runs of an algorithm are neighbours in time, on the same
load), each in a fresh process (a compiled run pays its own compilation, as a user's
run does). The table gives the training frames per second of both (the script's own
clock: collection and updates, compilation included, evaluation excluded), the ratio,
the seed README's figure, and the final evaluation return of both runs, with the
``torch._dynamo`` counters of the compiled run (graphs, graph breaks, recompilations).

Budgets are cut from the scripts' learning targets so that the whole run fits in about
25 minutes on a 2-core CPU; the returns are therefore those of short runs, compared
between eager and compiled on the same seed, not the learning targets.

Each compiled run starts with an empty inductor kernel cache (a first run of the
script pays the whole compilation); ``--warm-cache`` keeps the cache, as a second run of
a script finds it.

``--micro sac redq ppo iql cql`` times the update step alone instead (the example's loss, gradients,
clipping, optimizer and target update at the example's sizes), eager against compiled
in interleaved blocks, in updates per second: a figure less sensitive to the machine's
load than whole runs. It also profiles each step's matrix products (their BLAS time,
which compiling leaves as it is): the ratio cap is the speed-up the compiled step would
reach if everything but its matrix products took no time, eager time over that. With
``--cse-ab`` (``--narrow-ab``) it times the compiled step with and without the examples'
common-subexpression (narrow-product) inductor pass (``examples/_compile_passes.py``)
instead.

Usage:
    python benchmarks/bench_compile.py [--algos ppo sac ...] [--scale 1.0] [--seed 0]
    python benchmarks/bench_compile.py --micro sac ppo
    python benchmarks/bench_compile.py --micro iql sac --cse-ab
    python benchmarks/bench_compile.py --micro sac cql --narrow-ab

Results go to benchmarks/results/compile.md.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "compile.md"
#: the seed README's whole-script torch.compile speed-ups on CPU
SEED_RATIO = {
    "dqn": 1.53,
    "ddpg": 1.54,
    "iql": 2.55,
    "cql": 1.91,
    "td3": 1.79,
    "a2c": 1.76,
    "ppo": 2.67,
    "sac": 2.01,
    "redq": 2.35,
}
#: algorithm -> (script, preset or None, Config overrides); budgets sized for ~25 min
RUNS = {
    "ppo": ("ppo", "cartpole", {"total_frames": 100_000}),
    "a2c": ("a2c", None, {"total_frames": 200_000}),
    "dqn": ("dqn", None, {"total_frames": 20_000, "eval_interval": 0}),
    "ddpg": ("ddpg", None, {"total_frames": 5_000}),
    "td3": ("td3", None, {"total_frames": 5_000}),
    "sac": ("sac", None, {"total_frames": 5_000}),
    "redq": ("redq", None, {"total_frames": 3_000}),
    "iql": ("offline", None, {"algo": "iql", "num_updates": 3_000, "eval_interval": 10**9}),
    "cql": ("offline", None, {"algo": "cql", "num_updates": 2_000, "eval_interval": 10**9}),
}
COMMON = {"eval_episodes": 5, "progress": False}


def run_one(algo: str, compile: bool, seed: int, scale: float, dataset: str | None) -> dict:
    """Runs one script in this process; returns its figures (called in a child)."""
    import dataclasses

    import torch._dynamo.utils as dynamo_utils

    script, preset, overrides = RUNS[algo]
    path = ROOT / "examples" / f"{script}.py"
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(script, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[script] = module
    spec.loader.exec_module(module)
    presets = getattr(module, "PRESETS", None)
    cfg = presets[preset or next(iter(presets))][1] if presets else module.Config()
    overrides = dict(overrides)
    for key in ("total_frames", "num_updates"):
        if key in overrides:
            overrides[key] = max(int(overrides[key] * scale), 1)
    if script == "offline":
        overrides["dataset"] = dataset
    log_dir = tempfile.mkdtemp(prefix=f"bench_compile_{algo}_")
    cfg = dataclasses.replace(
        cfg, **COMMON, **overrides, seed=seed, compile=compile, log_dir=log_dir
    )
    timeline = _record_progress()
    recompiled = _record_recompiles()
    summary = module.main(cfg)
    counters = dynamo_utils.counters
    return {
        "frames": summary["frames"],
        "seconds": summary["seconds"],
        "fps": summary["fps"],
        "steady_fps": steady_rate(timeline),
        "steady_cpu_fps": steady_rate(timeline, clock=2),
        "eval_mean": summary["eval_mean"],
        "graph_breaks": sum(counters["graph_break"].values()),
        "break_reasons": sorted({k.split("\n")[0] for k in counters["graph_break"]}),
        "graphs": counters["stats"].get("unique_graphs", 0),
        "recompiles": len(recompiled),
        "recompiled": sorted(set(recompiled)),
    }


def _record_progress() -> list[tuple[float, int, float]]:
    """Every example counts its frames (updates, offline) through ``ProgressBar.update``:
    the list returned receives ``(wall time, frames so far, CPU time)`` at each call of
    this process."""
    from rl.core.trainers import ProgressBar

    timeline: list[tuple[float, int, float]] = []
    update = ProgressBar.update

    def timed_update(self, frames: int) -> None:
        update(self, frames)
        done = timeline[-1][1] if timeline else 0
        timeline.append((time.perf_counter(), done + frames, time.process_time()))

    ProgressBar.update = timed_update
    return timeline


def _record_recompiles() -> list[str]:
    """The list returned receives the first line of each recompilation dynamo logs in
    this process ("Recompiling function ..."; torch keeps no counter of them)."""
    import logging

    import torch._logging

    recompiled: list[str] = []

    class Recompiles(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            recompiled.append(record.getMessage().splitlines()[0])

    torch._logging.set_logs(recompiles=True)
    logging.getLogger("torch._dynamo.guards.__recompiles").addHandler(Recompiles())
    return recompiled


def steady_rate(timeline: list[tuple[float, int, float]], clock: int = 0) -> float:
    """Frames per second over the second half of a run's frames: the training loop after
    its first updates, when compilation (at the first calls) is behind it. A long run's
    rate tends to this one; the whole run's rate includes the compilation.

    ``clock=0``: wall time; ``clock=2``: this process's CPU time (the examples run one
    torch thread and gymnasium's synchronous vector envs in one process, so CPU time is
    the wall time of a machine nobody else uses: the steadier figure on a shared one).
    """
    if len(timeline) < 3:
        return float("nan")
    total = timeline[-1][1]
    first = next(entry for entry in timeline if entry[1] >= total / 2)
    elapsed = timeline[-1][clock] - first[clock]
    return (total - first[1]) / elapsed if elapsed > 0 else float("nan")


def child(
    algo: str, compile: bool, seed: int, scale: float, dataset: str | None, warm_cache: bool
) -> dict:
    cmd = [sys.executable, __file__, "--child", algo, "--seed", str(seed), "--scale", str(scale)]
    if compile:
        cmd.append("--compile")
    if dataset:
        cmd += ["--dataset", dataset]
    env = dict(os.environ)
    if not warm_cache:  # a first run: inductor's on-disk cache of compiled kernels empty
        env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench_compile_inductor_")
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    if out.returncode:
        raise RuntimeError(f"{algo} (compile={compile}) failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def make_dataset(seed: int, scale: float) -> str:
    """The offline runs' dataset: an eager SAC run that keeps its replay buffer."""
    path = Path(tempfile.mkdtemp(prefix="bench_compile_data_")) / "data"
    cmd = [
        sys.executable,
        str(ROOT / "examples" / "sac.py"),
        "--total-frames",
        str(max(int(5_000 * scale), 1_500)),
        "--eval-episodes",
        "2",
        "--no-progress",
        "--seed",
        str(seed),
        "--log-dir",
        str(path.parent / "runs"),
        "--save-buffer",
        str(path),
    ]
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
    return str(path)


def micro(algo: str, rounds: int, block: int) -> dict:
    """Update-only figure: the example's update step, eager and compiled (one graph), at
    the example's sizes, timed in interleaved blocks of ``block`` updates on the same
    data (one thread); returns updates/s of both (median of the blocks) and the compile
    time (the compiled step's first call)."""

    import torch

    sys.path.insert(0, str(ROOT / "examples"))
    torch.set_num_threads(1)
    torch.manual_seed(0)
    steps, data = {}, None
    for compiled in (False, True):
        torch.manual_seed(0)
        step, data = MICRO[algo](compiled, data)
        steps[compiled] = step
    start = time.perf_counter()
    steps[True](data)
    compile_s = time.perf_counter() - start
    steps[False](data)
    eager, fused = interleaved_rates(steps, data, rounds, block)
    gemm = gemm_seconds(steps[True], data)
    return {
        "eager": eager,
        "compiled": fused,
        "ratio": fused / eager,
        "compile_s": compile_s,
        "gemm_share": gemm * fused,
        # the compiled step at its GEMMs' time alone, everything else free
        "ratio_cap": 1.0 / (gemm * eager),
    }


def _flag_ab(algo: str, compiled: bool, module, flag: str, per_call: bool):
    """``algo``'s update step built twice, with ``module.<flag>`` False and True (the
    same seed, the same data), each called once (it compiles there); ``per_call``: the
    flag is also set at each call of its step (read then, not only at the build).
    Returns ``(steps, data, logs)`` keyed by the flag; the flag is True again after."""
    import torch

    torch.set_num_threads(1)
    steps, data, logs = {}, None, {}
    try:
        for value in (False, True):
            setattr(module, flag, value)
            torch.manual_seed(0)
            step, data = MICRO[algo](compiled, data)
            torch.manual_seed(1)
            logs[value] = step(data)  # compiles, under this setting
            steps[value] = (
                functools.partial(_with_flag, step, module, flag, value) if per_call else step
            )
    finally:
        setattr(module, flag, True)
    return steps, data, logs


def _with_flag(step, module, flag: str, value: bool, data):
    """``step(data)`` with ``module.<flag>`` set to ``value`` (a compiled step holds a
    graph for each setting: dynamo guards on the flag)."""
    setattr(module, flag, value)
    try:
        return step(data)
    finally:
        setattr(module, flag, True)


def micro_pass(algo: str, flag: str, rounds: int, block: int) -> dict:
    """The compiled update step with and without one of the examples' inductor passes
    (``_common.COMMON_SUBEXPRESSIONS`` or ``_common.NARROW_PRODUCTS``, read when the step
    is built), timed in interleaved blocks as :func:`micro`; returns updates/s of both and
    the largest difference of the first step's logs (same seed, same data)."""
    import _common

    steps, data, logs = _flag_ab(algo, True, _common, flag, per_call=False)
    without, with_ = interleaved_rates(steps, data, rounds, block)
    diff = _max_diff(logs[True], logs[False])
    return {"without": without, "with": with_, "gain": with_ / without, "max_diff": diff}


def micro_batched(algo: str, rounds: int, block: int) -> dict:
    """The update step with its critic ensembles run batched (rl-objectives
    ``LossModule._batched_values``, ``_BATCHED_ENSEMBLES``, read at each call) against
    the member calls, eager and compiled, timed in interleaved blocks as :func:`micro`;
    returns updates/s of each and the largest difference of the first step's logs (same
    seed, same data)."""
    from rl.objectives import _loss

    result = {}
    for compiled in (False, True):
        steps, data, logs = _flag_ab(algo, compiled, _loss, "_BATCHED_ENSEMBLES", per_call=True)
        members, batched = interleaved_rates(steps, data, rounds, block)
        result["compiled" if compiled else "eager"] = {
            "members": members,
            "batched": batched,
            "gain": batched / members,
            "max_diff": _max_diff(logs[True], logs[False]),
        }
    return result


def interleaved_rates(steps: dict, data, rounds: int, block: int) -> tuple[float, float]:
    """Calls per second of ``steps[False]`` and ``steps[True]`` on ``data``: the medians
    of ``rounds`` blocks of ``block`` calls each, the two alternating (which goes first
    alternating too)."""
    import statistics

    rates: dict[bool, list[float]] = {False: [], True: []}
    for i in range(rounds):
        for key in (False, True) if i % 2 == 0 else (True, False):
            start = time.perf_counter()
            for _ in range(block):
                steps[key](data)
            rates[key].append(block / (time.perf_counter() - start))
    return statistics.median(rates[False]), statistics.median(rates[True])


def _max_diff(a, b) -> float:
    """The largest absolute difference of two steps' logs (tensors, or dicts of them)."""
    import torch

    if hasattr(a, "keys"):
        return max(_max_diff(a[key], b[key]) for key in a.keys())
    return float((torch.as_tensor(a) - torch.as_tensor(b)).abs().max())


#: the matrix products of a step (what compiling leaves as they are, at their BLAS time)
GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_addmm_activation")


def gemm_seconds(step, data, n: int = 10) -> float:
    """Seconds per call of ``step`` spent in matrix products (``torch.profiler`` self CPU
    time of :data:`GEMM_OPS`, over ``n`` calls)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(n):
            step(data)
    us = sum(e.self_cpu_time_total for e in prof.key_averages() if e.key in GEMM_OPS)
    return us * 1e-6 / n


def _soft_actor_critic_step(script: str, compiled: bool, sample):
    """``script``'s update (sac.py, redq.py: ``make_learner``) at its defaults (batch 256,
    64x64 networks; SAC's twin critics, REDQ's 10 with 2 drawn for each target)."""
    from _offpolicy import make_env, make_qvalue, make_tanh_normal_actor, transitions

    module = importlib.import_module(script)
    cfg = module.Config(compile=compiled)
    env = make_env(cfg.env_id)
    actor, qvalue = make_tanh_normal_actor(env, cfg.hidden), make_qvalue(env, cfg.hidden)
    _, step = module.make_learner(cfg, env, actor, qvalue)
    if sample is None:
        env.set_seed(0)
        sample = transitions(env.rollout(cfg.batch_size, break_when_any_done=False))
    return step, sample


def _ppo_step(compiled: bool, minibatch):
    """ppo.py's minibatch step at its cartpole defaults (8 x 32 frames, 64x64)."""
    import ppo
    import torch

    cfg = ppo.Config(compile=compiled)
    env = ppo.make_env(cfg, cfg.num_envs)
    actor, critic = ppo.make_agent(cfg, env)
    loss, optim = ppo.make_loss(cfg, actor, critic)
    step = ppo.make_update_step(cfg, loss, optim)
    if minibatch is None:
        from rl.objectives.value import GAE

        env.set_seed(0)
        with torch.no_grad():
            batch = env.rollout(cfg.num_steps, actor, break_when_any_done=False)
            GAE(gamma=cfg.gamma, lmbda=cfg.gae_lambda, value_network=critic)(batch)
        minibatch = batch.exclude("next").reshape(-1)
    index = torch.randperm(minibatch.numel())  # one step on the whole batch (a permuted gather)
    return (lambda batch: step(batch, index)), minibatch


def _offline_step(algo: str, compiled: bool, sample):
    """offline.py's update at its defaults for ``algo`` (IQL: batch 256, 256x256 actor,
    twin critics and value network; CQL: batch 256, 128x128, 10 random actions per
    state), past CQL's warm-up, on a batch of random Pendulum transitions."""
    import offline
    import torch
    from _offpolicy import make_env, transitions

    cfg = offline.resolve(offline.Config(algo=algo, compile=compiled))
    env = make_env("Pendulum-v1")
    *_, update = offline.make_learner(cfg, env)
    warm_up = torch.tensor(False)
    if sample is None:
        env.set_seed(0)
        sample = transitions(env.rollout(cfg.batch_size, break_when_any_done=False))
    return (lambda batch: update(batch, warm_up)), sample


#: the update steps ``--micro`` times: algorithm -> builder(compiled, data)
MICRO = {
    "sac": functools.partial(_soft_actor_critic_step, "sac"),
    "redq": functools.partial(_soft_actor_critic_step, "redq"),
    "ppo": _ppo_step,
    "iql": functools.partial(_offline_step, "iql"),
    "cql": functools.partial(_offline_step, "cql"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", nargs="+", default=list(RUNS), choices=list(RUNS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every budget")
    parser.add_argument("--child", choices=list(RUNS), help=argparse.SUPPRESS)
    parser.add_argument("--compile", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dataset", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument(
        "--warm-cache",
        action="store_true",
        help="keep inductor's on-disk kernel cache between runs (a second run of a script); "
        "by default each compiled run starts with an empty one, as a first run does",
    )
    parser.add_argument(
        "--micro",
        nargs="+",
        choices=list(MICRO),
        help="update-only: the example's update step eager vs compiled, in updates/s",
    )
    parser.add_argument("--rounds", type=int, default=10, help="--micro: timed blocks per mode")
    parser.add_argument(
        "--cse-ab",
        action="store_true",
        help="--micro: the compiled step with and without the examples' common-subexpression "
        "pass, instead of eager against compiled",
    )
    parser.add_argument(
        "--narrow-ab",
        action="store_true",
        help="--micro: the compiled step with and without the examples' narrow-product "
        "pass, instead of eager against compiled",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs of each mode per algorithm, in ABBA order (eager, compiled, compiled, "
        "eager, ...); the rates are the means of the runs, so a drift of the machine's speed "
        "over the minutes of a row cancels out",
    )
    parser.add_argument(
        "--batched-ab",
        action="store_true",
        help="--micro: the step with the critic ensembles run batched against the member "
        "calls, eager and compiled, instead of eager against compiled",
    )
    args = parser.parse_args()
    ab = [name for name in ("batched_ab", "cse_ab", "narrow_ab") if getattr(args, name)]
    if ab and not args.micro:
        parser.error(
            "--batched-ab, --cse-ab and --narrow-ab time update steps: give --micro ALGO..."
        )
    if len(ab) > 1:
        parser.error("--batched-ab, --cse-ab and --narrow-ab are different A/Bs: give one")
    if args.micro and args.batched_ab:
        sys.path.insert(0, str(ROOT / "examples"))
        for algo in args.micro:
            r = micro_batched(algo, args.rounds, block=20)
            for mode, m in r.items():
                print(
                    f"{algo} {mode} update: member calls {m['members']:.1f}/s, batched "
                    f"{m['batched']:.1f}/s ({m['gain']:.3f}x); first step's logs differ by at "
                    f"most {m['max_diff']:.3g}",
                    flush=True,
                )
        return
    if args.micro and (args.cse_ab or args.narrow_ab):
        sys.path.insert(0, str(ROOT / "examples"))
        flag = "COMMON_SUBEXPRESSIONS" if args.cse_ab else "NARROW_PRODUCTS"
        for algo in args.micro:
            r = micro_pass(algo, flag, args.rounds, block=50)
            print(
                f"{algo} compiled update: without the pass {r['without']:.1f}/s, with it "
                f"{r['with']:.1f}/s ({r['gain']:.3f}x); first step's logs differ by at most "
                f"{r['max_diff']:.3g}",
                flush=True,
            )
        return
    if args.micro:
        for algo in args.micro:
            r = micro(algo, args.rounds, block=50)
            print(
                f"{algo} update: eager {r['eager']:.1f}/s  compiled {r['compiled']:.1f}/s  "
                f"ratio {r['ratio']:.2f}x  (compile {r['compile_s']:.1f} s); GEMMs "
                f"{100 * r['gemm_share']:.0f}% of the compiled step: ratio cap "
                f"{r['ratio_cap']:.2f}x (seed {SEED_RATIO[algo]:.2f}x)",
                flush=True,
            )
        return
    if args.child:
        result = run_one(args.child, args.compile, args.seed, args.scale, args.dataset)
        print(json.dumps(result))
        return

    dataset = None
    if {"iql", "cql"} & set(args.algos):
        dataset = make_dataset(args.seed, args.scale)
    rows, start = [], time.perf_counter()
    for i, algo in enumerate(args.algos):
        # alternate which mode runs first, so neither always gets the other's warm caches
        runs: dict[bool, list[dict]] = {False: [], True: []}
        for mode in abba(args.repeats, first=i % 2 == 1):
            runs[mode].append(child(algo, mode, args.seed, args.scale, dataset, args.warm_cache))
        eager, compiled = mean_run(runs[False]), mean_run(runs[True])
        row = {"algo": algo, "eager": eager, "compiled": compiled}
        row["ratio"] = compiled["fps"] / eager["fps"]
        row["steady"] = compiled["steady_fps"] / eager["steady_fps"]
        row["steady_cpu"] = compiled["steady_cpu_fps"] / eager["steady_cpu_fps"]
        rows.append(row)
        print(
            f"{algo:5s} eager {eager['fps']:8.1f} fps  compiled {compiled['fps']:8.1f} fps  "
            f"ratio {row['ratio']:.2f}x; steady eager {eager['steady_fps']:8.1f} compiled "
            f"{compiled['steady_fps']:8.1f} ratio "
            f"{row['steady']:.2f}x, CPU time {row['steady_cpu']:.2f}x (seed "
            f"{SEED_RATIO[algo]:.2f}x)  return eager "
            f"{eager['eval_mean']:.1f} compiled {compiled['eval_mean']:.1f}  breaks "
            f"{compiled['graph_breaks']} graphs {compiled['graphs']} recompiles "
            f"{compiled['recompiles']}",
            flush=True,
        )
    total = time.perf_counter() - start
    write_table(rows, args, total)


def abba(repeats: int, first: bool) -> list[bool]:
    """The modes of a row's runs (``True``: compiled), ``first`` then the other, mirrored
    at each repeat: ``abba(2, False)`` is eager, compiled, compiled, eager."""
    pair = [first, not first]
    return [mode for k in range(repeats) for mode in (pair if k % 2 == 0 else pair[::-1])]


#: the figures of a run that :func:`mean_run` averages over repeats
RATES = ("fps", "steady_fps", "steady_cpu_fps")


def mean_run(runs: list[dict]) -> dict:
    """The first run's figures with its rates replaced by the means over ``runs``."""
    mean = dict(runs[0])
    for key in RATES:
        mean[key] = sum(run[key] for run in runs) / len(runs)
    mean["runs"] = len(runs)
    return mean


def write_table(rows: list[dict], args, total: float) -> None:
    """Puts this run's table at the top of ``args.out``, above the earlier measurements."""
    unit = {"iql": "updates", "cql": "updates"}
    cache = "warm (a second run of the script)" if args.warm_cache else "empty (a first run)"
    lines = [
        f"## {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
        f"`bench_compile.py --algos {' '.join(args.algos)} --scale {args.scale}"
        + (f" --repeats {args.repeats}`" if args.repeats > 1 else "`"),
        "",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch "
        f"{_torch_version()}, one thread, each run in its own process, eager and compiled "
        "runs of an algorithm side by side"
        + (
            f" ({args.repeats} of each in ABBA order, each rate the mean of its runs)"
            if args.repeats > 1
            else ""
        )
        + f"; inductor cache {cache}; load average "
        f"{_load()} at the end; total {total / 60:.1f} min.",
        "",
        "Whole: the script's training clock over the budget (collection and updates, "
        "compilation included, evaluation excluded; the offline rows count gradient "
        "steps). Steady: the same clock over the second half of the budget, after the "
        "first updates have compiled (what a long run tends to); the CPU column divides "
        "by the process's CPU time instead (one thread, synchronous envs: what the "
        "wall clock reads on an idle machine, less exposed to the other jobs of a shared "
        "one). Returns: final "
        "evaluation (5 deterministic episodes), eager and compiled on the same seed. "
        "Breaks / graphs / recompiles: `torch._dynamo` counters of the compiled run.",
        "",
        "| algorithm | budget | eager whole /s | compiled whole /s | whole ratio | "
        "eager steady /s | compiled steady /s | steady ratio | steady ratio, CPU time | "
        "seed's ratio | eval return eager | eval return compiled | breaks | graphs | "
        "recompiles |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
        "---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        e, c, algo = row["eager"], row["compiled"], row["algo"]
        steady, steady_cpu = row["steady"], row["steady_cpu"]
        lines.append(
            f"| {algo} | {e['frames']:,} {unit.get(algo, 'frames')} | {e['fps']:.1f} | "
            f"{c['fps']:.1f} | {row['ratio']:.2f}x | {e['steady_fps']:.1f} | "
            f"{c['steady_fps']:.1f} | {steady:.2f}x | **{steady_cpu:.2f}x** | "
            f"{SEED_RATIO[algo]:.2f}x | "
            f"{e['eval_mean']:.1f} | {c['eval_mean']:.1f} | {c['graph_breaks']} | "
            f"{c['graphs']} | {c['recompiles']} |"
        )
    reasons = sorted({r for row in rows for r in row["compiled"]["break_reasons"]})
    lines += ["", "Graph-break reasons seen in the compiled runs:", ""]
    lines += [f"- {r}" for r in reasons] or ["- none"]
    recompiled = sorted({r for row in rows for r in row["compiled"]["recompiled"]})
    lines += ["", "Recompilations seen in the compiled runs:", ""]
    lines += [f"- {r}" for r in recompiled] or ["- none"]
    out = Path(args.out)
    title = "# Whole training scripts: eager against `--compile` (CPU)"
    earlier = out.read_text().split("\n", 1)[1].lstrip("\n") if out.exists() else ""
    out.write_text("\n".join([title, "", *lines, "", earlier]).rstrip("\n") + "\n")
    print(f"written {args.out}")


def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "unknown"


def _torch_version() -> str:
    import torch

    return torch.__version__


if __name__ == "__main__":
    main()
