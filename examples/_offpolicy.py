"""Glue shared by the off-policy examples (dqn, ddpg, td3, sac, redq, crossq, offline).

Bookkeeping and the common networks live here: the environment with its episode
counters, the actors and critics several scripts build alike, the replay buffer (in
memory, or memory-mapped as the offline dataset), the logger, the per-batch log line and
the final evaluation. Every algorithm's loss and update loop stay in its own script, to
be read top to bottom.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Literal

import torch
from torch import nn

from rl.core.loggers import generate_exp_name, get_logger
from rl.data import (
    LazyMemmapStorage,
    LazyTensorStorage,
    PrioritizedSampler,
    RandomSampler,
    TensorDictReplayBuffer,
)
from rl.envs import Compose, DoubleToFloat, RewardSum, StepCounter, TransformedEnv
from rl.modules import (
    MLP,
    AdditiveGaussianModule,
    EGreedyModule,
    NormalParamExtractor,
    ProbabilisticActor,
    RandomPolicy,
    TanhModule,
    TanhNormal,
    TensorDictModule,
    TensorDictSequential,
    ValueOperator,
)
from rl.objectives import SoftUpdate

sys.path.insert(0, str(Path(__file__).parent))
from _common import (  # noqa: E402
    ProgressBar,
    UpdateStep,
    collector_devices,
    compile_policy,
    compile_update,
    evaluate,
    finish_run,
    make_base_env,
    prime_soft_update,
    record_video,
    resolve_device,
    set_lr,
    summed_losses,
    zero_grad,
)
from _common import preset_cli as cli  # noqa: E402

__all__ = [
    "TRANSITION_KEYS",
    "collector_devices",
    "compile_policy",
    "compile_update",
    "prime_soft_update",
    "resolve_device",
    "set_lr",
    "zero_grad",
    "BestWeights",
    "Run",
    "RunConfig",
    "cli",
    "make_deterministic_actor",
    "make_egreedy",
    "make_env",
    "make_exploration_policy",
    "make_qvalue",
    "make_replay_buffer",
    "make_tanh_normal_actor",
    "open_dataset",
    "save_dataset",
    "summed_update",
    "transitions",
]

#: what a transition holds in the replay buffers (what every off-policy loss reads)
TRANSITION_KEYS = (
    "observation",
    "action",
    ("next", "observation"),
    ("next", "reward"),
    ("next", "done"),
    ("next", "terminated"),
)

#: name of the file that ``sac.py --save-buffer`` writes next to the memmap storage
DATASET_INFO = "dataset.json"


@dataclasses.dataclass
class RunConfig:
    """The fields every off-policy example shares: seeding, logging, evaluation."""

    seed: int = 0
    """Seed of torch, numpy, python and the environments."""
    eval_episodes: int = 10
    """Deterministic evaluation episodes at the end."""
    logger: Literal["csv", "tensorboard", "wandb", "mlflow"] = "csv"
    """Where the scalars go (CSV needs no extra package)."""
    log_dir: str = "runs"
    """Folder of the run's logs, curve and video."""
    exp_name: str | None = None
    """Name of the run (default: generated from the algorithm, env and seed)."""
    video: bool = False
    """Record an evaluation episode as a video (needs a rendering env)."""
    progress: bool = True
    """Show a progress bar (only when attached to a terminal)."""
    threads: int = 1
    """torch CPU threads (small networks run fastest on one)."""
    compile: bool = False
    """torch.compile the collector's policy and the whole update step (loss, backward,
    optimizer step, target update), once."""
    cudagraphs: bool = False
    """Capture the update step and the policy in CUDA graphs (needs ``--device cuda``)."""
    device: str = "cpu"
    """Where the networks, the update step and the replay buffer live: ``cpu``, ``cuda``,
    ``cuda:N``, or ``auto`` (CUDA where visible). The environments stay on the CPU (the
    collector moves what they return; an offline script moves each sampled batch);
    evaluations run a CPU copy of the policy."""


@dataclasses.dataclass
class ContinuousConfig(RunConfig):
    """The hyperparameters the continuous-action examples share (SAC, TD3, DDPG, REDQ,
    CrossQ), with RL-Zoo's names in parentheses; each example adds its own."""

    env_id: str = "Pendulum-v1"
    """Gymnasium (or probe) environment id with Box actions."""
    total_frames: int = 20_000
    """Environment steps to train for (n_timesteps)."""
    init_random_frames: int = 1_000
    """Frames of uniformly random actions before learning starts (learning_starts)."""
    frames_per_batch: int = 10
    """Frames collected between two rounds of updates (train_freq)."""
    utd_ratio: float = 1.0
    """Gradient steps per collected frame (gradient_steps / train_freq)."""
    buffer_size: int = 100_000
    """Replay buffer capacity."""
    batch_size: int = 256
    """Transitions per gradient step."""
    lr: float = 1e-3
    """Adam learning rate of every network (and of the temperature where there is one)."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak averaging rate of the target networks."""
    hidden: int = 64
    """Width of the two hidden layers of actor and critics (RL-Zoo: 256; 64 learns
    Pendulum as well and keeps a 2-core CPU fast)."""


