"""Acting cost of rl.modules policies against the same network and distribution by hand.

A collector calls its policy once per step, so the per-call overhead of the TensorDict
modules is paid at every environment step. Two policies, each called under
``set_exploration_type(RANDOM)`` and ``torch.no_grad()`` with ``return_log_prob=True``
on a batch of 1 and of 8 observations held in a TensorDict that is reused between calls
(as a collector reuses its buffers):

- ``categorical``: ``ProbabilisticActor`` over ``MLP(4 -> 64 -> 64 -> 2)`` (Tanh) with
  ``torch.distributions.Categorical``; floor: the same ``nn.Module``, then
  ``Categorical(logits=...)``, ``sample()`` and ``log_prob()`` written by hand;
- ``tanh_normal``: ``ProbabilisticActor`` over ``MLP(17 -> 64 -> 64 -> 12)`` ->
  ``NormalParamExtractor`` -> ``rl.modules.TanhNormal`` over 6 actions in ``[-1, 1]``;
  floor: the same ``nn.Module``, then ``Normal(loc, scale).rsample()``, ``tanh`` and the
  log-probability with its tanh correction summed over the action dims, written by hand
  (as CleanRL's SAC does).

The floors use ``torch.distributions`` with its defaults (argument validation on), as
hand-written code does. One thread (``torch.set_num_threads(1)``). Every figure is the
best of several rounds in which all variants take turns, so that load spikes on a
shared machine hit floors and ours alike; the time is the thread's CPU time, which a
loaded machine inflates less than wall time. Target: ratio <= 1.3.

Run: ``uv run python benchmarks/bench_modules.py`` (``--quick`` for a smoke run).
Prints a markdown table and writes it to ``benchmarks/results/modules.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn
from torch.distributions import Categorical, Normal

from rl.core import ExplorationType, set_exploration_type
from rl.modules import MLP, ProbabilisticActor, TanhNormal


def categorical_case() -> tuple[int, nn.Module, Callable, Callable, str]:
    net = MLP(in_features=4, out_features=2, num_cells=[64, 64], activation_class=nn.Tanh)
    actor = ProbabilisticActor(
        TensorDictModule(net, ["observation"], ["logits"]),
        in_keys=["logits"],
        distribution_class=Categorical,
        return_log_prob=True,
    )

    def floor(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dist = Categorical(logits=net(obs))
        action = dist.sample()
        return action, dist.log_prob(action)

    return 4, actor, floor, floor, "categorical, MLP 4-64-64-2"


def tanh_normal_case() -> tuple[int, nn.Module, Callable, Callable, str]:
    net = nn.Sequential(
        MLP(in_features=17, out_features=12, num_cells=[64, 64], activation_class=nn.Tanh),
        NormalParamExtractor(),
    )
    actor = ProbabilisticActor(
        TensorDictModule(net, ["observation"], ["loc", "scale"]),
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        return_log_prob=True,
    )

    def floor(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loc, scale = net(obs)
        base = Normal(loc, scale)
        pre = base.rsample()
        action = torch.tanh(pre)
        log_prob = (base.log_prob(pre) - torch.log1p(-action.pow(2) + 1e-6)).sum(-1)
        return action, log_prob

    def same_dist(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loc, scale = net(obs)
        return TanhNormal(loc, scale).rsample_and_log_prob(torch.Size())

    return 17, actor, floor, same_dist, "TanhNormal, MLP 17-64-64-12, 6 actions"


def best_per_call(fns: dict[str, Callable[[], object]], calls: int, rounds: int) -> dict:
    best = {name: float("inf") for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.thread_time()
            for _ in range(calls):
                fn()
            best[name] = min(best[name], (time.thread_time() - start) / calls)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few calls (smoke run)")
    args = parser.parse_args()
    calls, rounds = (200, 3) if args.quick else (400, 25)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rows = []
    for make in (categorical_case, tanh_normal_case):
        n_obs, actor, floor, same_dist, label = make()
        for batch in (1, 8):
            obs = torch.randn(batch, n_obs)
            td = TensorDict(observation=obs, batch_size=[batch])
            with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
                fns = {
                    "floor": lambda obs=obs, floor=floor: floor(obs),
                    "same_dist": lambda obs=obs, same_dist=same_dist: same_dist(obs),
                    "ours": lambda td=td, actor=actor: actor(td),
                    "ours_new_td": lambda obs=obs, actor=actor, batch=batch: actor(
                        TensorDict(observation=obs, batch_size=[batch])
                    ),
                }
                for fn in fns.values():  # warm-up
                    fn()
                best = best_per_call(fns, calls, rounds)
            rows.append((label, batch, best))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        "# Acting cost of a ProbabilisticActor (rl.modules) vs the same network by hand",
        "",
        f"Machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"1 thread, per-call thread CPU time (`time.thread_time`), best of {rounds} rounds of "
        f"{calls} calls, `torch.no_grad()`, "
        f"`ExplorationType.RANDOM`, `return_log_prob=True`; {os.cpu_count()} cores, load "
        f"average {load:.1f} at the end of the run (absolute times scale with the load; the "
        "ratios are the figures to read).",
        "",
        "| policy | batch | floor (us) | ours (us) | ours / floor | by hand, rl.modules dist (us) "
        "| ours / that | ours, new TensorDict per call (us) | new-TD / floor |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, batch, best in rows:
        f, o = best["floor"] * 1e6, best["ours"] * 1e6
        d, n = best["same_dist"] * 1e6, best["ours_new_td"] * 1e6
        lines.append(
            f"| {label} | {batch} | {f:.1f} | {o:.1f} | **{o / f:.2f}x** | {d:.1f} | {o / d:.2f}x "
            f"| {n:.1f} | {n / f:.2f}x |"
        )
    lines += [
        "",
        "Floor: the same `nn.Module`, then `torch.distributions` sample and log-prob written",
        "by hand (for TanhNormal: `Normal.rsample`, `tanh`, log-prob with the tanh correction).",
        "`by hand, rl.modules dist`: the same code with the distribution the actor uses",
        "(`rl.modules.TanhNormal`), which separates the module overhead from the distribution's.",
        "`ours`: `actor(td)` on a TensorDict reused between calls (as a collector does);",
        "`new TensorDict per call` also builds the input TensorDict each time. Target: <= 1.3x.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.quick:
        out = Path(__file__).parent / "results" / "modules.md"
        out.write_text(text)


if __name__ == "__main__":
    main()
