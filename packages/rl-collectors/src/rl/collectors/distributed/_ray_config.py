"""The Ray resources of a ``RayCollector``'s actors and the weights it sends them."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from .._multi import load_weights_into
from ._common import policy_weights

__all__ = ["DEFAULT_REMOTE_CLASS_CONFIG", "default_remote_config", "weights_to_send"]

#: the Ray resources of each collector actor when ``remote_configs`` is not given
#: (TorchRL also reserves 2 GiB of Ray ``memory``; an actor that asks for more memory
#: than a small machine has would wait forever, so none is reserved here)
DEFAULT_REMOTE_CLASS_CONFIG: dict[str, Any] = {"num_cpus": 1}


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
