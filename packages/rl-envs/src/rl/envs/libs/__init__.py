"""TorchRL's ``torchrl.envs.libs`` path: the simulator wrappers, by library.

``from rl.envs.libs.gym import GymEnv`` is ``from rl.envs import GymEnv``; the module
exists so that code written for ``torchrl.envs.libs.gym`` carries over.

Each back-end is a submodule (``rl.envs.libs.envpool``, ``dm_control``, ``pettingzoo``,
``vmas``, ``openspiel``, ``lbforaging``, ``mo_gym``, ``jumanji``, ``brax``; the
MO-Gymnasium wrappers are also in ``rl.envs.libs.gym``) that imports its library only when
used; its extra of ``rl-envs`` installs it. The JAX wrappers are also names of this module
(``from rl.envs.libs import JumanjiEnv``), resolved on first use.
"""

from rl.envs._gym import GymEnv, GymWrapper

# resolved on first use: ``import rl.envs.libs`` does not import JAX
_LAZY = {
    "JumanjiEnv": "rl.envs.libs.jumanji",
    "JumanjiWrapper": "rl.envs.libs.jumanji",
    "BraxEnv": "rl.envs.libs.brax",
    "BraxWrapper": "rl.envs.libs.brax",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = ["GymEnv", "GymWrapper", *_LAZY]
