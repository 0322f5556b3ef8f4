"""CrossGroupCritic / CrossCriticGroupSpec, and MultiAgentNetBase (a user subclass,
reset_parameters, repr)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rl.modules import CrossCriticGroupSpec, CrossGroupCritic, MultiAgentMLP, MultiAgentNetBase

GROUPS = {
    "red": CrossCriticGroupSpec(5, 3, ("red", "observation"), ("red", "state_value")),
    "blue": CrossCriticGroupSpec(2, 2, ("blue", "observation"), ("blue", "state_value")),
}


def _data(batch=(4,)) -> TensorDict:
    g = torch.Generator().manual_seed(0)
    return TensorDict(
        {
            "red": {"observation": torch.randn(*batch, 3, 5, generator=g)},
            "blue": {"observation": torch.randn(*batch, 2, 2, generator=g)},
        },
        list(batch),
    )


class TestCrossGroupCritic:
    @pytest.mark.parametrize("batch", [(4,), (2, 3)])
    @pytest.mark.parametrize("share_params", [True, False])
    def test_shapes_and_keys(self, batch, share_params):
        critic = CrossGroupCritic(
            GROUPS, d_model=8, trunk_depth=1, trunk_cells=16, share_params=share_params
        )
        assert critic.in_keys == [("red", "observation"), ("blue", "observation")]
        assert critic.out_keys == [("red", "state_value"), ("blue", "state_value")]
        td = critic(_data(batch))
        assert td["red", "state_value"].shape == (*batch, 3, 1)
        assert td["blue", "state_value"].shape == (*batch, 2, 1)
        assert (critic.module.shared_head is None) == (not share_params)
        assert (critic.module.group_heads is None) == share_params

    def test_matches_hand_computation(self):
        torch.manual_seed(0)
        critic = CrossGroupCritic(GROUPS, d_model=4, trunk_depth=1, trunk_cells=8)
        td = _data()
        out = critic(td.clone())
        net = critic.module
        red = net.encoders["red"](td["red", "observation"])
        blue = net.encoders["blue"](td["blue", "observation"])
        mixed = net.trunk(torch.cat([red, blue], -2).reshape(4, -1)).reshape(4, 5, 4)
        torch.testing.assert_close(out["red", "state_value"], net.group_heads["red"](mixed[:, :3]))
        torch.testing.assert_close(
            out["blue", "state_value"], net.group_heads["blue"](mixed[:, 3:])
        )

    def test_every_value_sees_every_group(self):
        torch.manual_seed(0)
        critic = CrossGroupCritic(GROUPS, d_model=8, trunk_depth=1, trunk_cells=16)
        td = _data()
        before = critic(td.clone())["red", "state_value"]
        td["blue", "observation"] += 1.0
        after = critic(td)["red", "state_value"]
        assert (before - after).abs().amin() > 0

    def test_detached_group_gets_no_gradient(self):
        torch.manual_seed(0)
        critic = CrossGroupCritic(
            GROUPS, d_model=8, trunk_depth=1, trunk_cells=16, detach_groups=["blue"]
        )
        td = critic(_data())
        (td["red", "state_value"].sum() + td["blue", "state_value"].sum()).backward()
        assert all(p.grad is None for p in critic.module.encoders["blue"].parameters())
        assert all(p.grad is not None for p in critic.module.encoders["red"].parameters())

    def test_errors(self):
        with pytest.raises(ValueError, match=r"detach_groups names \['green'\]"):
            CrossGroupCritic(GROUPS, detach_groups=["green"])
        with pytest.raises(ValueError, match="at least one group"):
            CrossGroupCritic({})
        critic = CrossGroupCritic(GROUPS, d_model=8, trunk_depth=1, trunk_cells=16)
        td = _data()
        td["red", "observation"] = torch.zeros(4, 3, 6)
        with pytest.raises(ValueError, match=r"group 'red'.*\(4, 3, 6\).*n_agents=3, obs_dim=5"):
            critic(td)


class TestMultiAgentNetBase:
    @pytest.mark.parametrize("share_params", [True, False])
    def test_user_subclass_agent_dim_1(self, share_params):
        class PerAgent(MultiAgentNetBase):
            def __init__(self, share_params):
                super().__init__(
                    n_agents=3, centralized=False, share_params=share_params, agent_dim=1
                )

            def _build_single_net(self, *, device=None, **kwargs):
                return nn.Linear(5, 4, device=device)

            def _pre_forward_check(self, inputs):
                if inputs.shape[1] != self.n_agents:
                    raise ValueError(
                        f"expected {self.n_agents} agents at dim 1, got {tuple(inputs.shape)}"
                    )
                return inputs

        torch.manual_seed(0)
        net = PerAgent(share_params)
        x = torch.randn(2, 3, 6, 5)
        out = net(x)
        assert out.shape == (2, 3, 6, 4)
        stateful = net.get_stateful_net()
        for i in range(3):
            w, b = (
                (stateful.weight, stateful.bias)
                if share_params
                else (stateful.weight[i], stateful.bias[i])
            )
            torch.testing.assert_close(out[:, i], x[:, i] @ w.T + b)
        with pytest.raises(ValueError, match="expected 3 agents at dim 1"):
            net(torch.randn(2, 4, 6, 5))

    @pytest.mark.parametrize("use_td_params", [True, False])
    @pytest.mark.parametrize("share_params", [True, False])
    def test_reset_parameters(self, share_params, use_td_params):
        torch.manual_seed(0)
        net = MultiAgentMLP(
            4,
            2,
            3,
            centralized=False,
            share_params=share_params,
            depth=1,
            num_cells=8,
            use_td_params=use_td_params,
        )
        before = net.params.clone()
        net.reset_parameters()
        for key, old in before.items(True, True):
            new = net.params.get(key)
            assert (new - old).abs().amin() > 0, key  # every entry drawn again
            if not share_params:
                assert (new[0] - new[1]).abs().amin() > 0, key  # agents drawn apart
        x = torch.randn(5, 3, 4)
        assert net(x).shape == (5, 3, 2)

    def test_repr_lists_the_net_and_the_settings(self):
        net = MultiAgentMLP(4, 2, 3, centralized=True, share_params=False, depth=1, num_cells=8)
        text = repr(net)
        assert text.startswith(
            "MultiAgentMLP(\n    MLP(\n      (0): Linear(in_features=12, out_features=8"
        )
        assert text.endswith(
            "n_agents=3,\n    share_params=False,\n    centralized=True,\n    agent_dim=-2)"
        )
