"""DDPGLoss and TD3Loss on hand-computed cases.

Actor: mu(s) = 0.5 s. Critics: Q(s, a) = w_s s + w_a a. Transition: s = 1, a = 0.2,
s' = 2, r = 1, gamma = 0.9.
"""

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from rl.core import Bounded
from rl.objectives import DDPGLoss, SoftUpdate, TD3Loss


class QNet(nn.Module):
    def __init__(self, w=(1.0, 2.0)):
        super().__init__()
        self.linear = nn.Linear(2, 1, bias=False)
        with torch.no_grad():
            self.linear.weight.copy_(torch.tensor([w]))

    def forward(self, obs, act):
        return self.linear(torch.cat([obs, act], -1))


def _actor():
    lin = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        lin.weight.fill_(0.5)
    return TensorDictModule(lin, ["observation"], ["action"])


def _critic(w=(1.0, 2.0)):
    return TensorDictModule(QNet(w), ["observation", "action"], ["state_action_value"])


def _data(terminated=False):
    return TensorDict(
        observation=torch.tensor([[1.0]]),
        action=torch.tensor([[0.2]]),
        next=TensorDict(
            observation=torch.tensor([[2.0]]),
            reward=torch.tensor([[1.0]]),
            done=torch.tensor([[terminated]]),
            terminated=torch.tensor([[terminated]]),
            batch_size=[1],
        ),
        batch_size=[1],
    )


class TestDDPGLoss:
    def test_seed_call(self):
        actor, value = _actor(), _critic()
        loss = DDPGLoss(actor, value, gamma=0.9)
        td = _data()
        out = loss(td)
        assert {"loss_actor", "loss_value", "pred_value", "target_value", "td_error"} <= set(
            out.keys()
        )
        # pred = 1 + 2 * 0.2 = 1.4; target = 1 + 0.9 * Q(2, mu(2) = 1) = 1 + 0.9 * 4 = 4.6
        torch.testing.assert_close(out["pred_value"], torch.tensor([1.4]))
        torch.testing.assert_close(out["target_value"], torch.tensor([4.6]))
        torch.testing.assert_close(out["loss_value"], torch.tensor(3.2**2))
        # actor: -Q(1, 0.5) = -2
        torch.testing.assert_close(out["loss_actor"], torch.tensor(-2.0))
        torch.testing.assert_close(td["td_error"], torch.tensor([3.2**2]))

    def test_terminated(self):
        out = DDPGLoss(_actor(), _critic(), gamma=0.9)(_data(terminated=True))
        torch.testing.assert_close(out["target_value"], torch.tensor([1.0]))

    def test_gradients_reach_only_their_network(self):
        actor, value = _actor(), _critic()
        loss = DDPGLoss(actor, value, gamma=0.9)
        out = loss(_data())
        out["loss_actor"].backward(retain_graph=True)
        # d(-Q(s, w s))/dw = -2 * s = -2
        torch.testing.assert_close(actor.module.weight.grad, torch.tensor([[-2.0]]))
        assert value.module.linear.weight.grad is None
        actor.module.weight.grad = None
        out["loss_value"].backward()
        assert actor.module.weight.grad is None
        # d (Q - 4.6)^2 / dw = 2 * (1.4 - 4.6) * [s, a]
        torch.testing.assert_close(value.module.linear.weight.grad, torch.tensor([[-6.4, -1.28]]))
        for name in ("target_value_network_params",):
            assert all(t.grad is None for t in getattr(loss, name).values(True, True))
        assert not any(n.startswith("target") for n, _ in loss.named_parameters())

    def test_value_loss_treats_a_policy_written_action_as_data(self):
        # the action in the batch was written by the actor with its graph (as after
        # ``value(actor(td))``): the critic's loss must not reach the actor through it
        actor, value = _actor(), _critic()
        loss = DDPGLoss(actor, value, gamma=0.9)
        td = _data()
        td["action"] = actor.module(td["observation"])  # 0.5, with a graph to the actor
        out = loss(td)
        out["loss_value"].backward()
        assert actor.module.weight.grad is None or (actor.module.weight.grad == 0).all()
        # pred = 1 + 2 * 0.5 = 2; target 4.6: d (Q - 4.6)^2 / dw = 2 * (2 - 4.6) * [1, 0.5]
        torch.testing.assert_close(value.module.linear.weight.grad, torch.tensor([[-5.2, -2.6]]))

    def test_delay_actor_and_soft_update(self):
        loss = DDPGLoss(_actor(), _critic(), gamma=0.9, delay_actor=True)
        upd = SoftUpdate(loss, tau=0.5)
        with torch.no_grad():
            loss.actor_network_params.get(("module", "weight")).fill_(1.0)
        upd.step()  # target actor weight 0.75: mu_target(2) = 1.5 -> Q = 2 + 3 = 5
        torch.testing.assert_close(loss(_data())["target_value"], torch.tensor([1.0 + 0.9 * 5.0]))

    def test_missing_key(self):
        loss = DDPGLoss(_actor(), _critic())
        td = _data()
        del td["next", "terminated"]
        del td["next", "done"]
        with pytest.raises(
            KeyError, match=r"DDPGLoss needs key \('next', 'done'\).*set_keys\(done=\.\.\.\)"
        ):
            loss(td)

    def test_missing_next_observation(self):
        # the shared key check: a network input under "next" is named with the loss's in_keys
        loss = DDPGLoss(_actor(), _critic())
        td = _data()
        del td["next", "observation"]
        match = (
            r"DDPGLoss needs key \('next', 'observation'\) .*the loss reads in_keys \[.*\]\); "
            r"it is read by one of the loss's networks \(check their in_keys: "
            r"\['observation', 'action'\], read under 'next'"
        )
        with pytest.raises(KeyError, match=match):
            loss(td)

    def test_set_keys(self):
        value = TensorDictModule(QNet(), ["observation", "action"], ["q"])
        loss = DDPGLoss(_actor(), value, gamma=0.9)
        loss.set_keys(state_action_value="q", reward="rew")
        td = _data()
        td["next", "rew"] = td["next"].pop("reward")
        torch.testing.assert_close(loss(td)["target_value"], torch.tensor([4.6]))


