"""DQNLoss and DistributionalDQNLoss on hand-computed cases."""

import math
import re

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from rl.core import Categorical, OneHot
from rl.objectives import DistributionalDQNLoss, DQNLoss, HardUpdate
from rl.objectives.value import ValueEstimators


def _qnet(weight=((1.0, 0.0), (0.0, 1.0))):
    lin = nn.Linear(2, 2)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor(weight))
        lin.bias.zero_()
    return TensorDictModule(lin, ["observation"], ["action_value"])


def _data(action, terminated=False, next_mask=None):
    nxt = TensorDict(
        observation=torch.tensor([[3.0, 1.0]]),
        reward=torch.tensor([[1.0]]),
        done=torch.tensor([[terminated]]),
        terminated=torch.tensor([[terminated]]),
        batch_size=[1],
    )
    if next_mask is not None:
        nxt["action_mask"] = torch.tensor([next_mask])
    return TensorDict(
        observation=torch.tensor([[1.0, 2.0]]), action=action, next=nxt, batch_size=[1]
    )


def _set_target(loss, weight):
    with torch.no_grad():
        loss.target_value_network_params.get(("module", "weight")).copy_(torch.tensor(weight))


class TestDQNLoss:
    # Q(s) = [1, 2]; Q(s') = [3, 1]; reward 1; the taken action is 1, so pred = 2.
    @pytest.mark.parametrize(
        "space,action",
        [
            ("categorical", torch.tensor([1])),
            ("one-hot", torch.tensor([[0, 1]])),
            (None, torch.tensor([[0, 1]])),
        ],
    )
    def test_value(self, space, action):
        loss = DQNLoss(value_network=_qnet(), gamma=0.9, action_space=space)
        td = _data(action)
        out = loss(td)
        # target = 1 + 0.9 * max(3, 1) = 3.7
        torch.testing.assert_close(out["loss"], torch.tensor((2.0 - 3.7) ** 2))
        torch.testing.assert_close(td["td_error"], torch.tensor([[(2.0 - 3.7) ** 2]]))

    def test_spec_detection(self):
        qnet = _qnet()
        qnet.spec = Categorical(2)
        assert DQNLoss(qnet).action_space == "categorical"
        qnet.spec = OneHot(2)
        assert DQNLoss(qnet).action_space == "one-hot"
        assert DQNLoss(_qnet(), action_space="one_hot").action_space == "one-hot"
        with pytest.raises(
            ValueError,
            match=r"unknown action_space 'binary'; valid ones are \['one-hot', 'categorical'\]",
        ):
            DQNLoss(_qnet(), action_space="binary")

    def test_terminated_does_not_bootstrap(self):
        loss = DQNLoss(_qnet(), gamma=0.9, action_space="categorical")
        out = loss(_data(torch.tensor([1]), terminated=True))
        torch.testing.assert_close(out["loss"], torch.tensor((2.0 - 1.0) ** 2))

    def test_double_dqn(self):
        # target weights swap the outputs: Q_target(s') = [1, 3]
        swapped = ((0.0, 1.0), (1.0, 0.0))
        plain = DQNLoss(_qnet(), gamma=0.9, action_space="categorical")
        _set_target(plain, swapped)
        double = DQNLoss(_qnet(), gamma=0.9, action_space="categorical", double_dqn=True)
        _set_target(double, swapped)
        # plain: max Q_target = 3 -> 3.7; double: argmax Q_online(s') = 0 -> Q_target = 1 -> 1.9
        torch.testing.assert_close(
            plain(_data(torch.tensor([1])))["loss"], torch.tensor((2.0 - 3.7) ** 2)
        )
        torch.testing.assert_close(
            double(_data(torch.tensor([1])))["loss"], torch.tensor((2.0 - 1.9) ** 2)
        )
        with pytest.raises(ValueError, match="double_dqn=True requires delay_value=True"):
            DQNLoss(_qnet(), double_dqn=True, delay_value=False)

    def test_action_mask(self):
        loss = DQNLoss(_qnet(), gamma=0.9, action_space="categorical")
        out = loss(_data(torch.tensor([1]), next_mask=[False, True]))
        # only action 1 allowed at s': Q(s', 1) = 1 -> target 1.9
        torch.testing.assert_close(out["loss"], torch.tensor((2.0 - 1.9) ** 2))

    def test_gradients(self):
        net = _qnet()
        loss = DQNLoss(net, gamma=0.9, action_space="categorical")
        loss(_data(torch.tensor([1])))["loss"].backward()
        # d/dW (W s)_1 - target)^2 = 2 (2 - 3.7) * s on row 1
        torch.testing.assert_close(net.module.weight.grad, torch.tensor([[0.0, 0.0], [-3.4, -6.8]]))
        assert all(
            t.grad is None and not t.requires_grad
            for t in loss.target_value_network_params.values(True, True)
        )
        assert [n for n, _ in loss.named_parameters()] == [
            "value_network_params.module.weight",
            "value_network_params.module.bias",
        ]

    def test_delay_value_false_uses_online(self):
        loss = DQNLoss(_qnet(), gamma=0.9, action_space="categorical", delay_value=False)
        assert "target_value_network_params" not in dict(loss.named_children())
        torch.testing.assert_close(
            loss(_data(torch.tensor([1])))["loss"], torch.tensor((2.0 - 3.7) ** 2)
        )

    def test_hard_update_then_loss(self):
        loss = DQNLoss(_qnet(), gamma=0.9, action_space="categorical")
        upd = HardUpdate(loss, value_network_update_interval=2)
        with torch.no_grad():
            loss.value_network_params.get(("module", "weight")).mul_(2.0)
        upd.step()  # no copy yet: target still max(3, 1) = 3
        torch.testing.assert_close(
            loss(_data(torch.tensor([1])))["loss"], torch.tensor((4.0 - 3.7) ** 2)
        )
        upd.step()  # copied: target = 1 + 0.9 * 6
        torch.testing.assert_close(
            loss(_data(torch.tensor([1])))["loss"], torch.tensor((4.0 - 6.4) ** 2)
        )

    def test_set_keys_and_missing(self):
        net = TensorDictModule(_qnet().module, ["observation"], ["qv"])
        loss = DQNLoss(net, gamma=0.9, action_space="categorical")
        loss.set_keys(action_value="qv", action="act", priority="prio")
        td = _data(torch.tensor([1]))
        td["act"] = td.pop("action")
        loss(td)
        assert "prio" in td.keys() and "td_error" not in td.keys()
        del td["act"]
        with pytest.raises(KeyError, match=r"DQNLoss needs key 'act'.*set_keys\(action=\.\.\.\)"):
            loss(td)
        td = _data(torch.tensor([1]))
        del td["next", "reward"]
        loss.set_keys(action="action")
        with pytest.raises(
            KeyError, match=r"needs key \('next', 'reward'\).*set_keys\(reward=\.\.\.\)"
        ):
            loss(td)

    def test_reduction_and_weights(self):
        loss = DQNLoss(_qnet(), gamma=0.9, action_space="categorical", reduction="none")
        td = _data(torch.tensor([1]))
        td["priority_weight"] = torch.tensor([0.5])
        torch.testing.assert_close(loss(td)["loss"], torch.tensor([0.5 * (2.0 - 3.7) ** 2]))
        with pytest.raises(ValueError, match="unknown reduction 'avg'"):
            DQNLoss(_qnet(), reduction="avg")

    def test_compile_matches_eager(self):
        torch.manual_seed(0)
        net = TensorDictModule(nn.Linear(2, 3), ["observation"], ["action_value"])
        loss = DQNLoss(net, gamma=0.9, action_space="categorical", double_dqn=True)
        td = TensorDict(
            observation=torch.randn(8, 2),
            action=torch.randint(3, (8,)),
            next=TensorDict(
                observation=torch.randn(8, 2),
                reward=torch.randn(8, 1),
                done=torch.zeros(8, 1, dtype=torch.bool),
                terminated=torch.rand(8, 1) < 0.3,
                batch_size=[8],
            ),
            batch_size=[8],
        )
        eager = loss(td.clone())["loss"]
        compiled = torch.compile(loss, backend="aot_eager")(td.clone())["loss"]
        torch.testing.assert_close(compiled, eager)


