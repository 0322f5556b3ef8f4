"""ValueNorm, PopArtValueNorm, RunningValueNorm and PercentileValueNorm.

Statistics are compared with a hand computation of the moving averages, with the mean and
variance of the concatenated batches, and with ``torch.quantile``.
"""

from __future__ import annotations

import pytest
import torch

from rl.modules import PercentileValueNorm, PopArtValueNorm, RunningValueNorm, ValueNorm


class TestValueNormBase:
    def test_abstract(self):
        with pytest.raises(TypeError):
            ValueNorm(shape=1)

    def test_subclass_without_scale_warns_and_raises(self):
        class NoScale(ValueNorm):
            def update(self, value_target):
                pass

            def normalize(self, value_target):
                return value_target

            def denormalize(self, normalised_value):
                return normalised_value

        with pytest.warns(DeprecationWarning, match="does not define scale"):
            vn = NoScale(shape=2)
        assert vn.shape == (2,)
        with pytest.raises(NotImplementedError, match="NoScale does not define scale"):
            vn.scale()

    @pytest.mark.parametrize("cls", [PopArtValueNorm, RunningValueNorm, PercentileValueNorm])
    def test_bad_trailing_shape_is_named(self, cls):
        vn = cls(shape=1)
        with pytest.raises(ValueError, match=r"shape=\(1,\).*trailing shape \(8,\)"):
            vn.update(torch.randn(4, 8))

    @pytest.mark.parametrize("cls", [PopArtValueNorm, RunningValueNorm, PercentileValueNorm])
    @pytest.mark.parametrize("shape", [1, (2, 3)])
    def test_denormalize_inverts_normalize(self, cls, shape):
        torch.manual_seed(0)
        vn = cls(shape=shape, **({"center": True} if cls is PercentileValueNorm else {}))
        full = (shape,) if isinstance(shape, int) else shape
        for _ in range(5):
            vn.update(torch.randn(7, 4, *full) * 3 + 1)
        y = torch.randn(5, *full) * 3 + 1
        torch.testing.assert_close(vn.denormalize(vn.normalize(y)), y, rtol=1e-4, atol=1e-4)
        assert vn.scale().shape == full


class TestPopArtValueNorm:
    def test_matches_hand_computation(self):
        beta = 0.5
        vn = PopArtValueNorm(shape=1, beta=beta)
        a, b = torch.tensor([[1.0], [3.0]]), torch.tensor([[5.0], [7.0], [9.0]])
        vn.update(a)
        vn.update(b)
        # debiased averages: weights beta*(1-beta) for a's moments, (1-beta) for b's
        w = beta * (1 - beta) + (1 - beta)
        mean = (beta * (1 - beta) * 2.0 + (1 - beta) * 7.0) / w
        mean_sq = (beta * (1 - beta) * 5.0 + (1 - beta) * (25 + 49 + 81) / 3) / w
        var = mean_sq - mean**2
        got_mean, got_var = vn._running_stats()
        torch.testing.assert_close(got_mean, torch.tensor([mean]))
        torch.testing.assert_close(got_var, torch.tensor([var]))
        torch.testing.assert_close(vn.scale(), torch.tensor([var**0.5]))
        torch.testing.assert_close(
            vn.normalize(torch.tensor([2.0])), torch.tensor([(2.0 - mean) / var**0.5])
        )

    def test_statistics_follow_every_change_of_the_buffers(self):
        """normalize reuses the statistics of the buffers' current state only: an
        update, an in-place edit, load_state_dict and a dtype change each show."""

        def expected(vn, x):
            mean, var = vn._running_stats()
            return (x - mean) / var.sqrt()

        vn = PopArtValueNorm(shape=1, beta=0.5)
        x = torch.tensor([[2.0], [-1.0]])
        vn.update(torch.tensor([[1.0], [3.0]]))
        first = vn.normalize(x)
        torch.testing.assert_close(first, expected(vn, x))
        torch.testing.assert_close(vn.normalize(x), first)  # same state: same numbers
        vn.update(torch.tensor([[10.0], [30.0]]))
        assert not torch.allclose(vn.normalize(x), first)
        torch.testing.assert_close(vn.normalize(x), expected(vn, x))
        vn.running_mean.add_(1.0)  # in place, outside update
        torch.testing.assert_close(vn.normalize(x), expected(vn, x))
        other = PopArtValueNorm(shape=1, beta=0.5)
        other.update(torch.tensor([[-4.0], [4.0]]))
        vn.normalize(x)
        vn.load_state_dict(other.state_dict())
        torch.testing.assert_close(vn.normalize(x), other.normalize(x))
        torch.testing.assert_close(vn.denormalize(vn.normalize(x)), x)
        vn.double()
        out = vn.normalize(x.double())
        assert out.dtype == torch.float64
        torch.testing.assert_close(out, expected(vn, x.double()))

    def test_inference_mode_call_then_backward(self):
        vn = PopArtValueNorm(shape=1)
        vn.update(torch.tensor([[1.0], [5.0]]))
        with torch.inference_mode():
            vn.denormalize(torch.zeros(2, 1))
        value = torch.tensor([[2.0]], requires_grad=True)
        vn.normalize(value).sum().backward()  # the stats are not inference tensors
        assert value.grad is not None

    def test_gradient_flows_through_normalize(self):
        vn = PopArtValueNorm(shape=1)
        vn.update(torch.tensor([[1.0], [5.0]]))
        value = torch.tensor([[2.0], [4.0]], requires_grad=True)
        vn.normalize(value).sum().backward()
        std = vn._running_stats()[1].sqrt()
        torch.testing.assert_close(value.grad, (1 / std).expand(2, 1))

    def test_state_dict_keys(self):
        assert sorted(PopArtValueNorm().state_dict()) == [
            "debiasing_term",
            "running_mean",
            "running_mean_sq",
        ]


