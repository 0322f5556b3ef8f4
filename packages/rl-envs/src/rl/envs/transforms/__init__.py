"""Environment transforms: ``TransformedEnv``, ``Compose`` and the transform library.

Transforms form a list applied in order to what an env returns (and, in reverse, to
the actions it receives); each one updates the specs it changes. They also run on
batches of data (``transform(td)``, ``transform.inv(td)``) and as ``nn.Module`` s.
"""

from ._action import (
    ActionDiscretizer,
    ActionMask,
    ActionScaling,
    DiscreteActionProjection,
    FlattenAction,
)
from ._action_tokens import ActionTokenizerTransform
from ._auto_reset import AutoResetEnv, AutoResetTransform
from ._base import FORWARD_NOT_IMPLEMENTED, ObservationTransform, Transform
from ._belief import MeanActionSelector
from ._chunk import ActionChunkTransform
from ._compose import Compose
from ._control import (
    ConditionalPolicySwitch,
    ConditionalSkip,
    EndOfLifeTransform,
    NoopResetEnv,
    RandomTruncationTransform,
    TerminateTransform,
)
from ._env import TransformedEnv
from ._episode import InitTracker, StepCounter, TensorDictPrimer, Timer, TrajCounter
from ._exploration import gSDENoise
from ._frames import CatFrames, FrameSkipTransform, MultiAction, TimeMaxPool
from ._image import CenterCrop, Crop, GrayScale, Resize, ToTensorImage
from ._intrinsic import RNDTransform
from ._keys import (
    CatTensors,
    ExcludeTransform,
    RemoveEmptySpecs,
    RenameTransform,
    SelectTransform,
    Stack,
)
from ._macro import (
    HumanoidMacroAction,
    MacroAction,
    MacroPrimitive,
    MacroPrimitiveTransform,
    TargetMacroAction,
)
from ._macro_satellite import SatelliteAttitudeTransform, SatelliteMacroAction
from ._macro_ur import (
    CartesianSolver,
    RobotMacroAction,
    RobotMacroActionMode,
    URScriptPrimitive,
    URScriptPrimitiveTransform,
)
from ._module import ModuleTransform
from ._norm import ObservationNorm, RunningMeanStd, VecNorm, VecNormV2
from ._nstep import MultiStepTransform
from ._ray_service import RayTransform
from ._recording import PixelRenderTransform, TensorDictRecorder, VideoRecorder
from ._replay import (
    BurnInTransform,
    NextObservationDelta,
    NextStateReconstructor,
    PolicyAgeFilter,
    RandomCropTensorDict,
)
from ._reward import (
    BinarizeReward,
    LineariseRewards,
    Reward2GoTransform,
    RewardClipping,
    RewardScaling,
    RewardSum,
    SignTransform,
    SuccessReward,
    TargetReturn,
)
from ._shape import (
    BatchSizeTransform,
    ExpandAs,
    FlattenObservation,
    PermuteTransform,
    SqueezeTransform,
    UnsqueezeTransform,
)
from ._tensor import (
    ClipTransform,
    DeviceCastTransform,
    DoubleToFloat,
    DTypeCastTransform,
    FiniteTensorDictCheck,
    Hash,
    PinMemoryTransform,
    UnaryTransform,
)
from ._tokenizer import Tokenizer
from ._vec_gym import VecGymEnvTransform
from ._video import DecodeVideoTransform

__all__ = [
    "FORWARD_NOT_IMPLEMENTED",
    "ActionChunkTransform",
    "ActionTokenizerTransform",
    "CartesianSolver",
    "HumanoidMacroAction",
    "RobotMacroAction",
    "RobotMacroActionMode",
    "SatelliteAttitudeTransform",
    "SatelliteMacroAction",
    "URScriptPrimitive",
    "URScriptPrimitiveTransform",
    "MacroAction",
    "MacroPrimitive",
    "MacroPrimitiveTransform",
    "TargetMacroAction",
    "MeanActionSelector",
    "gSDENoise",
    "AutoResetEnv",
    "AutoResetTransform",
    "BatchSizeTransform",
    "FiniteTensorDictCheck",
    "ModuleTransform",
    "RayTransform",
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
    "Tokenizer",
    "UnaryTransform",
    "RNDTransform",
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
    "DecodeVideoTransform",
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
    "ObservationTransform",
    "PixelRenderTransform",
    "TensorDictRecorder",
    "VecGymEnvTransform",
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
