"""DreamerV3 losses against hand computations and plain loops."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import (
    InteractionType,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictSequential,
)
from torch import nn

from rl.modules import SymExpTwoHot, TanhNormal
from rl.objectives import (
    DreamerV3ActorLoss,
    DreamerV3Loss,
    DreamerV3ModelLoss,
    DreamerV3ValueLoss,
    SoftUpdate,
    categorical_kl_balanced,
    categorical_kl_terms,
    symlog,
    two_hot_cross_entropy,
)
from rl.objectives._dreamer_v3 import _replay_value_target
from rl.objectives.value import ValueEstimators

S, H, A = 4, 3, 2


def _kl_loop(post, prior):
    """KL(post || prior) per batch element, summed over categoricals, by plain loops."""
    out = torch.zeros(post.shape[0])
    for b in range(post.shape[0]):
        for c in range(post.shape[1]):
            for k in range(post.shape[2]):
                out[b] += post[b, c, k] * (post[b, c, k].log() - prior[b, c, k].log())
    return out


class TestCategoricalKL:
    def test_terms_by_hand(self):
        torch.manual_seed(0)
        post_logits = torch.randn(5, 2, 3, requires_grad=True)
        prior_logits = torch.randn(5, 2, 3, requires_grad=True)
        mix = lambda x: 0.99 * torch.softmax(x, -1) + 0.01 / 3  # noqa: E731
        kl = _kl_loop(mix(post_logits.detach()), mix(prior_logits.detach()))
        dynamics, representation = categorical_kl_terms(post_logits, prior_logits, 0.3, 0.01)
        expected = kl.clamp_min(0.3).mean()
        torch.testing.assert_close(dynamics, expected)
        torch.testing.assert_close(representation, expected)
        dynamics.backward(retain_graph=True)
        assert post_logits.grad is None and prior_logits.grad.abs().sum() > 0
        prior_logits.grad = None
        representation.backward()
        assert prior_logits.grad is None and post_logits.grad.abs().sum() > 0

    def test_balanced_by_hand_and_floor(self):
        torch.manual_seed(0)
        post, prior = torch.randn(4, 2, 3) * 3, torch.randn(4, 2, 3) * 3
        per_cat = torch.stack(
            [
                _kl_loop(
                    torch.softmax(post[:, c : c + 1], -1), torch.softmax(prior[:, c : c + 1], -1)
                )
                for c in range(2)
            ],
            -1,
        )
        expected = per_cat.clamp_min(0.5).mean()
        torch.testing.assert_close(categorical_kl_balanced(post, prior, 0.8, 0.5), expected)
        same = torch.randn(2, 2, 3, requires_grad=True)
        kl = categorical_kl_balanced(same, same.detach().clone(), free_bits=0.5)
        assert kl.item() == pytest.approx(0.5)
        kl.backward()
        assert same.grad.abs().max() == 0
        with pytest.raises(ValueError, match=r"\(2, 2, 3\) and prior_logits \(2, 3, 3\)"):
            categorical_kl_terms(torch.zeros(2, 2, 3), torch.zeros(2, 3, 3))


def _world_model(bins=5):
    """Prior/posterior logits from the state, a reconstruction and reward logits."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.post = nn.Linear(S, 4)
            self.prior = nn.Linear(S, 4)
            self.reco = nn.Linear(S, 6)
            self.reward = nn.Linear(S, bins)

        def forward(self, state):
            r = self.reward(state)
            return (
                self.prior(state).unflatten(-1, (2, 2)),
                self.post(state).unflatten(-1, (2, 2)),
                self.reco(state),
                r,
                SymExpTwoHot(bins)(r),
            )

    keys = [("next", k) for k in ("prior_logits", "posterior_logits", "reco_pixels")]
    keys += [("next", "reward_logits"), ("next", "reward")]
    return TensorDictModule(Net(), in_keys=["state"], out_keys=keys)


def _replay(B=2, T=3):
    return TensorDict(
        state=torch.randn(B, T, S),
        next=TensorDict(
            pixels=torch.rand(B, T, 6) * 4,
            reward=torch.randn(B, T, 1),
            done=torch.zeros(B, T, 1, dtype=torch.bool),
            terminated=torch.zeros(B, T, 1, dtype=torch.bool),
            batch_size=[B, T],
        ),
        batch_size=[B, T],
    )


