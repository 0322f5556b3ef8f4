"""rl.data.llm RLHF helpers: the KL controllers against their formula, TopKRewardSelector
against a sort of the mean rewards."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict, lazy_stack
from torch import nn

from rl.data import LazyStackStorage, ReplayBuffer
from rl.data.llm import AdaptiveKLController, ConstantKLController, TopKRewardSelector


class _WithCoef(nn.Module):
    kl_coef = 0.0


class TestConstantKLController:
    def test_update_keeps_coef_and_sets_model(self):
        model = _WithCoef()
        ctl = ConstantKLController(kl_coef=0.3, model=model)
        assert model.kl_coef == 0.3
        assert ctl.update([1.0, 5.0]) == 0.3
        assert ctl.update() == 0.3
        assert model.kl_coef == 0.3

    def test_model_without_kl_coef(self):
        with pytest.raises(AttributeError, match="'kl_coef' attribute, got Linear"):
            ConstantKLController(kl_coef=0.1, model=nn.Linear(1, 1))


class TestAdaptiveKLController:
    @pytest.mark.parametrize("kl_values", [[-0.2, -0.4], [-0.01], [-0.05, -0.06, -0.04], [0.0] * 4])
    def test_update_formula(self, kl_values):
        coef, target, horizon = 0.1, 0.5, 8
        model = _WithCoef()
        ctl = AdaptiveKLController(init_kl_coef=coef, target=target, horizon=horizon, model=model)
        kl = -sum(kl_values) / len(kl_values) / coef
        error = max(-0.2, min(0.2, kl / target - 1))
        expected = coef * (1 + error * len(kl_values) / horizon)
        out = ctl.update(kl_values)
        assert out == pytest.approx(expected)
        assert ctl.coef == pytest.approx(expected) and model.kl_coef == pytest.approx(expected)

    def test_direction_over_steps(self):
        ctl = AdaptiveKLController(init_kl_coef=0.1, target=1.0, horizon=10)
        up = ctl.update([-0.5])  # KL 5 > 1: +20% / 10
        assert up == pytest.approx(0.1 * 1.02)
        down = ctl.update([-0.0])  # KL 0 < 1: -20% / 10
        assert down == pytest.approx(0.1 * 1.02 * 0.98)

    @pytest.mark.parametrize("bad", [None, []])
    def test_update_without_values(self, bad):
        ctl = AdaptiveKLController(init_kl_coef=0.1, target=1.0, horizon=10)
        with pytest.raises(ValueError, match="needs the KL values"):
            ctl.update(bad)


def _answers(rewards, prompts):
    """One done step per answer, a reward per token (as many tokens as 3 + i)."""
    return lazy_stack(
        [
            TensorDict(
                {
                    ("next", "done"): torch.ones(1, 1, dtype=torch.bool),
                    ("next", "reward"): torch.full((3 + i, 1), float(r)),
                    "text": p,
                    "id": torch.tensor(i),
                }
            )
            for i, (r, p) in enumerate(zip(rewards, prompts))
        ]
    )


class TestTopKRewardSelector:
    def test_selection_matches_sort(self):
        torch.manual_seed(0)
        rewards = torch.randn(12).tolist()
        prompts = ["a"] * 6 + ["b"] * 6
        rb = ReplayBuffer(storage=LazyStackStorage(20))
        rb.append_transform(TopKRewardSelector(6, 2, prompt_key="text", verbose=False))
        data = _answers(rewards, prompts)
        for chunk in data.chunk(4):
            rb.extend(chunk)
        expected = []
        for start in (0, 6):
            group = torch.tensor(rewards[start : start + 6])
            order = group.argsort(descending=True)
            above = [int(i) + start for i in order if group[i] > group.median()]
            expected += above[:2]
        assert rb[:].get("id").tolist() == expected
        assert len(rb) == 4

    def test_all_equal_writes_nothing(self):
        rb = ReplayBuffer(storage=LazyStackStorage(10))
        rb.append_transform(TopKRewardSelector(3, 2, prompt_key="text", verbose=False))
        rb.extend(_answers([1.0, 1.0, 1.0], ["p"] * 3))
        assert len(rb) == 0

    def test_trajectories_cut_at_done(self):
        # two trajectories of two steps each in one [4] batch, under one prompt
        td = TensorDict(
            {
                ("next", "done"): torch.tensor([[False], [True], [False], [True]]),
                ("next", "reward"): torch.tensor([[0.0], [1.0], [5.0], [7.0]]),
                "text": ["q"] * 4,
            },
            batch_size=[4],
        )
        sel = TopKRewardSelector(2, 1, prompt_key="text", verbose=False)
        out = sel.inv(td)
        # the 4 steps are ranked: median 1.0, above it 5.0 and 7.0, best one 7.0
        assert out.get(("next", "reward")).flatten().tolist() == [7.0]
        assert sel(td) is td

    def test_batched_time_last(self):
        td = TensorDict(
            {
                ("next", "done"): torch.tensor([[[True]], [[True]], [[True]]]),
                ("next", "reward"): torch.tensor([[[1.0]], [[3.0]], [[2.0]]]),
                "text": [["q"]] * 3,
            },
            batch_size=[3, 1],
        )
        out = TopKRewardSelector(3, 1, prompt_key="text", verbose=False).inv(td)
        assert out.get(("next", "reward")).flatten().tolist() == [3.0]

    def test_errors(self):
        with pytest.raises(ValueError, match="topk_size=4 and total_dialog_turns=3"):
            TopKRewardSelector(3, 4)
        sel = TopKRewardSelector(2, 1, prompt_key="text", verbose=False)
        not_done = TensorDict(
            {
                ("next", "done"): torch.zeros(1, 1, dtype=torch.bool),
                ("next", "reward"): torch.ones(1, 1),
                "text": ["q"],
            },
            batch_size=[1],
        )
        with pytest.raises(RuntimeError, match="last step has"):
            sel.inv(not_done)
        no_str = TensorDict(
            {
                ("next", "done"): torch.ones(1, 1, dtype=torch.bool),
                ("next", "reward"): torch.ones(1, 1),
                "text": torch.ones(1),
            },
            batch_size=[1],
        )
        with pytest.raises(TypeError, match="string at prompt_key 'text'"):
            sel.inv(no_str)
