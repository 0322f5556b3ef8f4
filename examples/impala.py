"""IMPALA (V-trace actor-critic) on CartPole-v1 with asynchronous collector processes.

Espeholt et al. 2018, "IMPALA: Scalable Distributed Deep-RL with Importance Weighted
Actor-Learner Architectures", https://arxiv.org/abs/1802.01561. Actors (worker processes
of a ``MultiAsyncCollector``, or Ray actors of a ``RayCollector`` with ``--ray``) step
their own envs with the weights they last received and hand each rollout over as soon as
it is ready; the learner takes one rollout (or ``--batch-size`` of them), corrects for the
lag between the actor's policy and its own with V-trace, takes one A2C-style gradient
step and pushes the new weights back. The behaviour log-probabilities ``log mu(a|s)`` are
the ones the actor's policy wrote while collecting (``action_log_prob``); ``log pi(a|s)``
is the learner's current policy scored on the same stored action.

As TorchRL's ``sota-implementations/impala``: ``A2CLoss`` on V-trace advantages and
targets, RMSprop, gradient clipping, the learning rate annealed to 0. The actor and critic
are ``ppo.py``'s MLPs, the per-actor batch and optimiser ``a2c.py``'s.

    uv run examples/impala.py                                   # 2 collector processes
    uv run examples/impala.py --seed 1 --num-workers 3
    uv run --group distributed examples/impala.py --ray         # Ray actors (local Ray)
    uv run examples/impala.py --device cuda --cudagraphs        # the learner on a GPU

``--device`` places the learner: its networks, V-trace, the loss, RMSprop and the update
step; each rollout is moved there before the update. The actors stay on the CPU, as in
IMPALA's design (many CPU actors feeding one accelerator learner): they act with a CPU
copy of the policy, which takes the learner's weights after each update, before they are
pushed (on the CPU, the copy is the policy itself).

``--compile`` compiles, as in ``a2c.py``, the learner's whole update step (V-trace with the
critic and the policy on the rollout, the loss, backward, clipping, RMSprop: one graph),
and each actor compiles its own copy of the policy in its own process, at its first step.
``--cudagraphs`` captures the learner's update step in a CUDA graph, V-trace then running
before it (compiled on its own with ``--compile``); it needs ``--device cuda``. Frames are
rounded up to whole updates, so that every update has one batch shape.

Writes CSV logs (or another logger) and a learning-curve PNG under ``runs/<exp_name>/``.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import functools
import sys
import time
from pathlib import Path
from typing import Literal

import torch
import tyro

from rl.collectors import MultiAsyncCollector
from rl.core import seed_everything
from rl.core.loggers import generate_exp_name, get_logger
from rl.objectives import A2CLoss
from rl.objectives.value.functional import vtrace_advantage_estimate

sys.path.insert(0, str(Path(__file__).parent))
from _common import (  # noqa: E402
    EpisodeReturns,
    ProgressBar,
    UpdateStep,
    check_cudagraphs,
    compile_advantage,
    compile_policy,
    evaluate,
    finish_run,
    make_base_env,
    on_cpu,
    resolve_device,
    set_lr,
    whole_batches,
)
from _ray_collector import ray_collector  # noqa: E402
from ppo import make_agent  # noqa: E402


@dataclasses.dataclass
class Config:
    """IMPALA hyperparameters. Each actor steps a2c.py's batch (RL-Zoo's tuned CartPole
    A2C: 8 envs x 5 steps, RMSprop 7e-4, no entropy bonus); 16-step rollouts at 1e-3 with
    an entropy bonus of 0.01 solved CartPole too, then fell back to about 200."""

    env_id: str = "CartPole-v1"
    """Gymnasium environment id with discrete actions (or a probe env name)."""
    total_frames: int = 500_000
    """Environment steps to train for, all actors together."""
    num_workers: int = 2
    """Actors: collector processes (or Ray actors with --ray)."""
    envs_per_worker: int = 8
    """Environments each actor steps together (a gymnasium vector env)."""
    num_steps: int = 5
    """Unroll length: steps per environment in one rollout an actor hands over."""
    batch_size: int = 1
    """Rollouts (from any actors) per gradient step."""
    lr: float = 7e-4
    """RMSprop learning rate."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over total_frames."""
    rmsprop_alpha: float = 0.99
    """RMSprop smoothing constant."""
    rmsprop_eps: float = 1e-5
    """RMSprop epsilon."""
    gamma: float = 0.99
    """Discount factor."""
    rho_thresh: float = 1.0
    """V-trace clip of the importance weights in the TD errors (rho bar)."""
    c_thresh: float = 1.0
    """V-trace clip of the trace coefficients (c bar)."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Gradient clipping norm."""
    hidden: int = 64
    """Width of the two hidden layers of actor and critic."""
    eval_interval: int = 25_000
    """Frames between two evaluations during training (deterministic episodes on other
    seeds than the final evaluation's); 0: none."""
    eval_interval_episodes: int = 5
    """Episodes of each evaluation during training."""
    keep_best: bool = True
    """End with the weights that scored best in the evaluations during training (as
    dqn.py, and SB3's EvalCallback); the last weights' return is logged as
    ``eval/last_weights_return``."""
    eval_episodes: int = 10
    """Deterministic evaluation episodes at the end."""
    ray: bool = False
    """Collect with Ray actors (a RayCollector, asynchronous) instead of worker processes."""
    ray_address: str | None = None
    """With --ray: None starts a local Ray instance; "auto" joins a running cluster."""
    num_cpus: int | None = None
    """With --ray: CPUs of the local Ray instance (default: all of this machine's)."""
    seed: int = 0
    """Seed of torch, numpy, python and the environments."""
    threads: int = 1
    """Torch CPU threads of the learner."""
    logger: Literal["csv", "tensorboard", "wandb", "mlflow"] = "csv"
    """Where the scalars go (CSV needs no extra package)."""
    log_dir: str = "runs"
    """Folder of the run's logs and curve."""
    exp_name: str | None = None
    """Name of the run (default: generated from the algorithm, env and seed)."""
    progress: bool = True
    """Show a progress bar (only when attached to a terminal)."""
    compile: bool = False
    """torch.compile the actors' policy and the learner's whole update step (V-trace, loss,
    backward, gradient clipping, optimizer step; V-trace on its own with ``cudagraphs``),
    once."""
    cudagraphs: bool = False
    """Capture the learner's update step in a CUDA graph (needs ``--device cuda``)."""
    device: str = "cpu"
    """Where the learner's networks, V-trace and the update step live: ``cpu``, ``cuda``,
    ``cuda:N``, or ``auto`` (CUDA where visible). The actors and their environments stay on
    the CPU, acting with a CPU copy of the policy (the learner's weights after each update);
    their rollouts are moved to the device; evaluations run a CPU copy of the policy."""


