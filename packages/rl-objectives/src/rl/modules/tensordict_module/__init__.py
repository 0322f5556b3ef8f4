"""rl.modules.tensordict_module: actors, critics, safe modules, exploration and recurrent modules."""

from ._actor_critic import (
    ActorCriticOperator,
    ActorCriticWrapper,
    ActorValueOperator,
    LMHeadActorValueOperator,
)
from ._actors import Actor, ProbabilisticActor, TanhModule, ValueOperator
from ._common import SafeModule, ensure_tensordict_compatible, is_tensordict_compatible
from ._decision_transformer import DecisionTransformerInferenceWrapper
from ._diffusion import DiffusionActor
from ._dreamer_v3_actors import DreamerV3DiscreteActor, DreamerV3SeededPolicy
from ._exploration import (
    AdditiveGaussianModule,
    EGreedyModule,
    OrnsteinUhlenbeckProcessModule,
    RandomPolicy,
    set_exploration_modules_spec_from_env,
)
from ._exploration_wrappers import (
    AdditiveGaussianWrapper,
    EGreedyWrapper,
    OrnsteinUhlenbeckProcessWrapper,
)
from ._multistep import MultiStepActorWrapper
from ._probabilistic import SafeProbabilisticModule, SafeProbabilisticTensorDictSequential
from ._qvalue import (
    DistributionalDQNnet,
    DistributionalQValueActor,
    DistributionalQValueModule,
    QValueActor,
    QValueModule,
)
from ._qvalue_hooks import DistributionalQValueHook, QValueHook
from ._rnn import (
    GRUModule,
    LSTMModule,
    canonicalize_rnn_subset,
    get_env_transforms_from_module,
    get_primers_from_module,
)
from ._rnn_cells import GRUCell, LSTMCell
from ._rnn_layers import GRU, LSTM, recurrent_mode, set_recurrent_mode
from ._rnn_precision import get_recurrent_matmul_precision, set_recurrent_matmul_precision
from ._sequence import SafeSequential
from ._vmap import VmapModule

__all__ = [
    "DreamerV3DiscreteActor",
    "DreamerV3SeededPolicy",
    "AdditiveGaussianModule",
    "AdditiveGaussianWrapper",
    "EGreedyModule",
    "EGreedyWrapper",
    "OrnsteinUhlenbeckProcessModule",
    "OrnsteinUhlenbeckProcessWrapper",
    "RandomPolicy",
    "set_exploration_modules_spec_from_env",
    "GRU",
    "GRUCell",
    "GRUModule",
    "LSTM",
    "LSTMCell",
    "LSTMModule",
    "canonicalize_rnn_subset",
    "get_env_transforms_from_module",
    "get_recurrent_matmul_precision",
    "set_recurrent_matmul_precision",
    "get_primers_from_module",
    "recurrent_mode",
    "set_recurrent_mode",
    "Actor",
    "ActorCriticOperator",
    "ActorCriticWrapper",
    "ActorValueOperator",
    "LMHeadActorValueOperator",
    "DecisionTransformerInferenceWrapper",
    "DiffusionActor",
    "DistributionalDQNnet",
    "DistributionalQValueActor",
    "DistributionalQValueModule",
    "ProbabilisticActor",
    "QValueActor",
    "QValueModule",
    "QValueHook",
    "DistributionalQValueHook",
    "SafeModule",
    "ensure_tensordict_compatible",
    "is_tensordict_compatible",
    "SafeProbabilisticModule",
    "SafeProbabilisticTensorDictSequential",
    "SafeSequential",
    "TanhModule",
    "ValueOperator",
    "VmapModule",
    "MultiStepActorWrapper",
]
