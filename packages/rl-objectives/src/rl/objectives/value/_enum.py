"""The names of the value estimators a loss can be given (``make_value_estimator``)."""

from __future__ import annotations

from enum import Enum

__all__ = ["ValueEstimators"]


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
    VTrace = "V-trace"

    @classmethod
    def _missing_(cls, value: object) -> ValueEstimators:
        if isinstance(value, str):  # accept the member names too: "GAE", "td0"
            for member in cls:
                if member.name.lower() == value.lower():
                    return member
        valid = ", ".join(f"ValueEstimators.{m.name}" for m in cls)
        raise ValueError(f"{value!r} is not a value estimator; valid ones are {valid}")
