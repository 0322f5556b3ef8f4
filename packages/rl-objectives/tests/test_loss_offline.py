"""Offline losses (IQL, CQL, TD3+BC, BC) on tiny cases computed by hand.

Networks are linear maps with set weights on a 1-d observation and a 1-d action, so
every value below follows from a few lines of arithmetic. Where a loss samples actions,
the reference replays the same draws (the loss's documented order: the same as
TorchRL's) in a plain per-sample loop.
"""

import math

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from rl.core import Bounded, Unbounded
from rl.modules import (
    Actor,
    IndependentNormal,
    OneHotCategorical,
    ProbabilisticActor,
    TanhNormal,
)
from rl.objectives import (
    BCLoss,
    CQLLoss,
    DiscreteCQLLoss,
    DiscreteIQLLoss,
    IQLLoss,
    SoftUpdate,
    TD3BCLoss,
)

GAMMA = 0.9
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


# ----------------------------------------------------------------- networks
class LocScale(nn.Module):
    """loc = w * obs, scale = a constant."""

    def __init__(self, w=0.5, scale=1.0):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(w))
        self.scale = scale

    def forward(self, obs):
        return self.w * obs, torch.full_like(obs, self.scale)


class Linear2(nn.Module):
    """Q(s, a) = ws * s + wa * a + b."""

    def __init__(self, ws=1.0, wa=1.0, b=0.0):
        super().__init__()
        self.linear = nn.Linear(2, 1)
        with torch.no_grad():
            self.linear.weight.copy_(torch.tensor([[ws, wa]]))
            self.linear.bias.fill_(b)

    def forward(self, obs, act):
        return self.linear(torch.cat([obs, act], -1))


def _linear(weight, bias):
    lin = nn.Linear(len(weight[0]), len(weight))
    with torch.no_grad():
        lin.weight.copy_(torch.tensor(weight))
        lin.bias.copy_(torch.tensor(bias))
    return lin


def normal_actor(w=0.5, scale=1.0):
    body = TensorDictModule(LocScale(w, scale), ["observation"], ["loc", "scale"])
    return ProbabilisticActor(body, in_keys=["loc", "scale"], distribution_class=IndependentNormal)


def tanh_actor(w=0.5, scale=0.5, spec=None):
    body = TensorDictModule(LocScale(w, scale), ["observation"], ["loc", "scale"])
    return ProbabilisticActor(
        body,
        in_keys=["loc", "scale"],
        spec=Bounded(-1.0, 1.0, (1,)) if spec is None else spec,
        distribution_class=TanhNormal,
    )


def qnet():
    return TensorDictModule(Linear2(), ["observation", "action"], ["state_action_value"])


def vnet(w=0.5):
    return TensorDictModule(_linear([[w]], [0.0]), ["observation"], ["state_value"])


def set_critics(loss, rows, name="qvalue_network"):
    """Give member i of an ensemble of Linear2 critics the weights ``rows[i] = (ws, wa, b)``."""
    w = torch.tensor([[[ws, wa]] for ws, wa, _ in rows])
    b = torch.tensor([[bias] for _, _, bias in rows])
    with torch.no_grad():
        for params in (
            getattr(loss, name + "_params"),
            loss._modules.get("target_" + name + "_params"),
        ):
            if params is None:
                continue
            params.get(("module", "linear", "weight")).copy_(w)
            params.get(("module", "linear", "bias")).copy_(b)


CRITICS = [(1.0, 1.0, 0.0), (0.5, 1.0, 0.5)]


def q_ref(rows, s, a):
    return torch.stack([ws * s + wa * a + b for ws, wa, b in rows])


def data(action=None, n=2):
    obs = torch.tensor([[1.0], [2.0]])[:n]
    if action is None:
        action = torch.tensor([[0.5], [-0.5]])[:n]
    return TensorDict(
        observation=obs,
        action=action,
        next=TensorDict(
            observation=torch.tensor([[0.0], [1.0]])[:n],
            reward=torch.tensor([[1.0], [2.0]])[:n],
            done=torch.tensor([[False], [True]])[:n],
            terminated=torch.tensor([[False], [True]])[:n],
            batch_size=[n],
        ),
        batch_size=[n],
    )