def make_env(env_id: str, num_envs: int = 1, *, from_pixels: bool = False) -> TransformedEnv:
    """The gymnasium (or probe) env with float observations and episode counters."""
    base = make_base_env(env_id, num_envs, from_pixels=from_pixels)
    return TransformedEnv(base, Compose(DoubleToFloat(), StepCounter(), RewardSum()))


def make_tanh_normal_actor(env, hidden: int, depth: int = 2, device=None) -> ProbabilisticActor:
    """The stochastic actor of SAC and its kin: an MLP gives the mean and scale of a
    Gaussian squashed by ``tanh`` into the action spec's bounds (deterministic mode: the
    squashed mean); on ``device`` (default: the CPU)."""
    spec = env.action_spec
    net = nn.Sequential(
        MLP(out_features=2 * spec.shape[-1], num_cells=[hidden] * depth, activation_class=nn.ReLU),
        NormalParamExtractor(scale_mapping="biased_softplus_1.0", scale_lb=0.1),
    )
    actor = ProbabilisticActor(
        TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        spec=spec,
        distribution_class=TanhNormal,
        distribution_kwargs={"low": spec.space.low, "high": spec.space.high},
    )
    with torch.no_grad():  # materialise the lazy first layer
        actor(env.fake_tensordict())
    return actor.to(device) if device is not None else actor


def make_deterministic_actor(env, hidden: int, depth: int = 2, device=None) -> TensorDictSequential:
    """The deterministic actor of DDPG and TD3: an MLP whose output a ``tanh`` maps into
    the action spec's bounds; on ``device`` (default: the CPU)."""
    spec = env.action_spec
    actor = TensorDictSequential(
        TensorDictModule(
            MLP(out_features=spec.shape[-1], num_cells=[hidden] * depth, activation_class=nn.ReLU),
            in_keys=["observation"],
            out_keys=["param"],
        ),
        TanhModule(in_keys=["param"], out_keys=["action"], spec=spec),
    )
    with torch.no_grad():
        actor(env.fake_tensordict())
    return actor.to(device) if device is not None else actor


def make_exploration_policy(cfg, env, actor) -> TensorDictSequential:
    """The actor followed by Gaussian noise of std ``cfg.exploration_noise`` times the
    action range's half-width, on ``cfg.device`` with the actor (what the collector runs)."""
    spec = env.action_spec
    sigma = cfg.exploration_noise * float((spec.space.high - spec.space.low).max()) / 2
    # built on the device (buffers and spec): the noise is drawn and clamped there
    device = resolve_device(cfg.device)
    exploration = AdditiveGaussianModule(spec, sigma_init=sigma, sigma_end=sigma, device=device)
    return TensorDictSequential(actor, exploration)


def make_egreedy(
    env, eps_start: float, eps_end: float, annealing_frames: float, device: str
) -> EGreedyModule:
    """Epsilon-greedy exploration, epsilon annealed from ``eps_start`` to ``eps_end`` over
    the first ``annealing_frames`` frames (the exploration fraction times the total, at
    least one); its epsilon and action spec on ``device``, where the random actions are
    drawn (inside the captured policy with cudagraphs)."""
    return EGreedyModule(
        env.action_spec,
        eps_init=eps_start,
        eps_end=eps_end,
        annealing_num_steps=max(int(annealing_frames), 1),
        device=resolve_device(device),
    )


class _NormedInput(nn.Module):
    """Normalises the concatenated inputs before the network (CrossQ's input layer)."""

    def __init__(self, norm: nn.Module, net: nn.Module) -> None:
        super().__init__()
        self.norm, self.net = norm, net

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.net(self.norm(torch.cat(inputs, -1)))


def make_qvalue(
    env,
    hidden: int,
    depth: int = 2,
    input_norm: nn.Module | None = None,
    out_features: int = 1,
    device=None,
    **mlp_kwargs,
) -> ValueOperator:
    """A Q-network ``Q(observation, action)`` writing ``"state_action_value"``; with
    ``input_norm``, that layer first normalises the concatenated observation and action;
    ``out_features > 1`` writes that many values (TQC's return quantiles); on ``device``
    (default: the CPU)."""
    mlp_kwargs.setdefault("activation_class", nn.ReLU)
    net = MLP(out_features=out_features, num_cells=[hidden] * depth, **mlp_kwargs)
    if input_norm is not None:
        net = _NormedInput(input_norm, net)
    qvalue = ValueOperator(net, in_keys=["observation", "action"])
    with torch.no_grad():
        td = env.fake_tensordict()
        td["action"] = env.action_spec.zero()
        qvalue.eval()  # batch-normalised critics: running statistics for this dry run
        qvalue(td.expand(2, *td.shape).reshape(-1))
        qvalue.train()
    return qvalue.to(device) if device is not None else qvalue


