"""SACLoss and DiscreteSACLoss on hand-computed cases.

A deterministic "distribution" makes SAC computable by hand: rsample() is mu(s) = 0.5 s
and log_prob(a) = -a^2. Critics: Q1 = s + 2a, Q2 = s + a. Transition: s = 1, a = 0.2,
s' = 2, r = 1, gamma = 0.9, alpha = 0.5.
"""

import math

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import (
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)
from torch import nn

from rl.core import Bounded
from rl.modules import OneHotCategorical, ProbabilisticActor, TanhNormal
from rl.objectives import DiscreteSACLoss, SACLoss, SoftUpdate


class _Det(torch.distributions.Distribution):
    arg_constraints = {}

    def __init__(self, loc):
        self.loc = loc
        super().__init__(
            batch_shape=loc.shape[:-1], event_shape=loc.shape[-1:], validate_args=False
        )

    def rsample(self, sample_shape=()):
        return self.loc

    def log_prob(self, value):
        return -(value**2).sum(-1)


class QNet(nn.Module):
    def __init__(self, w=(1.0, 2.0)):
        super().__init__()
        self.linear = nn.Linear(2, 1, bias=False)
        with torch.no_grad():
            self.linear.weight.copy_(torch.tensor([w]))

    def forward(self, obs, act):
        return self.linear(torch.cat([obs, act], -1))


def _det_actor():
    lin = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        lin.weight.fill_(0.5)
    return ProbabilisticTensorDictSequential(
        TensorDictModule(lin, ["observation"], ["loc"]),
        ProbabilisticTensorDictModule(["loc"], ["action"], distribution_class=_Det),
    )


def _critic():
    return TensorDictModule(QNet(), ["observation", "action"], ["state_action_value"])


def _data(n=1):
    return TensorDict(
        observation=torch.ones(n, 1),
        action=torch.full((n, 1), 0.2),
        next=TensorDict(
            observation=torch.full((n, 1), 2.0),
            reward=torch.ones(n, 1),
            done=torch.zeros(n, 1, dtype=torch.bool),
            terminated=torch.zeros(n, 1, dtype=torch.bool),
            batch_size=[n],
        ),
        batch_size=[n],
    )


def _sac(**kwargs):
    actor = _det_actor()
    loss = SACLoss(actor, _critic(), gamma=0.9, alpha_init=0.5, **kwargs)
    with torch.no_grad():
        loss.qvalue_network_params.get(("module", "linear", "weight")).copy_(
            torch.tensor([[[1.0, 2.0]], [[1.0, 1.0]]])
        )
    SoftUpdate(loss, tau=0.005)
    return loss, actor


