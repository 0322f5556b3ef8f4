"""The Ray actor behind each remote collector of a ``RayCollector``.

A plain class: :class:`~rl.collectors.distributed.RayCollector` turns it into an actor
with ``ray.remote(...)`` so that this module never imports Ray. The actor owns one local
collector (``total_frames=-1``); the driver asks it for a number of frames at a time,
which keeps the frame count of the whole run exact.

Every life of an actor has its own ``incarnation`` token. A request carries the token the
driver knows; an actor that Ray restarted (after a crash, while collecting or idle) holds
a new one and answers without collecting, so the driver counts one more ``generation``
for it before any of its data is used: the trajectory ids of each life are kept apart
(see :func:`~rl.collectors.distributed._common.unique_traj_ids`), in the batches it
returns and in a replay buffer it writes into.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ._common import frames_per_step, unique_traj_ids

__all__ = ["CollectorActor", "UniqueTrajIdsBuffer"]


class UniqueTrajIdsBuffer:
    """Extends ``buffer`` with trajectory ids made unique across the collectors and the
    lives of a restarted actor, as in the batches the actors return.

    Wraps the Ray replay buffer that the collector of actor ``index`` writes into, so that
    samplers reading ``("collector", "traj_ids")`` (``SliceSampler``) never join two
    actors' (or two lives') trajectories. ``post_collect_hook(data)`` runs on each batch
    before it is written.
    """

    def __init__(
        self,
        buffer: Any,
        index: int,
        num_collectors: int,
        generation: int = 0,
        post_collect_hook: Callable[[Any], None] | None = None,
    ) -> None:
        self.buffer, self.index, self.num_collectors = buffer, index, num_collectors
        self.generation = generation
        self.post_collect_hook = post_collect_hook

    def extend(self, data: Any) -> Any:
        data = unique_traj_ids(data, self.index, self.num_collectors, self.generation)
        if self.post_collect_hook is not None:
            self.post_collect_hook(data)
        return self.buffer.extend(data)

    def __len__(self) -> int:
        return len(self.buffer)


class CollectorActor:
    """Runs ``collector_class(create_env_fn, policy, total_frames=-1, **kwargs)``.

    Args:
        collector_class: the local collector class.
        create_env_fn: the env factory (or env) of this collector.
        policy: the policy (a copy lives in the actor).
        kwargs: the collector's other keyword arguments.
        seed: seeds torch's generator in the actor (each actor draws its own actions).
        index: this actor's index among ``num_collectors``.
        num_collectors: the number of actors.
        policy_factory: builds the policy here instead of ``policy``.
        pre_collect_hook: called before each batch is collected.
        post_collect_hook: called with each batch collected (trajectory ids made
            unique), before it is returned or written into the replay buffer.
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
        policy_factory: Callable[[], Any] | None = None,
        pre_collect_hook: Callable[[], None] | None = None,
        post_collect_hook: Callable[[Any], None] | None = None,
    ) -> None:
        torch.manual_seed(seed)
        self.incarnation = uuid.uuid4().hex  # this life of the actor
        self.index, self.num_collectors, self.generation = index, num_collectors, 0
        self.pre_collect_hook, self.post_collect_hook = pre_collect_hook, post_collect_hook
        kwargs = dict(kwargs)
        self.buffer: UniqueTrajIdsBuffer | None = None
        if kwargs.get("replay_buffer") is not None:
            self.buffer = UniqueTrajIdsBuffer(
                kwargs["replay_buffer"], index, num_collectors, 0, post_collect_hook
            )
            kwargs["replay_buffer"] = self.buffer
        if policy_factory is not None:
            policy = policy_factory()
        if policy is not None:
            kwargs["policy"] = policy
        self.collector = collector_class(create_env_fn, total_frames=-1, **kwargs)
        self.granularity, self.env_batch_size = frames_per_step(self.collector)
        self.version = 0  # the weights it was built with

    def ready(self) -> dict:
        """Where the actor runs, which life it is and the shape of what it collects."""
        return {
            "pid": os.getpid(),
            "incarnation": self.incarnation,
            "granularity": self.granularity,
            "env_batch_size": self.env_batch_size,
            "frames_per_batch": self.collector.frames_per_batch,
        }

    def collect(
        self, frames: int, version: int, weights: list, incarnation: str, generation: int
    ) -> tuple[str, int, bool, Any]:
        """The next ``frames`` frames.

        Args:
            frames: the frames to collect.
            version: the version of the weights the driver wants this batch to use; when
                the actor holds another one (new weights, or a restarted actor) it loads
                ``weights[0]`` (an ``ObjectRef``, fetched only then) first.
            weights: a one-element list holding the ``ObjectRef`` of those weights.
            incarnation: the life of this actor the driver knows of.
            generation: how many times the driver has seen this actor restarted.

        Returns:
            ``(incarnation, pid, collected, batch)``: ``collected`` is ``False``, and
            nothing was collected, when ``incarnation`` is not this life's (the driver
            then asks again with the next ``generation``); ``batch`` is ``None`` when
            the collector wrote it into its replay buffer.
        """
        if incarnation != self.incarnation:
            return self.incarnation, os.getpid(), False, None
        self.generation = generation
        if self.buffer is not None:
            self.buffer.generation = generation
        if version != self.version:
            import ray  # noqa: PLC0415  (this runs in a Ray worker)

            self.collector.update_policy_weights_(ray.get(weights[0]))
            self.version = version
        if self.pre_collect_hook is not None:
            self.pre_collect_hook()
        batch = self._next(frames)
        if batch is not None:
            batch = unique_traj_ids(batch, self.index, self.num_collectors, generation)
            if self.post_collect_hook is not None:
                self.post_collect_hook(batch)
        return self.incarnation, os.getpid(), True, batch

    def _next(self, frames: int) -> Any:
        collector = self.collector
        if frames == collector.frames_per_batch:
            return collector.next()
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
        return batch

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        return self.collector.set_seed(seed, static_seed=static_seed)

    def state_dict(self) -> dict:
        return self.collector.state_dict()

    def load_state_dict(self, state: Mapping) -> None:
        self.collector.load_state_dict(state)

    def shutdown(self) -> None:
        """Shuts the collector down (its envs closed), before the driver kills the actor."""
        self.collector.shutdown()
