"""Does a distribution have a closed-form entropy, or a pair a closed-form KL divergence?

Losses use these to choose between the exact value and a Monte Carlo estimate without
calling the method and catching ``NotImplementedError``.
"""

from __future__ import annotations

import torch
from tensordict.nn import CompositeDistribution
from torch import distributions as d
from torch.distributions import Independent, TransformedDistribution
from torch.distributions.kl import _KL_REGISTRY

__all__ = ["has_analytic_entropy", "has_analytic_kl"]

_ENTROPY_CACHE: dict[type, bool] = {}
_KL_CACHE: dict[tuple[type, type], bool] = {}


def _class_has_entropy(cls: type) -> bool:
    if torch.compiler.is_compiling():
        # a constant of the class for dynamo; a cache filled inside a graph would be a
        # guard on the cache that fails at the next call (a recompilation)
        return _entropy_declared(cls)
    found = _ENTROPY_CACHE.get(cls)
    if found is None:
        found = _ENTROPY_CACHE[cls] = _entropy_declared(cls)
    return found


def _entropy_declared(cls: type) -> bool:
    declared = getattr(cls, "analytic_entropy", None)
    if declared is not None:
        return bool(declared)
    method = getattr(cls, "entropy", None)
    return method is not None and method is not d.Distribution.entropy


def has_analytic_entropy(dist: d.Distribution) -> bool:
    """Whether ``dist`` has a closed-form ``entropy()``.

    Decided from the class: its ``entropy`` overrides ``Distribution.entropy``, unless
    the class declares ``analytic_entropy = False`` (an ``entropy()`` that is a Monte
    Carlo estimate, as :class:`~rl.modules.TanhNormal`'s) or ``True``. An
    ``Independent`` is judged by its base distribution (its own ``entropy`` always exists
    but only works when the base has one); a tensordict ``CompositeDistribution`` counts
    as not having one (its entropy is an estimate over its parts).

    Args:
        dist (torch.distributions.Distribution): the distribution to inspect.

    Returns:
        ``True`` when ``dist.entropy()`` is available in closed form.

    Examples:
        >>> import torch
        >>> from torch import distributions as d
        >>> from rl.modules import has_analytic_entropy
        >>> has_analytic_entropy(d.Independent(d.Normal(torch.zeros(2), torch.ones(2)), 1))
        True
        >>> has_analytic_entropy(d.TransformedDistribution(d.Normal(0.0, 1.0), []))
        False
    """
    if isinstance(dist, CompositeDistribution):
        return False
    if isinstance(dist, Independent):
        return has_analytic_entropy(dist.base_dist)
    return _class_has_entropy(type(dist))


def has_analytic_kl(p: d.Distribution, q: d.Distribution) -> bool:
    """Whether ``torch.distributions.kl_divergence(p, q)`` has a registered closed form.

    Two ``Independent`` (same ``reinterpreted_batch_ndims``) or two
    ``TransformedDistribution`` (same transforms and event shape) are judged by their
    bases, as torch's own rules for them do; any other pair is looked up in torch's KL
    registry (subclasses included), without calling it.

    Args:
        p (torch.distributions.Distribution): first argument of ``kl_divergence``.
        q (torch.distributions.Distribution): second argument.

    Returns:
        ``True`` when ``kl_divergence(p, q)`` is computed in closed form.

    Examples:
        >>> import torch
        >>> from torch import distributions as d
        >>> from rl.modules import has_analytic_kl
        >>> normal = d.Normal(torch.zeros(2), torch.ones(2))
        >>> has_analytic_kl(normal, normal)
        True
        >>> has_analytic_kl(d.Categorical(logits=torch.zeros(2)), normal)
        False
    """
    if isinstance(p, Independent) and isinstance(q, Independent):
        if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
            return False
        return has_analytic_kl(p.base_dist, q.base_dist)
    if isinstance(p, TransformedDistribution) and isinstance(q, TransformedDistribution):
        if p.transforms != q.transforms or p.event_shape != q.event_shape:
            return False
        return has_analytic_kl(p.base_dist, q.base_dist)
    key = (type(p), type(q))
    if torch.compiler.is_compiling():  # no cache filled in a graph (see _class_has_entropy)
        return _kl_registered(key)
    found = _KL_CACHE.get(key)
    if found is None:
        found = _KL_CACHE[key] = _kl_registered(key)
    return found


def _kl_registered(key: tuple[type, type]) -> bool:
    # the wrapper rules are resolved by has_analytic_kl: they raise when their bases
    # have no rule
    wrappers = (Independent, TransformedDistribution)
    return any(
        issubclass(key[0], sp) and issubclass(key[1], sq)
        for sp, sq in _KL_REGISTRY
        if sp not in wrappers and sq not in wrappers
    )
