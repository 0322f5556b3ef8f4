"""ExponentialQuadraticCost (PILCO's expected saturating cost) and WorldModelLoss."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from rl.modules import WorldModel
from rl.objectives import ExponentialQuadraticCost, WorldModelLoss

F64 = torch.float64


def beliefs(m, s):
    return TensorDict({("observation", "mean"): m, ("observation", "var"): s}, m.shape[:-1])


class TestExponentialQuadraticCost:
    def test_against_monte_carlo(self):
        torch.manual_seed(0)
        w = torch.diag(torch.tensor([2.0, 0.5, 1.0], dtype=F64))
        t = torch.tensor([1.0, 0.0, -0.5], dtype=F64)
        a = torch.randn(3, 3, dtype=F64) * 0.5
        m, s = torch.randn(3, dtype=F64), a @ a.T
        cost = ExponentialQuadraticCost(target=t, weights=w, reduction="none")
        value = cost(beliefs(m[None], s[None]))["loss_cost"]
        x = torch.distributions.MultivariateNormal(m, s).sample((400_000,))
        mc = (1 - torch.exp(-0.5 * ((x - t) @ w * (x - t)).sum(-1))).mean()
        torch.testing.assert_close(value[0], mc, atol=3e-3, rtol=0)

    def test_point_belief_is_the_cost(self):
        m = torch.tensor([[0.5, -1.0]], dtype=F64)
        value = ExponentialQuadraticCost(reduction="none")(
            beliefs(m, torch.zeros(1, 2, 2, dtype=F64))
        )
        torch.testing.assert_close(
            value["loss_cost"], 1 - torch.exp(-0.5 * m.square().sum(-1)), atol=1e-6, rtol=0
        )

    @pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
    def test_reductions(self, reduction):
        td = beliefs(torch.randn(3, 5, 4), 0.1 * torch.eye(4).expand(3, 5, 4, 4))
        per = ExponentialQuadraticCost(reduction="none")(td)["loss_cost"]
        out = ExponentialQuadraticCost(reduction=reduction)(td)["loss_cost"]
        expected = {"mean": per.mean(), "sum": per.sum(), "none": per}[reduction]
        torch.testing.assert_close(out, expected)
        assert ((per >= 0) & (per <= 1)).all()

    def test_gradient_and_keys(self):
        m = torch.randn(2, 4, requires_grad=True)
        cost = ExponentialQuadraticCost()
        cost.set_keys(loc="m", scale="s")
        cost(TensorDict(m=m, s=0.1 * torch.eye(4).expand(2, 4, 4), batch_size=[2]))[
            "loss_cost"
        ].backward()
        assert m.grad is not None

    def test_errors(self):
        cost = ExponentialQuadraticCost()
        with pytest.raises(KeyError, match="observation"):
            cost(TensorDict(x=torch.zeros(2, 4), batch_size=[2]))
        with pytest.raises(ValueError, match=r"has shape \(2, 3, 3\), expected \(2, 4, 4\)"):
            cost(beliefs(torch.zeros(2, 4), torch.zeros(2, 3, 3)))
        with pytest.raises(ValueError, match="reduction"):
            ExponentialQuadraticCost(reduction="max")


class Add(torch.nn.Module):
    def forward(self, latent, action):
        return latent + action


def world_model(done=False, decoder=False):
    return WorldModel(
        TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["latent"]),
        TensorDictModule(Add(), ["latent", "action"], [("next", "latent")]),
        TensorDictModule(torch.nn.Linear(2, 1), [("next", "latent")], [("next", "reward")]),
        done_head=TensorDictModule(torch.nn.Linear(2, 1), [("next", "latent")], [("next", "done")])
        if done
        else None,
        decoder=TensorDictModule(torch.nn.Linear(2, 3), ["latent"], ["reconstructed_observation"])
        if decoder
        else None,
    )


def batch(n=4):
    return TensorDict(
        {
            "observation": torch.randn(n, 3),
            "action": torch.randn(n, 2),
            ("next", "reward"): torch.randn(n, 1),
            ("next", "done"): torch.rand(n, 1) > 0.5,
        },
        batch_size=[n],
    )


class TestWorldModelLoss:
    def test_terms_against_hand_computation(self):
        wm = world_model(done=True, decoder=True)
        data = batch()
        loss = WorldModelLoss(
            wm, losses=["reward", "done", "reconstruction"], reward_weight=2.0, done_loss="l1"
        )
        out = loss(data)
        z = wm.encoder.module(data["observation"])
        z1 = z + data["action"]
        r = wm.reward_head.module(z1)
        d = wm.done_head.module(z1)
        recon = wm.decoder.module(z)
        torch.testing.assert_close(
            out["loss_reward"], 2.0 * (r - data["next", "reward"]).square().mean()
        )
        torch.testing.assert_close(
            out["loss_done"], (d - data["next", "done"].float()).abs().mean()
        )
        torch.testing.assert_close(
            out["loss_reconstruction"], (recon - data["observation"]).square().mean()
        )
        assert set(out.keys()) == {"loss_reward", "loss_done", "loss_reconstruction"}
        # the data is left as it was
        assert "true_reward" not in data["next"].keys()
        out["loss_reward"].backward()
        assert wm.reward_head.module.weight.grad is not None

    def test_latent_term(self):
        wm = world_model()
        data = (
            batch()
            .set("predicted_latent", torch.ones(4, 2))
            .set("target_latent", torch.zeros(4, 2))
        )
        out = WorldModelLoss(wm, losses=["latent"])(data)
        torch.testing.assert_close(out["loss_latent"], torch.tensor(1.0))

    def test_errors(self):
        with pytest.raises(ValueError, match=r"unknown loss term\(s\) \['kl'\]"):
            WorldModelLoss(world_model(), losses=["reward", "kl"])
        with pytest.raises(ValueError, match="reward_loss"):
            WorldModelLoss(world_model(), reward_loss="huber")
        data = batch().exclude(("next", "reward"))
        with pytest.raises(KeyError, match="reward"):
            WorldModelLoss(world_model())(data)
        with pytest.raises(KeyError, match="reconstructed_observation"):
            WorldModelLoss(world_model(), losses=["reconstruction"])(batch())
