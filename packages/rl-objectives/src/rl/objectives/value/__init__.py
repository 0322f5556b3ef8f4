"""rl.objectives.value: value estimators (modules) and their functional core.

The math lives in :mod:`rl.objectives.value.functional` (tensors in, tensors out); the
estimator modules read TensorDict keys and call it.
"""

from rl.objectives.value import functional
from rl.objectives.value._base import ValueEstimatorBase
from rl.objectives.value._enum import ValueEstimators
from rl.objectives.value._estimators import GAE, TD0Estimator, TD1Estimator, TDLambdaEstimator
from rl.objectives.value._multiagent import MultiAgentGAE
from rl.objectives.value._vtrace import VTrace

__all__ = [
    "GAE",
    "MultiAgentGAE",
    "TD0Estimator",
    "TD1Estimator",
    "TDLambdaEstimator",
    "VTrace",
    "ValueEstimatorBase",
    "ValueEstimators",
    "functional",
]