S = torch.tensor([1.0, 2.0])
S_NEXT = torch.tensor([0.0, 1.0])
A = torch.tensor([0.5, -0.5])
R = torch.tensor([1.0, 2.0])
NOT_TERM = torch.tensor([1.0, 0.0])


def smooth_l1(d):
    return torch.where(d.abs() < 1, 0.5 * d**2, d.abs() - 0.5)


def normal_log_prob(x, loc, scale):
    return -0.5 * ((x - loc) / scale) ** 2 - math.log(scale) - HALF_LOG_2PI


def tanh_normal(eps, loc, scale):
    """(action, log_prob) of a TanhNormal draw with standard noise ``eps``."""
    x = loc + scale * eps
    return torch.tanh(x), normal_log_prob(x, loc, scale) - torch.log1p(-(torch.tanh(x) ** 2))


def grads(module):
    """The networks (first name component) whose parameters received a non-zero gradient."""
    return {
        n.split(".")[0]
        for n, p in module.named_parameters()
        if p.grad is not None and p.grad.abs().sum() > 0
    }


# ----------------------------------------------------------------------- IQL
class TestIQLLoss:
    def make(self, **kw):
        loss = IQLLoss(normal_actor(), qnet(), vnet(), gamma=GAMMA, **kw)
        set_critics(loss, CRITICS)
        return loss

    def test_values(self):
        loss = self.make(expectile=0.7, temperature=2.0)
        td = data()
        out = loss(td)
        q = q_ref(CRITICS, S, A)  # [[1.5, 1.5], [1.5, 1.0]]
        min_q = q.min(0).values
        v = 0.5 * S
        diff = min_q - v  # [1, 0]
        w = torch.where(diff > 0, 0.7, 0.3)
        torch.testing.assert_close(out["loss_value"], (w * diff**2).mean())
        torch.testing.assert_close(out["loss_value"], torch.tensor(0.35))
        target = R + GAMMA * NOT_TERM * 0.5 * S_NEXT  # [1, 2]
        torch.testing.assert_close(out["loss_qvalue"], smooth_l1(q - target).sum(0).mean())
        torch.testing.assert_close(out["loss_qvalue"], torch.tensor(0.4375))
        log_prob = normal_log_prob(A, 0.5 * S, 1.0)
        expected_actor = -(torch.exp(2.0 * diff).clamp_max(100) * log_prob).mean()
        torch.testing.assert_close(out["loss_actor"], expected_actor)
        torch.testing.assert_close(out["entropy"], -log_prob.mean())
        torch.testing.assert_close(td["td_error"], ((q - target) ** 2).max(0).values)
        torch.testing.assert_close(td["_log_prob"], log_prob)

    def test_gradients_reach_only_their_network(self):
        loss = self.make()
        out = loss(data())
        out["loss_actor"].backward()
        assert grads(loss) == {"actor_network_params"}
        loss.zero_grad(set_to_none=True)
        out = loss(data())
        out["loss_value"].backward()
        assert grads(loss) == {"value_network_params"}
        loss.zero_grad(set_to_none=True)
        out = loss(data())
        out["loss_qvalue"].backward()
        assert grads(loss) == {"qvalue_network_params"}

    def test_targets_outside_parameters_and_soft_update(self):
        loss = self.make()
        names = {n for n, _ in loss.named_parameters()}
        assert not any("target" in n for n in names)
        assert "target_qvalue_network_params.module.linear.weight" in loss.state_dict()
        updater = SoftUpdate(loss, tau=0.5)
        with torch.no_grad():
            loss.qvalue_network_params.get(("module", "linear", "bias")).add_(2.0)
        updater.step()
        torch.testing.assert_close(
            loss.target_qvalue_network_params.get(("module", "linear", "bias")),
            torch.tensor([[1.0], [1.5]]),
        )

    def test_state_dict_round_trip(self):
        loss = self.make(expectile=0.7)
        other = IQLLoss(normal_actor(w=-1.0), qnet(), vnet(w=3.0), gamma=GAMMA, expectile=0.7)
        other.load_state_dict(loss.state_dict())
        a, b = loss(data()), other(data())
        for key in ("loss_actor", "loss_qvalue", "loss_value"):
            torch.testing.assert_close(a[key], b[key])

    def test_set_keys(self):
        loss = self.make()
        expected = loss(data())
        loss.set_keys(reward="r", terminated="term", priority="prio")
        td = data()
        td["next", "r"] = td["next"].pop("reward")
        td["next", "term"] = td["next"].pop("terminated")
        out = loss(td)
        torch.testing.assert_close(out["loss_qvalue"], expected["loss_qvalue"])
        assert "prio" in td.keys() and "td_error" not in td.keys()

    def test_missing_key(self):
        loss = self.make()
        td = data()
        del td["action"]
        with pytest.raises(KeyError, match=r"IQLLoss needs key 'action'.*set_keys\(action="):
            loss(td)

    def test_value_estimator(self):
        from rl.objectives.value import ValueEstimators

        loss = self.make()
        loss.make_value_estimator(ValueEstimators.TD0, gamma=0.5)
        out = loss(data())
        q = q_ref(CRITICS, S, A)
        target = R + 0.5 * NOT_TERM * 0.5 * S_NEXT
        torch.testing.assert_close(out["loss_qvalue"], smooth_l1(q - target).sum(0).mean())
        with pytest.raises(ValueError, match="does not support the GAE"):
            loss.make_value_estimator(ValueEstimators.GAE)

    def test_bad_arguments(self):
        with pytest.raises(ValueError, match=r"expectile must lie in \[0, 1\], got 1.5"):
            IQLLoss(normal_actor(), qnet(), vnet(), expectile=1.5)
        # the closed ends are valid: 1.0 weighs only positive errors (V -> max Q)
        loss = IQLLoss(normal_actor(), qnet(), vnet(), expectile=1.0)
        diff = torch.tensor([-2.0, 3.0])
        assert loss.loss_value_diff(diff, loss.expectile).tolist() == [0.0, 9.0]
        with pytest.raises(ValueError, match="unknown loss_function 'huber'"):
            IQLLoss(normal_actor(), qnet(), vnet(), loss_function="huber")

    def test_reduction_none(self):
        loss = self.make(reduction="none", expectile=0.7)
        out = loss(data())
        assert out.batch_size == torch.Size([2])
        torch.testing.assert_close(out["loss_value"], torch.tensor([0.7, 0.0]))
        assert "entropy" not in out.keys()


