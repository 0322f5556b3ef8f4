"""TQCLoss on a tiny case computed by hand (two critics of three quantiles each).

The reference replays the loss's draws (next action first, then the actor's action, as
in TorchRL) and computes the truncated target and the quantile Huber loss in plain loops.
"""

import math

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from rl.core import Bounded
from rl.modules import ProbabilisticActor, TanhNormal
from rl.objectives import SoftUpdate, TQCLoss
from rl.objectives._tqc import _quantile_huber_loss

GAMMA = 0.9
ALPHA = 0.5
S = torch.tensor([1.0, 2.0])
S_NEXT = torch.tensor([0.0, 1.0])
A = torch.tensor([0.5, -0.5])
R = torch.tensor([1.0, 2.0])
# critic i, quantile j: z = ws * s + wa * a + b
CRITICS = [
    [(1.0, 1.0, -1.0), (1.0, 0.5, 0.0), (2.0, 1.0, 1.0)],
    [(0.5, 1.0, -0.5), (1.0, -1.0, 0.5), (1.5, 0.0, 2.0)],
]


class LocScale(nn.Module):
    def __init__(self, w=0.5, scale=0.5):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(w))
        self.scale = scale

    def forward(self, obs):
        return self.w * obs, torch.full_like(obs, self.scale)


class Critic(nn.Module):
    def __init__(self, m=3):
        super().__init__()
        self.linear = nn.Linear(2, m)

    def forward(self, obs, act):
        return self.linear(torch.cat([obs, act], -1))


def actor(w=0.5):
    body = TensorDictModule(LocScale(w), ["observation"], ["loc", "scale"])
    return ProbabilisticActor(
        body, in_keys=["loc", "scale"], spec=Bounded(-1.0, 1.0, (1,)), distribution_class=TanhNormal
    )


def critic(m=3, out_key="state_action_value"):
    return TensorDictModule(Critic(m), ["observation", "action"], [out_key])


def make(**kw):
    kw.setdefault("num_qvalue_nets", 2)
    kw.setdefault("top_quantiles_to_drop_per_net", 1)
    kw.setdefault("gamma", GAMMA)
    loss = TQCLoss(actor(), critic(), alpha_init=ALPHA, **kw)
    w = torch.tensor([[[ws, wa] for ws, wa, _ in c] for c in CRITICS])
    b = torch.tensor([[bias for _, _, bias in c] for c in CRITICS])
    with torch.no_grad():
        for params in (loss.qvalue_network_params, loss.target_qvalue_network_params):
            params.get(("module", "linear", "weight")).copy_(w)
            params.get(("module", "linear", "bias")).copy_(b)
    return loss


def data(terminated=(False, True)):
    term = torch.tensor(terminated).unsqueeze(-1)
    return TensorDict(
        observation=S.unsqueeze(-1),
        action=A.unsqueeze(-1),
        next=TensorDict(
            observation=S_NEXT.unsqueeze(-1),
            reward=R.unsqueeze(-1),
            done=term.clone(),
            terminated=term.clone(),
            batch_size=[2],
        ),
        batch_size=[2],
    )


def z_ref(s, a):
    """Quantiles ``[2 critics, B, 3]``."""
    return torch.stack([torch.stack([ws * s + wa * a + b for ws, wa, b in c], -1) for c in CRITICS])


def tanh_normal(eps, loc, scale=0.5):
    x = loc + scale * eps
    log_prob = (
        -0.5 * ((x - loc) / scale) ** 2
        - math.log(scale)
        - 0.5 * math.log(2 * math.pi)
        - torch.log1p(-(torch.tanh(x) ** 2))
    )
    return torch.tanh(x), log_prob


def huber_quantile_loop(pred, target):
    """Plain loop: mean over (j, k) of |tau_j - 1(t_k < p_j)| * huber(t_k - p_j)."""
    m, total = len(pred), 0.0
    for j, p in enumerate(pred.tolist()):
        tau = (j + 0.5) / m
        for t in target.tolist():
            d = t - p
            h = 0.5 * d * d if abs(d) <= 1 else abs(d) - 0.5
            total += abs(tau - (1.0 if d < 0 else 0.0)) * h
    return total / (m * len(target))


