"""Value transforms (symlog, signed hyperbolic) and the two-hot head."""

from __future__ import annotations

import math

import pytest
import torch

from rl.modules import (
    ComposeValueTransform,
    IdentityValueTransform,
    SignedHyperbolicValueTransform,
    SymExpTwoHot,
    SymLogValueTransform,
    ValueTransform,
    signed_hyperbolic,
    signed_parabolic,
    symexp,
    symlog,
)
from rl.objectives import two_hot_cross_entropy, two_hot_decode, two_hot_encode


class TestValueTransforms:
    def test_symlog_values_and_inverse(self):
        x = torch.tensor([-100.0, -1.0, 0.0, 0.5, 1000.0])
        expected = torch.tensor([-math.log(101), -math.log(2), 0.0, math.log(1.5), math.log(1001)])
        torch.testing.assert_close(symlog(x), expected)
        torch.testing.assert_close(symexp(symlog(x)), x)

    def test_unit_slope_at_zero(self):
        x = torch.zeros(3, requires_grad=True)
        symlog(x).sum().backward()
        torch.testing.assert_close(x.grad, torch.ones(3))
        y = torch.zeros(2, requires_grad=True)
        signed_hyperbolic(y, 0.25).sum().backward()
        torch.testing.assert_close(y.grad, torch.full((2,), 0.75))

    @pytest.mark.parametrize("epsilon", [1e-3, 0.1])
    def test_signed_hyperbolic_pair(self, epsilon):
        x = torch.tensor([-100.0, -0.3, 0.0, 2.0, 1e5], dtype=torch.float64)
        expected = torch.sign(x) * (torch.sqrt(x.abs() + 1) - 1) + epsilon * x
        torch.testing.assert_close(signed_hyperbolic(x, epsilon), expected)
        torch.testing.assert_close(signed_parabolic(expected, epsilon), x)

    def test_modules_and_compose(self):
        x = torch.tensor([-100.0, 0.0, 100.0])
        compose = ComposeValueTransform(SignedHyperbolicValueTransform(), SymLogValueTransform())
        torch.testing.assert_close(compose(x), symlog(signed_hyperbolic(x)))
        torch.testing.assert_close(compose.inverse(compose(x)), x, rtol=1e-5, atol=1e-4)
        assert torch.equal(IdentityValueTransform().inverse(x), x)
        with pytest.raises(TypeError, match="ValueTransform instances, got Identity"):
            ComposeValueTransform(torch.nn.Identity())
        with pytest.raises(ValueError, match="at least one"):
            ComposeValueTransform()
        with pytest.raises(ValueError, match="epsilon must be positive, got 0"):
            SignedHyperbolicValueTransform(0)
        with pytest.raises(TypeError):
            ValueTransform()


class TestTwoHot:
    def test_encode_interpolates_and_saturates(self):
        bins = torch.tensor([-1.0, 0.0, 2.0])
        encoded = two_hot_encode(torch.tensor([0.5, -3.0, 5.0, 0.0]), bins)
        expected = torch.tensor(
            [[0.0, 0.75, 0.25], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]]
        )
        torch.testing.assert_close(encoded, expected)

    def test_support_is_symmetric_symexp_grid(self):
        head = SymExpTwoHot(5)
        assert torch.equal(head.bins, -head.bins.flip(0))
        assert head.bins[2] == 0
        torch.testing.assert_close(head.bins, symexp(torch.linspace(-20, 20, 5)))
        even = SymExpTwoHot(4).bins
        torch.testing.assert_close(even, symexp(torch.linspace(-20, 20, 4)))

    def test_decode_is_expectation_and_exact_zero(self):
        head = SymExpTwoHot()
        assert torch.equal(head(torch.zeros(2, 255)), torch.zeros(2, 1))
        bins = torch.tensor([-1.0, 0.0, 3.0])
        logits = torch.tensor([[0.3, -1.0, 2.0]])
        expected = (torch.softmax(logits, -1) * bins).sum(-1)
        torch.testing.assert_close(two_hot_decode(logits, bins), expected)
        values = torch.tensor([-300.0, -0.5, 0.0, 7.0, 1e4])
        torch.testing.assert_close(
            head.decode(head.encode(values).log()), values, rtol=1e-4, atol=1e-3
        )

    def test_cross_entropy_by_hand(self):
        bins = torch.tensor([-1.0, 0.0, 1.0])
        logits = torch.tensor([[1.0, 2.0, 0.5], [0.0, 0.0, 0.0]])
        target = torch.tensor([[0.25], [-1.0]])
        log_p = torch.log_softmax(logits, -1)
        expected = torch.stack([-(0.75 * log_p[0, 1] + 0.25 * log_p[0, 2]), -log_p[1, 0]])
        torch.testing.assert_close(two_hot_cross_entropy(logits, target, bins), expected)

    def test_bad_shapes_name_them(self):
        bins = torch.tensor([-1.0, 0.0, 1.0])
        with pytest.raises(ValueError, match=r"4 categories \(shape \(2, 4\)\).*3 bins"):
            two_hot_decode(torch.zeros(2, 4), bins)
        with pytest.raises(ValueError, match=r"target has shape \(3,\), expected \(2,\)"):
            two_hot_cross_entropy(torch.zeros(2, 3), torch.zeros(3), bins)
        with pytest.raises(ValueError, match=r"one-dimensional.*\(2, 2\)"):
            two_hot_encode(torch.zeros(2), torch.zeros(2, 2))