class TestDiscreteIQLLoss:
    def make(self, space):
        dist = OneHotCategorical if space == "one-hot" else torch.distributions.Categorical
        actor = ProbabilisticActor(
            TensorDictModule(_linear([[1.0], [-1.0]], [0.0, 0.0]), ["observation"], ["logits"]),
            in_keys=["logits"],
            distribution_class=dist,
        )
        q = TensorDictModule(
            _linear([[1.0], [2.0]], [0.0, 0.0]), ["observation"], ["state_action_value"]
        )
        loss = DiscreteIQLLoss(
            actor, q, vnet(), action_space=space, gamma=GAMMA, expectile=0.8, temperature=1.0
        )
        with torch.no_grad():  # critic 2: Q(s) = [2 s, -s]
            loss.qvalue_network_params.get(("module", "weight"))[1].copy_(
                torch.tensor([[2.0], [-1.0]])
            )
            loss.qvalue_network_params.get(("module", "bias")).zero_()
            loss.target_qvalue_network_params.update_(loss.qvalue_network_params.data)
        return loss

    def test_values_one_hot_and_categorical_agree(self):
        one_hot = self.make("one-hot")(data(action=torch.tensor([[1, 0], [0, 1]])))
        categorical = self.make("categorical")(data(action=torch.tensor([0, 1])))
        for key in ("loss_actor", "loss_qvalue", "loss_value"):
            torch.testing.assert_close(one_hot[key], categorical[key])
        # chosen Q: critic 1 [s, 2s] -> [1, 4]; critic 2 [2s, -s] -> [2, -2]; min [1, -2]
        min_q = torch.tensor([1.0, -2.0])
        diff = min_q - 0.5 * S
        w = torch.where(diff > 0, 0.8, 0.2)
        torch.testing.assert_close(one_hot["loss_value"], (w * diff**2).mean())
        target = R + GAMMA * NOT_TERM * 0.5 * S_NEXT
        pred = torch.tensor([[1.0, 4.0], [2.0, -2.0]])
        torch.testing.assert_close(one_hot["loss_qvalue"], smooth_l1(pred - target).sum(0).mean())
        logits = torch.stack([S, -S], -1)
        log_prob = logits.log_softmax(-1)[torch.arange(2), torch.tensor([0, 1])]
        torch.testing.assert_close(one_hot["loss_actor"], -(torch.exp(diff) * log_prob).mean())

    def test_expectile_must_be_below_one(self):
        with pytest.raises(ValueError, match="Expectile should be lower than 1.0"):
            DiscreteIQLLoss(normal_actor(), qnet(), vnet(), expectile=1.0)


