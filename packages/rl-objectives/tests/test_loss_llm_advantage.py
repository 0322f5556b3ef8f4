"""rl.objectives.llm.MCAdvantageSelector and MCAdvantage's dynamic sampling (oversampled
candidate groups, return bounds, write counters), against hand-worked cases."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rl.objectives.llm import MCAdvantage, MCAdvantageSelector


def candidates(*returns):
    return TensorDict({"return": torch.tensor(returns)}, [len(returns)])


def traj(group, rewards):
    """One trajectory of ``len(rewards)`` steps for group ``group``, done at its last step."""
    T = len(rewards)
    return TensorDict(
        {
            "group_id": torch.full((T,), group),
            "next": {
                "reward": torch.tensor(rewards, dtype=torch.float).reshape(T, 1),
                "done": torch.tensor([False] * (T - 1) + [True]).reshape(T, 1),
            },
        },
        batch_size=[T],
    )


def standardised(returns):
    r = torch.tensor(returns)
    return (r - r.mean()) / r.std()


class TestMCAdvantageSelector:
    def test_strategies(self):
        c = candidates(0.0, 0.0, 0.0, 1.0)
        # balanced: (0, 3), (1, 3), (2, 3) all have mean 0.5, the middle of the bounds;
        # the first found is kept
        assert MCAdvantageSelector().select(c, group_size=2, keep_return_bounds=(0.1, 0.9)) == [
            0,
            3,
        ]
        # first: (0, 1) has mean 0, outside the bounds: the group is skipped
        assert (
            MCAdvantageSelector("first").select(c, group_size=2, keep_return_bounds=(0.1, 0.9))
            is None
        )
        assert MCAdvantageSelector("first").select(c, group_size=2) == [0, 1]
        # uniform: ranks round(i * 3 / 2) = 0, 2, 3 of the sorted returns (a stable sort)
        assert MCAdvantageSelector("uniform").select(c, group_size=3) == [0, 2, 3]
        assert MCAdvantageSelector("uniform").select(candidates(3.0, 1.0, 2.0), group_size=1) == [2]
        # balanced without bounds is uniform
        assert MCAdvantageSelector().select(c, group_size=3) == [0, 2, 3]
        # as many candidates as asked for: all of them, if their mean is inside
        assert MCAdvantageSelector().select(candidates(0.0, 1.0), group_size=2) == [0, 1]
        assert (
            MCAdvantageSelector().select(
                candidates(1.0, 1.0), group_size=2, keep_return_bounds=(0.1, 0.9)
            )
            is None
        )

    def test_balanced_prefers_the_middle_then_the_spread(self):
        # pair means inside (0, 1): 0.3125, 0.4375, 0.625, 0.5, 0.6875, 0.8125: (1, 2) is at 0.5
        c = candidates(0.25, 0.375, 0.625, 1.0)
        assert MCAdvantageSelector().select(c, group_size=2, keep_return_bounds=(0.0, 1.0)) == [
            1,
            2,
        ]
        # (0, 1) and (2, 3) both at 0.5: the later one spreads wider (0.5 against 0.25)
        c = candidates(0.375, 0.625, 0.25, 0.75)
        assert MCAdvantageSelector().select(c, group_size=2, keep_return_bounds=(0.0, 1.0)) == [
            2,
            3,
        ]

    def test_greedy_fallback_beyond_max_combinations(self):
        """With more subsets than max_combinations: the uniform pick, then its lowest
        returns swapped for the highest others until the mean gets inside the bounds."""
        c = candidates(0.0, 0.0, 0.0, 0.0, 1.0, 1.0)
        selector = MCAdvantageSelector(max_combinations=1)
        # uniform pick of 3 from sorted [0, 1, 2, 3, 4, 5]: ranks 0, 2 (round 2.5 -> 2), 5
        # -> mean 1/3, inside (0.1, 0.9) already
        assert selector.select(c, group_size=3, keep_return_bounds=(0.1, 0.9)) == [0, 2, 5]
        # bounds (0.5, 0.9): swap the lowest picked (index 0) for the highest other (4)
        assert selector.select(c, group_size=3, keep_return_bounds=(0.5, 0.9)) == [4, 2, 5]
        assert selector.select(c, group_size=3, keep_return_bounds=(0.95, 2.0)) is None

    def test_custom_selector_reads_the_trajectories(self):
        class Shortest(MCAdvantageSelector):
            def __init__(self):
                super().__init__(in_keys=["trajectories"])

            def select(self, candidates, *, group_size, keep_return_bounds=None):
                lengths = [t.shape[0] for t in candidates["trajectories"].unbind(0)]
                return sorted(range(len(lengths)), key=lengths.__getitem__)[:group_size]

        t = MCAdvantage(
            grpo_size=2,
            prompt_key="group_id",
            trajectory_return="sum",
            candidate_group_size=3,
            candidate_selection_min_size=3,
            candidate_selector=Shortest(),
        )
        assert t.inv(traj(0, [1.0, 1.0, 1.0])) is None
        assert t.inv(traj(0, [0.0])) is None
        out = t.inv(traj(0, [1.0, 0.0]))
        assert out.shape == (3,)  # the 1-step and the 2-step trajectories
        torch.testing.assert_close(
            out["advantage"].reshape(-1),
            standardised([0.0, 1.0]).repeat_interleave(torch.tensor([1, 2])),
        )

    def test_bad_input(self):
        with pytest.raises(ValueError, match="strategy must be one of .* got 'best'"):
            MCAdvantageSelector("best")
        with pytest.raises(ValueError, match="max_combinations must be >= 1, got 0"):
            MCAdvantageSelector(max_combinations=0)
        with pytest.raises(ValueError, match="in_keys must hold at least one key"):
            MCAdvantageSelector(in_keys=[])
        with pytest.raises(ValueError, match="need at least group_size=3 candidates, got 2"):
            MCAdvantageSelector().select(candidates(0.0, 1.0), group_size=3)
        two_each = TensorDict({"return": torch.zeros(3, 2)}, [3])
        with pytest.raises(
            ValueError, match="one scalar per candidate at 'return', got shape \\(3, 2\\)"
        ):
            MCAdvantageSelector().select(two_each, group_size=2)


class TestMCAdvantageDynamicSampling:
    def test_degenerate_groups_are_dropped(self):
        t = MCAdvantage(
            grpo_size=2,
            prompt_key="group_id",
            trajectory_return="sum",
            keep_return_bounds=(0.1, 0.9),
        )
        assert t.inv(traj(0, [0.0, 0.0])) is None
        assert t.inv(traj(0, [0.0])) is None  # all failed: dropped
        assert t.inv(traj(1, [1.0])) is None
        assert t.inv(traj(1, [0.0, 1.0])) is None  # all succeeded: dropped
        assert t.queued_groups == 0
        assert t.inv(traj(2, [0.0])) is None
        out = t.inv(traj(2, [0.0, 1.0]))
        torch.testing.assert_close(
            out["advantage"].reshape(-1),
            standardised([0.0, 1.0]).repeat_interleave(torch.tensor([1, 2])),
        )
        stats = t.get_stats()
        assert (
            stats["completed_groups"] == 3
            and stats["dropped_groups"] == 2
            and stats["written_groups"] == 1
        )
        assert stats["completed_trajectories"] == 6 and stats["completed_decisions"] == 9
        assert stats["trajectory_return_sum"] == 3.0 and stats["trajectory_return_max"] == 1.0
        assert stats["successful_trajectories"] == 3

    def test_oversampling_rescues_a_group(self):
        t = MCAdvantage(
            grpo_size=2,
            prompt_key="group_id",
            trajectory_return="max",
            keep_return_bounds=(0.1, 0.9),
            candidate_group_size=4,
        )
        assert t.inv(traj(5, [0.0])) is None
        assert t.inv(traj(5, [0.0, 0.0])) is None  # two failures: waits for more
        assert t.queued_trajectories == 2 and t.max_queued_trajectories_per_group == 2
        out = t.inv(traj(5, [0.0, 1.0]))  # a success: (0, 2) chosen
        assert out.shape == (3,)
        torch.testing.assert_close(out["next", "reward"].reshape(-1), torch.tensor([0.0, 0.0, 1.0]))
        torch.testing.assert_close(
            out["advantage"].reshape(-1),
            standardised([0.0, 1.0]).repeat_interleave(torch.tensor([1, 2])),
        )
        assert (
            t.rescued_groups == 1
            and t.unselected_trajectories == 1
            and t.selected_trajectories == 2
        )
        # four failures: no useful pair, dropped at candidate_group_size
        for _ in range(3):
            assert t.inv(traj(6, [0.0])) is None
        assert t.queued_groups == 1
        assert t.inv(traj(6, [0.0])) is None
        assert t.queued_groups == 0 and t.dropped_groups == 1
        t.reset_stats()
        assert t.get_stats()["rescued_groups"] == 0 and t.trajectory_return_max == float("-inf")

    def test_selection_waits_for_min_size(self):
        t = MCAdvantage(
            grpo_size=2,
            prompt_key="group_id",
            trajectory_return="sum",
            candidate_group_size=3,
            candidate_selection_min_size=3,
        )
        assert t.inv(traj(0, [0.0])) is None
        assert t.inv(traj(0, [1.0])) is None  # a useful pair, but min size is 3
        out = t.inv(traj(0, [3.0]))
        # no bounds: uniform over the sorted returns [0, 1, 3] -> ranks 0 and 2
        torch.testing.assert_close(out["advantage"].reshape(-1), standardised([0.0, 3.0]))
        t.inv(traj(1, [0.0]))
        t.clear_queues()
        assert t.queued_groups == 0

    def test_bad_arguments(self):
        with pytest.raises(ValueError, match="candidate_group_size must be >= grpo_size=4, got 2"):
            MCAdvantage(grpo_size=4, trajectory_return="sum", candidate_group_size=2)
        with pytest.raises(
            ValueError, match="selects candidates by their return: set trajectory_return"
        ):
            MCAdvantage(grpo_size=2, candidate_group_size=3)
        with pytest.raises(
            ValueError,
            match="candidate_selection_min_size must be between grpo_size=2 and candidate_group_size=3, got 4",
        ):
            MCAdvantage(
                grpo_size=2,
                trajectory_return="sum",
                candidate_group_size=3,
                candidate_selection_min_size=4,
            )
        with pytest.raises(
            ValueError, match="keep_return_bounds filters groups on their trajectory returns"
        ):
            MCAdvantage(grpo_size=2, keep_return_bounds=(0.1, 0.9))
        with pytest.raises(ValueError, match="increasing \\(low, high\\) pair, got \\(0.9, 0.1\\)"):
            MCAdvantage(grpo_size=2, trajectory_return="sum", keep_return_bounds=(0.9, 0.1))
        with pytest.raises(ValueError, match="grpo_size must be >= 1, got 0"):
            MCAdvantage(grpo_size=0)
