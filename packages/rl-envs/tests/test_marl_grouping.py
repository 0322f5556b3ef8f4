"""MarlGroupMapType and check_marl_grouping (TorchRL's torchrl.envs.utils helpers)."""

from __future__ import annotations

import pytest

import rl.envs
from rl.envs import MarlGroupMapType, check_marl_grouping
from rl.envs import utils as env_utils

AGENTS = ["agent_0", "agent_1", "agent_2"]


class TestMarlGroupMapType:
    def test_all_in_one_group(self):
        assert MarlGroupMapType.ALL_IN_ONE_GROUP.get_group_map(AGENTS) == {"agents": AGENTS}

    def test_one_group_per_agent(self):
        assert MarlGroupMapType.ONE_GROUP_PER_AGENT.get_group_map(AGENTS) == {
            "agent_0": ["agent_0"],
            "agent_1": ["agent_1"],
            "agent_2": ["agent_2"],
        }

    def test_values_and_paths(self):
        # TorchRL's enum values; exported from rl.envs and rl.envs.utils (torchrl.envs.utils)
        assert MarlGroupMapType.ALL_IN_ONE_GROUP.value == 1
        assert MarlGroupMapType.ONE_GROUP_PER_AGENT.value == 2
        assert env_utils.MarlGroupMapType is MarlGroupMapType
        assert env_utils.check_marl_grouping is check_marl_grouping
        assert "MarlGroupMapType" in rl.envs.__all__

    @pytest.mark.parametrize("kind", list(MarlGroupMapType))
    def test_premade_maps_pass_the_check(self, kind):
        check_marl_grouping(kind.get_group_map(AGENTS), AGENTS)


class TestCheckMarlGrouping:
    def test_valid_custom_map(self):
        check_marl_grouping({"red": ["agent_0", "agent_2"], "blue": ["agent_1"]}, AGENTS)

    @pytest.mark.parametrize(
        "group_map, agents, match",
        [
            ({"agents": []}, [], "no agent names"),
            ({"agents": ["a", "a"]}, ["a", "a"], r"same name: \['a'\]"),
            ({"g0": ["a"], "g1": ["b"], "g2": ["a"]}, ["a", "b"], "3 groups, more than the 2"),
            (
                {"agents": ["a", "b"], "empty": []},
                ["a", "b"],
                "group 'empty' of the group_map is empty",
            ),
            ({"agents": ["a", "z"]}, ["a", "b"], "agent 'z' of group 'agents' is not an agent"),
            (
                {"g0": ["a", "b"], "g1": ["b"]},
                ["a", "b"],
                r"'b' is in more than one group \('g0' and 'g1'\)",
            ),
            ({"agents": ["a"]}, ["a", "b"], "agent 'b' is in no group"),
        ],
    )
    def test_errors(self, group_map, agents, match):
        with pytest.raises(ValueError, match=match):
            check_marl_grouping(group_map, agents)

    def test_not_a_dict(self):
        with pytest.raises(TypeError, match="group_map must be a dict"):
            check_marl_grouping(["agent_0"], ["agent_0"])