# ----------------------------------------------------------------------- CQL
class TestCQLLoss:
    N_RANDOM = 2

    def make(self, **kw):
        kw.setdefault("num_random", self.N_RANDOM)
        loss = CQLLoss(tanh_actor(), qnet(), gamma=GAMMA, alpha_init=0.5, **kw)
        set_critics(loss, CRITICS)
        return loss

    def reference(
        self, seed, deterministic_backup=True, temperature=1.0, min_q_weight=1.0, box=1.0
    ):
        """Replay the loss's draws in its order and compute every loss per state."""
        n, alpha, loc, scale = self.N_RANDOM, 0.5, 0.5 * S, 0.5
        torch.manual_seed(seed)
        next_action, next_lp = tanh_normal(torch.randn(2, 1).squeeze(-1), 0.5 * S_NEXT, scale)
        random_actions = torch.empty(2 * n, 1).uniform_(-1, 1).squeeze(-1).view(2, n) * box
        curr_a, curr_lp = tanh_normal(
            torch.randn(2 * n, 1).squeeze(-1).view(2, n), loc[:, None], scale
        )
        new_a, new_lp = tanh_normal(
            torch.randn(2 * n, 1).squeeze(-1).view(2, n), 0.5 * S_NEXT[:, None], scale
        )
        _, bc_sample_lp = tanh_normal(torch.randn(2, 1).squeeze(-1), loc, scale)
        actor_a, actor_lp = tanh_normal(torch.randn(2, 1).squeeze(-1), loc, scale)

        next_q = q_ref(CRITICS, S_NEXT, next_action).min(0).values
        if not deterministic_backup:
            next_q = next_q - alpha * next_lp
        target = R + GAMMA * NOT_TERM * next_q
        pred = q_ref(CRITICS, S, A)
        loss_q = smooth_l1(pred - target).sum(0).mean()
        penalty = torch.zeros(2)
        for b in range(2):  # plain loop over states and critics
            for rows in ([CRITICS[0]], [CRITICS[1]]):
                values = []
                for j in range(n):
                    uniform_log_density = -math.log(2 * box)
                    values.append(q_ref(rows, S[b], random_actions[b, j])[0] - uniform_log_density)
                for j in range(n):
                    values.append(q_ref(rows, S[b], new_a[b, j])[0] - new_lp[b, j])
                for j in range(n):
                    values.append(q_ref(rows, S[b], curr_a[b, j])[0] - curr_lp[b, j])
                lse = torch.logsumexp(torch.stack(values) / temperature, 0) * temperature
                penalty[b] += min_q_weight * (lse - q_ref(rows, S[b], A[b])[0])
        bc_lp = normal_log_prob(torch.atanh(A), loc, scale) - torch.log1p(-(A**2))
        min_q_actor = q_ref(CRITICS, S, actor_a).min(0).values
        return {
            "loss_qvalue": loss_q,
            "loss_cql": penalty.mean(),
            "loss_actor_bc": (alpha * bc_sample_lp - bc_lp).mean(),
            "loss_actor": (alpha * actor_lp - min_q_actor).mean(),
            "loss_alpha": (-math.log(alpha) * (actor_lp + (-1.0))).mean(),
            "entropy": -actor_lp.mean(),
            "td_error": ((pred - target) ** 2).max(0).values,
        }

    @pytest.mark.parametrize(
        "kw",
        [{}, {"deterministic_backup": False, "temperature": 2.0, "min_q_weight": 0.5}],
    )
    def test_values_against_a_per_state_loop(self, kw):
        loss = self.make(**kw)
        td = data()
        torch.manual_seed(0)
        out = loss(td)
        ref = self.reference(0, **kw)
        for key in (
            "loss_qvalue",
            "loss_cql",
            "loss_actor_bc",
            "loss_actor",
            "loss_alpha",
            "entropy",
        ):
            torch.testing.assert_close(out[key], ref[key], msg=key)
        torch.testing.assert_close(td["td_error"], ref["td_error"])
        torch.testing.assert_close(out["alpha"], torch.tensor(0.5))

    def test_uniform_actions_fill_the_action_spec(self):
        # Pendulum's box [-2, 2]: the penalty's uniform actions cover it (density 1/4)
        loss = self.make(action_spec=Bounded(-2.0, 2.0, (1,)))
        td = data()
        torch.manual_seed(0)
        out = loss(td)
        ref = self.reference(0, box=2.0)
        torch.testing.assert_close(out["loss_cql"], ref["loss_cql"])
        assert not torch.allclose(ref["loss_cql"], self.reference(0)["loss_cql"])
        with pytest.raises(ValueError, match="must be finite"):
            self.make(action_spec=Bounded(-math.inf, math.inf, (1,)))(data())

    def test_compiles_in_one_graph_with_a_bounded_spec(self):
        """The spec's bounds are decided once per spec (no branch on their values in
        the forward): dynamo traces the whole loss as one graph."""
        import torch._dynamo

        loss = self.make(action_spec=Bounded(-2.0, 2.0, (1,)))
        torch.manual_seed(0)
        eager = loss(data())
        torch._dynamo.reset()
        compiled = torch.compile(loss, backend="eager", fullgraph=True)
        torch.manual_seed(0)
        out = compiled(data())
        torch.testing.assert_close(out["loss_cql"], eager["loss_cql"])
        torch.testing.assert_close(out["loss_qvalue"], eager["loss_qvalue"])
        torch._dynamo.reset()

    def test_unbounded_actor_spec_draws_in_unit_box(self):
        # a TanhNormal actor declared with an Unbounded spec: TorchRL's [-1, 1] draws
        actor = tanh_actor(spec=Unbounded(shape=(1,)))
        loss = CQLLoss(actor, qnet(), gamma=GAMMA, alpha_init=0.5, num_random=self.N_RANDOM)
        set_critics(loss, CRITICS)
        td = data()
        torch.manual_seed(0)
        out = loss(td)
        torch.testing.assert_close(out["loss_cql"], self.reference(0)["loss_cql"])

    def test_max_q_backup(self):
        loss = self.make(max_q_backup=True)
        torch.manual_seed(0)
        out = loss(data())
        torch.manual_seed(0)
        torch.randn(2, 1)  # the single next action is drawn first, as in TorchRL
        eps = torch.randn(2 * self.N_RANDOM, 1).view(2, self.N_RANDOM)
        a, _ = tanh_normal(eps, 0.5 * S_NEXT[:, None], 0.5)
        per_critic = torch.stack(
            [q_ref([c], S_NEXT[:, None], a)[0].max(-1).values for c in CRITICS]
        )
        target = R + GAMMA * NOT_TERM * per_critic.min(0).values
        expected = smooth_l1(q_ref(CRITICS, S, A) - target).sum(0).mean()
        torch.testing.assert_close(out["loss_qvalue"], expected)

    def test_lagrange(self):
        loss = self.make(with_lagrange=True, lagrange_thresh=0.3)
        td = data()
        torch.manual_seed(0)
        out = loss(td)
        penalty = td["cql_q1_loss"].mean() + td["cql_q2_loss"].mean()
        torch.testing.assert_close(out["loss_alpha_prime"], -0.5 * (penalty - 0.6))
        torch.testing.assert_close(out["loss_cql"], (td["cql_q1_loss"] + td["cql_q2_loss"]).mean())
        out["loss_alpha_prime"].backward()
        assert grads(loss) == {"log_alpha_prime"}

    def test_gradients(self):
        loss = self.make()
        torch.manual_seed(0)
        out = loss(data())
        out["loss_actor"].backward()
        assert grads(loss) == {"actor_network_params"}
        loss.zero_grad(set_to_none=True)
        out = loss(data())
        (out["loss_qvalue"] + out["loss_cql"]).backward()
        assert grads(loss) == {"qvalue_network_params"}
        loss.zero_grad(set_to_none=True)
        out = loss(data())
        out["loss_alpha"].backward()
        assert grads(loss) == {"log_alpha"}
        assert not any("target" in n for n, _ in loss.named_parameters())

    def test_state_dict_round_trip(self):
        loss = self.make()
        with torch.no_grad():
            loss.log_alpha.fill_(-1.0)
        other = CQLLoss(tanh_actor(w=2.0), qnet(), gamma=GAMMA, num_random=self.N_RANDOM)
        other.load_state_dict(loss.state_dict())
        torch.manual_seed(0)
        a = loss(data())
        torch.manual_seed(0)
        b = other(data())
        for key in ("loss_qvalue", "loss_cql", "loss_actor", "alpha"):
            torch.testing.assert_close(a[key], b[key])

    def test_set_keys_and_missing_key(self):
        loss = self.make()
        loss.set_keys(done="d", terminated="t")
        td = data()
        td["next", "t"] = td["next"].pop("terminated")
        td["next", "d"] = td["next"].pop("done")
        torch.manual_seed(0)
        out = loss(td)
        torch.testing.assert_close(out["loss_qvalue"], self.reference(0)["loss_qvalue"])
        del td["action"]
        with pytest.raises(KeyError, match=r"CQLLoss needs key 'action'.*set_keys\(action="):
            loss(td)

    def test_target_entropy(self):
        assert self.make().target_entropy == -1.0
        loss = CQLLoss(tanh_actor(), qnet(), target_entropy=-3.0)
        assert loss.target_entropy == -3.0
        body = TensorDictModule(LocScale(), ["observation"], ["loc", "scale"])
        no_spec = ProbabilisticActor(body, in_keys=["loc", "scale"], distribution_class=TanhNormal)
        with pytest.raises(RuntimeError, match="target_entropy='auto'"):
            CQLLoss(no_spec, qnet()).target_entropy  # noqa: B018


