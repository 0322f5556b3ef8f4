"""rl.collectors.distributed: collectors whose workers run elsewhere.

``RayCollector`` runs collectors as Ray actors and ``RayEvalWorker`` evaluation
rollouts in one (``rl-collectors[ray]``);
``DistributedDataCollector`` and ``DistributedSyncDataCollector`` run them on other ranks
of a ``torch.distributed`` process group. Each name is imported on first use, so
``import rl.collectors.distributed`` stays light and does not need Ray.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "RayCollector": "._ray",
    "RayEvalWorker": "._ray_eval_worker",
    "DistributedCollector": "._torch_distributed",
    "DistributedDataCollector": "._torch_distributed",
    "DistributedSyncCollector": "._torch_distributed",
    "DistributedSyncDataCollector": "._torch_distributed",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
