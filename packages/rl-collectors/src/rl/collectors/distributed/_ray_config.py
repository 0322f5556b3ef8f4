"""The arguments of a ``RayCollector``: their checks, each actor's collector keyword
arguments and Ray resources, and the weights it sends the actors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDictBase

from .._multi import load_weights_into
from .._single import Collector
from ._common import per_worker, policy_weights, resolve_collector_class

__all__ = [
    "DEFAULT_REMOTE_CLASS_CONFIG",
    "actor_kwargs",
    "check_arguments",
    "default_remote_config",
    "weights_to_send",
]

#: the Ray resources of each collector actor when ``remote_configs`` is not given
#: (TorchRL also reserves 2 GiB of Ray ``memory``; an actor that asks for more memory
#: than a small machine has would wait forever, so none is reserved here)
DEFAULT_REMOTE_CLASS_CONFIG: dict[str, Any] = {"num_cpus": 1}

_UNSUPPORTED = {
    "weight_updater": "the weights go to the actors through Ray's object store with "
    "update_policy_weights_()",
    "weight_sync_schemes": "the weights go to the actors through Ray's object store with "
    "update_policy_weights_()",
    "weight_recv_schemes": "a RayCollector cannot itself receive weights here",
    "trajs_per_batch": "the rl collectors yield batches of frames_per_batch frames; pass "
    "split_trajs=True for padded trajectories",
}


def default_remote_config() -> dict[str, Any]:
    """:data:`DEFAULT_REMOTE_CLASS_CONFIG`, plus 0.2 GPU where CUDA is available."""
    config = dict(DEFAULT_REMOTE_CLASS_CONFIG)
    if torch.cuda.is_available():
        config["num_gpus"] = 0.2
    return config


def weights_to_send(policy_or_weights: Any, template: TensorDictBase | None) -> Any:
    """What ``update_policy_weights_(policy_or_weights)`` puts in the object store.

    ``None`` sends ``template`` (the policy's parameters as they are now); a module, a
    TensorDict or a state dict is read by
    :func:`~rl.collectors.distributed._common.policy_weights` and copied into the
    template's layout, so that a wrong structure fails here, not in the actors.

    Raises:
        TypeError: ``policy_or_weights`` is none of the above.
        KeyError: its structure is not the template's.
    """
    if policy_or_weights is None:
        return template
    weights = policy_weights(policy_or_weights)
    if template is None or weights is None:
        return weights
    snapshot = template.clone()
    load_weights_into(snapshot, weights)
    return snapshot


def check_arguments(
    create_env_fn: Any, policy: Any, *, policy_factory: Any, frames_per_batch: Any,
    total_frames: int, collector_class: Any, num_collectors: int | None, sync: bool,
    num_workers_per_collector: int, pre_collect_hook: Any, post_collect_hook: Any,
    **unsupported: Any,
) -> tuple[type, int]:  # fmt: skip
    """Raises on arguments a ``RayCollector`` cannot run with.

    Args:
        unsupported: TorchRL's arguments that are not supported (``weight_updater``,
            ``weight_sync_schemes``, ``weight_recv_schemes``, ``trajs_per_batch``):
            any that is not ``None`` raises.

    Returns:
        the collector class (TorchRL's names resolved) and the number of actors.
    """
    for name, value in unsupported.items():
        if value is not None:
            raise ValueError(f"{name} is not supported by RayCollector: {_UNSUPPORTED[name]}")
    if policy is not None and policy_factory is not None:
        raise ValueError("pass policy or policy_factory, not both")
    for name, hook in (("pre_collect_hook", pre_collect_hook),
                       ("post_collect_hook", post_collect_hook)):  # fmt: skip
        if hook is not None and not callable(hook):
            raise TypeError(f"{name} must be callable, got {type(hook).__name__}")
    collector_class = resolve_collector_class(collector_class)
    if isinstance(frames_per_batch, bool) or not isinstance(frames_per_batch, int):
        raise TypeError(f"frames_per_batch must be an int, got {frames_per_batch!r}")
    if frames_per_batch <= 0:
        raise ValueError(f"frames_per_batch must be positive, got {frames_per_batch}")
    if total_frames != -1 and total_frames <= 0:
        raise ValueError(f"total_frames must be -1 or positive, got {total_frames}")
    n = num_collectors
    if n is None:
        n = len(create_env_fn) if isinstance(create_env_fn, list | tuple) else 1
    if n < 1:
        raise ValueError(f"num_collectors must be at least 1, got {n}")
    if sync and frames_per_batch % n:
        raise ValueError(
            f"frames_per_batch={frames_per_batch} must be a multiple of num_collectors={n} "
            f"in sync mode: each actor collects frames_per_batch / {n} frames per batch"
        )
    if num_workers_per_collector > 1 and issubclass(collector_class, Collector):
        raise ValueError(
            f"num_workers_per_collector={num_workers_per_collector} applies to the "
            "multiprocess collector classes ('sync', 'async'); a Collector runs one env: "
            "pass a batched env factory (e.g. SerialEnv) to step several"
        )
    return collector_class, n


def actor_kwargs(
    n: int, *, collector_kwargs: Any, collector_class: type, frames_per_batch: int,
    num_workers_per_collector: int, devices: Mapping[str, Any], common: Mapping[str, Any],
    in_actor: Mapping[str, Any] | None,
) -> list[dict]:  # fmt: skip
    """The keyword arguments of each actor's collector.

    Args:
        n: the number of actors.
        collector_kwargs: one dict or one per actor; they override the others.
        collector_class: the actors' collector class.
        frames_per_batch: the frames of each actor's batches.
        num_workers_per_collector: the worker processes of a multiprocess collector.
        devices: ``device``, ``storing_device``, ... (one value or one per actor).
        common: the other arguments every actor's collector gets.
        in_actor: ``replay_buffer``, ``postproc`` and ``split_trajs`` when the actors
            write into a Ray replay buffer themselves.
    """
    out = [
        dict(kw or {}) for kw in per_worker(collector_kwargs, n, "collector_kwargs", "collector")
    ]
    per_device = {name: per_worker(v, n, name, "collector") for name, v in devices.items()}
    for i, kw in enumerate(out):
        kw["frames_per_batch"] = frames_per_batch
        for name, value in common.items():
            kw.setdefault(name, value)
        for name, values in per_device.items():
            if values[i] is not None:
                kw.setdefault(name, values[i])
        if num_workers_per_collector > 1 or not issubclass(collector_class, Collector):
            kw.setdefault("num_workers", num_workers_per_collector)
        if in_actor is not None:
            kw["replay_buffer"] = in_actor["replay_buffer"]
            kw.setdefault("postproc", in_actor["postproc"])
            kw.setdefault("split_trajs", in_actor["split_trajs"])
    return out