class TestDiscreteCQLLoss:
    def make(self, space="categorical", **kw):
        q = TensorDictModule(
            _linear([[1.0], [-1.0]], [0.0, 1.0]), ["observation"], ["action_value"]
        )
        return DiscreteCQLLoss(q, action_space=space, gamma=GAMMA, **kw)

    def test_values(self):
        # Q(s) = [s, 1 - s]: s = 1 -> [1, 0], s = 2 -> [2, -1]; actions [0, 1] -> pred [1, -1]
        td = data(action=torch.tensor([0, 1]))
        out = self.make()(td)
        target = torch.tensor([1.0 + GAMMA * 1.0, 2.0])  # max Q(s') = [1, 1]
        pred = torch.tensor([1.0, -1.0])
        torch.testing.assert_close(out["loss_qvalue"], (0.5 * (pred - target) ** 2).mean())
        torch.testing.assert_close(out["loss_qvalue"], torch.tensor(2.4525))
        lse = torch.tensor([math.log(math.e + 1), math.log(math.e**2 + math.e**-1)])
        torch.testing.assert_close(out["loss_cql"], (lse - pred).mean())
        torch.testing.assert_close(td["td_error"], ((pred - target) ** 2).unsqueeze(-1))
        torch.testing.assert_close(out["target_value"], target.mean())
        one_hot = self.make("one-hot")(data(action=torch.tensor([[1, 0], [0, 1]])))
        torch.testing.assert_close(one_hot["loss_cql"], out["loss_cql"])

    def test_target_network_and_gradients(self):
        loss = self.make()
        with torch.no_grad():
            loss.target_value_network_params.get(("module", "bias")).fill_(10.0)
        out = loss(data(action=torch.tensor([0, 1])))
        torch.testing.assert_close(
            out["target_value"], torch.tensor([1.0 + GAMMA * 10.0, 2.0]).mean()
        )
        (out["loss_qvalue"] + out["loss_cql"]).backward()
        assert grads(loss) == {"value_network_params"}

    def test_missing_key_and_set_keys(self):
        loss = self.make()
        loss.set_keys(action="a")
        td = data(action=torch.tensor([0, 1]))
        with pytest.raises(KeyError, match=r"DiscreteCQLLoss needs key 'a'.*set_keys\(action="):
            loss(td)
        td["a"] = td.pop("action")
        torch.testing.assert_close(loss(td)["loss_qvalue"], torch.tensor(2.4525))


