"""MCTS scores against plain per-action loops."""

import math

import pytest
import torch
from tensordict import TensorDict

from rl.modules import EXP3Score, MCTSScores, PUCTScore, UCB1TunedScore, UCBScore


def stats(batch=(3,), actions=4):
    g = torch.Generator().manual_seed(0)
    visits = torch.randint(1, 10, (*batch, actions), generator=g).float()
    wins = torch.rand(*batch, actions, generator=g) * visits
    return TensorDict(
        win_count=wins,
        visits=visits,
        total_visits=visits.sum(-1),
        prior_prob=torch.softmax(torch.randn(*batch, actions, generator=g), -1),
        sum_squared_rewards=wins * 0.7,
        batch_size=batch,
    )


class TestUCBScore:
    def test_values(self):
        node = UCBScore(c=1.5)(stats())
        for b in range(3):
            n = node["total_visits"][b].item()
            for a in range(4):
                w, v = node["win_count"][b, a].item(), node["visits"][b, a].item()
                expected = w / v + 1.5 * math.sqrt(n) / (1 + v)
                assert node["score"][b, a].item() == pytest.approx(expected, rel=1e-5)

    def test_custom_keys(self):
        td = TensorDict(w=torch.ones(2), n=torch.ones(2), t=torch.tensor(2.0))
        out = UCBScore(
            c=1.0, win_count_key="w", visits_key="n", total_visits_key="t", score_key="s"
        )(td)
        torch.testing.assert_close(out["s"], torch.full((2,), 1 + math.sqrt(2) / 2))


class TestPUCTScore:
    def test_values(self):
        node = PUCTScore(c=2.0)(stats())
        for b in range(3):
            n = node["total_visits"][b].item()
            for a in range(4):
                w, v = node["win_count"][b, a].item(), node["visits"][b, a].item()
                p = node["prior_prob"][b, a].item()
                expected = w / v + 2.0 * p * math.sqrt(n) / (1 + v)
                assert node["score"][b, a].item() == pytest.approx(expected, rel=1e-5)


class TestUCB1TunedScore:
    def test_values_and_unvisited(self):
        node = stats()
        node["visits"][0, 0] = 0
        UCB1TunedScore()(node)
        for b in range(3):
            log_n = math.log(max(node["total_visits"][b].item(), 1.0))
            for a in range(4):
                v = node["visits"][b, a].item()
                if v == 0:
                    assert node["score"][b, a].item() > 1e37
                    continue
                mean = node["win_count"][b, a].item() / v
                var = node["sum_squared_rewards"][b, a].item() / v - mean**2
                vi = max(var + math.sqrt(2.0 * log_n / v), 0.0)
                expected = mean + math.sqrt(log_n / v * min(0.25, vi))
                assert node["score"][b, a].item() == pytest.approx(expected, rel=1e-5)


class TestEXP3Score:
    def test_probabilities_and_update(self):
        exp3 = EXP3Score(gamma=0.2)
        node = TensorDict(weights=torch.tensor([1.0, 3.0]), num_actions=2)
        exp3(node)
        torch.testing.assert_close(
            node["score"], torch.tensor([0.8 * 0.25 + 0.1, 0.8 * 0.75 + 0.1])
        )
        torch.testing.assert_close(node["action_prob"], node["score"])
        p1 = node["score"][1].item()
        exp3.update_weights(node, action_idx=1, reward=0.5)
        assert node["weights"][1].item() == pytest.approx(3.0 * math.exp(0.1 * 0.5 / p1))
        assert node["weights"][0].item() == 1.0

    def test_default_weights_batched(self):
        node = TensorDict(num_actions=torch.full((4,), 3), batch_size=[4])
        EXP3Score()(node)
        torch.testing.assert_close(node["score"], torch.full((4, 3), 1 / 3))

    def test_errors(self):
        with pytest.raises(ValueError, match="gamma must be between 0 and 1"):
            EXP3Score(gamma=1.5)
        node = TensorDict(weights=torch.ones(3), num_actions=2)
        with pytest.raises(ValueError, match="implies 3 actions, but num_actions is 2"):
            EXP3Score()(node)
        exp3 = EXP3Score()
        node = TensorDict(num_actions=2)
        exp3(node)
        with pytest.warns(UserWarning, match="outside the expected"):
            exp3.update_weights(node, 0, 2.0)


def test_mcts_scores_enum():
    assert isinstance(MCTSScores.PUCT.value(), PUCTScore) and MCTSScores.PUCT.value().c == 5
    assert MCTSScores.UCB.value().c == math.sqrt(2)
    assert MCTSScores.UCB1_TUNED.value().exploration_constant == 2.0
    assert MCTSScores.EXP3.value().gamma == 0.1


def test_exp3_update_of_a_slice_updates_the_batched_node():
    exp3 = EXP3Score(gamma=0.3)
    node = TensorDict(num_actions=torch.full((2,), 3), batch_size=[2])
    exp3(node)
    p = node["score"][1, 2].item()
    exp3.update_weights(node[1:2], action_idx=2, reward=1.0)
    expected = torch.ones(2, 3)
    expected[1, 2] = math.exp(0.1 / p)
    torch.testing.assert_close(node["weights"], expected)
