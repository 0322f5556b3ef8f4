"""The arguments of a ``RayCollector``: defaults, per-collector lists, layout checks and
the weights it sends."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from .._base import CollectorBase
from .._multi import MultiAsyncCollector, MultiSyncCollector, load_weights_into
from .._single import Collector

__all__ = [
    "DEFAULT_REMOTE_CLASS_CONFIG",
    "default_remote_config",
    "layout_error",
    "per_collector",
    "resolve_collector_class",
    "weights_to_send",
]

#: the Ray resources of each collector actor when ``remote_configs`` is not given
#: (TorchRL also reserves 2 GiB of Ray ``memory``; an actor that asks for more memory
#: than a small machine has would wait forever, so none is reserved here)
DEFAULT_REMOTE_CLASS_CONFIG: dict[str, Any] = {"num_cpus": 1}

_COLLECTOR_CLASSES = {
    "single": Collector,
    "sync": MultiSyncCollector,
    "async": MultiAsyncCollector,
}


def default_remote_config() -> dict[str, Any]:
    """:data:`DEFAULT_REMOTE_CLASS_CONFIG`, plus 0.2 GPU where CUDA is available."""
    config = dict(DEFAULT_REMOTE_CLASS_CONFIG)
    if torch.cuda.is_available():
        config["num_gpus"] = 0.2
    return config


def resolve_collector_class(collector_class: Any) -> type:
    """A collector class from a class or TorchRL's names ``"single"``, ``"sync"``,
    ``"async"``."""
    if isinstance(collector_class, str):
        if collector_class not in _COLLECTOR_CLASSES:
            raise ValueError(
                f"collector_class must be a collector class or one of "
                f"{sorted(_COLLECTOR_CLASSES)}, got {collector_class!r}"
            )
        return _COLLECTOR_CLASSES[collector_class]
    if not (isinstance(collector_class, type) and issubclass(collector_class, CollectorBase)):
        raise ValueError(
            "collector_class must be a subclass of an rl collector or one of "
            f"{sorted(_COLLECTOR_CLASSES)}, got {collector_class!r}"
        )
    return collector_class


def per_collector(value: Any, n: int, name: str) -> list:
    """``value`` for each of the ``n`` collectors (a list of ``n`` is taken as is)."""
    if isinstance(value, list | tuple):
        if len(value) != n:
            raise ValueError(
                f"{name} has {len(value)} entries but num_collectors={n}: pass one value "
                "or one per collector"
            )
        return list(value)
    return [value] * n


def layout_error(
    infos: list[dict], frames_per_batch: int, total_frames: int, n: int, sync: bool
) -> str | None:
    """Why the actors (their ``ready()`` answers) cannot give exact batches, or ``None``."""
    frames = frames_per_batch // n if sync else frames_per_batch
    for i, info in enumerate(infos):
        step = info["granularity"]
        if frames % step:
            return (
                f"frames_per_batch={frames_per_batch} gives {frames} frames per batch to actor "
                f"{i}, not a multiple of its {step} frames per step (env batch size "
                f"{list(info['env_batch_size'])})"
            )
        if total_frames != -1:
            last = total_frames % frames_per_batch
            last_per = last // n if sync else last
            if total_frames % step or (last and sync and last % n) or last_per % step:
                return (
                    f"total_frames={total_frames} cannot be split exactly: the last batch has "
                    f"{last} frames, which must give each actor a multiple of its {step} "
                    f"frames per step (actor {i})"
                )
    if sync and len({tuple(info["env_batch_size"]) for info in infos}) > 1:
        return (
            "sync mode stacks one batch per actor: every actor's env needs the same batch "
            f"size, got {[list(info['env_batch_size']) for info in infos]}"
        )
    return None


def weights_to_send(policy_or_weights: Any, template: TensorDictBase | None) -> Any:
    """What ``update_policy_weights_(policy_or_weights)`` puts in the object store.

    ``None`` sends ``template`` (the policy's parameters as they are now); a module or a
    TensorDict is copied into the template's layout (a wrong structure fails here, not
    in the actors); a state dict is sent as it is.
    """
    if policy_or_weights is None:
        return template
    if isinstance(policy_or_weights, nn.Module):
        weights = TensorDict.from_module(policy_or_weights).data
    elif isinstance(policy_or_weights, TensorDictBase):
        weights = policy_or_weights.data
    elif isinstance(policy_or_weights, Mapping):
        return dict(policy_or_weights)
    else:
        raise TypeError(
            "policy weights must be an nn.Module, a state dict or a TensorDict of "
            f"parameters, got {type(policy_or_weights).__name__}"
        )
    if template is None:
        return weights
    snapshot = template.clone()
    load_weights_into(snapshot, weights)
    return snapshot
