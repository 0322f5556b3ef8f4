"""TorchRL's ``torchrl.envs.libs.gym`` path: the Gymnasium wrappers of :mod:`rl.envs`
(and ``set_gym_backend`` / ``gym_backend``, ``register_gym_spec_conversion``), and the
MO-Gymnasium wrappers ``MOGymEnv`` / ``MOGymWrapper`` (mo-gymnasium is imported when one is
built).

Examples:
    >>> from rl.envs.libs.gym import GymEnv
    >>> GymEnv("Pendulum-v1").reset()["observation"].shape
    torch.Size([3])
"""

from rl.envs._backends import gym_backend, set_gym_backend
from rl.envs._gym import GymEnv, GymWrapper
from rl.envs._gym_spaces import register_gym_spec_conversion
from rl.envs.libs.mo_gym import MOGymEnv, MOGymWrapper

__all__ = [
    "GymEnv",
    "GymWrapper",
    "MOGymEnv",
    "MOGymWrapper",
    "gym_backend",
    "register_gym_spec_conversion",
    "set_gym_backend",
]
