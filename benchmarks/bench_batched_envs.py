"""Batched-env throughput against gymnasium's vector envs, measured in the same run.

CartPole-v1 with 8 sub-envs and uniformly random actions (presampled, for gymnasium too),
``steps`` batched steps per measurement, done sub-envs reset automatically:

- floors: ``gymnasium.vector.AsyncVectorEnv(8)`` (shared memory, worker processes), with
  its default start method (``fork`` on Linux) and with ``spawn``, and
  ``gymnasium.vector.SyncVectorEnv(8)`` (in-process), stepping the presampled actions;
- ``ParallelEnv(8, GymEnv("CartPole-v1")).rollout(steps, break_when_any_done=False)``,
  with ``spawn`` (its default) and ``fork`` workers;
- the same ParallelEnvs driven by ``step_and_maybe_reset`` (a collector's loop);
- ``SerialEnv(8, ...).rollout(...)``.

Each ParallelEnv is compared with the AsyncVectorEnv of the same start method (spawned
workers do not share the parent's memory pages, which costs both libraries on a small
machine), and everything with SyncVectorEnv. Target: ParallelEnv >= AsyncVectorEnv and
SyncVectorEnv. Every figure is the best of several rounds in which all variants take
turns, so that load spikes on a shared machine hit floors and ours alike. The ratios
depend on the number of cores: with 8 workers on 2 cores, every batched step costs
16 context switches, which SyncVectorEnv does not pay.

Run: ``.venv/bin/python benchmarks/bench_batched_envs.py`` (``--quick`` for a smoke run).
Prints a markdown table and writes it to ``benchmarks/results/batched_envs.md``.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from rl.envs import GymEnv, ParallelEnv, SerialEnv

NUM_ENVS = 8
ENV_NAME = "CartPole-v1"


def gym_loop(envs, actions: np.ndarray) -> None:
    for action in actions:
        envs.step(action)


def rl_step_loop(env, steps: int) -> None:
    td = env.reset()
    actions = env.action_spec.rand((steps,))
    for t in range(steps):
        td.set("action", actions[t])
        _, td = env.step_and_maybe_reset(td)


def make_gym_env():
    return gym.make(ENV_NAME)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--steps", type=int, default=2000, help="batched steps per round")
    parser.add_argument("--rounds", type=int, default=5, help="best of this many rounds")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "batched_envs.md"))
    args = parser.parse_args()
    steps, rounds = (200, 2) if args.quick else (args.steps, args.rounds)
    torch.set_num_threads(1)
    torch.manual_seed(0)

    make = functools.partial(GymEnv, ENV_NAME)
    gym_envs = {
        "fork": gym.vector.AsyncVectorEnv([make_gym_env] * NUM_ENVS),
        "spawn": gym.vector.AsyncVectorEnv([make_gym_env] * NUM_ENVS, context="spawn"),
        "sync": gym.vector.SyncVectorEnv([make_gym_env] * NUM_ENVS),
    }
    parallel = {m: ParallelEnv(NUM_ENVS, make, mp_start_method=m) for m in ("spawn", "fork")}
    serial = SerialEnv(NUM_ENVS, make)
    for env in gym_envs.values():
        env.reset(seed=0)
    for env in (*parallel.values(), serial):
        env.set_seed(0)
    gym_actions = np.stack([gym_envs["sync"].action_space.sample() for _ in range(steps)])

    def rollout(env):
        return lambda: env.rollout(steps, break_when_any_done=False)

    variants = {  # name: (function, the AsyncVectorEnv it is compared with)
        "gymnasium AsyncVectorEnv(8), fork": (
            lambda: gym_loop(gym_envs["fork"], gym_actions),
            "fork",
        ),
        "gymnasium AsyncVectorEnv(8), spawn": (
            lambda: gym_loop(gym_envs["spawn"], gym_actions),
            "spawn",
        ),
        "gymnasium SyncVectorEnv(8)": (lambda: gym_loop(gym_envs["sync"], gym_actions), "fork"),
        "ParallelEnv(8).rollout, spawn": (rollout(parallel["spawn"]), "spawn"),
        "ParallelEnv(8) step_and_maybe_reset loop, spawn": (
            lambda: rl_step_loop(parallel["spawn"], steps),
            "spawn",
        ),
        "ParallelEnv(8).rollout, fork": (rollout(parallel["fork"]), "fork"),
        "ParallelEnv(8) step_and_maybe_reset loop, fork": (
            lambda: rl_step_loop(parallel["fork"], steps),
            "fork",
        ),
        "SerialEnv(8).rollout": (rollout(serial), "fork"),
    }
    for fn, _ in variants.values():  # warm-up (also starts the workers)
        fn()
    best = dict.fromkeys(variants, float("inf"))
    for _ in range(rounds):
        for name, (fn, _) in variants.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    for env in (*gym_envs.values(), *parallel.values(), serial):
        env.close()

    floors = {
        "fork": steps / best["gymnasium AsyncVectorEnv(8), fork"],
        "spawn": steps / best["gymnasium AsyncVectorEnv(8), spawn"],
    }
    floor_sync = steps / best["gymnasium SyncVectorEnv(8)"]
    lines = [
        f"# Batched envs: {ENV_NAME}, {NUM_ENVS} sub-envs, random actions",
        "",
        f"{steps} batched steps per round, best of {rounds} rounds; "
        f"{os.cpu_count()} CPU cores, {platform.processor() or platform.machine()}, "
        f"torch {torch.__version__}, gymnasium {gym.__version__}.",
        "",
        "| variant | batched steps/s | env steps/s | vs AsyncVectorEnv (same start method) "
        "| vs SyncVectorEnv |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, seconds in best.items():
        rate = steps / seconds
        floor = floors[variants[name][1]]
        lines.append(
            f"| {name} | {rate:,.0f} | {rate * NUM_ENVS:,.0f} | {rate / floor:.2f} | "
            f"{rate / floor_sync:.2f} |"
        )
    table = "\n".join(lines) + "\n"
    print(table)
    if not args.quick:
        Path(args.out).write_text(table)


if __name__ == "__main__":
    main()
