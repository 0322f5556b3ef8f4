"""rl.modules.distributions: action distributions for probabilistic actors.

``TanhNormal``, ``IndependentNormal``, ``TruncatedNormal``, ``Delta``, ``TanhDelta`` and the
one-hot, masked and ordinal categoricals, with TorchRL's names and arguments. Each has
``log_prob``, ``entropy`` and a ``deterministic_sample`` (what
``ExplorationType.DETERMINISTIC`` acts with).
"""

from ._analytic import has_analytic_entropy, has_analytic_kl
from ._continuous import Delta, IndependentNormal, TanhDelta, TruncatedNormal
from ._discrete import (
    MaskedCategorical,
    MaskedOneHotCategorical,
    OneHotCategorical,
    OneHotOrdinal,
    Ordinal,
    ReparamGradientStrategy,
)
from ._tanh_normal import TanhNormal

__all__ = [
    "Delta",
    "IndependentNormal",
    "MaskedCategorical",
    "MaskedOneHotCategorical",
    "OneHotCategorical",
    "OneHotOrdinal",
    "Ordinal",
    "ReparamGradientStrategy",
    "TanhDelta",
    "TanhNormal",
    "TruncatedNormal",
    "has_analytic_entropy",
    "has_analytic_kl",
]