def _td3(**kwargs):
    kwargs.setdefault("bounds", (-1.0, 1.0))
    loss = TD3Loss(_actor(), _critic(), gamma=0.9, policy_noise=0.0, **kwargs)
    with torch.no_grad():  # Q1 = s + 2a, Q2 = s + a
        loss.qvalue_network_params.get(("module", "linear", "weight")).copy_(
            torch.tensor([[[1.0, 2.0]], [[1.0, 1.0]]])
        )
    SoftUpdate(loss, tau=0.005)  # syncs the targets
    return loss


class TestTD3Loss:
    def test_values(self):
        loss = _td3()
        td = _data()
        out = loss(td)
        # a' = mu_target(2) = 1; min(Q1t, Q2t)(2, 1) = min(4, 3) = 3; target = 1 + 2.7 = 3.7
        torch.testing.assert_close(out["target_value"], torch.tensor([3.7]))
        torch.testing.assert_close(out["pred_value"], torch.tensor([[1.4], [1.2]]))
        # smooth_l1: |1.4 - 3.7| - 0.5 + |1.2 - 3.7| - 0.5 = 1.8 + 2.0
        torch.testing.assert_close(out["loss_qvalue"], torch.tensor(3.8))
        torch.testing.assert_close(out["loss_actor"], torch.tensor(-2.0))  # -Q1(1, 0.5)
        torch.testing.assert_close(td["td_error"], torch.tensor([2.5**2]))

    def test_action_clipped_to_bounds(self):
        loss = _td3(bounds=None, action_spec=Bounded(-0.5, 0.5, shape=(1,)))
        # a' = clip(1, -0.5, 0.5) = 0.5: min(3, 2.5) -> 1 + 0.9 * 2.5
        torch.testing.assert_close(loss(_data())["target_value"], torch.tensor([3.25]))

    def test_policy_noise_seeded(self):
        loss = TD3Loss(
            _actor(), _critic(), gamma=0.9, bounds=(-5.0, 5.0), policy_noise=0.3, noise_clip=0.2
        )
        with torch.no_grad():
            loss.qvalue_network_params.get(("module", "linear", "weight")).copy_(
                torch.tensor([[[1.0, 2.0]], [[1.0, 1.0]]])
            )
        SoftUpdate(loss, tau=0.005)
        torch.manual_seed(3)
        noise = (torch.randn(1, 1) * 0.3).clamp(-0.2, 0.2)
        torch.manual_seed(3)
        out = loss(_data())
        a_next = 1.0 + noise.item()
        expected = 1.0 + 0.9 * min(2.0 + 2 * a_next, 2.0 + a_next)
        torch.testing.assert_close(out["target_value"], torch.tensor([expected]))

    def test_gradients(self):
        actor = _actor()
        loss = TD3Loss(actor, _critic(), bounds=(-1.0, 1.0), policy_noise=0.0)
        out = loss(_data())
        out["loss_actor"].backward(retain_graph=True)
        q = loss.qvalue_network_params.get(("module", "linear", "weight"))
        assert actor.module.weight.grad is not None and q.grad is None
        actor.module.weight.grad = None
        out["loss_qvalue"].backward()
        assert actor.module.weight.grad is None and q.grad is not None and q.grad.shape == (2, 1, 2)
        assert all(t.grad is None for t in loss.target_qvalue_network_params.values(True, True))

    def test_bounds_errors(self):
        with pytest.raises(ValueError, match="but not both or none"):
            TD3Loss(_actor(), _critic())
        with pytest.raises(ValueError, match="low bound"):
            TD3Loss(_actor(), _critic(), bounds=(1.0, -1.0))

    def test_bounds_follow_the_default_device(self):
        """Built under ``with torch.device(d)`` (the examples' ``--device``), the bounds
        are checked where they are given and kept on ``d`` (``meta`` stands for a GPU:
        it has no values to check, and refuses CPU operands as CUDA does)."""
        spec = Bounded(-0.5, 0.5, shape=(1,))
        actor, critic = _actor().to("meta"), _critic().to("meta")
        with torch.device("meta"):
            loss = TD3Loss(actor, critic, action_spec=spec, policy_noise=0.0)
            with pytest.raises(ValueError, match="low bound"):
                TD3Loss(actor, critic, bounds=(1.0, -1.0))
        assert loss.min_action.device.type == loss.max_action.device.type == "meta"
        assert loss.min_action.shape == loss.max_action.shape == (1,)
        assert spec.low.device.type == "cpu"  # the spec is left where it was

    def test_state_dict_round_trip(self):
        loss = _td3()
        sd = {k: v.clone() for k, v in loss.state_dict().items()}
        assert "target_qvalue_network_params.module.linear.weight" in sd
        other = TD3Loss(_actor(), _critic(), gamma=0.9, policy_noise=0.0, bounds=(-1.0, 1.0))
        other.load_state_dict(sd)
        torch.testing.assert_close(other(_data())["loss_qvalue"], torch.tensor(3.8))

    def test_compile_matches_eager(self):
        loss = _td3()
        eager = loss(_data())
        compiled = torch.compile(loss, backend="aot_eager")(_data())
        for key in ("loss_actor", "loss_qvalue"):
            torch.testing.assert_close(compiled[key], eager[key])


