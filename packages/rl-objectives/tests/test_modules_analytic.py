"""has_analytic_entropy / has_analytic_kl agree with what torch can compute in closed form."""

from __future__ import annotations

import pytest
import torch
from torch import distributions as d

from rl.modules import (
    IndependentNormal,
    OneHotCategorical,
    TanhNormal,
    has_analytic_entropy,
    has_analytic_kl,
)

Z, ONE = torch.zeros(3), torch.ones(3)


def closed_form(fn) -> bool:
    try:
        fn()
    except NotImplementedError:
        return False
    return True


DISTS = {
    "normal": lambda: d.Normal(Z, ONE),
    "independent": lambda: d.Independent(d.Normal(Z, ONE), 1),
    "laplace": lambda: d.Laplace(Z, ONE),
    "categorical": lambda: d.Categorical(logits=Z),
    "onehot": lambda: OneHotCategorical(logits=Z),
    "indep_normal": lambda: IndependentNormal(Z, ONE),
    "transformed": lambda: d.TransformedDistribution(d.Normal(Z, ONE), [d.ExpTransform()]),
    "beta": lambda: d.Beta(ONE, ONE),
}


class TestHasAnalyticEntropy:
    @pytest.mark.parametrize("name", list(DISTS))
    def test_agrees_with_entropy(self, name):
        dist = DISTS[name]()
        assert has_analytic_entropy(dist) == closed_form(dist.entropy)

    def test_values(self):
        assert has_analytic_entropy(d.Normal(Z, ONE))
        assert has_analytic_entropy(d.Independent(d.Normal(Z, ONE), 1))
        assert not has_analytic_entropy(d.TransformedDistribution(d.Normal(Z, ONE), []))
        # an Independent over a base without entropy has none either
        base = d.TransformedDistribution(d.Normal(Z, ONE), [d.ExpTransform()])
        assert not has_analytic_entropy(d.Independent(base, 1))

    def test_monte_carlo_entropy_is_not_analytic(self):
        # TanhNormal.entropy() is an estimate: it runs, but is not a closed form
        dist = TanhNormal(Z, ONE)
        assert dist.entropy().shape == ()
        assert not has_analytic_entropy(dist)


class TestHasAnalyticKL:
    @pytest.mark.parametrize("p", list(DISTS))
    @pytest.mark.parametrize("q", list(DISTS))
    def test_agrees_with_kl_divergence(self, p, q):
        dp, dq = DISTS[p](), DISTS[q]()
        if dp.batch_shape != dq.batch_shape or dp.event_shape != dq.event_shape:
            # shapes that do not line up: only check it answers without raising
            has_analytic_kl(dp, dq)
            return
        assert has_analytic_kl(dp, dq) == closed_form(lambda: d.kl_divergence(dp, dq))

    def test_values(self):
        n = d.Normal(Z, ONE)
        assert has_analytic_kl(n, n)
        assert not has_analytic_kl(d.Categorical(logits=Z), n)
        assert has_analytic_kl(d.Independent(n, 1), d.Independent(n, 1))
        # different reinterpreted dims: torch has no rule
        assert not has_analytic_kl(
            d.Independent(d.Normal(torch.zeros(2, 3), 1.0), 1),
            d.Independent(d.Normal(torch.zeros(2, 3), 1.0), 2),
        )
        t1 = d.TransformedDistribution(n, [d.ExpTransform()])
        t2 = d.TransformedDistribution(n, [d.AffineTransform(0.0, 2.0)])
        assert has_analytic_kl(t1, t1)
        assert not has_analytic_kl(t1, t2)
        # subclasses of registered pairs count (IndependentNormal is an Independent)
        assert has_analytic_kl(IndependentNormal(Z, ONE), IndependentNormal(Z, ONE))


def test_traced_without_a_cache_guard():
    """Under ``torch.compile`` the answers are constants of the classes: a first call
    that fills the caches is no recompilation at the next one."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    from rl.modules.distributions import _analytic

    _analytic._ENTROPY_CACHE.clear()
    _analytic._KL_CACHE.clear()

    def entropy(loc):
        dist = d.Normal(loc, ONE)
        if has_analytic_entropy(dist) and has_analytic_kl(dist, dist):
            return dist.entropy()
        return -dist.log_prob(loc)

    torch._dynamo.reset()
    counters.clear()
    fn = torch.compile(entropy, backend="eager", fullgraph=True)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for _ in range(3):
            torch.testing.assert_close(fn(Z), d.Normal(Z, ONE).entropy())
    assert counters["stats"]["unique_graphs"] == 1