class TestDreamerV3ModelLoss:
    def test_terms_by_hand(self):
        torch.manual_seed(0)
        wm, data = _world_model(), _replay()
        loss = DreamerV3ModelLoss(wm, num_reward_bins=5, free_bits=0.0, lambda_reco=2.0)
        out, model_out = loss(data)
        prior, post, reco, r_logits, _ = wm.module(data["state"])
        reco_ref = (symlog(data["next", "pixels"]) - symlog(reco)).square().sum(-1).mean()
        torch.testing.assert_close(out["loss_model_reco"], 2 * reco_ref.reshape(1))
        reward_ref = two_hot_cross_entropy(r_logits, data["next", "reward"], SymExpTwoHot(5).bins)
        torch.testing.assert_close(out["loss_model_reward"], reward_ref.mean().reshape(1))
        torch.testing.assert_close(
            out["loss_model_kl"], categorical_kl_balanced(post, prior, 0.8, 0.0).reshape(1)
        )
        assert torch.equal(model_out["next", "true_reward"], data["next", "reward"])
        assert not model_out["next", "posterior_logits"].requires_grad

    def test_separate_kl_and_continue(self):
        torch.manual_seed(0)
        base = _world_model()

        class WithContinue(nn.Module):
            def __init__(self):
                super().__init__()
                self.base, self.head = base, nn.Linear(S, 1)

            def forward(self, td):
                td = self.base(td)
                td.set(("next", "continue_pred"), self.head(td["state"]))
                return td

        data = _replay()
        data["next", "terminated"][0, 1] = True
        loss = DreamerV3ModelLoss(
            WithContinue(),
            kl_mode="separate",
            lambda_representation=0.1,
            unimix=0.01,
            num_reward_bins=5,
            lambda_continue=1.0,
            continue_target_scale=0.5,
        )
        out, model_out = loss(data)
        assert "loss_model_kl" not in out.keys()
        dyn, rep = categorical_kl_terms(
            model_out["next", "posterior_logits"], model_out["next", "prior_logits"], 1.0, 0.01
        )
        torch.testing.assert_close(out["loss_model_dynamic"], dyn.reshape(1))
        torch.testing.assert_close(out["loss_model_representation"], 0.1 * rep.reshape(1))
        target = (~data["next", "terminated"]).float().squeeze(-1) * 0.5
        bce = nn.functional.binary_cross_entropy_with_logits(
            model_out["next", "continue_pred"].squeeze(-1), target
        )
        torch.testing.assert_close(out["loss_model_continue"], bce.reshape(1))

    def test_bad_input_names_keys_and_shapes(self):
        loss = DreamerV3ModelLoss(_world_model(bins=5), num_reward_bins=7)
        with pytest.raises(ValueError, match=r"logits over 7 bins, got trailing dim 5"):
            loss(_replay())
        with pytest.raises(KeyError, match=r"'reward'"):
            loss(_replay().exclude(("next", "reward")))
        loss = DreamerV3ModelLoss(_world_model(), num_reward_bins=5)
        loss.set_keys(pixels="observation")
        with pytest.raises(KeyError, match=r"\('next', 'observation'\).*tensor_keys.pixels"):
            loss(_replay())
        with pytest.raises(ValueError, match="kl_mode must be"):
            DreamerV3ModelLoss(_world_model(), kl_mode="sum")
        legacy = _world_model()
        legacy.out_keys[3], legacy.out_keys[4] = ("next", "reward"), ("next", "_")
        with pytest.warns(DeprecationWarning, match="removed in v0.16"):
            DreamerV3ModelLoss(legacy, num_reward_bins=5)(_replay())


class _LatentEnv(nn.Module):
    """Duck-typed imagination: state' = state + mean(action), reward = sum(state')."""

    def reset(self, td):
        return td

    def rollout(self, max_steps, policy, auto_reset, tensordict, break_when_any_done=True):
        td, steps = tensordict, []
        for _ in range(max_steps):
            td = policy(td.clone())
            nxt = td["state"] + td["action"].mean(-1, keepdim=True)
            td.set(("next", "state"), nxt)
            td.set(("next", "belief"), td["belief"] * 0.5)
            td.set(("next", "reward"), nxt.sum(-1, keepdim=True))
            steps.append(td)
            td = TensorDict(state=nxt, belief=td["next", "belief"], batch_size=td.batch_size)
        return torch.stack(steps, -1)


