"""Collector(MultiThreadedEnv) against a plain loop that drives EnvPool directly.

Both run the same policy on CartPole-v1 (EnvPool, ``num_envs`` sub-envs, one pool each):
an MLP 4-64-64-2 (tanh) whose logits feed a ``torch.distributions.Categorical``, the
action sampled and its log-prob kept. The floor is the plain loop a user would write: the
MLP and the distribution on the observation tensor, ``pool.step(action.numpy())``, every
output written into preallocated ``[T, N]`` tensors, and the done sub-envs reset with
``pool.reset(env_ids)`` (so that both record the same transitions: no EnvPool filler
step). ``floor-td`` is the same loop calling the collector's policy object (the
TensorDictModule) on a TensorDict of the observation at each step. ``floor-autoreset``
leaves the resets to EnvPool (its filler steps are recorded as transitions, as in
CleanRL's EnvPool scripts): it does less work than ours and is shown for reference.
``ours-actor`` runs ``rl.modules.ProbabilisticActor`` (the same MLP and sampling), which
hands the collector its tensor twin; ``ours-actor-general`` the same collector with the
tensor fast path switched off (what the collector ran for that actor before it had a
twin). ``floor-zero`` / ``ours-zero`` run a policy that costs nothing (action 0), which leaves
the cost of the loops themselves (the env wrapper and the collector against the plain
loop).

The runs are interleaved (floor, ours, floor-autoreset, ...) and the median is taken,
in wall-clock time and in CPU time of this process (``time.process_time``: it counts
EnvPool's threads, and not the time other jobs held the cores of a shared machine).

    python benchmarks/bench_envpool.py [--envs 16] [--steps 64] [--rounds 7] [--out PATH]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

import envpool
import numpy as np
import torch
from tensordict import TensorDict
from tensordict.nn import (
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)

from rl.collectors import Collector
from rl.envs import MultiThreadedEnv
from rl.modules import ProbabilisticActor


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
        torch.nn.Linear(64, 2),
    )  # fmt: skip


class SampledMLP(torch.nn.Module):
    """The floor's policy as one module: MLP logits, a sampled action and its log-prob."""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, observation: torch.Tensor):
        dist = torch.distributions.Categorical(logits=self.net(observation))
        action = dist.sample()
        return action, dist.log_prob(action)


class Zero(torch.nn.Module):
    """A policy that costs nothing: action 0 and log-prob 0 (isolates the loop's cost)."""

    def forward(self, observation: torch.Tensor):
        n = observation.shape[0]
        return torch.zeros(n, dtype=torch.int64), torch.zeros(n)


def td_policy(net: torch.nn.Module):
    """The floor's policy in one TensorDictModule (the same torch calls)."""
    return TensorDictModule(SampledMLP(net), ["observation"], ["action", "sample_log_prob"])


def td_prob_policy(net: torch.nn.Module):
    """The MLP as a TensorDictModule, then tensordict's probabilistic module (sampling
    and log-prob), as a TorchRL user writes an actor."""
    return ProbabilisticTensorDictSequential(
        TensorDictModule(net, ["observation"], ["logits"]),
        ProbabilisticTensorDictModule(
            in_keys=["logits"], out_keys=["action"],
            distribution_class=torch.distributions.Categorical, return_log_prob=True,
        ),
    )  # fmt: skip


def rl_actor(net: torch.nn.Module):
    """The same policy as ``rl.modules.ProbabilisticActor`` (the actor TorchRL users write)."""
    return ProbabilisticActor(
        TensorDictModule(net, ["observation"], ["logits"]),
        in_keys=["logits"],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )


class Floor:
    """The plain loop over an EnvPool pool, writing preallocated ``[T, N]`` tensors."""

    def __init__(
        self, n: int, steps: int, explicit_reset: bool = True, td_module=None, net=None
    ) -> None:
        self.pool = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=n, seed=0)
        self.net, self.n, self.steps = net or mlp(), n, steps
        self.explicit_reset = explicit_reset
        self.td_module = td_module
        self.bufs = (
            torch.empty(steps, n, 4), torch.empty(steps, n, dtype=torch.int64),
            torch.empty(steps, n), torch.empty(steps, n, 4), torch.empty(steps, n),
            torch.empty(steps, n, dtype=torch.bool), torch.empty(steps, n, dtype=torch.bool),
        )  # fmt: skip
        obs, _ = self.pool.reset()
        self.obs = torch.from_numpy(obs)

    @torch.no_grad()
    def __call__(self, batches: int) -> int:
        obs_buf, act_buf, logp_buf, next_buf, rew_buf, term_buf, trunc_buf = self.bufs
        pool, net, obs, module = self.pool, self.net, self.obs, self.td_module
        for _ in range(batches):
            for t in range(self.steps):
                if isinstance(net, Zero):
                    action, logp_buf[t] = net(obs)
                elif module is None:
                    dist = torch.distributions.Categorical(logits=net(obs))
                    action = dist.sample()
                    logp_buf[t] = dist.log_prob(action)
                else:  # the collector's policy, called on a TensorDict
                    td = module(TensorDict(observation=obs, batch_size=[self.n]))
                    action = td["action"]
                    logp_buf[t] = td["sample_log_prob"]
                obs_buf[t] = obs
                act_buf[t] = action
                next_obs, r, te, tr, _ = pool.step(action.numpy())
                next_t = next_buf[t]
                next_t.numpy()[:] = next_obs
                rew_buf[t].numpy()[:] = r
                term_buf[t].numpy()[:] = te
                trunc_buf[t].numpy()[:] = tr
                done = te | tr
                obs = next_t
                if self.explicit_reset and done.any():
                    fresh, info = pool.reset(np.flatnonzero(done))
                    obs = next_t.clone()
                    obs[info["env_id"]] = torch.from_numpy(fresh)
        self.obs = obs.clone()
        return batches * self.steps * self.n


