"""Draw and score in one step: ``sample_and_log_prob``, ``rsample_and_log_prob``,
``composite_entropy`` (TorchRL's ``torchrl.modules.distributions.utils``).

A squashed distribution (``TanhNormal``) scores its own draw more accurately from the
pre-squash value it drew than by inverting the squash; these helpers use a
distribution's ``sample_and_log_prob`` / ``rsample_and_log_prob`` when it has one, go
through a tensordict ``CompositeDistribution`` part by part, and fall back to
``sample`` then ``log_prob`` otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase, is_tensor_collection
from tensordict.nn import CompositeDistribution, composite_lp_aggregate
from tensordict.utils import NestedKey
from torch import distributions as d

from ._analytic import has_analytic_entropy

__all__ = ["composite_entropy", "rsample_and_log_prob", "sample_and_log_prob"]


def _suffixed(name: NestedKey, suffix: str) -> NestedKey:
    if isinstance(name, str):
        return name + suffix
    return (*name[:-1], name[-1] + suffix)


def _sum_parts(parts: dict, batch_ndim: int) -> torch.Tensor:
    """Sum per-part values down to the batch shape (a part's event dims are summed)."""
    total = 0.0
    for value in parts.values():
        if is_tensor_collection(value):
            value = value.sum(dim="feature", reduce=True)
        elif value.ndim > batch_ndim:
            value = value.flatten(batch_ndim, -1).sum(-1)
        total = total + value
    return total


def _overrides(dist: d.Distribution, name: str) -> bool:
    return callable(getattr(type(dist), name, None))


def sample_and_log_prob(
    distribution: d.Distribution,
    sample_shape: torch.Size | Sequence[int] = (),
    *,
    reparameterize: bool = False,
) -> tuple[Any, torch.Tensor | TensorDictBase]:
    """Draws once and scores that same draw.

    Args:
        distribution: the distribution (a ``CompositeDistribution`` is handled part by
            part).
        sample_shape: leading sample dims. Defaults to ``()``.

    Keyword Args:
        reparameterize: draw with ``rsample`` (gradients flow through the sample).
            Defaults to ``False``.

    Returns:
        ``(sample, log_prob)``. For a composite, the sample is a TensorDict
        ``[*sample_shape, *batch]`` and the log-probability is their sum over parts and
        event dims, or, under ``set_composite_lp_aggregate(False)``, a TensorDict of
        ``<name>_log_prob`` entries.

    Examples:
        >>> import torch
        >>> from rl.modules import TanhNormal, sample_and_log_prob
        >>> dist = TanhNormal(torch.zeros(3), torch.ones(3))
        >>> sample, log_prob = sample_and_log_prob(dist, (5,))
        >>> sample.shape, log_prob.shape
        (torch.Size([5, 3]), torch.Size([5]))
    """
    sample_shape = torch.Size(sample_shape)
    if isinstance(distribution, CompositeDistribution):
        samples, log_probs = {}, {}
        for name, part in distribution.dists.items():
            samples[name], log_probs[_suffixed(name, "_log_prob")] = sample_and_log_prob(
                part, sample_shape, reparameterize=reparameterize
            )
        batch = sample_shape + distribution.batch_shape
        sample = TensorDict(samples, batch_size=batch)
        if not composite_lp_aggregate():
            return sample, TensorDict(log_probs, batch_size=batch)
        return sample, _sum_parts(log_probs, sample.ndim)
    if reparameterize and _overrides(distribution, "rsample_and_log_prob"):
        return distribution.rsample_and_log_prob(sample_shape)
    if not reparameterize and _overrides(distribution, "sample_and_log_prob"):
        return distribution.sample_and_log_prob(sample_shape)
    sample = (distribution.rsample if reparameterize else distribution.sample)(sample_shape)
    if isinstance(sample, torch.Tensor) or is_tensor_collection(sample):
        return sample, distribution.log_prob(sample)
    return sample, distribution.log_prob(*sample)


def rsample_and_log_prob(
    distribution: d.Distribution, sample_shape: torch.Size | Sequence[int] = ()
) -> tuple[Any, torch.Tensor | TensorDictBase]:
    """:func:`sample_and_log_prob` with a reparameterized draw."""
    return sample_and_log_prob(distribution, sample_shape, reparameterize=True)


def composite_entropy(
    distribution: CompositeDistribution, samples_mc: int = 1
) -> torch.Tensor | TensorDictBase:
    """The entropy of a ``CompositeDistribution``, part by part.

    A part with a closed-form entropy uses it (unless it is not finite); the others are
    estimated as ``-mean(log_prob)`` over ``samples_mc`` draws scored by
    :func:`sample_and_log_prob` (reparameterized when the part allows it, so the
    estimate is differentiable).

    Args:
        distribution: the composite distribution.
        samples_mc: draws per Monte Carlo estimate. Defaults to ``1``.

    Returns:
        The entropy summed over parts and event dims (``batch_shape``), or, under
        ``set_composite_lp_aggregate(False)``, a TensorDict of ``<name>_entropy`` entries.

    Raises:
        NotImplementedError: for a part with neither a closed-form entropy nor
            reparameterized sampling.
    """
    entropies = {}
    for name, part in distribution.dists.items():
        analytic = has_analytic_entropy(part)
        entropy = part.entropy() if analytic else None
        if entropy is None or not bool(entropy.isfinite().all()):
            if not analytic and not part.has_rsample:
                raise NotImplementedError(
                    f"Entropy is not implemented for {type(part).__name__} and it has no "
                    "reparameterized sampling to estimate it"
                )
            _, log_prob = sample_and_log_prob(part, (samples_mc,), reparameterize=part.has_rsample)
            entropy = -log_prob.mean(0)
        entropies[_suffixed(name, "_entropy")] = entropy
    if not composite_lp_aggregate():
        return TensorDict(entropies, batch_size=distribution.batch_shape)
    return _sum_parts(entropies, len(distribution.batch_shape))
