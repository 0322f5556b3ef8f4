"""rl.envs rollout speed against its floors, measured in one run.

Floors: the plain gymnasium loop (``env.step(env.action_space.sample())``, reset on
``terminated | truncated``) for ``GymEnv``; gymnasium's ``SyncVectorEnv`` /
``AsyncVectorEnv`` stepping 8 envs the same number of steps for ``GymEnv(num_envs=8)``;
a plain torch loop over the same dynamics functions for the native envs.

Each figure is the best of ``--repeats`` runs (the machine is shared). Prints a markdown
table and writes it to ``benchmarks/results/envs.md``.

    python benchmarks/bench_envs.py [--steps 10000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import gymnasium as gym
import torch

from rl.envs import CartPoleEnv, GymEnv, PendulumEnv, RandomPolicy
from rl.envs._native._cartpole import cartpole_dynamics
from rl.envs._native._pendulum import pendulum_dynamics


def best_of(floor_fn, ours_fn, repeats: int) -> tuple[float, float]:
    """Best wall time of each, the two measured alternately (so load drifts hit both)."""
    floor_fn()  # warm-up
    ours_fn()
    floor_times, ours_times = [], []
    for _ in range(repeats):
        for fn, times in ((floor_fn, floor_times), (ours_fn, ours_times)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return min(floor_times), min(ours_times)


def plain_gym_loop(env: gym.Env, steps: int) -> None:
    env.reset(seed=0)
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()


def plain_vector_loop(envs, steps: int) -> None:
    envs.reset(seed=0)
    for _ in range(steps):
        envs.step(envs.action_space.sample())


def plain_pendulum_loop(batch: int, steps: int) -> None:
    th = torch.rand(batch, dtype=torch.float64) * 6 - 3
    thdot = torch.zeros(batch, dtype=torch.float64)
    u = torch.rand(steps, batch, dtype=torch.float64) * 4 - 2
    for t in range(steps):
        th, thdot, _ = pendulum_dynamics(th, thdot, u[t])
        torch.stack([th.cos(), th.sin(), thdot], -1).float()


def plain_cartpole_loop(batch: int, steps: int) -> None:
    """Dynamics, termination, reward and reset of the terminated entries, in plain torch."""
    state = torch.zeros(batch, 4, dtype=torch.float64)
    push = torch.rand(steps, batch) > 0.5
    for t in range(steps):
        state = cartpole_dynamics(state, push[t])
        terminated = (state[:, 0].abs() > 2.4) | (state[:, 2].abs() > 0.2095)
        reward = torch.ones(batch, 1)  # noqa: F841 (the env writes it too)
        fresh = torch.rand(batch, 4, dtype=torch.float64) * 0.1 - 0.05
        state = torch.where(terminated.unsqueeze(-1), fresh, state)
        state.float()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "envs.md"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    steps, repeats = args.steps, args.repeats
    rows = []

    def row(name, floor_name, floor_s, ours_s, env_steps, target):
        rows.append(
            f"| {name} | {floor_name} | {env_steps / floor_s:,.0f} | {env_steps / ours_s:,.0f} "
            f"| {ours_s / floor_s:.2f}x | {target} |"
        )

    # GymEnv single vs the plain gymnasium loop
    plain_env = gym.make("CartPole-v1")
    env = GymEnv("CartPole-v1")
    floor, ours = best_of(
        lambda: plain_gym_loop(plain_env, steps),
        lambda: env.rollout(steps, break_when_any_done=False),
        repeats,
    )
    row("GymEnv CartPole-v1 rollout", "plain gymnasium loop", floor, ours, steps, "<= 2x")
    policy = RandomPolicy(env.action_spec)
    floor, ours = best_of(
        lambda: plain_gym_loop(plain_env, steps),
        lambda: env.rollout(steps, policy, break_when_any_done=False),
        repeats,
    )
    row("GymEnv CartPole-v1 rollout, RandomPolicy", "plain gymnasium loop", floor, ours, steps, "-")
    pend_gym = gym.make("Pendulum-v1")
    env = GymEnv("Pendulum-v1")
    floor, ours = best_of(
        lambda: plain_gym_loop(pend_gym, steps),
        lambda: env.rollout(steps, break_when_any_done=False),
        repeats,
    )
    row("GymEnv Pendulum-v1 rollout", "plain gymnasium loop", floor, ours, steps, "<= 2x")

    # GymEnv num_envs=8 vs gymnasium's vector envs, the same number of vector steps
    vsteps = max(steps // 8, 1)
    for mode, cls in (("sync", gym.vector.SyncVectorEnv), ("async", gym.vector.AsyncVectorEnv)):
        plain = cls([lambda: gym.make("CartPole-v1")] * 8)
        env = GymEnv("CartPole-v1", num_envs=8, vectorization_mode=mode)
        floor, ours = best_of(
            lambda plain=plain: plain_vector_loop(plain, vsteps),
            lambda env=env: env.rollout(vsteps, break_when_any_done=False),
            repeats,
        )
        plain.close()
        env.close()
        row(
            f"GymEnv CartPole-v1 num_envs=8 ({mode})",
            f"gymnasium {cls.__name__} (8)",
            floor,
            ours,
            vsteps * 8,
            "<= 1x",
        )

    # native envs vs a plain torch loop over the same dynamics
    for batch in (1, 1024):
        nsteps = steps if batch == 1 else max(steps // 10, 1)
        env = PendulumEnv(batch_size=[batch])
        floor, ours = best_of(
            lambda b=batch, n=nsteps: plain_pendulum_loop(b, n),
            lambda env=env, n=nsteps: env.rollout(n),
            repeats,
        )
        row(f"PendulumEnv batch {batch}", "plain torch loop", floor, ours, nsteps * batch, "-")
    for batch in (1, 1024):
        nsteps = steps if batch == 1 else max(steps // 10, 1)
        env = CartPoleEnv(batch_size=[batch])
        floor, ours = best_of(
            lambda b=batch, n=nsteps: plain_cartpole_loop(b, n),
            lambda env=env, n=nsteps: env.rollout(n, break_when_any_done=False),
            repeats,
        )
        row(f"CartPoleEnv batch {batch}", "plain torch loop", floor, ours, nsteps * batch, "-")

    header = [
        "# rl.envs rollout benchmark",
        "",
        f"`python benchmarks/bench_envs.py --steps {steps} --repeats {repeats}`; "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"torch {torch.__version__}, gymnasium {gym.__version__}, 1 torch thread, best of "
        f"{repeats}. Ratio = our wall time / floor wall time for the same env steps "
        "(lower is better).",
        "",
        "| what | floor | floor steps/s | ours steps/s | ratio | target |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    table = "\n".join(header + rows) + "\n"
    print(table)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(table)


if __name__ == "__main__":
    main()
