"""Collector builders of a config-driven script (TorchRL's ``trainers.helpers.collectors``).

The collectors come from rl-collectors, the parallel env from rl-envs and the n-step
post-processing from rl-data (``pip install "rl-core[helpers]"``), imported when a
builder runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from tensordict.nn import InteractionType

from ._config import field, require

__all__ = [
    "OffPolicyCollectorConfig",
    "OnPolicyCollectorConfig",
    "make_collector_offpolicy",
    "make_collector_onpolicy",
    "sync_async_collector",
    "sync_sync_collector",
]


def _ceil_div(a: int, b: int) -> int:
    return -(a // -b)


def split_env_fns(
    env_fns: Callable | list[Callable],
    env_kwargs: dict | list[dict] | None,
    num_env_per_collector: int | None,
    num_collectors: int | None,
) -> tuple[list[list[Callable]], list[list[dict]]]:
    """Groups the env makers (and their kwargs) into one list per collector.

    A single maker is repeated ``num_env_per_collector * num_collectors`` times; a list
    is cut into groups of ``num_env_per_collector`` (the count missing of the two is
    derived from the list's length).

    Raises:
        ValueError: the counts are missing or too small for the makers given, or the
            kwargs list does not match the makers.
    """
    if isinstance(env_fns, list):
        num_env = len(env_fns)
        if num_env_per_collector is None and num_collectors is None:
            raise ValueError(
                "with a list of env makers, give num_env_per_collector or num_collectors"
            )
        if num_env_per_collector is None:
            num_env_per_collector = _ceil_div(num_env, num_collectors)
        elif num_collectors is None:
            num_collectors = _ceil_div(num_env, num_env_per_collector)
        elif num_env_per_collector * num_collectors < num_env:
            raise ValueError(
                f"num_env_per_collector * num_collectors={num_env_per_collector * num_collectors}"
                f" is less than the {num_env} env makers given"
            )
    else:
        if num_env_per_collector is None or num_collectors is None:
            raise ValueError(
                "with a single env maker, give both num_env_per_collector and num_collectors,"
                f" got num_env_per_collector={num_env_per_collector} and "
                f"num_collectors={num_collectors}"
            )
        num_env = num_env_per_collector * num_collectors
        env_fns = [env_fns] * num_env
    if env_kwargs is None:
        env_kwargs = {}
    if not isinstance(env_kwargs, list):
        env_kwargs = [env_kwargs] * num_env
    if len(env_kwargs) != num_env:
        raise ValueError(f"got {len(env_kwargs)} env_kwargs for {num_env} env makers")
    fns = [env_fns[i : i + num_env_per_collector] for i in range(0, num_env, num_env_per_collector)]
    kws = [
        env_kwargs[i : i + num_env_per_collector] for i in range(0, num_env, num_env_per_collector)
    ]
    if len(fns) != num_collectors:
        raise ValueError(
            f"num_collectors={num_collectors} collectors for {num_env} env makers in groups of "
            f"{num_env_per_collector} make {len(fns)} groups"
        )
    return fns, kws


def _make_collector(
    collector_class: type,
    env_fns: Callable | list[Callable],
    env_kwargs: dict | list[dict] | None,
    policy: Callable,
    max_frames_per_traj: int = -1,
    frames_per_batch: int = 200,
    total_frames: int | None = None,
    postproc: Callable | None = None,
    num_env_per_collector: int | None = None,
    num_collectors: int | None = None,
    **kwargs,
):
    fns, kws = split_env_fns(env_fns, env_kwargs, num_env_per_collector, num_collectors)
    if len(fns[0]) == 1:
        makers = [group[0] for group in fns]
        makers_kwargs = [group[0] for group in kws]
    else:
        envs = require("rl.envs", collector_class.__name__)
        makers = [
            _ParallelEnvMaker(envs.ParallelEnv, group, group_kwargs)
            for group, group_kwargs in zip(fns, kws)
        ]
        makers_kwargs = None
    collectors = require("rl.collectors", collector_class.__name__)
    if collector_class is collectors.Collector:
        makers = makers[0]
        makers_kwargs = makers_kwargs[0] if makers_kwargs is not None else None
    return collector_class(
        create_env_fn=makers,
        create_env_kwargs=makers_kwargs,
        policy=policy,
        total_frames=-1 if total_frames is None else total_frames,
        max_frames_per_traj=None if max_frames_per_traj in (None, -1) else max_frames_per_traj,
        frames_per_batch=frames_per_batch,
        postproc=postproc,
        **kwargs,
    )


class _ParallelEnvMaker:
    """Builds a ``ParallelEnv`` over a group of env makers (picklable, unlike a lambda)."""

    def __init__(self, parallel_env_class: type, env_fns: list, env_kwargs: list) -> None:
        self.parallel_env_class = parallel_env_class
        self.env_fns = env_fns
        self.env_kwargs = env_kwargs

    def __call__(self):
        return self.parallel_env_class(
            num_workers=len(self.env_fns),
            create_env_fn=self.env_fns,
            create_env_kwargs=self.env_kwargs,
        )


def sync_async_collector(
    env_fns: Callable | list[Callable],
    env_kwargs: dict | list[dict] | None,
    num_env_per_collector: int | None = None,
    num_collectors: int | None = None,
    **kwargs,
):
    """A ``MultiAsyncCollector`` of ``num_collectors`` workers, each stepping its envs in sync.

    Each worker runs ``num_env_per_collector`` envs (in a ``ParallelEnv`` when more than
    one) and hands over its batch as soon as it is ready.

    Args:
        env_fns: an env maker, or one per env.
        env_kwargs: the makers' keyword arguments (one dict, or one per env).
        num_env_per_collector: envs per worker (derived from a list of makers if None).
        num_collectors: workers (derived from a list of makers if None).
        **kwargs: the collector's arguments (``policy``, ``frames_per_batch``,
            ``total_frames``, ``max_frames_per_traj``, ``postproc``, ``device``, ...).

    Raises:
        ValueError: see :func:`split_env_fns`.
    """
    collectors = require("rl.collectors", "sync_async_collector")
    return _make_collector(
        collectors.MultiAsyncCollector,
        env_fns=env_fns,
        env_kwargs=env_kwargs,
        num_env_per_collector=num_env_per_collector,
        num_collectors=num_collectors,
        **kwargs,
    )


def sync_sync_collector(
    env_fns: Callable | list[Callable],
    env_kwargs: dict | list[dict] | None,
    num_env_per_collector: int | None = None,
    num_collectors: int | None = None,
    **kwargs,
):
    """Synchronous collection: a ``Collector`` (one collector) or a ``MultiSyncCollector``.

    The workers step their envs (in a ``ParallelEnv`` when more than one per worker) and
    their batches are gathered into one.

    Args:
        env_fns: an env maker, or one per env.
        env_kwargs: the makers' keyword arguments (one dict, or one per env).
        num_env_per_collector: envs per collector (derived from a list of makers if None).
        num_collectors: collectors (derived from a list of makers if None).
        **kwargs: the collector's arguments (``policy``, ``frames_per_batch``,
            ``total_frames``, ``max_frames_per_traj``, ``postproc``, ``device``, ...).

    Raises:
        ValueError: see :func:`split_env_fns`.

    Examples:
        >>> from rl.envs import PendulumEnv
        >>> collector = sync_sync_collector(
        ...     PendulumEnv, None, num_env_per_collector=1, num_collectors=1,
        ...     policy=None, frames_per_batch=8, total_frames=16,
        ... )
        >>> [batch.numel() for batch in collector]
        [8, 8]
        >>> collector.shutdown()
    """
    collectors = require("rl.collectors", "sync_sync_collector")
    cls = collectors.Collector if num_collectors == 1 else collectors.MultiSyncCollector
    return _make_collector(
        cls,
        env_fns=env_fns,
        env_kwargs=env_kwargs,
        num_env_per_collector=num_env_per_collector,
        num_collectors=num_collectors,
        **kwargs,
    )


def _exploration_type(value: Any) -> InteractionType:
    if isinstance(value, str):
        try:
            return InteractionType.from_str(value)
        except (KeyError, ValueError):
            raise ValueError(
                f"cfg.exploration_type must be one of "
                f"{[t.name.lower() for t in InteractionType]}, got {value!r}"
            ) from None
    return value


def _collector_kwargs(make_env, policy, cfg, make_env_kwargs, needed_by: str) -> dict:
    """The arguments both collector builders pass, read from ``cfg``."""
    decl = "OnPolicyCollectorConfig"
    devices = field(cfg, "collector_device", needed_by, decl)
    if isinstance(devices, (list, tuple)) and len(devices) == 1:
        devices = devices[0]
    env_kwargs = {}
    if isinstance(make_env_kwargs, dict):
        env_kwargs.update(make_env_kwargs)
    elif make_env_kwargs is not None:
        env_kwargs = make_env_kwargs
    num_workers = field(cfg, "num_workers", needed_by, decl)
    env_per_collector = field(cfg, "env_per_collector", needed_by, decl)
    if num_workers < 1 or env_per_collector < 1:
        raise ValueError(
            "cfg.num_workers and cfg.env_per_collector must be >= 1, got "
            f"{num_workers} and {env_per_collector}"
        )
    return {
        "env_fns": make_env,
        "env_kwargs": env_kwargs,
        "policy": policy,
        # the trajectory limit, cfg.max_frames_per_traj, is the envs' StepCounter's (see
        # make_env_transforms): a collector refuses an env that already counts steps
        "max_frames_per_traj": None,
        "frames_per_batch": field(cfg, "frames_per_batch", needed_by, decl),
        "total_frames": field(cfg, "total_frames", needed_by, decl),
        # make_env already builds the env_per_collector envs of one collector
        "num_env_per_collector": 1,
        "num_collectors": _ceil_div(num_workers, env_per_collector),
        "device": devices,
        "storing_device": devices,
        # trajectories are kept apart (multi-step returns must not cross them)
        "split_trajs": True,
        "exploration_type": _exploration_type(field(cfg, "exploration_type", needed_by, decl)),
    }


def make_collector_offpolicy(
    make_env: Callable,
    actor_model_explore: Any,
    cfg: Any,
    make_env_kwargs: dict | None = None,
):
    """The collector of an off-policy script, read from ``cfg`` (:class:`OffPolicyCollectorConfig`).

    ``ceil(cfg.num_workers / cfg.env_per_collector)`` collectors each run one
    ``make_env`` (which builds the ``env_per_collector`` envs of a collector, e.g.
    :func:`parallel_env_constructor`); asynchronous with ``cfg.async_collection``, else
    synchronous. With ``cfg.multi_step`` the batches go through an n-step
    ``MultiStep(cfg.gamma, cfg.n_steps_return)``. The first ``cfg.init_random_frames``
    frames are collected with random actions. The collector is seeded with ``cfg.seed``.
    ``cfg`` is not modified (TorchRL replaces a one-element ``cfg.collector_device`` with
    its element).

    ``cfg.max_frames_per_traj`` is left to the envs: :func:`transformed_env_constructor`
    adds a ``StepCounter`` with that limit. TorchRL passes it to the collector as well,
    which then refuses those envs (they already count steps); a ``make_env`` of your own
    should truncate its trajectories itself.

    Args:
        make_env: the env maker.
        actor_model_explore: the exploration policy.
        cfg: the config.
        make_env_kwargs: keyword arguments for ``make_env``.

    Returns:
        A ``Collector`` (one collector), ``MultiSyncCollector`` or ``MultiAsyncCollector``.

    Raises:
        AttributeError: a field ``cfg`` lacks (named in the message).
        ValueError: ``cfg.num_workers`` or ``cfg.env_per_collector`` is below 1, or
            ``cfg.exploration_type`` is unknown.
    """
    needed = "make_collector_offpolicy"
    decl = "OffPolicyCollectorConfig"
    kwargs = _collector_kwargs(make_env, actor_model_explore, cfg, make_env_kwargs, needed)
    postproc = None
    if field(cfg, "multi_step", needed, decl):
        data = require("rl.data", needed)
        postproc = data.MultiStep(
            gamma=field(cfg, "gamma", needed, "LossConfig"),
            n_steps=field(cfg, "n_steps_return", needed, decl),
        )
    kwargs["postproc"] = postproc
    kwargs["init_random_frames"] = field(cfg, "init_random_frames", needed, decl)
    builder = (
        sync_async_collector
        if field(cfg, "async_collection", needed, decl)
        else sync_sync_collector
    )
    collector = builder(**kwargs)
    collector.set_seed(field(cfg, "seed", needed, decl))
    return collector


def make_collector_onpolicy(
    make_env: Callable,
    actor_model_explore: Any,
    cfg: Any,
    make_env_kwargs: dict | None = None,
):
    """The synchronous collector of an on-policy script (:class:`OnPolicyCollectorConfig`).

    As :func:`make_collector_offpolicy`, without the n-step post-processing, the random
    first frames, or asynchronous collection (on-policy data must come from the current
    policy).

    Args:
        make_env: the env maker.
        actor_model_explore: the policy.
        cfg: the config.
        make_env_kwargs: keyword arguments for ``make_env``.

    Returns:
        A ``Collector`` (one collector) or a ``MultiSyncCollector``.

    Raises:
        AttributeError: a field ``cfg`` lacks (named in the message).
        ValueError: ``cfg.num_workers`` or ``cfg.env_per_collector`` is below 1, or
            ``cfg.exploration_type`` is unknown.
    """
    needed = "make_collector_onpolicy"
    kwargs = _collector_kwargs(make_env, actor_model_explore, cfg, make_env_kwargs, needed)
    collector = sync_sync_collector(postproc=None, **kwargs)
    collector.set_seed(field(cfg, "seed", needed, "OnPolicyCollectorConfig"))
    return collector


@dataclass
class OnPolicyCollectorConfig:
    """The collector fields of an on-policy script's config."""

    collector_device: Any = dataclass_field(default_factory=lambda: ["cpu"])
    """Device(s) the collectors run and store on (one, or one per collector)."""
    pin_memory: bool = False
    """Pin the batches' memory before they are handed over."""
    frames_per_batch: int = 1000
    """Frames each collection returns."""
    total_frames: int = 50000000
    """Frames collected over the run (divided by the frame skip, see
    :func:`correct_for_frame_skip`)."""
    num_workers: int = 32
    """Envs run for collection in all."""
    env_per_collector: int = 8
    """Envs per collector: ``ceil(num_workers / env_per_collector)`` collectors run."""
    seed: int = 42
    """Seed of the collectors' envs."""
    exploration_type: str = "random"
    """Exploration of the collection policy: random, mode, mean or deterministic."""
    async_collection: bool = False
    """Collect while the optimisation runs (with the previous weights)."""


@dataclass
class OffPolicyCollectorConfig(OnPolicyCollectorConfig):
    """The collector fields of an off-policy script's config."""

    multi_step: bool = False
    """Use n-step returns."""
    n_steps_return: int = 3
    """The n of the n-step returns."""
    init_random_frames: int = 50000
    """Frames collected with random actions first."""