class TestRunningValueNorm:
    def test_matches_concatenated_batches(self):
        torch.manual_seed(0)
        vn = RunningValueNorm(shape=2)
        batches = [torch.randn(n, 3, 2) * (i + 1) + i for i, n in enumerate((4, 9, 1))]
        for x in batches:
            vn.update(x)
        every = torch.cat([x.reshape(-1, 2) for x in batches])
        torch.testing.assert_close(vn.mean, every.mean(0))
        torch.testing.assert_close(vn.scale(), every.var(0, correction=0).sqrt())
        assert float(vn.count) == every.shape[0]

    def test_no_decay(self):
        vn = RunningValueNorm(shape=1)
        vn.update(torch.full((1000, 1), 1.0))
        vn.update(torch.full((1000, 1), 5.0))
        torch.testing.assert_close(vn.mean, torch.tensor([3.0]))
        torch.testing.assert_close(vn.scale(), torch.tensor([2.0]))


class TestPercentileValueNorm:
    def test_matches_quantile_averages(self):
        torch.manual_seed(0)
        rate = 0.5
        vn = PercentileValueNorm(shape=1, rate=rate, quantiles=(0.1, 0.9), min_scale=0.01)
        a, b = torch.randn(50, 1), torch.randn(50, 1) * 4
        vn.update(a)
        vn.update(b)
        q = torch.tensor([0.1, 0.9])
        qa, qb = torch.quantile(a, q, dim=0), torch.quantile(b, q, dim=0)
        expected = (1 - rate) * (rate * qa) + rate * qb
        torch.testing.assert_close(vn.low, expected[0])
        torch.testing.assert_close(vn.high, expected[1])
        torch.testing.assert_close(vn.scale(), expected[1] - expected[0])
        torch.testing.assert_close(
            vn.normalize(torch.tensor([2.0])), 2.0 / (expected[1] - expected[0])
        )

    def test_min_scale_floor(self):
        vn = PercentileValueNorm(shape=1, rate=1.0, min_scale=1.0)
        vn.update(torch.full((10, 1), 0.3))
        torch.testing.assert_close(vn.scale(), torch.tensor([1.0]))

    @pytest.mark.parametrize(
        "kwargs, match",
        [
            ({"quantiles": (0.9, 0.1)}, "quantiles must satisfy"),
            ({"rate": 1.5}, r"rate must be in \[0, 1\], got 1.5"),
            ({"min_scale": 0.0}, "min_scale must be positive, got 0.0"),
        ],
    )
    def test_bad_arguments(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            PercentileValueNorm(**kwargs)
