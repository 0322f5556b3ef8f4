"""Reruns the multi-agent learning measurements of examples/multiagent/README.md.

MAPPO, IPPO (continuous actions) and QMIX (discrete actions) on a preset of the scripts:
VMAS ``navigation`` (3 agents, the defaults) or ``balance`` (4 agents), each on several
seeds with the preset's budget. The figures:
the mean episode return of the first training batch, the last training return (mean of
the episodes of the last batch) and the evaluation return (20 deterministic episodes
after training). A return is the mean over agents of each agent's summed reward, as
BenchMARL reports it.

Writes benchmarks/results/examples_multiagent.md (a row per run, appended as runs finish)
and, per algorithm and preset, the learning curves of its seeds to
examples/multiagent/images/NAME-PRESET.png. Seeds may run as parallel processes sharing
one ``--log-dir``: each plot draws every seed found there.

    python benchmarks/bench_examples_multiagent.py [--seeds 0 1 2] [--runs mappo ippo qmix]
    python benchmarks/bench_examples_multiagent.py --preset balance --runs qmix --seeds 0 \
        --log-dir runs/marl
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import importlib
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "multiagent"))

from rl.core.plot import plot_runs  # noqa: E402

#: run name -> (script module, config overrides)
RUNS = {
    "mappo": ("mappo", {}),
    "ippo": ("mappo", {"centralised_critic": False}),
    "qmix": ("qmix", {}),
    "maddpg": ("maddpg", {}),
    "iddpg": ("maddpg", {"centralised_critic": False}),
    "masac": ("masac", {}),
}
RESULTS = ROOT / "benchmarks" / "results" / "examples_multiagent.md"


def _returns(run_dir: Path) -> list[float]:
    path = run_dir / "scalars" / "train" / "episode_return.csv"
    with path.open() as f:
        return [float(row[1]) for row in csv.reader(f) if row]


def baselines(preset: str, episodes: int = 1000) -> str:
    """Returns of policies that do not learn, as the examples measure them (the mean over
    agents of the first episode's summed reward in each of ``episodes`` vectorised VMAS
    environments): uniform random actions, no action, and the scenario's hand-written
    ``HeuristicPolicy`` where VMAS has one; plus what carrying the package to the goal
    earns on ``balance`` (the shaping reward sums to 100 x the distance covered)."""
    import torch
    import vmas

    from rl.core import seed_everything

    cfg = importlib.import_module("qmix").PRESETS[preset][1]
    lines = [f"| policy ({cfg.scenario}, {cfg.n_agents} agents) | actions | mean return |"]
    lines.append("| --- | --- | ---: |")
    heuristic = getattr(
        importlib.import_module(f"vmas.scenarios.{cfg.scenario}"), "HeuristicPolicy", None
    )
    for continuous in (True, False):
        for name in ("random", "zero", "heuristic"):
            if name == "heuristic" and heuristic is None:
                continue
            seed_everything(0)
            env = vmas.make_env(
                cfg.scenario,
                num_envs=episodes,
                continuous_actions=continuous,
                max_steps=cfg.max_steps,
                seed=0,
                n_agents=cfg.n_agents,
            )
            obs = env.reset()
            policy = heuristic(continuous_action=continuous) if name == "heuristic" else None
            total, alive = torch.zeros(episodes), torch.ones(episodes, dtype=torch.bool)
            for _ in range(cfg.max_steps):
                actions = []
                for i, agent in enumerate(env.agents):
                    if name == "random":
                        actions.append(env.get_random_action(agent))
                    elif name == "zero":
                        shape = (episodes, 2) if continuous else (episodes,)
                        zero = torch.zeros(shape, dtype=torch.float if continuous else torch.long)
                        actions.append(zero)
                    else:
                        actions.append(policy.compute_action(obs[i], agent.u_range))
                obs, rewards, dones, _ = env.step(actions)
                total += torch.stack(rewards).mean(0) * alive
                alive &= ~dones
            kind = "continuous" if continuous else "discrete"
            lines.append(f"| {name} | {kind} | {total.mean():.2f} |")
    if cfg.scenario == "balance":
        obs = env.reset()  # the package's offset to the goal: entries 8-9 of an observation
        reach = obs[0][:, 8:10].norm(dim=-1).mean() * 100
        lines.append(
            f"| package carried onto the goal (100 x initial distance) | - | {reach:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--runs", nargs="+", default=list(RUNS), choices=list(RUNS))
    parser.add_argument("--preset", default="navigation", choices=["navigation", "balance"])
    # maddpg, iddpg and masac have the navigation preset only
    parser.add_argument(
        "--log-dir", help="keep the runs' logs here (default: a temporary folder per script)"
    )
    parser.add_argument(
        "--baselines", action="store_true", help="measure policies that do not learn, and stop"
    )
    args = parser.parse_args()
    if args.baselines:
        table = baselines(args.preset)
        print(table, end="")
        with RESULTS.open("a") as f:
            f.write(f"\nBaselines ({args.preset}, 1,000 episodes):\n\n{table}")
        return
    if not RESULTS.exists():
        RESULTS.write_text(
            "# Multi-agent learning (examples/multiagent/, VMAS)\n\n"
            "| run | scenario | seed | frames | wall time | first train return "
            "| last train return | eval return (20 episodes) |\n"
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n"
        )
    images = ROOT / "examples" / "multiagent" / "images"
    images.mkdir(exist_ok=True)
    for name in args.runs:
        module_name, overrides = RUNS[name]
        module = importlib.import_module(module_name)
        log_dir = Path(args.log_dir or tempfile.mkdtemp()) / f"{name}-{args.preset}"
        for seed in args.seeds:
            cfg = dataclasses.replace(
                module.PRESETS[args.preset][1],
                **overrides,
                seed=seed,
                log_dir=str(log_dir),
                exp_name=f"{name}_seed{seed}",
                progress=False,
            )
            out = module.main(cfg)
            train = _returns(log_dir / cfg.exp_name)
            row = (
                f"| {name} | {cfg.scenario} | {seed} | {out['frames']:,} | "
                f"{out['seconds']:.0f} s | {train[0]:.2f} | {train[-1]:.2f} | "
                f"{out['eval_mean']:.2f} |\n"
            )
            print(row, end="", flush=True)
            with RESULTS.open("a") as f:
                f.write(row)
            # every seed found in the log folder (seeds may run in parallel processes)
            plot_runs(
                [log_dir], images / f"{name}-{args.preset}.png", keys=["train/episode_return"]
            )


if __name__ == "__main__":
    main()
