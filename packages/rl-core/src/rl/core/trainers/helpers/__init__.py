"""Builders of a config-driven training script (TorchRL's ``torchrl.trainers.helpers``).

Each builder reads a config object (a dataclass such as :class:`EnvConfig`, an
``argparse.Namespace`` or an OmegaConf ``DictConfig``) and returns the envs, collector,
model, loss, replay buffer or trainer it describes. The config dataclasses are meant to be
combined into one script config::

    @dataclass
    class Config(EnvConfig, OffPolicyCollectorConfig, LossConfig, TrainerConfig, ...): ...

The builders put together objects of rl-envs, rl-data, rl-collectors and rl-objectives,
installed with ``pip install "rl-core[helpers]"``; they are imported when a builder runs,
so importing this module needs none of them. TorchRL's submodule paths
(``helpers.envs``, ``helpers.collectors``, ``helpers.models``, ``helpers.losses``,
``helpers.replay_buffer``, ``helpers.trainers``, ``helpers.logger``) re-export the same
objects: ``from torchrl.trainers.helpers.models import make_dqn_actor`` becomes
``from rl.core.trainers.helpers.models import make_dqn_actor``.
"""

from ._collectors import (
    OffPolicyCollectorConfig,
    OnPolicyCollectorConfig,
    make_collector_offpolicy,
    make_collector_onpolicy,
    sync_async_collector,
    sync_sync_collector,
)
from ._envs import (
    EnvConfig,
    correct_for_frame_skip,
    get_norm_state_dict,
    get_stats_random_rollout,
    initialize_observation_norm_transforms,
    make_env_transforms,
    parallel_env_constructor,
    retrieve_observation_norms_state_dict,
    transformed_env_constructor,
)
from ._logger import LoggerConfig
from ._losses import A2CLossConfig, LossConfig, PPOLossConfig, make_dqn_loss, make_target_updater
from ._models import (
    ContinuousModelConfig,
    DiscreteModelConfig,
    DreamerConfig,
    REDQModelConfig,
    make_dqn_actor,
    make_dreamer,
)
from ._replay_buffer import ReplayArgsConfig, make_replay_buffer
from ._trainers import TrainerConfig, make_trainer

__all__ = [
    "A2CLossConfig",
    "ContinuousModelConfig",
    "DiscreteModelConfig",
    "DreamerConfig",
    "EnvConfig",
    "LoggerConfig",
    "LossConfig",
    "OffPolicyCollectorConfig",
    "OnPolicyCollectorConfig",
    "PPOLossConfig",
    "REDQModelConfig",
    "ReplayArgsConfig",
    "TrainerConfig",
    "correct_for_frame_skip",
    "get_norm_state_dict",
    "get_stats_random_rollout",
    "initialize_observation_norm_transforms",
    "make_collector_offpolicy",
    "make_collector_onpolicy",
    "make_dqn_actor",
    "make_dqn_loss",
    "make_dreamer",
    "make_env_transforms",
    "make_replay_buffer",
    "make_target_updater",
    "make_trainer",
    "parallel_env_constructor",
    "retrieve_observation_norms_state_dict",
    "sync_async_collector",
    "sync_sync_collector",
    "transformed_env_constructor",
]
