"""What the multi-agent scripts share: the VMAS env, team rewards, deterministic evaluation,
the agents' networks and the off-policy training loop of MADDPG / IDDPG / MASAC.

Kept apart so that each script (``mappo.py``, ``qmix.py``, ``maddpg.py``, ``masac.py``)
reads as its algorithm alone. Data of the agents sits under the group key ``"agents"``
(batch ``[*B, n_agents]``); VMAS writes one ``done`` / ``terminated`` per environment at
the root.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Literal, TypeVar

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from rl.collectors import Collector
from rl.core import (
    ExplorationType,
    set_exploration_type,
)
from rl.core.loggers import generate_exp_name, get_logger
from rl.data import LazyTensorStorage, RandomSampler, TensorDictReplayBuffer
from rl.envs import SignProbe
from rl.modules import (
    MultiAgentMLP,
    NormalParamExtractor,
    ProbabilisticActor,
    TanhNormal,
    TensorDictModule,
    TensorDictSequential,
    ValueOperator,
)
from rl.objectives import SoftUpdate

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import (  # noqa: E402
    EpisodeReturns,
    ProgressBar,
    UpdateStep,
    check_cudagraphs,
    collector_devices,
    compile_advantage,
    compile_policy,
    finish_run,
    resolve_device,
    summed_losses,
    whole_batches,
)
from _common import preset_cli as common_preset_cli  # noqa: E402

__all__ = [
    "EpisodeReturns",
    "MarlConfig",
    "OffPolicyConfig",
    "ProgressBar",
    "evaluate_team",
    "finish_run",
    "make_env",
    "preset_cli",
    "SignProbe",
    "agents_done",
    "check_cudagraphs",
    "compile_advantage",
    "compile_group_policy",
    "make_q_critic",
    "make_off_policy_update",
    "make_replay_buffer",
    "make_tanh_normal_actor",
    "resolve_device",
    "team_view",
    "train_off_policy",
    "UpdateStep",
    "whole_batches",
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
    compile: bool = False
    """torch.compile the collector's policy, the advantage (PPO) and the whole update step
    (loss, backward, gradient clipping, optimizer step, target update), once."""
    cudagraphs: bool = False
    """Capture the update step and the policy in CUDA graphs (needs ``--device cuda``)."""
    device: str = "cpu"
    """Where the environments, the networks, the update step and the replay buffer live:
    ``cpu``, ``cuda``, ``cuda:N``, or ``auto`` (CUDA where visible). VMAS (and the probe)
    simulate their batch of environments on that device, so that nothing leaves it
    between collection, update and evaluation."""


@dataclasses.dataclass
class OffPolicyConfig(MarlConfig):
    """The fields of the off-policy actor-critic scripts (MADDPG, IDDPG, MASAC): a replay
    buffer, gradient steps between short collections, target networks by soft update.

    TorchRL's ``maddpg_iddpg.yaml`` / ``sac.yaml`` (BenchMARL's off-policy settings) take
    60,000-frame batches, 630 updates of 4,096 each and lr 5e-5 for millions of frames;
    this budget is 30,000 frames on a shared 2-core machine, so batches are short (600
    frames), 50 updates of 256 follow each, and the learning rate is higher.
    """

    total_frames: int = 30_000
    """Environment steps (of the vectorised env, all agents at once) to train for."""
    collect_steps: int = 10
    """Steps of each vectorised env per collected batch (num_envs * collect_steps frames)."""
    buffer_size: int = 60_000
    """Replay buffer capacity (transitions, all agents each)."""
    batch_size: int = 256
    """Transitions per gradient step."""
    updates_per_batch: int = 50
    """Gradient steps after each collected batch."""
    lr: float = 1e-3
    """Adam learning rate of the critic (and, for SAC, the temperature)."""
    lr_actor: float = 1e-3
    """Adam learning rate of the actor (the DDPG paper's is 10x slower than the critic's)."""
    gamma: float = 0.9
    """Discount factor."""
    tau: float = 0.005
    """Soft update rate of the target networks."""
    hidden: int = 256
    """Width of the two hidden layers of actor and critic."""
    centralised_critic: bool = True
    """The critic reads every agent's observation and action (False: only its own)."""
    share_params: bool = True
    """One actor and one critic network shared by the agents (False: one per agent)."""
    max_grad_norm: float = 10.0
    """Gradient clipping norm."""

    def __post_init__(self) -> None:
        if self.updates_per_batch < 1:
            raise ValueError(f"updates_per_batch must be at least 1, got {self.updates_per_batch}")
        if self.collect_steps < 1:
            raise ValueError(f"collect_steps must be at least 1, got {self.collect_steps}")


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
    return common_preset_cli(type(presets[default][1]), presets, default, description, args)


