"""LLM post-training losses (``pip install "rl-objectives[llm]"`` for the policies they
train): GRPO and its variants, SFT, distillation, the group-relative advantage and the k3 KL estimate."""

from ._advantage import MCAdvantage, MCAdvantageSelector, RayMCAdvantage
from ._distillation import DistillationLoss, DistillationLossOutput
from ._grpo import (
    DAPO,
    CISPOLoss,
    CISPOLossOutput,
    DAPOLossOutput,
    GRPOLoss,
    GRPOLossOutput,
    LLMLossOutput,
)
from ._kl import k3_kl_token_estimate
from ._sft import SFTLoss, SFTLossOutput

__all__ = [
    "CISPOLoss",
    "CISPOLossOutput",
    "DAPO",
    "DAPOLossOutput",
    "DistillationLoss",
    "DistillationLossOutput",
    "GRPOLoss",
    "GRPOLossOutput",
    "LLMLossOutput",
    "MCAdvantage",
    "MCAdvantageSelector",
    "RayMCAdvantage",
    "SFTLoss",
    "SFTLossOutput",
    "k3_kl_token_estimate",
]
