"""Actors, critics and safe modules of rl.modules (tensordict_module)."""

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import (
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    set_skip_existing,
)
from torch import nn
from torch.distributions import Categorical as TorchCategorical
from torch.distributions import Normal

from rl.core import (
    Bounded,
    Categorical,
    Composite,
    ExplorationType,
    MultiOneHot,
    OneHot,
    Unbounded,
    set_exploration_type,
)
from rl.modules import (
    Actor,
    ActorCriticOperator,
    ActorCriticWrapper,
    ActorValueOperator,
    DistributionalQValueActor,
    DistributionalQValueModule,
    ProbabilisticActor,
    QValueActor,
    QValueModule,
    SafeModule,
    SafeProbabilisticModule,
    SafeSequential,
    TanhModule,
    TanhNormal,
    ValueOperator,
    VmapModule,
)


def _obs(batch=5, n=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return TensorDict(observation=torch.randn(batch, n, generator=g), batch_size=[batch])


def _categorical_actor(**kwargs):
    net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 3))
    return ProbabilisticActor(
        TensorDictModule(net, ["observation"], ["logits"]),
        in_keys=["logits"],
        distribution_class=TorchCategorical,
        **kwargs,
    )


def _normal_actor(**kwargs):
    net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 4), NormalParamExtractor())
    return ProbabilisticActor(
        TensorDictModule(net, ["observation"], ["loc", "scale"]),
        in_keys=["loc", "scale"],
        distribution_class=Normal,
        **kwargs,
    )


class TestSafeModule:
    def test_safe_projects_into_bounded_spec(self):
        spec = Bounded(-0.5, 0.5, shape=(2,))
        linear = nn.Linear(3, 2)
        module = SafeModule(linear, ["observation"], ["action"], spec=spec, safe=True)
        td = TensorDict(observation=torch.randn(50, 3) * 100, batch_size=[50])
        out = module(td)["action"]
        torch.testing.assert_close(out, linear(td["observation"]).clamp(-0.5, 0.5))

    def test_unsafe_leaves_values(self):
        linear = nn.Linear(3, 2)
        module = SafeModule(linear, ["observation"], ["action"], spec=Bounded(-0.5, 0.5, (2,)))
        td = TensorDict(observation=torch.randn(50, 3) * 100, batch_size=[50])
        torch.testing.assert_close(module(td)["action"], linear(td["observation"]))

    def test_safe_without_spec_raises(self):
        with pytest.raises(
            RuntimeError,
            match=r"safe=True\) is not a valid configuration as the tensor specs are not specified",
        ):
            SafeModule(nn.Linear(3, 2), ["observation"], ["action"], safe=True)

    def test_one_spec_many_out_keys_raises(self):
        with pytest.raises(RuntimeError, match="one spec for several out_keys"):
            SafeModule(nn.Linear(3, 2), ["x"], ["a", "b"], spec=Unbounded(2))

    def test_spec_is_composite_keyed_by_out_keys(self):
        module = SafeModule(nn.Linear(3, 2), ["x"], ["a"], spec=Unbounded(2))
        assert isinstance(module.spec, Composite)
        assert module.spec["a"] == Unbounded(2)
        td = module.random(TensorDict(batch_size=[7]))
        assert td["a"].shape == (7, 2)

    def test_missing_key_is_named(self):
        actor = Actor(nn.Linear(3, 2))
        td = TensorDict(obs=torch.randn(2, 3), other=torch.zeros(2), batch_size=[2])
        with pytest.raises(KeyError, match=r"inputs are None: \{'observation'\}"):
            actor(td)

    def test_safe_sequential_merges_specs(self):
        seq = SafeSequential(
            SafeModule(nn.Linear(3, 4), ["observation"], ["hidden"], spec=Unbounded(4)),
            SafeModule(nn.Linear(4, 2), ["hidden"], ["action"], spec=Bounded(-1, 1, (2,))),
        )
        assert seq.spec["action"] == Bounded(-1, 1, (2,))
        assert seq.spec["hidden"] == Unbounded(4)
        assert seq.in_keys == ["observation"]


