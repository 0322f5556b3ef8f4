"""TorchRL's keyword arguments of ``SerialEnv`` / ``ParallelEnv``, checked in one place.

The batched envs here always move data through preallocated (shared-memory) buffers
built from the specs, so several of TorchRL's tuning knobs have nothing to tune; they
are accepted (code written for TorchRL runs) and kept in ``env.batched_options``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TORCHRL_BATCHED_OPTIONS", "batched_options"]

#: TorchRL 0.14's defaults of the ``BatchedEnvBase`` keyword arguments accepted here
TORCHRL_BATCHED_OPTIONS: dict[str, Any] = {
    "pin_memory": False,
    "share_individual_td": None,
    "shared_memory": True,
    "memmap": False,
    "policy_proof": None,
    "allow_step_when_done": False,
    "num_threads": None,
    "serial_for_single": False,
    "non_blocking": False,
    "use_buffers": None,
    "metadata_from_workers": False,
    "consolidate": True,
    "daemon": False,
    "shutdown_timeout": 10.0,
}


def batched_options(owner: str, given: dict[str, Any]) -> dict[str, Any]:
    """TorchRL's defaults updated with ``given``.

    Raises:
        TypeError: an unknown argument, or ``num_threads`` that is not a positive int.
    """
    unknown = sorted(set(given) - set(TORCHRL_BATCHED_OPTIONS))
    if unknown:
        raise TypeError(
            f"{owner} got unexpected keyword arguments {unknown}; accepted: "
            f"{sorted(TORCHRL_BATCHED_OPTIONS)}"
        )
    options = {**TORCHRL_BATCHED_OPTIONS, **given}
    num_threads = options["num_threads"]
    if num_threads is not None and (
        isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1
    ):
        raise TypeError(f"num_threads must be a positive int or None, got {num_threads!r}")
    return options
