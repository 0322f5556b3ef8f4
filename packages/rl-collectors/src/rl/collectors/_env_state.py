"""Saving and restoring an env's internal state for an exact resume (where it pickles).

A gymnasium env's state (physics, its ``np_random``, the time-limit counter) lives in the
gym objects, which pickle, while the ``GymEnv`` around them holds closures, which do
not. So the state is taken per kind of env: the gym env (or the sub-envs of a
``SyncVectorEnv``) of a :class:`~rl.envs.GymWrapper`, each sub-env of a
:class:`~rl.envs.SerialEnv`, the base env and transform of a
:class:`~rl.envs.TransformedEnv`, and the env object itself otherwise. Restoring
updates the objects in place (``__dict__``), so references held elsewhere (a
``SerialEnv``'s workers, bound methods) keep working. A :class:`~rl.envs.ParallelEnv`
keeps its state in its worker processes: it has none to save.

Loading does not unpickle arbitrary objects: the unpickler resolves only classes of
gymnasium, numpy, rl and the standard containers, plus the few functions numpy and torch
rebuild their arrays and generators with. A payload naming anything else (``os.system``,
``builtins.eval``, any other function) raises ``pickle.UnpicklingError``.
"""

from __future__ import annotations

import builtins
import io
import pickle
from typing import Any

import torch
from gymnasium.vector import SyncVectorEnv

from rl.envs import EnvBase, GymWrapper, ParallelEnv, SerialEnv, TransformedEnv

__all__ = ["env_state", "load_env_state"]

_GYM_WRAPPER_KEYS = ("_autoreset", "_last_obs", "_pending_seed")


def _state(env: EnvBase) -> Any:
    if isinstance(env, TransformedEnv):
        return ("transformed", _state(env.base_env), env.transform.__dict__)
    if isinstance(env, SerialEnv):
        return ("serial", [_state(sub) for sub in env.envs])
    if isinstance(env, ParallelEnv):
        raise TypeError("a ParallelEnv keeps its state in its workers")
    if isinstance(env, GymWrapper):
        gym_env = env.env
        if isinstance(gym_env, SyncVectorEnv):
            inner = {k: v for k, v in vars(gym_env).items() if k != "env_fns"}
        elif env.is_vector:
            raise TypeError("an AsyncVectorEnv keeps its state in its workers")
        else:
            inner = gym_env.__dict__
        extra = {k: getattr(env, k) for k in _GYM_WRAPPER_KEYS if hasattr(env, k)}
        return ("gym", inner, extra)
    return ("object", env.__dict__)


def _load(env: EnvBase, state: Any) -> None:
    kind = state[0]
    if kind == "transformed":
        _load(env.base_env, state[1])
        env.transform.__dict__.update(state[2])
    elif kind == "serial":
        for sub, sub_state in zip(env.envs, state[1]):
            _load(sub, sub_state)
    elif kind == "gym":
        env.env.__dict__.update(state[1])
        env.__dict__.update(state[2])
    else:
        env.__dict__.update(state[1])


def env_state(env: EnvBase) -> torch.Tensor | None:
    """The env's state, pickled into a uint8 tensor, or ``None`` when it does not pickle."""
    try:
        payload = pickle.dumps(_state(env))
    except Exception:
        return None
    return torch.frombuffer(bytearray(payload), dtype=torch.uint8)


_CLASS_MODULES = ("gymnasium.", "numpy", "rl.", "collections")
_SAFE_BUILTINS = {
    "set", "frozenset", "slice", "range", "complex", "bytearray", "bytes", "dict",
    "list", "tuple", "int", "float", "bool", "str", "object",
}  # fmt: skip
_SAFE_FUNCTIONS = {
    ("copyreg", "_reconstructor"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy.random._pickle", "__bit_generator_ctor"),
    ("numpy.random._pickle", "__generator_ctor"),
    ("numpy.random._pickle", "__randomstate_ctor"),
    ("numpy.random.bit_generator", "__pyx_unpickle_SeedSequence"),
    ("torch._utils", "_rebuild_tensor_v2"),
}


class _EnvStateUnpickler(pickle.Unpickler):
    """Resolves only env-state classes and the array/generator rebuild functions."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins":
            if name in _SAFE_BUILTINS:
                return getattr(builtins, name)
        elif (module, name) in _SAFE_FUNCTIONS:
            return super().find_class(module, name)
        elif module.startswith(_CLASS_MODULES) and "." not in name:
            obj = super().find_class(module, name)
            if isinstance(obj, type):
                return obj
        raise pickle.UnpicklingError(
            f"refusing to load {module}.{name} from a saved env state: only gymnasium, "
            "numpy and rl classes and array rebuild functions are allowed"
        )


def load_env_state(env: EnvBase, state: torch.Tensor) -> None:
    """Restores :func:`env_state` into ``env`` in place.

    Raises:
        pickle.UnpicklingError: the state names an object outside the allowed classes
            (a crafted checkpoint), before anything is executed or restored.
    """
    payload = state.numpy().tobytes()
    _load(env, _EnvStateUnpickler(io.BytesIO(payload)).load())
