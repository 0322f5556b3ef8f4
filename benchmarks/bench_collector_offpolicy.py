"""One env, small batches: the off-policy examples' collection against a plain loop.

The off-policy examples (ddpg.py, td3.py, sac.py, redq.py, ...) collect one Pendulum-v1
env in batches of 10 frames between two rounds of updates (RL-Zoo's ``train_freq``).
There, what a collector does per step and per batch is not amortised over many envs.
Each row collects the examples' env (``TransformedEnv(GymEnv("Pendulum-v1"),
Compose(DoubleToFloat(), StepCounter(), RewardSum()))``) with the examples' actor, and a
floor does the same work in the plain loop a person writes without a library: gymnasium's
env stepped with the same torch networks, the same noise or distribution, writing
preallocated [10]-row tensors (observation, action, reward, next observation, done flags,
step count, episode return) and resetting at the end of an episode.

- ``deterministic + noise``: ddpg.py's and td3.py's actor (an MLP, ``TanhModule`` into the
  action bounds) then ``AdditiveGaussianModule``; the floor: the MLP, ``tanh`` rescaled,
  Gaussian noise, clamped.
- ``tanh-normal``: sac.py's ``ProbabilisticActor`` with a ``TanhNormal``; the floor: the
  MLP, ``torch.distributions.Normal`` sampled, ``tanh`` rescaled (CleanRL's SAC actor).

Frames per CPU-second of this process (one torch thread), median of interleaved rounds;
ratio = ours / the floor's (higher is better). The per-step and per-batch columns
split ours by running the same collector with 10- and 100-frame batches.

    uv run python benchmarks/bench_collector_offpolicy.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "examples"))
from _offpolicy import (  # noqa: E402
    make_deterministic_actor,
    make_env,
    make_tanh_normal_actor,
)
from _timing import per_call, results_path, write_report  # noqa: E402

from rl.collectors import Collector  # noqa: E402
from rl.modules import AdditiveGaussianModule, TensorDictSequential  # noqa: E402

ENV_ID = "Pendulum-v1"
HIDDEN = 64
SIGMA = 0.2  # the examples' Gaussian noise on Pendulum: 0.1 of the action range


class Floor:
    """The plain loop: gymnasium's env, the actor's torch modules, preallocated rows."""

    def __init__(self, act, frames: int, seed: int = 0) -> None:
        self.env = gym.make(ENV_ID)
        self.obs, _ = self.env.reset(seed=seed)
        self.act = act
        self.frames = frames
        n_obs = self.env.observation_space.shape[0]
        n_act = self.env.action_space.shape[0]
        self.rows = {
            "observation": torch.zeros(frames, n_obs),
            "action": torch.zeros(frames, n_act),
            "next_observation": torch.zeros(frames, n_obs),
            "reward": torch.zeros(frames, 1),
            "terminated": torch.zeros(frames, 1, dtype=torch.bool),
            "truncated": torch.zeros(frames, 1, dtype=torch.bool),
            "step_count": torch.zeros(frames, 1, dtype=torch.int64),
            "episode_reward": torch.zeros(frames, 1),
        }
        self.steps, self.ret = 0, 0.0

    def batch(self) -> int:
        rows = self.rows
        for t in range(self.frames):
            obs = torch.as_tensor(self.obs, dtype=torch.float32)
            with torch.no_grad():
                action = self.act(obs)
            next_obs, reward, terminated, truncated, _ = self.env.step(action.numpy())
            self.steps += 1
            self.ret += float(reward)
            rows["observation"][t] = obs
            rows["action"][t] = action
            rows["next_observation"][t] = torch.as_tensor(next_obs, dtype=torch.float32)
            rows["reward"][t] = float(reward)
            rows["terminated"][t] = terminated
            rows["truncated"][t] = truncated
            rows["step_count"][t] = self.steps
            rows["episode_reward"][t] = self.ret
            self.obs = next_obs
            if terminated or truncated:
                self.obs, _ = self.env.reset()
                self.steps, self.ret = 0, 0.0
        return self.frames


def deterministic_floor(actor, spec):
    """ddpg.py's acting in plain torch: the actor's MLP, tanh into the bounds, noise."""
    net = actor[0].module
    low, high = spec.space.low, spec.space.high

    def act(obs):
        action = low + (high - low) * (net(obs).tanh() + 1) / 2
        return (action + SIGMA * torch.randn_like(action)).clamp(low, high)

    return act


def tanh_normal_floor(actor, spec):
    """sac.py's acting in plain torch (CleanRL's actor): the MLP gives loc and scale, a
    Normal sample squashed by tanh into the bounds."""
    net = actor.module[0].module
    low, high = spec.space.low, spec.space.high

    def act(obs):
        loc, scale = net(obs)
        sample = torch.distributions.Normal(loc, scale).sample()
        return low + (high - low) * (sample.tanh() + 1) / 2

    return act


def rows(seed: int = 0) -> dict:
    """name -> (make collector(frames_per_batch), make floor(frames))."""
    torch.manual_seed(seed)
    env = make_env(ENV_ID)
    spec = env.action_spec
    det = make_deterministic_actor(env, HIDDEN)
    noise = AdditiveGaussianModule(spec, sigma_init=SIGMA, sigma_end=SIGMA)
    det_policy = TensorDictSequential(det, noise)
    tanh_normal = make_tanh_normal_actor(env, HIDDEN)

    def collector(policy):
        def make(frames):
            env = make_env(ENV_ID)
            env.set_seed(seed)
            return Collector(env, policy, frames_per_batch=frames, total_frames=-1)

        return make

    return {
        "deterministic + noise (ddpg, td3)": (
            collector(det_policy),
            lambda frames: Floor(deterministic_floor(det, spec), frames, seed),
        ),
        "tanh-normal (sac, redq)": (
            collector(tanh_normal),
            lambda frames: Floor(tanh_normal_floor(tanh_normal, spec), frames, seed),
        ),
    }


def _batches(collector):
    """A callable collecting the next batch."""
    it = iter(collector)
    return lambda: next(it)


def measure(rounds: int, frames: int = 10, batches: int = 200) -> list[dict]:
    out = []
    for name, (make_collector, make_floor) in rows().items():
        small = make_collector(frames)
        large = make_collector(10 * frames)
        floor = make_floor(frames)
        fns = {"floor": floor.batch, "small": _batches(small), "large": _batches(large)}
        counts = {"floor": batches, "small": batches, "large": batches // 10}
        sizes = {"floor": frames, "small": frames, "large": 10 * frames}
        for key, fn in fns.items():  # warm-up: first batches, first resets
            per_call(fn, max(counts[key] // 4, 1))
        runs: dict[str, list[float]] = {key: [] for key in fns}
        for _ in range(rounds):
            for key, fn in fns.items():
                seconds = per_call(fn, counts[key], clock=time.process_time)
                runs[key].append(sizes[key] / seconds)
        med = {key: statistics.median(v) for key, v in runs.items()}
        # per frame = step + batch / frames_per_batch, at 10 and 100 frames a batch
        t_small, t_large = 1e6 / med["small"], 1e6 / med["large"]
        per_step = (10 * t_large - t_small) / 9
        per_batch = (t_small - per_step) * frames
        out.append(
            {
                "row": name,
                "floor": med["floor"],
                "ours": med["small"],
                "ratio": med["small"] / med["floor"],
                "floor_us": 1e6 / med["floor"],
                "per_step_us": per_step,
                "per_batch_us": per_batch,
            }
        )
        for collector in (small, large):
            collector.shutdown()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", default=results_path("collector_offpolicy.md"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    results = measure(args.rounds)
    header = (
        "| actor | floor frames/s | ours frames/s | ratio (target >= 1) | floor us/frame "
        "| ours: us per step | ours: us per batch |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    )
    lines = [
        f"| {r['row']} | {r['floor']:,.0f} | {r['ours']:,.0f} | {r['ratio']:.2f}x "
        f"| {r['floor_us']:.1f} | {r['per_step_us']:.1f} | {r['per_batch_us']:.1f} |"
        for r in results
    ]
    elapsed = time.perf_counter() - start
    context = (
        f"`python benchmarks/bench_collector_offpolicy.py --rounds {args.rounds}`; "
        f"{platform.machine()}, torch {torch.__version__}, gymnasium {gym.__version__}, "
        f"numpy {np.__version__}, 1 torch thread, {ENV_ID}, 10-frame batches, "
        f"frames per CPU-second (median of {args.rounds} interleaved rounds); load average "
        f"{os.getloadavg()[0]:.1f} at the end; {elapsed / 60:.1f} min."
    )
    title = "# One env, 10-frame batches: Collector against a plain loop"
    write_report([title, "", context, "", header, *lines], args.out)


if __name__ == "__main__":
    main()