class TestDQNInputErrors:
    """Bad input names the key, what the loss expected and what it was given."""

    def test_missing_next_observation_names_key_and_in_keys(self):
        loss = DQNLoss(_qnet(), gamma=0.9, action_space="categorical")
        td = _data(torch.tensor([1]))
        del td["next", "observation"]
        match = (
            r"DQNLoss needs key \('next', 'observation'\) which is missing from the input "
            r"\(keys present: \[.*'action'.*\('next', 'reward'\).*\]; the loss reads in_keys "
            r"\['action', 'observation', .*\('next', 'observation'\)\]\); it is read by one of "
            r"the loss's networks \(check their in_keys: \['observation'\], read under 'next'"
        )
        with pytest.raises(KeyError, match=match):
            loss(td)

    @pytest.mark.parametrize("shape", [(1,), (1, 1)])
    def test_index_action_for_one_hot_says_categorical(self, shape):
        loss = DQNLoss(_qnet(), gamma=0.9, action_space="one-hot")
        match = (
            rf"action 'action' has shape {re.escape(str(shape))}, expected \(1, 2\) \(one-hot "
            r"over the 2 actions of action_value\) for action_space='one-hot'; it holds action "
            r"indices: pass action_space='categorical' to the loss"
        )
        with pytest.raises(ValueError, match=match):
            loss(_data(torch.ones(shape, dtype=torch.long)))

    def test_one_hot_action_for_categorical_says_one_hot(self):
        loss = DQNLoss(_qnet(), gamma=0.9, action_space="categorical")
        match = (
            r"action 'action' has shape \(1, 2\), expected \(1,\) or \(1, 1\) \(indices into "
            r"the 2 actions of action_value\) for action_space='categorical'; it looks one-hot: "
            r"pass action_space='one-hot' to the loss"
        )
        with pytest.raises(ValueError, match=match):
            loss(_data(torch.tensor([[0, 1]])))

    def test_wrong_width_one_hot(self):
        loss = DQNLoss(_qnet(), gamma=0.9, action_space="one-hot")
        with pytest.raises(
            ValueError, match=r"action 'action' has shape \(1, 3\), expected \(1, 2\) \(one-hot"
        ):
            loss(_data(torch.tensor([[0.0, 1.0, 0.0]])))

    @pytest.mark.parametrize("action", [torch.tensor([1]), torch.tensor([[1]])])
    def test_index_forms_with_categorical_are_equal(self, action):
        # as TorchRL 0.14.1: [B] and [B, 1] indices are both valid with "categorical"
        loss = DQNLoss(_qnet(), gamma=0.9, action_space="categorical")
        torch.testing.assert_close(loss(_data(action))["loss"], torch.tensor((2.0 - 3.7) ** 2))

    def test_distributional_loss_checks_the_form_too(self):
        net = TensorDictModule(
            _C51Net([[0.0, 1.0], [1.0, 2.0], [2.0, 0.0]]), ["observation"], ["action_value"]
        )
        loss = DistributionalDQNLoss(
            net, gamma=1.0, support=torch.tensor([-1.0, 0.0, 1.0]), action_space="one-hot"
        )
        with pytest.raises(ValueError, match=r"pass action_space='categorical'"):
            loss(_data(torch.tensor([1])))


