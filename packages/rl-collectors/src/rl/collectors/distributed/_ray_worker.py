"""The Ray actor behind each remote collector of a ``RayCollector``.

A plain class: :class:`~rl.collectors.distributed.RayCollector` turns it into an actor
with ``ray.remote(...)`` so that this module never imports Ray. The actor owns one local
collector (``total_frames=-1``); the driver asks it for a number of frames at a time,
which keeps the frame count of the whole run exact.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import torch

__all__ = ["CollectorActor", "UniqueTrajIdsBuffer"]


class UniqueTrajIdsBuffer:
    """Extends ``buffer`` with trajectory ids made unique across the collectors
    (``id * num_collectors + index``), as the driver does for the batches it receives.

    Wraps the Ray replay buffer that the collector of actor ``index`` writes into, so that
    samplers reading ``("collector", "traj_ids")`` (``SliceSampler``) never join two
    actors' trajectories.
    """

    def __init__(self, buffer: Any, index: int, num_collectors: int) -> None:
        self.buffer, self.index, self.num_collectors = buffer, index, num_collectors

    def extend(self, data: Any) -> Any:
        ids = data.get(("collector", "traj_ids"), None)
        if ids is not None:
            data.set(("collector", "traj_ids"), ids * self.num_collectors + self.index)
        return self.buffer.extend(data)

    def __len__(self) -> int:
        return len(self.buffer)


def _granularity(collector: Any) -> tuple[int, tuple[int, ...]]:
    """The frames one time step of ``collector`` makes, and its env batch size."""
    env = getattr(collector, "env", None)
    if env is not None:  # Collector
        batch_size = tuple(env.batch_size)
        return max(env.batch_size.numel(), 1), batch_size
    sizes = getattr(collector, "env_batch_sizes", None)
    if sizes:  # MultiSyncCollector / MultiAsyncCollector
        batch_size = tuple(sizes[0])
        per_worker = max(max(size.numel() for size in sizes), 1)
        if getattr(collector, "_sync", False):
            return per_worker * len(sizes), batch_size
        return per_worker, batch_size
    return 1, ()


class CollectorActor:
    """Runs ``collector_class(create_env_fn, policy, total_frames=-1, **kwargs)``.

    Args:
        collector_class: the local collector class.
        create_env_fn: the env factory (or env) of this collector.
        policy: the policy (a copy lives in the actor).
        kwargs: the collector's other keyword arguments.
        seed: seeds torch's generator in the actor (each actor draws its own actions).
        index: this actor's index among ``num_collectors``.
    """

    def __init__(
        self,
        collector_class: Callable[..., Any],
        create_env_fn: Any,
        policy: Any,
        kwargs: Mapping[str, Any],
        seed: int,
        index: int = 0,
        num_collectors: int = 1,
    ) -> None:
        torch.manual_seed(seed)
        kwargs = dict(kwargs)
        if kwargs.get("replay_buffer") is not None and num_collectors > 1:
            kwargs["replay_buffer"] = UniqueTrajIdsBuffer(
                kwargs["replay_buffer"], index, num_collectors
            )
        if policy is not None:
            kwargs["policy"] = policy
        self.collector = collector_class(create_env_fn, total_frames=-1, **kwargs)
        self.granularity, self.env_batch_size = _granularity(self.collector)
        self.version = 0  # the weights it was built with

    def ready(self) -> dict:
        """Where the actor runs and the shape of what it collects."""
        return {
            "pid": os.getpid(),
            "granularity": self.granularity,
            "env_batch_size": self.env_batch_size,
            "frames_per_batch": self.collector.frames_per_batch,
        }

    def collect(self, frames: int, version: int, weights: list) -> tuple[int, Any]:
        """The next ``frames`` frames (``None`` when the collector wrote them into its
        replay buffer), with this process's id.

        Args:
            frames: the frames to collect.
            version: the version of the weights the driver wants this batch to use; when
                the actor holds another one (new weights, or a restarted actor) it loads
                ``weights[0]`` (an ``ObjectRef``, fetched only then) first.
            weights: a one-element list holding the ``ObjectRef`` of those weights.
        """
        if version != self.version:
            import ray  # noqa: PLC0415  (this runs in a Ray worker)

            self.collector.update_policy_weights_(ray.get(weights[0]))
            self.version = version
        collector = self.collector
        if frames == collector.frames_per_batch:
            return os.getpid(), collector.next()
        # a shorter last batch: the collector stops at its frame budget by itself
        collector.total_frames = collector._frames + frames
        try:
            batch = collector.next()
        finally:
            collector.total_frames = -1
        if batch is not None and batch.numel() > frames:
            # an async collector prefetched a full batch: keep the frames asked for
            steps = frames * batch.shape[-1] // batch.numel()
            batch = batch[..., :steps].clone()
        return os.getpid(), batch

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        return self.collector.set_seed(seed, static_seed=static_seed)

    def state_dict(self) -> dict:
        return self.collector.state_dict()

    def load_state_dict(self, state: Mapping) -> None:
        self.collector.load_state_dict(state)

    def shutdown(self) -> None:
        self.collector.shutdown()
