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

Williams 1992, "Simple statistical gradient-following algorithms for connectionist
reinforcement learning", https://doi.org/10.1007/BF00992696. Episodes that run across
two batches are cut at the batch end (their reward-to-go is truncated): this script is
about the distributed plumbing, not a tuned learner.

``--compile`` compiles the collecting policy (each collector rank rebuilds the
``CompiledPolicy`` it receives and compiles its own copy at its first step) and the
learner's whole update step (reward-to-go, the normalised advantage, the loss, backward
and Adam: one graph, ``examples/_common.py``'s ``UpdateStep``). ``--cudagraphs`` captures
the learner's update step in a CUDA graph (a CUDA device is needed).
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
from _common import UpdateStep, check_cudagraphs, compile_policy  # noqa: E402


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
    """capture the learner's update step in a CUDA graph (needs a CUDA device)"""


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


def make_update_step(cfg: Config, policy: ProbabilisticActor, optim) -> UpdateStep:
    """One REINFORCE step on a batch: reward-to-go, advantage normalised over the batch,
    ``-mean(log_prob * advantage)``, backward, Adam; one graph with ``cfg.compile``."""

    def reinforce_loss(batch):
        reward, done = batch["next", "reward"], batch["next", "done"]
        returns = reward2go(reward, done, cfg.gamma).squeeze(-1)
        advantage = (returns - returns.mean()) / (returns.std() + 1e-6)
        log_prob = policy.get_dist(batch).log_prob(batch["action"])
        loss = -(log_prob * advantage).mean()
        return loss, loss

    return UpdateStep(reinforce_loss, optim, compile=cfg.compile, cudagraphs=cfg.cudagraphs)


def learner(cfg: Config, launcher: Literal["mp", "torchrun"]) -> None:
    check_cudagraphs(cfg.cudagraphs)
    torch.manual_seed(cfg.seed)
    policy = make_policy(make_env())
    optim = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    step = make_update_step(cfg, policy, optim)
    collector = DistributedDataCollector(
        make_env,
        compile_policy(policy, compile=cfg.compile),
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
        step(batch)
        collector.update_policy_weights_()  # the workers' next batches use these weights
        if i % 5 == 0:
            done = batch["next", "done"]
            episodes = int(done.sum())
            mean_len = done.numel() / max(episodes, 1)
            print(f"batch {i:3d}  frames {frames:6d}  mean episode length {mean_len:6.1f}")
    elapsed = time.perf_counter() - start
    collector.shutdown()
    print(f"frames {frames} in {elapsed:.1f} s ({frames / elapsed:.0f} frames/s)")


def main(cfg: Config) -> None:
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # launched by torchrun
        if int(os.environ["RANK"]) == 0:
            learner(cfg, "torchrun")
        else:
            torch.set_num_threads(1)
            DistributedDataCollector.run_worker(backend=cfg.backend)
    else:
        learner(cfg, "mp")


if __name__ == "__main__":
    main(tyro.cli(Config))