class _C51Net(nn.Module):
    """Log-probabilities over 3 atoms for 2 actions from a bias only (the input is ignored)."""

    def __init__(self, logits):
        super().__init__()
        self.logits = nn.Parameter(torch.tensor(logits))  # [atoms, actions]

    def forward(self, obs):
        return self.logits.log_softmax(-2).expand(*obs.shape[:-1], *self.logits.shape)


class TestDistributionalDQNLoss:
    support = torch.tensor([-1.0, 0.0, 1.0])

    def _loss(self, logits):
        net = TensorDictModule(_C51Net(logits), ["observation"], ["action_value"])
        return DistributionalDQNLoss(
            net, gamma=1.0, support=self.support, action_space="categorical"
        )

    def test_terminal_mass_on_reward_atom(self):
        logits = [[0.0, 1.0], [1.0, 2.0], [2.0, 0.0]]
        loss = self._loss(logits)
        td = _data(torch.tensor([0]), terminated=True)
        td["next", "reward"] = torch.tensor([[0.0]])
        out = loss(td)
        log_p = torch.tensor(logits).log_softmax(0)[:, 0]
        # Tz = 0 for every atom: all the mass lands on the middle atom
        torch.testing.assert_close(out["loss"], -log_p[1])
        torch.testing.assert_close(td["td_error"], -log_p[1].reshape(1, 1))

    def test_projection_between_atoms(self):
        logits = [[0.0, 1.0], [1.0, 2.0], [2.0, 0.0]]
        loss = self._loss(logits)
        # the target network puts all its mass on atom z=0 for both actions
        with torch.no_grad():
            loss.target_value_network_params.get(("module", "logits")).copy_(
                torch.tensor([[-50.0, -50.0], [50.0, 50.0], [-50.0, -50.0]])
            )
        td = _data(torch.tensor([1]))
        td["next", "reward"] = torch.tensor([[0.5]])
        out = loss(td)
        log_p = torch.tensor(logits).log_softmax(0)[:, 1]
        # Tz = 0.5 + 0 = 0.5 -> half on z=0, half on z=1
        torch.testing.assert_close(out["loss"], -(0.5 * log_p[1] + 0.5 * log_p[2]))
        out["loss"].backward()
        grad = loss.value_network_params.get(("module", "logits")).grad
        assert grad[:, 0].abs().sum() == 0 and grad[:, 1].abs().sum() > 0

    def test_only_td0(self):
        loss = self._loss([[0.0, 1.0], [1.0, 2.0], [2.0, 0.0]])
        for estimator in (ValueEstimators.TD1, ValueEstimators.GAE):
            # TorchRL raises NotImplementedError; the error is a ValueError too
            with pytest.raises(NotImplementedError, match="supported: \\['TD0'\\]"):
                loss.make_value_estimator(estimator)
            with pytest.raises(ValueError):
                loss.make_value_estimator(estimator)
        assert loss.make_value_estimator(ValueEstimators.TD0, gamma=0.5).gamma == 0.5

    def test_needs_support(self):
        net = TensorDictModule(nn.Linear(2, 6), ["observation"], ["action_value"])
        with pytest.raises(ValueError, match="needs the atoms: pass support"):
            DistributionalDQNLoss(net, gamma=0.99)
        with pytest.raises(TypeError, match="gamma"):
            DistributionalDQNLoss(net, support=self.support)

    def test_bad_shape(self):
        loss = self._loss([[0.0, 1.0], [1.0, 2.0]])
        with pytest.raises(ValueError, match=r"expected \[\*B, atoms=3, n_actions\]"):
            loss(_data(torch.tensor([0])))

    def test_entropy_sanity(self):
        # a uniform prediction against a one-atom target costs log(atoms)
        loss = self._loss([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
        td = _data(torch.tensor([0]), terminated=True)
        td["next", "reward"] = torch.tensor([[1.0]])
        torch.testing.assert_close(loss(td)["loss"], torch.tensor(math.log(3.0)))


class TestValueEstimator:
    def test_make_value_estimator_gamma(self):
        from rl.objectives.value import TD0Estimator, ValueEstimators

        loss = DQNLoss(_qnet(), gamma=0.9, action_space="categorical")
        assert loss.make_value_estimator(ValueEstimators.TD0, gamma=0.5) is loss
        assert isinstance(loss.value_estimator, TD0Estimator)
        # target = 1 + 0.5 * 3 through the estimator
        torch.testing.assert_close(
            loss(_data(torch.tensor([1])))["loss"], torch.tensor((2.0 - 2.5) ** 2)
        )
        # the constructor's gamma is the default of a rebuilt estimator
        loss.make_value_estimator(ValueEstimators.TD0)
        torch.testing.assert_close(
            loss(_data(torch.tensor([1])))["loss"], torch.tensor((2.0 - 3.7) ** 2)
        )

    def test_set_keys_reach_the_estimator(self):
        from rl.objectives.value import ValueEstimators

        loss = DQNLoss(_qnet(), action_space="categorical")
        loss.make_value_estimator(ValueEstimators.TD0, gamma=0.9)
        loss.set_keys(reward="rew")
        assert loss.value_estimator.tensor_keys.reward == "rew"
        td = _data(torch.tensor([1]))
        td["next", "rew"] = td["next"].pop("reward")
        torch.testing.assert_close(loss(td)["loss"], torch.tensor((2.0 - 3.7) ** 2))

    def test_errors(self):
        loss = DQNLoss(_qnet(), action_space="categorical")
        with pytest.raises(
            ValueError,
            match=r"unknown value estimator 'TD2'.*\['TD0', 'TD1', 'TDLambda', 'GAE', 'MAGAE', 'VTrace'\]",
        ):
            loss.make_value_estimator("TD2")
        with pytest.raises(
            ValueError,
            match=r"DQNLoss does not support the GAE value estimator; supported: \['TD0', 'TD1', 'TDLambda'\]",
        ):
            loss.make_value_estimator("GAE")
