"""LLMMaskedCategorical (masks of positions and of tokens) and TorchRL's safetanh /
safeatanh / SafeTanhTransform, against direct computations."""

import pytest
import torch

from rl.modules import LLMMaskedCategorical, SafeTanhTransform, safeatanh, safetanh


def _reference_log_prob(logits, tokens):
    return torch.log_softmax(logits, -1).gather(-1, tokens.clamp_min(0)[..., None])[..., 0]


class TestLLMMaskedCategorical:
    def test_position_mask_log_prob_is_zero_outside_and_exact_inside(self):
        torch.manual_seed(0)
        logits = torch.randn(2, 5, 7, requires_grad=True)
        mask = torch.tensor([[True, True, False, True, False], [False, True, True, True, True]])
        tokens = torch.randint(0, 7, (2, 5))
        tokens[1, 3] = -100  # ignored even where the mask holds
        dist = LLMMaskedCategorical(logits, mask)
        lp = dist.log_prob(tokens)
        want = _reference_log_prob(logits.detach(), tokens)
        keep = mask & (tokens != -100)
        assert torch.allclose(lp[keep], want[keep])
        assert (lp[~keep] == 0).all()
        lp.sum().backward()
        # positions outside the mask pass no gradient to their logits
        assert (logits.grad[~keep] == 0).all() and (logits.grad[keep] != 0).any()
        # masked logits are built only for sampling / mode / entropy
        assert dist._masked_logits is None

    def test_token_mask_log_prob_renormalises_and_forbids(self):
        logits = torch.zeros(3, 4)
        mask = torch.tensor([[True, True, False, False], [True] * 4, [False, True, True, True]])
        dist = LLMMaskedCategorical(logits, mask)
        lp = dist.log_prob(torch.tensor([1, 3, 0]))
        assert torch.allclose(lp[:2], torch.log(torch.tensor([0.5, 0.25])))
        assert lp[2] == float("-inf")
        assert dist.log_prob(torch.tensor([-100, 0, 1]))[0] == 0

    def test_sample_mode_entropy_respect_the_mask(self):
        torch.manual_seed(1)
        logits = torch.randn(4, 6, 5)
        logits[..., 0] = 10.0  # the favourite token is masked at odd positions
        mask = torch.ones(4, 6, 5, dtype=torch.bool)
        mask[:, 1::2, 0] = False
        dist = LLMMaskedCategorical(logits, mask)
        samples = dist.sample((50,))
        assert samples.shape == (50, 4, 6)
        assert not (samples[:, :, 1::2] == 0).any()
        assert (dist.mode[:, ::2] == 0).all() and not (dist.mode[:, 1::2] == 0).any()
        probs = torch.softmax(logits.masked_fill(~mask, float("-inf")), -1)
        entropy = -(probs * probs.clamp_min(1e-30).log()).sum(-1)
        assert torch.allclose(dist.entropy(), entropy, atol=1e-5)
        dist.clear_cache()
        assert dist._masked_logits is None and dist._masked_dist is None

    def test_position_mask_sampling_draws_any_token_where_valid(self):
        logits = torch.zeros(1, 2, 3)
        dist = LLMMaskedCategorical(logits, torch.tensor([[True, False]]))
        assert dist.position_level_masking
        assert torch.equal(dist.probs, torch.full((1, 2, 3), 1 / 3))
        assert dist.batch_shape == (1, 2) and dist.event_shape == (3,)

    def test_bad_mask_shape_and_dtype_raise(self):
        with pytest.raises(ValueError, match=r"mask has shape \(2, 4\).*\(2, 3\).*\(2, 3, 5\)"):
            LLMMaskedCategorical(torch.zeros(2, 3, 5), torch.ones(2, 4, dtype=torch.bool))
        with pytest.raises(TypeError, match="boolean"):
            LLMMaskedCategorical(torch.zeros(2, 3, 5), torch.ones(2, 3))


class TestSafeTanh:
    def test_values_are_clamped_by_eps(self):
        x = torch.tensor([0.0, 0.5, 30.0, -30.0], dtype=torch.double)
        y = safetanh(x, 1e-6)
        assert torch.allclose(y[:2], x[:2].tanh())
        assert y[2] == 1 - 1e-6 and y[3] == -(1 - 1e-6)
        assert torch.isfinite(safeatanh(torch.tensor([1.0, -1.0]), 1e-6)).all()

    @pytest.mark.parametrize("use_vmap", [False, True])
    def test_atanh_of_tanh_has_unit_gradient_even_when_saturated(self, use_vmap):
        x = (torch.linspace(-20, 20, 41, dtype=torch.double)).requires_grad_(True)
        if use_vmap:
            xp = torch.vmap(safeatanh, (0, None))(torch.vmap(safetanh, (0, None))(x, 1e-6), 1e-6)
        else:
            xp = safeatanh(safetanh(x, 1e-6), 1e-6)
        xp.sum().backward()
        assert torch.allclose(x.grad, torch.ones_like(x))

    def test_gradient_of_tanh_where_unsaturated(self):
        x = torch.randn(50, requires_grad=True)
        (g,) = torch.autograd.grad(safetanh(x).sum(), x)
        assert torch.allclose(g, 1 - x.detach().tanh() ** 2)

    @pytest.mark.parametrize("dtype", [torch.float, torch.double])
    def test_transform_round_trip_is_finite(self, dtype):
        t = SafeTanhTransform()
        big = torch.tensor([1e6, -1e6, 3.0], dtype=dtype)
        y = t(big)
        assert torch.isfinite(y).all() and (y.abs() < 1).all()
        back = t.inv(torch.tensor([1.0, -1.0], dtype=dtype))
        assert torch.isfinite(back).all() and (back.sign() == torch.tensor([1.0, -1.0])).all()
        assert torch.allclose(t.inv(y)[2], big[2].to(dtype), atol=1e-4)


def test_tanh_delta_as_a_transformed_delta():
    from rl.modules import TanhDelta

    x = torch.randn(100, 4, dtype=torch.double)
    d = TanhDelta(x, -0.5, 1.0, atol=1e-4, rtol=1e-4)
    back = d.transforms[0].inv(d.mode)
    assert torch.allclose(back, x, atol=1e-6)
    assert d.base_dist._is_equal(back).all() and d.base_dist.batch_shape == (100,)
    assert torch.allclose(d.transforms[0](x), d.mode)


def test_truncated_normal_device_and_tanh_module_non_trivial():
    from rl.modules import TanhModule, TruncatedNormal

    assert TruncatedNormal(torch.zeros(3), torch.ones(3)).device == torch.device("cpu")
    mod = TanhModule(in_keys=["a", "b"], out_keys=["a", "b"], low=-2.0, high=3.0)
    assert mod.non_trivial == {"a": True, "b": True}
    assert TanhModule(in_keys=["a"]).non_trivial == {"a": False}