class TestActor:
    def test_defaults_and_values(self):
        linear = nn.Linear(4, 2)
        actor = Actor(linear)
        assert actor.in_keys == ["observation"] and actor.out_keys == ["action"]
        td = actor(_obs())
        torch.testing.assert_close(td["action"], linear(td["observation"]))

    def test_leaf_spec_describes_action_among_out_keys(self):
        class Two(nn.Module):
            def forward(self, obs):
                return obs[..., :2] * 100, obs[..., 2:]

        actor = Actor(Two(), out_keys=["action", "extra"], spec=Bounded(-1, 1, (2,)), safe=True)
        assert actor.spec["action"] == Bounded(-1, 1, (2,)) and actor.spec["extra"] is None
        td = actor(_obs())
        assert td["action"].abs().max() <= 1 and td["extra"].shape == (5, 2)

    def test_get_dist_is_delta_at_action(self):
        actor = Actor(nn.Linear(4, 2))
        td = _obs()
        dist = actor.get_dist(td)
        torch.testing.assert_close(dist.mode, td["action"])

    def test_state_dict_round_trip(self):
        a, b = Actor(nn.Linear(4, 2)), Actor(nn.Linear(4, 2))
        b.load_state_dict(a.state_dict())
        td = _obs()
        torch.testing.assert_close(a(td.clone())["action"], b(td.clone())["action"])


class TestProbabilisticActor:
    def test_categorical_random_matches_tensordict_reference(self):
        actor = _categorical_actor(return_log_prob=True)
        reference = ProbabilisticTensorDictSequential(
            actor.module[0],
            ProbabilisticTensorDictModule(
                ["logits"], ["action"], distribution_class=TorchCategorical, return_log_prob=True
            ),
        )
        td = _obs(batch=64)
        with set_exploration_type(ExplorationType.RANDOM):
            torch.manual_seed(3)
            ours = actor(td.clone())
            torch.manual_seed(3)
            ref = reference(td.clone())
        torch.testing.assert_close(ours["action"], ref["action"])
        torch.testing.assert_close(ours["action_log_prob"], ref["action_log_prob"])
        expected_lp = TorchCategorical(logits=ours["logits"]).log_prob(ours["action"])
        torch.testing.assert_close(ours["action_log_prob"], expected_lp)

    def test_exploration_switching(self):
        actor = _normal_actor()
        td = _obs(batch=16)
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            a1 = actor(td.clone())["action"]
            a2 = actor(td.clone())["action"]
        torch.testing.assert_close(a1, a2)
        torch.testing.assert_close(a1, actor(td.clone())["loc"])  # mean of a Normal
        with set_exploration_type(ExplorationType.RANDOM):
            r1 = actor(td.clone())["action"]
            r2 = actor(td.clone())["action"]
        assert not torch.equal(r1, r2)
        assert not torch.equal(r1, a1)

    def test_default_interaction_type_random(self):
        actor = _categorical_actor(default_interaction_type=ExplorationType.RANDOM)
        logits = torch.zeros(2000, 3)
        td = TensorDict(observation=torch.zeros(2000, 4), batch_size=[2000])
        with torch.no_grad():
            actor.module[0].module[-1].weight.zero_()
            actor.module[0].module[-1].bias.zero_()
        actions = actor(td)["action"]
        assert set(actions.unique().tolist()) == {0, 1, 2}
        torch.testing.assert_close(td["logits"], logits)

    def test_log_prob_key_and_get_dist(self):
        actor = _normal_actor(return_log_prob=True, log_prob_key="lp")
        td = _obs()
        with set_exploration_type(ExplorationType.RANDOM):
            actor(td)
        dist = actor.get_dist(td)
        torch.testing.assert_close(td["lp"], dist.log_prob(td["action"]))

    def test_safe_projects_sample(self):
        actor = _normal_actor(spec=Bounded(-0.01, 0.01, shape=(2,)), safe=True)
        with set_exploration_type(ExplorationType.RANDOM):
            action = actor(_obs(batch=100))["action"]
        assert action.abs().max() <= 0.01
        assert isinstance(actor.spec, Composite) and "action" in actor.spec.keys()

    def test_missing_param_key(self):
        module = SafeProbabilisticModule(
            ["logits"], ["action"], distribution_class=TorchCategorical
        )
        with pytest.raises(KeyError, match=r"'logits'.*Keys present.*observation"):
            module(_obs())

    def test_missing_observation_in_actor(self):
        actor = _categorical_actor()
        td = TensorDict(pixels=torch.zeros(2, 4), batch_size=[2])
        with pytest.raises(KeyError, match=r"observation.*Keys present.*pixels"):
            actor(td)

    def test_to_moves_the_distribution_tensor_kwargs(self):
        """``.to()`` carries a TanhNormal's bounds with the parameters (``meta`` stands
        in for another device); the dict given at construction is left as it was."""
        low, high = torch.full((2,), -2.0), torch.full((2,), 2.0)
        kwargs = {"low": low, "high": high, "upscale": 3.0}

        def tanh_normal_actor():
            net = nn.Sequential(nn.Linear(4, 4), NormalParamExtractor())
            return ProbabilisticActor(
                TensorDictModule(net, ["observation"], ["loc", "scale"]),
                in_keys=["loc", "scale"],
                distribution_class=TanhNormal,
                distribution_kwargs=kwargs,
            )

        actor = tanh_normal_actor()
        prob = actor.module[-1]
        actor.double()
        assert prob.distribution_kwargs["low"].dtype == torch.float64
        assert prob.distribution_kwargs["upscale"] == 3.0
        assert kwargs["low"] is low and low.dtype == torch.float32
        actor.to("meta")
        bounds = [prob.distribution_kwargs[k] for k in ("low", "high")]
        assert all(b.device.type == "meta" and b.shape == (2,) for b in bounds)
        assert next(actor.parameters()).device.type == "meta"
        back = tanh_normal_actor().double().float()  # values survive a dtype round trip
        torch.testing.assert_close(back.module[-1].distribution_kwargs["high"], high)
        assert back.module[-1].distribution_kwargs["high"].dtype == torch.float32

    def test_state_dict_round_trip(self):
        a, b = Actor(nn.Linear(4, 2)), Actor(nn.Linear(4, 2))
        b.load_state_dict(a.state_dict())
        td = _obs()
        torch.testing.assert_close(a(td.clone())["action"], b(td.clone())["action"])


