"""rl.envs: the environment API, Gymnasium wrappers, native torch envs and batched envs."""

from ._async import AsyncEnvPool, ProcessorAsyncEnvPool, ThreadingAsyncEnvPool
from ._backends import (
    auto_unwrap_transformed_env,
    gym_backend,
    set_auto_unwrap_transformed_env,
    set_gym_backend,
)
from ._batched import EnvCreator, ParallelEnv, SerialEnv
from ._dreamer import DreamerDecoder, DreamerEnv
from ._env_base import EnvBase
from ._gym import GymEnv, GymWrapper
from ._gym_like import GymLikeEnv, default_info_dict_reader
from ._gym_spaces import register_gym_spec_conversion
from ._imagined import ImaginedEnv
from ._libraries import get_available_libraries
from ._metadata import EnvMetaData, env_creator, get_env_metadata, make_tensordict
from ._model_based import ModelBasedEnvBase
from ._native import (
    CartPoleEnv,
    PendulumEnv,
    TicTacToeEnv,
    ToyVLAEnv,
)
from ._probes import *  # noqa: F403  (probe environments)
from ._probes import __all__ as _probes_all
from ._td_utils import (
    make_composite_from_td,
    mark_truncated,
    terminated_or_truncated,
    truncated_keys,
)
from ._utils import RandomPolicy, check_env_specs, step_mdp
from ._world_model_env import WorldModelEnv
from .transforms import *  # noqa: F403  (transforms: TransformedEnv, Compose, every transform)
from .transforms import __all__ as _transforms_all
from .transforms._auto_reset import AutoResetEnv, AutoResetTransform

__version__ = "0.1.0"

# Simulator back-ends and multi-agent helpers, imported on first use so that
# ``import rl.envs`` does not import EnvPool, dm_control, PettingZoo, VMAS, MO-Gymnasium,
# OpenSpiel, lbforaging or JAX (Jumanji, Brax).
_LAZY = {
    "MultiThreadedEnv": "rl.envs.libs.envpool",
    "MultiThreadedEnvWrapper": "rl.envs.libs.envpool",
    "DMControlEnv": "rl.envs.libs.dm_control",
    "DMControlWrapper": "rl.envs.libs.dm_control",
    "PettingZooEnv": "rl.envs.libs.pettingzoo",
    "PettingZooWrapper": "rl.envs.libs.pettingzoo",
    "VmasEnv": "rl.envs.libs.vmas",
    "VmasWrapper": "rl.envs.libs.vmas",
    "MOGymEnv": "rl.envs.libs.mo_gym",
    "MOGymWrapper": "rl.envs.libs.mo_gym",
    "OpenSpielEnv": "rl.envs.libs.openspiel",
    "OpenSpielWrapper": "rl.envs.libs.openspiel",
    "LBForagingEnv": "rl.envs.libs.lbforaging",
    "LBForagingWrapper": "rl.envs.libs.lbforaging",
    "JumanjiEnv": "rl.envs.libs.jumanji",
    "JumanjiWrapper": "rl.envs.libs.jumanji",
    "BraxEnv": "rl.envs.libs.brax",
    "BraxWrapper": "rl.envs.libs.brax",
    "MarlGroupMapType": "rl.envs._marl",
    "check_marl_grouping": "rl.envs._marl",
    # native tasks whose modules load on first use (rl.envs._native resolves them)
    "AntEnv": "rl.envs._native",
    "ChessEnv": "rl.envs._native",
    "FinancialRegimeEnv": "rl.envs._native",
    "HopperEnv": "rl.envs._native",
    "HumanoidEnv": "rl.envs._native",
    "MujocoEnv": "rl.envs._native",
    "SatelliteEnv": "rl.envs._native",
    "Walker2dEnv": "rl.envs._native",
    # needs rl-envs[llm] (rl.data); rl.envs.custom imports it from rl.envs.llm on first use
    "LLMHashingEnv": "rl.envs.custom",
}
_LAZY_NEEDS = {"LLMHashingEnv": "rl.data"}


def _module_present(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


# A back-end's names join ``__all__`` once its module exists (not its library).
_lazy_present = [
    name
    for name, module in _LAZY.items()
    if _module_present(module) and _module_present(_LAZY_NEEDS.get(name, module))
]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "AsyncEnvPool",
    "AutoResetEnv",
    "AutoResetTransform",
    "CartPoleEnv",
    "EnvBase",
    "EnvCreator",
    "EnvMetaData",
    "GymEnv",
    "GymLikeEnv",
    "GymWrapper",
    "ModelBasedEnvBase",
    "ImaginedEnv",
    "WorldModelEnv",
    "DreamerDecoder",
    "DreamerEnv",
    "ParallelEnv",
    "PendulumEnv",
    "ProcessorAsyncEnvPool",
    "ThreadingAsyncEnvPool",
    "ToyVLAEnv",
    "RandomPolicy",
    "SerialEnv",
    "TicTacToeEnv",
    "auto_unwrap_transformed_env",
    "check_env_specs",
    "default_info_dict_reader",
    "env_creator",
    "get_available_libraries",
    "get_env_metadata",
    "gym_backend",
    "register_gym_spec_conversion",
    "make_composite_from_td",
    "make_tensordict",
    "mark_truncated",
    "set_auto_unwrap_transformed_env",
    "set_gym_backend",
    "step_mdp",
    "terminated_or_truncated",
    "truncated_keys",
    *_probes_all,
    *_transforms_all,
    *_lazy_present,
]
