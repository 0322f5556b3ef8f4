"""Batched-env throughput against gymnasium's vector envs, measured in the same run.

CartPole-v1 with 8 sub-envs and uniformly random actions (presampled, for gymnasium too),
``steps`` batched steps per measurement, done sub-envs reset automatically:

- floor: ``gymnasium.vector.AsyncVectorEnv(8)`` (shared memory, worker processes) and
  ``gymnasium.vector.SyncVectorEnv(8)`` (in-process), stepping the presampled actions;
- ``ParallelEnv(8, GymEnv("CartPole-v1")).rollout(steps, break_when_any_done=False)``;
- ``ParallelEnv(8, ...)`` driven by ``step_and_maybe_reset`` (the collector loop);
- ``SerialEnv(8, ...).rollout(...)``.

Target: ParallelEnv reaches at least the throughput of AsyncVectorEnv and SyncVectorEnv
(ratio >= 1). Every measurement is the best of several rounds in which all variants take
turns, so that load spikes on a shared machine hit floors and ours alike. Note that the
ratios depend on the number of cores: with 8 workers on a 2-core machine, processes
mostly wait for their turn on a core.

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--steps", type=int, default=2000, help="batched steps per round")
    parser.add_argument("--rounds", type=int, default=5, help="best of this many rounds")
    parser.add_argument("--mp-start-method", default="spawn", help="for ParallelEnv")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "batched_envs.md"))
    args = parser.parse_args()
    steps, rounds = (200, 2) if args.quick else (args.steps, args.rounds)
    torch.set_num_threads(1)
    torch.manual_seed(0)

    make = functools.partial(GymEnv, ENV_NAME)
    async_env = gym.vector.AsyncVectorEnv([lambda: gym.make(ENV_NAME)] * NUM_ENVS)
    sync_env = gym.vector.SyncVectorEnv([lambda: gym.make(ENV_NAME)] * NUM_ENVS)
    parallel = ParallelEnv(NUM_ENVS, make, mp_start_method=args.mp_start_method)
    serial = SerialEnv(NUM_ENVS, make)
    for env in (async_env, sync_env):
        env.reset(seed=0)
        env.action_space.seed(0)
    parallel.set_seed(0)
    serial.set_seed(0)
    gym_actions = np.stack([async_env.action_space.sample() for _ in range(steps)])

    variants = {
        "gymnasium AsyncVectorEnv(8)": lambda: gym_loop(async_env, gym_actions),
        "gymnasium SyncVectorEnv(8)": lambda: gym_loop(sync_env, gym_actions),
        "ParallelEnv(8).rollout": lambda: parallel.rollout(steps, break_when_any_done=False),
        "ParallelEnv(8) step_and_maybe_reset loop": lambda: rl_step_loop(parallel, steps),
        "SerialEnv(8).rollout": lambda: serial.rollout(steps, break_when_any_done=False),
    }
    for fn in variants.values():  # warm-up (also starts the workers)
        fn()
    best = dict.fromkeys(variants, float("inf"))
    for _ in range(rounds):
        for name, fn in variants.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    for env in (async_env, sync_env, parallel, serial):
        env.close()

    floor_async = steps / best["gymnasium AsyncVectorEnv(8)"]
    floor_sync = steps / best["gymnasium SyncVectorEnv(8)"]
    lines = [
        f"# Batched envs: {ENV_NAME}, {NUM_ENVS} sub-envs, random actions",
        "",
        f"{steps} batched steps per round, best of {rounds} rounds; "
        f"{os.cpu_count()} CPU cores, {platform.processor() or platform.machine()}, "
        f"torch {torch.__version__}, gymnasium {gym.__version__}, "
        f"ParallelEnv start method {args.mp_start_method!r}.",
        "",
        "| variant | batched steps/s | env steps/s | vs AsyncVectorEnv | vs SyncVectorEnv |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, seconds in best.items():
        rate = steps / seconds
        lines.append(
            f"| {name} | {rate:,.0f} | {rate * NUM_ENVS:,.0f} | {rate / floor_async:.2f} | "
            f"{rate / floor_sync:.2f} |"
        )
    table = "\n".join(lines) + "\n"
    print(table)
    if not args.quick:
        Path(args.out).write_text(table)


if __name__ == "__main__":
    main()