class TestSACLoss:
    def test_values(self):
        loss, _ = _sac()
        td = _data()
        out = loss(td)
        # a' = 1, log pi' = -1: min(4 + 0.5, 3 + 0.5) = 3.5; target = 1 + 0.9 * 3.5 = 4.15
        # smooth_l1: (2.75 - 0.5) + (2.95 - 0.5) = 4.7
        torch.testing.assert_close(out["loss_qvalue"], torch.tensor(4.7))
        torch.testing.assert_close(td["td_error"], torch.tensor([2.95]))
        # a = 0.5, log pi = -0.25: 0.5 * -0.25 - min(2, 1.5)
        torch.testing.assert_close(out["loss_actor"], torch.tensor(-1.625))
        # target_entropy auto = -1 (one action dim, read from the batch)
        torch.testing.assert_close(out["loss_alpha"], torch.tensor(-math.log(0.5) * (-0.25 - 1.0)))
        torch.testing.assert_close(out["alpha"], torch.tensor(0.5))
        torch.testing.assert_close(out["entropy"], torch.tensor(0.25))

    def test_gradients_reach_only_their_parameters(self):
        loss, actor = _sac()
        out = loss(_data())
        q = loss.qvalue_network_params.get(("module", "linear", "weight"))
        out["loss_actor"].backward(retain_graph=True)
        # d/dw [0.5 * -(w s)^2 - (s + w s)] at w = 0.5, s = 1: -0.5 - 1
        torch.testing.assert_close(actor[0].module.weight.grad, torch.tensor([[-1.5]]))
        assert q.grad is None and loss.log_alpha.grad is None
        actor[0].module.weight.grad = None
        out["loss_qvalue"].backward(retain_graph=True)
        assert actor[0].module.weight.grad is None and loss.log_alpha.grad is None
        assert q.grad is not None
        q.grad = None
        out["loss_alpha"].backward()
        torch.testing.assert_close(loss.log_alpha.grad, torch.tensor(1.25))
        assert q.grad is None and actor[0].module.weight.grad is None
        assert all(t.grad is None for t in loss.target_qvalue_network_params.values(True, True))
        names = {n for n, _ in loss.named_parameters()}
        assert names == {
            "actor_network_params.module.0.module.weight",
            "qvalue_network_params.module.linear.weight",
            "log_alpha",
        }

    def test_target_entropy(self):
        assert (
            SACLoss(
                _det_actor(), _critic(), action_spec=Bounded(-1, 1, shape=(6,))
            ).target_entropy.item()
            == -6.0
        )
        actor = _det_actor()
        actor.spec = Bounded(-1, 1, shape=(3,))
        assert SACLoss(actor, _critic()).target_entropy.item() == -3.0
        assert SACLoss(_det_actor(), _critic(), target_entropy=-0.5).target_entropy.item() == -0.5
        loss = SACLoss(_det_actor(), _critic())
        with pytest.raises(RuntimeError, match="target_entropy='auto' could not be sized"):
            _ = loss.target_entropy

    def test_alpha_clamp_and_fixed(self):
        loss, _ = _sac(min_alpha=0.6, max_alpha=2.0)
        torch.testing.assert_close(loss(_data())["alpha"], torch.tensor(0.6))
        fixed, _ = _sac(fixed_alpha=True)
        assert "log_alpha" not in {n for n, _ in fixed.named_parameters()}
        assert "log_alpha" in fixed.state_dict()

    def test_value_network_v1(self):
        value = TensorDictModule(nn.Linear(1, 1, bias=False), ["observation"], ["state_value"])
        with torch.no_grad():
            value.module.weight.fill_(3.0)
        loss, _ = _sac(value_network=value)
        loss = SACLoss(_det_actor(), _critic(), value, gamma=0.9, alpha_init=0.5)
        with torch.no_grad():
            loss.qvalue_network_params.get(("module", "linear", "weight")).copy_(
                torch.tensor([[[1.0, 2.0]], [[1.0, 1.0]]])
            )
        SoftUpdate(loss, tau=0.005)
        out = loss(_data())
        # Q target = 1 + 0.9 * V_target(2) = 1 + 0.9 * 6 = 6.4; preds 1.4, 1.2 -> 4.5 + 4.7
        torch.testing.assert_close(out["loss_qvalue"], torch.tensor(9.2))
        # V(1) = 3 vs min(2, 1.5) - 0.5 * -0.25 = 1.625 -> smooth_l1 1.375 - 0.5
        torch.testing.assert_close(out["loss_value"], torch.tensor(0.875))

    def test_tanh_normal_seeded(self):
        # the same update written with torch.distributions and the same random draws
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(3, 4), NormalParamExtractor())
        actor = ProbabilisticActor(
            TensorDictModule(net, ["observation"], ["loc", "scale"]),
            in_keys=["loc", "scale"],
            distribution_class=TanhNormal,
        )
        qnet = TensorDictModule(QNet3(), ["observation", "action"], ["state_action_value"])
        loss = SACLoss(
            actor, qnet, gamma=0.9, loss_function="l2", num_qvalue_nets=1, target_entropy=-2.0
        )
        td = TensorDict(
            observation=torch.randn(5, 3),
            action=torch.rand(5, 2) * 2 - 1,
            next=TensorDict(
                observation=torch.randn(5, 3),
                reward=torch.randn(5, 1),
                done=torch.zeros(5, 1, dtype=torch.bool),
                terminated=torch.tensor([[True], [False], [False], [True], [False]]),
                batch_size=[5],
            ),
            batch_size=[5],
        )
        torch.manual_seed(1)
        out = loss(td.clone())

        def sample(obs):
            loc, scale = net(obs)
            base = torch.distributions.Normal(loc, scale)
            u = base.rsample()
            a = torch.tanh(u)
            logp = (base.log_prob(u) - torch.log1p(-a.pow(2).clamp(max=1 - 1e-6))).sum(-1)
            return a, logp

        q = qnet.module
        torch.manual_seed(1)
        with torch.no_grad():
            a2, lp2 = sample(td["next", "observation"])
            nv = q(td["next", "observation"], a2) - lp2.unsqueeze(-1)
            target = td["next", "reward"] + 0.9 * (~td["next", "terminated"]) * nv
        pred = q(td["observation"], td["action"])
        a, lp = sample(td["observation"])
        torch.testing.assert_close(
            out["loss_qvalue"], (pred - target).pow(2).mean(), rtol=1e-4, atol=1e-5
        )
        torch.testing.assert_close(
            out["loss_actor"],
            (lp - q(td["observation"], a).squeeze(-1)).mean(),
            rtol=1e-4,
            atol=1e-4,
        )
        torch.testing.assert_close(
            out["loss_alpha"], (-0.0 * (lp - 2.0)).mean(), rtol=1e-4, atol=1e-4
        )

    def test_compile_matches_eager(self):
        loss, _ = _sac()
        eager = loss(_data(4))
        compiled = torch.compile(loss, backend="aot_eager")(_data(4))
        for key in ("loss_actor", "loss_qvalue", "loss_alpha"):
            torch.testing.assert_close(compiled[key], eager[key])

    def test_missing_action(self):
        loss, _ = _sac()
        td = _data()
        del td["action"]
        with pytest.raises(
            KeyError, match=r"SACLoss needs key 'action'.*set_keys\(action=\.\.\.\)"
        ):
            loss(td)