class TestProbabilisticActor:
    def test_categorical_random_matches_tensordict_reference(self):
        actor = _categorical_actor(return_log_prob=True)
        reference = ProbabilisticTensorDictSequential(
            actor.module[0],
            ProbabilisticTensorDictModule(
                ["logits"], ["action"], distribution_class=TorchCategorical, return_log_prob=True
            ),
        )
        td = _obs(batch=64)
        with set_exploration_type(ExplorationType.RANDOM):
            torch.manual_seed(3)
            ours = actor(td.clone())
            torch.manual_seed(3)
            ref = reference(td.clone())
        torch.testing.assert_close(ours["action"], ref["action"])
        torch.testing.assert_close(ours["action_log_prob"], ref["action_log_prob"])
        expected_lp = TorchCategorical(logits=ours["logits"]).log_prob(ours["action"])
        torch.testing.assert_close(ours["action_log_prob"], expected_lp)

    def test_exploration_switching(self):
        actor = _normal_actor()
        td = _obs(batch=16)
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            a1 = actor(td.clone())["action"]
            a2 = actor(td.clone())["action"]
        torch.testing.assert_close(a1, a2)
        torch.testing.assert_close(a1, actor(td.clone())["loc"])  # mean of a Normal
        with set_exploration_type(ExplorationType.RANDOM):
            r1 = actor(td.clone())["action"]
            r2 = actor(td.clone())["action"]
        assert not torch.equal(r1, r2)
        assert not torch.equal(r1, a1)

    def test_default_interaction_type_random(self):
        actor = _categorical_actor(default_interaction_type=ExplorationType.RANDOM)
        logits = torch.zeros(2000, 3)
        td = TensorDict(observation=torch.zeros(2000, 4), batch_size=[2000])
        with torch.no_grad():
            actor.module[0].module[-1].weight.zero_()
            actor.module[0].module[-1].bias.zero_()
        actions = actor(td)["action"]
        assert set(actions.unique().tolist()) == {0, 1, 2}
        torch.testing.assert_close(td["logits"], logits)

    def test_log_prob_key_and_get_dist(self):
        actor = _normal_actor(return_log_prob=True, log_prob_key="lp")
        td = _obs()
        with set_exploration_type(ExplorationType.RANDOM):
            actor(td)
        dist = actor.get_dist(td)
        torch.testing.assert_close(td["lp"], dist.log_prob(td["action"]))

    def test_safe_projects_sample(self):
        actor = _normal_actor(spec=Bounded(-0.01, 0.01, shape=(2,)), safe=True)
        with set_exploration_type(ExplorationType.RANDOM):
            action = actor(_obs(batch=100))["action"]
        assert action.abs().max() <= 0.01
        assert isinstance(actor.spec, Composite) and "action" in actor.spec.keys()

    def test_missing_param_key(self):
        module = SafeProbabilisticModule(
            ["logits"], ["action"], distribution_class=TorchCategorical
        )
        with pytest.raises(KeyError, match=r"'logits'.*Keys present.*observation"):
            module(_obs())

    def test_missing_observation_in_actor(self):
        actor = _categorical_actor()
        td = TensorDict(pixels=torch.zeros(2, 4), batch_size=[2])
        with pytest.raises(KeyError, match=r"observation.*Keys present.*pixels"):
            actor(td)

    def test_to_moves_the_distribution_tensor_kwargs(self):
        """``.to()`` carries a TanhNormal's bounds with the parameters (``meta`` stands
        in for another device); the dict given at construction is left as it was."""
        low, high = torch.full((2,), -2.0), torch.full((2,), 2.0)
        kwargs = {"low": low, "high": high, "upscale": 3.0}
        actor = ProbabilisticActor(
            TensorDictModule(
                nn.Sequential(nn.Linear(4, 4), NormalParamExtractor()),
                ["observation"],
                ["loc", "scale"],
            ),
            in_keys=["loc", "scale"],
            distribution_class=TanhNormal,
            distribution_kwargs=kwargs,
        )
        prob = actor.module[-1]
        actor.double()
        assert prob.distribution_kwargs["low"].dtype == torch.float64
        assert prob.distribution_kwargs["upscale"] == 3.0
        assert kwargs["low"] is low and low.dtype == torch.float32
        actor.to("meta")
        bounds = [prob.distribution_kwargs[k] for k in ("low", "high")]
        assert all(b.device.type == "meta" and b.shape == (2,) for b in bounds)
        assert next(actor.parameters()).device.type == "meta"
        # values survive a dtype round trip
        back = (
            ProbabilisticActor(
                TensorDictModule(
                    nn.Sequential(nn.Linear(4, 4), NormalParamExtractor()),
                    ["observation"],
                    ["loc", "scale"],
                ),
                in_keys=["loc", "scale"],
                distribution_class=TanhNormal,
                distribution_kwargs=kwargs,
            )
            .double()
            .float()
        )
        torch.testing.assert_close(back.module[-1].distribution_kwargs["high"], high)
        assert back.module[-1].distribution_kwargs["high"].dtype == torch.float32

    def test_state_dict_round_trip(self):
        a, b = _normal_actor(), _normal_actor()
        b.load_state_dict(a.state_dict())
        td = _obs()
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            torch.testing.assert_close(a(td.clone())["action"], b(td.clone())["action"])

    def test_tanh_normal_matches_tensordict_reference(self):
        net = nn.Sequential(nn.Linear(4, 4), NormalParamExtractor())
        kwargs = {"low": -2.0, "high": 2.0}
        actor = ProbabilisticActor(
            TensorDictModule(net, ["observation"], ["loc", "scale"]),
            in_keys=["loc", "scale"],
            distribution_class=TanhNormal,
            distribution_kwargs=kwargs,
            return_log_prob=True,
        )
        reference = ProbabilisticTensorDictSequential(
            actor.module[0],
            ProbabilisticTensorDictModule(
                ["loc", "scale"],
                ["action"],
                distribution_class=TanhNormal,
                distribution_kwargs=kwargs,
                return_log_prob=True,
            ),
        )
        td = _obs(batch=32)
        for mode in (ExplorationType.RANDOM, ExplorationType.DETERMINISTIC):
            with set_exploration_type(mode):
                torch.manual_seed(5)
                ours = actor(td.clone())
                torch.manual_seed(5)
                ref = reference(td.clone())
            torch.testing.assert_close(ours["action"], ref["action"])
            torch.testing.assert_close(ours["action_log_prob"], ref["action_log_prob"])
        assert ours["action"].abs().max() <= 2.0

    def test_changing_return_log_prob_after_construction(self):
        actor = _normal_actor()
        actor.module[-1].return_log_prob = True
        with set_exploration_type(ExplorationType.RANDOM):
            td = actor(_obs())
        dist = actor.get_dist(td)
        torch.testing.assert_close(td["action_log_prob"], dist.log_prob(td["action"]))
        actor.module[-1].return_log_prob = False
        assert "action_log_prob" not in actor(_obs()).keys()

    def test_inner_module_hooks_and_skip_existing_are_honoured(self):
        actor = _categorical_actor()
        actor.module[0].register_forward_hook(
            lambda mod, args, out: out.set("logits", torch.tensor([[0.0, 50.0, 0.0]]).expand(5, 3))
        )
        with set_exploration_type(ExplorationType.RANDOM):
            assert (actor(_obs())["action"] == 1).all()
        actor = _categorical_actor()
        td = _obs()
        td["logits"] = torch.tensor([[0.0, 0.0, 50.0]]).expand(5, 3)
        with set_skip_existing(True), set_exploration_type(ExplorationType.DETERMINISTIC):
            assert (actor(td)["action"] == 2).all()