def total_frames(cfg: Config) -> int:
    """``cfg.total_frames`` rounded up to whole updates (``batch_size`` rollouts of
    ``envs_per_worker x num_steps``): every update sees one batch shape, so compiled it
    compiles once (and a CUDA graph replays it)."""
    return whole_batches(cfg.total_frames, cfg.envs_per_worker * cfg.num_steps * cfg.batch_size)


def make_collector(cfg: Config, actor):
    """Asynchronous actors: each hands over ``[envs_per_worker, num_steps]`` rollouts, on
    the CPU (``actor``: the CPU copy of the policy they act with).

    With ``cfg.compile`` each actor compiles its own copy of the policy, in its own process
    (a forked worker inherits the ``CompiledPolicy``; a Ray actor or a spawned worker
    rebuilds the one it is sent); the weights it receives are those of ``actor``.
    """
    make_env = functools.partial(make_base_env, cfg.env_id, cfg.envs_per_worker, categorical=True)
    frames_per_batch = cfg.envs_per_worker * cfg.num_steps
    policy = compile_policy(actor, compile=cfg.compile)
    if not cfg.ray:
        return MultiAsyncCollector(
            [make_env] * cfg.num_workers,
            policy,
            frames_per_batch=frames_per_batch,
            total_frames=total_frames(cfg),
        )
    return ray_collector(
        make_env,
        policy,
        frames_per_batch=frames_per_batch,
        total_frames=total_frames(cfg),
        num_collectors=cfg.num_workers,
        address=cfg.ray_address,
        num_cpus=cfg.num_cpus,
        compile=cfg.compile,
        sync=False,
        remote_configs={"num_cpus": 1},
    )