# --------------------------------------------------------------------- TD3BC
class TestTD3BCLoss:
    def make(self, **kw):
        spec = Bounded(-1.0, 1.0, (1,))
        actor = Actor(nn.Sequential(_linear([[0.5]], [0.0]), nn.Tanh()), spec=spec)
        loss = TD3BCLoss(actor, qnet(), action_spec=spec, gamma=GAMMA, **kw)
        set_critics(loss, CRITICS)
        return loss

    def test_values_without_noise(self):
        loss = self.make(policy_noise=0.0, alpha=2.5)
        td = data()
        out = loss(td)
        mu = torch.tanh(0.5 * S)
        q1 = q_ref(CRITICS, S, mu)[0]
        lmbd = 2.5 / q1.abs().mean()
        bc = ((mu - A) ** 2).mean()
        torch.testing.assert_close(out["lmbd"], lmbd)
        torch.testing.assert_close(out["bc_loss"], bc)
        torch.testing.assert_close(out["loss_actor"], (-lmbd * q1 + bc).mean())
        next_q = q_ref(CRITICS, S_NEXT, torch.tanh(0.5 * S_NEXT)).min(0).values
        target = R + GAMMA * NOT_TERM * next_q
        pred = q_ref(CRITICS, S, A)
        torch.testing.assert_close(out["loss_qvalue"], smooth_l1(pred - target).sum(0).mean())
        torch.testing.assert_close(out["target_value"], target)
        torch.testing.assert_close(out["pred_value"], pred)
        torch.testing.assert_close(out["next_state_value"], next_q)
        torch.testing.assert_close(td["td_error"], ((pred - target) ** 2).max(0).values)

    def test_noise_is_clipped_and_actions_bounded(self):
        loss = self.make(policy_noise=10.0, noise_clip=0.1)
        torch.manual_seed(3)
        out = loss(data())
        torch.manual_seed(3)
        noise = (torch.randn(2, 1) * 10.0).clamp(-0.1, 0.1).squeeze(-1)
        assert noise.abs().max() == 0.1
        a_next = (torch.tanh(0.5 * S_NEXT) + noise).clamp(-1, 1)
        target = R + GAMMA * NOT_TERM * q_ref(CRITICS, S_NEXT, a_next).min(0).values
        torch.testing.assert_close(out["target_value"], target)

    def test_prioritized_weights(self):
        loss = self.make(policy_noise=0.0)
        plain = loss(data())
        td = data()
        td["priority_weight"] = torch.tensor([2.0, 0.0])
        weighted = loss(td)
        pred = plain["pred_value"]
        per_sample = smooth_l1(pred - plain["target_value"]).sum(0)
        torch.testing.assert_close(
            weighted["loss_qvalue"], (per_sample * td["priority_weight"]).mean()
        )

    def test_gradients_and_targets(self):
        loss = self.make()
        out = loss(data())
        out["loss_actor"].backward()
        assert grads(loss) == {"actor_network_params"}
        loss.zero_grad(set_to_none=True)
        loss(data())["loss_qvalue"].backward()
        assert grads(loss) == {"qvalue_network_params"}
        assert not any("target" in n for n, _ in loss.named_parameters())
        assert "target_actor_network_params.module.0.weight" in loss.state_dict()

    def test_state_dict_round_trip_and_set_keys(self):
        loss = self.make(policy_noise=0.0)
        spec = Bounded(-1.0, 1.0, (1,))
        actor = Actor(nn.Sequential(_linear([[-3.0]], [1.0]), nn.Tanh()), spec=spec)
        other = TD3BCLoss(actor, qnet(), action_spec=spec, gamma=GAMMA, policy_noise=0.0)
        other.load_state_dict(loss.state_dict())
        expected = loss(data())
        torch.testing.assert_close(other(data())["loss_actor"], expected["loss_actor"])
        other.set_keys(reward="rew")
        td = data()
        td["next", "rew"] = td["next"].pop("reward")
        torch.testing.assert_close(other(td)["loss_qvalue"], expected["loss_qvalue"])
        with pytest.raises(KeyError, match=r"needs key \('next', 'rew'\).*set_keys\(reward="):
            other(data())
        del td["next", "observation"]
        with pytest.raises(
            KeyError, match=r"TD3BCLoss needs key \('next', 'observation'\).*in_keys"
        ):
            other(td)

    def test_bounds(self):
        spec = Bounded(-1.0, 1.0, (1,))
        actor = Actor(nn.Linear(1, 1), spec=spec)
        with pytest.raises(ValueError, match="One of 'bounds' and 'action_spec' must be provided"):
            TD3BCLoss(actor, qnet())
        with pytest.raises(ValueError, match="One of 'bounds' and 'action_spec'"):
            TD3BCLoss(actor, qnet(), action_spec=spec, bounds=(-1.0, 1.0))
        with pytest.raises(ValueError, match="low bound higher than a high bound"):
            TD3BCLoss(actor, qnet(), bounds=(1.0, -1.0))
        loss = TD3BCLoss(actor, qnet(), bounds=(-0.5, 0.5))
        assert loss.max_action == 0.5 and loss.min_action == -0.5


