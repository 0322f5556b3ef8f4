"""Tests of rl.modules networks: shapes, structure, lazy init, noise, state_dict, vmap."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rl.core import ExplorationType, set_exploration_type
from rl.modules import MLP, NoisyLazyLinear, NoisyLinear, reset_noise


class TestMLP:
    def test_seed_call(self):
        mlp = MLP(num_cells=[32, 64], out_features=4, activation_class=nn.ELU)
        out = mlp(torch.randn(10, 3))
        assert out.shape == (10, 4)
        assert isinstance(mlp[0], nn.Linear) and mlp[0].in_features == 3
        assert [type(m) for m in mlp] == [nn.Linear, nn.ELU, nn.Linear, nn.ELU, nn.Linear]
        assert [mlp[i].out_features for i in (0, 2, 4)] == [32, 64, 4]

    @pytest.mark.parametrize("batch", [(), (5,), (4, 3)])
    def test_forward_matches_plain_layers(self, batch):
        torch.manual_seed(0)
        mlp = MLP(in_features=3, out_features=2, depth=2, num_cells=8)
        x = torch.randn(*batch, 3)
        expected = x
        for layer in (mlp[0], mlp[2]):
            expected = torch.tanh(layer(expected))
        expected = mlp[4](expected)
        torch.testing.assert_close(mlp(x), expected)

    def test_depth_zero_and_defaults(self):
        mlp = MLP(in_features=3, out_features=6)
        assert len(mlp) == 1 and mlp[0].out_features == 6
        mlp = MLP(in_features=3, out_features=6, depth=2)
        assert [mlp[i].out_features for i in (0, 2, 4)] == [32, 32, 6]

    def test_out_shape_and_multiple_inputs(self):
        mlp = MLP(in_features=5, out_features=(2, 3), depth=1, num_cells=4)
        assert mlp(torch.randn(7, 2), torch.randn(7, 3)).shape == (7, 2, 3)

    def test_options(self):
        mlp = MLP(
            in_features=3,
            out_features=2,
            num_cells=[8, 8],
            norm_class=nn.LayerNorm,
            norm_kwargs=[{"normalized_shape": 8}, {"normalized_shape": 8}, {"normalized_shape": 2}],
            dropout=0.5,
            bias_last_layer=False,
            activate_last_layer=True,
            activation_class=nn.LeakyReLU,
            activation_kwargs={"negative_slope": 0.2},
        )
        kinds = [type(m) for m in mlp]
        assert kinds == [
            nn.Linear, nn.Dropout, nn.LayerNorm, nn.LeakyReLU,
            nn.Linear, nn.Dropout, nn.LayerNorm, nn.LeakyReLU,
            nn.Linear, nn.Dropout, nn.LayerNorm, nn.LeakyReLU,
        ]  # fmt: skip
        assert mlp[8].bias is None and mlp[3].negative_slope == 0.2

    def test_single_bias_last_layer(self):
        mlp = MLP(in_features=3, out_features=4, single_bias_last_layer=True)
        assert mlp[0].bias is None and mlp[1].bias.shape == (1,)
        with torch.no_grad():
            mlp[1].bias.fill_(2.0)
        x = torch.randn(3)
        torch.testing.assert_close(mlp(x), mlp[0](x) + 2.0)

    def test_lazy(self):
        mlp = MLP(out_features=2, num_cells=[4])
        assert isinstance(mlp[0], nn.LazyLinear)
        mlp(torch.randn(3, 7))
        assert type(mlp[0]) is nn.Linear and mlp[0].in_features == 7
        noisy = MLP(out_features=2, num_cells=[4], layer_class=NoisyLinear)
        noisy(torch.randn(3, 7))
        assert type(noisy[0]) is NoisyLinear and noisy[0].in_features == 7

    def test_state_dict_round_trip(self):
        mlp = MLP(in_features=3, out_features=2, num_cells=[8, 8])
        other = MLP(in_features=3, out_features=2, num_cells=[8, 8])
        other.load_state_dict(mlp.state_dict())
        x = torch.randn(4, 3)
        torch.testing.assert_close(other(x), mlp(x))
        assert list(mlp.state_dict()) == [
            "0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"
        ]  # fmt: skip

    def test_errors(self):
        with pytest.raises(TypeError, match="activation_class must be an nn.Module class.*'relu'"):
            MLP(out_features=2, num_cells=[4], activation_class="relu")
        with pytest.raises(ValueError, match="out_features"):
            MLP(num_cells=[4])
        with pytest.raises(ValueError, match="depth=3 and num_cells=\\[4, 4\\]"):
            MLP(out_features=2, num_cells=[4, 4], depth=3)
        with pytest.raises(ValueError, match="without a depth"):
            MLP(out_features=2, num_cells=4)
        with pytest.raises(ValueError, match="expected 3"):
            MLP(out_features=2, num_cells=[4, 4], layer_kwargs=[{}])
        with pytest.raises(ValueError, match="incompatible with NoisyLinear"):
            MLP(in_features=2, out_features=2, layer_class=NoisyLinear, single_bias_last_layer=True)

    def test_vmap_ensemble_from_module(self):
        torch.manual_seed(0)
        mlps = [MLP(in_features=3, out_features=2, num_cells=[8]) for _ in range(4)]
        params = torch.stack([TensorDict.from_module(m) for m in mlps])
        x = torch.randn(5, 3)
        template = MLP(in_features=3, out_features=2, num_cells=[8])

        def call(p, x):
            with p.to_module(template):
                return template(x)

        out = torch.vmap(call, (0, None))(params, x)
        assert out.shape == (4, 5, 2)
        for i, mlp in enumerate(mlps):
            torch.testing.assert_close(out[i], mlp(x))


class TestNoisyLinear:
    def test_noise_changes_with_reset_and_not_in_eval(self):
        torch.manual_seed(0)
        layer = NoisyLinear(4, 3)
        x = torch.randn(2, 4)
        y0 = layer(x)
        torch.testing.assert_close(layer(x), y0)
        layer.reset_noise()
        assert not torch.allclose(layer(x), y0)
        layer.eval()
        mean = x @ layer.weight_mu.T + layer.bias_mu
        torch.testing.assert_close(layer(x), mean)
        layer.reset_noise()
        torch.testing.assert_close(layer(x), mean)

    def test_exploration_type(self):
        layer = NoisyLinear(4, 3)
        x = torch.randn(2, 4)
        mean = x @ layer.weight_mu.T + layer.bias_mu
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            torch.testing.assert_close(layer(x), mean)
        layer.eval()
        with set_exploration_type(ExplorationType.RANDOM):
            noisy = x @ (layer.weight_mu + layer.weight_sigma * layer.weight_epsilon).T
            noisy = noisy + layer.bias_mu + layer.bias_sigma * layer.bias_epsilon
            torch.testing.assert_close(layer(x), noisy)

    def test_factorised_noise_and_init(self):
        layer = NoisyLinear(5, 3, std_init=0.4)
        eps = layer.weight_epsilon
        assert torch.linalg.matrix_rank(eps) == 1
        torch.testing.assert_close(
            eps, torch.outer(layer.bias_epsilon, eps[0] / layer.bias_epsilon[0])
        )
        torch.testing.assert_close(layer.weight_sigma, torch.full((3, 5), 0.4 / 5**0.5))
        assert (layer.weight_mu.abs() <= 1 / 5**0.5).all()

    def test_reset_noise_apply_and_lazy(self):
        net = nn.Sequential(NoisyLazyLinear(3), nn.Tanh(), NoisyLinear(3, 2))
        net(torch.randn(1, 4))
        before = [m.weight_epsilon.clone() for m in (net[0], net[2])]
        net.apply(reset_noise)
        after = [m.weight_epsilon for m in (net[0], net[2])]
        assert all(not torch.equal(b, a) for b, a in zip(before, after))

    def test_state_dict_round_trip(self):
        layer = NoisyLinear(4, 3)
        other = NoisyLinear(4, 3)
        other.load_state_dict(layer.state_dict())
        x = torch.randn(2, 4)
        torch.testing.assert_close(other(x), layer(x))
        no_bias = NoisyLinear(4, 3, bias=False)
        assert no_bias.bias is None and set(no_bias.state_dict()) == {
            "weight_mu", "weight_sigma", "weight_epsilon"
        }  # fmt: skip
