"""Dataset-backed chat environments (local datasets only)."""

from ._countdown import CountdownEnv
from ._gsm8k import GSM8KEnv, GSM8KPrepareQuestion, make_gsm8k_env
from ._ifeval import IFEvalData, IFEvalEnv
from ._math import MATHEnv

__all__ = [
    "CountdownEnv",
    "GSM8KEnv",
    "GSM8KPrepareQuestion",
    "IFEvalData",
    "IFEvalEnv",
    "MATHEnv",
    "make_gsm8k_env",
]
