"""rl.objectives: losses, target-network updates and value estimators.

Each loss family lives in its own private module; every public name is re-exported
here, as in ``torchrl.objectives``. Value estimators are in ``rl.objectives.value``.
"""

__version__ = "0.1.0"

from ._a2c import *  # noqa: E402,F403
from ._a2c import __all__ as _all_a2c  # noqa: E402
from ._act import *  # noqa: E402,F403
from ._act import __all__ as _all_act  # noqa: E402
from ._bc import *  # noqa: E402,F403
from ._bc import __all__ as _all_bc  # noqa: E402
from ._cql import *  # noqa: E402,F403
from ._cql import __all__ as _all_cql  # noqa: E402
from ._cql_discrete import *  # noqa: E402,F403
from ._cql_discrete import __all__ as _all_cql_discrete  # noqa: E402
from ._crossq import *  # noqa: E402,F403
from ._crossq import __all__ as _all_crossq  # noqa: E402
from ._ddpg import *  # noqa: E402,F403
from ._ddpg import __all__ as _all_ddpg  # noqa: E402
from ._decision_transformer import *  # noqa: E402,F403
from ._decision_transformer import __all__ as _all_decision_transformer  # noqa: E402
from ._diffusion_bc import *  # noqa: E402,F403
from ._diffusion_bc import __all__ as _all_diffusion_bc  # noqa: E402
from ._dqn import *  # noqa: E402,F403
from ._dqn import __all__ as _all_dqn  # noqa: E402
from ._dreamer import *  # noqa: E402,F403
from ._dreamer import __all__ as _all_dreamer  # noqa: E402
from ._dreamer_v3 import *  # noqa: E402,F403
from ._dreamer_v3 import __all__ as _all_dreamer_v3  # noqa: E402
from ._gail import *  # noqa: E402,F403
from ._gail import __all__ as _all_gail  # noqa: E402
from ._hold_out import *  # noqa: E402,F403
from ._hold_out import __all__ as _all_hold_out  # noqa: E402
from ._iql import *  # noqa: E402,F403
from ._iql import __all__ as _all_iql  # noqa: E402
from ._loss import *  # noqa: E402,F403
from ._loss import __all__ as _all_loss  # noqa: E402
from ._next_state_value import *  # noqa: E402,F403
from ._next_state_value import __all__ as _all_next_state_value  # noqa: E402
from ._optim import *  # noqa: E402,F403
from ._optim import __all__ as _all_optim  # noqa: E402
from ._pilco import *  # noqa: E402,F403
from ._pilco import __all__ as _all_pilco  # noqa: E402
from ._ppo import *  # noqa: E402,F403
from ._ppo import __all__ as _all_ppo  # noqa: E402
from ._qmixer import *  # noqa: E402,F403
from ._qmixer import __all__ as _all_qmixer  # noqa: E402
from ._random_modules import *  # noqa: E402,F403
from ._random_modules import __all__ as _all_random_modules  # noqa: E402
from ._redq import *  # noqa: E402,F403
from ._redq import __all__ as _all_redq  # noqa: E402
from ._reduction import *  # noqa: E402,F403
from ._reduction import __all__ as _all_reduction  # noqa: E402
from ._reinforce import *  # noqa: E402,F403
from ._reinforce import __all__ as _all_reinforce  # noqa: E402
from ._rnd import *  # noqa: E402,F403
from ._rnd import __all__ as _all_rnd  # noqa: E402
from ._sac import *  # noqa: E402,F403
from ._sac import __all__ as _all_sac  # noqa: E402
from ._target_updaters import *  # noqa: E402,F403
from ._target_updaters import __all__ as _all_target_updaters  # noqa: E402
from ._td3 import *  # noqa: E402,F403
from ._td3 import __all__ as _all_td3  # noqa: E402
from ._td3_bc import *  # noqa: E402,F403
from ._td3_bc import __all__ as _all_td3_bc  # noqa: E402
from ._tqc import *  # noqa: E402,F403
from ._tqc import __all__ as _all_tqc  # noqa: E402
from ._world_model import *  # noqa: E402,F403
from ._world_model import __all__ as _all_world_model  # noqa: E402
from .value._enum import *  # noqa: E402,F403
from .value._enum import __all__ as _all_value_enum  # noqa: E402

__all__ = [
    "__version__",
    *_all_loss,
    *_all_target_updaters,
    *_all_value_enum,
    *_all_reduction,
    *_all_hold_out,
    *_all_dqn,
    *_all_ddpg,
    *_all_td3,
    *_all_sac,
    *_all_redq,
    *_all_crossq,
    *_all_tqc,
    *_all_iql,
    *_all_cql,
    *_all_cql_discrete,
    *_all_td3_bc,
    *_all_bc,
    *_all_ppo,
    *_all_a2c,
    *_all_reinforce,
    *_all_qmixer,
    *_all_rnd,
    *_all_optim,
    *_all_next_state_value,
    *_all_random_modules,
    *_all_dreamer,
    *_all_dreamer_v3,
    *_all_act,
    *_all_diffusion_bc,
    *_all_gail,
    *_all_pilco,
    *_all_world_model,
    *_all_decision_transformer,
]

# torchrl.objectives.deprecated's losses, reachable from here too (outside __all__, as TorchRL)
from .deprecated import DoubleREDQLoss_deprecated, REDQLoss_deprecated  # noqa: E402,F401
