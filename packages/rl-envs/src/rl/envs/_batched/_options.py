"""TorchRL's keyword arguments of ``SerialEnv`` / ``ParallelEnv``, checked in one place.

Each one has its TorchRL effect where it means something here: ``pin_memory``,
``non_blocking`` and ``share_individual_td`` shape what ``reset`` / ``step`` return,
``num_threads`` sets this process's torch threads, and for ``ParallelEnv``
``daemon`` / ``shutdown_timeout`` set the worker processes' daemon flag and the grace
period of their shutdown. The batched envs always move data through preallocated
(shared-memory) buffers built from the specs, so the knobs of TorchRL's other transports
(``memmap``, ``policy_proof``, ``metadata_from_workers``, ``shared_memory=False``) have
nothing to tune: a non-default value of one of them warns (``UserWarning``) instead of
being ignored silently. All are kept in ``env.batched_options``.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

__all__ = ["TORCHRL_BATCHED_OPTIONS", "batched_options", "given_options", "warn_without_effect"]

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


def given_options(arguments: dict[str, Any]) -> dict[str, Any]:
    """The TorchRL keyword arguments among a constructor's ``arguments`` (its
    ``locals()``), for :func:`batched_options`."""
    return {name: arguments[name] for name in TORCHRL_BATCHED_OPTIONS}


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
    if options["pin_memory"] and not torch.cuda.is_available():
        raise ValueError(
            f"{owner}(pin_memory=True) pins the returned tensors for fast copies to a CUDA "
            "device, but CUDA is not available (torch.cuda.is_available() is False); "
            "leave pin_memory=False"
        )
    timeout = options["shutdown_timeout"]
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
        raise ValueError(f"shutdown_timeout must be a number of seconds >= 0, got {timeout!r}")
    without_effect = {
        "memmap": "the buffers are shared memory, not memory-mapped files",
        "policy_proof": "what the policy writes is found at the first step",
        "metadata_from_workers": "the specs are read from a sub-env built in this process",
    }
    given_no_effect = {k: why for k, why in without_effect.items() if k in given}
    bad = {k: why for k, why in given_no_effect.items() if given[k] != TORCHRL_BATCHED_OPTIONS[k]}
    warn_without_effect(owner, {k: given.get(k, options[k]) for k in bad}, bad)
    return options


def warn_without_effect(owner: str, given: dict[str, Any], reasons: dict[str, str]) -> None:
    """Warns that the TorchRL arguments ``given`` have no effect here (with the reason)."""
    if not given:
        return
    detail = "; ".join(f"{key}={given[key]!r}: {reasons[key]}" for key in sorted(given))
    warnings.warn(f"{owner} ignores these TorchRL arguments ({detail})", UserWarning, stacklevel=4)
