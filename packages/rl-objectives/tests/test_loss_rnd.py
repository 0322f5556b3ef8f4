"""RNDLoss: the predictor's distillation error, against a plain computation and TorchRL 0.14.1.

The reference numbers were computed with ``torchrl==0.14.1`` (``torchrl.objectives.RNDLoss``)
on the same weights and observations as built here (deterministic, no RNG).
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rl.objectives import RNDLoss


def _net(in_f: int, hidden: int, out: int, offset: float) -> nn.Sequential:
    """A two-layer MLP with fixed sinusoidal weights (the same in TorchRL's run)."""
    net = nn.Sequential(nn.Linear(in_f, hidden), nn.ReLU(), nn.Linear(hidden, out))
    with torch.no_grad():
        for i, p in enumerate(net.parameters()):
            k = torch.arange(p.numel(), dtype=torch.float32)
            p.copy_((torch.sin(k * 0.37 + offset + i) * 0.6).reshape(p.shape))
    return net


def _obs(step: int, n: int = 4, f: int = 3) -> torch.Tensor:
    k = torch.arange(n * f, dtype=torch.float32).reshape(n, f)
    return torch.cos(k * 0.9 + step * 1.3) * (1.0 + step) + 0.5 * step


def _batch() -> TensorDict:
    return TensorDict({"next": {"observation": _obs(5, n=6)}}, [6])


class _Stats:
    """A stand-in for the transform's RunningMeanStd (the statistics TorchRL's
    RNDTransform held after three steps of ``_obs(0..2)``)."""

    mean = torch.tensor([0.27718549966812134, 0.29327183961868286, 0.4658021032810211])
    var = torch.tensor([1.7203608751296997, 2.8233449459075928, 2.9882123470306396])

    def normalize(self, x):
        return (x.float() - self.mean) / self.var.clamp_min(1e-8).sqrt()


# torchrl.objectives.RNDLoss(predictor, target, update_fraction=1.0, ...) on _batch()
TORCHRL_RAW = {
    "mean": 45.78462600708008,
    "sum": 274.707763671875,
    "none": [
        50.334110260009766,
        3.317056655883789,
        118.32357025146484,
        5.428141117095947,
        92.05387878417969,
        5.251029014587402,
    ],
}
TORCHRL_NORMALISED = {  # obs_rms=_Stats (the transform's), obs_clip=2.0
    "mean": 4.8721604347229,
    "sum": 29.23296356201172,
    "none": [
        3.9878852367401123,
        1.7797858715057373,
        10.025971412658691,
        2.5713887214660645,
        9.362446784973145,
        1.505486249923706,
    ],
}
TORCHRL_MASKED = {  # ("collector", "mask") = [1, 0, 1, 1, 0, 1]
    "mean": 44.83421325683594,
    "sum": 179.33685302734375,
    "none": [
        50.334110260009766,
        0.0,
        118.32357025146484,
        5.428141117095947,
        0.0,
        5.251029014587402,
    ],
}
TORCHRL_GRAD_FIRST_BIAS = [
    -2.8474197387695312,
    -0.8420988321304321,
    0.20454195141792297,
    0.43878084421157837,
    0.6477220058441162,
    5.174166202545166,
    5.714268684387207,
    5.051939487457275,
]


def _loss(**kwargs) -> RNDLoss:
    return RNDLoss(_net(3, 8, 5, 1.0), _net(3, 8, 5, 0.0), **kwargs)


class TestRNDLoss:
    @pytest.mark.parametrize(
        "device",
        [
            "cpu",
            pytest.param(
                "cuda",
                marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA"),
            ),
        ],
    )
    def test_device(self, device):
        loss = _loss(update_fraction=0.5).to(device)
        out = loss(_batch().to(device))["loss_predictor"]
        assert out.device.type == device and out.shape == ()
        full = _loss(update_fraction=1.0).to(device)(_batch().to(device))["loss_predictor"]
        torch.testing.assert_close(full.cpu(), torch.tensor(TORCHRL_RAW["mean"]))

    def test_per_sample_error_by_hand(self):
        loss = _loss(reduction="none", update_fraction=1.0)
        obs = _batch()["next", "observation"]
        expected = (loss.predictor_network(obs) - loss.target_network(obs)).pow(2).mean(-1)
        out = loss(_batch())["loss_predictor"]
        torch.testing.assert_close(out, expected.detach())
        assert out.shape == (6,)

    @pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
    def test_matches_torchrl(self, reduction):
        out = _loss(reduction=reduction, update_fraction=1.0)(_batch())["loss_predictor"]
        torch.testing.assert_close(out.detach(), torch.tensor(TORCHRL_RAW[reduction]))

    @pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
    def test_observation_normalisation_matches_torchrl(self, reduction):
        loss = _loss(reduction=reduction, update_fraction=1.0, obs_rms=_Stats(), obs_clip=2.0)
        out = loss(_batch())["loss_predictor"]
        torch.testing.assert_close(out.detach(), torch.tensor(TORCHRL_NORMALISED[reduction]))

    def test_clipping_of_normalised_observations(self):
        # obs_clip=2.0 changes the result (some standardised entries exceed 2) ...
        normalised = _Stats().normalize(_batch()["next", "observation"])
        assert normalised.abs().max() > 2.0
        # ... and a clip beyond every entry leaves it unclipped
        wide = _loss(update_fraction=1.0, obs_rms=_Stats(), obs_clip=100.0)
        net_p, net_t = wide.predictor_network, wide.target_network
        expected = (net_p(normalised) - net_t(normalised)).pow(2).mean()
        torch.testing.assert_close(wide(_batch())["loss_predictor"], expected)

    @pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
    def test_collector_mask_matches_torchrl(self, reduction):
        batch = _batch()
        batch["collector", "mask"] = torch.tensor([True, False, True, True, False, True])
        out = _loss(reduction=reduction, update_fraction=1.0)(batch)["loss_predictor"]
        torch.testing.assert_close(out.detach(), torch.tensor(TORCHRL_MASKED[reduction]))

    def test_trailing_singleton_mask_and_bad_mask(self):
        batch = _batch()
        batch["shifted_valid"] = torch.tensor([[True], [False], [True], [True], [False], [True]])
        out = _loss(update_fraction=1.0)(batch)["loss_predictor"]
        torch.testing.assert_close(out, torch.tensor(TORCHRL_MASKED["mean"]))
        batch["shifted_valid"] = torch.ones(6, 2, dtype=torch.bool)
        with pytest.raises(ValueError, match=r"mask 'shifted_valid' has shape \(6, 2\)"):
            _loss(update_fraction=1.0)(batch)

    def test_gradient_matches_torchrl_and_spares_the_target(self):
        loss = _loss(update_fraction=1.0)
        loss(_batch())["loss_predictor"].backward()
        grad = loss.predictor_network[0].bias.grad
        torch.testing.assert_close(grad, torch.tensor(TORCHRL_GRAD_FIRST_BIAS))
        assert all(p.grad is None and not p.requires_grad for p in loss.target_network.parameters())

    @pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
    def test_update_fraction_draws_a_mask(self, reduction):
        full = _loss(reduction="none", update_fraction=1.0)(_batch())["loss_predictor"].detach()
        torch.manual_seed(1)
        keep = torch.rand(6) < 0.5
        loss = _loss(reduction=reduction, update_fraction=0.5)
        torch.manual_seed(1)  # the mask is the loss's first draw
        out = loss(_batch())["loss_predictor"]
        kept = torch.where(keep, full, torch.zeros_like(full))
        expected = {"mean": kept.sum() / keep.sum(), "sum": kept.sum(), "none": kept}[reduction]
        assert 0 < keep.sum() < 6
        torch.testing.assert_close(out.detach(), expected)

    def test_nothing_kept_gives_zero(self):
        out = _loss(update_fraction=0.0)(_batch())["loss_predictor"]
        assert out.item() == 0.0

    def test_time_batch(self):
        batch = TensorDict({"next": {"observation": _obs(1, n=6).reshape(2, 3, 3)}}, [2, 3])
        out = _loss(reduction="none", update_fraction=1.0)(batch)["loss_predictor"]
        assert out.shape == (2, 3)

    def test_set_keys_and_in_keys(self):
        loss = _loss(update_fraction=1.0)
        assert loss.in_keys == [("next", "observation")] and loss.out_keys == ["loss_predictor"]
        loss.set_keys(observation=("next", "pixels_embedding"))
        assert loss.in_keys == [("next", "pixels_embedding")]
        batch = TensorDict({"next": {"pixels_embedding": _obs(5, n=6)}}, [6])
        torch.testing.assert_close(loss(batch)["loss_predictor"], torch.tensor(TORCHRL_RAW["mean"]))

    def test_parameters_are_the_predictors(self):
        loss = _loss()
        trainable = [p for p in loss.parameters() if p.requires_grad]
        assert {id(p) for p in trainable} == {id(p) for p in loss.predictor_network.parameters()}

    def test_missing_observation_is_named(self):
        with pytest.raises(
            KeyError, match=r"needs key \('next', 'observation'\).*set_keys\(observation"
        ):
            _loss()(TensorDict({"observation": torch.zeros(2, 3)}, [2]))

    @pytest.mark.parametrize(
        ("kwargs", "error", "match"),
        [
            ({"update_fraction": 1.5}, ValueError, r"update_fraction must be in \[0, 1\], got 1.5"),
            ({"update_fraction": -0.1}, ValueError, r"got -0.1"),
            ({"reduction": "max"}, ValueError, r"unknown reduction 'max'"),
            ({"obs_clip": 0.0}, ValueError, r"obs_clip must be positive, got 0.0"),
            ({"obs_rms": object()}, TypeError, r"obs_rms must have a normalize\(x\) method"),
        ],
    )
    def test_bad_arguments(self, kwargs, error, match):
        with pytest.raises(error, match=match):
            _loss(**kwargs)

    def test_networks_must_be_modules(self):
        with pytest.raises(TypeError, match="predictor_network must be an nn.Module, got function"):
            RNDLoss(lambda x: x, _net(3, 8, 5, 0.0))