@pytest.mark.filterwarnings("ignore:No target network updater")
@pytest.mark.parametrize("cls", [DDPGLoss, TD3Loss])
def test_keyword_call_returns_the_out_keys_in_torchrl_order(cls):
    """``loss(**tensors)`` returns the values of ``out_keys`` in order, equal to the
    TensorDict call's entries (TorchRL's out_keys order)."""

    class Critic(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(5, 1)

        def forward(self, obs, act):
            return self.lin(torch.cat([obs, act], -1))

    torch.manual_seed(0)
    actor = TensorDictModule(nn.Linear(3, 2), ["observation"], ["action"])
    critic = TensorDictModule(Critic(), ["observation", "action"], ["state_action_value"])
    kwargs = {"bounds": (-1.0, 1.0)} if cls is TD3Loss else {}
    loss = cls(actor, critic, **kwargs)
    if cls is TD3Loss:
        assert loss.out_keys == [
            "loss_actor",
            "loss_qvalue",
            "pred_value",
            "state_action_value_actor",
            "next_state_value",
            "target_value",
        ]
    else:
        assert loss.out_keys == [
            "loss_actor",
            "loss_value",
            "pred_value",
            "target_value",
            "pred_value_max",
            "target_value_max",
        ]
    n = 4
    td = TensorDict(
        observation=torch.randn(n, 3),
        action=torch.rand(n, 2),
        next=TensorDict(
            observation=torch.randn(n, 3),
            reward=torch.randn(n, 1),
            done=torch.zeros(n, 1, dtype=torch.bool),
            terminated=torch.zeros(n, 1, dtype=torch.bool),
            batch_size=[n],
        ),
        batch_size=[n],
    )
    flat = {"_".join(k) if isinstance(k, tuple) else k: v for k, v in td.items(True, True)}
    torch.manual_seed(0)
    values = loss(**flat)
    torch.manual_seed(0)
    out = loss(td)
    assert len(values) == len(loss.out_keys)
    for key, value in zip(loss.out_keys, values):
        torch.testing.assert_close(value, out[key])
