"""GAILLoss: values against the formula written out by hand, keys, shapes and errors."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from rl.objectives import GAILLoss


class Discriminator(nn.Module):
    def __init__(self, obs_dim: int = 3, act_dim: int = 2):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim + act_dim, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.net(torch.cat([obs, act], -1)))


def make_disc() -> tuple[Discriminator, TensorDictModule]:
    torch.manual_seed(0)
    net = Discriminator()
    return net, TensorDictModule(net, ["observation", "action"], ["d_logits"])


def make_batch(*shape: int) -> TensorDict:
    g = torch.Generator().manual_seed(1)
    return TensorDict(
        observation=torch.randn(*shape, 3, generator=g),
        action=torch.randn(*shape, 2, generator=g),
        collector_observation=torch.randn(*shape, 3, generator=g),
        collector_action=torch.randn(*shape, 2, generator=g),
        batch_size=list(shape),
    )


def by_hand(net: Discriminator, batch: TensorDict) -> torch.Tensor:
    d_e = net(batch["observation"], batch["action"])
    d_c = net(batch["collector_observation"], batch["collector_action"])
    return -torch.log(d_e) - torch.log(1 - d_c)


class TestGAILLoss:
    @pytest.mark.parametrize("shape", [(8,), (4, 5)])
    @pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
    def test_loss_matches_hand_computation(self, shape, reduction):
        net, disc = make_disc()
        batch = make_batch(*shape)
        out = GAILLoss(disc, reduction=reduction)(batch)
        expected = by_hand(net, batch)
        assert expected.shape == (*shape, 1)
        if reduction == "mean":
            expected = expected.mean()
        elif reduction == "sum":
            expected = expected.sum()
        assert list(out.keys()) == ["loss"]
        torch.testing.assert_close(out["loss"], expected)

    def test_gradient_penalty_matches_hand_computation(self):
        net, disc = make_disc()
        batch = make_batch(8)
        loss_fn = GAILLoss(disc, use_grad_penalty=True, gp_lambda=3.0)
        torch.manual_seed(5)
        out = loss_fn(batch)
        # the same random interpolation, drawn in the same order
        torch.manual_seed(5)
        u_obs = torch.rand(8, 3)
        u_act = torch.rand(8, 2)
        obs = (
            u_obs * batch["collector_observation"] + (1 - u_obs) * batch["observation"]
        ).requires_grad_()
        act = (u_act * batch["collector_action"] + (1 - u_act) * batch["action"]).requires_grad_()
        g_obs, g_act = torch.autograd.grad(net(obs, act).sum(), (obs, act))
        norms = torch.cat([g_obs, g_act], -1).norm(dim=-1)
        gp = 3.0 * ((norms - 1) ** 2).mean()
        torch.testing.assert_close(out["gp_loss"], gp)
        torch.testing.assert_close(out["loss"], (by_hand(net, batch) + gp).mean())
        assert not out["gp_loss"].requires_grad
        assert loss_fn.out_keys == ["loss", "gp_loss"]

    def test_gradient_penalty_backpropagates_to_discriminator(self):
        net, disc = make_disc()
        loss_fn = GAILLoss(disc, use_grad_penalty=True)
        loss_fn(make_batch(8))["loss"].backward()
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in net.parameters())

    def test_keys(self):
        _, disc = make_disc()
        loss_fn = GAILLoss(disc)
        assert loss_fn.in_keys == [
            "action",
            "collector_action",
            "collector_observation",
            "observation",
        ]
        assert loss_fn.out_keys == ["loss"]

    def test_set_keys(self):
        net, _ = make_disc()
        disc = TensorDictModule(net, ["obs", "act"], ["prob"])
        loss_fn = GAILLoss(disc)
        loss_fn.set_keys(
            expert_observation="obs",
            expert_action="act",
            collector_observation="c_obs",
            collector_action="c_act",
            discriminator_pred="prob",
        )
        b = make_batch(6)
        batch = TensorDict(
            obs=b["observation"],
            act=b["action"],
            c_obs=b["collector_observation"],
            c_act=b["collector_action"],
            batch_size=[6],
        )
        torch.testing.assert_close(loss_fn(batch)["loss"], by_hand(net, b).mean())
        assert "c_obs" in loss_fn.in_keys

    def test_training_separates_expert_from_collected(self):
        net, disc = make_disc()
        loss_fn = GAILLoss(disc, use_grad_penalty=True, gp_lambda=0.1)
        opt = torch.optim.Adam(loss_fn.parameters(), lr=1e-2)
        batch = make_batch(64)
        batch["collector_observation"] += 3.0
        first = None
        for _ in range(100):
            loss = loss_fn(batch)["loss"]
            first = loss.item() if first is None else first
            opt.zero_grad()
            loss.backward()
            opt.step()
        assert loss.item() < 0.3 * first
        with torch.no_grad():
            assert net(batch["observation"], batch["action"]).mean() > 0.8
            assert net(batch["collector_observation"], batch["collector_action"]).mean() < 0.2

    def test_missing_key_names_it(self):
        _, disc = make_disc()
        batch = make_batch(4).exclude("collector_action")
        with pytest.raises(KeyError, match="collector_action"):
            GAILLoss(disc)(batch)

    def test_discriminator_output_key_mismatch(self):
        net, _ = make_disc()
        disc = TensorDictModule(net, ["observation", "action"], ["prob"])
        with pytest.raises(KeyError, match="d_logits"):
            GAILLoss(disc)(make_batch(4))

    def test_bad_arguments(self):
        _, disc = make_disc()
        with pytest.raises(ValueError, match="reduction"):
            GAILLoss(disc, reduction="max")
        with pytest.raises(TypeError, match="nn.Module"):
            GAILLoss(lambda td: td)
        with pytest.raises(ValueError, match="batch dimension"):
            GAILLoss(disc)(make_batch(4)[0])
