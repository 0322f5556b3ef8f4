"""Tests of rl.modules distributions against torch.distributions references."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from torch import distributions as D

from rl.core import ExplorationType, set_exploration_type
from rl.modules import (
    Delta,
    IndependentNormal,
    MaskedCategorical,
    MaskedOneHotCategorical,
    OneHotCategorical,
    OneHotOrdinal,
    Ordinal,
    ProbabilisticTensorDictModule,
    ReparamGradientStrategy,
    TanhDelta,
    TanhNormal,
    TruncatedNormal,
)

BATCHES = [(), (5,), (4, 3)]


def _tanh_reference(loc, scale, low, high):
    """TransformedDistribution(Normal, [Tanh, affine]) with the last dim as the event."""
    base = D.Independent(D.Normal(loc, scale), 1)
    transforms = [
        D.TanhTransform(),
        D.AffineTransform(loc=(high + low) / 2, scale=(high - low) / 2),
    ]
    return D.TransformedDistribution(base, transforms)


class TestTanhNormal:
    @pytest.mark.parametrize("batch", BATCHES)
    @pytest.mark.parametrize("bounds", [(-1.0, 1.0), (-2.0, 3.0)])
    def test_log_prob_matches_transformed_normal(self, batch, bounds):
        torch.manual_seed(0)
        low, high = (torch.tensor(b) for b in bounds)
        loc = torch.randn(*batch, 3)
        scale = torch.rand(*batch, 3) + 0.2
        dist = TanhNormal(loc, scale, low=low, high=high)
        ref = _tanh_reference(loc, scale, low, high)
        value = ref.sample((7,))
        # away from the bounds, where the reference is accurate
        value = value.clamp(low + 0.01 * (high - low), high - 0.01 * (high - low))
        torch.testing.assert_close(dist.log_prob(value), ref.log_prob(value))
        assert dist.log_prob(value).shape == (7, *batch)
        assert dist.batch_shape == batch and dist.event_shape == (3,)

    def test_literal_log_prob_from_torchrl(self):
        # TorchRL 0.14.1: TanhNormal(loc, scale, low=-2, high=3).log_prob(value)
        loc = torch.tensor([[0.3, -1.2], [2.0, 0.1]])
        scale = torch.tensor([[0.5, 1.5], [0.2, 3.0]])
        value = torch.tensor([[0.7, -1.9], [2.9, 0.4]])
        dist = TanhNormal(loc, scale, low=-2.0, high=3.0)
        torch.testing.assert_close(
            dist.log_prob(value), torch.tensor(TORCHRL_TANH_LP), rtol=1e-5, atol=1e-5
        )
        at_bounds = torch.tensor([[3.0, -2.0], [-2.0, 3.0]])
        torch.testing.assert_close(
            dist.log_prob(at_bounds), torch.tensor(TORCHRL_TANH_LP_BOUNDS), rtol=1e-5, atol=1e-4
        )

    @pytest.mark.parametrize("bound", [-1.0, 1.0])
    def test_finite_at_bounds(self, bound):
        dist = TanhNormal(torch.zeros(4, 2), torch.ones(4, 2))
        lp = dist.log_prob(torch.full((4, 2), bound))
        assert lp.isfinite().all()

    @pytest.mark.parametrize("loc", [1e4, -1e4])
    @pytest.mark.parametrize("scale", [1e-6, 1e4])
    def test_finite_for_extreme_parameters(self, loc, scale):
        dist = TanhNormal(torch.full((3, 2), loc), torch.full((3, 2), scale))
        action = dist.rsample()
        assert action.isfinite().all()
        assert (action.abs() <= 1).all()
        for value in (action, torch.ones(3, 2), -torch.ones(3, 2), torch.zeros(3, 2)):
            assert dist.log_prob(value).isfinite().all()
        _, lp = dist.rsample_and_log_prob()
        assert lp.isfinite().all()

    def test_rsample_gradients(self):
        loc = torch.zeros(5, 2, requires_grad=True)
        scale = torch.ones(5, 2, requires_grad=True)
        dist = TanhNormal(loc, scale, low=-2.0, high=2.0)
        action = dist.rsample()
        (action.sum() + dist.log_prob(action).sum()).backward()
        assert loc.grad is not None and loc.grad.abs().sum() > 0
        assert scale.grad is not None and scale.grad.abs().sum() > 0

    def test_rsample_and_log_prob_consistent(self):
        torch.manual_seed(1)
        dist = TanhNormal(torch.randn(6, 3), torch.rand(6, 3) + 0.5)
        action, lp = dist.rsample_and_log_prob((2,))
        assert action.shape == (2, 6, 3) and lp.shape == (2, 6)
        torch.testing.assert_close(lp, dist.log_prob(action), rtol=1e-4, atol=1e-4)

    def test_deterministic_sample_and_support(self):
        loc = torch.tensor([[0.5, -0.3]])
        dist = TanhNormal(loc, torch.ones(1, 2), low=0.0, high=4.0)
        torch.testing.assert_close(dist.deterministic_sample, 2.0 + 2.0 * loc.tanh())
        samples = dist.sample((1000,))
        assert ((samples >= 0) & (samples <= 4)).all()

    def test_tanh_loc(self):
        loc = torch.tensor([[20.0, -20.0]])
        dist = TanhNormal(loc, torch.ones(1, 2), tanh_loc=True, upscale=5.0)
        torch.testing.assert_close(dist.loc, 5.0 * (loc / 5.0).tanh())

    def test_entropy_estimate(self):
        torch.manual_seed(0)
        loc, scale = torch.zeros(2), torch.full((2,), 0.3)
        dist = TanhNormal(loc, scale)
        ref = _tanh_reference(loc, scale, torch.tensor(-1.0), torch.tensor(1.0))
        expected = -ref.log_prob(ref.sample((20000,)).clamp(-0.999999, 0.999999)).mean()
        torch.testing.assert_close(dist.entropy(num_samples=20000), expected, rtol=0.02, atol=0.02)
        assert dist.entropy().shape == ()

    def test_mean_raises(self):
        dist = TanhNormal(torch.zeros(2), torch.ones(2))
        with pytest.raises(NotImplementedError, match="no closed-form mean"):
            _ = dist.mean

    @pytest.mark.parametrize("loc,scale", [(0.3, 0.2), (0.3, 1.0), (-0.2, 3.0), (0.4, 0.9)])
    def test_mode_is_density_argmax(self, loc, scale):
        dist = TanhNormal(torch.tensor([loc]), torch.tensor([scale]), low=-2.0, high=3.0)
        grid = torch.linspace(-2 + 1e-5, 3 - 1e-5, 100001).unsqueeze(-1)
        best = grid[dist.log_prob(grid).argmax()]
        torch.testing.assert_close(dist.mode, best, atol=1e-3, rtol=0)

    def test_low_high_error(self):
        with pytest.raises(ValueError, match="low=1.0 and high=-1.0"):
            TanhNormal(torch.zeros(2), torch.ones(2), low=1.0, high=-1.0)
        with pytest.raises(ValueError, match="high > low"):
            TanhNormal(torch.zeros(2), torch.ones(2), low=1.0, high=1.0)

    def test_shape_error(self):
        with pytest.raises(ValueError, match=r"loc of shape \(3, 2\), scale of shape \(4,\)"):
            TanhNormal(torch.zeros(3, 2), torch.ones(4))

    def test_callable_scale(self):
        dist = TanhNormal(torch.zeros(3, 4), scale=torch.ones_like)
        torch.testing.assert_close(dist.scale, torch.ones(3, 4))

    def test_vmap_log_prob(self):
        loc, scale = torch.randn(4, 3, 2), torch.rand(4, 3, 2) + 0.1
        value = torch.rand(4, 3, 2) * 1.8 - 0.9

        def f(loc, scale, value):
            return TanhNormal(loc, scale).log_prob(value)

        torch.testing.assert_close(
            torch.vmap(f)(loc, scale, value), TanhNormal(loc, scale).log_prob(value)
        )


# Numbers from TorchRL 0.14.1 (~/torchrl-ref) for test_literal_log_prob_from_torchrl
TORCHRL_TANH_LP = [-1.0507135391235352, -0.6497591733932495]
TORCHRL_TANH_LP_BOUNDS = [-81.83419036865234, -1048.786376953125]


class TestIndependentNormal:
    @pytest.mark.parametrize("batch", BATCHES)
    def test_against_torch(self, batch):
        loc, scale = torch.randn(*batch, 3), torch.rand(*batch, 3) + 0.1
        dist = IndependentNormal(loc, scale)
        ref = D.Independent(D.Normal(loc, scale), 1)
        value = ref.sample()
        torch.testing.assert_close(dist.log_prob(value), ref.log_prob(value))
        torch.testing.assert_close(dist.entropy(), ref.entropy())
        torch.testing.assert_close(dist.deterministic_sample, loc)
        torch.testing.assert_close(dist.mode, loc)

    def test_tanh_loc_and_shape_error(self):
        dist = IndependentNormal(torch.full((2,), 100.0), 1.0, tanh_loc=True, upscale=2.0)
        torch.testing.assert_close(dist.mean, torch.full((2,), 2.0 * math.tanh(50.0)))
        with pytest.raises(ValueError, match="IndependentNormal got parameters"):
            IndependentNormal(torch.zeros(3), torch.ones(2))


class TestTruncatedNormal:
    def test_log_prob_inside_outside(self):
        loc, scale = torch.zeros(4, 2), torch.ones(4, 2)
        dist = TruncatedNormal(loc, scale, low=-1.0, high=1.0)
        value = torch.rand(4, 2) * 1.6 - 0.8
        normal = D.Normal(loc, scale)
        z = normal.cdf(torch.tensor(1.0)) - normal.cdf(torch.tensor(-1.0))
        expected = (normal.log_prob(value) - z.log()).sum(-1)
        torch.testing.assert_close(dist.log_prob(value), expected)
        outside = value.clone()
        outside[0, 0] = 1.5
        assert dist.log_prob(outside)[0] == -math.inf
        assert dist.log_prob(torch.ones(4, 2)).isfinite().all()
        samples = dist.sample((500,))
        assert ((samples >= -1) & (samples <= 1)).all()
        assert dist.entropy().shape == (4,)
        torch.testing.assert_close(dist.deterministic_sample, torch.zeros(4, 2))

    def test_literal_values_from_torchrl(self):
        # TorchRL 0.14.1: TruncatedNormal(loc, scale, low=-1, high=1), values on the bounds
        loc = torch.tensor([[0.3, -0.5], [2.0, 0.0]])
        scale = torch.tensor([[0.5, 1.0], [0.3, 2.0]])
        dist = TruncatedNormal(loc, scale, low=-1.0, high=1.0)
        value = torch.tensor([[1.0, -1.0], [1.0, 0.2]])
        torch.testing.assert_close(
            dist.log_prob(value), torch.tensor([-1.6898831129074097, 1.8285369873046875])
        )
        torch.testing.assert_close(
            dist.mean,
            torch.tensor([[0.22557011246681213, -0.1437271237373352], [0.9191247224807739, 0.0]]),
        )
        torch.testing.assert_close(
            dist.entropy(), torch.tensor([1.1545708179473877, -0.8439455032348633])
        )

    def test_errors(self):
        with pytest.raises(ValueError, match="low=2.0 and high=1.0"):
            TruncatedNormal(torch.zeros(2), torch.ones(2), low=2.0, high=1.0)


class TestDeltas:
    def test_delta_is_tensordicts(self):
        import tensordict.nn.distributions as tdd

        assert Delta is tdd.Delta
        dist = Delta(torch.tensor([1.0, 2.0]))
        assert dist.log_prob(torch.tensor([1.0, 2.0])) == math.inf
        assert dist.log_prob(torch.tensor([1.0, 3.0])) == -math.inf

    def test_tanh_delta(self):
        param = torch.randn(3, 2, requires_grad=True)
        dist = TanhDelta(param, low=-2.0, high=4.0)
        expected = 1.0 + 3.0 * param.tanh()
        torch.testing.assert_close(dist.deterministic_sample, expected)
        torch.testing.assert_close(dist.sample(), expected.detach())
        assert dist.sample((5,)).shape == (5, 3, 2)
        assert (dist.log_prob(expected.detach()) == math.inf).all()
        assert (dist.log_prob(expected.detach() + 0.1) == -math.inf).all()
        dist.rsample().sum().backward()
        assert param.grad.abs().sum() > 0
        assert (dist.entropy() == -math.inf).all() and dist.entropy().shape == (3,)
        with pytest.raises(ValueError, match="low=1.0 and high=0.0"):
            TanhDelta(param, low=1.0, high=0.0)


class TestOneHotCategorical:
    @pytest.mark.parametrize("batch", BATCHES)
    def test_against_torch(self, batch):
        logits = torch.randn(*batch, 4)
        dist = OneHotCategorical(logits=logits)
        ref = D.OneHotCategorical(logits=logits)
        value = ref.sample((3,)).long()
        torch.testing.assert_close(dist.log_prob(value), ref.log_prob(value.float()))
        torch.testing.assert_close(dist.entropy(), ref.entropy())
        sample = dist.sample((6,))
        assert sample.shape == (6, *batch, 4) and sample.dtype == torch.long
        assert (sample.sum(-1) == 1).all()
        torch.testing.assert_close(
            dist.deterministic_sample, torch.nn.functional.one_hot(logits.argmax(-1), 4)
        )

    @pytest.mark.parametrize("method", list(ReparamGradientStrategy))
    def test_rsample_gradients(self, method):
        logits = torch.randn(5, 3, requires_grad=True)
        dist = OneHotCategorical(logits=logits, grad_method=method)
        sample = dist.rsample()
        assert ((sample == 0) | (sample == 1)).all() and (sample.sum(-1) == 1).all()
        (sample * torch.arange(3.0)).sum().backward()
        assert logits.grad is not None and logits.grad.abs().sum() > 0

    def test_errors(self):
        with pytest.raises(
            ValueError, match="Either `probs` or `logits` must be specified, but not both"
        ):
            OneHotCategorical()
        dist = OneHotCategorical(logits=torch.zeros(4))
        with pytest.raises(ValueError, match="4 categories.*got shape \\(3,\\)"):
            dist.log_prob(torch.tensor([0, 1, 0]))


class TestMaskedCategorical:
    @pytest.mark.parametrize("batch", BATCHES)
    def test_dense_mask_against_renormalized_categorical(self, batch):
        torch.manual_seed(0)
        logits = torch.randn(*batch, 5)
        mask = torch.rand(*batch, 5) > 0.4
        mask[..., 0] = True
        dist = MaskedCategorical(logits=logits, mask=mask)
        ref = D.Categorical(logits=logits.masked_fill(~mask, -math.inf))
        value = ref.sample((4,))
        torch.testing.assert_close(dist.log_prob(value), ref.log_prob(value))
        torch.testing.assert_close(dist.entropy(), ref.entropy())
        for category in range(5):
            lp = dist.log_prob(torch.full(batch, category))
            masked = ~mask[..., category]
            assert (lp[masked] == -math.inf).all()
            assert lp[~masked].isfinite().all()
        samples = dist.sample((200,))
        assert mask.expand(200, *mask.shape).gather(-1, samples.unsqueeze(-1)).all()
        torch.testing.assert_close(
            dist.deterministic_sample, logits.masked_fill(~mask, -math.inf).argmax(-1)
        )

    def test_literal_log_prob_from_torchrl(self):
        # TorchRL 0.14.1: MaskedCategorical(logits, mask=mask).log_prob(value)
        logits = torch.tensor([[0.5, -1.0, 2.0, 0.0], [1.0, 1.0, -0.5, 3.0]])
        mask = torch.tensor([[True, False, True, True], [False, True, True, False]])
        dist = MaskedCategorical(logits=logits, mask=mask)
        for value, expected in zip(([2, 1], [1, 0], [3, 2]), TORCHRL_MASKED_LP):
            torch.testing.assert_close(
                dist.log_prob(torch.tensor(value)), torch.tensor(expected), rtol=1e-5, atol=1e-5
            )
        torch.testing.assert_close(
            dist.entropy(), torch.tensor([0.7519804239273071, 0.4750515818595886])
        )
        sparse = MaskedCategorical(logits=logits, indices=torch.tensor([[0, 3], [1, 2]]))
        torch.testing.assert_close(
            sparse.log_prob(torch.tensor([3, 1])),
            torch.tensor([-0.9740769863128662, -0.2014133334159851]),
        )

    def test_sparse_indices(self):
        logits = torch.tensor([[0.0, 1.0, 2.0, 3.0], [3.0, 2.0, 1.0, 0.0]])
        indices = torch.tensor([[1, 3], [0, 2]])
        dist = MaskedCategorical(logits=logits, indices=indices)
        dense = MaskedCategorical(
            logits=logits,
            mask=torch.tensor([[False, True, False, True], [True, False, True, False]]),
        )
        value = torch.tensor([[3, 0], [1, 2]])
        torch.testing.assert_close(dist.log_prob(value), dense.log_prob(value))
        torch.testing.assert_close(dist.mode, torch.tensor([3, 0]))
        samples = dist.sample((100,))
        assert set(samples[:, 0].tolist()) <= {1, 3} and set(samples[:, 1].tolist()) <= {0, 2}
        torch.testing.assert_close(dist.entropy(), dense.entropy())

    def test_padding_value_and_finite_neg_inf(self):
        logits = torch.tensor([1.0, 2.0, 3.0])
        dist = MaskedCategorical(logits=logits, indices=torch.tensor([2, -1]), padding_value=-1)
        assert dist.log_prob(torch.tensor(2)) == 0.0
        assert dist.log_prob(torch.tensor(0)) == -math.inf
        dist = MaskedCategorical(
            logits=logits, mask=torch.tensor([True, False, True]), neg_inf=-1e6
        )
        # as TorchRL: the masked logit is neg_inf, then normalized
        lp = dist.log_prob(torch.tensor(1))
        assert lp.isfinite() and lp < -1e6 + 1

    def test_probs(self):
        probs = torch.tensor([0.2, 0.3, 0.5])
        dist = MaskedCategorical(probs=probs, mask=torch.tensor([True, False, True]))
        torch.testing.assert_close(dist.probs, torch.tensor([0.2, 0.0, 0.5]) / 0.7)

    def test_errors(self):
        with pytest.raises(ValueError, match="mask or indices"):
            MaskedCategorical(logits=torch.zeros(3))
        with pytest.raises(ValueError, match=r"mask of shape \(4,\) does not broadcast"):
            MaskedCategorical(logits=torch.zeros(2, 3), mask=torch.ones(4, dtype=torch.bool))
        with pytest.raises(TypeError, match="mask must be boolean"):
            MaskedCategorical(logits=torch.zeros(3), mask=torch.ones(3))
        dist = MaskedCategorical(logits=torch.zeros(3), indices=torch.tensor([0, 1]))
        with pytest.raises(ValueError, match="sparse"):
            _ = dist.mask


# Numbers from TorchRL 0.14.1 (~/torchrl-ref) for test_literal_log_prob_from_torchrl
TORCHRL_MASKED_LP = [
    [-0.3063558042049408, -0.2014133334159851],
    [-math.inf, -math.inf],
    [-2.3063557147979736, -1.7014133930206299],
]


class TestMaskedOneHotCategorical:
    def test_one_hot_and_rsample(self):
        logits = torch.randn(4, 3, requires_grad=True)
        mask = torch.tensor([True, False, True]).expand(4, 3)
        dist = MaskedOneHotCategorical(logits=logits, mask=mask)
        sample = dist.sample((10,))
        assert sample.shape == (10, 4, 3) and (sample[..., 1] == 0).all()
        ref = MaskedCategorical(logits=logits, mask=mask)
        torch.testing.assert_close(dist.log_prob(sample), ref.log_prob(sample.argmax(-1)))
        assert (dist.log_prob(torch.tensor([0, 1, 0]).expand(4, 3)) == -math.inf).all()
        rsample = dist.rsample()
        assert (rsample[..., 1] == 0).all()
        (rsample * torch.arange(3.0)).sum().backward()
        assert logits.grad.abs().sum() > 0
        assert dist.mode.shape == (4, 3)

    def test_sparse_one_hot(self):
        dist = MaskedOneHotCategorical(
            logits=torch.zeros(5),
            indices=torch.tensor([1, 4]),
            grad_method=ReparamGradientStrategy.RelaxedOneHot,
        )
        sample = dist.rsample((50,))
        assert sample.shape == (50, 5)
        assert (sample[:, [0, 2, 3]] == 0).all()


class TestOrdinal:
    def test_logits_formula(self):
        scores = torch.randn(3, 4)
        dist = Ordinal(scores)
        s = torch.sigmoid(scores)
        probs = []
        for k in range(4):
            p = torch.ones(3)
            for j in range(4):
                p = p * (s[:, j] if j <= k else 1 - s[:, j])
            probs.append(p)
        probs = torch.stack(probs, -1)
        torch.testing.assert_close(dist.probs, probs / probs.sum(-1, keepdim=True))
        one_hot = OneHotOrdinal(scores)
        torch.testing.assert_close(one_hot.probs, dist.probs)
        assert one_hot.sample().shape == (3, 4)
        torch.testing.assert_close(dist.deterministic_sample, dist.probs.argmax(-1))


def test_masked_categorical_in_probabilistic_module():
    module = ProbabilisticTensorDictModule(
        in_keys={"logits": "logits", "mask": "action_mask"},
        out_keys=["action"],
        distribution_class=MaskedCategorical,
        return_log_prob=True,
    )
    logits = torch.tensor([[5.0, 0.0, 1.0], [0.0, 0.0, 9.0]])
    mask = torch.tensor([[False, True, True], [True, True, False]])
    td = TensorDict({"logits": logits, "action_mask": mask}, batch_size=[2])
    with set_exploration_type(ExplorationType.RANDOM):
        out = module(td.clone())
    assert mask.gather(-1, out["action"].unsqueeze(-1)).all()
    ref = D.Categorical(logits=logits.masked_fill(~mask, -math.inf))
    torch.testing.assert_close(out["action_log_prob"], ref.log_prob(out["action"]))
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        torch.testing.assert_close(module(td.clone())["action"], torch.tensor([2, 0]))


@pytest.mark.parametrize(
    "dist_class,params,expected",
    [
        (
            TanhNormal,
            {"loc": torch.tensor([0.3]), "scale": torch.ones(1)},
            torch.tensor([0.3]).tanh(),
        ),
        (
            IndependentNormal,
            {"loc": torch.tensor([0.3]), "scale": torch.ones(1)},
            torch.tensor([0.3]),
        ),
        (OneHotCategorical, {"logits": torch.tensor([0.0, 1.0])}, torch.tensor([0, 1])),
        (TanhDelta, {"param": torch.tensor([0.3])}, torch.tensor([0.3]).tanh()),
    ],
)
def test_deterministic_interaction_uses_deterministic_sample(dist_class, params, expected):
    module = ProbabilisticTensorDictModule(
        in_keys=list(params), out_keys=["action"], distribution_class=dist_class
    )
    td = TensorDict(params)
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        out = module(td.clone())["action"]
    torch.testing.assert_close(out.to(expected.dtype), expected)


def test_compiled_fullgraph_matches_eager():
    def f(loc, scale, value, logits, mask):
        tanh = TanhNormal(loc, scale, low=-2.0, high=2.0)
        masked = MaskedCategorical(logits=logits, mask=mask)
        return (
            tanh.log_prob(value),
            tanh.deterministic_sample,
            masked.log_prob(masked.deterministic_sample),
            masked.entropy(),
        )

    torch.manual_seed(0)
    args = (
        torch.randn(4, 3),
        torch.rand(4, 3) + 0.1,
        torch.rand(4, 3) * 3 - 1.5,
        torch.randn(4, 5),
        torch.tensor([True, False, True, True, False]).expand(4, 5),
    )
    compiled = torch.compile(f, fullgraph=True, backend="eager")
    for got, expected in zip(compiled(*args), f(*args)):
        torch.testing.assert_close(got, expected)


def test_safe_atanh_on_data_and_on_a_graph_agree():
    """A tensor without grad takes the plain clamp; one with grad the straight-through
    clamp: the same values, and a finite unit-clamped gradient at +-1."""
    from rl.modules.distributions._utils import safe_atanh

    y = torch.tensor([-1.0, -0.5, 0.0, 0.999, 1.0])
    data = safe_atanh(y)
    leaf = y.clone().requires_grad_(True)
    graph = safe_atanh(leaf)
    assert torch.equal(data, graph.detach())
    assert torch.isfinite(data).all()
    graph.sum().backward()
    assert torch.isfinite(leaf.grad).all()
    torch.testing.assert_close(leaf.grad[1:4], 1 / (1 - y[1:4] ** 2))
