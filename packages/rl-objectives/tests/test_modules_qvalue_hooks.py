"""QValueHook / DistributionalQValueHook: greedy actions from a plain network's outputs."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rl.core import OneHot
from rl.modules import Actor, DistributionalQValueHook, QValueHook

VALUES = torch.tensor([[1.0, -1.0, 100.0, -2.0, -3.0], [5.0, 4.0, 3.0, 2.0, -5.0]])


class TestQValueHook:
    @pytest.mark.parametrize(
        "action_space, expected",
        [
            ("one_hot", [[0, 0, 1, 0, 0], [1, 0, 0, 0, 0]]),
            ("one-hot", [[0, 0, 1, 0, 0], [1, 0, 0, 0, 0]]),
            ("categorical", [2, 0]),
        ],
    )
    def test_greedy_action(self, action_space, expected):
        action, values, chosen = QValueHook(action_space)(None, None, VALUES)
        assert action.tolist() == expected
        assert values is VALUES or torch.equal(values, VALUES)
        assert chosen.tolist() == [[100.0], [5.0]]

    def test_unbatched(self):
        action, _, chosen = QValueHook("categorical")(None, None, VALUES[0])
        assert action.item() == 2
        assert chosen.tolist() == [100.0]

    def test_action_mask(self):
        hook = QValueHook("categorical", action_mask_key="mask")
        model = hook.qvalue_model
        mask = torch.tensor([[True, True, False, True, True]] * 2)
        td = model(TensorDict(action_value=VALUES, mask=mask, batch_size=[2]))
        assert td["action"].tolist() == [0, 0]

    def test_registered_on_a_network_in_an_actor(self):
        torch.manual_seed(0)
        net = nn.Linear(4, 4)
        net.register_forward_hook(QValueHook("one_hot"))
        actor = Actor(
            net, spec=OneHot(4), out_keys=["action", "action_value", "chosen_action_value"]
        )
        obs = torch.randn(5, 4)
        td = actor(TensorDict(observation=obs, batch_size=[5]))
        with torch.no_grad():
            values = nn.functional.linear(obs, net.weight, net.bias)
        torch.testing.assert_close(td["action_value"], values)
        assert torch.equal(td["action"].argmax(-1), values.argmax(-1))
        assert td["action"].sum(-1).tolist() == [1] * 5
        torch.testing.assert_close(td["chosen_action_value"], values.max(-1, keepdim=True).values)

    def test_nested_action_value_key(self):
        hook = QValueHook("categorical", action_value_key=("agents", "action_value"))
        assert hook.action_value_key == "agents_action_value"
        action, _, _ = hook(None, None, VALUES)
        assert action.tolist() == [2, 0]

    def test_bad_action_space(self):
        with pytest.raises(ValueError, match="action_space was not specified/not compatible"):
            QValueHook(action_space="wrong_value")
        with pytest.raises(TypeError, match="as a string"):
            QValueHook(action_space=OneHot(3))


class TestDistributionalQValueHook:
    @pytest.mark.parametrize("action_space", ["one_hot", "categorical"])
    def test_expected_value_action(self, action_space):
        support = torch.tensor([-2.0, 0.0, 2.0])
        logp = torch.randn(4, 3, 5).log_softmax(-2)
        action, values = DistributionalQValueHook(action_space, support=support)(None, None, logp)
        expected = (logp.exp() * support[:, None]).sum(-2).argmax(-1)
        if action_space == "one_hot":
            assert torch.equal(action.argmax(-1), expected)
        else:
            assert torch.equal(action, expected)
        assert torch.equal(values, logp)

    def test_hand_computed_action(self):
        # atom values -1, 1: expected values are p(1) * 2 - 1; action 1 has the largest p(1)
        support = torch.tensor([-1.0, 1.0])
        probs = torch.tensor([[0.9, 0.2, 0.6], [0.1, 0.8, 0.4]])
        action, _ = DistributionalQValueHook("categorical", support=support)(
            None, None, probs.log()
        )
        assert action.item() == 1

    def test_bad_action_space(self):
        with pytest.raises(ValueError, match="action_space was not specified/not compatible"):
            DistributionalQValueHook(action_space="wrong_value", support=None)
