"""What the on-policy scripts share beside PPO's own pieces (``ppo.py``, ``ppo_rnd.py``;
``a2c.py`` and ``impala.py`` through ``ppo.py``): the env, its observations
optionally normalised (by the statistics of a random rollout, or by the bounds of the
observation space), the device a config names, PPO's orthogonal initialisation, and the
run's final evaluation."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

from rl.core import Bounded
from rl.envs import ObservationNorm, TransformedEnv

sys.path.insert(0, str(Path(__file__).parent))
from _common import (  # noqa: E402
    evaluate,
    finish_run,
    make_base_env,
    record_video,
    resolve_device,
)

__all__ = [
    "config_device",
    "evaluate_and_finish",
    "make_env",
    "observation_scaling",
    "observation_stats",
    "orthogonal_init",
]


def make_env(cfg, num_envs: int, obs_stats=None, from_pixels: bool = False):
    """The env (a vector env of ``num_envs``), with observations normalised by ``obs_stats``
    (``(loc, scale)``) when given."""
    env = make_base_env(cfg.env_id, num_envs, from_pixels, categorical=True)
    if obs_stats is None:
        return env
    loc, scale = obs_stats
    return TransformedEnv(
        env, ObservationNorm(loc=loc, scale=scale, in_keys=["observation"], standard_normal=True)
    )


def observation_stats(cfg, steps: int = 2000):
    """Mean and standard deviation of the observations of a random-action rollout on one
    env seeded ``cfg.seed`` (its actions are drawn from torch's generator, which
    ``seed_everything`` seeds): the same seed gives the same statistics."""
    env = make_env(cfg, 1)
    env.set_seed(cfg.seed)
    obs = env.rollout(steps, break_when_any_done=False)["observation"]
    env.close()
    return obs.mean(0), obs.std(0).clamp_min(1e-3)


def observation_scaling(cfg):
    """``(loc, scale)`` mapping a bounded observation space to [-1, 1] (``None`` when it is
    not bounded): MountainCar's velocity spans +-0.07, its position [-1.2, 0.6]."""
    spec = make_env(cfg, 1).observation_spec["observation"]
    if not cfg.normalize_obs or not isinstance(spec, Bounded):
        return None
    low, high = spec.space.low, spec.space.high
    if not (torch.isfinite(low).all() and torch.isfinite(high).all()):
        return None
    return (high + low) / 2, (high - low) / 2


def config_device(cfg) -> torch.device:
    """``cfg.device`` resolved (:func:`resolve_device`); the CPU for a config without one
    (a config of one's own passed to these pieces, which every script here reuses)."""
    return resolve_device(getattr(cfg, "device", "cpu"))


@torch.no_grad()
def orthogonal_init(module: nn.Module, last_gain: float) -> None:
    """Orthogonal weights (gain sqrt(2), ``last_gain`` for the output layer), zero biases."""
    linears = [m for m in module.modules() if isinstance(m, nn.Linear)]
    for i, layer in enumerate(linears):
        nn.init.orthogonal_(layer.weight, last_gain if i == len(linears) - 1 else 2**0.5)
        nn.init.zeros_(layer.bias)


def evaluate_and_finish(cfg, logger, actor, frames: int, seconds: float, obs_stats=None) -> dict:
    """The run's end: ``cfg.eval_episodes`` deterministic episodes of ``actor`` on one env
    (seeded ``cfg.seed + 1000``, its observations normalised by ``obs_stats``) scored and
    logged with the learning curve (:func:`finish_run`), one episode recorded as a video
    with ``cfg.video``; returns the summary."""
    eval_env = make_env(cfg, 1, obs_stats)
    eval_env.set_seed(cfg.seed + 1000)
    summary = finish_run(logger, evaluate(eval_env, actor, cfg.eval_episodes), frames, seconds)
    if cfg.video:
        summary["video"] = record_video(make_env(cfg, 1, obs_stats, True), actor, logger)
    return summary
