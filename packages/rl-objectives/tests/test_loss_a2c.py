"""A2CLoss and ReinforceLoss on tiny cases computed by hand."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import (
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)

from rl.objectives import A2CLoss, HardUpdate, ReinforceLoss
from rl.objectives.value import GAE

PROBS = torch.tensor([0.5, 0.25, 0.25])
ENTROPY = -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))


def const_actor():
    lin = torch.nn.Linear(1, 3)
    with torch.no_grad():
        lin.weight.zero_()
        lin.bias.copy_(PROBS.log())
    return ProbabilisticTensorDictSequential(
        TensorDictModule(lin, ["obs"], ["logits"]),
        ProbabilisticTensorDictModule(
            ["logits"], ["action"], distribution_class=torch.distributions.Categorical
        ),
    )


def const_critic(value=0.5):
    lin = torch.nn.Linear(1, 1)
    with torch.no_grad():
        lin.weight.zero_()
        lin.bias.fill_(value)
    return TensorDictModule(lin, ["obs"], ["state_value"])


def data():
    # actions 0 (log 0.5) and 1 (log 0.25)
    return TensorDict(
        {
            "obs": torch.zeros(2, 1),
            "action": torch.tensor([0, 1]),
            "advantage": torch.tensor([[2.0], [-1.0]]),
            "value_target": torch.tensor([[1.5], [0.5]]),
        },
        [2],
    )


def rollout(b=2, t=4):
    g = torch.Generator().manual_seed(1)
    done = torch.zeros(b, t, 1, dtype=torch.bool)
    done[:, 1] = True
    return TensorDict(
        {
            "obs": torch.randn(b, t, 1, generator=g),
            "action": torch.randint(0, 3, (b, t), generator=g),
            "next": {
                "obs": torch.randn(b, t, 1, generator=g),
                "reward": torch.randn(b, t, 1, generator=g),
                "done": done,
                "terminated": done.clone(),
            },
        },
        [b, t],
    )


class TestA2C:
    def test_by_hand(self):
        loss = A2CLoss(
            const_actor(),
            const_critic(),
            entropy_coeff=0.5,
            critic_coeff=2.0,
            loss_critic_type="l2",
        )
        out = loss(data())
        # -(log 0.5 * 2 + log 0.25 * -1) / 2
        torch.testing.assert_close(
            out["loss_objective"], torch.tensor(-(2 * math.log(0.5) - math.log(0.25)) / 2)
        )
        torch.testing.assert_close(out["entropy"], torch.tensor(ENTROPY))
        torch.testing.assert_close(out["loss_entropy"], torch.tensor(-0.5 * ENTROPY))
        torch.testing.assert_close(out["loss_critic"], torch.tensor(2.0 * (1.0 + 0.0) / 2))
        assert set(out.keys()) == {"loss_objective", "loss_critic", "loss_entropy", "entropy"}

    def test_no_log_prob_needed_and_missing_action(self):
        d = data()
        del d["action"]
        with pytest.raises(
            KeyError, match=r"A2CLoss needs key 'action'.*set_keys\(action=\.\.\.\)"
        ):
            A2CLoss(const_actor(), const_critic())(d)

    def test_gradients(self):
        actor, critic = const_actor(), const_critic()
        out = A2CLoss(actor, critic)(data())
        out["loss_objective"].backward()
        assert actor.module[0].module.bias.grad is not None
        assert critic.module.bias.grad is None
        out["loss_critic"].backward()
        assert critic.module.bias.grad is not None

    def test_advantage_from_gae(self):
        actor, critic = const_actor(), const_critic(0.2)
        loss = A2CLoss(actor, critic, gamma=0.9)
        d = rollout()
        out = loss(d)
        adv = GAE(gamma=0.9, lmbda=0.95, value_network=critic)(d.clone())["advantage"]
        lp = PROBS[d["action"]].log().unsqueeze(-1)
        torch.testing.assert_close(out["loss_objective"], -(lp * adv).mean())

    def test_unknown_loss_critic_type(self):
        with pytest.raises(ValueError, match=r"valid ones are \['l1', 'l2', 'smooth_l1'\]"):
            A2CLoss(const_actor(), const_critic(), loss_critic_type="mse")

    def test_log_probs(self):
        loss = A2CLoss(const_actor(), const_critic())
        log_prob, dist = loss._log_probs(data())
        torch.testing.assert_close(log_prob, torch.tensor([[math.log(0.5)], [math.log(0.25)]]))
        torch.testing.assert_close(dist.probs, PROBS.expand(2, 3))

    def test_log_probs_refuses_an_action_with_grad(self):
        d = data()
        d["action"] = torch.tensor([0.0, 1.0], requires_grad=True)
        with pytest.raises(RuntimeError, match="tensordict stored action requires grad"):
            A2CLoss(const_actor(), const_critic())._log_probs(d)

    @pytest.mark.parametrize("clip_value", [0.5, torch.tensor(0.5)])
    def test_clip_value_needs_the_stored_value(self, clip_value):
        loss = A2CLoss(const_actor(), const_critic(), clip_value=clip_value)
        with pytest.raises(
            KeyError,
            match="clip_value is set to 0.5, but the key state_value was not found in the "
            "input tensordict. Make sure that the value_key passed to A2C exists",
        ):
            loss(data())
        d = data()
        d["state_value"] = torch.tensor([[1.0], [1.0]])
        # V = 0.5 is within 0.5 of the stored 1.0: nothing clipped
        assert loss(d)["loss_critic"].isfinite()

    @pytest.mark.parametrize("loss_cls", ["A2CLoss", "ReinforceLoss"])
    def test_clip_value_must_be_a_number(self, loss_cls):
        cls = {"A2CLoss": A2CLoss, "ReinforceLoss": ReinforceLoss}[loss_cls]
        with pytest.raises(
            ValueError, match="clip_value must be a float or a scalar tensor, got True"
        ):
            cls(const_actor(), const_critic(), clip_value=True)
        with pytest.raises(ValueError, match="got a tensor of shape \\(2,\\)"):
            cls(const_actor(), const_critic(), clip_value=torch.ones(2))


class TestReinforce:
    def test_by_hand(self):
        out = ReinforceLoss(const_actor(), const_critic(), loss_critic_type="l1")(data())
        torch.testing.assert_close(
            out["loss_actor"], torch.tensor(-(2 * math.log(0.5) - math.log(0.25)) / 2)
        )
        torch.testing.assert_close(out["loss_value"], torch.tensor((1.0 + 0.0) / 2))

    def test_clip_value_needs_the_stored_value(self):
        loss = ReinforceLoss(const_actor(), const_critic(), clip_value=0.5)
        with pytest.raises(KeyError, match="the value_key passed to Reinforce exists"):
            loss(data())

    def test_updater_needs_a_loss_module(self):
        with pytest.raises(ValueError, match="The loss_module must be a LossModule instance"):
            HardUpdate(torch.nn.Linear(1, 1))

    def test_updater_needs_target_parameters(self):
        with pytest.raises(RuntimeError, match="Did not find any target parameters or buffers"):
            HardUpdate(ReinforceLoss(const_actor(), const_critic()))

    def test_actor_loss_does_not_train_the_critic(self):
        actor, critic = const_actor(), const_critic()
        ReinforceLoss(actor, critic)(data())["loss_actor"].backward()
        assert critic.module.bias.grad is None and actor.module[0].module.bias.grad is not None

    def test_delay_value_uses_the_target_critic(self):
        actor, critic = const_actor(), const_critic(0.0)
        loss = ReinforceLoss(actor, critic, delay_value=True, gamma=0.5)
        assert not any(t is p for t in loss.buffers() for p in loss.parameters())
        with torch.no_grad():
            critic.module.bias.fill_(1.0)  # online critic moves, the target stays at 0
        d = rollout()
        out_td = d.clone()
        loss.value_estimator(out_td, target_params=loss.target_critic_network_params)
        torch.testing.assert_close(out_td["next", "state_value"], torch.zeros(2, 4, 1))
        torch.testing.assert_close(out_td["state_value"], torch.ones(2, 4, 1))
        updater = HardUpdate(loss, value_network_update_interval=1)
        updater.step()
        loss.value_estimator(out_td, target_params=loss.target_critic_network_params)
        torch.testing.assert_close(out_td["next", "state_value"], torch.ones(2, 4, 1))
        assert loss(d)["loss_actor"].isfinite()


class TestA2CKeys:
    def test_sample_log_prob_is_kept_not_read(self):
        loss = A2CLoss(const_actor(), const_critic())
        assert loss.tensor_keys.sample_log_prob == "action_log_prob"
        loss.set_keys(sample_log_prob="lp")
        assert loss.tensor_keys.sample_log_prob == "lp" and "lp" not in loss.in_keys

    def test_next_state_in_keys_but_optional(self):
        loss = A2CLoss(const_actor(), const_critic())
        assert ("next", "obs") in loss.in_keys
        # an advantage and a value target are given: no next state needed
        assert loss(data())["loss_objective"].isfinite()


def test_reinforce_log_prob_key_default_follows_the_aggregate_setting():
    """As TorchRL: "action_log_prob" (tensordict's default), "sample_log_prob" when the
    composite log-probs are aggregated."""
    from tensordict.nn import set_composite_lp_aggregate

    from rl.objectives import ReinforceLoss

    assert ReinforceLoss._AcceptedKeys().sample_log_prob == "action_log_prob"
    with set_composite_lp_aggregate(True):
        assert ReinforceLoss._AcceptedKeys().sample_log_prob == "sample_log_prob"