def make_env(cfg, num_envs: int, seed: int, continuous_actions: bool = True):
    """The VMAS scenario ``cfg.scenario`` of ``num_envs`` vectorised environments of
    ``cfg.n_agents`` agents, simulated on ``cfg.device`` (``"probe"``: a :class:`SignProbe`
    there); its actions continuous unless ``continuous_actions`` is false (QMIX)."""
    from rl.envs import VmasEnv

    device = resolve_device(cfg.device)
    if cfg.scenario == "probe":
        return SignProbe(num_envs, cfg.n_agents, cfg.max_steps, continuous_actions, device=device)
    return VmasEnv(
        cfg.scenario,
        num_envs=num_envs,
        continuous_actions=continuous_actions,
        max_steps=cfg.max_steps,
        seed=seed,
        device=device,
        n_agents=cfg.n_agents,
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


def agents_done(batch: TensorDictBase, group: str = GROUP) -> TensorDictBase:
    """Writes the root ``("next", "done")`` / ``("next", "terminated")`` (``[*B, 1]``) under
    the group, repeated along the agents (``[*B, n_agents, 1]``), where a loss reads them
    beside the agents' reward (TorchRL's multi-agent scripts do this in a ``DoneTransform``)."""
    n_agents = batch.get(("next", group)).batch_size[-1]
    for key in ("done", "terminated"):
        flag = batch.get(("next", key))
        flag = flag.unsqueeze(-2).expand(*flag.shape[:-1], n_agents, flag.shape[-1])
        batch.set(("next", group, key), flag.clone())
    return batch


def compile_group_policy(policy, *, compile: bool | dict, cudagraphs: bool = False):
    """``_common.compile_policy`` for a policy that reads and writes group keys.

    rl.core's tensor twins take string keys only, so a policy of ``("agents", ...)``
    keys is compiled as a TensorDict module (``compile_policy`` without a twin); its
    inputs are handed to it in a TensorDict built afresh at each step (the rollout's
    views of a group differ from step to step in how their batch size is held, a guard
    that would fail and recompile), and what it writes goes back into the step's
    TensorDict. Eager (no option): ``policy`` itself."""
    compiled = compile_policy(policy, compile=compile, cudagraphs=cudagraphs)
    if compiled is policy or isinstance(compiled, nn.Module):
        return compiled
    in_keys = [(key,) if isinstance(key, str) else tuple(key) for key in policy.in_keys]

    def act(tensordict: TensorDictBase) -> TensorDictBase:
        inputs = TensorDict(batch_size=tensordict.batch_size)
        for key in in_keys:
            node, source = inputs, tensordict
            for name in key[:-1]:  # each group as a new TensorDict of its own batch size
                source = source.get(name)
                if name not in node.keys():
                    node.set(name, TensorDict(batch_size=source.batch_size))
                node = node.get(name)
            node.set(key[-1], source.get(key[-1]).contiguous())
        return tensordict.update(compiled(inputs).exclude(*in_keys))

    return act


def _agents_mlp(env, n_in: int, n_out: int, centralised: bool, share_params: bool, hidden: int):
    return MultiAgentMLP(
        n_in,
        n_out,
        env.n_agents,
        centralized=centralised,
        share_params=share_params,
        depth=2,
        num_cells=hidden,
        activation_class=nn.Tanh,
    )


def make_tanh_normal_actor(
    env, hidden: int, share_params: bool, init_scale: float = 1.0, device=None
) -> ProbabilisticActor:
    """Each agent's stochastic policy from its own observation: a ``MultiAgentMLP`` to the
    loc and scale of a ``TanhNormal`` bounded by the action spec, writing
    ``("agents", "action")`` and its log-probability (MAPPO, IPPO and MASAC's actor);
    initialised on the CPU (the same weights on every device), then moved to ``device``
    with its bounds."""
    n_obs = env.observation_spec[GROUP, "observation"].shape[-1]
    action_spec = env.full_action_spec[GROUP, "action"]
    n_act = action_spec.shape[-1]
    net = nn.Sequential(
        _agents_mlp(env, n_obs, 2 * n_act, False, share_params, hidden),
        NormalParamExtractor(scale_mapping=f"biased_softplus_{init_scale}"),
    )
    actor = ProbabilisticActor(
        TensorDictModule(
            net,
            in_keys=[(GROUP, "observation")],
            out_keys=[(GROUP, "loc"), (GROUP, "scale")],
        ),
        in_keys=[(GROUP, "loc"), (GROUP, "scale")],
        out_keys=[(GROUP, "action")],
        spec=env.full_action_spec,
        distribution_class=TanhNormal,
        # the bounds of one agent (the spec repeats them per env and agent)
        distribution_kwargs={
            "low": action_spec.space.low.reshape(-1, n_act)[0],
            "high": action_spec.space.high.reshape(-1, n_act)[0],
        },
        return_log_prob=True,
    )
    return actor.to(device) if device is not None else actor


def make_q_critic(
    env, hidden: int, centralised: bool, share_params: bool, device=None
) -> ValueOperator:
    """Each agent's ``Q(s, a)`` at ``("agents", "state_action_value")`` (``[*B, n_agents,
    1]``): from every agent's observation and action (``centralised``: MADDPG, MASAC) or
    from its own (IDDPG); initialised on the CPU, then moved to ``device``."""
    n_obs = env.observation_spec[GROUP, "observation"].shape[-1]
    n_act = env.full_action_spec[GROUP, "action"].shape[-1]
    critic = ValueOperator(
        _agents_mlp(env, n_obs + n_act, 1, centralised, share_params, hidden),
        in_keys=[(GROUP, "observation"), (GROUP, "action")],
        out_keys=[(GROUP, "state_action_value")],
    )
    return critic.to(device) if device is not None else critic


def make_replay_buffer(cfg) -> TensorDictReplayBuffer:
    """A uniform replay buffer of ``cfg.buffer_size`` transitions (the agents' entries under
    their group) on ``cfg.device``, sampling ``cfg.batch_size`` of them."""
    return TensorDictReplayBuffer(
        storage=LazyTensorStorage(cfg.buffer_size, device=resolve_device(cfg.device)),
        sampler=RandomSampler(),
        batch_size=cfg.batch_size,
    )


def make_off_policy_update(
    cfg: OffPolicyConfig, actor, loss_module, loss_keys: tuple[str, ...]
) -> UpdateStep:
    """MADDPG's, IDDPG's and MASAC's gradient step on the sum of ``loss_module``'s
    ``loss_keys``: backward, clipping to ``cfg.max_grad_norm``, one Adam (the actor's
    parameters at ``cfg.lr_actor``, the rest at ``cfg.lr``), the targets' soft update
    (one graph with ``cfg.compile``). The optimizer's state and the target updater's
    live on ``cfg.device``, with the networks."""
    with torch.device(resolve_device(cfg.device)):
        target_updater = SoftUpdate(loss_module, tau=cfg.tau)
        # the actor's parameters are the actor module's own (the loss reads them in place)
        actor_ids = {id(p) for p in actor.parameters()}
        params = list(loss_module.parameters())
        optimizer = torch.optim.Adam(
            [
                {"params": [p for p in params if id(p) in actor_ids], "lr": cfg.lr_actor},
                {"params": [p for p in params if id(p) not in actor_ids], "lr": cfg.lr},
            ]
        )
        return UpdateStep(
            summed_losses(loss_module, loss_keys),
            optimizer,
            max_grad_norm=cfg.max_grad_norm,
            target_update=target_updater,
            compile=cfg.compile,
            cudagraphs=cfg.cudagraphs,
        )


def train_off_policy(
    cfg: OffPolicyConfig,
    algo: str,
    env,
    make_env,
    actor,
    loss_module,
    loss_keys: tuple[str, ...],
    exploration=None,
) -> dict:
    """The off-policy loop of MADDPG, IDDPG and MASAC: collect ``num_envs * collect_steps``
    frames with ``actor`` (followed by ``exploration``, whose ``step`` anneals it), store
    them with the done flags repeated along the agents, take ``updates_per_batch``
    gradient steps on the sum of ``loss_module``'s ``loss_keys`` (one Adam, gradients
    clipped), each followed by a soft update of the targets (one ``UpdateStep``: with
    ``cfg.compile``, the policy and the whole step are compiled once); evaluate the deterministic
    ``actor`` at the end on ``make_env(cfg, cfg.eval_episodes, seed)``. The loss module's
    keys must name the agents' reward and flags. The replay buffer lives on
    ``cfg.device``, with the networks and the env.

    Returns ``finish_run``'s summary.
    """
    device = resolve_device(cfg.device)
    policy = actor if exploration is None else TensorDictSequential(actor, exploration)
    collector = Collector(
        env,
        compile_group_policy(policy, compile=cfg.compile, cudagraphs=cfg.cudagraphs),
        frames_per_batch=cfg.num_envs * cfg.collect_steps,
        total_frames=cfg.total_frames,
        **collector_devices(device),
    )
    buffer = make_replay_buffer(cfg)
    # one gradient step (backward, clipping, Adam, soft update); one graph with --compile
    update = make_off_policy_update(cfg, actor, loss_module, loss_keys)
    exp_name = cfg.exp_name or generate_exp_name(algo, f"{cfg.scenario}-s{cfg.seed}")
    logger = get_logger(cfg.logger, logger_name=cfg.log_dir, experiment_name=exp_name)
    logger.log_hparams(dataclasses.asdict(cfg))

    progress = ProgressBar(cfg.progress, total=cfg.total_frames)
    returns = EpisodeReturns(window=cfg.num_envs)
    frames, start = 0, time.perf_counter()
    for batch in collector:
        frames += batch.numel()
        buffer.extend(agents_done(batch.exclude("collector")).reshape(-1))
        for _ in range(cfg.updates_per_batch):
            losses = update(buffer.sample())
        if exploration is not None:
            exploration.step(batch.numel())
        team = team_view(batch)
        returns.update(team)
        progress.observe(team)
        if returns.mean is not None:
            logger.log_scalar("train/episode_return", returns.mean, frames)
        values = {key: losses[key].item() for key in loss_keys}
        for key, value in values.items():
            logger.log_scalar(f"train/{key}", value, frames)
        progress.values["loss"] = sum(values.values())
        progress.update(batch.numel())
    seconds = time.perf_counter() - start
    collector.shutdown()
    progress.close()

    eval_env = make_env(cfg, cfg.eval_episodes, cfg.seed + 1000)
    return finish_run(logger, evaluate_team(eval_env, actor, cfg.max_steps), frames, seconds)
