"""DiffusionActor + DiffusionBCLoss and ACTModel + ACTLoss: values against hand computations."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from rl.core import ACTION_CHUNK_KEY, ExplorationType, set_exploration_type
from rl.modules import ACTModel, DiffusionActor
from rl.objectives import ACTLoss, DiffusionBCLoss


class _ConstantNoise(nn.Module):
    """A score network that predicts a constant noise and records its inputs."""

    def __init__(self, action_dim: int, value: float):
        super().__init__()
        self.bias = nn.Parameter(torch.full((action_dim,), value))
        self.inputs = []

    def forward(self, x):
        self.inputs.append(x.detach().clone())
        return self.bias.expand(*x.shape[:-1], -1)


class TestDiffusionActor:
    def test_reverse_chain_matches_a_plain_loop(self):
        torch.manual_seed(0)
        net = _ConstantNoise(2, 0.3)
        actor = DiffusionActor(
            action_dim=2, score_network=net, num_steps=4, beta_start=0.1, beta_end=0.4
        )
        obs = torch.randn(3, 5)
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            action = actor(TensorDict(observation=obs, batch_size=[3]))["action"]
        betas = torch.linspace(0.1, 0.4, 4)
        alphas = 1 - betas
        abar = torch.cumprod(alphas, 0)
        x = torch.zeros(3, 2)
        for t in (3, 2, 1, 0):
            x = (x - betas[t] / (1 - abar[t]).sqrt() * 0.3) / alphas[t].sqrt()
        torch.testing.assert_close(action, x)
        # the score network read cat([x_t, obs, t]) with t = 3, 2, 1, 0
        assert [float(i[0, -1]) for i in net.inputs] == [3.0, 2.0, 1.0, 0.0]
        torch.testing.assert_close(net.inputs[0][:, 2:7], obs)

    def test_stochastic_chain_differs_and_default_net(self):
        actor = DiffusionActor(action_dim=2, num_steps=3)  # lazy first layer
        td = TensorDict(observation=torch.randn(4, 3), batch_size=[4])
        a0 = actor(td.clone())["action"]
        a1 = actor(td.clone())["action"]
        assert a0.shape == (4, 2) and not torch.equal(a0, a1)

    def test_half_precision_keeps_a_float32_schedule(self):
        actor = DiffusionActor(action_dim=2, obs_dim=3, num_steps=3).to(torch.bfloat16)
        assert actor.module.alphas_cumprod.dtype is torch.float32
        out = actor(TensorDict(observation=torch.randn(4, 3, dtype=torch.bfloat16), batch_size=[4]))
        assert out["action"].dtype is torch.bfloat16

    def test_too_many_steps_for_float16(self):
        actor = DiffusionActor(action_dim=2, obs_dim=3, num_steps=2050).to(torch.float16)
        with pytest.raises(ValueError, match="num_steps=2050 cannot be represented"):
            actor(TensorDict(observation=torch.randn(1, 3, dtype=torch.float16), batch_size=[1]))

    def test_spec_is_wrapped(self):
        from rl.core import Bounded

        actor = DiffusionActor(2, 3, num_steps=2, spec=Bounded(-1.0, 1.0, (2,)))
        assert "action" in actor.spec.keys()


class TestDiffusionBCLoss:
    def test_value_against_hand_computation(self):
        torch.manual_seed(0)
        net = _ConstantNoise(2, 0.5)
        actor = DiffusionActor(action_dim=2, score_network=net, num_steps=10)
        loss_fn = DiffusionBCLoss(actor, reduction="none")
        action, obs = torch.randn(6, 2), torch.randn(6, 3)
        torch.manual_seed(1)
        loss = loss_fn(TensorDict(observation=obs, action=action, batch_size=[6]))[
            "loss_diffusion_bc"
        ]
        # replay the draws: t, then the noise
        torch.manual_seed(1)
        t = torch.randint(0, 10, (6,))
        noise = torch.randn(6, 2)
        abar = actor.module.alphas_cumprod[t].unsqueeze(-1)
        noisy = abar.sqrt() * action + (1 - abar).sqrt() * noise
        torch.testing.assert_close(loss, (0.5 - noise) ** 2)
        torch.testing.assert_close(net.inputs[0], torch.cat([noisy, obs, t[:, None].float()], -1))

    @pytest.mark.parametrize("reduction", ["mean", "sum"])
    def test_reduction_and_gradients(self, reduction):
        actor = DiffusionActor(action_dim=2, obs_dim=4, num_steps=5)
        loss_fn = DiffusionBCLoss(actor, reduction=reduction)
        td = TensorDict(
            observation=torch.randn(2, 3, 4), action=torch.randn(2, 3, 2), batch_size=[2, 3]
        )
        loss = loss_fn(td)["loss_diffusion_bc"]
        assert loss.shape == ()
        loss.backward()
        assert all(p.grad is not None for p in actor.parameters())

    def test_set_keys_and_missing_key(self):
        loss_fn = DiffusionBCLoss(DiffusionActor(action_dim=2, obs_dim=4, num_steps=5))
        loss_fn.set_keys(action=("data", "demo"))
        assert loss_fn.in_keys == ["observation", ("data", "demo")]
        td = TensorDict(observation=torch.randn(3, 4), batch_size=[3])
        with pytest.raises(KeyError, match="demo"):
            loss_fn(td)

    def test_rejects_a_non_diffusion_actor(self):
        with pytest.raises(TypeError, match="DiffusionActor"):
            DiffusionBCLoss(TensorDictModule(nn.Linear(3, 2), ["observation"], ["action"]))

    def test_learns_a_fixed_mapping(self):
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(3, 32), nn.SiLU(), nn.Linear(32, 1))
        actor = DiffusionActor(action_dim=1, score_network=net, num_steps=10)
        loss_fn = DiffusionBCLoss(actor)
        opt = torch.optim.Adam(loss_fn.parameters(), lr=1e-2)
        obs = torch.randn(128, 1)
        td = TensorDict(observation=obs, action=0.5 * obs, batch_size=[128])
        first = sum(loss_fn(td)["loss_diffusion_bc"].item() for _ in range(5))
        for _ in range(60):
            loss = loss_fn(td)["loss_diffusion_bc"]
            opt.zero_grad()
            loss.backward()
            opt.step()
        last = sum(loss_fn(td)["loss_diffusion_bc"].item() for _ in range(5))
        assert last < 0.7 * first


def _act_actor(obs_dim=6, action_dim=3, chunk=4, **kwargs):
    model = ACTModel(
        obs_dim,
        action_dim,
        chunk,
        hidden_dim=16,
        nheads=2,
        num_encoder_layers=1,
        num_decoder_layers=1,
        latent_dim=4,
        dropout=0.0,
        **kwargs,
    )
    return TensorDictModule(
        model, ["observation", "action_chunk"], ["action_pred", "mu", "log_var"]
    )


class TestACTModel:
    def test_shapes_and_prior(self):
        actor = _act_actor()
        model = actor.module
        obs, chunk = torch.randn(2, 5, 6), torch.randn(2, 5, 4, 3)
        pred, mu, log_var = model(obs, chunk)
        assert pred.shape == (2, 5, 4, 3) and mu.shape == log_var.shape == (2, 5, 4)
        pred, mu, log_var = model(obs)
        assert pred.shape == (2, 5, 4, 3)
        assert mu.eq(0).all() and log_var.eq(0).all() and mu.data_ptr() != log_var.data_ptr()

    def test_inference_is_deterministic_in_eval(self):
        model = _act_actor().module.eval()
        obs = torch.randn(3, 6)
        torch.testing.assert_close(model(obs)[0], model(obs)[0])

    def test_position_table(self):
        from rl.modules.models._act import _sinusoidal_pos_enc

        table = _sinusoidal_pos_enc(3, 4)
        assert table[0, 0::2].eq(0).all() and table[0, 1::2].eq(1).all()
        torch.testing.assert_close(table[2, 0], torch.tensor(2.0).sin())
        torch.testing.assert_close(table[2, 3], torch.tensor(2.0 * 0.01).cos())
        with pytest.raises(ValueError, match="even dim"):
            _sinusoidal_pos_enc(4, 7)

    def test_state_dict_has_no_position_table(self):
        assert "enc_pos" not in _act_actor().module.state_dict()

    def test_bad_chunk_shape(self):
        model = _act_actor().module
        with pytest.raises(ValueError, match="action_chunk has shape"):
            model(torch.randn(2, 6), torch.randn(2, 5, 3))


class TestACTLoss:
    def test_value_against_hand_computation(self):
        torch.manual_seed(0)
        actor = _act_actor()
        loss_fn = ACTLoss(actor, kl_weight=2.0, reduction="none")
        obs, chunk = torch.randn(5, 6), torch.randn(5, 4, 3)
        torch.manual_seed(3)
        out = loss_fn(TensorDict({"observation": obs, ACTION_CHUNK_KEY: chunk}, batch_size=[5]))
        torch.manual_seed(3)
        pred, mu, log_var = actor.module(obs, chunk)
        recon = (pred - chunk).abs().mean((-2, -1))
        kl = (0.5 * (mu**2 + log_var.exp() - 1 - log_var)).sum(-1)
        torch.testing.assert_close(out["loss_reconstruction"], recon.detach())
        torch.testing.assert_close(out["loss_kl"], kl.detach())
        torch.testing.assert_close(out["loss_act"], recon + 2.0 * kl)
        assert out["loss_act"].requires_grad and not out["loss_kl"].requires_grad

    @pytest.mark.parametrize("reduction", ["mean", "sum"])
    def test_reductions(self, reduction):
        torch.manual_seed(0)
        actor = _act_actor()
        td = TensorDict(
            {"observation": torch.randn(5, 6), ACTION_CHUNK_KEY: torch.randn(5, 4, 3)}, [5]
        )
        torch.manual_seed(1)
        per = ACTLoss(actor, reduction="none")(td)
        torch.manual_seed(1)
        red = ACTLoss(actor, reduction=reduction)(td)
        op = torch.mean if reduction == "mean" else torch.sum
        torch.testing.assert_close(red["loss_act"], op(per["loss_act"]))

    def test_set_keys_and_missing_key(self):
        loss_fn = ACTLoss(_act_actor())
        assert loss_fn.in_keys == ["observation", ("vla_action", "chunk")]
        loss_fn.set_keys(action_chunk="demo")
        out = loss_fn(
            TensorDict(observation=torch.randn(2, 6), demo=torch.randn(2, 4, 3), batch_size=[2])
        )
        assert out["loss_act"].isfinite()
        with pytest.raises(KeyError, match="demo"):
            loss_fn(TensorDict(observation=torch.randn(2, 6), batch_size=[2]))

    def test_training_reduces_the_loss(self):
        torch.manual_seed(0)
        actor = _act_actor()
        loss_fn = ACTLoss(actor, kl_weight=1.0)
        opt = torch.optim.Adam(loss_fn.parameters(), lr=3e-3)
        td = TensorDict(
            {"observation": torch.randn(16, 6), ACTION_CHUNK_KEY: torch.randn(16, 4, 3)}, [16]
        )
        first = loss_fn(td)["loss_act"].item()
        for _ in range(20):
            loss = loss_fn(td)["loss_act"]
            opt.zero_grad()
            loss.backward()
            opt.step()
        assert loss_fn(td)["loss_act"].item() < 0.8 * first
