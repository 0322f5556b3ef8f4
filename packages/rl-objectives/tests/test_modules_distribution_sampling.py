"""sample_and_log_prob / rsample_and_log_prob / composite_entropy, TanhNormal's unit
bounds and get_mode, TorchRL's error messages of the masked categoricals and TanhModule."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import CompositeDistribution, set_composite_lp_aggregate
from torch import distributions as D

from rl.core import Bounded
from rl.modules import (
    MaskedCategorical,
    MaskedOneHotCategorical,
    TanhModule,
    TanhNormal,
    composite_entropy,
    rsample_and_log_prob,
    sample_and_log_prob,
)


def _composite(loc):
    params = TensorDict(
        {
            "squashed": TensorDict(
                {"loc": loc, "scale": torch.full_like(loc, 0.5)}, batch_size=[2]
            ),
            "normal": TensorDict(
                {"loc": torch.zeros(2, 1), "scale": torch.full((2, 1), 2.0)}, batch_size=[2]
            ),
        },
        batch_size=[2],
    )
    return CompositeDistribution(
        params,
        distribution_map={"squashed": TanhNormal, "normal": D.Normal},
        name_map={"squashed": ("agent", "action"), "normal": ("agent", "aux")},
        extra_kwargs={"squashed": {"event_dims": 1}},
    )


class TestSampleAndLogProb:
    def test_tanh_normal_scores_its_pre_tanh_draw(self):
        dist = TanhNormal(torch.tensor([20.0, -20.0]), torch.tensor([0.1, 0.1]), event_dims=0)
        torch.manual_seed(0)
        sample, log_prob = rsample_and_log_prob(dist, (4,))
        torch.manual_seed(0)
        x = dist.loc + torch.randn(4, 2) * dist.scale  # the same pre-tanh draw
        expected = D.Normal(dist.loc, dist.scale).log_prob(x) - 2 * (
            torch.log(torch.tensor(2.0)) - x - torch.nn.functional.softplus(-2 * x)
        )
        torch.testing.assert_close(log_prob, expected)
        assert sample.requires_grad is False and log_prob.isfinite().all()

    def test_fallback_samples_then_scores(self):
        dist = D.Normal(torch.zeros(3), torch.ones(3))
        torch.manual_seed(0)
        sample, log_prob = sample_and_log_prob(dist, (2,))
        torch.testing.assert_close(log_prob, dist.log_prob(sample))
        assert sample.shape == (2, 3)

    @pytest.mark.parametrize("reparameterize", [False, True])
    def test_composite_parts_and_aggregate(self, reparameterize):
        loc = torch.tensor([[0.5], [-0.5]], requires_grad=True)
        dist = _composite(loc)
        helper = rsample_and_log_prob if reparameterize else sample_and_log_prob
        torch.manual_seed(0)
        with set_composite_lp_aggregate(False):
            sample, parts = helper(dist, (3,))
        torch.manual_seed(0)
        with set_composite_lp_aggregate(True):
            same, total = helper(dist, (3,))
        torch.testing.assert_close(sample, same)
        assert sample.batch_size == (3, 2)
        assert sample["agent", "action"].requires_grad is reparameterize
        assert set(parts.keys(True, True)) == {
            ("agent", "action_log_prob"),
            ("agent", "aux_log_prob"),
        }
        # the Normal part has an event dim of 1 left to sum; TanhNormal's is already summed
        expected = parts["agent", "action_log_prob"] + parts["agent", "aux_log_prob"].sum(-1)
        torch.testing.assert_close(total, expected)
        aux = sample["agent", "aux"]
        torch.testing.assert_close(parts["agent", "aux_log_prob"], D.Normal(0.0, 2.0).log_prob(aux))


class TestCompositeEntropy:
    def test_analytic_and_estimated_parts(self):
        dist = _composite(torch.tensor([[0.5], [-0.5]]))
        with set_composite_lp_aggregate(False):
            torch.manual_seed(0)
            parts = composite_entropy(dist, 4)
        # the Normal part is exact: 0.5 log(2 pi e sigma^2)
        exact = 0.5 * torch.log(torch.tensor(2 * torch.pi * torch.e * 4.0))
        torch.testing.assert_close(parts["agent", "aux_entropy"], exact.expand(2, 1))
        # TanhNormal: -mean log_prob over 4 reparameterized draws, same seed
        torch.manual_seed(0)
        _, lp = dist.dists[("agent", "action")].rsample_and_log_prob((4,))
        torch.testing.assert_close(parts["agent", "action_entropy"], -lp.mean(0))
        with set_composite_lp_aggregate(True):
            torch.manual_seed(0)
            total = composite_entropy(dist, 4)
        torch.testing.assert_close(total, -lp.mean(0) + exact)

    def test_no_entropy_no_rsample_raises(self):
        class Counts(D.Distribution):
            has_rsample = False

            def __init__(self):
                super().__init__(torch.Size([2]), validate_args=False)

        params = TensorDict({"c": TensorDict({}, batch_size=[2])}, batch_size=[2])
        dist = CompositeDistribution(params, distribution_map={"c": lambda: Counts()})
        with pytest.raises(NotImplementedError, match="Entropy is not implemented for Counts"):
            composite_entropy(dist)


class TestTanhNormalBounds:
    def test_unit_tensor_bounds_keep_loc_shape(self):
        dist = TanhNormal(
            torch.zeros(5, 1), torch.ones(5, 1), low=-torch.ones(5, 3), high=torch.ones(5, 3)
        )
        assert dist.sample().shape == (5, 1)
        plain = TanhNormal(torch.zeros(5, 1), torch.ones(5, 1))
        x = torch.full((5, 1), 0.3)
        torch.testing.assert_close(dist.log_prob(x), plain.log_prob(x))

    def test_other_tensor_bounds_broadcast(self):
        dist = TanhNormal(
            torch.zeros(5, 1), torch.ones(5, 1), low=-2 * torch.ones(5, 3), high=torch.ones(5, 3)
        )
        assert dist.sample().shape == (5, 3)

    def test_get_mode(self):
        dist = TanhNormal(torch.tensor([0.3, -1.0]), torch.tensor([0.5, 0.5]), event_dims=0)
        mode = dist.get_mode()
        torch.testing.assert_close(mode, dist.mode)
        # the log-density is maximal there: check against a fine grid
        grid = torch.linspace(-0.999, 0.999, 20001)
        lp = dist.log_prob(grid.unsqueeze(-1).expand(-1, 2))
        torch.testing.assert_close(mode, grid[lp.argmax(0)], atol=2e-4, rtol=0)


class TestErrorMessages:
    @pytest.mark.parametrize("cls", [MaskedCategorical, MaskedOneHotCategorical])
    def test_masked_categoricals(self, cls):
        logits, mask = torch.zeros(3), torch.ones(3, dtype=torch.bool)
        with pytest.raises(
            ValueError, match="Either `probs` or `logits` must be specified, but not both"
        ):
            cls(logits=logits, probs=logits.softmax(-1), mask=mask)
        with pytest.raises(
            ValueError, match="exactly one of mask or indices must be provided, got neither"
        ):
            cls(logits=logits)
        with pytest.raises(
            ValueError, match="exactly one of mask or indices must be provided, got both"
        ):
            cls(logits=logits, mask=mask, indices=torch.tensor([0]))

    def test_tanh_module_bounds_against_spec(self):
        spec = Bounded(-1, 1, shape=())
        with pytest.raises(ValueError, match=r"The minimum value \(-2\) provided to TanhModule"):
            TanhModule(in_keys=["act"], low=-2, spec=spec)
        with pytest.raises(ValueError, match=r"The maximum value \(-2\) provided to TanhModule"):
            TanhModule(in_keys=["act"], high=-2, spec=spec)