def _vmap_family(kind):
    if kind == "actor":
        return Actor(nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))), "action"
    if kind == "value":
        return ValueOperator(nn.Linear(4, 1)), "state_value"
    if kind == "qvalue":
        return QValueActor(nn.Linear(4, 3), spec=OneHot(3)), "action_value"
    if kind == "probabilistic":
        return _normal_actor(), "action"
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["actor", "value", "qvalue", "probabilistic"])
def test_vmap_ensemble_with_from_module(kind):
    """The seed's functional example: stacked parameters, torch.vmap over them."""
    module, key = _vmap_family(kind)
    params = TensorDict.from_module(module)
    ensemble = torch.stack([params.apply(lambda p, i=i: p * (1 + i)) for i in range(3)])
    ensemble = ensemble.contiguous()
    td = _obs()

    def call(p, data):
        with p.to_module(module):
            return module(data)

    with set_exploration_type(ExplorationType.DETERMINISTIC):
        out = torch.vmap(call, (0, None))(ensemble, td.clone())
        assert out[key].shape[0] == 3
        for i in range(3):
            with ensemble[i].to_module(module):
                torch.testing.assert_close(out[key][i], module(td.clone())[key])


class TestValueOperator:
    def test_default_keys(self):
        assert ValueOperator(nn.Linear(4, 1)).out_keys == ["state_value"]
        qv = ValueOperator(nn.Linear(4, 1), in_keys=["observation", "action"])
        assert qv.out_keys == ["state_action_value"]

    def test_values(self):
        linear = nn.Linear(4, 1)
        td = ValueOperator(linear)(_obs())
        torch.testing.assert_close(td["state_value"], linear(td["observation"]))

    def test_missing_key(self):
        with pytest.raises(KeyError, match=r"observation.*obs"):
            ValueOperator(nn.Linear(4, 1))(TensorDict(obs=torch.zeros(1, 4), batch_size=[1]))