def reference(seed, drop_per_net=1, not_term=(1.0, 0.0), skip_done_states=False):
    torch.manual_seed(seed)
    live = torch.tensor(not_term).bool() if skip_done_states else torch.ones(2, dtype=torch.bool)
    eps = torch.zeros(2)
    eps[live] = torch.randn(int(live.sum()), 1).squeeze(-1)  # only live rows draw
    a_next, lp_next = tanh_normal(eps, 0.5 * S_NEXT)
    a_actor, lp_actor = tanh_normal(torch.randn(2, 1).squeeze(-1), 0.5 * S)
    pooled = z_ref(S_NEXT, a_next).permute(1, 0, 2).reshape(2, 6)
    kept = pooled.sort(-1).values[:, : 6 - 2 * drop_per_net]
    target = R[:, None] + GAMMA * torch.tensor(not_term)[:, None] * (
        kept - ALPHA * lp_next[:, None]
    )
    pred = z_ref(S, A)
    loss_q = sum(huber_quantile_loop(pred[i, b], target[b]) for i in range(2) for b in range(2)) / 2
    td_error = torch.tensor(
        [
            max((target[b][None, :] - pred[i, b][:, None]).abs().mean().item() for i in range(2))
            for b in range(2)
        ]
    )
    q_actor = z_ref(S, a_actor).mean(dim=(0, -1))
    return {
        "loss_qvalue": torch.tensor(loss_q),
        "loss_actor": (ALPHA * lp_actor - q_actor).mean(),
        "loss_alpha": (-math.log(ALPHA) * (lp_actor - 1.0)).mean(),
        "entropy": -lp_actor.mean(),
        "td_error": td_error,
    }


def grads(module):
    return {
        n.split(".")[0]
        for n, p in module.named_parameters()
        if p.grad is not None and p.grad.abs().sum() > 0
    }


class TestQuantileHuber:
    def test_literal_values(self):
        # below the threshold: tau-weighted 0.5 d^2; above: tau-weighted |d| - 0.5
        pred = torch.tensor([0.0, 0.0])
        torch.testing.assert_close(
            _quantile_huber_loss(pred, torch.tensor([1.0])), torch.tensor(0.25)
        )
        torch.testing.assert_close(
            _quantile_huber_loss(pred, torch.tensor([-3.0])), torch.tensor((0.75 + 0.25) * 2.5 / 2)
        )

    def test_against_loop(self):
        g = torch.Generator().manual_seed(0)
        pred, target = torch.randn(5, generator=g) * 2, torch.randn(7, generator=g) * 2
        expected = torch.tensor(huber_quantile_loop(pred, target))
        torch.testing.assert_close(_quantile_huber_loss(pred, target), expected)


