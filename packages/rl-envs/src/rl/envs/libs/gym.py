"""TorchRL's ``torchrl.envs.libs.gym`` path: the Gymnasium wrappers of :mod:`rl.envs`.

Examples:
    >>> from rl.envs.libs.gym import GymEnv
    >>> GymEnv("Pendulum-v1").reset()["observation"].shape
    torch.Size([3])
"""

from rl.envs._gym import GymEnv, GymWrapper

__all__ = ["GymEnv", "GymWrapper"]
