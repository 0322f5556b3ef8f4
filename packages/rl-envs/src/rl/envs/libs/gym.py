"""TorchRL's ``torchrl.envs.libs.gym`` path: the Gymnasium wrappers of :mod:`rl.envs`
(and ``set_gym_backend`` / ``gym_backend``).

Examples:
    >>> from rl.envs.libs.gym import GymEnv
    >>> GymEnv("Pendulum-v1").reset()["observation"].shape
    torch.Size([3])
"""

from rl.envs._backends import gym_backend, set_gym_backend
from rl.envs._gym import GymEnv, GymWrapper

__all__ = ["GymEnv", "GymWrapper", "gym_backend", "set_gym_backend"]
