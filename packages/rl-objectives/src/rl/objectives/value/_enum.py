"""The names of the value estimators a loss can be given (``make_value_estimator``), and
their default hyperparameters."""

from __future__ import annotations

from enum import Enum
from typing import Any

__all__ = ["ValueEstimators", "default_value_kwargs"]


class ValueEstimators(Enum):
    """Value estimators a loss builds with ``loss.make_value_estimator(ValueEstimators.X, ...)``.

    Examples:
        >>> from rl.objectives.value import ValueEstimators
        >>> ValueEstimators.GAE.value
        'Generalized advantage estimate'
        >>> ValueEstimators("TD(lambda)") is ValueEstimators.TDLambda
        True
    """

    TD0 = "Bootstrapped TD (1-step return)"
    TD1 = "TD(1) (infinity-step return)"
    TDLambda = "TD(lambda)"
    GAE = "Generalized advantage estimate"
    MAGAE = "Multi-agent generalized advantage estimate"
    VTrace = "V-trace"

    @classmethod
    def _missing_(cls, value: object) -> ValueEstimators:
        if isinstance(value, str):  # accept the member names too: "GAE", "td0"
            for member in cls:
                if member.name.lower() == value.lower():
                    return member
        valid = ", ".join(f"ValueEstimators.{m.name}" for m in cls)
        raise ValueError(f"{value!r} is not a value estimator; valid ones are {valid}")


_DEFAULT_VALUE_KWARGS: dict[str, dict[str, Any]] = {
    "TD0": {"gamma": 0.99, "differentiable": True},
    "TD1": {"gamma": 0.99, "differentiable": True},
    "TDLambda": {"gamma": 0.99, "lmbda": 0.95, "differentiable": True},
    "GAE": {"gamma": 0.99, "lmbda": 0.95, "differentiable": True},
    "MAGAE": {"gamma": 0.99, "lmbda": 0.95, "differentiable": True},
    "VTrace": {"gamma": 0.99, "differentiable": True},
}


def default_value_kwargs(value_type) -> dict[str, Any]:
    """The default hyperparameters of a value estimator, as in TorchRL.

    Args:
        value_type (ValueEstimators or str): the estimator.

    Returns:
        a new dict, e.g. ``{"gamma": 0.99, "lmbda": 0.95, "differentiable": True}`` for
        ``TDLambda``.

    Examples:
        >>> from rl.objectives import default_value_kwargs
        >>> default_value_kwargs("TD0")
        {'gamma': 0.99, 'differentiable': True}
    """
    name = getattr(value_type, "name", value_type)
    if name not in _DEFAULT_VALUE_KWARGS:
        raise ValueError(
            f"unknown value estimator {value_type!r}; valid ones are {list(_DEFAULT_VALUE_KWARGS)}"
        )
    return dict(_DEFAULT_VALUE_KWARGS[name])
