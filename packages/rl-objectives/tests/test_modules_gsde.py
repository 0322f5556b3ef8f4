"""gSDEModule / LazygSDEModule: the state-dependent noise against a hand computation."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from rl.core import ExplorationType, set_exploration_type
from rl.modules import LazygSDEModule, gSDEModule


class TestgSDEModule:
    def test_action_and_scale_by_hand(self):
        torch.manual_seed(0)
        gsde = gSDEModule(action_dim=2, state_dim=3, sigma_init=0.5)
        sigma = gsde.sigma.detach()
        torch.testing.assert_close(sigma, torch.full((2, 3), 0.5))
        mu, state, eps = torch.randn(4, 2), torch.randn(4, 3), torch.randn(4, 2, 3)
        with set_exploration_type(ExplorationType.RANDOM):
            loc, scale, action, eps_out = gsde(mu, state, eps)
        expected = mu + torch.einsum("bas,bs->ba", sigma * eps, state)
        torch.testing.assert_close(action, expected)
        torch.testing.assert_close(scale, ((sigma * state[:, None, :]) ** 2).sum(-1).sqrt())
        assert loc is mu and eps_out is eps

    def test_deterministic_returns_mean(self):
        gsde = gSDEModule(2, 3)
        mu, state = torch.randn(4, 2), torch.randn(4, 3)
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            _, _, action, eps = gsde(mu, state, None)
        torch.testing.assert_close(action, mu)
        assert (eps == 0).all() and eps.shape == (4, 2, 3)

    def test_zero_placeholder_is_resampled(self):
        gsde = gSDEModule(2, 3)
        with set_exploration_type(ExplorationType.RANDOM):
            _, _, _, eps = gsde(torch.zeros(4, 2), torch.randn(4, 3), torch.zeros(4, 1))
        assert eps.shape == (4, 2, 3) and (eps != 0).any()

    def test_fixed_sigma_buffer(self):
        gsde = gSDEModule(2, 3, sigma_init=0.3, learn_sigma=False)
        assert not list(gsde.parameters())
        torch.testing.assert_close(gsde.sigma, torch.full((2, 3), 0.3))
        gsde = gSDEModule(2, 3)
        assert isinstance(gsde.log_sigma, nn.Parameter)

    def test_bad_shapes(self):
        gsde = gSDEModule(2, 3)
        with pytest.raises(RuntimeError, match="same batch shape"):
            gsde(torch.zeros(4, 2), torch.zeros(5, 3), None)
        with pytest.raises(RuntimeError, match="noise and state"):
            gsde(torch.zeros(4, 2), torch.zeros(4, 3), torch.zeros(5, 2, 3))


class TestLazygSDEModule:
    @pytest.mark.parametrize("sigma_init", [None, 1.5])
    @pytest.mark.parametrize("learn_sigma", [True, False])
    def test_initial_scale_matches_sigma_init(self, sigma_init, learn_sigma):
        torch.manual_seed(0)
        gsde = LazygSDEModule(sigma_init=sigma_init, learn_sigma=learn_sigma)
        state = torch.randn(5000, 6) * 2 - 1
        with set_exploration_type(ExplorationType.RANDOM):
            _, scale, _, _ = gsde(torch.zeros(5000, 3), state, None)
        assert isinstance(gsde, gSDEModule) and gsde.sigma.shape == (3, 6)
        assert abs(scale.mean().item() - (sigma_init or 1.0)) < 0.1
