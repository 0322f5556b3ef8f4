"""The actors' tensor twins (``tensor_forward``): the collectors' fast path.

The twin is ``(in_keys, out_keys, fn)``; ``fn`` on the tensors at ``in_keys`` must return
exactly what the actor's forward writes at ``out_keys``, random draws included.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import CompositeDistribution, NormalParamExtractor, TensorDictModule
from torch.testing import assert_close

from rl.core import Categorical, ExplorationType, OneHot, set_exploration_type
from rl.modules import (
    ActorValueOperator,
    DistributionalQValueActor,
    OneHotCategorical,
    ProbabilisticActor,
    QValueActor,
    QValueModule,
    TanhNormal,
    ValueOperator,
)

ITYPES = [
    ExplorationType.RANDOM,
    ExplorationType.MODE,
    ExplorationType.MEAN,
    ExplorationType.DETERMINISTIC,
    None,  # the actor's default_interaction_type
]


def gaussian_actor(distribution=TanhNormal, **kwargs) -> ProbabilisticActor:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), NormalParamExtractor())
    if distribution is TanhNormal:
        kwargs.setdefault("distribution_kwargs", {"low": -2.0, "high": 2.0})
    return ProbabilisticActor(
        TensorDictModule(net, ["observation"], ["loc", "scale"]),
        in_keys=["loc", "scale"],
        distribution_class=distribution,
        **kwargs,
    )


def discrete_actor(distribution=torch.distributions.Categorical, **kwargs) -> ProbabilisticActor:
    torch.manual_seed(0)
    return ProbabilisticActor(
        TensorDictModule(torch.nn.Linear(3, 4), ["observation"], ["logits"]),
        in_keys=["logits"],
        distribution_class=distribution,
        **kwargs,
    )


def run_both(actor, td: TensorDict, itype, seed: int = 1):
    """``(actor's output, twin's outputs by key)`` under ``itype`` from the same seed."""
    in_keys, out_keys, fn = actor.tensor_forward()
    outs = []
    for call in (
        lambda: actor(td.clone()),
        lambda: dict(zip(out_keys, fn(*[td[k] for k in in_keys]))),
    ):
        torch.manual_seed(seed)
        if itype is None:
            outs.append(call())
        else:
            with set_exploration_type(itype):
                outs.append(call())
    return outs


def assert_twin_matches(actor, td: TensorDict, itype) -> None:
    expected, got = run_both(actor, td, itype)
    new_keys = [k for k in expected.keys() if k not in td.keys()]
    assert list(got) == new_keys
    for key in new_keys:
        assert_close(got[key], expected[key], rtol=0, atol=0, msg=key)


class TestProbabilisticActorTwin:
    @pytest.mark.parametrize("itype", ITYPES, ids=str)
    @pytest.mark.parametrize("return_log_prob", [True, False])
    @pytest.mark.parametrize("distribution", [TanhNormal, torch.distributions.Normal])
    def test_continuous_matches_forward(self, itype, return_log_prob, distribution):
        actor = gaussian_actor(distribution, return_log_prob=return_log_prob)
        td = TensorDict(observation=torch.randn(6, 3), batch_size=[6])
        assert_twin_matches(actor, td, itype)

    @pytest.mark.parametrize("itype", [i for i in ITYPES if i is not ExplorationType.MEAN], ids=str)
    @pytest.mark.parametrize("return_log_prob", [True, False])
    @pytest.mark.parametrize("distribution", [torch.distributions.Categorical, OneHotCategorical])
    def test_discrete_matches_forward(self, itype, return_log_prob, distribution):
        actor = discrete_actor(distribution, return_log_prob=return_log_prob)
        td = TensorDict(observation=torch.randn(6, 3), batch_size=[6])
        assert_twin_matches(actor, td, itype)

    @pytest.mark.parametrize("itype", [ExplorationType.RANDOM, ExplorationType.MODE], ids=str)
    def test_shared_trunk_policy_matches_forward(self, itype):
        """ActorValueOperator.get_policy_operator(): a trunk, a head, then the sampler."""
        torch.manual_seed(0)
        trunk = TensorDictModule(torch.nn.Linear(3, 8), ["observation"], ["hidden"])
        head = ProbabilisticActor(
            TensorDictModule(
                torch.nn.Sequential(torch.nn.Linear(8, 4), NormalParamExtractor()),
                ["hidden"],
                ["loc", "scale"],
            ),
            in_keys=["loc", "scale"],
            distribution_class=TanhNormal,
            return_log_prob=True,
        )
        value = ValueOperator(torch.nn.Linear(8, 1), in_keys=["hidden"])
        policy = ActorValueOperator(trunk, head, value).get_policy_operator()
        in_keys, out_keys, _ = policy.tensor_forward()
        assert in_keys == ["observation"]
        assert out_keys == ["hidden", "loc", "scale", "action", "action_log_prob"]
        td = TensorDict(observation=torch.randn(6, 3), batch_size=[6])
        assert_twin_matches(policy, td, itype)

    def test_keys(self):
        in_keys, out_keys, _ = gaussian_actor(return_log_prob=True).tensor_forward()
        assert in_keys == ["observation"]
        assert out_keys == ["loc", "scale", "action", "action_log_prob"]
        in_keys, out_keys, _ = discrete_actor(
            out_keys=["act"], log_prob_key="lp", return_log_prob=True
        ).tensor_forward()
        assert (in_keys, out_keys) == (["observation"], ["logits", "act", "lp"])

    def test_follows_attributes_changed_after_construction(self):
        actor = gaussian_actor()
        assert actor.tensor_forward()[1][-1] == "action"
        actor.module[-1].return_log_prob = True
        assert actor.tensor_forward()[1][-1] == "action_log_prob"
        td = TensorDict(observation=torch.randn(4, 3), batch_size=[4])
        assert_twin_matches(actor, td, ExplorationType.RANDOM)

    def test_weights_updated_in_place_are_used(self):
        actor = discrete_actor()
        _, _, fn = actor.tensor_forward()
        obs = torch.randn(4, 3)
        with torch.no_grad():
            actor.module[0].module.weight.zero_()
            actor.module[0].module.bias.copy_(torch.tensor([0.0, 0.0, 9.0, 0.0]))
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            _, action = fn(obs)
        assert action.tolist() == [2, 2, 2, 2]

    def test_unsafe_configurations_have_no_twin(self):
        from rl.core import Bounded

        hooked = gaussian_actor()
        hooked.register_forward_hook(lambda *args: None)
        hooked_sampler = gaussian_actor()
        hooked_sampler.module[-1].register_forward_pre_hook(lambda *args: None)
        hooked_head = gaussian_actor()
        hooked_head.module[0].register_forward_hook(lambda *args: None)

        class Custom(ProbabilisticActor):
            def forward(self, tensordict):
                return super().forward(tensordict)

        custom = Custom(
            TensorDictModule(torch.nn.Linear(3, 4), ["observation"], ["logits"]),
            in_keys=["logits"],
            distribution_class=torch.distributions.Categorical,
        )
        composite = ProbabilisticActor(
            TensorDictModule(torch.nn.Linear(3, 2), ["observation"], [("params", "a", "logits")]),
            in_keys=["params"],
            distribution_class=CompositeDistribution,
            distribution_kwargs={"distribution_map": {"a": torch.distributions.Categorical}},
        )
        for actor in (
            hooked,
            hooked_sampler,
            hooked_head,
            gaussian_actor(spec=Bounded(-2.0, 2.0, shape=(2,)), safe=True),
            gaussian_actor(num_samples=2),
            gaussian_actor(generator=torch.Generator()),
            custom,
            composite,
        ):
            assert actor.tensor_forward() is None, actor


class TestQValueActorTwin:
    @pytest.mark.parametrize("spec", [Categorical(4), OneHot(4)], ids=["categorical", "one_hot"])
    @pytest.mark.parametrize("masked", [False, True])
    def test_matches_forward(self, spec, masked):
        torch.manual_seed(0)
        kwargs = {"action_mask_key": "action_mask"} if masked else {}
        actor = QValueActor(torch.nn.Linear(3, 4), spec=spec, **kwargs)
        td = TensorDict(observation=torch.randn(6, 3), batch_size=[6])
        if masked:
            td["action_mask"] = torch.rand(6, 4) > 0.3
            td["action_mask"][:, 0] = True
        in_keys, out_keys, fn = actor.tensor_forward()
        assert in_keys == ["observation"] + (["action_mask"] if masked else [])
        assert out_keys == ["action_value", "action", "chosen_action_value"]
        expected = actor(td.clone())
        got = dict(zip(out_keys, fn(*[td[k] for k in in_keys])))
        for key in out_keys:
            assert_close(got[key], expected[key], rtol=0, atol=0, msg=key)

    def test_qvalue_module_alone(self):
        module = QValueModule(spec=Categorical(3))
        in_keys, out_keys, fn = module.tensor_forward()
        assert in_keys == ["action_value"]
        action, values, chosen = fn(torch.tensor([[1.0, 5.0, 2.0]]))
        assert action.tolist() == [1] and chosen.tolist() == [[5.0]]

    def test_unsafe_configurations_have_no_twin(self):
        hooked = QValueActor(torch.nn.Linear(3, 4), spec=Categorical(4))
        hooked.module[1].register_forward_hook(lambda *args: None)
        distributional = DistributionalQValueActor(
            torch.nn.Linear(3, 4 * 5),
            spec=OneHot(4),
            support=torch.linspace(-1, 1, 5),
        )
        safe = QValueActor(torch.nn.Linear(3, 4), spec=Categorical(4), safe=True)
        for actor in (hooked, distributional, safe):
            assert actor.tensor_forward() is None, actor