def _actor():
    net = nn.Sequential(nn.Linear(S + H, 2 * A))

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, state, belief):
            loc, scale = self.net(torch.cat([state, belief], -1)).chunk(2, -1)
            return loc, nn.functional.softplus(scale) + 0.1

    return ProbabilisticTensorDictSequential(
        TensorDictModule(Head(), in_keys=["state", "belief"], out_keys=["loc", "scale"]),
        ProbabilisticTensorDictModule(
            in_keys=["loc", "scale"],
            out_keys=["action"],
            distribution_class=TanhNormal,
            default_interaction_type=InteractionType.RANDOM,
        ),
    )


class _Value(nn.Module):
    def __init__(self, out=1):
        super().__init__()
        self.lin = nn.Linear(S + H, out)

    def forward(self, state, belief):
        return self.lin(torch.cat([state, belief], -1))


def _value(bins=None):
    if bins is None:
        return TensorDictModule(_Value(), in_keys=["state", "belief"], out_keys=["state_value"])
    return TensorDictSequential(
        TensorDictModule(
            _Value(bins), in_keys=["state", "belief"], out_keys=["state_value_logits"]
        ),
        TensorDictModule(
            SymExpTwoHot(bins), in_keys=["state_value_logits"], out_keys=["state_value"]
        ),
    )


def _lambda_loop(r, v, gamma, lmbda, c=None):
    c = torch.ones_like(r) if c is None else c
    out, g = torch.empty_like(r), v[..., -1, :]
    for t in reversed(range(r.shape[-2])):
        g = r[..., t, :] + gamma * c[..., t, :] * ((1 - lmbda) * v[..., t, :] + lmbda * g)
        out[..., t, :] = g
    return out


class TestDreamerV3ActorLoss:
    @pytest.mark.parametrize("use_reinforce", [False, True])
    def test_loss_by_hand(self, use_reinforce):
        torch.manual_seed(0)
        actor, value = _actor(), _value()
        loss = DreamerV3ActorLoss(
            actor,
            value,
            _LatentEnv(),
            imagination_horizon=4,
            entropy_bonus=0.0,
            use_reinforce=use_reinforce,
            return_normalization_rate=1.0,
        )
        loss.make_value_estimator(ValueEstimators.TDLambda, gamma=0.9, lmbda=0.8)
        data = TensorDict(state=torch.randn(3, S), belief=torch.randn(3, H), batch_size=[3])
        out, fake = loss(data)
        assert fake.batch_size == (3, 4)
        r = fake["next", "reward"]
        ref = _lambda_loop(r, value.module(fake["next", "state"], fake["next", "belief"]), 0.9, 0.8)
        torch.testing.assert_close(fake["lambda_target"], ref)
        weight = (0.9 ** torch.arange(4.0)).reshape(4, 1).expand(3, 4, 1)
        torch.testing.assert_close(fake["discount_weight"], weight)
        low, high = torch.quantile(ref.detach().flatten(), torch.tensor([0.05, 0.95]))
        scale = (high - low).clamp_min(1.0)
        torch.testing.assert_close(out["return_scale"], scale)
        if use_reinforce:
            dist = actor.get_dist(fake.select("state", "belief").detach())
            log_prob = dist.log_prob(fake["action"].detach()).unsqueeze(-1)
            baseline = value.module(fake["state"], fake["belief"])
            expected = -(weight * log_prob * (ref - baseline).detach() / scale).mean()
        else:
            expected = -(weight * ref / scale).mean()
        torch.testing.assert_close(out["loss_actor"], expected)
        out["loss_actor"].backward()
        assert all(p.grad is None for p in value.parameters())
        assert any(p.grad is not None for p in actor.parameters())

    def test_continuation_weights_and_missing_key(self):
        torch.manual_seed(0)
        cont = TensorDictModule(
            lambda s, b: s[..., :1] * 0 + 0.5,
            in_keys=["state", "belief"],
            out_keys=["continuation"],
        )
        loss = DreamerV3ActorLoss(
            _actor(),
            _value(),
            _LatentEnv(),
            continuation_model=cont,
            imagination_horizon=3,
            entropy_bonus=1e-3,
        )
        loss.make_value_estimator(ValueEstimators.TDLambda, gamma=1.0, lmbda=0.5)
        r = torch.tensor([[[1.0], [2.0], [3.0]]])
        v = torch.tensor([[[10.0], [20.0], [30.0]]])
        torch.testing.assert_close(
            loss.lambda_target(r, v, torch.full_like(r, 0.5)),
            torch.tensor([[[6.375], [11.5], [18.0]]]),
        )
        r, v, c = torch.randn(2, 5, 1), torch.randn(2, 5, 1), torch.rand(2, 5, 1)
        torch.testing.assert_close(loss.lambda_target(r, v, c), _lambda_loop(r, v, 1.0, 0.5, c))
        data = TensorDict(state=torch.randn(2, S), belief=torch.randn(2, H), batch_size=[2])
        out, fake = loss(data)
        torch.testing.assert_close(
            fake["discount_weight"][0, :, 0], torch.tensor([0.5, 0.25, 0.125])
        )
        assert out["actor_entropy"].ndim == 0
        with pytest.raises(KeyError, match=r"'belief'.*tensor_keys.belief"):
            loss(data.exclude("belief"))
        with pytest.raises(ValueError, match=r"reward \(2, 5, 1\), value \(2, 4, 1\)"):
            loss.lambda_target(r, v[:, :4])


