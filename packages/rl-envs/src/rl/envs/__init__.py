"""rl.envs: the environment API, Gymnasium wrappers, native torch envs and batched envs."""

from ._backends import (
    auto_unwrap_transformed_env,
    gym_backend,
    set_auto_unwrap_transformed_env,
    set_gym_backend,
)
from ._batched import EnvCreator, ParallelEnv, SerialEnv
from ._common import EnvBase
from ._gym import GymEnv, GymWrapper
from ._native import CartPoleEnv, PendulumEnv
from ._probes import *  # noqa: F403  (probe environments)
from ._probes import __all__ as _probes_all
from ._td_utils import make_composite_from_td, terminated_or_truncated
from ._utils import RandomPolicy, check_env_specs, step_mdp
from .transforms import *  # noqa: F403  (transforms: TransformedEnv, Compose, every transform)
from .transforms import __all__ as _transforms_all
from .transforms._auto_reset import AutoResetEnv, AutoResetTransform

__version__ = "0.1.0"

__all__ = [
    "AutoResetEnv",
    "AutoResetTransform",
    "CartPoleEnv",
    "EnvBase",
    "EnvCreator",
    "GymEnv",
    "GymWrapper",
    "ParallelEnv",
    "PendulumEnv",
    "RandomPolicy",
    "SerialEnv",
    "auto_unwrap_transformed_env",
    "check_env_specs",
    "gym_backend",
    "make_composite_from_td",
    "set_auto_unwrap_transformed_env",
    "set_gym_backend",
    "step_mdp",
    "terminated_or_truncated",
    *_probes_all,
    *_transforms_all,
]
