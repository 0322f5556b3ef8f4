"""``RayLLMCollector``: an :class:`LLMCollector` running in a Ray actor, driven from here."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from rl.core.ray_runtime import acquire_runtime, import_ray, release_runtime, wait_started

from ._collector import LLMCollector

__all__ = ["RayLLMCollector"]

_STARTUP_TIMEOUT_S = 300.0  # a worker importing torch and transformers on a loaded machine


class _LLMCollectorActor:
    """What runs in the Ray actor: one :class:`LLMCollector` and the calls on it."""

    def __init__(self, kwargs: dict[str, Any]) -> None:
        self.collector = LLMCollector(**kwargs)

    def ready(self) -> int:
        return os.getpid()

    def next(self) -> tuple[TensorDictBase | None, int] | None:
        """The next batch (``None`` when the collector wrote it into its Ray replay
        buffer) and the dialog turns it counted; ``None`` once they are all collected."""
        before = self.collector.stats()["frames"]
        try:
            batch = self.collector.next()
        except StopIteration:
            return None
        return batch, self.collector.stats()["frames"] - before

    def call(self, method: str, *args, **kwargs) -> Any:
        return getattr(self.collector, method)(*args, **kwargs)

    def init_updater(self, *args, **kwargs) -> None:
        updater = self.collector.weight_updater
        if updater is None:
            raise RuntimeError("the RayLLMCollector's collector has no weight_updater to init")
        updater.init(*args, **kwargs)


class RayLLMCollector(LLMCollector):
    """An :class:`LLMCollector` that runs in a Ray actor; batches are fetched from here.

    The env and the policy (or ``policy_factory``) are sent to the actor (Ray's
    cloudpickle: lambdas work), which builds the :class:`LLMCollector` with the same
    arguments and collects there. Iterating here yields its batches: with ``sync_iter``
    (default) each batch is collected when asked for; with ``sync_iter=False`` the actor
    collects the next batch while this process works on the last one (as
    :class:`~rl.collectors.MultiAsyncCollector` does for envs), so a batch can be one
    weight update late.

    A :class:`~rl.data.RayReplayBuffer` is written by the actor directly (and
    :meth:`start` collects into it in the actor's background thread); any other
    ``replay_buffer`` is extended here. Either way the iterator then yields ``None`` per
    batch. :meth:`update_policy_weights_` sends the weights (a module's state, a state
    dict or a TensorDict) to the actor's model and raises its policy version.

    Ray is started with ``ray.init(**ray_init_config)`` when it does not run (see
    :mod:`rl.core.ray_runtime`) and shut down by :meth:`shutdown` only when this object
    started it.

    Args:
        env: the environment, or a callable building it in the actor (preferred: an env
            holding a dataloader travels badly).

    Keyword Args:
        policy, policy_factory, dialog_turns_per_batch, total_dialog_turns,
        yield_only_last_steps, yield_completed_trajectories, postproc, async_envs,
        reset_at_each_iter, flatten_data, weight_updater, track_policy_version, verbose:
            as :class:`LLMCollector` (run in the actor: ``postproc`` and
            ``weight_updater`` are sent there).
        replay_buffer (optional): see above.
        ray_init_config (dict, optional): keyword arguments of ``ray.init()``.
        remote_config (dict, optional): the actor's Ray options. Defaults to
            ``{"num_cpus": 1}``.
        sync_iter (bool): see above. Defaults to ``True``.
        num_cpus, num_gpus (int, optional): the actor's resources (over
            ``remote_config``'s).

    Raises:
        ImportError: Ray is not installed (``pip install "rl-collectors[ray]"``).
        TypeError: both or neither of ``policy`` / ``policy_factory``.
        RuntimeError: the actor could not start (its ``LLMCollector`` refused the
            arguments, a worker without rl) or died.

    Examples:
        >>> from rl.collectors.llm import RayLLMCollector
        >>> collector = RayLLMCollector(  # doctest: +SKIP
        ...     lambda: GSM8KEnv(dataset="train.jsonl", num_envs=4),
        ...     policy=TransformersWrapper(model, tokenizer=tokenizer),
        ...     dialog_turns_per_batch=8,
        ...     total_dialog_turns=64,
        ...     ray_init_config={"num_cpus": 2},
        ... )
        >>> for batch in collector:  # doctest: +SKIP
        ...     train(batch)
        ...     collector.update_policy_weights_(model.state_dict())
        >>> collector.shutdown()  # doctest: +SKIP
    """

    def __init__(
        self,
        env: Any,
        *,
        policy: Callable[[TensorDictBase], TensorDictBase] | None = None,
        policy_factory: Callable[[], Callable] | None = None,
        dialog_turns_per_batch: int,
        total_dialog_turns: int = -1,
        yield_only_last_steps: bool | None = None,
        yield_completed_trajectories: bool | None = None,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        async_envs: bool | None = None,
        replay_buffer: Any = None,
        reset_at_each_iter: bool = False,
        flatten_data: bool | None = None,
        weight_updater: Any = None,
        ray_init_config: dict[str, Any] | None = None,
        remote_config: dict[str, Any] | None = None,
        track_policy_version: bool = False,
        sync_iter: bool = True,
        verbose: bool = False,
        num_cpus: int | None = None,
        num_gpus: int | None = None,
    ) -> None:
        self.closed = True  # until the actor runs
        self._actor = None
        self._held_runtime = False
        #: the process id of the actor's worker (on this machine with a local Ray)
        self.worker_pid: int | None = None
        self._ray = ray = import_ray("RayLLMCollector", "rl-collectors[ray]")
        if (policy is None) == (policy_factory is None):
            raise TypeError("RayLLMCollector takes exactly one of policy / policy_factory")
        remote_buffer = getattr(replay_buffer, "service_backend", None) == "ray"
        if flatten_data is None and replay_buffer is not None and not yield_only_last_steps:
            flatten_data = True  # as LLMCollector with a buffer, also when it is extended here
        config = {"num_cpus": 1} if remote_config is None else copy.copy(dict(remote_config))
        if not sync_iter:
            config.setdefault("max_concurrency", 2)  # weight updates while a batch runs
        if num_cpus is not None:
            config["num_cpus"] = num_cpus
        if num_gpus is not None:
            config["num_gpus"] = num_gpus
        kwargs = {
            "env": env,
            "policy": policy,
            "policy_factory": policy_factory,
            "dialog_turns_per_batch": dialog_turns_per_batch,
            "total_dialog_turns": total_dialog_turns,
            "yield_only_last_steps": yield_only_last_steps,
            "yield_completed_trajectories": yield_completed_trajectories,
            "postproc": postproc,
            "async_envs": async_envs,
            "replay_buffer": replay_buffer if remote_buffer else None,
            "reset_at_each_iter": reset_at_each_iter,
            "flatten_data": flatten_data,
            "weight_updater": weight_updater,
            "track_policy_version": track_policy_version,
            "verbose": verbose,
        }
        self.frames_per_batch = int(dialog_turns_per_batch)
        self.total_frames = int(total_dialog_turns)
        self.split_trajs = False
        self.postproc = None  # applied in the actor
        self.replay_buffer = replay_buffer
        self._ignore_rb = remote_buffer  # the actor writes a Ray buffer itself
        self.sync_iter = bool(sync_iter)
        self.track_policy_version = bool(track_policy_version)
        self.remote_config = config
        self._init_base()
        self.closed = True
        self._pending = None  # the batch the actor collects ahead (sync_iter=False)
        self._exhausted = False
        self._held_runtime = acquire_runtime(ray, ray_init_config)
        try:
            self._actor = ray.remote(_LLMCollectorActor).options(**config).remote(kwargs)
            self.closed = False
            (self.worker_pid,) = wait_started(
                ray,
                [self._actor.ready.remote()],
                what="the RayLLMCollector actor",
                timeout=_STARTUP_TIMEOUT_S,
            )
        except BaseException:
            self._close()
            raise

    # ------------------------------------------------------------------ remote calls
    def _get(self, ref: Any) -> Any:
        ray = self._ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as err:
            raise RuntimeError(f"the RayLLMCollector actor died: {err}") from err

    def _call(self, method: str, *args, **kwargs) -> Any:
        if self._actor is None:
            raise RuntimeError("the RayLLMCollector was shut down")
        return self._get(self._actor.call.remote(method, *args, **kwargs))

    # ------------------------------------------------------------------ collection
    def _produce(self) -> tuple[TensorDictBase | None, int] | None:
        if self._exhausted:
            return None
        if self._actor is None:
            raise RuntimeError("the RayLLMCollector was shut down")
        if self.sync_iter:
            item = self._get(self._actor.next.remote())
        else:
            if self._pending is None:
                self._pending = self._actor.next.remote()
            item = self._get(self._pending)
            self._pending = None if item is None else self._actor.next.remote()
        if item is None:
            self._exhausted = True
        return item

    def _emit(
        self, item: tuple[TensorDictBase | None, int], counted: bool = False
    ) -> TensorDictBase | None:
        batch, frames = item
        self._frames += frames
        if batch is None:  # written into the Ray replay buffer by the actor
            self._iter += 1
            return None
        return super()._emit(batch, counted=True)

    def set_postproc(self, postproc: Callable[[TensorDictBase], TensorDictBase]) -> None:
        """Sets the actor's collector's ``postproc`` (raises if it has one)."""
        self._call("set_postproc", postproc)

    # ------------------------------------------------------------------ weights
    def update_policy_weights_(
        self,
        policy_or_weights: Any = None,
        *,
        worker_ids: Any = None,
        **kwargs,
    ) -> None:
        """Sends the weights to the actor's model (see
        :meth:`LLMCollector.update_policy_weights_`) and raises its policy version.

        A module is sent as its detached parameters and buffers, on the CPU.
        """
        if "policy_weights" in kwargs:  # TorchRL's older keyword
            policy_or_weights = kwargs.pop("policy_weights")
        if isinstance(policy_or_weights, torch.nn.Module):
            policy_or_weights = TensorDict.from_module(policy_or_weights).data.cpu()
        elif isinstance(policy_or_weights, TensorDictBase):
            policy_or_weights = policy_or_weights.detach().cpu()
        self._call("update_policy_weights_", policy_or_weights, worker_ids=worker_ids, **kwargs)

    @property
    def policy_version(self) -> int | None:
        """The actor's policy version (``None`` unless ``track_policy_version``)."""
        return self._call("get_policy_version")

    def increment_version(self) -> None:
        """Raises the actor's policy version."""
        self._call("increment_version")

    def init_updater(self, *args, **kwargs) -> None:
        """Calls ``init(*args, **kwargs)`` on the actor's weight updater."""
        self._get(self._actor.init_updater.remote(*args, **kwargs))

    @property
    def init_random_frames(self) -> int:
        """Always 0: an LLM collector has no random warm-up (read by the trainers)."""
        return 0

    def get_policy_model(self):
        raise RuntimeError(
            "the RayLLMCollector's model lives in its Ray actor: send weights with "
            "update_policy_weights_()"
        )

    # ------------------------------------------------------------------ background
    def start(self) -> None:
        """Collects into the :class:`~rl.data.RayReplayBuffer` in the actor's background
        thread until ``total_dialog_turns`` or :meth:`async_shutdown`."""
        if not self._ignore_rb:
            raise RuntimeError(
                "start() collects in the Ray actor, into a replay buffer it can write: pass "
                "a RayReplayBuffer as replay_buffer (a local buffer is extended only by "
                "iterating here)"
            )
        self._call("start")

    def is_running(self) -> bool:
        """Whether the actor collects in the background (raises its error if it failed)."""
        return self._call("is_running")

    def async_shutdown(self, timeout: float | None = None, close_env: bool = True) -> None:
        """Stops the actor's background collection (then shuts down, unless
        ``close_env=False``)."""
        if self._actor is not None:
            self._call("async_shutdown", timeout=timeout, close_env=False)
        if close_env:
            self.shutdown()

    def _close(self) -> None:
        ray, actor = self._ray, self._actor
        self._actor = None
        self._pending = None
        if actor is not None:
            try:
                ray.get(actor.call.remote("shutdown"), timeout=10.0)
            except Exception:  # an actor already dead: nothing left to close there
                pass
            ray.kill(actor)
        held, self._held_runtime = self._held_runtime, False
        release_runtime(ray, held)
