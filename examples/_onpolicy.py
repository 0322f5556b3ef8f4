"""What the on-policy scripts share beside PPO's own pieces (``ppo.py``, ``a2c.py``,
``ppo_rnd.py``, ``impala.py`` take them through ``ppo.py``): the env, its observations
optionally normalised by the statistics of a random rollout, the device a config names,
and PPO's orthogonal initialisation."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

from rl.envs import ObservationNorm, TransformedEnv

sys.path.insert(0, str(Path(__file__).parent))
from _common import make_base_env, resolve_device  # noqa: E402

__all__ = ["config_device", "make_env", "observation_stats", "orthogonal_init"]


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
    """Mean and standard deviation of the observations of a random-action rollout."""
    obs = make_env(cfg, 1).rollout(steps, break_when_any_done=False)["observation"]
    return obs.mean(0), obs.std(0).clamp_min(1e-3)


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