class TestDreamerV3ValueLoss:
    def test_symlog_mse_by_hand(self):
        torch.manual_seed(0)
        value = _value()
        data = TensorDict(
            state=torch.randn(2, 3, S),
            belief=torch.randn(2, 3, H),
            lambda_target=torch.randn(2, 3, 1) * 10,
            batch_size=[2, 3],
        )
        out, _ = DreamerV3ValueLoss(value, gamma=0.5)(data)
        pred = value.module(data["state"], data["belief"]).squeeze(-1)
        weight = torch.tensor([1.0, 0.5, 0.25])
        expected = (weight * (symlog(pred) - symlog(data["lambda_target"].squeeze(-1))) ** 2).mean()
        torch.testing.assert_close(out["loss_value"], expected)
        with pytest.raises(KeyError, match="lambda_target"):
            DreamerV3ValueLoss(value)(data.exclude("lambda_target"))
        with pytest.raises(ValueError, match="symlog_mse.*two_hot"):
            DreamerV3ValueLoss(value, value_loss="mse")

    def test_two_hot_with_slow_critic(self):
        torch.manual_seed(0)
        value = _value(bins=7)
        loss = DreamerV3ValueLoss(
            value,
            value_loss="two_hot",
            num_value_bins=7,
            discount_loss=False,
            slow_critic_regularization=0.5,
        )
        updater = SoftUpdate(loss, tau=0.1)
        data = TensorDict(
            state=torch.randn(6, S),
            belief=torch.randn(6, H),
            lambda_target=torch.randn(6, 1),
            batch_size=[6],
        )
        with torch.no_grad():
            value.module[0].lin.weight.add_(1.0)  # the online critic moves, the slow one stays
        out, _ = loss(data)
        logits = value(data.clone())["state_value_logits"]
        bins = SymExpTwoHot(7).bins
        target_td = data.select("state", "belief").clone()
        with loss.target_value_model_params.to_module(value):
            slow = value(target_td)["state_value"].squeeze(-1)
        ce = two_hot_cross_entropy(logits, data["lambda_target"], bins)
        slow_ce = two_hot_cross_entropy(logits, slow, bins)
        torch.testing.assert_close(out["loss_value"], (ce + 0.5 * slow_ce).mean())
        torch.testing.assert_close(out["value_slow_loss"], slow_ce.mean())
        out["loss_value"].backward()
        updater.step()
        with pytest.raises(ValueError, match=r"logits over 5 bins, got trailing dim 7"):
            DreamerV3ValueLoss(_value(bins=7), value_loss="two_hot", num_value_bins=5)(data)

    def test_replay_target_and_loss(self):
        reward = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
        bootstrap = torch.tensor([[10.0, 20.0, 30.0, 40.0]])
        done = torch.zeros_like(reward, dtype=torch.bool)
        target = _replay_value_target(reward, done, done, bootstrap, horizon=2.0, lmbda=0.5)
        torch.testing.assert_close(target, torch.tensor([[9.8125, 15.25, 23.0]]))
        loss = DreamerV3ValueLoss(_value(), reduction="none")
        data = TensorDict(
            state=torch.randn(2, 4, S, requires_grad=True),
            belief=torch.randn(2, 4, H),
            bootstrap=torch.randn(2, 4),
            next=TensorDict(
                reward=torch.randn(2, 4),
                done=torch.zeros(2, 4, dtype=torch.bool),
                terminated=torch.zeros(2, 4, dtype=torch.bool),
                batch_size=[2, 4],
            ),
            batch_size=[2, 4],
        )
        out = loss.replay_value_loss(data)["loss_replay_value"]
        assert out.shape == (2, 3)
        out.sum().backward()
        assert data["state"].grad.abs().sum() > 0


