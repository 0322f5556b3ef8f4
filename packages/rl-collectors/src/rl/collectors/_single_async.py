"""``AsyncCollector``: one collector running in its own worker process."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tensordict import TensorDictBase

from rl.core import ExplorationType

from ._multi import MultiAsyncCollector


class AsyncCollector(MultiAsyncCollector):
    """Collects from one env in a worker process while the caller trains, as TorchRL's.

    A :class:`MultiAsyncCollector` with a single worker, built from the arguments of
    :class:`~rl.collectors.Collector` (one env factory, not a list). The worker starts
    its next batch as soon as the previous one was handed over, so collection overlaps
    the training step; the policy it acts with may therefore lag one batch behind
    :meth:`update_policy_weights_` (which it picks up at the start of its next batch).
    Useful when the policy that collects may differ from the one being trained
    (off-policy / offline settings); for on-policy training prefer
    :class:`~rl.collectors.Collector`.

    Failure handling, :meth:`shutdown` (no process is left running), ``state_dict`` and
    ``load_state_dict`` are those of :class:`MultiAsyncCollector`.

    Args:
        create_env_fn: a callable returning an :class:`~rl.envs.EnvBase` (or an env,
            which the worker uses as its own copy). Sent to the worker with cloudpickle.
        policy: as in :class:`~rl.collectors.Collector` (a copy runs in the worker).

    Keyword Args:
        policy_factory: builds the policy in the worker instead of ``policy``.
        frames_per_batch: frames per batch.
        total_frames: frames in all; ``-1`` (default) collects until :meth:`shutdown`.
        device, storing_device, env_device, policy_device: as in ``Collector`` (a list
            of one entry is accepted, as TorchRL).
        create_env_kwargs: keyword arguments of ``create_env_fn`` (a dict).
        max_frames_per_traj, init_random_frames, reset_at_each_iter, postproc,
            split_trajs, exploration_type, reset_when_done, set_truncated,
            track_policy_version: as in :class:`~rl.collectors.Collector`.
        update_at_each_batch: call :meth:`update_policy_weights_` after each batch is
            received.
        preemptive_threshold: TorchRL's ratio (in ``[0, 1]``) of workers allowed to
            finish before the others are stopped early. With one worker nothing is ever
            preempted; the value is checked and kept as ``preemptive_threshold``.
        num_threads: torch threads of this process; num_sub_threads: of the worker.
        **kwargs: the other arguments of :class:`MultiAsyncCollector` (``replay_buffer``,
            ``trajs_per_batch``, ``worker_timeout``, ``mp_start_method``, ``init_fn``,
            ``weight_sync_schemes``, ...), except ``num_workers`` and ``cat_results``.

    Raises:
        TypeError: ``create_env_fn`` is a list or tuple (several workers:
            use :class:`MultiAsyncCollector`), or ``num_workers`` is given.
        ValueError: ``preemptive_threshold`` is outside ``[0, 1]``.

    Examples:
        >>> from rl.collectors import AsyncCollector
        >>> from rl.envs import GymEnv
        >>> collector = AsyncCollector(
        ...     lambda: GymEnv("Pendulum-v1"), None, frames_per_batch=50, total_frames=200
        ... )
        >>> print([tuple(batch.shape) for batch in collector])
        [(50,), (50,), (50,), (50,)]
        >>> collector.shutdown()
    """

    def __init__(
        self,
        create_env_fn: Callable[..., Any],
        policy: Callable[[TensorDictBase], TensorDictBase] | None = None,
        *,
        policy_factory: Callable[[], Callable] | None = None,
        frames_per_batch: int,
        total_frames: int | None = -1,
        device=None,
        storing_device=None,
        env_device=None,
        policy_device=None,
        create_env_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        max_frames_per_traj: int | None = None,
        init_random_frames: int | None = None,
        reset_at_each_iter: bool = False,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        split_trajs: bool | None = None,
        exploration_type: ExplorationType = ExplorationType.RANDOM,
        reset_when_done: bool = True,
        update_at_each_batch: bool = False,
        preemptive_threshold: float | None = None,
        num_threads: int | None = None,
        num_sub_threads: int = 1,
        set_truncated: bool = False,
        track_policy_version: bool = False,
        **kwargs,
    ) -> None:
        self.closed = True  # until the worker runs (shutdown / __del__ on a failed build)
        if isinstance(create_env_fn, list | tuple):
            raise TypeError(
                "AsyncCollector runs one env in one worker: create_env_fn must be one env "
                f"factory, got a {type(create_env_fn).__name__} of {len(create_env_fn)} "
                "(use MultiAsyncCollector for several workers)"
            )
        for name in ("num_workers", "cat_results"):
            if name in kwargs:
                raise TypeError(f"AsyncCollector takes no {name} argument (it has one worker)")
        if preemptive_threshold is not None:
            threshold = float(preemptive_threshold)
            if not 0.0 <= threshold <= 1.0:
                raise ValueError(
                    f"preemptive_threshold must be between 0.0 and 1.0, got {preemptive_threshold}"
                )
        self.preemptive_threshold = 1.0 if preemptive_threshold is None else threshold
        if isinstance(create_env_kwargs, list | tuple):
            if len(create_env_kwargs) != 1:
                raise ValueError(
                    f"create_env_kwargs has {len(create_env_kwargs)} entries, expected one "
                    "(AsyncCollector has one worker)"
                )
            create_env_kwargs = create_env_kwargs[0]
        if total_frames is None:  # TorchRL's type allows it: no limit
            total_frames = -1
        super().__init__(
            [create_env_fn],
            policy,
            policy_factory=policy_factory,
            frames_per_batch=frames_per_batch,
            total_frames=total_frames,
            device=device,
            storing_device=storing_device,
            env_device=env_device,
            policy_device=policy_device,
            create_env_kwargs=create_env_kwargs,
            max_frames_per_traj=max_frames_per_traj,
            init_random_frames=init_random_frames,
            reset_at_each_iter=reset_at_each_iter,
            postproc=postproc,
            split_trajs=split_trajs,
            exploration_type=exploration_type,
            reset_when_done=reset_when_done,
            update_at_each_batch=update_at_each_batch,
            num_threads=num_threads,
            num_sub_threads=num_sub_threads,
            set_truncated=set_truncated,
            track_policy_version=track_policy_version,
            **kwargs,
        )