# ------------------------------------------------------------------------ BC
class TestBCLoss:
    def test_deterministic_actor_mse(self):
        actor = Actor(_linear([[0.5]], [0.0]))
        out = BCLoss(actor)(data())
        torch.testing.assert_close(out["loss_bc"], ((0.5 * S - A) ** 2).mean())

    @pytest.mark.parametrize("fn", ["l1", "smooth_l1"])
    def test_named_loss_function(self, fn):
        actor = Actor(_linear([[0.5]], [0.0]))
        out = BCLoss(actor, loss_function=fn)(data())
        d = 0.5 * S - A
        expected = d.abs().mean() if fn == "l1" else smooth_l1(d).mean()
        torch.testing.assert_close(out["loss_bc"], expected)

    def test_stochastic_actor_nll(self):
        loss = BCLoss(normal_actor(scale=2.0))
        out = loss(data())
        torch.testing.assert_close(out["loss_bc"], -normal_log_prob(A, 0.5 * S, 2.0).mean())
        out["loss_bc"].backward()
        assert grads(loss) == {"actor_network_params"}

    def test_index_actions_cross_entropy(self):
        logits = TensorDictModule(_linear([[1.0], [-1.0]], [0.0, 0.0]), ["observation"], ["action"])
        td = data(action=torch.tensor([[0], [1]]))
        out = BCLoss(logits)(td)
        ce = -torch.stack([S, -S], -1).log_softmax(-1)[torch.arange(2), torch.tensor([0, 1])]
        torch.testing.assert_close(out["loss_bc"], ce.mean())

    def test_pad_mask_and_reductions(self):
        actor = Actor(_linear([[0.5]], [0.0]))
        loss = BCLoss(actor, loss_function="l1", reduction="none")
        loss.set_keys(pad_mask="is_pad")
        td = data()
        td["is_pad"] = torch.tensor([False, True])
        torch.testing.assert_close(loss(td)["loss_bc"], torch.tensor([0.0]))
        loss = BCLoss(actor, loss_function="l1", reduction="sum")
        torch.testing.assert_close(loss(data())["loss_bc"], (0.5 * S - A).abs().sum())

    def test_errors(self):
        actor = Actor(_linear([[0.5]], [0.0]))
        with pytest.raises(ValueError, match="unknown loss_function 'huber'"):
            BCLoss(actor, loss_function="huber")
        loss = BCLoss(actor)
        loss.set_keys(action="expert")
        td = data()
        td["expert"] = td.pop("action")
        # the actor writes "action", the expert sits at "expert": TorchRL's deprecated
        # fallback reads the prediction from "action", with a FutureWarning
        with pytest.warns(FutureWarning, match="hardcoded 'action' key"):
            out = loss(td.clone())
        torch.testing.assert_close(out["loss_bc"], ((0.5 * S - A) ** 2).mean())
        other = BCLoss(TensorDictModule(_linear([[0.5]], [0.0]), ["observation"], ["other"]))
        other.set_keys(action="expert")
        with pytest.raises(RuntimeError, match="did not write a prediction at 'expert'"):
            other(td)
        with pytest.raises(KeyError, match=r"BCLoss needs key 'expert'.*set_keys\(action="):
            loss(data())

    def test_collector_mask_is_honoured(self):
        # ("collector", "mask") as SliceSampler(pad_output=True) writes it: the padded row
        # (a garbage target) counts in neither the loss nor its gradient
        actor = Actor(_linear([[0.5]], [0.0]))
        loss = BCLoss(actor, loss_function="l1")
        td = data(action=torch.tensor([[0.5], [1e6]]))
        td["collector", "mask"] = torch.tensor([True, False])
        torch.testing.assert_close(loss(td)["loss_bc"], (0.5 * S[0] - 0.5).abs())
        loss.loss_mask_key = None  # off: the padded row counts
        assert loss(td)["loss_bc"] > 1e5
