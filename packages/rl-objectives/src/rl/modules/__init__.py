"""rl.modules: networks, distributions, actors, critics and exploration modules.

Every public name is re-exported here, as in ``torchrl.modules``; the code lives in the
subpackages ``models`` (plain ``nn.Module`` networks), ``distributions`` and
``tensordict_module`` (TensorDict modules: actors, critics, exploration, recurrent).
The inference server (``rl.modules.inference_server``, from rl-core) is re-exported
here too, as TorchRL's docs name it (``torchrl.modules.InferenceServer``).
"""

from tensordict.nn import (
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictModuleBase,
    TensorDictSequential,
)

__version__ = "0.1.0"  # rl-objectives' version; a test keeps it equal

from ._value_norm import *  # noqa: F403
from ._value_norm import __all__ as _value_norm_all
from ._value_transforms import *  # noqa: F403
from ._value_transforms import __all__ as _value_transforms_all
from .distributions import *  # noqa: F403
from .distributions import __all__ as _distributions_all
from .inference_server import *  # noqa: F403
from .inference_server import __all__ as _inference_server_all
from .mcts import EXP3Score, MCTSScore, MCTSScores, PUCTScore, UCB1TunedScore, UCBScore
from .models import *  # noqa: F403
from .models import __all__ as _models_all
from .planners import CEMPlanner, MPCPlannerBase, MPPIPlanner
from .tensordict_module import *  # noqa: F403
from .tensordict_module import __all__ as _td_module_all
from .tensordict_module._world_models import WorldModel, WorldModelWrapper
from .vla import LeRobotPolicyWrapper, TinyVLA, VLAWrapperBase

__all__ = [
    "NormalParamExtractor",
    "ProbabilisticTensorDictModule",
    "ProbabilisticTensorDictSequential",
    "TensorDictModule",
    "TensorDictModuleBase",
    "CEMPlanner",
    "MPCPlannerBase",
    "MPPIPlanner",
    "EXP3Score",
    "MCTSScore",
    "MCTSScores",
    "PUCTScore",
    "UCB1TunedScore",
    "UCBScore",
    "TensorDictSequential",
    "LeRobotPolicyWrapper",
    "TinyVLA",
    "VLAWrapperBase",
    "WorldModel",
    "WorldModelWrapper",
    "__version__",
    *_distributions_all,
    *_inference_server_all,
    *_models_all,
    *_td_module_all,
    *_value_norm_all,
    *_value_transforms_all,
]
