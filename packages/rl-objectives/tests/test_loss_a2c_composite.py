"""A2C with a composite (multi-head) action distribution, its keyword call's output
order, and V-trace reading the per-head log-probs as a list of keys."""

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import (
    CompositeDistribution,
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    set_composite_lp_aggregate,
)
from torch import distributions as D

from rl.modules import IndependentNormal
from rl.objectives import A2CLoss
from rl.objectives.value import VTrace

B, T, F, A = 3, 4, 5, 2


def _composite_actor():
    net = torch.nn.Sequential(torch.nn.Linear(F, 2 * A), NormalParamExtractor())
    params = TensorDictModule(net, ["obs"], [("params", "a1", "loc"), ("params", "a1", "scale")])
    head = ProbabilisticTensorDictModule(
        in_keys=["params"],
        out_keys=[("action", "a1")],
        distribution_class=CompositeDistribution,
        distribution_kwargs={
            "distribution_map": {"a1": D.Normal},
            "name_map": {"a1": ("action", "a1")},
        },
        return_log_prob=True,
    )
    return ProbabilisticTensorDictSequential(params, head)


def _data(actor):
    torch.manual_seed(0)
    td = TensorDict({"obs": torch.randn(B, T, F)}, [B, T])
    with set_composite_lp_aggregate(False):
        actor(td)
    td = td.detach()
    td["next"] = TensorDict(
        {
            "obs": torch.randn(B, T, F),
            "reward": torch.randn(B, T, 1),
            "done": torch.zeros(B, T, 1, dtype=torch.bool),
            "terminated": torch.zeros(B, T, 1, dtype=torch.bool),
        },
        [B, T],
    )
    return td


def test_composite_log_prob_is_the_sum_of_the_heads():
    with set_composite_lp_aggregate(False):
        actor = _composite_actor()
        critic = TensorDictModule(torch.nn.Linear(F, 1), ["obs"], ["state_value"])
        loss = A2CLoss(actor, critic, entropy_bonus=False)
        td = _data(actor)
        log_prob, _ = loss._log_probs(td)
        loc, scale = actor.module[0](td.clone())["params", "a1"].values()
        want = D.Normal(loc, scale).log_prob(td["action", "a1"]).sum(-1, keepdim=True)
        torch.testing.assert_close(log_prob, want)
        out = loss(td)
        assert out["loss_objective"].requires_grad
        td["action", "a1"].requires_grad_(True)
        with pytest.raises(
            RuntimeError, match=r"tensordict stored .*a1.* requires grad \(heads .*a1.*\)"
        ):
            loss._log_probs(td)


def test_keyword_call_returns_torchrl_order():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(F, 2 * A), NormalParamExtractor())
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(net, ["obs"], ["loc", "scale"]),
        ProbabilisticTensorDictModule(
            ["loc", "scale"], ["action"], distribution_class=D.Normal, return_log_prob=True
        ),
    )
    critic = TensorDictModule(torch.nn.Linear(F, 1), ["obs"], ["state_value"])
    loss = A2CLoss(actor, critic)
    assert loss.out_keys == ["loss_objective", "loss_critic", "entropy", "loss_entropy"]
    kwargs = {
        "obs": torch.randn(B, T, F),
        "next_obs": torch.randn(B, T, F),
        "next_reward": torch.randn(B, T, 1),
        "next_done": torch.zeros(B, T, 1, dtype=torch.bool),
        "next_terminated": torch.zeros(B, T, 1, dtype=torch.bool),
        "action": torch.randn(B, T, A),
    }
    values = loss(**kwargs)
    out = loss(TensorDict(kwargs, [B, T]).unflatten_keys("_"))
    torch.testing.assert_close(values[0], out["loss_objective"])
    torch.testing.assert_close(values[1], out["loss_critic"])


def test_vtrace_sums_a_list_of_log_prob_keys():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(F, 2 * A), NormalParamExtractor())
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(net, ["obs"], ["loc", "scale"]),
        ProbabilisticTensorDictModule(
            ["loc", "scale"], ["action"], distribution_class=IndependentNormal
        ),
    )
    critic = TensorDictModule(torch.nn.Linear(F, 1), ["obs"], ["state_value"])
    td = TensorDict(
        {
            "obs": torch.randn(B, T, F),
            "lp1": torch.randn(B, T),
            "lp2": torch.randn(B, T, 1),
            "lp_sum": torch.zeros(B, T, 1),
            "next": {
                "obs": torch.randn(B, T, F),
                "reward": torch.randn(B, T, 1),
                "done": torch.zeros(B, T, 1, dtype=torch.bool),
                "terminated": torch.zeros(B, T, 1, dtype=torch.bool),
            },
        },
        [B, T],
    )
    td["lp_sum"] = td["lp1"].unsqueeze(-1) + td["lp2"]
    a = VTrace(gamma=0.9, value_network=critic, actor_network=actor)
    a.set_keys(sample_log_prob=["lp1", "lp2"])
    assert "lp1" in a.in_keys and "lp2" in a.in_keys
    b = VTrace(gamma=0.9, value_network=critic, actor_network=actor)
    b.set_keys(sample_log_prob="lp_sum")
    torch.manual_seed(1)
    out_a = a(td.clone())
    torch.manual_seed(1)
    out_b = b(td.clone())
    torch.testing.assert_close(out_a["advantage"], out_b["advantage"])
    with pytest.raises(ValueError, match="non-empty list of keys"):
        a.set_keys(sample_log_prob=[])
