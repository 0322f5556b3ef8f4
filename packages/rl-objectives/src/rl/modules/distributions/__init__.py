"""rl.modules.distributions: action distributions for probabilistic actors.

``TanhNormal``, ``IndependentNormal``, ``TruncatedNormal``, ``Delta``, ``TanhDelta`` and the
one-hot, masked and ordinal categoricals (and ``LLMMaskedCategorical`` over a
language model's vocabulary), with TorchRL's names and arguments. Each has
``log_prob``, ``entropy`` and a ``deterministic_sample`` (what
``ExplorationType.DETERMINISTIC`` acts with).
"""

from ._analytic import has_analytic_entropy, has_analytic_kl
from ._continuous import (
    Delta,
    IndependentNormal,
    NormalParamWrapper,
    TanhDelta,
    TruncatedNormal,
)
from ._discrete import (
    MaskedCategorical,
    MaskedOneHotCategorical,
    OneHotCategorical,
    OneHotOrdinal,
    Ordinal,
    ReparamGradientStrategy,
)
from ._llm import LLMMaskedCategorical
from ._sampling import composite_entropy, rsample_and_log_prob, sample_and_log_prob
from ._tanh_normal import TanhNormal
from ._utils import SafeTanhTransform, safeatanh, safetanh

__all__ = [
    "Delta",
    "IndependentNormal",
    "LLMMaskedCategorical",
    "MaskedCategorical",
    "MaskedOneHotCategorical",
    "NormalParamWrapper",
    "OneHotCategorical",
    "OneHotOrdinal",
    "Ordinal",
    "ReparamGradientStrategy",
    "SafeTanhTransform",
    "TanhDelta",
    "TanhNormal",
    "TruncatedNormal",
    "composite_entropy",
    "has_analytic_entropy",
    "has_analytic_kl",
    "rsample_and_log_prob",
    "safeatanh",
    "safetanh",
    "sample_and_log_prob",
]