class TestQValue:
    @pytest.mark.parametrize("masked", [False, True])
    def test_one_hot(self, masked):
        values = torch.randn(6, 4)
        mask = torch.rand(6, 4) > 0.4
        mask[:, 0] = True
        data = {"action_value": values}
        if masked:
            data["action_mask"] = mask
        module = QValueModule(spec=OneHot(4), action_mask_key="action_mask" if masked else None)
        td = module(TensorDict(data, batch_size=[6]))
        masked_values = values.masked_fill(~mask, float("-inf")) if masked else values
        expected = torch.nn.functional.one_hot(masked_values.argmax(-1), 4)
        torch.testing.assert_close(td["action"], expected)
        torch.testing.assert_close(td["chosen_action_value"], masked_values.max(-1, True).values)

    def test_categorical(self):
        values = torch.randn(6, 4)
        td = QValueModule("categorical")(TensorDict(action_value=values, batch_size=[6]))
        torch.testing.assert_close(td["action"], values.argmax(-1))
        torch.testing.assert_close(td["chosen_action_value"], values.max(-1, True).values)

    def test_multi_one_hot(self):
        values = torch.randn(3, 5)
        td = QValueModule(spec=MultiOneHot([2, 3]))(TensorDict(action_value=values, batch_size=[3]))
        expected = torch.cat(
            [
                torch.nn.functional.one_hot(values[:, :2].argmax(-1), 2),
                torch.nn.functional.one_hot(values[:, 2:].argmax(-1), 3),
            ],
            -1,
        )
        torch.testing.assert_close(td["action"], expected)

    def test_ties_give_one_action(self):
        td = QValueModule("one_hot")(TensorDict(action_value=torch.zeros(2, 3), batch_size=[2]))
        assert (td["action"].sum(-1) == 1).all()

    def test_actor_masks_invalid_actions(self):
        actor = QValueActor(nn.Linear(4, 3), spec=Categorical(3), action_mask_key="action_mask")
        td = _obs(batch=200)
        td["action_mask"] = torch.tensor([True, False, True]).expand(200, 3)
        with torch.no_grad():
            actor.module[0].module.bias.copy_(torch.tensor([0.0, 100.0, 0.0]))
        action = actor(td)["action"]
        assert (action != 1).all()

    def test_actor_keys_and_state_dict(self):
        a = QValueActor(nn.Linear(4, 3), spec=OneHot(3))
        assert a.out_keys == ["action", "action_value", "chosen_action_value"]
        b = QValueActor(nn.Linear(4, 3), spec=OneHot(3))
        b.load_state_dict(a.state_dict())
        td = _obs()
        torch.testing.assert_close(a(td.clone())["action"], b(td.clone())["action"])

    def test_bad_action_space(self):
        with pytest.raises(ValueError, match="action_space must be one of"):
            QValueModule("gaussian")
        with pytest.raises(ValueError, match="Neither action_space nor spec"):
            QValueModule()

    def test_missing_action_value_key(self):
        with pytest.raises(KeyError, match=r"action_value.*Keys present.*observation"):
            QValueModule("categorical")(_obs())

    def test_distributional(self):
        support = torch.linspace(-1, 1, 5)
        net = nn.Sequential(nn.Linear(4, 15), nn.Unflatten(-1, (5, 3)))
        actor = DistributionalQValueActor(net, support=support, spec=Categorical(3))
        td = actor(_obs())
        logp = torch.log_softmax(net(td["observation"]), -2)
        torch.testing.assert_close(td["action_value"], logp)
        expected = (logp.exp() * support.unsqueeze(-1)).sum(-2).argmax(-1)
        torch.testing.assert_close(td["action"], expected)

    def test_distributional_support_mismatch(self):
        module = DistributionalQValueModule("categorical", support=torch.zeros(4))
        td = TensorDict(action_value=torch.zeros(2, 5, 3), batch_size=[2])
        with pytest.raises(RuntimeError, match="support has 4 atoms"):
            module(td)


