"""PettingZooEnv's per-step cost against PettingZoo stepped directly, in the same run.

Three tasks of PettingZoo's classic family, each replaying one recorded sequence of random
legal actions (so that both sides play the very same games, resets included):

- ``rps_v2`` parallel (2 agents in one group ``"player"``), 15-step episodes;
- ``rps_v2`` AEC (one group per agent, ``use_mask=True``);
- ``tictactoe_v3`` AEC (Dict observations with an action mask, games of 5 to 9 moves).

Variants, per task:

- floor: the loop a user writes against PettingZoo: ``env.step(actions)`` (parallel) or
  ``env.last()`` + ``env.step(action)`` (AEC), and ``env.reset()`` when the episode is over;
- ``step_and_maybe_reset``: a collector's loop over the wrapper (action tensors written into
  the root tensordict, ``step``, ``step_mdp``, reset when done), against the floor;
- ``rollout``: ``env.rollout(steps, policy, break_when_any_done=False)`` with a policy
  that writes the recorded actions (stores every step), against the floor.

Before timing, the rewards of the wrapper's rollout are checked against the ones recorded
on PettingZoo: the two sides play the same games. Variants run in turns (interleaved
rounds), each timed in CPU time of the process and in wall time; the median over rounds is
reported. Torch runs on one thread.

Run: ``uv run python benchmarks/bench_pettingzoo.py`` (``--quick`` for a smoke run).
Prints a markdown table and writes it to ``benchmarks/results/pettingzoo.md``; ``--label``
adds a section heading and ``--append`` adds the table to that file (a before / after
pair: run the first with ``PYTHONPATH`` pointing at a copy of the older sources).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
import warnings
from pathlib import Path

import numpy as np
import pettingzoo
import torch
from pettingzoo.classic import rps_v2, tictactoe_v3

from rl.envs import PettingZooWrapper

TASKS = {
    "rps_v2 parallel": (rps_v2.parallel_env, True),
    "rps_v2 AEC": (rps_v2.env, False),
    "tictactoe_v3 AEC": (tictactoe_v3.env, False),
}


def timed(fn) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - cpu, time.perf_counter() - wall


def record(make, parallel: bool, steps: int, seed: int) -> tuple[list, list, list]:
    """Random legal actions for ``steps`` steps, the steps after which the episode is over,
    and each step's rewards (``{agent: reward}``), played on PettingZoo."""
    rng = np.random.default_rng(seed)
    env = make()
    env.reset(seed=seed)
    actions, ends, rewards = [], [], []
    for _ in range(steps):
        if parallel:
            action = {a: int(rng.integers(env.action_space(a).n)) for a in env.agents}
            _, rew, *_ = env.step(action)
            over = not env.agents
        else:
            agent = env.agent_selection
            obs, *_ = env.last()
            if env.terminations[agent] or env.truncations[agent]:
                action = None
            elif isinstance(obs, dict) and "action_mask" in obs:
                action = int(rng.choice(np.flatnonzero(obs["action_mask"])))
            else:
                action = int(rng.integers(env.action_space(agent).n))
            env.step(action)
            rew = dict(env.rewards)
            over = all(env.terminations[a] or env.truncations[a] for a in env.agents)
        actions.append(action)
        ends.append(over)
        rewards.append(dict(rew))
        if over:
            env.reset()
    env.close()
    return actions, ends, rewards


