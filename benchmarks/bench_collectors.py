"""Collector throughput against plain gymnasium + torch floors (same policy, same work).

Every row collects CartPole-v1 with 8 envs in 1,024-frame batches ([128 steps, 8 envs])
with the same policy: a torch MLP 4 -> 64 -> 64 -> 2 whose logits give a categorical
action and its log-prob. A floor is the plain loop a person would write without a
library: gymnasium's vector env stepped with the same MLP, writing preallocated
[128, 8] tensors. Ratio = our frames/s / the floor's frames/s (higher is better); floors
and ours are measured in the same run, interleaved, best of ``--repeats``.

    uv run python benchmarks/bench_collectors.py [--batches 20] [--repeats 5]

``--async-batched`` runs only the AsyncBatchedCollector rows instead (4 CartPole envs,
a greedy linear policy, 256-frame batches, env processes and env threads) and prints
their frames/s, to compare two versions of the collector run one after the other:

    uv run python benchmarks/bench_collectors.py --async-batched [--repeats 5]
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing as mp
import os
import platform
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from tensordict.nn import (
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)

from rl.collectors import AsyncBatchedCollector, Collector, MultiSyncCollector
from rl.envs import GymEnv, ParallelEnv, SerialEnv

T, N = 128, 8
FRAMES = T * N


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
        torch.nn.Linear(64, 2),
    )  # fmt: skip


def td_policy(net: torch.nn.Module | None = None):
    """The MLP as a TensorDictModule followed by categorical sampling with its log-prob."""
    try:  # rl.modules' actor when it is installed (rl-objectives)
        from rl.modules import ProbabilisticActor

        return ProbabilisticActor(
            TensorDictModule(net or mlp(), ["observation"], ["logits"]),
            in_keys=["logits"],
            distribution_class=torch.distributions.Categorical,
            return_log_prob=True,
        )
    except ImportError:
        return ProbabilisticTensorDictSequential(
            TensorDictModule(net or mlp(), ["observation"], ["logits"]),
            ProbabilisticTensorDictModule(
                in_keys=["logits"], out_keys=["action"],
                distribution_class=torch.distributions.Categorical, return_log_prob=True,
            ),
        )  # fmt: skip


def cartpole():
    return GymEnv("CartPole-v1", categorical_action_encoding=True)


# ----------------------------------------------------------------------------- floors
class FloorLoop:
    """The plain loop: a gymnasium vector env stepped with the MLP, writing preallocated
    ``[T, n]`` tensors; ``send`` ships each batch (the two-process floor)."""

    def __init__(self, envs, num_envs: int = N, send=None) -> None:
        self.envs, self.net, self.n, self.send = envs, mlp(), num_envs, send
        n = num_envs
        self.bufs = (
            torch.empty(T, n, 4), torch.empty(T, n, dtype=torch.int64), torch.empty(T, n),
            torch.empty(T, n), torch.empty(T, n, dtype=torch.bool),
            torch.empty(T, n, dtype=torch.bool),
        )  # fmt: skip
        obs, _ = envs.reset(seed=0)
        self.obs = torch.as_tensor(obs)

    @torch.no_grad()
    def __call__(self, batches: int) -> int:
        obs_buf, act_buf, logp_buf, rew_buf, term_buf, trunc_buf = self.bufs
        envs, net, obs_t = self.envs, self.net, self.obs
        for _ in range(batches):
            for t in range(T):
                dist = torch.distributions.Categorical(logits=net(obs_t))
                action = dist.sample()
                logp_buf[t] = dist.log_prob(action)
                obs_buf[t] = obs_t
                act_buf[t] = action
                obs, r, te, tr, _ = envs.step(action.numpy())
                rew_buf[t] = torch.from_numpy(np.asarray(r, dtype=np.float32))
                term_buf[t] = torch.from_numpy(te)
                trunc_buf[t] = torch.from_numpy(tr)
                obs_t = torch.as_tensor(obs)
            if self.send is not None:  # pickled by value (numpy), as a plain pipe carries it
                self.send(tuple(buf.numpy() for buf in self.bufs))
        self.obs = obs_t
        return batches * T * self.n


def _make_gym():
    return gym.make("CartPole-v1")


def sync_vector(n: int = N) -> SyncVectorEnv:
    return SyncVectorEnv([_make_gym] * n, autoreset_mode=AutoresetMode.SAME_STEP)


def _floor_worker(conn) -> None:
    """Collects one [128, 4] batch each time the parent asks (a byte), until it closes."""
    torch.set_num_threads(1)
    loop = FloorLoop(sync_vector(N // 2), N // 2, send=conn.send)
    while conn.recv_bytes():
        loop(1)


class TwoProcessFloor:
    """2 spawned processes, each a SyncVectorEnv(4) + a policy copy, sending [128, 4]
    halves through a pipe; the parent asks both for a batch and joins the halves into
    [128, 8] (the request / answer rhythm of the MultiSyncCollector)."""

    def __init__(self) -> None:
        ctx = mp.get_context("spawn")
        self.pipes, self.procs = [], []
        for _ in range(2):
            parent, child = ctx.Pipe(duplex=True)
            proc = ctx.Process(target=_floor_worker, args=(child,))
            proc.start()
            child.close()
            self.pipes.append(parent)
            self.procs.append(proc)
        self.receive(1)  # start-up (spawn imports torch) is not timed

    def receive(self, batches: int) -> int:
        for _ in range(batches):
            for pipe in self.pipes:
                pipe.send_bytes(b"g")
            halves = [p.recv() for p in self.pipes]
            _ = [torch.cat([torch.from_numpy(p) for p in parts], 1) for parts in zip(*halves)]
        return batches * FRAMES

    def close(self) -> None:
        for pipe in self.pipes:
            pipe.send_bytes(b"")
        for proc in self.procs:
            proc.join()


# ------------------------------------------------------------------------------- ours
def run_collector(collector, batches: int) -> int:
    frames = 0
    for _ in range(batches):
        frames += collector.next().numel()
    return frames


def timed(fn, *args) -> float:
    start = time.perf_counter()
    frames = fn(*args)
    return frames / (time.perf_counter() - start)


class SpinEnv(GymEnv):
    """CartPole whose step also burns about 1 ms of CPU (an expensive simulator)."""

    def _step(self, tensordict):
        end = time.perf_counter() + 1e-3
        while time.perf_counter() < end:
            pass
        return super()._step(tensordict)


def spin_env():
    return SerialEnv(2, functools.partial(SpinEnv, "CartPole-v1", categorical_action_encoding=True))


def per_step_costs(repeats: int) -> dict:
    """us per batched step (8 envs) of the env alone, the policy alone, and the whole
    Collector step over GymEnv(num_envs=8); bookkeeping is what remains."""
    env = GymEnv("CartPole-v1", num_envs=N, categorical_action_encoding=True)
    policy = td_policy()
    root = env.reset()
    collector = Collector(
        GymEnv("CartPole-v1", num_envs=N, categorical_action_encoding=True), td_policy(),
        frames_per_batch=FRAMES,
    )  # fmt: skip
    best = {"env": 1e9, "policy": 1e9, "total": 1e9}
    for _ in range(repeats):
        start = time.perf_counter()
        env.rollout(T * 4, auto_reset=False, tensordict=root.clone(), break_when_any_done=False)
        best["env"] = min(best["env"], (time.perf_counter() - start) / (4 * T))
        td = root.clone()
        with torch.no_grad():
            start = time.perf_counter()
            for _ in range(T * 4):
                policy(td)
        best["policy"] = min(best["policy"], (time.perf_counter() - start) / (4 * T))
        start = time.perf_counter()
        run_collector(collector, 4)
        best["total"] = min(best["total"], (time.perf_counter() - start) / (4 * T))
    collector.shutdown()
    return {k: v * 1e6 for k, v in best.items()}


def startup_shutdown(parallel_kwargs: dict) -> tuple[float, float]:
    """Seconds from construction to the end of the first 1,024-frame batch, and of
    ``shutdown()``, of a Collector over ParallelEnv(8)."""
    start = time.perf_counter()
    collector = Collector(
        ParallelEnv(N, cartpole, **parallel_kwargs), td_policy(), frames_per_batch=FRAMES
    )
    collector.next()
    up = time.perf_counter() - start
    start = time.perf_counter()
    collector.shutdown()
    return up, time.perf_counter() - start


def async_startup_shutdown() -> tuple[float, float]:
    start = time.perf_counter()
    envs = AsyncVectorEnv([_make_gym] * N, autoreset_mode=AutoresetMode.SAME_STEP)
    FloorLoop(envs)(1)
    up = time.perf_counter() - start
    start = time.perf_counter()
    envs.close()
    return up, time.perf_counter() - start


class _Greedy(torch.nn.Module):
    """A linear layer's argmax: the trivial policy of the AsyncBatchedCollector rows."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.linear(observation).argmax(-1)


