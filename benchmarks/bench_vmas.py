"""VmasEnv's per-step cost against VMAS stepped directly, measured in the same run.

1,024 sub-envs of a VMAS scenario (``navigation`` with 3 agents, ``balance`` with 3
agents), continuous actions presampled for every step, no horizon (no resets):

- floor A: ``vmas.make_env(...).step(actions)`` with the per-agent action tensors of each
  step (the loop a user writes against VMAS; nothing stored, nothing reset);
- ``VmasEnv.step(td)``: the action written into the root tensordict, one ``step`` per
  iteration (the wrapper's whole cost: reading the group actions, building the grouped
  output TensorDict), against floor A;
- floor B: floor A plus ``reset_at`` of the sub-envs that are done after each step, from a
  full reset at the start of each round (``balance`` ends episodes);
- ``VmasEnv.step_and_maybe_reset(td)``: a collector's loop (``step``, ``step_mdp``, reset of
  the done sub-envs through ``"_reset"``), from a full reset, against floor B;
- ``VmasEnv.rollout(steps, break_when_any_done=False)``: the preallocated rollout with
  random actions (resets included, stores every step), against floor B.

Target (issue #22): ``VmasEnv.step`` costs at most 1.2x the floor. Variants run in turns
(interleaved rounds), each timed in CPU time of the process and in wall time; the median
over rounds is reported. Torch runs on one thread so that both sides do the same work on
a machine shared with other jobs.

Run: ``uv run python benchmarks/bench_vmas.py`` (``--quick`` for a smoke run). Prints a
markdown table and writes it to ``benchmarks/results/vmas.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
import warnings
from pathlib import Path

import torch
import vmas

from rl.envs import VmasEnv

NUM_ENVS = 1024
SCENARIOS = {"navigation": {"n_agents": 3}, "balance": {"n_agents": 3}}


def timed(fn) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - cpu, time.perf_counter() - wall


def bench_scenario(name: str, kwargs: dict, steps: int, rounds: int) -> list[dict]:
    # two pairs of envs: one stepped without resets (step alone), one that resets its done
    # sub-envs (balance ends episodes when the package falls); each round of the second pair
    # starts from a full reset
    raw = vmas.make_env(name, num_envs=NUM_ENVS, seed=0, **kwargs)
    raw_r = vmas.make_env(name, num_envs=NUM_ENVS, seed=0, **kwargs)
    env = VmasEnv(name, num_envs=NUM_ENVS, seed=0, **kwargs)
    env_r = VmasEnv(name, num_envs=NUM_ENVS, seed=0, **kwargs)
    n_agents = env.n_agents
    actions = env.full_action_spec.rand((steps,))["agents", "action"]  # [T, B, n, 2]
    raw_actions = [list(actions[t].unbind(1)) for t in range(steps)]

    def floor():
        for t in range(steps):
            raw.step(raw_actions[t])

    def wrapper_step():
        td = root
        for t in range(steps):
            td.set(("agents", "action"), actions[t])
            env.step(td)

    def floor_resets():
        raw_r.reset()
        for t in range(steps):
            _, _, dones, _ = raw_r.step(raw_actions[t])
            for index in dones.nonzero().flatten().tolist():
                raw_r.reset_at(index, return_observations=False)

    def wrapper_collector():
        td = env_r.reset()
        for t in range(steps):
            td.set(("agents", "action"), actions[t])
            _, td = env_r.step_and_maybe_reset(td)

    def wrapper_rollout():
        env_r.rollout(steps, break_when_any_done=False)

    raw.reset()
    root = env.reset()
    variants = {
        "VMAS env.step (floor A)": floor,
        "VmasEnv.step": wrapper_step,
        "VMAS env.step + reset_at of done sub-envs (floor B)": floor_resets,
        "VmasEnv.step_and_maybe_reset": wrapper_collector,
        "VmasEnv.rollout": wrapper_rollout,
    }
    floors = {
        "VMAS env.step (floor A)": "VMAS env.step (floor A)",
        "VmasEnv.step": "VMAS env.step (floor A)",
    }
    for fn in variants.values():  # warm-up
        fn()
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
    for _ in range(rounds):
        for key, fn in variants.items():
            times[key].append(timed(fn))
    rows = []
    for key, values in times.items():
        floor_key = floors.get(key, "VMAS env.step + reset_at of done sub-envs (floor B)")
        floor_cpu = statistics.median(c for c, _ in times[floor_key])
        floor_wall = statistics.median(w for _, w in times[floor_key])
        cpu = statistics.median(c for c, _ in values)
        wall = statistics.median(w for _, w in values)
        rows.append(
            {
                "scenario": f"{name} ({n_agents} agents)",
                "variant": key,
                "cpu_ms": 1e3 * cpu / steps,
                "wall_ms": 1e3 * wall / steps,
                "cpu_ratio": cpu / floor_cpu,
                "wall_ratio": wall / floor_wall,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--steps", type=int, default=20, help="steps per round")
    parser.add_argument("--rounds", type=int, default=7, help="median of this many rounds")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "vmas.md"))
    args = parser.parse_args()
    steps, rounds = (3, 2) if args.quick else (args.steps, args.rounds)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    load_before = os.getloadavg()[0]
    rows = []
    for name, kwargs in SCENARIOS.items():
        rows += bench_scenario(name, kwargs, steps, rounds)
    load = f"{load_before:.1f} / {os.getloadavg()[0]:.1f}"
    lines = [
        "# VMAS: VmasEnv against VMAS stepped directly",
        "",
        f"{NUM_ENVS} sub-envs, {steps} steps per round, median of {rounds} interleaved rounds, "
        f"torch {torch.__version__} on 1 thread, VMAS {vmas.__version__}, "
        f"{platform.processor() or platform.machine()}. Ratio = time / floor (A for "
        "`VmasEnv.step`, B for the variants that reset); target: `VmasEnv.step` <= 1.2x.",
        "",
        f"Load average at start / end: {load} on {os.cpu_count()} cores: wall times follow the "
        "other jobs on the machine, CPU time of the process is the figure to compare.",
        "",
        "| scenario | variant | CPU ms/step | wall ms/step | CPU ratio | wall ratio |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['scenario']} | {r['variant']} | {r['cpu_ms']:.2f} | {r['wall_ms']:.2f} | "
            f"{r['cpu_ratio']:.3f}x | {r['wall_ratio']:.3f}x |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.quick:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
