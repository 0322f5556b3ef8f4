"""Environment transforms: ``TransformedEnv``, ``Compose`` and the transform library.

Transforms form a list applied in order to what an env returns (and, in reverse, to
the actions it receives); each one updates the specs it changes. They also run on
batches of data (``transform(td)``, ``transform.inv(td)``) and as ``nn.Module`` s.
"""

from ._action import ActionDiscretizer, ActionMask
from ._atari import EndOfLifeTransform
from ._auto_reset import AutoResetEnv, AutoResetTransform
from ._base import Transform
from ._compose import Compose
from ._dtype import DeviceCastTransform, DoubleToFloat, DTypeCastTransform
from ._env import TransformedEnv
from ._episode import (
    FrameSkipTransform,
    InitTracker,
    NoopResetEnv,
    StepCounter,
    TensorDictPrimer,
)
from ._frames import CatFrames, TimeMaxPool
from ._image import CenterCrop, GrayScale, Resize, ToTensorImage
from ._keys import CatTensors, ExcludeTransform, RenameTransform, SelectTransform
from ._norm import ObservationNorm, VecNorm
from ._observation import (
    ClipTransform,
    FlattenObservation,
    SqueezeTransform,
    UnsqueezeTransform,
)
from ._parity_action import ActionScaling, DiscreteActionProjection, FlattenAction
from ._parity_chunk import MultiAction
from ._parity_control import (
    ConditionalPolicySwitch,
    ConditionalSkip,
    RandomTruncationTransform,
    TerminateTransform,
)
from ._parity_episode import Timer, TrajCounter
from ._parity_misc import (
    BatchSizeTransform,
    FiniteTensorDictCheck,
    PinMemoryTransform,
    RandomCropTensorDict,
    RemoveEmptySpecs,
)
from ._parity_module import ModuleTransform
from ._parity_nstep import MultiStepTransform
from ._parity_obs_delta import NextObservationDelta
from ._parity_replay import BurnInTransform, NextStateReconstructor, PolicyAgeFilter
from ._parity_reward import (
    BinarizeReward,
    LineariseRewards,
    Reward2GoTransform,
    SignTransform,
    SuccessReward,
)
from ._parity_tensor import Crop, ExpandAs, PermuteTransform, Stack
from ._parity_unary import Hash, UnaryTransform
from ._parity_vecnorm import RunningMeanStd, VecNormV2
from ._recording import VideoRecorder
from ._reward import RewardClipping, RewardScaling, RewardSum, TargetReturn

__all__ = [
    "AutoResetEnv",
    "AutoResetTransform",
    "BatchSizeTransform",
    "FiniteTensorDictCheck",
    "ModuleTransform",
    "NextObservationDelta",
    "PinMemoryTransform",
    "RandomCropTensorDict",
    "RemoveEmptySpecs",
    "Timer",
    "TrajCounter",
    "BinarizeReward",
    "LineariseRewards",
    "Reward2GoTransform",
    "SignTransform",
    "SuccessReward",
    "Crop",
    "ExpandAs",
    "Hash",
    "PermuteTransform",
    "Stack",
    "UnaryTransform",
    "RunningMeanStd",
    "VecNormV2",
    "ActionDiscretizer",
    "ActionMask",
    "CatFrames",
    "CatTensors",
    "CenterCrop",
    "ClipTransform",
    "Compose",
    "DTypeCastTransform",
    "DeviceCastTransform",
    "DoubleToFloat",
    "EndOfLifeTransform",
    "ExcludeTransform",
    "FlattenObservation",
    "FrameSkipTransform",
    "GrayScale",
    "InitTracker",
    "NoopResetEnv",
    "ObservationNorm",
    "RenameTransform",
    "Resize",
    "RewardClipping",
    "RewardScaling",
    "RewardSum",
    "SelectTransform",
    "SqueezeTransform",
    "StepCounter",
    "TargetReturn",
    "TensorDictPrimer",
    "TimeMaxPool",
    "ToTensorImage",
    "Transform",
    "TransformedEnv",
    "UnsqueezeTransform",
    "VecNorm",
    "VideoRecorder",
    "ActionScaling",
    "BurnInTransform",
    "ConditionalPolicySwitch",
    "ConditionalSkip",
    "DiscreteActionProjection",
    "FlattenAction",
    "MultiAction",
    "MultiStepTransform",
    "NextStateReconstructor",
    "PolicyAgeFilter",
    "RandomTruncationTransform",
    "TerminateTransform",
]