def run_collector(collector: Collector, batches: int) -> int:
    frames = 0
    for _ in range(batches):
        frames += collector.next().numel()
    return frames


def measure(fn, batches: int) -> tuple[float, float]:
    """(frames per wall second, frames per CPU second)."""
    wall, cpu = time.perf_counter(), time.process_time()
    frames = fn(batches)
    return frames / (time.perf_counter() - wall), frames / (time.process_time() - cpu)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    n, steps = args.envs, args.steps
    env = MultiThreadedEnv(n, "CartPole-v1", create_env_kwargs={"seed": 0})
    collector = Collector(env, td_policy(mlp()), frames_per_batch=n * steps)
    env_prob = MultiThreadedEnv(n, "CartPole-v1", create_env_kwargs={"seed": 0})
    collector_prob = Collector(env_prob, td_prob_policy(mlp()), frames_per_batch=n * steps)
    collectors_actor = []
    for fast in (True, False):
        env_actor = MultiThreadedEnv(n, "CartPole-v1", create_env_kwargs={"seed": 0})
        c = Collector(env_actor, rl_actor(mlp()), frames_per_batch=n * steps)
        assert c._tensor_policy is not None
        if not fast:
            c._tensor_policy = None  # the general path
        collectors_actor.append(c)
    env_zero = MultiThreadedEnv(n, "CartPole-v1", create_env_kwargs={"seed": 0})
    zero_policy = TensorDictModule(Zero(), ["observation"], ["action", "sample_log_prob"])
    collector_zero = Collector(env_zero, zero_policy, frames_per_batch=n * steps)
    runs = {
        "floor": Floor(n, steps),
        "floor-td": Floor(n, steps, td_module=td_policy(mlp())),
        "ours": lambda b: run_collector(collector, b),
        "ours-prob": lambda b: run_collector(collector_prob, b),
        "ours-actor": lambda b: run_collector(collectors_actor[0], b),
        "ours-actor-general": lambda b: run_collector(collectors_actor[1], b),
        "floor-autoreset": Floor(n, steps, explicit_reset=False),
        "floor-zero": Floor(n, steps, net=Zero()),
        "ours-zero": lambda b: run_collector(collector_zero, b),
    }
    for fn in runs.values():  # warm-up
        fn(1)
    wall = {k: [] for k in runs}
    cpu = {k: [] for k in runs}
    for _ in range(args.rounds):
        for name, fn in runs.items():
            w, c = measure(fn, args.batches)
            wall[name].append(w)
            cpu[name].append(c)
    med_w = {k: statistics.median(v) for k, v in wall.items()}
    med_c = {k: statistics.median(v) for k, v in cpu.items()}
    collector.shutdown()
    collector_prob.shutdown()
    collector_zero.shutdown()
    for c in collectors_actor:
        c.shutdown()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        f"# EnvPool collector benchmark: CartPole-v1, {n} envs, {n * steps}-frame batches",
        "",
        f"`python benchmarks/bench_envpool.py --envs {n} --steps {steps} "
        f"--rounds {args.rounds} --batches {args.batches}`; {platform.machine()}, "
        f"{os.cpu_count()} CPUs, load average {load:.1f} at the end, torch {torch.__version__}, "
        f"envpool {envpool.__version__}, 1 torch thread. Median of {args.rounds} interleaved "
        f"rounds of {args.batches} batches. Ratio = ours / floor.",
        "",
        "| loop | wall frames/s | ratio (wall) | CPU frames/s | ratio (CPU) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    names = {
        "floor": "floor: plain loop on the pool, explicit resets",
        "ours": "Collector(MultiThreadedEnv), the policy in one TensorDictModule",
        "ours-prob": "Collector(MultiThreadedEnv), TensorDictModule + "
        "ProbabilisticTensorDictModule policy",
        "ours-actor": "Collector(MultiThreadedEnv), rl.modules.ProbabilisticActor",
        "ours-actor-general": "Collector(MultiThreadedEnv), rl.modules.ProbabilisticActor, "
        "tensor fast path off",
        "floor-td": "floor-td: plain loop, the collector's TensorDictModule policy",
        "floor-autoreset": "floor-autoreset: plain loop, EnvPool's filler steps recorded",
        "floor-zero": "floor-zero: plain loop, zero-cost policy",
        "ours-zero": "Collector(MultiThreadedEnv), the zero-cost policy in a TensorDictModule",
    }
    rows = ("floor", "floor-td", "ours", "ours-prob", "ours-actor", "ours-actor-general")
    for key in (*rows, "floor-autoreset"):
        lines.append(
            f"| {names[key]} | {med_w[key]:,.0f} | {med_w[key] / med_w['floor']:.2f}x "
            f"| {med_c[key]:,.0f} | {med_c[key] / med_c['floor']:.2f}x |"
        )
    lines += [
        "",
        "The loop's own cost, with a policy that costs nothing (ratio = ours-zero / floor-zero):",
        "",
        "| loop | wall frames/s | ratio (wall) | CPU frames/s | ratio (CPU) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for key in ("floor-zero", "ours-zero"):
        lines.append(
            f"| {names[key]} | {med_w[key]:,.0f} | {med_w[key] / med_w['floor-zero']:.2f}x "
            f"| {med_c[key]:,.0f} | {med_c[key] / med_c['floor-zero']:.2f}x |"
        )
    fast, general = med_c["ours-actor"], med_c["ours-actor-general"]
    lines += [
        "",
        f"ProbabilisticActor, tensor fast path / general path (CPU): {fast / general:.2f}x",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
