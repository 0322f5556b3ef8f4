"""What the multi-agent scripts share: the VMAS env, team rewards, deterministic evaluation.

Kept apart so that ``mappo.py`` and ``qmix.py`` read as their algorithm alone. Data of the
agents sits under the group key ``"agents"`` (batch ``[*B, n_agents]``); VMAS writes one
``done`` / ``terminated`` per environment at the root.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Annotated, Literal, TypeVar, Union

import torch
from tensordict import TensorDict, TensorDictBase

from rl.core import (
    ExplorationType,
    set_exploration_type,
)
from rl.envs import SignProbe

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import EpisodeReturns, ProgressBar, finish_run  # noqa: E402

__all__ = [
    "EpisodeReturns",
    "MarlConfig",
    "ProgressBar",
    "evaluate_team",
    "finish_run",
    "make_vmas_env",
    "preset_cli",
    "SignProbe",
    "team_view",
]

GROUP = "agents"


@dataclasses.dataclass
class MarlConfig:
    """The fields every multi-agent script has: the VMAS task, the budget, the run.

    Each script's ``Config`` subclasses it and adds its algorithm's hyperparameters
    (tyro lists these fields first in ``--help``).
    """

    scenario: str = "navigation"
    """VMAS scenario, or ``probe`` (a probe env that a working script solves in seconds)."""
    n_agents: int = 3
    """Agents in the scenario."""
    max_steps: int = 100
    """Episode length (VMAS truncates there)."""
    num_envs: int = 60
    """Vectorised VMAS environments; a batch is num_envs * max_steps frames."""
    total_frames: int = 60_000
    """Environment steps (of the vectorised env, all agents at once) to train for."""
    eval_episodes: int = 20
    """Deterministic evaluation episodes at the end (one per vectorised env)."""
    seed: int = 0
    """Seed of torch, numpy, python and the environments."""
    logger: Literal["csv", "tensorboard", "wandb", "mlflow"] = "csv"
    """Where the scalars go (CSV needs no extra package)."""
    log_dir: str = "runs"
    """Folder of the run's logs and curve."""
    exp_name: str | None = None
    """Name of the run (default: generated from the algorithm, scenario and seed)."""
    progress: bool = True
    """Show a progress bar (only when attached to a terminal)."""


C = TypeVar("C", bound=MarlConfig)


def preset_cli(
    presets: dict[str, tuple[str, C]],
    default: str,
    description: str,
    args: list[str] | None = None,
) -> C:
    """Parses the command line (or ``args``) with one tyro subcommand per preset
    (``mappo.py balance --seed 1``); with no subcommand, the ``default`` preset. Every
    field of the config stays a flag, with or without a preset named
    (``ippo.py --no-share-params`` is ``ippo.py navigation --no-share-params``)."""
    import tyro

    args = sys.argv[1:] if args is None else list(args)
    if args and args[0] not in presets and args[0] not in ("-h", "--help"):
        args = [default, *args]

    choices = tuple(
        Annotated[type(cfg), tyro.conf.subcommand(name, default=cfg, description=text)]
        for name, (text, cfg) in presets.items()
    )
    return tyro.cli(
        Union[choices],  # noqa: UP007
        default=presets[default][1],
        description=description,
        args=args,
    )


def make_vmas_env(
    scenario: str,
    num_envs: int,
    max_steps: int,
    seed: int,
    continuous_actions: bool,
    **scenario_kwargs,
):
    """A VMAS scenario of ``num_envs`` vectorised environments, on the CPU (``"probe"``:
    a :class:`SignProbe`)."""
    from rl.envs import VmasEnv

    if scenario == "probe":
        n_agents = scenario_kwargs.get("n_agents", 2)
        return SignProbe(num_envs, n_agents, max_steps, continuous_actions)
    return VmasEnv(
        scenario,
        num_envs=num_envs,
        continuous_actions=continuous_actions,
        max_steps=max_steps,
        seed=seed,
        device="cpu",
        **scenario_kwargs,
    )


def team_view(batch: TensorDictBase, reward_key=(GROUP, "reward")) -> TensorDict:
    """``("next", "reward")``: the agents' mean reward (``[*B, T, 1]``), and ``done``, for
    ``EpisodeReturns``: an episode's return is then the mean over agents of their returns,
    the figure BenchMARL reports."""
    reward = batch.get(("next", *reward_key))
    if reward.ndim > batch.batch_dims + 1:  # per-agent rewards: average the agents
        reward = reward.mean(-2)
    return TensorDict(
        {"next": {"reward": reward, "done": batch.get(("next", "done"))}},
        batch_size=batch.batch_size,
    )


@torch.no_grad()
def evaluate_team(env, policy, max_steps: int, reward_key=(GROUP, "reward")) -> list[float]:
    """Returns of one deterministic episode in each of ``env``'s vectorised environments
    (the mean over agents of their summed rewards; VMAS ends episodes at ``max_steps``)."""
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        rollout = env.rollout(max_steps, policy, break_when_any_done=False)
    reward = rollout.get(("next", *reward_key))
    if reward.ndim > rollout.batch_dims + 1:
        reward = reward.mean(-2)
    done = rollout.get(("next", "done")).squeeze(-1)
    # count each environment's first episode only (VMAS resets it in place after a done)
    alive = torch.cat([torch.ones_like(done[:, :1]), ~done[:, :-1]], -1).long().cumprod(-1)
    return (reward.squeeze(-1) * alive).sum(-1).tolist()