def bench_task(name: str, steps: int, rounds: int) -> list[dict]:
    make, parallel = TASKS[name]
    actions, ends, rewards = record(make, parallel, steps, seed=0)
    raw = make()
    env = PettingZooWrapper(make(), use_mask=not parallel, seed=0)
    env_r = PettingZooWrapper(make(), use_mask=not parallel, seed=0)
    groups = env.group_map
    # the recorded actions as the wrapper's action entries (AEC: the selected agent's
    # action; the others get 0, which the wrapper does not send)
    agent_sel = []
    if not parallel:
        probe = make()
        probe.reset(seed=0)
        for t in range(steps):
            agent_sel.append(probe.agent_selection)
            probe.step(actions[t])
            if ends[t]:
                probe.reset()
        probe.close()
    td_actions = []
    for t in range(steps):
        entries = []
        for group, names in groups.items():
            values = []
            for agent in names:
                if parallel:
                    values.append(actions[t].get(agent, 0))
                else:
                    chosen = agent == agent_sel[t] and actions[t] is not None
                    values.append(actions[t] if chosen else 0)
            entries.append(((group, "action"), torch.tensor(values, dtype=torch.int64)))
        td_actions.append(entries)

    def floor():
        raw.reset(seed=0)
        if parallel:
            for t in range(steps):
                raw.step(actions[t])
                if ends[t]:
                    raw.reset()
        else:
            for t in range(steps):
                raw.last()
                raw.step(actions[t])
                if ends[t]:
                    raw.reset()

    def wrapper_loop():
        env.set_seed(0)
        td = env.reset()
        for t in range(steps):
            for key, value in td_actions[t]:
                td.set(key, value)
            _, td = env.step_and_maybe_reset(td)

    counter = [0]

    def replay(td):
        for key, value in td_actions[counter[0]]:
            td.set(key, value)
        counter[0] += 1
        return td

    def wrapper_rollout():
        counter[0] = 0
        env_r.set_seed(0)
        return env_r.rollout(steps, replay, break_when_any_done=False)

    # the two sides play the same games
    out = wrapper_rollout()
    for group, names in groups.items():
        got = out["next", group, "reward"][..., 0]
        want = torch.tensor([[float(r.get(a, 0.0)) for a in names] for r in rewards])
        torch.testing.assert_close(got, want, check_dtype=False)
    done = out["next", "done"][:, 0]
    assert done.tolist() == ends, f"{name}: episode ends differ from PettingZoo's"

    variants = {
        "PettingZoo loop (floor)": floor,
        "PettingZooWrapper step_and_maybe_reset": wrapper_loop,
        "PettingZooWrapper rollout": wrapper_rollout,
    }
    for fn in variants.values():  # warm-up
        fn()
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
    for _ in range(rounds):
        for key, fn in variants.items():
            times[key].append(timed(fn))
    floor_cpu = statistics.median(c for c, _ in times["PettingZoo loop (floor)"])
    floor_wall = statistics.median(w for _, w in times["PettingZoo loop (floor)"])
    rows = []
    for key, values in times.items():
        cpu = statistics.median(c for c, _ in values)
        wall = statistics.median(w for _, w in values)
        rows.append(
            {
                "task": name,
                "variant": key,
                "cpu_us": 1e6 * cpu / steps,
                "wall_us": 1e6 * wall / steps,
                "cpu_ratio": cpu / floor_cpu,
                "wall_ratio": wall / floor_wall,
            }
        )
    for e in (raw, env, env_r):
        e.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--steps", type=int, default=300, help="steps per round")
    parser.add_argument("--rounds", type=int, default=9, help="median of this many rounds")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "pettingzoo.md"))
    parser.add_argument("--label", default="", help="a section heading for this run")
    parser.add_argument("--append", action="store_true", help="add to --out, not overwrite")
    args = parser.parse_args()
    steps, rounds = (40, 2) if args.quick else (args.steps, args.rounds)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    load_before = os.getloadavg()[0]
    rows = []
    for name in TASKS:
        rows += bench_task(name, steps, rounds)
    load = f"{load_before:.1f} / {os.getloadavg()[0]:.1f}"
    title = ["# PettingZoo: PettingZooWrapper against PettingZoo stepped directly", ""]
    lines = [
        *([f"## {args.label}", ""] if args.label else []),
        f"{steps} steps per round (resets included), median of {rounds} interleaved rounds, "
        f"torch {torch.__version__} on 1 thread, PettingZoo {pettingzoo.__version__}, "
        f"{platform.processor() or platform.machine()}. Both sides replay the same recorded "
        "random legal actions (checked: same rewards, same episode ends). "
        "Ratio = time / floor.",
        "",
        f"Load average at start / end: {load} on {os.cpu_count()} cores: wall times follow the "
        "other jobs on the machine, CPU time of the process is the figure to compare.",
        "",
        "| task | variant | CPU us/step | wall us/step | CPU ratio | wall ratio |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['task']} | {r['variant']} | {r['cpu_us']:.1f} | {r['wall_us']:.1f} | "
            f"{r['cpu_ratio']:.2f}x | {r['wall_ratio']:.2f}x |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.quick:
        out = Path(args.out)
        if args.append and out.exists():
            out.write_text(out.read_text() + "\n" + text)
        else:
            out.write_text("\n".join(title) + "\n" + text)


if __name__ == "__main__":
    main()
