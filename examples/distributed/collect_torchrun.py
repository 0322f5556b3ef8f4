"""REINFORCE on CartPole with collectors on other torch.distributed ranks.

Rank 0 is the learner: it iterates a ``DistributedDataCollector``, takes a policy-gradient
step on each batch and sends the new weights back with ``update_policy_weights_()``.
Every other rank runs a collector worker (``DistributedDataCollector.run_worker()``).
The same script runs in two ways:

    # under torchrun: 1 learner + 2 collector ranks on this machine
    torchrun --standalone --nproc-per-node 3 examples/distributed/collect_torchrun.py
    # on several nodes (see README.md, "torch.distributed"): the same command on each node with
    #   --nnodes 2 --node-rank K --rdzv-backend c10d --rdzv-endpoint HOST:29400
    # stand-alone: the learner starts its 2 worker processes itself (launcher="mp")
    uv run examples/distributed/collect_torchrun.py --num-workers 2
    # the learner's policy and update step on a GPU (the collector ranks stay on the CPU)
    uv run examples/distributed/collect_torchrun.py --device cuda --cudagraphs

Williams 1992, "Simple statistical gradient-following algorithms for connectionist
reinforcement learning", https://doi.org/10.1007/BF00992696. Episodes that run across
two batches are cut at the batch end (their reward-to-go is truncated): this script is
about the distributed plumbing, not a tuned learner.

``--device`` places the learner (the policy, Adam and the update step); each batch is
moved there before the step. The collector ranks stay on the CPU: they act with a CPU copy
of the policy, which takes the learner's weights after each step, before they are sent
(on the CPU, the copy is the policy itself).

``--compile`` compiles the collecting policy (each collector rank rebuilds the
``CompiledPolicy`` it receives and compiles its own copy at its first step) and the
learner's whole update step (reward-to-go, the normalised advantage, the loss, backward
and Adam: one graph, ``examples/_common.py``'s ``UpdateStep``). ``--cudagraphs`` captures
the learner's update step in a CUDA graph (it needs ``--device cuda``).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Literal

import torch
import tyro
from tensordict.nn import TensorDictModule
from torch import nn

from rl.collectors.distributed import DistributedDataCollector
from rl.envs import CartPoleEnv
from rl.modules import MLP, ProbabilisticActor
from rl.objectives.value.functional import reward2go

# the collector ranks unpickle the compiled policy's class from examples/_common.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import (  # noqa: E402
    UpdateStep,
    check_cudagraphs,
    compile_policy,
    on_cpu,
    resolve_device,
)


@dataclasses.dataclass
class Config:
    total_frames: int = 20_000
    """frames to collect in all (exact)"""
    frames_per_batch: int = 500
    """frames per batch (with --sync, all workers together)"""
    num_workers: int = 2
    """worker processes when run stand-alone (under torchrun: every rank but 0)"""
    sync: bool = False
    """stack one piece of every worker per batch instead of first-come batches"""
    backend: Literal["gloo", "nccl"] = "gloo"
    """torch.distributed backend (nccl needs one GPU per rank)"""
    lr: float = 1e-2
    """Adam learning rate"""
    gamma: float = 0.99
    """discount of the reward-to-go"""
    seed: int = 0
    """seed of the learner and (chained) of the workers"""
    compile: bool = False
    """torch.compile the collecting policy (on each collector rank) and the learner's
    whole update step (one graph), once"""
    cudagraphs: bool = False
    """capture the learner's update step in a CUDA graph (needs --device cuda)"""
    device: str = "cpu"
    """where the learner's policy, Adam and update step live: cpu, cuda, cuda:N or auto
    (CUDA where visible); the collector ranks act with a CPU copy of the policy (the
    learner's weights after each step) and each batch is moved to the device"""


def make_env() -> CartPoleEnv:
    return CartPoleEnv(categorical_action_encoding=True)


def make_policy(env: CartPoleEnv) -> ProbabilisticActor:
    logits = TensorDictModule(
        MLP(in_features=4, out_features=2, num_cells=[64], activation_class=nn.Tanh),
        in_keys=["observation"],
        out_keys=["logits"],
    )
    return ProbabilisticActor(
        logits,
        in_keys=["logits"],
        spec=env.full_action_spec["action"],
        distribution_class=torch.distributions.Categorical,
    )


def make_learner(cfg: Config, policy: ProbabilisticActor) -> tuple[torch.optim.Adam, UpdateStep]:
    """Adam over ``policy`` and one REINFORCE step on a batch: reward-to-go, advantage
    normalised over the batch, ``-mean(log_prob * advantage)``, backward, Adam; one graph
    with ``cfg.compile``. The optimizer's state lives on ``cfg.device``, with the policy.
    Returns ``(optimizer, step)``, ``step(batch)`` returning the loss."""
    with torch.device(resolve_device(cfg.device)):
        optim = torch.optim.Adam(policy.parameters(), lr=cfg.lr)

        def reinforce_loss(batch):
            reward, done = batch["next", "reward"], batch["next", "done"]
            returns = reward2go(reward, done, cfg.gamma).squeeze(-1)
            advantage = (returns - returns.mean()) / (returns.std() + 1e-6)
            log_prob = policy.get_dist(batch).log_prob(batch["action"])
            loss = -(log_prob * advantage).mean()
            return loss, loss

        step = UpdateStep(reinforce_loss, optim, compile=cfg.compile, cudagraphs=cfg.cudagraphs)
    return optim, step


def learner(cfg: Config, launcher: Literal["mp", "torchrun"]) -> dict:
    """Rank 0: trains on the workers' batches; returns the frames, the seconds and the
    policy."""
    check_cudagraphs(cfg.cudagraphs)
    device = resolve_device(cfg.device)  # a device this machine lacks stops the run here
    torch.manual_seed(cfg.seed)
    policy = make_policy(make_env()).to(device)
    acting = on_cpu(policy)  # what the collector ranks run (the policy itself on the CPU)
    _, step = make_learner(cfg, policy)
    collector = DistributedDataCollector(
        make_env,
        compile_policy(acting, compile=cfg.compile),
        frames_per_batch=cfg.frames_per_batch,
        total_frames=cfg.total_frames,
        sync=cfg.sync,
        backend=cfg.backend,
        launcher=launcher,
        num_workers=cfg.num_workers if launcher == "mp" else None,
    )
    collector.set_seed(cfg.seed)
    start, frames = time.perf_counter(), 0
    for i, batch in enumerate(collector):
        frames += batch.numel()
        step(batch.to(device))
        if acting is not policy:  # the learner on another device: its CPU copy follows
            acting.load_state_dict(policy.state_dict())
        collector.update_policy_weights_()  # the workers' next batches use these weights
        if i % 5 == 0:
            done = batch["next", "done"]
            episodes = int(done.sum())
            mean_len = done.numel() / max(episodes, 1)
            print(f"batch {i:3d}  frames {frames:6d}  mean episode length {mean_len:6.1f}")
    elapsed = time.perf_counter() - start
    collector.shutdown()
    print(f"frames {frames} in {elapsed:.1f} s ({frames / elapsed:.0f} frames/s)")
    return {"frames": frames, "seconds": elapsed, "policy": policy}


def main(cfg: Config) -> dict | None:
    """The learner's summary (:func:`learner`) on rank 0; None on a collector rank."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # launched by torchrun
        if int(os.environ["RANK"]) == 0:
            return learner(cfg, "torchrun")
        torch.set_num_threads(1)
        DistributedDataCollector.run_worker(backend=cfg.backend)
        return None
    return learner(cfg, "mp")


if __name__ == "__main__":
    main(tyro.cli(Config))
