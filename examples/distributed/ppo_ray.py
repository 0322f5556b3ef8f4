"""PPO on CartPole-v1 with its rollouts collected by Ray actors, on a laptop or a cluster.

The same agent, loss and hyperparameters as ``examples/ppo.py`` (RL-Zoo's CartPole
settings); only the collector changes: a :class:`~rl.collectors.distributed.RayCollector`
runs ``--num-collectors`` actors, each stepping its share of the envs, and the learner
here stacks one batch of every actor (sync mode), runs the PPO epochs, and broadcasts the
new weights through Ray's object store before the next batch. Schulman et al. 2017,
https://arxiv.org/abs/1707.06347.

    uv run --group distributed examples/distributed/ppo_ray.py                     # a local Ray instance
    uv run --group distributed examples/distributed/ppo_ray.py --ray-address auto  # the cluster of `ray start`
    uv run --group distributed examples/distributed/ppo_ray.py --device cuda --cudagraphs

``--device`` places the learner (the networks, GAE, the loss, Adam and the update step);
each batch is moved there before the advantage. The Ray actors stay on the CPU (they ask
Ray for CPUs only): they act with a CPU copy of the policy, which takes the learner's
weights after each update, the weights Ray then broadcasts (on the CPU, the copy is the
policy itself).

``--compile`` compiles, as in ``examples/ppo.py``, the learner's whole update step (loss,
backward, clipping, Adam: one graph) and its advantage (GAE with the value network), and
each actor compiles its own copy of the policy (the ``CompiledPolicy`` sent to the actors
is rebuilt there, compiled at its first step). ``--cudagraphs`` captures the learner's
update step in a CUDA graph (it needs ``--device cuda``).

See examples/distributed/README.md for starting a multi-node cluster.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import time
from pathlib import Path

import ray
import torch
import tyro

from rl.collectors.distributed import RayCollector
from rl.core import seed_everything
from rl.core.loggers import generate_exp_name, get_logger

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _common  # noqa: E402
import ppo  # noqa: E402
from _common import (  # noqa: E402
    EpisodeReturns,
    ProgressBar,
    check_cudagraphs,
    compile_policy,
    evaluate,
    finish_run,
    make_base_env,
    on_cpu,
    resolve_device,
    set_lr,
    whole_batches,
)

# the env factory comes from examples/_common.py, which the actors cannot import (on a
# cluster the examples folder is not on the other nodes): Ray sends it by value (and,
# with --compile, the inductor pass a compiled policy's options hold: main())
ray.cloudpickle.register_pickle_by_value(_common)


@dataclasses.dataclass
class Config(ppo.Config):
    """PPO's hyperparameters (``examples/ppo.py``'s CartPole preset) and where to run."""

    ray_address: str | None = None
    """None starts a local Ray instance; "auto" (or "HEAD_IP:6379") joins the cluster that
    `ray start` runs."""
    num_collectors: int = 2
    """Ray actors collecting; each steps num_envs / num_collectors envs."""
    cpus_per_collector: float = 1.0
    """CPUs Ray reserves for each actor."""
    num_cpus: int | None = None
    """CPUs of the local Ray instance (default: all of this machine's)."""
    device: str = "cpu"
    """Where the learner's networks, the advantage and the update step live: ``cpu``,
    ``cuda``, ``cuda:N``, or ``auto`` (CUDA where visible). The Ray actors and their
    environments stay on the CPU, acting with a CPU copy of the policy (the learner's
    weights after each update); each batch is moved to the device; the evaluation runs a
    CPU copy of the policy."""


def main(cfg: Config) -> dict:
    if cfg.num_envs % cfg.num_collectors:
        raise ValueError(
            f"num_envs={cfg.num_envs} must be a multiple of num_collectors={cfg.num_collectors}"
        )
    if cfg.normalize_obs:
        raise ValueError("normalize_obs is not supported here: use examples/ppo.py")
    check_cudagraphs(cfg.cudagraphs)
    device = resolve_device(cfg.device)  # a device this machine lacks stops the run here
    if cfg.compile:  # imports inductor: only when compiling
        import _compile_passes

        ray.cloudpickle.register_pickle_by_value(_compile_passes)
    seed_everything(cfg.seed)
    torch.set_num_threads(1)
    envs_per_collector = cfg.num_envs // cfg.num_collectors
    make_env = functools.partial(make_base_env, cfg.env_id, envs_per_collector, categorical=True)
    # built on the CPU, moved to cfg.device (make_agent); the actors act with a CPU copy
    actor, critic = ppo.make_agent(cfg, make_env())
    acting = on_cpu(actor)

    if cfg.ray_address is not None:
        ray_init_config = {"address": cfg.ray_address}
    else:
        ray_init_config = {"address": "local", "num_cpus": cfg.num_cpus, "include_dashboard": False}
    frames_per_batch = cfg.num_envs * cfg.num_steps
    total_frames = whole_batches(cfg.total_frames, frames_per_batch)
    start_up = time.perf_counter()
    collector = RayCollector(
        make_env,
        # compiled: each actor rebuilds the CompiledPolicy and compiles its own copy; the
        # weights it receives are those of ``acting`` (its parameters, shared)
        compile_policy(acting, compile=cfg.compile),
        frames_per_batch=frames_per_batch,
        total_frames=total_frames,
        num_collectors=cfg.num_collectors,
        sync=True,
        update_after_each_batch=True,  # on-policy: every batch acts with the latest weights
        ray_init_config=ray_init_config,
        remote_configs={"num_cpus": cfg.cpus_per_collector},
    )
    collector.set_seed(cfg.seed)
    start_up = time.perf_counter() - start_up
    advantage = ppo.make_advantage(cfg, critic)
    loss_module, optimizer = ppo.make_loss(cfg, actor, critic)
    step = ppo.make_update_step(cfg, loss_module, optimizer)
    exp_name = cfg.exp_name or generate_exp_name("ppo_ray", f"{cfg.env_id}-s{cfg.seed}")
    logger = get_logger(cfg.logger, logger_name=cfg.log_dir, experiment_name=exp_name)
    logger.log_hparams(dataclasses.asdict(cfg))

    num_updates = total_frames // frames_per_batch
    minibatch = frames_per_batch // cfg.num_minibatches
    progress = ProgressBar(cfg.progress, total=cfg.total_frames)
    returns = EpisodeReturns(window=20)
    losses_seen: list[float] = []
    frames, start = 0, time.perf_counter()
    try:
        # a batch is [num_collectors, envs_per_collector, num_steps]: time stays last
        for update, batch in enumerate(collector):
            frames += batch.numel()
            if cfg.anneal_lr:
                set_lr(optimizer, cfg.lr * (1.0 - update / num_updates))
            batch = advantage(batch.to(device))
            loss = ppo.update_epochs(cfg, loss_module, optimizer, batch, minibatch, step)
            if acting is not actor:  # the learner on another device: its CPU copy follows
                acting.load_state_dict(actor.state_dict())  # (pushed before the next batch)
            losses_seen.append(loss.item())
            returns.update(batch.reshape(-1, batch.shape[-1]))
            if returns.mean is not None:
                logger.log_scalar("train/episode_return", returns.mean, frames)
            logger.log_scalar("train/loss", loss.item(), frames)
            progress.values["loss"] = loss.item()
            progress.update(batch.numel())
        seconds = time.perf_counter() - start
    finally:
        collector.shutdown()  # also stops the local Ray instance it started
        progress.close()

    eval_env = make_base_env(cfg.env_id, 1, categorical=True)
    eval_env.set_seed(cfg.seed + 1000)
    summary = finish_run(logger, evaluate(eval_env, actor, cfg.eval_episodes), frames, seconds)
    print(f"Ray start-up and actors: {start_up:.1f} s")
    finite = all(math.isfinite(v) for v in losses_seen)
    return {
        **summary,
        "start_up_seconds": start_up,
        "losses": losses_seen,
        "losses_finite": finite,
        "actor": actor,
        "critic": critic,
    }


if __name__ == "__main__":
    main(tyro.cli(Config, description=__doc__))