def summed_update(
    cfg,
    loss_module,
    terms: tuple[str, ...] = ("loss_actor", "loss_qvalue", "loss_alpha"),
    logs: tuple[str, ...] = ("loss_actor", "loss_qvalue", "alpha"),
):
    """One gradient step of the sum of ``loss_module``'s ``terms`` (backward, Adam at
    ``cfg.lr`` over all its parameters, the soft target update at ``cfg.tau``); one graph
    with ``cfg.compile``. ``update(sample)`` returns the losses' ``logs`` entries."""
    return UpdateStep(
        summed_losses(loss_module, terms, logs),
        torch.optim.Adam(loss_module.parameters(), lr=cfg.lr),
        target_update=SoftUpdate(loss_module, tau=cfg.tau),
        compile=cfg.compile,
        cudagraphs=cfg.cudagraphs,
    )


def make_replay_buffer(
    size: int,
    batch_size: int,
    *,
    prioritized: bool = False,
    alpha: float = 0.6,
    beta: float = 0.4,
    scratch_dir: str | Path | None = None,
    device="cpu",
) -> TensorDictReplayBuffer:
    """A uniform (or prioritized) replay buffer in memory on ``device``, or memory-mapped
    in ``scratch_dir`` (the dataset ``offline.py`` reads; its samples sent to ``device``)."""
    if scratch_dir is not None:
        storage = LazyMemmapStorage(size, scratch_dir=scratch_dir, existsok=False, device=device)
    else:
        storage = LazyTensorStorage(size, device=device)
    sampler = PrioritizedSampler(size, alpha=alpha, beta=beta) if prioritized else RandomSampler()
    return TensorDictReplayBuffer(storage=storage, sampler=sampler, batch_size=batch_size)


def transitions(batch):
    """A collected batch as a flat batch of transitions, with only :data:`TRANSITION_KEYS`."""
    return batch.reshape(-1).select(*TRANSITION_KEYS)


def save_dataset(buffer, path: str | Path, cfg, policy_return: float) -> dict:
    """Completes a replay buffer kept in ``path`` (a memmap storage) as an offline dataset:
    writes ``dataset.json`` with its capacity and length, the env, and the evaluation
    returns of the data-collecting policy and of uniformly random actions (the two ends
    of the normalised score ``offline.py`` reports)."""
    env = make_env(cfg.env_id)
    env.set_seed(cfg.seed + 2000)
    random_returns = evaluate(env, RandomPolicy(env.action_spec), cfg.eval_episodes)
    info = {
        "env_id": cfg.env_id,
        "max_size": buffer.storage.max_size,
        "length": len(buffer),
        "policy_return": policy_return,
        "random_return": sum(random_returns) / len(random_returns),
        "seed": cfg.seed,
    }
    (Path(path) / DATASET_INFO).write_text(json.dumps(info, indent=2))
    print(f"dataset of {len(buffer)} transitions saved in {path}")
    return info


def open_dataset(path: str | Path, batch_size: int) -> tuple[TensorDictReplayBuffer, dict]:
    """Reopens the memmap replay buffer that ``sac.py --save-buffer`` kept in ``path``;
    returns it (uniform sampling) and its ``dataset.json``."""
    file = Path(path) / DATASET_INFO
    if not file.exists():
        raise FileNotFoundError(
            f"no dataset at '{path}' (missing {DATASET_INFO}); write one with "
            "`uv run examples/sac.py --save-buffer DIR`"
        )
    info = json.loads(file.read_text())
    storage = LazyMemmapStorage(info["max_size"], scratch_dir=path)
    buffer = TensorDictReplayBuffer(storage=storage, batch_size=batch_size)
    if len(buffer) != info["length"]:
        raise ValueError(
            f"the dataset at '{path}' holds {len(buffer)} transitions, its {DATASET_INFO} "
            f"says {info['length']}"
        )
    return buffer, info