def vtrace(cfg: Config, actor, critic, batch) -> None:
    """Writes V-trace's ``advantage`` and ``value_target`` into ``batch`` ``[B, T]``.

    ``log pi`` is the learner's policy on the stored action, ``log mu`` the actor's
    log-probability recorded while collecting: their ratio is the correction for the lag.
    """
    value = critic(batch.select("observation"))["state_value"]
    next_value = critic(batch["next"].select("observation"))["state_value"]
    log_pi = actor.get_dist(batch).log_prob(batch["action"]).unsqueeze(-1)
    log_mu = batch[actor.log_prob_key].unsqueeze(-1)
    advantage, target = vtrace_advantage_estimate(
        cfg.gamma,
        log_pi,
        log_mu,
        value,
        next_value,
        batch["next", "reward"],
        batch["next", "done"],
        batch["next", "terminated"],
        rho_thresh=cfg.rho_thresh,
        c_thresh=cfg.c_thresh,
    )
    batch["advantage"], batch["value_target"] = advantage, target
    batch["importance_weight"] = (log_pi - log_mu).exp()


def make_update(cfg: Config, actor, critic):
    """The learner's optimizer, V-trace run before the step (only with ``cfg.cudagraphs``,
    else None) and its update step ``update(batch) -> {"loss", "importance_weight"}`` on a
    ``[B, T]`` batch of rollouts: V-trace with the weights as they are before the step,
    then one clipped A2C gradient step (backward, RMSprop); one graph with ``cfg.compile``.

    V-trace is part of the step, but with ``cfg.cudagraphs``: there it runs before the
    captured step, as a2c.py's advantage does (a replay runs no Python). The loss's own
    tensors and the optimizer's live on ``cfg.device``, with the networks.
    """
    with torch.device(resolve_device(cfg.device)):
        loss_module = A2CLoss(
            actor,
            critic,
            entropy_coeff=cfg.ent_coef,
            critic_coeff=cfg.vf_coef,
            loss_critic_type="l2",
        )
        lr = torch.tensor(cfg.lr) if cfg.compile else cfg.lr  # a tensor: annealed in place
        optimizer = torch.optim.RMSprop(
            loss_module.parameters(), lr=lr, alpha=cfg.rmsprop_alpha, eps=cfg.rmsprop_eps
        )
        corrected = functools.partial(vtrace, cfg, actor, critic)
        advantage = compile_advantage(corrected, compile=cfg.compile) if cfg.cudagraphs else None

        def impala_loss(batch):
            # (compiled: inside the update's graph) V-trace, unless it ran before the step,
            # on a shallow copy, then the rollouts flattened
            batch = batch.copy()
            if advantage is None:
                with torch.no_grad():
                    corrected(batch)
            losses = loss_module(batch.reshape(-1))
            loss = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
            return loss, {"loss": loss, "importance_weight": batch["importance_weight"].mean()}

        update = UpdateStep(
            impala_loss,
            optimizer,
            max_grad_norm=cfg.max_grad_norm,
            compile=cfg.compile,
            cudagraphs=cfg.cudagraphs,
        )
    return optimizer, advantage, update