class TestActorCritic:
    def _parts(self):
        trunk = TensorDictModule(nn.Linear(4, 8), ["observation"], ["hidden"])
        policy = ProbabilisticActor(
            TensorDictModule(nn.Linear(8, 3), ["hidden"], ["logits"]),
            in_keys=["logits"],
            distribution_class=TorchCategorical,
            return_log_prob=True,
        )
        value = ValueOperator(nn.Linear(8, 1), in_keys=["hidden"])
        return trunk, policy, value

    def test_actor_value_operator_shares_trunk(self):
        agent = ActorValueOperator(*self._parts())
        td = _obs()
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            full = agent(td.clone())
            pol = agent.get_policy_operator()(td.clone())
        val = agent.get_value_operator()(td.clone())
        torch.testing.assert_close(full["action"], pol["action"])
        torch.testing.assert_close(full["state_value"], val["state_value"])
        assert "state_value" not in pol.keys() and "action" not in val.keys()
        assert agent.get_policy_operator().module[0] is agent.get_value_operator().module[0]
        assert agent.get_policy_head() is agent.module[1]
        assert agent.get_value_head() is agent.module[2]
        # the policy operator is probabilistic: it gives the distribution
        dist = agent.get_policy_operator().get_dist(td.clone())
        torch.testing.assert_close(dist.log_prob(full["action"]), full["action_log_prob"])

    def test_actor_critic_operator(self):
        trunk = TensorDictModule(nn.Linear(4, 8), ["observation"], ["hidden"])
        actor = Actor(nn.Linear(8, 2), in_keys=["hidden"])

        class QNet(nn.Module):
            def forward(self, hidden, action):
                return torch.cat([hidden, action], -1).sum(-1, keepdim=True)

        op = ActorCriticOperator(trunk, actor, ValueOperator(QNet(), ["hidden", "action"]))
        td = op(_obs())
        expected = torch.cat([td["hidden"], td["action"]], -1).sum(-1, keepdim=True)
        torch.testing.assert_close(td["state_action_value"], expected)
        assert op.get_critic_operator() is op
        with pytest.raises(RuntimeError, match="get_critic_operator"):
            op.get_value_operator()
        with pytest.raises(RuntimeError, match="writes 'state_value'"):
            ActorCriticOperator(*self._parts())

    def test_actor_critic_wrapper(self):
        actor, value = Actor(nn.Linear(4, 2)), ValueOperator(nn.Linear(4, 1))
        ac = ActorCriticWrapper(actor, value)
        assert ac.get_policy_operator() is actor and ac.get_value_head() is value
        td = ac(_obs())
        assert td["action"].shape == (5, 2) and td["state_value"].shape == (5, 1)


