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
    Bounded,
    Categorical,
    Composite,
    ExplorationType,
    Unbounded,
    set_exploration_type,
)
from rl.envs import EnvBase

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import EpisodeReturns, ProgressBar, finish_run  # noqa: E402

__all__ = [
    "EpisodeReturns",
    "MarlConfig",
    "ProgressBar",
    "evaluate_team",
    "expand_done",
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


class SignProbe(EnvBase):
    """A multi-agent probe: every agent sees a random sign and must answer it.

    Agent ``i`` observes ``s_i = ±1`` (``("agents", "observation")``, ``[*B, n_agents,
    1]``). Continuous actions in ``[-1, 1]`` earn ``-4 (a_i - s_i / 2)^2`` (best 0 at
    ``a_i = s_i / 2``, so a policy that ignores the action bounds or the observation
    loses); discrete actions in ``{0, 1, 2}`` earn 1 when ``a_i - 1 = s_i``. Episodes last
    ``max_steps`` steps; done and terminated sit at the root, as VMAS writes them. The
    scripts take it as ``--scenario probe`` and the tests use it to prove learning in
    seconds.
    """

    def __init__(self, num_envs: int, n_agents: int, max_steps: int, continuous: bool):
        super().__init__(batch_size=[num_envs])
        b, n = (num_envs,), n_agents
        self.n_agents, self.max_steps, self.continuous = n_agents, max_steps, continuous
        self.observation_spec = Composite(
            agents=Composite(observation=Bounded(-1.0, 1.0, (*b, n, 1)), shape=(*b, n)), shape=b
        )
        action = Bounded(-1.0, 1.0, (*b, n, 1)) if continuous else Categorical(3, (*b, n))
        self.action_spec = Composite(agents=Composite(action=action, shape=(*b, n)), shape=b)
        self.reward_spec = Composite(
            agents=Composite(reward=Unbounded((*b, n, 1)), shape=(*b, n)), shape=b
        )
        self._t = torch.zeros(b, dtype=torch.long)
        self._sign = torch.ones(*b, n, 1)

    def _observe(self, reward=None) -> TensorDict:
        self._sign = torch.randint(0, 2, self._sign.shape).float() * 2 - 1
        agents = {"observation": self._sign.clone()}
        if reward is not None:
            agents["reward"] = reward
        done = (self._t >= self.max_steps).unsqueeze(-1)
        b = self.batch_size
        return TensorDict(
            {"agents": TensorDict(agents, [*b, self.n_agents]), "done": done, "terminated": done},
            batch_size=b,
        )

    def _reset(self, tensordict):
        reset = None if tensordict is None else tensordict.get("_reset", None)
        if reset is None:
            self._t = torch.zeros_like(self._t)
        else:
            self._t = self._t.masked_fill(reset.reshape(self._t.shape), 0)
        return self._observe()

    def _step(self, tensordict):
        action = tensordict.get(("agents", "action"))
        if self.continuous:
            reward = -4 * (action - self._sign / 2).pow(2)
        else:
            reward = ((action.unsqueeze(-1) - 1).float() == self._sign).float()
        self._t = self._t + 1
        return self._observe(reward)

    def _set_seed(self, seed):
        torch.manual_seed(seed)


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


def expand_done(batch: TensorDictBase, reward_key=(GROUP, "reward")) -> TensorDictBase:
    """Copies the environment's ``done`` / ``terminated`` to every agent, shaped like its
    reward (``[*B, T, n_agents, 1]``), under ``("next", "agents", ...)``: GAE over group
    keys reads reward, done and value with one shape, as in TorchRL's MAPPO."""
    shape = batch.get(("next", *reward_key)).shape
    for name in ("done", "terminated"):
        flag = batch.get(("next", name))
        batch.set(("next", GROUP, name), flag.unsqueeze(-1).expand(shape))
    return batch


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
