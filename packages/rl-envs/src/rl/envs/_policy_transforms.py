"""The env transforms a recurrent policy needs (``EnvBase(..., policy=...)`` and the
collectors' ``auto_register_policy_transforms``).

A recurrent module (``rl.modules.GRUModule``, ``LSTMModule``, anything with a
``make_tensordict_primer()``) reads an ``"is_init"`` flag and its hidden state from the
root: the env needs an :class:`~rl.envs.InitTracker` and the module's
:class:`~rl.envs.TensorDictPrimer`. The check is on the env's specs, so an env that
already provides them (at its top or inside a batched env's workers) is left as it is.
"""

from __future__ import annotations

import warnings
from typing import Any

from torch import nn

from ._env_base import EnvBase
from .transforms import Compose, InitTracker, TensorDictPrimer

__all__ = ["missing_policy_transforms", "append_policy_transforms"]


def _as_tuple(key: Any) -> tuple:
    return key if isinstance(key, tuple) else (key,)


def _flatten(transform: Any) -> list:
    if isinstance(transform, Compose):
        return [t for sub in transform for t in _flatten(sub)]
    return [transform]


def missing_policy_transforms(env: EnvBase, policy: Any, init_key: str = "is_init") -> list:
    """The transforms ``policy``'s recurrent submodules need that ``env`` lacks (none
    for a policy without recurrent submodules, or that is not an ``nn.Module``)."""
    if not isinstance(policy, nn.Module):
        return []
    primers, failures = [], []
    for sub in policy.modules():
        make = getattr(sub, "make_tensordict_primer", None)
        if not callable(make):
            continue
        try:
            primers.append(make())
        except Exception as err:  # a module that cannot say its state without more input
            failures.append(f"{type(sub).__name__}: {err}")
    if failures:
        warnings.warn(
            "the env primers of these policy modules could not be built: " + "; ".join(failures),
            UserWarning,
            stacklevel=3,
        )
    if not primers:
        return []
    keys = {_as_tuple(k) for k in env.full_observation_spec.keys(True, True)}
    keys |= {_as_tuple(k) for k in env.full_state_spec.keys(True, True)}
    out: list = []
    if not any(k[-1] == init_key for k in keys):
        out.append(InitTracker(init_key=init_key))
    for primer in primers:
        for transform in _flatten(primer):
            if (
                isinstance(transform, TensorDictPrimer)
                and {_as_tuple(k) for k in transform.primers} <= keys
            ):
                continue
            out.append(transform)
    return out


def append_policy_transforms(env: EnvBase, policy: Any, init_key: str = "is_init") -> EnvBase:
    """``env`` with the transforms of :func:`missing_policy_transforms` appended."""
    for transform in missing_policy_transforms(env, policy, init_key):
        env = env.append_transform(transform)
    return env
