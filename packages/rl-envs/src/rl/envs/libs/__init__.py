"""TorchRL's ``torchrl.envs.libs`` path: the simulator wrappers, by library.

``from rl.envs.libs.gym import GymEnv`` is ``from rl.envs import GymEnv``; the module
exists so that code written for ``torchrl.envs.libs.gym`` carries over.

Each back-end is a submodule (``rl.envs.libs.envpool``, ``dm_control``, ``pettingzoo``,
``vmas``, ``openspiel``, ``lbforaging``, ``mo_gym``; the MO-Gymnasium wrappers are also in
``rl.envs.libs.gym``) that imports its library only when used; its extra of ``rl-envs``
installs it.
"""

from rl.envs._gym import GymEnv, GymWrapper

__all__ = ["GymEnv", "GymWrapper"]
