"""DMControlEnv's per-step cost against dm_control stepped directly, in the same run.

Two suite tasks (``cartpole/balance``: 5 observation entries of 1-2 floats, 1 action;
``cheetah/run``: 2 entries, 6 actions), state observations, random actions drawn once for
every step and replayed by both sides:

- floor: ``env.step(action)`` of the dm_control environment, and ``env.reset()`` after a
  ``LAST`` step (the loop a user writes against dm_control);
- ``step``: ``DMControlEnv.step(td)`` with the action written into the root tensordict
  (the wrapper's whole cost: action to numpy, observations to tensors, the output
  TensorDict), reset when done, against the floor;
- ``step_and_maybe_reset``: a collector's loop (``step``, ``step_mdp``, reset when done);
- ``rollout``: ``env.rollout(steps, policy, break_when_any_done=False)`` with a policy that
  writes the recorded actions (stores every step).

The suite's episodes last 1,000 steps, so a short time limit (``time_limit=0.5``
simulated seconds) puts resets in every round. Before timing, the observations of the
wrapper's rollout are checked against dm_control's. Variants run in turns (interleaved
rounds), each timed in CPU time of the process and in wall time; the median over rounds is
reported. Torch runs on one thread.

Run: ``uv run python benchmarks/bench_dm_control.py`` (``--quick`` for a smoke run).
Prints a markdown table and writes it to ``benchmarks/results/dm_control.md``; ``--label``
adds a section heading and ``--append`` adds the table to that file (a before / after
pair: run the first with ``PYTHONPATH`` pointing at a copy of the older sources).
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import time
import warnings
from importlib.metadata import version
from pathlib import Path

import numpy as np
import torch

from rl.envs import DMControlEnv
from rl.envs.libs.dm_control import _import_dm_control

TASKS = [("cartpole", "balance"), ("cheetah", "run")]
TIME_LIMIT = 0.5  # simulated seconds: resets every few dozen steps


def timed(fn) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - cpu, time.perf_counter() - wall


def bench_task(domain: str, task: str, steps: int, rounds: int) -> list[dict]:
    suite = _import_dm_control()
    kwargs = {"time_limit": TIME_LIMIT}
    raw = suite.load(domain, task, task_kwargs={**kwargs, "random": 0})
    env = DMControlEnv(domain, task, seed=0, **kwargs)
    env_r = DMControlEnv(domain, task, seed=0, **kwargs)
    spec = raw.action_spec()
    rng = np.random.default_rng(0)
    np_actions = [
        rng.uniform(spec.minimum, spec.maximum, spec.shape).astype(spec.dtype) for _ in range(steps)
    ]
    td_actions = [torch.from_numpy(a.copy()) for a in np_actions]

    def floor():
        raw.task._random = np.random.RandomState(0)
        raw.reset()
        for t in range(steps):
            if raw.step(np_actions[t]).last():
                raw.reset()

    def wrapper_step():
        env.set_seed(0)
        td = env.reset()
        for t in range(steps):
            td.set("action", td_actions[t])
            env.step(td)
            if td["next", "done"]:
                td = env.reset()
            else:
                td = td["next"]

    def wrapper_loop():
        env.set_seed(0)
        td = env.reset()
        for t in range(steps):
            td.set("action", td_actions[t])
            _, td = env.step_and_maybe_reset(td)

    counter = [0]

    def replay(td):
        td.set("action", td_actions[counter[0]])
        counter[0] += 1
        return td

    def wrapper_rollout():
        counter[0] = 0
        env_r.set_seed(0)
        return env_r.rollout(steps, replay, break_when_any_done=False)

    # the two sides run the same episodes
    out = wrapper_rollout()
    raw.task._random = np.random.RandomState(0)
    raw.reset()
    expected = []
    for t in range(steps):
        timestep = raw.step(np_actions[t])
        expected.append(np.concatenate([np.ravel(v) for v in timestep.observation.values()]))
        if timestep.last():
            raw.reset()
    keys = list(raw.observation_spec())
    got = torch.cat([out["next", k].reshape(steps, -1) for k in keys], -1)
    torch.testing.assert_close(got, torch.as_tensor(np.stack(expected)), check_dtype=False)

    variants = {
        "dm_control env.step (floor)": floor,
        "DMControlEnv step": wrapper_step,
        "DMControlEnv step_and_maybe_reset": wrapper_loop,
        "DMControlEnv rollout": wrapper_rollout,
    }
    for fn in variants.values():  # warm-up
        fn()
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
    for _ in range(rounds):
        for key, fn in variants.items():
            times[key].append(timed(fn))
    floor_cpu = statistics.median(c for c, _ in times["dm_control env.step (floor)"])
    floor_wall = statistics.median(w for _, w in times["dm_control env.step (floor)"])
    rows = []
    for key, values in times.items():
        cpu = statistics.median(c for c, _ in values)
        wall = statistics.median(w for _, w in values)
        rows.append(
            {
                "task": f"{domain}/{task}",
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
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "dm_control.md"))
    parser.add_argument("--label", default="", help="a section heading for this run")
    parser.add_argument("--append", action="store_true", help="add to --out, not overwrite")
    args = parser.parse_args()
    steps, rounds = (40, 2) if args.quick else (args.steps, args.rounds)
    warnings.filterwarnings("ignore")
    logging.getLogger("absl").setLevel(logging.ERROR)
    torch.set_num_threads(1)
    load_before = os.getloadavg()[0]
    rows = []
    for domain, task in TASKS:
        rows += bench_task(domain, task, steps, rounds)
    load = f"{load_before:.1f} / {os.getloadavg()[0]:.1f}"
    title = ["# dm_control: DMControlEnv against dm_control stepped directly", ""]
    lines = [
        *([f"## {args.label}", ""] if args.label else []),
        f"{steps} steps per round (time_limit={TIME_LIMIT}: resets included), median of "
        f"{rounds} interleaved rounds, torch {torch.__version__} on 1 thread, dm_control "
        f"{version('dm_control')}, MuJoCo {version('mujoco')}, {platform.processor() or platform.machine()}. Both sides "
        "replay the same random actions (checked: same observations). Ratio = time / floor.",
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
