"""rl.objectives.value: value estimators (modules) and their functional core.

The math lives in :mod:`rl.objectives.value.functional` (tensors in, tensors out); the
estimator modules read TensorDict keys and call it.
"""

from rl.objectives.value import functional
from rl.objectives.value._base import ValueEstimatorBase
from rl.objectives.value._enum import (
    _DEFAULT_VALUE_KWARGS,
    _VALUE_ESTIMATOR_REGISTRY,
    ValueEstimators,
    build_value_estimator,
    dispatch_value_estimator,
    get_value_estimator_entry,
    register_value_estimator,
)
from rl.objectives.value._estimators import (
    GAE,
    TD0Estimate,
    TD0Estimator,
    TD1Estimate,
    TD1Estimator,
    TDLambdaEstimate,
    TDLambdaEstimator,
)
from rl.objectives.value._multiagent import MultiAgentGAE
from rl.objectives.value._vtrace import VTrace

# the built-in estimators, with their default hyperparameters
for _member, _cls in (
    (ValueEstimators.TD0, TD0Estimator),
    (ValueEstimators.TD1, TD1Estimator),
    (ValueEstimators.TDLambda, TDLambdaEstimator),
    (ValueEstimators.GAE, GAE),
    (ValueEstimators.MAGAE, MultiAgentGAE),
    (ValueEstimators.VTrace, VTrace),
):
    if _member not in _VALUE_ESTIMATOR_REGISTRY:
        register_value_estimator(_member, default_kwargs=_DEFAULT_VALUE_KWARGS[_member.name])(_cls)
del _member, _cls

__all__ = [
    "GAE",
    "MultiAgentGAE",
    "TD0Estimate",
    "TD0Estimator",
    "TD1Estimate",
    "TD1Estimator",
    "TDLambdaEstimate",
    "TDLambdaEstimator",
    "VTrace",
    "ValueEstimatorBase",
    "ValueEstimators",
    "build_value_estimator",
    "dispatch_value_estimator",
    "functional",
    "get_value_estimator_entry",
    "register_value_estimator",
]
