"""Vision-Language-Action (VLA) policies (TorchRL's ``torchrl.modules.vla``)."""

from ._base import VLAWrapperBase
from ._lerobot import LeRobotPolicyWrapper
from ._tiny_vla import TinyVLA

__all__ = ["LeRobotPolicyWrapper", "TinyVLA", "VLAWrapperBase"]
