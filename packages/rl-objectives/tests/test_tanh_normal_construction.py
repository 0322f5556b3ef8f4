"""TanhNormal built again and again from the same bounds (as an actor does at each step).

Its bounds are validated and derived once per distinct low / high tensors; these tests pin
that every value and draw stays the one plain torch computes, that bad bounds still raise
at each construction (including bounds changed in place after they were accepted), and
that a fullgraph ``torch.compile`` of construction and sampling still matches eager.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import distributions as D

from rl.modules import TanhNormal
from rl.modules.distributions._utils import safe_tanh

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _lim(dtype: torch.dtype) -> float:
    return 1.0 - torch.finfo(dtype).resolution


def _squash(x, low, high):
    """``mid + half * tanh(x)`` with tanh clamped ``resolution`` away from +-1, as plain
    torch (``low`` / ``high`` None: unit bounds, tanh alone, a -0 made +0)."""
    lim = _lim(x.dtype)
    y = x.tanh().clamp(-lim, lim)
    if low is None:
        return y + 0.0
    return (high + low) / 2 + (high - low) / 2 * y


def _pre_tanh(value, low, high):
    y = value if low is None else (value - (high + low) / 2) / ((high - low) / 2)
    lim = _lim(value.dtype)
    return y.clamp(-lim, lim).atanh()


def _log_prob(x, loc, scale, low, high):
    """The log-density at the pre-tanh value ``x``, as TanhNormal defines it: the Normal's,
    minus ``log(1 - tanh(x)^2) = 2 (log 2 - x - softplus(-2x))``, minus ``log(half)``,
    summed over the last dimension."""
    z = (x - loc) / scale
    lp = -0.5 * z.pow(2) - scale.log() - _HALF_LOG_2PI
    lp = lp - 2.0 * (math.log(2.0) - x - F.softplus(-2.0 * x))
    if low is not None:
        half = (high - low) / 2
        lp = lp - (math.log(half) if isinstance(half, float) else half.log())
    return lp.sum(-1)


def _log_prob_of_draw(eps, x, scale, low, high):
    """``_log_prob(x, ...)`` for a draw ``x = loc + eps * scale``, as TanhNormal scores its
    own draws: the standardised value is ``eps``, the constants are summed first, and
    ``-log(1 - tanh(x)^2)`` is ``2 (x + softplus(-2x)) - 2 log 2``."""
    const = _HALF_LOG_2PI + 2 * math.log(2.0)
    half = None if low is None else (high - low) / 2
    if isinstance(half, float):
        const = const + math.log(half)
    lp = torch.add(eps.square().mul_(-0.5).sub_(const), x + F.softplus(-2.0 * x), alpha=2.0)
    lp = lp - scale.log()
    if isinstance(half, torch.Tensor):
        lp = lp - half.log()
    return lp.sum(-1)


def _mode(loc, scale, low, high):
    """The fixed point iteration TanhNormal.mode documents, written out."""
    var2 = 2 * scale.pow(2)
    hi, lo = loc + var2, loc - var2
    for _ in range(64):
        hi = loc + var2 * hi.tanh()
        lo = loc + var2 * lo.tanh()

    def log_density(x):
        return -(x - loc).pow(2) / var2 - 2.0 * (math.log(2.0) - x - F.softplus(-2.0 * x))

    return _squash(torch.where(log_density(hi) >= log_density(lo), hi, lo), low, high)


def _bounds_cases():
    # (low, high, loc dtype, the bounds as plain torch applies them: None for [-1, 1])
    pendulum = (-2 * torch.ones(1), 2 * torch.ones(1))
    ragged = (torch.tensor([-2.0, 0.0, -0.5]), torch.tensor([2.0, 3.0, 0.5]))
    wide = (torch.tensor([-2.0, 0.0, -0.5], dtype=torch.float64), torch.tensor([2.0, 3.0, 0.5]))
    unit = (-torch.ones(3), torch.ones(3))
    return {
        "pendulum": (*pendulum, torch.float32, pendulum),
        "ragged": (*ragged, torch.float32, ragged),
        "converted": (*wide, torch.float32, tuple(b.float() for b in wide)),
        "float64-loc": (*ragged, torch.float64, tuple(b.double() for b in ragged)),
        "unit-tensors": (*unit, torch.float32, (None, None)),
        "numbers": (-3.0, 1.0, torch.float32, (-3.0, 1.0)),
        "default": (-1.0, 1.0, torch.float32, (None, None)),
    }


BOUNDS = _bounds_cases()


class TestValuesAgainstPlainTorch:
    @pytest.mark.parametrize("case", list(BOUNDS))
    @pytest.mark.parametrize("grad", [False, True])
    def test_draws_and_densities(self, case, grad):
        low, high, dtype, (ref_low, ref_high) = BOUNDS[case]
        torch.manual_seed(0)
        shape = (4, 1) if case == "pendulum" else (4, 3)
        loc = (torch.randn(shape) * 3).to(dtype)
        loc[0, 0] = 30.0  # saturated: tanh is clamped
        scale = (torch.rand(shape) + 0.1).to(dtype)
        loc.requires_grad_(grad)
        for _ in range(3):  # the first construction derives the bounds, the next reuse them
            dist = TanhNormal(loc, scale, low=low, high=high)
            with torch.no_grad():
                torch.manual_seed(1)
                sample = dist.sample((2,))
                torch.manual_seed(1)
                x = D.Normal(loc, scale).sample((2,))
            torch.testing.assert_close(sample, _squash(x, ref_low, ref_high), rtol=0, atol=0)

            torch.manual_seed(2)
            rsample = dist.rsample()
            torch.manual_seed(2)
            x = D.Normal(loc, scale).rsample()
            torch.testing.assert_close(rsample, _squash(x, ref_low, ref_high), rtol=0, atol=0)
            assert rsample.requires_grad == grad

            torch.manual_seed(3)
            value, lp = dist.rsample_and_log_prob()
            torch.manual_seed(3)
            x = D.Normal(loc, scale).rsample()
            torch.manual_seed(3)
            eps = torch.randn(shape, dtype=dtype)
            torch.testing.assert_close(value, _squash(x, ref_low, ref_high), rtol=0, atol=0)
            torch.testing.assert_close(
                lp, _log_prob_of_draw(eps, x, scale, ref_low, ref_high), rtol=0, atol=0
            )
            # the same density as scoring the pre-tanh value, up to rounding
            torch.testing.assert_close(lp, _log_prob(x, loc, scale, ref_low, ref_high))

            lp = dist.log_prob(sample.detach())
            x = _pre_tanh(sample.detach(), ref_low, ref_high)
            torch.testing.assert_close(
                lp, _log_prob(x, loc, scale, ref_low, ref_high), rtol=0, atol=0
            )
            torch.testing.assert_close(
                dist.deterministic_sample, _squash(loc, ref_low, ref_high), rtol=0, atol=0
            )
            torch.testing.assert_close(
                dist.mode, _mode(loc.detach(), scale, ref_low, ref_high), rtol=0, atol=0
            )
            assert dist.sample().dtype == dtype

    @pytest.mark.parametrize("case", ["default", "numbers", "ragged"])
    def test_scoring_a_draw_from_its_noise_keeps_the_gradients(self, case):
        # rsample_and_log_prob scores x = loc + eps * scale by eps: the gradients in loc
        # and scale are those of scoring x itself, (x - loc) / scale included
        low, high, dtype, (ref_low, ref_high) = BOUNDS[case]
        torch.manual_seed(0)
        loc = (torch.randn(64, 3) * 3).requires_grad_(True)
        scale = (torch.rand(64, 3) + 0.1).requires_grad_(True)
        torch.manual_seed(4)
        value, lp = TanhNormal(loc, scale, low=low, high=high).rsample_and_log_prob()
        got = torch.autograd.grad(value.sum() + lp.sum(), (loc, scale))
        torch.manual_seed(4)
        x = D.Normal(loc, scale).rsample()
        ref = (
            _squash(x, ref_low, ref_high).sum() + _log_prob(x, loc, scale, ref_low, ref_high).sum()
        )
        want = torch.autograd.grad(ref, (loc, scale))
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)

    def test_negative_zero_is_squashed_to_positive_zero(self):
        # safe_tanh maps tanh(-0) = -0 to +0, with and without grad, bounds cached or not
        loc = torch.full((2,), -0.0)
        for low, high in [(-1.0, 1.0), (-torch.ones(2), torch.ones(2)), (-2.0, 2.0)]:
            dist = TanhNormal(loc, torch.ones(2), low=low, high=high)
            with torch.no_grad():
                fast = dist.deterministic_sample
            loc_grad = loc.clone().requires_grad_(True)
            slow = TanhNormal(loc_grad, torch.ones(2), low=low, high=high).deterministic_sample
            assert not torch.signbit(fast).any() and not torch.signbit(slow).any()
            torch.testing.assert_close(fast, slow.detach(), rtol=0, atol=0)

    def test_forward_mode_keeps_the_straight_through_tangent(self):
        low, high = -2 * torch.ones(3), 2 * torch.ones(3)
        loc = torch.tensor([0.3, -1.0, 30.0])

        def squashed(loc):
            return TanhNormal(loc, torch.ones(3), low=low, high=high).deterministic_sample

        tangent = torch.ones(3)
        _, out = torch.func.jvp(squashed, (loc,), (tangent,))
        _, ref = torch.func.jvp(lambda x: 2 * safe_tanh(x), (loc,), (tangent,))
        torch.testing.assert_close(out, ref, rtol=0, atol=0)

    def test_bounds_changed_in_place_are_used(self):
        low, high = -2 * torch.ones(1), 2 * torch.ones(1)
        loc, scale = torch.tensor([0.7]), torch.tensor([0.5])
        before = TanhNormal(loc, scale, low=low, high=high).deterministic_sample
        torch.testing.assert_close(before, 2 * loc.tanh(), rtol=0, atol=0)
        low.fill_(0.0)
        high.mul_(2.0)
        after = TanhNormal(loc, scale, low=low, high=high).deterministic_sample
        torch.testing.assert_close(after, 2.0 + 2.0 * loc.tanh(), rtol=0, atol=0)
        low.fill_(-1.0)
        high.fill_(1.0)  # unit bounds now: tanh alone
        dist = TanhNormal(loc, scale, low=low, high=high)
        assert dist._trivial_bounds
        torch.testing.assert_close(dist.deterministic_sample, loc.tanh(), rtol=0, atol=0)

    def test_a_written_converted_copy_is_not_reused(self):
        # dist.low of float64 bounds for a float32 loc is a converted copy; writing to it
        # must not leak into the next distribution
        low, high = torch.tensor([-2.0], dtype=torch.float64), torch.tensor([2.0])
        loc, scale = torch.tensor([0.4]), torch.tensor([1.0])
        dist = TanhNormal(loc, scale, low=low, high=high)
        dist.low.fill_(-10.0)
        fresh = TanhNormal(loc, scale, low=low, high=high)
        torch.testing.assert_close(fresh.low, torch.tensor([-2.0]), rtol=0, atol=0)
        torch.testing.assert_close(fresh.deterministic_sample, 2 * loc.tanh(), rtol=0, atol=0)

    def test_bounds_that_require_grad_keep_their_graph(self):
        low = torch.tensor([-2.0], requires_grad=True)
        high = torch.tensor([3.0], requires_grad=True)
        for _ in range(2):  # a reused derivation would have a freed graph the second time
            dist = TanhNormal(torch.tensor([0.2]), torch.tensor([1.0]), low=low, high=high)
            dist.deterministic_sample.sum().backward()
        # d(mid + half * tanh(0.2)) / d low = (1 - tanh(0.2)) / 2, accumulated twice
        torch.testing.assert_close(low.grad, torch.tensor([1 - math.tanh(0.2)]))

    def test_inference_mode_then_autograd(self):
        low, high = -2 * torch.ones(3), 2 * torch.ones(3)
        with torch.inference_mode():
            TanhNormal(torch.zeros(3), torch.ones(3), low=low, high=high).sample()
        loc = torch.zeros(3, requires_grad=True)
        dist = TanhNormal(loc, torch.ones(3), low=low, high=high)
        dist.rsample_and_log_prob()[1].sum().backward()  # no inference tensor saved
        assert loc.grad is not None


class TestBadBoundsStillRaise:
    def test_bad_bounds_raise_on_each_construction(self):
        loc, scale = torch.zeros(2), torch.ones(2)
        TanhNormal(loc, scale, low=-torch.ones(2) * 2, high=torch.ones(2) * 2)
        low, high = torch.tensor([0.0, 1.0]), torch.tensor([1.0, 1.0])  # equal at index 1
        for _ in range(3):
            with pytest.raises(ValueError, match="high > low everywhere"):
                TanhNormal(loc, scale, low=low, high=high)
        for _ in range(3):
            with pytest.raises(ValueError, match="high > low everywhere"):
                TanhNormal(loc, scale, low=high, high=low)

    def test_in_place_change_of_accepted_bounds_raises(self):
        loc, scale = torch.zeros(2), torch.ones(2)
        low, high = -torch.ones(2) * 2, torch.ones(2) * 2
        for _ in range(2):
            TanhNormal(loc, scale, low=low, high=high)
        low[1] = 5.0
        for _ in range(2):
            with pytest.raises(ValueError, match="high > low everywhere"):
                TanhNormal(loc, scale, low=low, high=high)
        low[1] = -2.0
        TanhNormal(loc, scale, low=low, high=high)
        with torch.no_grad():
            high.sub_(10.0)
        with pytest.raises(ValueError, match="high > low everywhere"):
            TanhNormal(loc, scale, low=low, high=high)
        high.add_(10.0)
        dist = TanhNormal(loc, scale, low=low, high=high)
        torch.testing.assert_close(dist.deterministic_sample, torch.zeros(2), rtol=0, atol=0)

    def test_bad_shapes_raise_on_each_construction(self):
        low, high = -torch.ones(4), torch.ones(4) * 2
        TanhNormal(torch.zeros(4), torch.ones(4), low=low, high=high)
        for _ in range(2):
            with pytest.raises(ValueError, match="do not broadcast"):
                TanhNormal(torch.zeros(3), torch.ones(3), low=low, high=high)

    def test_bad_event_dims_after_good_bounds(self):
        low, high = -torch.ones(2), torch.ones(2) * 2
        TanhNormal(torch.zeros(2), torch.ones(2), low=low, high=high)
        with pytest.raises(ValueError, match="event_dims=2"):
            TanhNormal(torch.zeros(2), torch.ones(2), low=low, high=high, event_dims=2)
        # bad bounds are reported before event_dims, as before
        with pytest.raises(ValueError, match="high > low"):
            TanhNormal(torch.zeros(2), torch.ones(2), low=high, high=low, event_dims=2)


class TestCompile:
    @pytest.mark.parametrize("unit", [False, True])
    def test_fullgraph_construct_rsample_log_prob(self, unit):
        low = -torch.ones(3) if unit else torch.tensor([-2.0, 0.0, -0.5])
        high = torch.ones(3) if unit else torch.tensor([2.0, 3.0, 0.5])

        def step(loc, scale, low, high):
            dist = TanhNormal(loc, scale, low=low, high=high)
            action = dist.rsample()
            with torch.no_grad():
                sample = dist.sample()
            return action, dist.log_prob(action), sample, dist.deterministic_sample

        torch._dynamo.reset()
        compiled = torch.compile(step, fullgraph=True)
        loc = torch.randn(5, 3, requires_grad=True)
        scale = torch.rand(5, 3) + 0.1
        from torch._inductor import config as inductor_config

        with inductor_config.patch(fallback_random=True):  # eager's random stream
            for _ in range(2):  # eager first: its bounds stored, then compiled
                torch.manual_seed(0)
                eager = step(loc, scale, low, high)
                torch.manual_seed(0)
                out = compiled(loc, scale, low, high)
                # the same draws (eager's random stream): equal up to float32 rounding
                # (inductor's fused kernels may round the tanh and the affine map
                # otherwise, 1.2e-7 seen when other compiled tests ran first)
                torch.testing.assert_close(out[0], eager[0], rtol=0, atol=1e-6)
                torch.testing.assert_close(out[1], eager[1])
                torch.testing.assert_close(out[2], eager[2], rtol=0, atol=1e-6)
                torch.testing.assert_close(out[3], eager[3], rtol=0, atol=1e-6)
        out[1].sum().backward()
        assert loc.grad is not None and loc.grad.isfinite().all()


class TestBoundsCache:
    def test_same_bounds_hit_the_cache_and_it_holds_none_of_them(self):
        """Bounds of loc's dtype: a second construction reuses the stored derivation (no
        validation of the same tensors again), and the entry keeps neither bound alive."""
        import gc
        import weakref

        from rl.modules.distributions import _tanh_normal as tn

        low, high = -2 * torch.ones(3), 2 * torch.ones(3)
        loc = torch.zeros(3)
        TanhNormal(loc, torch.ones(3), low=low, high=high)
        key = tn._bounds_key(low, high, loc)
        assert key in tn._BOUNDS_CACHE
        assert tn._cached_bounds(key, low, high) is not None
        dist = TanhNormal(loc, torch.ones(3), low=low, high=high)
        assert dist._low is low and dist._high is high
        ref = weakref.ref(low)
        del low, dist
        gc.collect()
        assert ref() is None
        assert key not in tn._BOUNDS_CACHE

    def test_converted_bounds_are_each_distributions_own(self):
        """float64 bounds for a float32 loc: each distribution converts its own copy, so
        writing into one's bounds leaves the other's alone."""
        low = -2 * torch.ones(3, dtype=torch.float64)
        high = 2 * torch.ones(3, dtype=torch.float64)
        a = TanhNormal(torch.zeros(3), torch.ones(3), low=low, high=high)
        b = TanhNormal(torch.zeros(3), torch.ones(3), low=low, high=high)
        assert a._low is not b._low
        a._low.fill_(-5.0)
        assert (b.low == -2.0).all()
        assert (b.deterministic_sample == 0).all()

    def test_jit_trace_records_the_bounds_ops(self):
        """A trace made after the cache holds the bounds still computes from the bounds
        it is given (the cached mid / half are not baked into the trace)."""
        low, high = -torch.ones(2) * 2, torch.ones(2) * 2
        loc = torch.tensor([0.5, 1.0])
        TanhNormal(loc, torch.ones(2), low=low, high=high)  # cached

        def mean(loc, low, high):
            return TanhNormal(loc, torch.ones(2), low=low, high=high).deterministic_sample

        traced = torch.jit.trace(mean, (loc, low, high), check_trace=False)
        other_low, other_high = torch.zeros(2), torch.full((2,), 10.0)
        expected = 5.0 + 5.0 * loc.tanh()
        torch.testing.assert_close(traced(loc, other_low, other_high), expected)


def test_no_host_read_while_a_cuda_graph_is_captured(monkeypatch):
    """While a CUDA graph is captured on loc's device, building, sampling and scoring read
    nothing on the host (a read would end the capture): the bounds are neither checked
    nor cached, as under torch.compile. ``meta`` tensors stand for the device's here:
    any host read of them raises."""
    from rl.modules.distributions import _utils

    monkeypatch.setattr(_utils, "traced", lambda tensor: True)
    meta = torch.device("meta")
    loc, scale = torch.zeros(4, 2, device=meta), torch.ones(4, 2, device=meta)
    low, high = torch.full((2,), -2.0, device=meta), torch.full((2,), 2.0, device=meta)
    for bounds in ({"low": low, "high": high}, {"low": -low, "high": -high}, {}):
        # (reversed bounds are not seen either: they were checked at the eager calls)
        dist = TanhNormal(loc, scale, **bounds)
        sample, log_prob = dist.rsample_and_log_prob()
        assert sample.shape == (4, 2) and log_prob.shape == (4,)
        assert dist.log_prob(dist.rsample()).device == meta
        assert dist.deterministic_sample.device == meta


def test_traced_only_under_compile_or_a_capture_on_cuda(monkeypatch):
    from rl.modules.distributions._utils import traced

    assert not traced(torch.zeros(2))  # eager, on the CPU: the bounds are checked
    assert not traced(torch.zeros(2, device="meta"))
    assert torch.compile(traced, backend="eager", fullgraph=True)(torch.zeros(2))
    # a capture on a CUDA stream does not make CPU (or other) tensors traced
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert not traced(torch.zeros(2)) and not traced(torch.zeros(2, device="meta"))


def test_tanh_delta_reads_nothing_on_the_host_while_captured(monkeypatch):
    """As TanhNormal: under a CUDA graph's capture (``meta`` standing for the device's
    tensors, which raise at any host read), TanhDelta does not check its bounds."""
    from rl.modules import TanhDelta
    from rl.modules.distributions import _utils

    meta = torch.device("meta")
    param = torch.zeros(4, 2, device=meta)
    low, high = torch.full((2,), -2.0, device=meta), torch.full((2,), 2.0, device=meta)
    with pytest.raises(RuntimeError, match="meta"):  # eagerly, the check reads them
        TanhDelta(param, low=low, high=high)
    monkeypatch.setattr(_utils, "traced", lambda tensor: True)
    dist = TanhDelta(param, low=low, high=high)
    assert dist.rsample().shape == (4, 2) and dist.rsample().device == meta