def main(cfg: Config) -> dict:
    check_cudagraphs(cfg.cudagraphs)
    device = resolve_device(cfg.device)  # a device this machine lacks stops the run here
    seed_everything(cfg.seed)
    torch.set_num_threads(cfg.threads)
    # the networks are built on an actor's (batched) env, as the collectors run them, on
    # the CPU, then moved to cfg.device (make_agent); the actors act with a CPU copy
    actor, critic = make_agent(
        cfg, make_base_env(cfg.env_id, cfg.envs_per_worker, categorical=True)
    )
    acting = on_cpu(actor)
    eval_env = make_base_env(cfg.env_id, 1, categorical=True)

    optimizer, advantage, update = make_update(cfg, actor, critic)
    total = total_frames(cfg)
    exp_name = cfg.exp_name or generate_exp_name("impala", f"{cfg.env_id}-s{cfg.seed}")
    logger = get_logger(cfg.logger, logger_name=cfg.log_dir, experiment_name=exp_name)
    logger.log_hparams(dataclasses.asdict(cfg))

    progress = ProgressBar(cfg.progress, total=total)
    # an episode spans rollouts of one actor: returns are summed per actor, kept together
    returns_of: dict[int, EpisodeReturns] = {}
    recent: collections.deque[float] = collections.deque(maxlen=20)
    best_return, best_state, next_eval = -float("inf"), None, cfg.eval_interval
    frames, updates, rollouts, start = 0, 0, [], time.perf_counter()
    collector = make_collector(cfg, acting)
    try:
        collector.set_seed(cfg.seed)
        for rollout in collector:
            frames += rollout.numel()
            worker = int(rollout["collector", "traj_ids"].flatten()[0]) % cfg.num_workers
            episodes = returns_of.setdefault(worker, EpisodeReturns(window=100))
            episodes.update(rollout)
            recent.extend(episodes.recent)
            episodes.recent.clear()
            rollouts.append(rollout.exclude("collector"))
            progress.update(rollout.numel())
            if len(rollouts) < cfg.batch_size and frames < total:
                continue
            batch, rollouts = torch.cat(rollouts, 0).to(device), []
            if cfg.anneal_lr:
                set_lr(optimizer, cfg.lr * max(1.0 - frames / total, 0.0))
            if advantage is not None:
                advantage(batch)
            logs = update(batch)
            updates += 1
            if acting is not actor:  # the learner on another device: its CPU copy follows
                acting.load_state_dict(actor.state_dict())
            collector.update_policy_weights_()  # actors use them from their next rollout

            if recent:
                mean_return = sum(recent) / len(recent)
                logger.log_scalar("train/episode_return", mean_return, frames)
                progress.values["return"] = mean_return
            loss = logs["loss"].item()
            logger.log_scalar("train/loss", loss, frames)
            logger.log_scalar("train/importance_weight", logs["importance_weight"], frames)
            progress.values["loss"] = loss
            if cfg.eval_interval and frames >= next_eval:
                next_eval += cfg.eval_interval
                eval_env.set_seed(2000 + frames)
                scores = evaluate(eval_env, actor, cfg.eval_interval_episodes)
                mean_return = sum(scores) / len(scores)
                logger.log_scalar("eval/interval_return", mean_return, frames)
                if mean_return >= best_return:  # ties: the later weights
                    best_return = mean_return
                    best_state = copy.deepcopy((actor.state_dict(), critic.state_dict()))
        seconds = time.perf_counter() - start
    finally:
        collector.shutdown()  # stops the worker processes (and a Ray instance it started)
        progress.close()

    if cfg.keep_best and best_state is not None:
        eval_env.set_seed(cfg.seed + 3000)
        last = evaluate(eval_env, actor, cfg.eval_episodes)
        logger.log_scalar("eval/last_weights_return", sum(last) / len(last), frames)
        actor.load_state_dict(best_state[0])
        critic.load_state_dict(best_state[1])
    eval_env.set_seed(cfg.seed + 1000)
    summary = finish_run(logger, evaluate(eval_env, actor, cfg.eval_episodes), frames, seconds)
    return {**summary, "updates": updates, "actor": actor, "critic": critic}


if __name__ == "__main__":
    main(tyro.cli(Config, description=__doc__))
