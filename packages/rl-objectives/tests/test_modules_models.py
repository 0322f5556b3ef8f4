"""Tests of rl.modules networks: shapes, structure, lazy init, noise, state_dict, vmap."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tensordict import TensorDict
from torch import nn

from rl.core import ExplorationType, set_exploration_type
from rl.modules import (
    MLP,
    BatchRenorm1d,
    Conv3dNet,
    ConvNet,
    DdpgCnnActor,
    DdpgCnnQNet,
    DdpgMlpActor,
    DdpgMlpQNet,
    DuelingCnnDQNet,
    DuelingMlpDQNet,
    NoisyLazyLinear,
    NoisyLinear,
    SquashDims,
    reset_noise,
)


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


class TestConvNet:
    def test_seed_call(self):
        net = ConvNet(
            num_cells=[32, 64], kernel_sizes=[8, 4], strides=[2, 1], aggregator_class=SquashDims
        )
        assert net(torch.randn(10, 3, 32, 32)).shape == (10, 6400)
        assert isinstance(net[0], nn.Conv2d) and net[0].in_channels == 3
        assert [type(m) for m in net] == [nn.Conv2d, nn.ELU, nn.Conv2d, nn.ELU, SquashDims]

    def test_against_functional_and_batch_dims(self):
        torch.manual_seed(0)
        net = ConvNet(in_features=2, num_cells=[4, 5], kernel_sizes=3, strides=[1, 2], paddings=1)
        x = torch.randn(3, 4, 2, 9, 9)
        h = F.elu(F.conv2d(x.flatten(0, 1), net[0].weight, net[0].bias, padding=1))
        h = F.elu(F.conv2d(h, net[2].weight, net[2].bias, stride=2, padding=1))
        torch.testing.assert_close(net(x), h.flatten(-3).unflatten(0, (3, 4)))

    def test_norm_squeeze_and_default_atari(self):
        net = ConvNet(
            in_features=3,
            num_cells=[8],
            norm_class=nn.BatchNorm2d,
            norm_kwargs={"num_features": 8},
            aggregator_class=nn.AdaptiveAvgPool2d,
            aggregator_kwargs={"output_size": (1, 1)},
            squeeze_output=True,
        )
        assert [type(m) for m in net][:3] == [nn.Conv2d, nn.ELU, nn.BatchNorm2d]
        assert net(torch.randn(4, 3, 9, 9)).shape == (4, 8)
        assert ConvNet.default_atari_dqn(6)(torch.zeros(2, 4, 84, 84)).shape == (2, 6)

    def test_conv3d_and_lazy(self):
        net = Conv3dNet(in_features=1, num_cells=[4, 8], kernel_sizes=3)
        assert net(torch.zeros(2, 5, 1, 7, 7, 7)).shape == (2, 5, 8 * 3 * 3 * 3)
        lazy = ConvNet(num_cells=[4], kernel_sizes=3)
        lazy(torch.zeros(1, 6, 5, 5))
        assert type(lazy[0]) is nn.Conv2d and lazy[0].in_channels == 6

    def test_state_dict_round_trip(self):
        net = ConvNet(in_features=2, num_cells=[4, 4], kernel_sizes=3)
        other = ConvNet(in_features=2, num_cells=[4, 4], kernel_sizes=3)
        other.load_state_dict(net.state_dict())
        x = torch.randn(3, 2, 7, 7)
        torch.testing.assert_close(other(x), net(x))

    def test_errors(self):
        with pytest.raises(ValueError, match="depth=3 and num_cells=2 length conflict"):
            ConvNet(num_cells=[4, 4], kernel_sizes=[3, 3, 3])
        with pytest.raises(TypeError, match="activation_class"):
            ConvNet(num_cells=[4], activation_class="elu")
        with pytest.raises(ValueError, match="at least 3 dimensions"):
            ConvNet(in_features=1, num_cells=[4])(torch.zeros(5, 5))


class TestHeads:
    def test_dueling_mlp_formula(self):
        net = DuelingMlpDQNet(
            3, mlp_kwargs_feature={"num_cells": [16]}, mlp_kwargs_output={"num_cells": 8}
        )
        x = torch.randn(4, 5)
        out = net(x)
        feats = net.features(x)
        adv, val = net.advantage(feats), net.value(feats)
        torch.testing.assert_close(out, val + adv - adv.mean(-1, keepdim=True))
        assert out.shape == (4, 3)

    def test_dueling_cnn_and_ddpg_shapes(self):
        net = DuelingCnnDQNet(4, cnn_kwargs={"num_cells": [8, 8, 8]}, mlp_kwargs={"num_cells": 16})
        assert net(torch.zeros(2, 3, 84, 84)).shape == (2, 4)
        actor = DdpgMlpActor(2)
        assert actor(torch.zeros(5, 3)).shape == (5, 2)
        assert actor.mlp[-1].weight.abs().max() <= 3e-3
        assert DdpgMlpQNet()(torch.zeros(5, 3), torch.zeros(5, 2)).shape == (5, 1)
        action, hidden = DdpgCnnActor(2)(torch.zeros(1, 3, 64, 64))
        assert action.shape == (1, 2) and hidden.ndim == 2
        assert DdpgCnnQNet()(torch.zeros(1, 3, 64, 64), torch.zeros(1, 2)).shape == (1, 1)


class TestBatchRenorm1d:
    def _reference(self, x, mean, var, n_tracked, warmup, momentum=0.01, eps=1e-5):
        b_mean, b_var = x.mean(0), x.var(0, unbiased=False)
        std = (var + eps).sqrt()
        b_std = (b_var + eps).sqrt()
        r = (b_std / std).clamp(1 / 3, 3)
        d = ((b_mean - mean) / std).clamp(-5, 5)
        if n_tracked < warmup:
            r, d = torch.ones_like(r), torch.zeros_like(d)
        out = (x - b_mean) / b_std * r + d
        new_var = var + momentum * (b_var * len(x) / (len(x) - 1) - var)
        new_mean = mean + momentum * (b_mean - mean)
        return out, new_mean, new_var

    @pytest.mark.parametrize("warmup", [0, 2])
    def test_against_formula(self, warmup):
        torch.manual_seed(0)
        layer = BatchRenorm1d(3, warmup_steps=warmup, momentum=0.1)
        mean, var = torch.zeros(3), torch.ones(3)
        for step in range(4):
            x = torch.randn(16, 3) * 2 + 1
            out, mean, var = self._reference(x, mean, var, step, warmup, momentum=0.1)
            torch.testing.assert_close(layer(x), out)
            torch.testing.assert_close(layer.running_mean, mean)
            torch.testing.assert_close(layer.running_var, var)
        assert int(layer.num_batches_tracked) == 4
        layer.eval()
        x = torch.randn(5, 3)
        torch.testing.assert_close(layer(x), (x - mean) / (var + 1e-5).sqrt())

    def test_state_dict_and_errors(self):
        layer = BatchRenorm1d(2, warmup_steps=0)
        layer(torch.randn(8, 2))
        other = BatchRenorm1d(2)
        other.load_state_dict(layer.state_dict())
        torch.testing.assert_close(other.running_mean, layer.running_mean)
        with pytest.raises(ValueError, match=r"shape \[N, 2, \.\.\.\], got \(8, 3\)"):
            layer(torch.randn(8, 3))
