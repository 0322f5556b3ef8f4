"""``RayCollector``: local collectors running as Ray actors, on one machine or a cluster."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from rl.core import ExplorationType
from rl.core.ray_runtime import acquire_runtime, import_ray, release_runtime, wait_started
from rl.envs import EnvBase, EnvCreator

from .._base import CollectorBase
from .._single import Collector
from ._common import check_frames, per_worker
from ._ray_config import (
    DEFAULT_REMOTE_CLASS_CONFIG,
    actor_kwargs,
    check_arguments,
    default_remote_config,
    weights_to_send,
)
from ._ray_worker import CollectorActor

__all__ = ["RayCollector", "DEFAULT_REMOTE_CLASS_CONFIG"]

_RETRY_S = 0.1
_CLOSE_S = 5.0  # how long shutdown() waits for the actors to close their envs


class RayCollector(CollectorBase):
    """Collectors running as Ray actors, batches gathered here.

    Each of the ``num_collectors`` actors owns a local collector (``collector_class``,
    :class:`~rl.collectors.Collector` by default) over its own env or batched env. In
    sync mode every batch holds one piece of each actor, stacked
    (``[num_collectors, *env_batch, T]``, ``frames_per_batch / num_collectors`` frames
    each); in async mode each batch comes from one actor (``frames_per_batch`` frames), in
    the order they finish, while the other actors keep collecting. The frame count is
    exact as with the local collectors: the last batch is shortened so that exactly
    ``total_frames`` frames are yielded, and no batch is lost or given twice (a batch lost
    with a crashed actor is collected again by the restarted actor).

    :meth:`update_policy_weights_` puts the learner's weights in Ray's object store once
    (``ray.put``) and every actor loads them: batches an actor starts after the call use
    the new weights (a batch already in flight in async mode finishes with the old ones).
    ``("collector", "traj_ids")`` are unique across actors (actor ``i`` owns the ids equal
    to ``i`` modulo ``num_collectors``) and across the lives of a restarted actor (its
    ``k``-th restart starts at ``k * 2**32`` before that interleaving), in the batches
    and in a :class:`~rl.data.RayReplayBuffer` the actors write into.

    Ray is started with ``ray.init(**ray_init_config)`` when it does not run yet
    (``{"address": "auto"}`` or ``{"address": "ray://host:10001"}`` joins a cluster) and
    shut down by :meth:`shutdown` only if this object (or another rl object sharing it)
    started it. A crashed or killed actor makes the iterator raise a ``RuntimeError``
    within seconds, naming the actor and the cause, and every actor is shut down; with
    ``remote_configs={"max_restarts": k}`` Ray restarts it instead (up to ``k`` times),
    the actor gets the latest weights and collects the lost batch again.

    The actors must run a Python with Ray and rl. When this object starts Ray, it turns
    off Ray's ``uv run`` integration (which would start each worker with ``uv run`` in a
    copy of the working directory, without the driver's packages): the actors run the
    driver's interpreter on a local instance (set ``RAY_ENABLE_UV_RUN_RUNTIME_ENV=1`` to
    keep the integration). Whoever started Ray, a worker that cannot import Ray or rl is
    reported within seconds by a ``RuntimeError`` that names the missing module and the
    fix, instead of waiting for ``startup_timeout``.

    Args:
        create_env_fn: one env factory (or env) for every collector, or a list with one
            per collector. Sent to the actors with Ray's cloudpickle (lambdas work).
        policy: the policy (a ``TensorDictModule``), copied into each actor; ``None``
            acts at random from the action spec.
        policy_factory: builds the policy in each actor instead (one callable, or a
            list with one per collector; exclusive with ``policy``). Weights then reach
            the actors only when given to :meth:`update_policy_weights_`.
        frames_per_batch: frames per yielded batch (all actors together in sync mode).
        total_frames: frames to collect in all (exact); ``-1`` until :meth:`shutdown`.
        device, storing_device, env_device, policy_device: passed to each collector
            (one value or a list with one per collector).
        max_frames_per_traj, init_random_frames (divided among the collectors),
        reset_at_each_iter, exploration_type, trust_policy: passed to each collector
            (``-1``: no limit, no random frames).
        postproc: applied here to each batch (in the actors when they write into a
            :class:`~rl.data.RayReplayBuffer`).
        split_trajs: split each batch into padded trajectories (here, or in the actors
            with a ``RayReplayBuffer``).
        collector_class: the local collector each actor runs: a class, or
            ``"single"`` (:class:`~rl.collectors.Collector`), ``"sync"``
            (:class:`~rl.collectors.MultiSyncCollector`) or ``"async"``
            (:class:`~rl.collectors.MultiAsyncCollector`).
        collector_kwargs: more keyword arguments of each collector (one dict, or a list
            with one per collector).
        num_workers_per_collector: worker processes of each multiprocess collector
            (``"sync"`` / ``"async"``); a ``Collector`` runs one env (pass a batched
            env factory to step several).
        sync: stack one batch of every actor (``True``) or yield batches as they come
            (``False``, the default).
        ray_init_config: keyword arguments of ``ray.init()`` when Ray does not run.
        remote_configs: the actors' Ray options (``num_cpus``, ``num_gpus``,
            ``max_restarts``, ``resources``, ...): one dict or a list with one per
            collector. Default :data:`DEFAULT_REMOTE_CLASS_CONFIG` (one CPU; 0.2 GPU
            where CUDA is available).
        num_collectors: the number of actors (default: the length of the
            ``create_env_fn`` list, else 1).
        update_after_each_batch: push the policy's weights to an actor before each of
            its batches (``max_weight_update_interval=0``).
        max_weight_update_interval: push the policy's weights to an actor that has
            collected this many batches since its last update (``-1``: never; call
            :meth:`update_policy_weights_`).
        replay_buffer: a :class:`~rl.data.RayReplayBuffer` is extended by the actors
            directly; any other buffer is extended here. The iterator then yields
            ``None`` per batch.
        use_env_creator: wrap the env factories in :class:`~rl.envs.EnvCreator`.
        startup_timeout: seconds to wait for the actors to start before raising (an
            actor asking for resources the cluster lacks waits forever otherwise);
            ``None`` waits. A worker that dies at start-up is reported at once.
        pre_collect_hook: called in each actor before it collects a batch.
        post_collect_hook: called in each actor with each batch it collected (after the
            trajectory ids are made unique, before the batch is sent here or written
            into the Ray replay buffer); changes made in place are kept.
        no_cuda_sync: accepted for TorchRL compatibility: the rl collectors make no
            explicit CUDA synchronization.
        weight_updater, weight_sync_schemes, weight_recv_schemes, trajs_per_batch:
            TorchRL's weight-sync plug-ins and trajectory batches; not supported
            (``ValueError`` when given).

    Raises:
        ImportError: Ray is not installed (``pip install "rl-collectors[ray]"``).
        RuntimeError: the actors could not start (a worker that cannot import rl or
            Ray, an actor's ``__init__`` that raised, ``startup_timeout`` passed).
        ValueError: inconsistent arguments (``frames_per_batch`` not a multiple of the
            number of collectors in sync mode or of an actor's env batch size, lists of
            the wrong length, an unknown ``collector_class``, ``policy`` and
            ``policy_factory`` together, an unsupported TorchRL argument).

    Examples:
        >>> import torch
        >>> from functools import partial
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.collectors.distributed import RayCollector
        >>> from rl.envs import GymEnv
        >>> policy = TensorDictModule(
        ...     torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"]
        ... )
        >>> collector = RayCollector(  # doctest: +SKIP
        ...     partial(GymEnv, "Pendulum-v1"),
        ...     policy,
        ...     frames_per_batch=200,
        ...     total_frames=1000,
        ...     num_collectors=2,
        ...     sync=True,
        ...     ray_init_config={"num_cpus": 2},
        ... )
        >>> for batch in collector:  # doctest: +SKIP
        ...     print(batch.batch_size)
        ...     collector.update_policy_weights_()
        torch.Size([2, 100])
        ...
        >>> collector.shutdown()  # doctest: +SKIP
    """

    def __init__(
        self,
        create_env_fn: Callable[..., EnvBase] | EnvBase | Sequence[Callable[..., EnvBase]],
        policy: Callable[[TensorDictBase], TensorDictBase] | None = None,
        *,
        policy_factory: Callable[[], Callable] | Sequence[Callable[[], Callable]] | None = None,
        trust_policy: bool | None = None,
        frames_per_batch: int,
        total_frames: int = -1,
        device=None,
        storing_device=None,
        env_device=None,
        policy_device=None,
        max_frames_per_traj: int = -1,
        init_random_frames: int = -1,
        reset_at_each_iter: bool = False,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        split_trajs: bool = False,
        exploration_type: ExplorationType = ExplorationType.RANDOM,
        collector_class: type | str = Collector,
        collector_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        num_workers_per_collector: int = 1,
        sync: bool = False,
        ray_init_config: Mapping[str, Any] | None = None,
        remote_configs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        num_collectors: int | None = None,
        update_after_each_batch: bool = False,
        max_weight_update_interval: int = -1,
        replay_buffer: Any = None,
        weight_updater: Any = None,
        weight_sync_schemes: Any = None,
        weight_recv_schemes: Any = None,
        use_env_creator: bool = False,
        no_cuda_sync: bool | None = None,
        trajs_per_batch: int | None = None,
        pre_collect_hook: Callable[[], None] | None = None,
        post_collect_hook: Callable[[TensorDictBase], None] | None = None,
        startup_timeout: float | None = 300.0,
    ) -> None:
        self.closed = True  # until the actors run
        self._actors: list = []
        self._held_runtime = False
        self._ray = import_ray("RayCollector", "rl-collectors[ray]")
        # ------------------------------------------------------------ argument checks
        collector_class, n = check_arguments(
            create_env_fn, policy, policy_factory=policy_factory,
            frames_per_batch=frames_per_batch, total_frames=total_frames,
            collector_class=collector_class, num_collectors=num_collectors, sync=sync,
            num_workers_per_collector=num_workers_per_collector,
            weight_updater=weight_updater, weight_sync_schemes=weight_sync_schemes,
            weight_recv_schemes=weight_recv_schemes, trajs_per_batch=trajs_per_batch,
            pre_collect_hook=pre_collect_hook, post_collect_hook=post_collect_hook,
        )  # fmt: skip
        env_fns = per_worker(create_env_fn, n, "create_env_fn", "collector")
        factories = per_worker(policy_factory, n, "policy_factory", "collector")
        if use_env_creator:
            env_fns = [
                fn if isinstance(fn, EnvBase | EnvCreator) else EnvCreator(fn) for fn in env_fns
            ]
        if remote_configs is None:
            remote_configs = default_remote_config()
        configs = [
            dict(cfg) for cfg in per_worker(remote_configs, n, "remote_configs", "collector")
        ]
        self.frames_per_batch = frames_per_batch
        self.total_frames = total_frames
        self.num_collectors = n
        self.collector_class = collector_class
        self._sync = bool(sync)
        self.frames_per_batch_worker = frames_per_batch // n if sync else frames_per_batch
        self.update_after_each_batch = update_after_each_batch
        self.max_weight_update_interval = max_weight_update_interval
        self.startup_timeout = startup_timeout
        self.policy = policy
        self.policy_factory = policy_factory
        self.no_cuda_sync = no_cuda_sync
        self.pre_collect_hook, self.post_collect_hook = pre_collect_hook, post_collect_hook
        self._remote_buffer = getattr(replay_buffer, "service_backend", None) == "ray"
        # a local buffer is extended here (_emit); a Ray one by the actors (batches None)
        self.replay_buffer = replay_buffer
        # with a Ray buffer the data never comes here: the actors post-process it
        self.postproc = None if self._remote_buffer else postproc
        self.split_trajs = False if self._remote_buffer else bool(split_trajs)
        self._init_base()
        self.closed = True
        self._configs = configs
        self._max_restarts = [int(cfg.get("max_restarts", 0)) for cfg in configs]
        self._restarts = [0] * n
        self._since_update = [0] * n
        self._version = 0  # of the weights last put in the object store
        self._actor_weights: list = [(0, None)] * n  # (version, ObjectRef) each actor uses
        self._pending: dict = {}  # ObjectRef -> (actor index, frames)
        self._assigned = 0
        self._pids: list[int | None] = [None] * n
        self._incarnations: list[str | None] = [None] * n  # the life of each actor
        self._generations = [0] * n  # how many times each actor was seen restarted
        self._close_timeout = _CLOSE_S
        self._weights: TensorDictBase | None = None
        if isinstance(policy, nn.Module) and any(True for _ in policy.parameters()):
            self._weights = TensorDict.from_module(policy).data
        kwargs_list = actor_kwargs(
            n, collector_kwargs=collector_kwargs, collector_class=collector_class,
            frames_per_batch=self.frames_per_batch_worker,
            num_workers_per_collector=num_workers_per_collector,
            devices={"device": device, "storing_device": storing_device,
                     "env_device": env_device, "policy_device": policy_device},
            common={"max_frames_per_traj": max_frames_per_traj,
                    "init_random_frames": max(init_random_frames or 0, 0) // n,
                    "reset_at_each_iter": reset_at_each_iter,
                    "exploration_type": exploration_type, "trust_policy": trust_policy},
            in_actor={"replay_buffer": replay_buffer, "postproc": postproc,
                      "split_trajs": split_trajs} if self._remote_buffer else None,
        )  # fmt: skip
        # ------------------------------------------------------------------ the actors
        ray = self._ray
        self._held_runtime = acquire_runtime(ray, ray_init_config)
        try:
            # kept referenced: Ray rebuilds a restarted actor from its arguments
            self._policy_ref = policy_ref = ray.put(policy)
            seeds = torch.randint(0, 2**62, (n,)).tolist()
            remote_cls = ray.remote(CollectorActor)
            for i in range(n):
                options = {"max_restarts": self._max_restarts[i], **configs[i]}
                actor = remote_cls.options(**options).remote(
                    collector_class, env_fns[i], policy_ref, kwargs_list[i], seeds[i], i, n,
                    factories[i], pre_collect_hook, post_collect_hook,
                )  # fmt: skip
                self._actors.append(actor)
            self.closed = False
            infos = self._wait_ready(list(range(n)), "start-up")
        except BaseException:
            self._close()
            raise
        self._infos = infos
        self._check_layout(infos)

    # ------------------------------------------------------------------------- start-up
    def _wait_ready(self, indices: list[int], what: str) -> list[dict]:
        ray = self._ray
        refs = [self._actors[i].ready.remote() for i in indices]
        try:
            infos = wait_started(
                ray, refs, what="the RayCollector actors", timeout=self.startup_timeout
            )
        except ray.exceptions.GetTimeoutError:
            self._fail(
                f"the RayCollector actors did not start within {self.startup_timeout} s; "
                f"they ask for {self._describe_resources()} and the cluster has "
                f"{ray.available_resources()} available (actors still starting count as "
                "using theirs)"
            )
        except ray.exceptions.RayTaskError as err:
            self._fail(
                f"a RayCollector actor failed during {what} (all actors were shut down): {err}"
            )
        except RuntimeError as err:  # an actor or its worker died: the cause and the fix
            self._fail(f"{err}\n(all actors were shut down)")
        for i, info in zip(indices, infos):
            self._pids[i] = info["pid"]
            self._incarnations[i] = info["incarnation"]
        return infos

    def _describe_resources(self) -> str:
        return "; ".join(f"actor {i}: {cfg}" for i, cfg in enumerate(self._configs))

    def _check_layout(self, infos: list[dict]) -> None:
        try:
            check_frames(
                {i: info["granularity"] for i, info in enumerate(infos)},
                frames_per_batch=self.frames_per_batch,
                sync=self._sync,
                total_frames=self.total_frames,
                who="actor",
                batch_sizes={i: tuple(info["env_batch_size"]) for i, info in enumerate(infos)},
            )
        except ValueError:
            self._close()
            raise

    # ------------------------------------------------------------------------- pause
    _pausable = True

    @contextlib.contextmanager
    def pause(self, timeout: float = 30.0, *, resume: bool = True) -> Iterator[None]:
        """Holds the background collection of :meth:`start` while the ``with`` block
        runs (TorchRL's ``RayCollector.pause``).

        Entering waits until the batches the actors are collecting are done and written;
        the actors stay alive and idle during the block, a quiescent point to checkpoint
        at. Collection resumes when the block ends unless ``resume=False`` (then it is
        stopped: :meth:`start` starts it again). A collector that is not collecting in
        the background has nothing to pause: the block just runs.

        Args:
            timeout: seconds to wait for the batches in progress (default 30).
            resume: whether collection resumes when the block ends (default ``True``).

        Raises:
            TimeoutError: the batches in progress took longer than ``timeout`` (the
                collection goes on).
            RuntimeError: already paused, called from the collector's own thread, or the
                collection failed while the pause waited for it (chained to its error).
        """
        if not self._thread_running:
            yield None
            return
        self._enter_pause(timeout)
        try:
            yield None
        finally:
            self._leave_pause(resume)

    def _quiesce(self) -> None:
        """Pausing: the batches in flight are collected and written."""
        try:
            while self._pending:
                index, frames, batch = self._next_result()
                self._since_update[index] += 1
                self._deliver((batch, frames))
        except BaseException:
            if not self.closed:
                self._close()
            raise

    # ------------------------------------------------------------------------ batches
    def _produce(self) -> tuple[TensorDictBase | None, int] | None:
        if self.closed:
            return None
        try:
            return self._produce_sync() if self._sync else self._produce_async()
        except BaseException:
            # an interrupted wait leaves batches in flight: no later batch could trust them
            if not self.closed:
                self._close()
            raise

    def _produce_sync(self) -> tuple[TensorDictBase | None, int] | None:
        n = self.num_collectors
        frames = self.frames_per_batch_worker
        left = self._frames_left()
        if left is not None:
            frames = min(frames, left // n)
            if frames <= 0:
                return None
        due = [i for i in range(n) if self._due(i)]
        if due:
            self.update_policy_weights_(worker_ids=due)
        for index in range(n):
            self._submit(index, frames)
        pieces: dict[int, TensorDictBase | None] = {}
        while len(pieces) < n:
            index, _, batch = self._next_result()
            pieces[index] = batch
        for index in range(n):
            self._since_update[index] += 1
        if pieces[0] is None:  # the actors wrote into a RayReplayBuffer
            return None, frames * n
        return torch.stack([pieces[i] for i in range(n)], 0), frames * n

    def _produce_async(self) -> tuple[TensorDictBase | None, int] | None:
        self._fill(defer_due=False)
        if not self._pending:
            return None
        index, frames, batch = self._next_result()
        self._since_update[index] += 1
        # the actor starts its next batch while this one is used, unless it is due for
        # new weights: then it waits for the weights the learner has after this batch
        self._fill(defer_due=True)
        return batch, frames

    def _fill(self, defer_due: bool) -> None:
        """Asks every idle actor for a batch while frames remain unassigned."""
        busy = {index for index, _ in self._pending.values()}
        idle = [i for i in range(self.num_collectors) if i not in busy]
        due = [i for i in idle if self._due(i)]
        if due and not defer_due:
            self.update_policy_weights_(worker_ids=due)
        for index in idle:
            if defer_due and index in due:
                continue
            frames = self.frames_per_batch_worker
            if self.total_frames >= 0:
                frames = min(frames, self.total_frames - self._assigned)
            step = self._infos[index]["granularity"]
            frames = frames // step * step
            if frames <= 0:
                continue
            self._assigned += frames
            self._submit(index, frames)

    def _emit(self, item: tuple[TensorDictBase | None, int]) -> TensorDictBase | None:
        batch, frames = item
        if batch is None:  # written into the Ray replay buffer by the actors
            self._frames += frames
            self._iter += 1
            return None
        return super()._emit(batch)

    # ----------------------------------------------------------------- actor requests
    def _due(self, index: int) -> bool:
        """Whether actor ``index`` gets the policy's weights before its next batch."""
        if self._weights is None:
            return False
        interval = self.max_weight_update_interval
        return self.update_after_each_batch or (
            interval >= 0 and self._since_update[index] >= interval
        )

    def _submit(self, index: int, frames: int) -> None:
        version, ref = self._actor_weights[index]
        future = self._actors[index].collect.remote(
            frames, version, [ref], self._incarnations[index], self._generations[index]
        )
        self._pending[future] = (index, frames)

    def _next_result(self) -> tuple[int, int, TensorDictBase | None]:
        """The first batch in flight to finish: ``(actor index, frames, batch)``.

        A dead actor is restarted (its batch asked again) where configured; otherwise,
        and when an actor raises, every actor is shut down and a ``RuntimeError`` says
        which actor failed and why. A restarted actor (found by its new incarnation,
        whether it died collecting or idle) collects nothing until it has its next
        generation number, which keeps its trajectory ids apart from its former life's.
        """
        ray = self._ray
        while True:
            ready, _ = ray.wait(list(self._pending), num_returns=1)
            future = ready[0]
            index, frames = self._pending.pop(future)
            try:
                incarnation, pid, collected, batch = ray.get(future)
            except ray.exceptions.ActorUnavailableError:
                # restarting after a crash: ask again (Ray says when it is dead for good)
                time.sleep(_RETRY_S)
                self._submit(index, frames)
                continue
            except ray.exceptions.RayActorError as err:
                if self._can_restart(index):
                    self._restarts[index] += 1
                    self._submit(index, frames)  # the restarted actor loads the weights
                    continue
                self._fail(
                    f"RayCollector actor {index} (pid {self._pids[index]}) died while "
                    f"collecting; all actors were shut down (remote_configs="
                    f"{{'max_restarts': k}} restarts crashed actors). Ray says: {err}"
                )
            except ray.exceptions.RayTaskError as err:
                self._fail(
                    f"RayCollector actor {index} raised while collecting (all actors were "
                    f"shut down):\n{err}"
                )
            if not collected:  # a restarted actor: a new life, its ids start again at 0
                self._incarnations[index] = incarnation
                self._generations[index] += 1
                # Ray counts this restart against max_restarts even if it died idle
                self._restarts[index] = max(self._restarts[index], self._generations[index])
                self._pids[index] = pid
                self._submit(index, frames)
                continue
            return index, frames, batch

    def _can_restart(self, index: int) -> bool:
        limit = self._max_restarts[index]
        return limit == -1 or self._restarts[index] < limit

    def _drain(self) -> None:
        """Waits for the batches in flight and drops them (they are not counted)."""
        ray = self._ray
        refs = list(self._pending)
        self._pending.clear()
        if refs:
            ray.wait(refs, num_returns=len(refs))
        self._assigned = self._frames

    # ------------------------------------------------------------------ policy weights
    def update_policy_weights_(
        self,
        policy_or_weights: Any = None,
        *,
        worker_ids: int | Sequence[int] | None = None,
        **kwargs,
    ) -> None:
        """Puts the policy's weights (or the given ones) in Ray's object store once and
        has the actors load them before their next batch.

        Args:
            policy_or_weights: a module, a TensorDict of parameters or a state dict
                (default: the parameters of ``policy``, as they are now).
            worker_ids: the actors to update (default: all).
        """
        if self.closed:
            raise RuntimeError("the RayCollector was shut down")
        if policy_or_weights is None and self._weights is None:
            return  # a policy without parameters
        weights = weights_to_send(policy_or_weights, self._weights)
        ref = self._ray.put(weights)  # serialized now: later in-place updates do not leak
        if worker_ids is None:
            indices = list(range(self.num_collectors))
        elif isinstance(worker_ids, int):
            indices = [worker_ids]
        else:
            indices = list(worker_ids)
        self._version += 1
        for index in indices:
            # sent with the actor's next batch request, loaded there before it collects
            self._actor_weights[index] = (self._version, ref)
            self._since_update[index] = 0

    # ------------------------------------------------------------------ seeds and state
    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seeds actor ``i`` with the ``i``-th seed of the chain; returns the next one."""
        ray = self._ray
        for actor in self._actors:
            new_seed = ray.get(actor.set_seed.remote(seed, static_seed))
            if not static_seed:
                seed = new_seed
        return seed

    def state_dict(self) -> dict:
        """Frames counted and each actor's collector state (batches in flight are
        dropped first, so the counts and the states agree)."""
        self._drain()
        ray = self._ray
        return {
            "frames": self._frames,
            "iter": self._iter,
            "workers": ray.get([actor.state_dict.remote() for actor in self._actors]),
        }

    def load_state_dict(self, state: Mapping) -> None:
        workers = list(state["workers"])
        if len(workers) != self.num_collectors:
            raise ValueError(
                f"the state holds {len(workers)} collector states, expected one per actor "
                f"({self.num_collectors})"
            )
        self._drain()
        self._frames = int(state["frames"])
        self._iter = int(state["iter"])
        self._assigned = self._frames
        ray = self._ray
        ray.get([a.load_state_dict.remote(s) for a, s in zip(self._actors, workers)])

    # ----------------------------------------------------------------------- shutdown
    def shutdown(
        self, timeout: float | None = None, shutdown_ray: bool = False, *, close_env: bool = True
    ) -> None:
        """Shuts the actors' collectors down (their envs closed), kills the actors and
        gives Ray back: it is shut down if an rl object started it and no other one
        uses it, or with ``shutdown_ray=True`` (idempotent).

        Args:
            timeout: seconds to wait for the actors to close their envs before they are
                killed (default 5).
            shutdown_ray: shut Ray down even if it was running before.
            close_env: ``False`` only stops iterating (the actors keep running).
        """
        if timeout is not None:
            self._close_timeout = timeout
        super().shutdown(timeout, close_env)
        if shutdown_ray and self._ray.is_initialized():
            self._ray.shutdown()

    @property
    def worker_pids(self) -> list[int]:
        """The process id of each actor (waits for the batches in flight)."""
        ray = self._ray
        return [info["pid"] for info in ray.get([a.ready.remote() for a in self._actors])]

    def __repr__(self) -> str:
        mode = "sync" if self._sync else "async"
        return (
            f"{type(self).__name__}(num_collectors={self.num_collectors}, {mode}, "
            f"frames_per_batch={self.frames_per_batch}, total_frames={self.total_frames}, "
            f"frames={self._frames})"
        )

    def _fail(self, message: str) -> None:
        self._close()
        raise RuntimeError(message)

    def _close(self) -> None:
        self.closed = True
        self._pending.clear()
        ray = self._ray
        actors, self._actors = self._actors, []
        # the collectors of the actors that started close their envs (a dead actor
        # answers at once, with an error), then every actor is killed, answer or not
        started = [pid is not None for pid in getattr(self, "_pids", [])]
        refs = []
        for actor, up in zip(actors, started):
            if up:
                try:
                    refs.append(actor.shutdown.remote())
                except Exception:
                    pass
        if refs:
            try:
                done, _ = ray.wait(refs, num_returns=len(refs), timeout=self._close_timeout)
                for ref in done:
                    try:
                        ray.get(ref)
                    except Exception:
                        pass
            except Exception:
                pass
        for actor in actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:
                pass
        held, self._held_runtime = self._held_runtime, False
        release_runtime(ray, held)
