"""rl.envs: the environment API, Gymnasium wrappers, native torch envs and batched envs."""

from ._batched import EnvCreator, ParallelEnv, SerialEnv
from ._common import EnvBase
from ._gym import GymEnv, GymWrapper
from ._native import CartPoleEnv, PendulumEnv
from ._probes import *  # noqa: F403  (probe environments)
from ._probes import __all__ as _probes_all
from ._utils import RandomPolicy, check_env_specs, step_mdp
from .transforms import *  # noqa: F403  (transforms: TransformedEnv, Compose, every transform)
from .transforms import __all__ as _transforms_all

__version__ = "0.1.0"

__all__ = [
    "CartPoleEnv",
    "EnvBase",
    "EnvCreator",
    "GymEnv",
    "GymWrapper",
    "ParallelEnv",
    "PendulumEnv",
    "RandomPolicy",
    "SerialEnv",
    "check_env_specs",
    "step_mdp",
    *_probes_all,
    *_transforms_all,
]
