"""rl.modules.models: plain ``nn.Module`` networks (MLP, ConvNet, noisy layers, ...)."""

from ._act import ACTModel
from ._batchrenorm import BatchRenorm1d
from ._consistent_dropout import ConsistentDropout, ConsistentDropoutModule
from ._conv import Conv2dNet, Conv3dNet, ConvNet
from ._cross_group_critic import CrossCriticGroupSpec, CrossGroupCritic
from ._decision_transformer import DecisionTransformer, DTActor, OnlineDTActor
from ._dreamer_v3_nets import (
    DreamerV3BlockGRU,
    DreamerV3BlockGRUCell,
    DreamerV3ImageDecoder,
    DreamerV3ImageEncoder,
    DreamerV3MLP,
)
from ._gp import GPWorldModel
from ._gpt2_reward import GPT2RewardModel
from ._gsde import LazygSDEModule, gSDEModule
from ._heads import (
    DdpgCnnActor,
    DdpgCnnQNet,
    DdpgMlpActor,
    DdpgMlpQNet,
    DuelingCnnDQNet,
    DuelingMlpDQNet,
    ddpg_init_last_layer,
)
from ._mixers import Mixer, QMixer, VDNMixer
from ._mlp import MLP
from ._model_based import (
    DreamerActor,
    ObsDecoder,
    ObsEncoder,
    RSSMPosterior,
    RSSMPrior,
    RSSMRollout,
)
from ._multiagent import MultiAgentConvNet, MultiAgentMLP, MultiAgentNetBase
from ._noisy import NoisyLazyLinear, NoisyLinear, reset_noise
from ._rbf_controller import RBFController
from ._rssm_v3 import RSSMPosteriorV3, RSSMPriorV3, RSSMRolloutV3, RSSMStateEstimatorV3
from ._two_hot import SymExpTwoHot, two_hot_cross_entropy, two_hot_decode, two_hot_encode
from ._utils import SquashDims, Squeeze2dLayer, SqueezeLayer

__all__ = [
    "MLP",
    "ACTModel",
    "DTActor",
    "DecisionTransformer",
    "OnlineDTActor",
    "BatchRenorm1d",
    "ConsistentDropout",
    "ConsistentDropoutModule",
    "Conv2dNet",
    "LazygSDEModule",
    "gSDEModule",
    "Conv3dNet",
    "ConvNet",
    "CrossCriticGroupSpec",
    "CrossGroupCritic",
    "DdpgCnnActor",
    "DreamerActor",
    "DreamerV3BlockGRU",
    "DreamerV3BlockGRUCell",
    "DreamerV3ImageDecoder",
    "DreamerV3ImageEncoder",
    "DreamerV3MLP",
    "RSSMPosteriorV3",
    "RSSMPriorV3",
    "RSSMRolloutV3",
    "RSSMStateEstimatorV3",
    "SymExpTwoHot",
    "two_hot_cross_entropy",
    "two_hot_decode",
    "two_hot_encode",
    "DdpgCnnQNet",
    "DdpgMlpActor",
    "DdpgMlpQNet",
    "DuelingCnnDQNet",
    "DuelingMlpDQNet",
    "GPWorldModel",
    "GPT2RewardModel",
    "Mixer",
    "MultiAgentConvNet",
    "MultiAgentMLP",
    "MultiAgentNetBase",
    "NoisyLazyLinear",
    "NoisyLinear",
    "ObsDecoder",
    "ObsEncoder",
    "QMixer",
    "RBFController",
    "RSSMPosterior",
    "RSSMPrior",
    "RSSMRollout",
    "SquashDims",
    "Squeeze2dLayer",
    "SqueezeLayer",
    "VDNMixer",
    "ddpg_init_last_layer",
    "reset_noise",
]
