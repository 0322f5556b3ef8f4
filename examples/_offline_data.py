"""What the scripts that learn from a saved dataset share (offline.py, td3_bc.py,
diffusion_bc.py, decision_transformer.py, gail.py).

The dataset is the memmap replay buffer that ``sac.py --save-buffer`` writes (reopened by
``_offpolicy.open_dataset``), with its ``dataset.json``: the env id and the evaluation
returns of the policy that collected it and of uniformly random actions. Here: the
observation statistics, the normalised score (and its change between two evaluations),
and the dataset cut into episodes.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from rl.envs.transforms import ObservationNorm

__all__ = [
    "best_episodes",
    "episode_bounds",
    "mean_std",
    "normalised_score",
    "observation_norms",
    "observation_stats",
    "report_score",
    "score_change",
]


def observation_stats(buffer) -> tuple[torch.Tensor, torch.Tensor]:
    """The dataset's per-feature observation mean and standard deviation (floored at
    ``1e-6``), ``[obs_dim]`` each."""
    obs = buffer[: len(buffer)]["observation"]
    return obs.mean(0), obs.std(0).clamp_min(1e-6)


def observation_norms(buffer) -> tuple[ObservationNorm, ObservationNorm]:
    """Two ``ObservationNorm`` that standardise observations by the dataset's mean and std
    (per feature): one for the sampled batches (``"observation"`` and
    ``("next", "observation")``), one for the evaluation env."""
    loc, scale = observation_stats(buffer)
    batch_keys = ["observation", ("next", "observation")]
    return (
        ObservationNorm(loc, scale, in_keys=batch_keys, standard_normal=True),
        ObservationNorm(loc, scale, standard_normal=True),
    )


def normalised_score(episode_return: float, info: dict) -> float:
    """``100 * (R - R_random) / (R_data - R_random)``: 0 is uniformly random actions, 100
    the policy that collected the dataset (both returns from its ``dataset.json``)."""
    span = info["policy_return"] - info["random_return"]
    return 100 * (episode_return - info["random_return"]) / span


def report_score(summary: dict, info: dict) -> dict:
    """Adds the dataset's two reference returns and the normalised score of
    ``summary["eval_mean"]`` to ``summary``, prints them, and returns ``summary``."""
    summary["data_return"] = info["policy_return"]
    summary["random_return"] = info["random_return"]
    summary["score"] = normalised_score(summary["eval_mean"], info)
    print(
        f"normalised score {summary['score']:.1f} (data-collecting policy "
        f"{info['policy_return']:.1f}, random {info['random_return']:.1f})"
    )
    return summary


def episode_bounds(data: TensorDictBase) -> list[tuple[int, int]]:
    """``(start, end)`` (``end`` included) of each episode of the flat batch ``data``
    ``[N]``, cut at ``("next", "done")``; a last episode without its end is dropped."""
    ends = data["next", "done"].reshape(len(data), -1).any(-1).nonzero().squeeze(-1).tolist()
    starts = [0, *(end + 1 for end in ends)][: len(ends)]
    return list(zip(starts, ends, strict=True))


def best_episodes(buffer, count: int) -> tuple[TensorDictBase, list[float]]:
    """The ``count`` complete episodes of highest return in ``buffer`` (all of them when it
    holds fewer), concatenated as a flat batch of transitions, with their returns (best
    first)."""
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    data = buffer[: len(buffer)].exclude("index")
    bounds = episode_bounds(data)
    if not bounds:
        raise ValueError(
            f"the dataset of {len(data)} transitions holds no complete episode "
            "(no ('next', 'done') set)"
        )
    rewards = data["next", "reward"].reshape(len(data))
    returns = [rewards[start : end + 1].sum().item() for start, end in bounds]
    order = sorted(range(len(bounds)), key=lambda i: returns[i], reverse=True)[:count]
    picked = torch.cat([torch.arange(bounds[i][0], bounds[i][1] + 1) for i in order])
    return data[picked], [returns[i] for i in order]


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    t = torch.tensor(values, dtype=torch.float64)
    return t.mean().item(), (t.std().item() if len(values) > 1 else 0.0)


def score_change(after: list[float], before: list[float], info: dict) -> tuple[float, float]:
    """The normalised score's change from the returns ``before`` to the returns ``after``
    on the same evaluation episodes (a paired difference), and its standard error."""
    change = [a - b for a, b in zip(after, before, strict=True)]
    mean, std = mean_std(change)
    span = info["policy_return"] - info["random_return"]
    return 100 * mean / span, 100 * std / len(change) ** 0.5 / span