class Run:
    """One training run's logger, progress bar, frame counter and clock.

    ``observe(batch)`` counts frames and logs the returns of the episodes that ended;
    ``log(**scalars)`` logs losses at the current frame; ``finish(env_id, policy)``
    evaluates ``policy`` deterministically, writes the curve (and the video) and returns
    the summary dict. ``eval_transform`` (a clone of it) is appended to every evaluation
    env: the observation normalisation that an offline learner's networks were trained with.
    """

    def __init__(self, algo: str, cfg, total_frames: int, eval_transform=None) -> None:
        name = cfg.exp_name or generate_exp_name(algo, f"{cfg.env_id}-s{cfg.seed}")
        self.cfg = cfg
        self.eval_transform = eval_transform
        self.logger = get_logger(cfg.logger, logger_name=cfg.log_dir, experiment_name=name)
        self.logger.log_hparams(dataclasses.asdict(cfg))
        self.bar = ProgressBar(cfg.progress, total_frames)
        self.frames = 0
        self.start = time.perf_counter()

    def observe(self, batch) -> None:
        self.frames += batch.numel()
        self.bar.observe(batch)
        done = batch["next", "done"]
        if done.any():
            returns = batch["next", "episode_reward"][done]
            self.logger.log_scalar("train/episode_return", returns.mean().item(), self.frames)

    def log(self, **scalars: float) -> None:
        for key, value in scalars.items():
            value = float(value)
            self.logger.log_scalar(f"train/{key}", value, self.frames)
            self.bar.values[key] = value

    def step_bar(self, frames: int) -> None:
        self.bar.update(frames)

    def evaluate(self, env_id: str, policy, episodes: int, seed_offset: int = 1000) -> list[float]:
        """Returns of ``episodes`` deterministic episodes of ``policy``, on an env seeded
        ``seed_offset`` apart from the training env (the final evaluation's offset is 1000;
        evaluations during training use others, so that choosing weights by them does not
        choose the final evaluation's episodes)."""
        eval_env = self._eval_env(env_id)
        eval_env.set_seed(self.cfg.seed + seed_offset)
        return evaluate(eval_env, policy, episodes)

    def _eval_env(self, env_id: str, from_pixels: bool = False) -> TransformedEnv:
        env = make_env(env_id, from_pixels=from_pixels)
        if self.eval_transform is not None:
            env.append_transform(self.eval_transform.clone())
        return env

    def finish(self, env_id: str, policy, curve_key: str | None = None, **modules) -> dict:
        """Evaluates ``policy``, writes the curve and the video; returns the summary with
        ``modules`` (the trained networks, for tests to inspect).

        ``curve_key`` draws the curve of another scalar than the training episodes'
        returns (offline learning has none: it draws its periodic evaluations).
        """
        self.bar.close()
        seconds = time.perf_counter() - self.start
        returns = self.evaluate(env_id, policy, self.cfg.eval_episodes)
        summary = finish_run(
            self.logger,
            returns,
            self.frames,
            seconds,
            curve_key=curve_key or "train/episode_return",
            unit="frames" if curve_key is None else "steps",
        )
        if self.cfg.video:
            video = record_video(self._eval_env(env_id, from_pixels=True), policy, self.logger)
            summary["video"] = video
            print(f"evaluation video: {video}")
        summary.update(modules)
        return summary


class BestWeights:
    """Evaluates ``policy`` every ``interval`` frames on ``episodes`` deterministic
    episodes (logged as ``eval/return``) and keeps the state of ``module`` that scored
    best, as SB3's EvalCallback keeps its best model; ``restore()`` logs the last
    weights' return as ``eval/last_weights_return`` and loads the best ones. An interval
    of 0 evaluates nothing and restores nothing."""

    def __init__(
        self, run: Run, env_id: str, policy, module: nn.Module, interval: int, episodes: int
    ):
        self.run, self.env_id, self.policy, self.module = run, env_id, policy, module
        self.interval, self.episodes = interval, episodes
        self.next_eval, self.best_return, self.best_state = interval, -float("inf"), None

    def step(self) -> None:
        """Evaluates when the run has passed the next evaluation's frame."""
        if not self.interval or self.run.frames < self.next_eval:
            return
        self.next_eval += self.interval
        # seeds apart from the final evaluation's (1000) and the last weights' (3000)
        returns = self.run.evaluate(self.env_id, self.policy, self.episodes, 2000 + self.run.frames)
        mean_return = sum(returns) / len(returns)
        self.run.logger.log_scalar("eval/return", mean_return, self.run.frames)
        if mean_return >= self.best_return:  # ties: the later weights
            self.best_return, self.best_state = mean_return, copy.deepcopy(self.module.state_dict())

    def restore(self, episodes: int) -> None:
        if self.best_state is None:
            return
        returns = self.run.evaluate(self.env_id, self.policy, episodes, 3000)
        self.run.logger.log_scalar(
            "eval/last_weights_return", sum(returns) / len(returns), self.run.frames
        )
        self.module.load_state_dict(self.best_state)