class QNet3(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(5, 1)

    def forward(self, obs, act):
        return self.linear(torch.cat([obs, act], -1))


class TestDiscreteSACLoss:
    def _loss(self):
        actor_lin = nn.Linear(1, 2)
        q_lin = nn.Linear(1, 2)
        with torch.no_grad():
            actor_lin.weight.copy_(torch.tensor([[1.0], [-1.0]]))
            actor_lin.bias.zero_()
            q_lin.weight.copy_(torch.tensor([[1.0], [2.0]]))
            q_lin.bias.zero_()
        actor = ProbabilisticActor(
            TensorDictModule(actor_lin, ["observation"], ["logits"]),
            in_keys=["logits"],
            distribution_class=OneHotCategorical,
        )
        qnet = TensorDictModule(q_lin, ["observation"], ["action_value"])
        loss = DiscreteSACLoss(
            actor,
            qnet,
            action_space="one-hot",
            num_actions=2,
            num_qvalue_nets=1,
            gamma=0.9,
            loss_function="l2",
        )
        return loss

    def test_values(self):
        loss = self._loss()
        td = _data()
        td["action"] = torch.tensor([[0, 1]])
        out = loss(td)
        # s' = 2: pi = softmax([2, -2]); Q(s') = [2, 4]
        p2 = torch.softmax(torch.tensor([2.0, -2.0]), 0)
        v2 = (p2 * (torch.tensor([2.0, 4.0]) - p2.log())).sum()
        target = 1 + 0.9 * v2
        torch.testing.assert_close(out["loss_qvalue"], (2.0 - target) ** 2)  # Q(s=1, a=1) = 2
        p1 = torch.softmax(torch.tensor([1.0, -1.0]), 0)
        torch.testing.assert_close(
            out["loss_actor"], (p1 * (p1.log() - torch.tensor([1.0, 2.0]))).sum()
        )
        neg_h = (p1 * p1.log()).sum()
        torch.testing.assert_close(out["loss_alpha"], -0.0 * (neg_h + 0.98 * math.log(2)))
        torch.testing.assert_close(out["entropy"], -neg_h)
        torch.testing.assert_close(loss.target_entropy, torch.tensor(0.98 * math.log(2)))
        torch.testing.assert_close(td["td_error"], (2.0 - target).abs().reshape(1))


def _terminal_data():
    """Two transitions; the second ends in a terminal state whose observation is NaN."""
    td = _data(2)
    td["next", "terminated"][1] = True
    td["next", "done"][1] = True
    return td


class TestSkipDoneStates:
    def test_sac_same_losses_and_no_nan(self):
        td = _terminal_data()
        loss, _ = _sac(skip_done_states=True)
        out = loss(td.clone())
        # transition 0 as in TestSACLoss.test_values: target 4.15; transition 1 is
        # terminal: target r = 1, Q_1 = 1 + 0.4 = 1.4, Q_2 = 1.2 (smooth_l1: 0.08 + 0.02)
        torch.testing.assert_close(out["loss_qvalue"], torch.tensor((4.7 + 0.1) / 2))
        nan_td = td.clone()
        nan_td["next", "observation"][1] = float("nan")
        out_nan = loss(nan_td)
        assert all(v.isfinite().all() for v in out_nan.values())
        torch.testing.assert_close(out_nan["loss_qvalue"], out["loss_qvalue"])
        plain, _ = _sac()
        assert plain(nan_td.clone())["loss_qvalue"].isnan()

    def test_sac_all_terminal(self):
        td = _terminal_data()
        td["next", "terminated"][:] = True
        td["next", "observation"][:] = float("nan")
        loss, _ = _sac(skip_done_states=True)
        out = loss(td)
        # targets are the rewards: Q_1 = 1.4, Q_2 = 1.2 against 1
        torch.testing.assert_close(out["loss_qvalue"], torch.tensor(0.1))

    def test_truncated_states_are_skipped_too(self):
        # done without terminated (a time limit): skipped as TorchRL does, the next value
        # taken as 0, so a garbage next observation there never reaches the networks
        td = _terminal_data()
        td["next", "terminated"][1] = False
        td["next", "observation"][1] = float("nan")
        loss, _ = _sac(skip_done_states=True)
        out = loss(td)
        assert all(v.isfinite().all() for v in out.values())
        # transition 1's target is its reward alone: Q_1 = 1.4, Q_2 = 1.2 against 1
        torch.testing.assert_close(out["loss_qvalue"], torch.tensor((4.7 + 0.1) / 2))

    def test_discrete_sac(self):
        loss = TestDiscreteSACLoss()._loss()
        loss.skip_done_states = True
        td = _terminal_data()
        td["action"] = torch.tensor([[0, 1], [0, 1]])
        out = loss(td.clone())
        p2 = torch.softmax(torch.tensor([2.0, -2.0]), 0)
        target0 = 1 + 0.9 * (p2 * (torch.tensor([2.0, 4.0]) - p2.log())).sum()
        expected = ((2.0 - target0) ** 2 + (2.0 - 1.0) ** 2) / 2
        torch.testing.assert_close(out["loss_qvalue"], expected)
        td["next", "observation"][1] = float("nan")
        torch.testing.assert_close(loss(td)["loss_qvalue"], expected)

    def test_constructor_arguments(self):
        loss, _ = _sac(skip_done_states=True, deactivate_vmap=True)
        assert loss.skip_done_states and loss.deactivate_vmap
        actor = TestDiscreteSACLoss()._loss().actor_network
        qnet = TensorDictModule(nn.Linear(1, 2), ["observation"], ["action_value"])
        d = DiscreteSACLoss(actor, qnet, action_space="one-hot", skip_done_states=True)
        assert d.skip_done_states and d.delay_actor is False


class TestScalarOutputMode:
    def test_exclude_by_default(self):
        loss, _ = _sac(reduction="none")
        out = loss(_data(3))
        assert set(out.keys()) == {"loss_actor", "loss_qvalue", "loss_alpha"}
        assert out.batch_size == torch.Size([3])
        torch.testing.assert_close(out["loss_qvalue"], torch.full((3,), 4.7))

    def test_non_tensor(self):
        loss, _ = _sac(reduction="none", scalar_output_mode="non_tensor")
        out = loss(_data(3))
        torch.testing.assert_close(out["alpha"], torch.tensor(0.5))
        torch.testing.assert_close(out["entropy"], torch.tensor(0.25))

    def test_reduced_outputs_keep_scalars(self):
        loss, _ = _sac(scalar_output_mode="exclude")
        assert {"alpha", "entropy"} <= set(loss(_data()).keys())

    def test_discrete(self):
        loss = TestDiscreteSACLoss()._loss()
        loss.reduction = "none"
        td = _data(2)
        td["action"] = torch.tensor([[0, 1], [1, 0]])
        assert set(loss(td).keys()) == {"loss_actor", "loss_qvalue", "loss_alpha"}

    def test_bad_mode(self):
        with pytest.raises(ValueError, match="unknown scalar_output_mode 'keep'"):
            _sac(scalar_output_mode="keep")


class TestListOfQNetworks:
    def _critics(self):
        return [
            TensorDictModule(QNet(w), ["observation", "action"], ["state_action_value"])
            for w in ((1.0, 2.0), (1.0, 1.0))
        ]

    def test_their_weights_are_stacked(self):
        critics = self._critics()
        loss = SACLoss(_det_actor(), critics, gamma=0.9, alpha_init=0.5)
        weight = loss.qvalue_network_params.get(("module", "linear", "weight"))
        assert isinstance(weight, nn.Parameter)
        torch.testing.assert_close(weight.data, torch.tensor([[[1.0, 2.0]], [[1.0, 1.0]]]))
        SoftUpdate(loss, tau=0.005)
        # the same numbers as TestSACLoss.test_values, whose twins were set by hand
        torch.testing.assert_close(loss(_data())["loss_qvalue"], torch.tensor(4.7))
        # the user's networks are neither rebound nor trained by the loss
        assert critics[1].module.linear.weight is not weight
        torch.testing.assert_close(critics[1].module.linear.weight, torch.tensor([[1.0, 1.0]]))

    def test_shared_tensor_is_expanded(self):
        critics = self._critics()
        critics[1].module.linear.weight = critics[0].module.linear.weight
        loss = SACLoss(_det_actor(), critics)
        weight = loss.qvalue_network_params.get(("module", "linear", "weight"))
        assert not isinstance(weight, nn.Parameter) and weight.shape == (2, 1, 2)

    def test_length_must_match(self):
        with pytest.raises(RuntimeError, match="must match the length of the module list"):
            SACLoss(_det_actor(), self._critics(), num_qvalue_nets=3)

    def test_structures_must_match(self):
        other = TensorDictModule(QNet3(), ["observation", "action"], ["state_action_value"])
        with pytest.raises(ValueError, match="must share one structure"):
            SACLoss(_det_actor(), [self._critics()[0], other])

    def test_updater_views(self):
        loss = SACLoss(_det_actor(), self._critics())
        updater = SoftUpdate(loss, eps=0.5)
        before = updater._targets.clone()
        with torch.no_grad():
            for source in updater._sources.values(True, True):
                source.add_(1)
        updater.step()
        for key, target in updater._targets.items(True, True):
            torch.testing.assert_close(target, before.get(key) + 0.5)


class TestKeys:
    def test_set_keys_refreshes_in_keys(self):
        loss = TestDiscreteSACLoss()._loss()
        assert ("next", "observation") in loss.in_keys
        loss.set_keys(action="action2", reward="reward2")
        assert "action2" in loss.in_keys and ("next", "reward2") in loss.in_keys
        assert ("next", "action2") not in loss.in_keys

    def test_keyword_call_with_remapped_keys(self):
        loss = TestDiscreteSACLoss()._loss()
        loss.set_keys(action="action2")
        td = _data()
        by_td = loss(td.clone().set("action2", torch.tensor([[0, 1]])).exclude("action"))
        out = loss(
            observation=td["observation"],
            action2=torch.tensor([[0, 1]]),
            next_observation=td["next", "observation"],
            next_reward=td["next", "reward"],
            next_done=td["next", "done"],
            next_terminated=td["next", "terminated"],
        )
        torch.testing.assert_close(out[1], by_td["loss_qvalue"])

    def test_sac_log_prob_key_follows_the_actor(self):
        loss, _ = _sac()
        assert loss.tensor_keys.log_prob == "action_log_prob"


class TestMultiAgentCritic:
    """SACLoss with a MultiAgentMLP critic (parameters held in a TensorDictParams), as
    TorchRL's multi-agent SAC: the twin critics are stacked, drawn apart, and trained."""

    @pytest.mark.parametrize("share_params", [True, False])
    def test_twin_multiagent_critics(self, share_params):
        from rl.modules import MultiAgentMLP

        torch.manual_seed(0)
        n_agents, n_obs = 3, 4
        actor_net = nn.Sequential(
            MultiAgentMLP(n_obs, 2, n_agents, centralized=False, share_params=True, depth=1),
            NormalParamExtractor(),
        )
        actor = ProbabilisticActor(
            TensorDictModule(
                actor_net, [("agents", "observation")], [("agents", "loc"), ("agents", "scale")]
            ),
            in_keys=[("agents", "loc"), ("agents", "scale")],
            out_keys=[("agents", "action")],
            distribution_class=TanhNormal,
        )
        critic_net = MultiAgentMLP(
            n_obs + 1, 1, n_agents, centralized=True, share_params=share_params, depth=1
        )
        critic = TensorDictModule(
            critic_net,
            [("agents", "observation"), ("agents", "action")],
            [("agents", "state_action_value")],
        )
        loss = SACLoss(actor, critic, target_entropy=-1.0)
        loss.set_keys(
            state_action_value=("agents", "state_action_value"),
            action=("agents", "action"),
            reward=("agents", "reward"),
            done=("agents", "done"),
            terminated=("agents", "terminated"),
        )
        b = 5
        agents = lambda: TensorDict(  # noqa: E731
            observation=torch.randn(b, n_agents, n_obs),
            action=torch.rand(b, n_agents, 1) * 2 - 1,
            reward=torch.randn(b, n_agents, 1),
            done=torch.zeros(b, n_agents, 1, dtype=torch.bool),
            terminated=torch.zeros(b, n_agents, 1, dtype=torch.bool),
            batch_size=[b, n_agents],
        )
        data = TensorDict(
            agents=agents(), next=TensorDict(agents=agents(), batch_size=[b]), batch_size=[b]
        )
        q_params = list(loss.qvalue_network_params.values(True, True))
        # two members, drawn independently (identical twins would stay identical)
        assert all(p.shape[0] == 2 for p in q_params)
        assert all(not torch.equal(p[0], p[1]) for p in q_params)
        out = loss(data)
        (out["loss_actor"] + out["loss_qvalue"]).backward()
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in q_params)
        assert all(p.grad.abs().sum() > 0 for p in actor.parameters())
        # the user's critic is left as it was (the loss trains its own stacked copies)
        assert all(p.grad is None for p in critic.parameters())


def test_composite_log_prob_is_summed_over_heads():
    from rl.objectives._actions import _sum_action_dims

    action = TensorDict(a=torch.zeros(4, 2), b=torch.zeros(4, 3), batch_size=[4])
    log_prob = TensorDict(a_log_prob=torch.ones(4), b_log_prob=torch.full((4, 3), 2.0))
    torch.testing.assert_close(_sum_action_dims(log_prob, action), torch.full((4,), 7.0))
