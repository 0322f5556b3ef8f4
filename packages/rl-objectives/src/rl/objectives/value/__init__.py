"""rl.objectives.value: value estimators (modules) and their functional core.

The math lives in :mod:`rl.objectives.value.functional` (tensors in, tensors out); the
estimator modules read TensorDict keys and call it.
"""

from rl.objectives.value import functional
from rl.objectives.value._enum import ValueEstimators

__all__ = ["ValueEstimators", "functional"]
