"""DTLoss and OnlineDTLoss: values against the formulas written out by hand, reductions,
gradients, keys and errors."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn

from rl.core import Bounded
from rl.modules import ProbabilisticActor, TanhDelta, TanhNormal
from rl.objectives import DTLoss, OnlineDTLoss


def batch(*shape: int, obs_dim: int = 3, act_dim: int = 2) -> TensorDict:
    g = torch.Generator().manual_seed(1)
    return TensorDict(
        observation=torch.randn(*shape, obs_dim, generator=g),
        action=torch.rand(*shape, act_dim, generator=g) * 2 - 1,
        batch_size=list(shape),
    )


def dt_actor(act_dim: int = 2, spec: bool = True) -> tuple[nn.Linear, ProbabilisticActor]:
    torch.manual_seed(0)
    net = nn.Linear(3, act_dim)
    actor = ProbabilisticActor(
        TensorDictModule(net, ["observation"], ["param"]),
        in_keys=["param"],
        distribution_class=TanhDelta,
        spec=Bounded(-1.0, 1.0, (act_dim,)) if spec else None,
    )
    return net, actor


def odt_actor(act_dim: int = 2, spec: bool = True) -> tuple[nn.Module, ProbabilisticActor]:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 2 * act_dim), NormalParamExtractor())
    actor = ProbabilisticActor(
        TensorDictModule(net, ["observation"], ["loc", "scale"]),
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        spec=Bounded(-1.0, 1.0, (act_dim,)) if spec else None,
    )
    return net, actor


class TestDTLoss:
    @pytest.mark.parametrize("shape", [(5,), (4, 6)])
    @pytest.mark.parametrize("loss_function", ["l2", "l1", "smooth_l1"])
    def test_value(self, shape, loss_function):
        net, actor = dt_actor()
        data = batch(*shape)
        pred = torch.tanh(net(data["observation"]))
        error = (pred - data["action"]).abs()
        expected = {
            "l2": error.pow(2),
            "l1": error,
            "smooth_l1": torch.where(error < 1, 0.5 * error.pow(2), error - 0.5),
        }[loss_function]
        loss = DTLoss(actor, loss_function=loss_function)
        torch.testing.assert_close(loss(data)["loss"], expected.mean())
        loss = DTLoss(actor, loss_function=loss_function, reduction="sum")
        torch.testing.assert_close(loss(data)["loss"], expected.sum())
        loss = DTLoss(actor, loss_function=loss_function, reduction="none")
        torch.testing.assert_close(loss(data)["loss"], expected)

    def test_gradient_reaches_the_actor_only(self):
        net, actor = dt_actor()
        loss = DTLoss(actor)
        data = batch(4, 6)
        loss(data)["loss"].backward()
        assert net.weight.grad is not None and net.weight.grad.norm() > 0
        assert "action" in data.keys() and "param" not in data.keys()  # input left as it was

    def test_keys(self):
        _, actor = dt_actor()
        loss = DTLoss(actor)
        assert loss.in_keys == ["action", "observation"]
        assert loss.out_keys == ["loss"]
        loss.set_keys(action_target="expert_action")
        assert loss.in_keys == ["action", "expert_action", "observation"]
        data = batch(5).rename_key_("action", "expert_action")
        assert loss(data)["loss"].shape == ()

    def test_errors(self):
        _, actor = dt_actor()
        with pytest.raises(ValueError, match="unknown loss_function 'l3'"):
            DTLoss(actor, loss_function="l3")
        with pytest.raises(ValueError, match="unknown reduction 'avg'"):
            DTLoss(actor, reduction="avg")
        loss = DTLoss(actor)
        with pytest.raises(KeyError, match="needs key 'action' which is missing"):
            loss(batch(5).exclude("action"))
        loss.set_keys(action_pred="other")
        with pytest.raises(RuntimeError, match="did not write its prediction at 'other'"):
            loss(batch(5).set("other", torch.zeros(5, 2)))
        loss = DTLoss(actor)
        with pytest.raises(ValueError, match=r"shapes \(5, 2\) and \(5, 3\)"):
            loss(batch(5).set("action", torch.zeros(5, 3)))


def odt_by_hand(net, data, alpha, target_entropy, draws):
    """The three per-element terms with the same noise draws as the loss."""
    loc, scale = net(data["observation"])
    dist = TanhNormal(loc, scale)
    log_lik = dist.log_prob(data["action"])
    x = loc + draws * scale  # the pre-tanh draws
    z = (x - loc) / scale
    log_p = (-0.5 * z.pow(2) - scale.log() - 0.5 * math.log(2 * math.pi)).sum(-1)
    log_p = log_p - (2 * (math.log(2.0) - x - nn.functional.softplus(-2 * x))).sum(-1)
    entropy = -log_p.mean(0)
    return -log_lik, -alpha * entropy, alpha * (entropy - target_entropy)


class TestOnlineDTLoss:
    @pytest.mark.parametrize("shape", [(5,), (4, 6)])
    @pytest.mark.parametrize("samples", [1, 3])
    def test_value(self, shape, samples):
        net, actor = odt_actor()
        loss = OnlineDTLoss(actor, alpha_init=0.5, samples_mc_entropy=samples)
        data = batch(*shape)
        torch.manual_seed(3)
        out = loss(data)
        torch.manual_seed(3)
        draws = torch.randn(samples, *shape, 2)
        ll, ent, alp = odt_by_hand(net, data, 0.5, -2.0, draws)
        torch.testing.assert_close(out["loss_log_likelihood"], ll.mean())
        torch.testing.assert_close(out["loss_entropy"], ent.mean())
        torch.testing.assert_close(out["loss_alpha"], alp.mean())
        torch.testing.assert_close(out["alpha"], torch.tensor(0.5))
        torch.testing.assert_close(out["entropy"], -ent.mean() / 0.5)

    def test_gradients(self):
        net, actor = odt_actor()
        loss = OnlineDTLoss(actor)
        out = loss(batch(4, 6))
        (out["loss_log_likelihood"] + out["loss_entropy"]).backward(retain_graph=True)
        assert net[0].weight.grad.norm() > 0 and loss.log_alpha.grad is None
        net.zero_grad()
        out["loss_alpha"].backward()
        assert net[0].weight.grad is None or net[0].weight.grad.norm() == 0
        assert loss.log_alpha.grad.abs() > 0

    @pytest.mark.parametrize("act_dim", [1, 4])
    def test_target_entropy(self, act_dim):
        _, actor = odt_actor(act_dim)
        assert OnlineDTLoss(actor).target_entropy.item() == -act_dim
        assert OnlineDTLoss(actor, target_entropy=-0.5).target_entropy.item() == -0.5
        _, actor = odt_actor(act_dim, spec=False)  # sized from the first batch
        loss = OnlineDTLoss(actor)
        loss(batch(3, act_dim=act_dim))
        assert loss.target_entropy.item() == -act_dim

    def test_alpha_options(self):
        _, actor = odt_actor()
        loss = OnlineDTLoss(actor, alpha_init=2.0, fixed_alpha=True)
        assert "log_alpha" in dict(loss.named_buffers())
        assert loss(batch(3))["alpha"].item() == pytest.approx(2.0)
        loss = OnlineDTLoss(actor, alpha_init=2.0, max_alpha=1.0)
        assert loss.alpha.item() == pytest.approx(1.0)
        loss = OnlineDTLoss(actor, alpha_init=0.01, min_alpha=0.1)
        assert loss.alpha.item() == pytest.approx(0.1)

    def test_reduction_none(self):
        _, actor = odt_actor()
        with pytest.warns(UserWarning, match="scalar_output_mode='exclude'"):
            loss = OnlineDTLoss(actor, reduction="none")
        data = batch(4, 6)
        out = loss(data)
        assert set(out.keys()) == {"loss_log_likelihood", "loss_entropy", "loss_alpha"}
        assert all(v.shape == (4, 6) for v in out.values())
        loss = OnlineDTLoss(actor, reduction="none", scalar_output_mode="non_tensor")
        out = loss(data)
        assert out["alpha"] == pytest.approx(1.0)
        loss = OnlineDTLoss(actor, reduction="sum")
        assert loss(data)["loss_alpha"].shape == ()

    def test_errors(self):
        _, actor = odt_actor()
        loss = OnlineDTLoss(actor)
        data = batch(3)
        data["action"].requires_grad_(True)
        with pytest.raises(RuntimeError, match="'action' cannot be part of a graph"):
            loss(data)
        with pytest.raises(KeyError, match="needs key 'action' which is missing"):
            loss(batch(3).exclude("action"))
        with pytest.raises(ValueError, match="samples_mc_entropy must be >= 1"):
            OnlineDTLoss(actor, samples_mc_entropy=0)
        with pytest.raises(ValueError, match="unknown scalar_output_mode 'keep'"):
            OnlineDTLoss(actor, reduction="none", scalar_output_mode="keep")
        with pytest.raises(ValueError, match="alpha_init must be > 0"):
            OnlineDTLoss(actor, alpha_init=0.0)