class TestTanhModule:
    def test_rescales_into_spec(self):
        spec = Bounded(torch.tensor([0.0, -2.0]), torch.tensor([1.0, 2.0]))
        module = TanhModule(["loc"], ["action"], spec=spec)
        x = torch.randn(10, 2) * 3
        out = module(TensorDict(loc=x, batch_size=[10]))["action"]
        expected = spec.low + (spec.high - spec.low) * (x.tanh() + 1) / 2
        torch.testing.assert_close(out, expected)

    def test_default_is_tanh(self):
        x = torch.randn(4, 3)
        out = TanhModule(["x"])(TensorDict(x=x, batch_size=[4]))["x"]
        torch.testing.assert_close(out, x.tanh())

    def test_errors(self):
        with pytest.raises(ValueError, match="high < low"):
            TanhModule(["x"], low=1.0, high=-1.0)
        with pytest.raises(ValueError, match="same length"):
            TanhModule(["x", "y"], ["z"])
        with pytest.raises(
            ValueError,
            match=r"minimum value \(-2.0\) provided to TanhModule does not match the action spec",
        ):
            TanhModule(["x"], spec=Bounded(-1.0, 1.0, (1,)), low=-2.0)


class TestVmapModule:
    @pytest.mark.parametrize("mock", [False, True])
    def test_maps_over_dim(self, mock):
        # the module centers over its first dim: mapped over dim 0, that is the input's dim 1
        center = TensorDictModule(lambda x: x - x.mean(0), in_keys=["x"], out_keys=["y"])
        td = TensorDict(x=torch.randn(4, 5, 3), batch_size=[4, 5])
        out = VmapModule(center, vmap_dim=0, mock=mock)(td)
        torch.testing.assert_close(out["y"], td["x"] - td["x"].mean(1, keepdim=True))

    def test_unbatched_raises(self):
        module = VmapModule(TensorDictModule(lambda x: x, in_keys=["x"], out_keys=["y"]))
        with pytest.raises(ValueError, match="at least one batch dim"):
            module(TensorDict(x=torch.zeros(3)))


def test_safe_module_reads_a_missing_in_key_as_none():
    # TorchRL's SafeModule: a module that starts a state itself gets None for it
    def step(x, state):
        return x if state is None else x + state

    module = SafeModule(step, in_keys=["x", "state"], out_keys=["state"])
    td = module(TensorDict(x=torch.ones(2), batch_size=[2]))
    assert torch.equal(td["state"], torch.ones(2))
    assert torch.equal(module(td)["state"], torch.full((2,), 2.0))
    # a module that cannot take None: the error names the missing key
    actor = Actor(torch.nn.Linear(3, 2))
    with pytest.raises(KeyError, match="observation"):
        actor(TensorDict(obs=torch.ones(3)))