def async_batched_fps(env_backend: str, batches: int, num_envs: int = 4) -> float:
    """frames/s of ``AsyncBatchedCollector`` over ``num_envs`` CartPole envs (start-up,
    the first batch and shutdown are not timed)."""
    collector = AsyncBatchedCollector(
        [cartpole] * num_envs,
        policy=TensorDictModule(_Greedy(), ["observation"], ["action"]),
        frames_per_batch=256,
        env_backend=env_backend,
    )
    try:
        run_collector(collector, 1)
        return timed(run_collector, collector, batches)
    finally:
        collector.shutdown()


def async_batched_main(batches: int, repeats: int) -> None:
    """Best frames/s of the AsyncBatchedCollector rows over interleaved repeats."""
    best = {"multiprocessing": 0.0, "threading": 0.0}
    for _ in range(repeats):
        for backend in best:
            best[backend] = max(best[backend], async_batched_fps(backend, batches))
    load = os.getloadavg()[0]
    for backend, fps in best.items():
        print(f"AsyncBatchedCollector(4 x CartPole, env_backend={backend!r}): {fps:,.0f} frames/s")
    print(f"load average {load:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-spawn", action="store_true", help="no spawn start-up row")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "collectors.md"))
    parser.add_argument(
        "--async-batched", action="store_true", help="only the AsyncBatchedCollector rows"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.async_batched:
        async_batched_main(args.batches, args.repeats)
        return
    b, reps = args.batches, args.repeats
    lines = []

    # single process, 8 envs in this process
    floor_sync = FloorLoop(sync_vector())
    gym_vec = Collector(
        GymEnv("CartPole-v1", num_envs=N, categorical_action_encoding=True), td_policy(),
        frames_per_batch=FRAMES,
    )  # fmt: skip
    serial = Collector(SerialEnv(N, cartpole), td_policy(), frames_per_batch=FRAMES)
    # 8 worker processes
    floor_async = FloorLoop(AsyncVectorEnv([_make_gym] * N, autoreset_mode=AutoresetMode.SAME_STEP))
    parallel = Collector(
        ParallelEnv(N, cartpole, mp_start_method="fork"), td_policy(), frames_per_batch=FRAMES
    )
    # 2 worker processes of 4 envs
    floor_two = TwoProcessFloor()
    multi = MultiSyncCollector(
        [functools.partial(SerialEnv, N // 2, cartpole)] * 2, td_policy(), frames_per_batch=FRAMES
    )
    spin_one = MultiSyncCollector([spin_env], None, frames_per_batch=20)
    spin_two = MultiSyncCollector([spin_env] * 2, None, frames_per_batch=40)
    rows = {
        "floor_sync": lambda: timed(floor_sync, b),
        "gym_vec": lambda: timed(run_collector, gym_vec, b),
        "serial": lambda: timed(run_collector, serial, b),
        "floor_async": lambda: timed(floor_async, b),
        "parallel": lambda: timed(run_collector, parallel, b),
        "floor_two": lambda: timed(floor_two.receive, b),
        "multi": lambda: timed(run_collector, multi, b),
        "spin_one": lambda: timed(run_collector, spin_one, 5),
        "spin_two": lambda: timed(run_collector, spin_two, 5),
    }
    for fn in rows.values():  # warm-up
        fn()
    best = {name: 0.0 for name in rows}
    for _ in range(reps - 1):
        for name, fn in rows.items():
            best[name] = max(best[name], fn())
    for c in (gym_vec, serial, parallel, multi, spin_one, spin_two):
        c.shutdown()
    floor_async.envs.close()
    floor_two.close()
    costs = per_step_costs(reps)
    startup = {"AsyncVectorEnv(8) (fork, gymnasium's default here)": async_startup_shutdown()}
    startup["Collector(ParallelEnv(8), fork)"] = startup_shutdown({"mp_start_method": "fork"})
    startup["Collector(ParallelEnv(8), forkserver)"] = startup_shutdown(
        {"mp_start_method": "forkserver"}
    )
    if not args.skip_spawn:
        startup["Collector(ParallelEnv(8)), default (spawn)"] = startup_shutdown({})

    def row(name, ours, floor, target):
        ratio = best[ours] / best[floor]
        return f"| {name} | {best[floor]:,.0f} | {best[ours]:,.0f} | {ratio:.2f}x | {target} |"

    load = os.getloadavg()[0]
    lines += [
        "# Collector benchmark: CartPole-v1, 8 envs, 1,024-frame batches, MLP policy",
        "",
        f"`uv run python benchmarks/bench_collectors.py --batches {b} --repeats {reps}`; "
        f"{platform.machine()}, {os.cpu_count()} CPUs (shared: load average {load:.1f} at the "
        f"end), torch {torch.__version__}, gymnasium {gym.__version__}, 1 torch thread per "
        "process, best of the interleaved repeats. Policy: MLP 4-64-64-2 (tanh), categorical "
        "action + log-prob (`rl.modules.ProbabilisticActor` over a `TensorDictModule`); the "
        "floors run the same MLP and `torch.distributions.Categorical` in a plain loop "
        "writing preallocated [128, 8] tensors. Ratio = ours / floor frames/s.",
        "",
        "| ours | floor frames/s | ours frames/s | ratio | target |",
        "| --- | ---: | ---: | ---: | --- |",
        row("Collector(GymEnv('CartPole-v1', num_envs=8)) vs SyncVectorEnv(8) + policy",
            "gym_vec", "floor_sync", ">= 1.0x"),
        row("Collector(SerialEnv(8)) vs SyncVectorEnv(8) + policy", "serial", "floor_sync",
            ">= 1.0x"),
        row("Collector(ParallelEnv(8), fork) vs AsyncVectorEnv(8) + policy", "parallel",
            "floor_async", ">= 1.0x"),
        row("MultiSyncCollector(2 x SerialEnv(4)) vs 2 spawned SyncVectorEnv(4) + policy, "
            "piped halves", "multi", "floor_two", ">= 0.8x"),
        row("MultiSyncCollector, 2 workers vs 1, env of ~1 ms/step (2 x 2 envs)", "spin_two",
            "spin_one", ">= 1.6x"),
        "",
        "Start-up (construction to the end of the first 1,024-frame batch) and shutdown:",
        "",
        "| what | start-up s | shutdown s |",
        "| --- | ---: | ---: |",
        *[f"| {name} | {up:.2f} | {down:.3f} |" for name, (up, down) in startup.items()],
        "",
        "Per batched step (8 envs) of Collector(GymEnv(num_envs=8)), us (best of repeats):",
        "",
        "| env (policy-free rollout) | policy (alone, on [8]) | bookkeeping (rest) | total |",
        "| ---: | ---: | ---: | ---: |",
        f"| {costs['env']:.1f} | {costs['policy']:.1f} | "
        f"{costs['total'] - costs['env'] - costs['policy']:.1f} | {costs['total']:.1f} |",
        "",
        "Notes. The Collector adds per batch (not per step) only the continuation root, "
        "the vectorized trajectory ids and one action-spec check; per step it runs the "
        "env's own rollout fast path (gym vector env: sub-envs stepped directly into "
        "numpy views of the output buffers; SerialEnv / ParallelEnv: the policy reads "
        "views of the rollout buffers and its action goes to the shared input buffer). "
        "The bookkeeping column is what remains of that path per step (building the "
        "policy's root TensorDict, recording its outputs); the policy column is the "
        "TensorDict policy, whose torch work equals the floor's. On a shared, loaded "
        "machine the absolute figures are many times those of an idle one and the "
        "breakdown columns are best-of figures taken at different moments; the ratios "
        "come from interleaved runs. Floors' start-up: the two-process floor's spawn "
        "is not timed (its first batch is taken before the timing).",
    ]  # fmt: skip
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