class TestTQCLoss:
    @pytest.mark.parametrize("drop", [0, 1, 2])
    def test_values_against_a_loop(self, drop):
        loss = make(top_quantiles_to_drop_per_net=drop)
        td = data()
        torch.manual_seed(0)
        out = loss(td)
        ref = reference(0, drop_per_net=drop)
        for key in ("loss_qvalue", "loss_actor", "loss_alpha", "entropy"):
            torch.testing.assert_close(out[key], ref[key], msg=key)
        torch.testing.assert_close(td["td_error"], ref["td_error"])
        torch.testing.assert_close(out["alpha"], torch.tensor(ALPHA))

    def test_skip_done_states(self):
        td = data(terminated=(True, True))
        torch.manual_seed(0)
        out = make(skip_done_states=True)(td)
        pred = z_ref(S, A)
        expected = sum(
            huber_quantile_loop(pred[i, b], R[b].expand(4)) for i in range(2) for b in range(2)
        )
        torch.testing.assert_close(out["loss_qvalue"], torch.tensor(expected / 2))
        td = data(terminated=(False, True))
        loss = make(skip_done_states=True)
        torch.manual_seed(0)
        out = loss(td)
        ref = reference(0, skip_done_states=True)
        for key in ("loss_qvalue", "loss_actor", "loss_alpha"):
            torch.testing.assert_close(out[key], ref[key], msg=key)
        torch.testing.assert_close(td["td_error"], ref["td_error"])

    def test_gradients_and_targets(self):
        loss = make()
        torch.manual_seed(0)
        loss(data())["loss_actor"].backward()
        assert grads(loss) == {"actor_network_params"}
        loss.zero_grad(set_to_none=True)
        loss(data())["loss_qvalue"].backward()
        assert grads(loss) == {"qvalue_network_params"}
        loss.zero_grad(set_to_none=True)
        loss(data())["loss_alpha"].backward()
        assert grads(loss) == {"log_alpha"}
        assert not any("target" in n for n, _ in loss.named_parameters())
        updater = SoftUpdate(loss, eps=0.9)
        with torch.no_grad():
            loss.qvalue_network_params.get(("module", "linear", "bias")).add_(1.0)
        updater.step()
        torch.testing.assert_close(
            loss.target_qvalue_network_params.get(("module", "linear", "bias")),
            torch.tensor([[b for *_, b in c] for c in CRITICS]) + 0.1,
        )

    def test_qvalue_v2_loss_is_the_critic_loss(self):
        loss = make()
        torch.manual_seed(0)
        out = loss(data())
        torch.manual_seed(0)
        critic, meta = loss.qvalue_v2_loss(data())  # TorchRL's name
        torch.testing.assert_close(critic, out["loss_qvalue"])
        assert "td_error" in meta

    def test_state_dict_round_trip(self):
        loss = make()
        with torch.no_grad():
            loss.log_alpha.fill_(math.log(ALPHA))
        other = TQCLoss(
            actor(w=-2.0), critic(), num_qvalue_nets=2, top_quantiles_to_drop_per_net=1, gamma=GAMMA
        )
        other.load_state_dict(loss.state_dict())
        torch.manual_seed(0)
        out = other(data())
        ref = reference(0)
        torch.testing.assert_close(out["loss_qvalue"], ref["loss_qvalue"])
        torch.testing.assert_close(out["loss_actor"], ref["loss_actor"])

    def test_set_keys_and_missing_key(self):
        loss = TQCLoss(actor(), critic(out_key="quantiles"), num_qvalue_nets=2, gamma=GAMMA)
        loss.set_keys(state_action_value="quantiles", reward="rew", priority="prio")
        td = data()
        td["next", "rew"] = td["next"].pop("reward")
        out = loss(td)
        assert out["loss_qvalue"].shape == torch.Size([])
        assert td["prio"].shape == torch.Size([2])
        del td["action"]
        with pytest.raises(KeyError, match=r"TQCLoss needs key 'action'.*set_keys\(action="):
            loss(td)

    def test_value_estimator(self):
        from rl.objectives.value import ValueEstimators

        loss = make()
        loss.make_value_estimator(ValueEstimators.TD0, gamma=GAMMA)
        torch.manual_seed(0)
        out = loss(data())
        torch.testing.assert_close(out["loss_qvalue"], reference(0)["loss_qvalue"])
        with pytest.raises(ValueError, match="does not support the TDLambda"):
            loss.make_value_estimator(ValueEstimators.TDLambda)

    def test_bad_arguments(self):
        with pytest.raises(ValueError, match="num_qvalue_nets must be greater than zero"):
            TQCLoss(actor(), critic(), num_qvalue_nets=0)
        with pytest.raises(ValueError, match="top_quantiles_to_drop_per_net must be greater"):
            TQCLoss(actor(), critic(), top_quantiles_to_drop_per_net=-1)
        with pytest.raises(ValueError, match="smaller than the critic's number of quantiles"):
            make(top_quantiles_to_drop_per_net=3)(data())
        squeezed = TensorDictModule(
            lambda o, a: (o + a).squeeze(-1), ["observation", "action"], ["state_action_value"]
        )
        with pytest.raises(RuntimeError, match="one quantile dimension after the batch"):
            TQCLoss(actor(), squeezed, num_qvalue_nets=1, gamma=GAMMA)(data())

    def test_reduction_none(self):
        loss = make(reduction="none", scalar_output_mode="non_tensor")
        torch.manual_seed(0)
        out = loss(data())
        assert out.batch_size == torch.Size([2])
        assert out["loss_qvalue"].shape == torch.Size([2])
        torch.testing.assert_close(out["loss_qvalue"].mean(), reference(0)["loss_qvalue"])
        assert "alpha" in out.keys()