def test_dreamer_v3_loss_end_to_end():
    torch.manual_seed(0)

    class WM(nn.Module):
        def __init__(self):
            super().__init__()
            self.post = nn.Linear(S, 4)
            self.prior = nn.Linear(S, 4)
            self.belief = nn.Linear(S, H)
            self.reco = nn.Linear(S, 6)
            self.reward = nn.Linear(S, 5)

        def forward(self, state):
            r = self.reward(state)
            return (
                self.prior(state).unflatten(-1, (2, 2)),
                self.post(state).unflatten(-1, (2, 2)),
                self.reco(state),
                r,
                SymExpTwoHot(5)(r),
                torch.tanh(state),
                self.belief(state),
            )

    keys = [
        "prior_logits",
        "posterior_logits",
        "reco_pixels",
        "reward_logits",
        "reward",
        "state",
        "belief",
    ]
    wm = TensorDictModule(WM(), in_keys=["state"], out_keys=[("next", k) for k in keys])
    value = _value()
    actor_loss = DreamerV3ActorLoss(_actor(), value, _LatentEnv(), imagination_horizon=3)
    loss = DreamerV3Loss(
        DreamerV3ModelLoss(wm, num_reward_bins=5, detach_output=False),
        actor_loss,
        DreamerV3ValueLoss(value, actor_loss=actor_loss),
    )
    out = loss(_replay())
    total = sum(v for k, v in out.items() if k.startswith("loss_"))
    total.backward()
    assert out["replay_context"].batch_size == (2, 3)
    assert wm.module.belief.weight.grad.abs().sum() > 0  # the replay critic trains the model
    assert loss.in_keys == [
        "state",
        "is_init",
        ("next", "pixels"),
        ("next", "reward"),
        ("next", "done"),
        ("next", "terminated"),
    ]
    with pytest.raises(ValueError, match="detach_output=False"):
        DreamerV3Loss(DreamerV3ModelLoss(wm), actor_loss, DreamerV3ValueLoss(value))


def test_dreamer_v3_loss_with_optimizer_and_stepper():
    from rl.core.trainers import DreamerV3OptimizationStepper, DreamerV3Optimizer

    torch.manual_seed(0)
    wm = _world_model()
    value = _value(bins=5)
    actor_loss = DreamerV3ActorLoss(_actor(), value, _LatentEnv(), imagination_horizon=2)
    value_loss = DreamerV3ValueLoss(
        value, value_loss="two_hot", num_value_bins=5, slow_critic_regularization=1.0
    )
    wm_state = TensorDictModule(
        lambda s: (torch.tanh(s), torch.zeros(*s.shape[:-1], H)),
        in_keys=["state"],
        out_keys=[("next", "state"), ("next", "belief")],
    )
    loss = DreamerV3Loss(
        DreamerV3ModelLoss(TensorDictSequential(wm, wm_state), num_reward_bins=5),
        actor_loss,
        value_loss,
        replay_value_loss_weight=0.0,
    )
    optimizer = DreamerV3Optimizer(loss.parameters(), lr=1e-2, warmup_steps=0)
    stepper = DreamerV3OptimizationStepper(
        loss, optimizer, SoftUpdate(value_loss, tau=0.1), compile_train_step=False
    )
    before = [p.detach().clone() for p in loss.parameters()]
    batch = _replay()
    metrics = stepper.step(None, batch)
    assert {"loss_model_kl", "loss_actor", "loss_value", "loss_replay_value"} <= set(metrics.keys())
    assert any(not torch.equal(p, b) for p, b in zip(loss.parameters(), before))
    assert not batch["replay_context", "state"].requires_grad
