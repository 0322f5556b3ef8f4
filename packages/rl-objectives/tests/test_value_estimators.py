"""Estimator modules of rl.objectives.value: keys, value-network calls, contract with losses."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import (
    InteractionType,
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    set_interaction_type,
)

from rl.objectives.value import (
    GAE,
    TD0Estimator,
    TD1Estimator,
    TDLambdaEstimator,
    ValueEstimators,
    VTrace,
)
from rl.objectives.value import functional as F

B, T, OBS = 3, 9, 4


def value_net(seed=0):
    torch.manual_seed(seed)
    return TensorDictModule(torch.nn.Linear(OBS, 1), in_keys=["obs"], out_keys=["state_value"])


def batch(seed=0, b=B, t=T):
    g = torch.Generator().manual_seed(seed)
    done = torch.zeros(b, t, 1, dtype=torch.bool)
    done[:, 3] = True
    done[0, 6] = True
    term = done.clone()
    term[0, 6] = False  # a truncation
    obs = torch.randn(b, t + 1, OBS, generator=g)
    # a real rollout: inside a trajectory the next observation is the next step's one
    next_obs = torch.where(done, torch.randn(b, t, OBS, generator=g), obs[:, 1:])
    return TensorDict(
        {
            "obs": obs[:, :-1],
            "next": {
                "obs": next_obs,
                "reward": torch.randn(b, t, 1, generator=g),
                "done": done,
                "terminated": term,
            },
        },
        [b, t],
    )


def expected_values(net, td):
    with torch.no_grad():
        return net.module(td["obs"]), net.module(td["next", "obs"])


def flags(td):
    return td["next", "reward"], td["next", "done"], td["next", "terminated"]


class TestGAE:
    def test_writes_advantage_target_and_values(self):
        net, td = value_net(), batch()
        GAE(gamma=0.9, lmbda=0.8, value_network=net)(td)
        v, nv = expected_values(net, td)
        adv, target = F.vec_generalized_advantage_estimate(0.9, 0.8, v, nv, *flags(td))
        torch.testing.assert_close(td["advantage"], adv)
        torch.testing.assert_close(td["value_target"], target)
        torch.testing.assert_close(td["state_value"], v)
        torch.testing.assert_close(td["next", "state_value"], nv)
        assert not td["advantage"].requires_grad

    def test_without_value_network_reads_the_values(self):
        td = batch()
        td["state_value"] = torch.randn(B, T, 1)
        td["next", "state_value"] = torch.randn(B, T, 1)
        GAE(gamma=0.9, lmbda=0.8, value_network=None)(td)
        adv, _ = F.vec_generalized_advantage_estimate(
            0.9, 0.8, td["state_value"], td["next", "state_value"], *flags(td)
        )
        torch.testing.assert_close(td["advantage"], adv)

    def test_missing_value_without_network(self):
        td = batch()
        td["state_value"] = torch.randn(B, T, 1)
        with pytest.raises(
            KeyError, match=r"needs key \('next', 'state_value'\).*set_keys\(value=\.\.\.\)"
        ):
            GAE(gamma=0.9, lmbda=0.8, value_network=None)(td)

    def test_missing_reward(self):
        td = batch()
        del td["next", "reward"]
        with pytest.raises(
            KeyError, match=r"GAE needs key \('next', 'reward'\).*set_keys\(reward=\.\.\.\)"
        ):
            GAE(gamma=0.9, lmbda=0.8, value_network=value_net())(td)

    def test_set_keys(self):
        net = TensorDictModule(torch.nn.Linear(OBS, 1), in_keys=["obs"], out_keys=["v"])
        gae = GAE(gamma=0.9, lmbda=0.8, value_network=net)
        gae.set_keys(advantage="adv", value_target=("targets", "v"), value_key="v")
        td = gae(batch())
        assert {"adv", ("targets", "v"), "v", ("next", "v")} <= set(td.keys(True, True))
        assert gae.advantage_key == "adv" and gae.value_key == "v"
        with pytest.raises(KeyError, match=r"value key 'nope' is not written by the value network"):
            gae.set_keys(value="nope")
        with pytest.raises(KeyError, match="'bogus' is not a key of GAE"):
            gae.set_keys(bogus="x")

    def test_shifted_equals_two_calls(self):
        # row 0 has one truncation inside the rollout: a budget of 2 slots keeps every step
        net, td = value_net(), batch()
        a = GAE(gamma=0.9, lmbda=0.8, value_network=net)(td.clone())
        b = GAE(gamma=0.9, lmbda=0.8, value_network=net, shifted=True, shifted_budget=2)(td.clone())
        torch.testing.assert_close(a["advantage"], b["advantage"])
        torch.testing.assert_close(a["next", "state_value"], b["next", "state_value"])
        assert b["shifted_valid"].all()

    def test_shifted_budget_drops_the_steps_that_do_not_fit(self):
        # budget 1: row 0's truncation at t=6 takes the extra slot, so its last step (t=8)
        # has no slot for V(s'); t=7 becomes the last step and bootstraps from V(s'_7)
        net, td = value_net(), batch()
        got = GAE(gamma=0.9, lmbda=0.8, value_network=net, shifted=True)(td.clone())
        valid = torch.ones(B, T, dtype=torch.bool)
        valid[0, -1] = False
        torch.testing.assert_close(got["shifted_valid"], valid)
        cut = td.clone()
        cut["next", "done"][0, 7] = True  # done, not terminated: bootstraps
        ref = GAE(gamma=0.9, lmbda=0.8, value_network=net)(cut)
        for key in ("advantage", "value_target"):
            torch.testing.assert_close(got[key][valid], ref[key][valid])
            assert (got[key][~valid] == 0).all()
        with pytest.raises(ValueError, match="shifted_budget must be >= 1, got 0"):
            GAE(gamma=0.9, lmbda=0.8, value_network=net, shifted=True, shifted_budget=0)

    @pytest.mark.parametrize("cls", ["TD0Estimator", "TD1Estimator", "TDLambdaEstimator"])
    def test_shifted_budget_td(self, cls):
        import rl.objectives.value as value_mod

        kwargs = {"lmbda": 0.7} if cls == "TDLambdaEstimator" else {}
        net, td = value_net(), batch()
        make = getattr(value_mod, cls)
        got = make(gamma=0.9, value_network=net, shifted=True, **kwargs)(td.clone())
        cut = td.clone()
        cut["next", "done"][0, 7] = True
        ref = make(gamma=0.9, value_network=net, **kwargs)(cut)
        valid = got["shifted_valid"]
        assert not valid[0, -1] and valid.sum() == B * T - 1
        torch.testing.assert_close(got["value_target"][valid], ref["value_target"][valid])
        assert got["value_target"][0, -1].item() == 0

    def test_group_key_standardizes_within_groups(self):
        net, td = value_net(), batch()
        td["task"] = torch.tensor([[0], [1], [0]]).expand(B, T).clone()
        plain = GAE(gamma=0.9, lmbda=0.8, value_network=net)(td.clone())["advantage"]
        gae = GAE(gamma=0.9, lmbda=0.8, value_network=net, average_gae=True, group_key="task")
        assert "task" in gae.in_keys
        got = gae(td.clone())["advantage"]
        for rows in ([0, 2], [1]):
            x = plain[rows]
            torch.testing.assert_close(got[rows], (x - x.mean()) / x.std())
        with pytest.raises(KeyError, match="group_key 'task' is missing from the input"):
            gae(batch())

    @pytest.mark.parametrize("cls", ["TD0Estimator", "TD1Estimator", "TDLambdaEstimator"])
    def test_group_key_standardizes_rewards(self, cls):
        import rl.objectives.value as value_mod

        kwargs = {"lmbda": 0.7} if cls == "TDLambdaEstimator" else {}
        net, td = value_net(), batch()
        td["task"] = torch.tensor([[0], [1], [1]]).expand(B, T).clone()
        reward = td["next", "reward"].clone()
        est = getattr(value_mod, cls)(
            gamma=0.9, value_network=net, average_rewards=True, group_key="task", **kwargs
        )
        out = est(td)
        for rows in ([0], [1, 2]):
            x = reward[rows]
            torch.testing.assert_close(out["next", "reward"][rows], (x - x.mean()) / x.std())

    def test_auto_reset_env_bootstraps_truncation_from_the_current_value(self):
        # an auto-resetting env: the next observation at a truncation is the reset one,
        # so the step ends like a termination with gamma * V(s_t) added to its reward
        net, td = value_net(), batch()
        td["next", "truncated"] = td["next", "done"] & ~td["next", "terminated"]
        got = GAE(gamma=0.9, lmbda=0.8, value_network=net, auto_reset_env=True)(td.clone())
        value, next_value = expected_values(net, td)
        reward, done, _ = flags(td)
        reward = reward + 0.9 * value * td["next", "truncated"]
        adv, target = F.generalized_advantage_estimate(
            0.9, 0.8, value, next_value, reward, done, done
        )
        torch.testing.assert_close(got["advantage"], adv)
        torch.testing.assert_close(got["value_target"], target)
        with pytest.raises(KeyError, match="truncated"):
            GAE(gamma=0.9, lmbda=0.8, value_network=net, auto_reset_env=True)(batch())

    def test_time_first(self):
        net, td = value_net(), batch()
        ref = GAE(gamma=0.9, lmbda=0.8, value_network=net)(td.clone())
        got = GAE(gamma=0.9, lmbda=0.8, value_network=net, time_dim=0)(
            td.transpose(0, 1).contiguous()
        )
        torch.testing.assert_close(got["advantage"].transpose(0, 1), ref["advantage"])
        shifted = GAE(gamma=0.9, lmbda=0.8, value_network=net, shifted=True, shifted_budget=2)
        got = shifted(td.transpose(0, 1).contiguous(), time_dim=0)
        torch.testing.assert_close(got["advantage"].transpose(0, 1), ref["advantage"])

    def test_average_gae(self):
        td = GAE(gamma=0.9, lmbda=0.8, value_network=value_net(), average_gae=True)(batch())
        adv = td["advantage"]
        torch.testing.assert_close(adv.mean(), torch.tensor(0.0), atol=1e-5, rtol=0)
        torch.testing.assert_close(adv.std(), torch.tensor(1.0))

    def test_params_and_target_params(self):
        net, td = value_net(), batch()
        params = TensorDict.from_module(net).apply(torch.zeros_like)
        target = TensorDict.from_module(net).apply(torch.ones_like)
        GAE(gamma=0.9, lmbda=0.8, value_network=net)(td, params=params, target_params=target)
        torch.testing.assert_close(td["state_value"], torch.zeros(B, T, 1))
        torch.testing.assert_close(
            td["next", "state_value"], td["next", "obs"].sum(-1, keepdim=True) + 1
        )

    def test_differentiable_keeps_graph_to_inputs_not_to_the_network(self):
        net, td = value_net(), batch()
        td["obs"].requires_grad_()
        GAE(gamma=0.9, lmbda=0.8, value_network=net, differentiable=True)(td)
        td["advantage"].sum().backward()
        assert td["obs"].grad is not None
        assert all(p.grad is None for p in net.parameters())

    def test_value_estimate(self):
        net, td = value_net(), batch()
        est = GAE(gamma=0.9, lmbda=0.8, value_network=net)
        target = est.value_estimate(td.clone())
        torch.testing.assert_close(target, est(td)["value_target"])

    def test_state_dict_round_trip(self):
        a = GAE(gamma=0.9, lmbda=0.8, value_network=None)
        b = GAE(gamma=0.5, lmbda=0.5, value_network=None)
        b.load_state_dict(a.state_dict())
        assert float(b.gamma) == pytest.approx(0.9) and float(b.lmbda) == pytest.approx(0.8)
        assert not list(GAE(gamma=0.9, lmbda=0.8, value_network=value_net()).parameters())


class TestTDEstimators:
    @pytest.mark.parametrize(
        "make, ref",
        [
            (
                lambda n: TD0Estimator(gamma=0.9, value_network=n),
                lambda nv, r, d, t: F.td0_return_estimate(0.9, nv, r, t),
            ),
            (
                lambda n: TD1Estimator(gamma=0.9, value_network=n),
                lambda nv, r, d, t: F.vec_td1_return_estimate(0.9, nv, r, d, t),
            ),
            (
                lambda n: TDLambdaEstimator(gamma=0.9, lmbda=0.6, value_network=n),
                lambda nv, r, d, t: F.vec_td_lambda_return_estimate(0.9, 0.6, nv, r, d, t),
            ),
        ],
        ids=["td0", "td1", "tdlambda"],
    )
    def test_targets_and_advantages(self, make, ref):
        net, td = value_net(), batch()
        make(net)(td)
        v, nv = expected_values(net, td)
        target = ref(nv, *flags(td))
        torch.testing.assert_close(td["value_target"], target)
        torch.testing.assert_close(td["advantage"], target - v)

    def test_value_estimate_with_next_value(self):
        # what an off-policy loss does: no value network, its own next value
        td = batch()
        next_value = torch.randn(B, T, 1)
        est = TD0Estimator(gamma=0.9, value_network=None)
        target = est.value_estimate(td, next_value=next_value)
        torch.testing.assert_close(
            target, td["next", "reward"] + 0.9 * ~td["next", "terminated"] * next_value
        )

    def test_value_estimate_reads_next_value(self):
        td = batch()
        td["next", "state_value"] = torch.randn(B, T, 1)
        target = TDLambdaEstimator(gamma=0.9, lmbda=0.0, value_network=None).value_estimate(td)
        torch.testing.assert_close(
            target,
            F.td0_return_estimate(
                0.9, td["next", "state_value"], td["next", "reward"], td["next", "terminated"]
            ),
        )

    def test_td0_on_flat_batch(self):
        # replay-buffer samples have no time dimension
        td = batch().reshape(-1)
        next_value = torch.randn(B * T, 1)
        target = TD0Estimator(gamma=0.9, value_network=None).value_estimate(
            td, next_value=next_value
        )
        assert target.shape == (B * T, 1)

    def test_value_estimate_with_target_params(self):
        net, td = value_net(), batch()
        target_params = TensorDict.from_module(net).apply(torch.zeros_like)
        target = TD0Estimator(gamma=0.9, value_network=net).value_estimate(
            td, target_params=target_params
        )
        torch.testing.assert_close(target, td["next", "reward"])

    def test_steps_to_next_obs(self):
        td = batch()
        td["steps_to_next_obs"] = torch.full((B, T, 1), 2)
        nv = torch.ones(B, T, 1)
        target = TD0Estimator(gamma=0.5, value_network=None).value_estimate(td, next_value=nv)
        torch.testing.assert_close(target, td["next", "reward"] + 0.25 * ~td["next", "terminated"])

    def test_average_rewards(self):
        td = batch()
        td["next", "state_value"] = torch.zeros(B, T, 1)
        TD1Estimator(gamma=0.9, value_network=None, average_rewards=True).value_estimate(td)
        torch.testing.assert_close(
            td["next", "reward"].mean(), torch.tensor(0.0), atol=1e-5, rtol=0
        )


def vtrace_actor():
    return ProbabilisticTensorDictSequential(
        TensorDictModule(
            torch.nn.Sequential(torch.nn.Linear(OBS, 2), NormalParamExtractor()),
            ["obs"],
            ["loc", "scale"],
        ),
        ProbabilisticTensorDictModule(
            ["loc", "scale"], ["action"], distribution_class=torch.distributions.Normal
        ),
    )


class TestVTrace:
    def test_matches_functional(self):
        # pi scores the action the actor draws under its default (deterministic)
        # interaction type, the mean for a Normal, as TorchRL 0.14; no stored action.
        torch.manual_seed(0)
        net, td, actor = value_net(), batch(), vtrace_actor()
        td["action_log_prob"] = torch.randn(B, T, 1) - 1
        assert "action" not in td.keys()
        VTrace(gamma=0.9, actor_network=actor, value_network=net, rho_thresh=1.2, c_thresh=0.9)(td)
        v, nv = expected_values(net, td)
        with torch.no_grad():
            dist = actor.get_dist(td)
            log_pi = dist.log_prob(dist.mean)
        adv, target = F.vtrace_advantage_estimate(
            0.9, log_pi, td["action_log_prob"], v, nv, *flags(td), rho_thresh=1.2, c_thresh=0.9
        )
        torch.testing.assert_close(td["advantage"], adv)
        torch.testing.assert_close(td["value_target"], target)

    def test_random_interaction_scores_a_fresh_sample(self):
        torch.manual_seed(0)
        net, td, actor = value_net(), batch(), vtrace_actor()
        td["action_log_prob"] = torch.randn(B, T, 1) - 1
        torch.manual_seed(5)
        with set_interaction_type(InteractionType.RANDOM):
            VTrace(gamma=0.9, actor_network=actor, value_network=net)(td)
        v, nv = expected_values(net, td)
        with torch.no_grad():
            dist = actor.get_dist(td)
            torch.manual_seed(5)
            log_pi = dist.log_prob(dist.rsample())
        adv, target = F.vtrace_advantage_estimate(
            0.9, log_pi, td["action_log_prob"], v, nv, *flags(td)
        )
        torch.testing.assert_close(td["advantage"], adv)
        torch.testing.assert_close(td["value_target"], target)

    def test_group_key_standardizes_the_advantage_within_groups(self):
        torch.manual_seed(0)
        net, td, actor = value_net(), batch(), vtrace_actor()
        td["action_log_prob"] = torch.randn(B, T, 1) - 1
        td["task"] = torch.tensor([[3], [3], [7]]).expand(B, T).clone()
        plain = VTrace(gamma=0.9, actor_network=actor, value_network=net)(td.clone())
        got = VTrace(
            gamma=0.9, actor_network=actor, value_network=net, average_adv=True, group_key="task"
        )(td.clone())
        for rows in ([0, 1], [2]):
            x = plain["advantage"][rows]
            torch.testing.assert_close(got["advantage"][rows], (x - x.mean()) / x.std())


class TestEnumAndCompile:
    def test_enum_members_and_error(self):
        assert [m.name for m in ValueEstimators] == [
            "TD0",
            "TD1",
            "TDLambda",
            "GAE",
            "MAGAE",
            "VTrace",
        ]
        assert ValueEstimators("gae") is ValueEstimators.GAE
        with pytest.raises(
            ValueError, match=r"'Foo' is not a value estimator; valid ones are ValueEstimators\.TD0"
        ):
            ValueEstimators("Foo")

    @pytest.mark.parametrize(
        "make",
        [
            lambda: GAE(gamma=0.9, lmbda=0.8, value_network=None),
            lambda: TDLambdaEstimator(gamma=0.9, lmbda=0.8, value_network=None),
            lambda: TD0Estimator(gamma=0.9, value_network=None),
        ],
        ids=["gae", "tdlambda", "td0"],
    )
    def test_compile_matches_eager(self, make):
        td = batch()
        td["state_value"] = torch.randn(B, T, 1)
        td["next", "state_value"] = torch.randn(B, T, 1)
        est = make()
        eager = est(td.clone())
        compiled = torch.compile(est, backend="eager")(td.clone())
        torch.testing.assert_close(compiled["advantage"], eager["advantage"])
        torch.testing.assert_close(compiled["value_target"], eager["value_target"])

    @pytest.mark.parametrize("make", [GAE, TDLambdaEstimator], ids=["gae", "tdlambda"])
    def test_compile_one_graph_with_value_network(self, make):
        # the examples' compiled advantage: value network and scan under no_grad, no
        # graph break (fullgraph raises on one), same values as the eager rl-cpp path
        torch._dynamo.reset()

        def advantage(est, td):
            with torch.no_grad():
                return est(td)

        est = make(gamma=torch.tensor(0.9), lmbda=0.8, value_network=value_net())
        td = batch()
        eager = advantage(est, td.clone())
        compiled = torch.compile(advantage, backend="eager", fullgraph=True)(est, td.clone())
        torch.testing.assert_close(compiled["advantage"], eager["advantage"])
        torch.testing.assert_close(compiled["value_target"], eager["value_target"])
        assert all(p.requires_grad for p in est.value_network.parameters())


class TestValueChunks:
    @pytest.mark.parametrize(
        "make",
        [
            lambda **kw: TD0Estimator(gamma=0.9, **kw),
            lambda **kw: TD1Estimator(gamma=0.9, **kw),
            lambda **kw: TDLambdaEstimator(gamma=0.9, lmbda=0.95, **kw),
            lambda **kw: GAE(gamma=0.9, lmbda=0.95, **kw),
        ],
    )
    @pytest.mark.parametrize("shifted", [False, True])
    @pytest.mark.parametrize(
        "chunks",
        [
            {"value_chunk_size": 2},
            {"num_chunks": 2},
            {"num_chunk": 4},
            {"num_chunks": 4, "value_chunk_dim": 1},
            {"value_chunk_size": 4, "value_chunk_dim": -1},
        ],
    )
    def test_chunked_calls_give_the_same_values(self, make, shifted, chunks):
        net, td = value_net(), batch()
        calls = []
        net.register_forward_hook(lambda m, i, o: calls.append(1))
        expected = make(value_network=net, shifted=shifted)(td.clone())
        n_plain = len(calls)
        actual = make(value_network=net, shifted=shifted, **chunks)(td.clone())
        assert len(calls) - n_plain > n_plain  # the network really ran in several calls
        for key in ("advantage", "value_target", "state_value"):
            torch.testing.assert_close(actual[key], expected[key])

    def test_split_sizes(self):
        td = TensorDict({"obs": torch.randn(4, 5, 3)}, [4, 5])
        est = GAE(gamma=0.9, lmbda=0.95, value_network=value_net(), num_chunks=3, value_chunk_dim=1)
        assert [c.batch_size for c in est._split_value_net_input(td)] == [
            torch.Size([4, 2]),
            torch.Size([4, 2]),
            torch.Size([4, 1]),
        ]
        est = GAE(gamma=0.9, lmbda=0.95, value_network=value_net(), value_chunk_size=3)
        assert [c.batch_size for c in est._split_value_net_input(td)] == [
            torch.Size([3, 5]),
            torch.Size([1, 5]),
        ]

    def test_bad_options(self):
        net = value_net()
        with pytest.raises(ValueError, match="value_chunk_size and num_chunks"):
            GAE(gamma=0.9, lmbda=0.95, value_network=net, value_chunk_size=3, num_chunks=2)
        with pytest.raises(ValueError, match="num_chunks and num_chunk"):
            GAE(gamma=0.9, lmbda=0.95, value_network=net, num_chunks=2, num_chunk=3)
        with pytest.raises(ValueError, match="num_chunks must be >= 1, got 0"):
            GAE(gamma=0.9, lmbda=0.95, value_network=net, num_chunks=0)
        with pytest.raises(TypeError, match="value_chunk_size must be an int"):
            GAE(gamma=0.9, lmbda=0.95, value_network=net, value_chunk_size=2.5)
        est = GAE(gamma=0.9, lmbda=0.95, value_network=net, num_chunks=2, value_chunk_dim=2)
        with pytest.raises(ValueError, match="value_chunk_dim=2 is out of range"):
            est(batch())


class TestKeywordCall:
    @pytest.mark.parametrize(
        "make",
        [
            lambda net: TD0Estimator(gamma=0.9, value_network=net),
            lambda net: TDLambdaEstimator(gamma=0.9, lmbda=0.95, value_network=net),
            lambda net: GAE(gamma=0.9, lmbda=0.95, value_network=net),
        ],
    )
    def test_keyword_tensors_return_out_keys_in_order(self, make):
        # TorchRL's estimators also take the in_keys as keyword tensors ("next_obs" for
        # ("next", "obs")) and return the out_keys (advantage, value_target) as a tuple.
        net, td = value_net(), batch()
        est = make(net)
        kwargs = {"_".join((k,) if isinstance(k, str) else k): td.get(k) for k in est.in_keys}
        advantage, target = est(**kwargs)
        est(td)
        torch.testing.assert_close(advantage, td["advantage"])
        torch.testing.assert_close(target, td["value_target"])


@pytest.mark.parametrize(
    "cls, kwargs",
    [
        ("TD0Estimator", {}),
        ("TD1Estimator", {}),
        ("TDLambdaEstimator", {"lmbda": 0.95}),
        ("GAE", {"lmbda": 0.95}),
    ],
)
@pytest.mark.parametrize("shifted", [False, True])
def test_nan_next_observation_at_a_trajectory_end(cls, kwargs, shifted):
    # a compact buffer rebuilt by NextStateReconstructor leaves NaN next observations
    # where trajectories end: the returns stay finite and the caller's data is untouched
    import rl.objectives.value as value_mod

    torch.manual_seed(0)
    net = TensorDictModule(torch.nn.Linear(3, 1, bias=False), ["obs"], ["state_value"])
    obs = torch.randn(2, 5, 3)
    nxt = torch.empty(2, 5, 3)
    nxt[:, :-1] = obs[:, 1:]
    nxt[:, -1] = float("nan")
    done = torch.zeros(2, 5, 1, dtype=torch.bool)
    done[:, -1] = True
    td = TensorDict(
        obs=obs,
        next=TensorDict(
            obs=nxt,
            reward=torch.ones(2, 5, 1),
            done=done,
            terminated=done.clone(),
            batch_size=[2, 5],
        ),
        batch_size=[2, 5],
    )
    out = getattr(value_mod, cls)(gamma=0.9, value_network=net, shifted=shifted, **kwargs)(
        td.clone()
    )
    assert out["advantage"].isfinite().all() and out["value_target"].isfinite().all()
    # the terminated last step: advantage r - V(s), no bootstrap
    torch.testing.assert_close(out["advantage"][:, -1], 1 - out["state_value"][:, -1])
    assert torch.isnan(td["next", "obs"][:, -1]).all()


@pytest.mark.parametrize(
    "cls,kwargs",
    [
        ("TD0Estimator", {}),
        ("TD1Estimator", {}),
        ("TDLambdaEstimator", {"lmbda": 0.95}),
        ("GAE", {"lmbda": 0.95}),
    ],
)
def test_shifted_without_next_observations(cls, kwargs):
    # no ("next", obs) at all: the shifted call takes the next root observation inside a
    # trajectory and the root one at its end, as with NaN next observations there
    import rl.objectives.value as value_mod

    torch.manual_seed(0)
    net = TensorDictModule(torch.nn.Linear(3, 1, bias=False), ["obs"], ["state_value"])
    obs = torch.randn(2, 5, 3)
    done = torch.zeros(2, 5, 1, dtype=torch.bool)
    done[:, 2] = done[:, -1] = True
    missing = TensorDict(
        obs=obs,
        next=TensorDict(
            reward=torch.ones(2, 5, 1), done=done, terminated=done.clone(), batch_size=[2, 5]
        ),
        batch_size=[2, 5],
    )
    reference = missing.clone()
    nxt = torch.cat([obs[:, 1:], obs[:, -1:]], 1)
    reference["next", "obs"] = torch.where(done, obs, nxt)
    est = getattr(value_mod, cls)(gamma=0.9, value_network=net, shifted=True, **kwargs)
    got, expected = est(missing.clone()), est(reference)
    assert ("next", "obs") not in missing.keys(True)
    torch.testing.assert_close(got["advantage"], expected["advantage"])
    torch.testing.assert_close(got["value_target"], expected["value_target"])


def test_compiled_gae_before_the_kernel_lookup_is_not_recompiled(monkeypatch):
    """A functional GAE compiled before any eager call (rl-cpp's kernels not looked up
    yet) keeps its graph when an eager call then does the lookup."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    from rl.objectives.value import _scan

    monkeypatch.setattr(_scan, "_cpp", None)  # as in a fresh process
    torch._dynamo.reset()
    counters.clear()
    gen = torch.Generator().manual_seed(0)
    value, next_value, reward = (torch.randn(2, 5, 1, generator=gen) for _ in range(3))
    done = torch.zeros(2, 5, 1, dtype=torch.bool)
    done[:, -1] = True

    def gae(v, nv, r):
        return F.generalized_advantage_estimate(0.9, 0.95, v, nv, r, done, done)

    compiled = torch.compile(gae, backend="eager")
    first = compiled(value, next_value, reward)
    assert _scan._cpp is None  # the trace did not look the kernels up
    eager = gae(value, next_value, reward)  # the eager call does
    with torch._dynamo.config.patch(error_on_recompile=True):
        again = compiled(value, next_value, reward)
    for got in (first, again):
        torch.testing.assert_close(got[0], eager[0])
        torch.testing.assert_close(got[1], eager[1])
    assert counters["stats"]["unique_graphs"] == 1
    torch._dynamo.reset()


class TestValueEstimatorRegistry:
    def test_builtins_and_aliases(self):
        from rl.objectives.value import get_value_estimator_entry

        for member, cls in (
            (ValueEstimators.TD0, TD0Estimator),
            (ValueEstimators.TD1, TD1Estimator),
            (ValueEstimators.TDLambda, TDLambdaEstimator),
            (ValueEstimators.GAE, GAE),
            (ValueEstimators.VTrace, VTrace),
        ):
            entry = get_value_estimator_entry(member)
            assert entry.cls is cls and entry.default_kwargs["gamma"] == 0.99
            assert get_value_estimator_entry(member.name.lower()) is entry
        with pytest.raises(KeyError, match="Unknown value estimator alias 'nope'"):
            get_value_estimator_entry("nope")
        with pytest.raises(TypeError, match="must be a registered enum value"):
            get_value_estimator_entry(42)

    def test_register_build_and_dispatch(self):
        from enum import Enum

        from rl.objectives import default_value_kwargs
        from rl.objectives.value import (
            _VALUE_ESTIMATOR_REGISTRY,
            build_value_estimator,
            dispatch_value_estimator,
            get_value_estimator_entry,
            register_value_estimator,
        )

        class Mine(Enum):
            FAKE = "fake"

        @register_value_estimator(Mine.FAKE, default_kwargs={"gamma": 0.9, "lmbda": 0.5})
        class MyGAE(GAE):
            pass

        class Loss:
            gamma = 0.7

        try:
            entry = get_value_estimator_entry("fake")
            assert entry.cls is MyGAE and default_value_kwargs(Mine.FAKE) == {
                "gamma": 0.9,
                "lmbda": 0.5,
            }
            net = value_net()
            Loss.critic_network = net  # found by for_loss
            est = build_value_estimator(Loss(), Mine.FAKE)
            assert isinstance(est, MyGAE) and est.value_network is net
            assert est.gamma.item() == pytest.approx(0.9) and est.lmbda.item() == 0.5
            loss = Loss()
            est = dispatch_value_estimator(
                loss, "fake", supported=[Mine.FAKE], tensor_keys={"advantage": "adv"}
            )
            # the loss's gamma wins over the default; the estimator is set on the loss
            assert est.gamma.item() == pytest.approx(0.7) and loss._value_estimator is est
            assert loss.value_type is Mine.FAKE and est.tensor_keys.advantage == "adv"
            with pytest.raises(NotImplementedError, match="Supported value types: \\['TD0'\\]"):
                dispatch_value_estimator(loss, Mine.FAKE, supported=[ValueEstimators.TD0])
        finally:
            _VALUE_ESTIMATOR_REGISTRY.pop(Mine.FAKE, None)

    def test_vtrace_for_loss_takes_the_actor(self):
        from rl.objectives.value import build_value_estimator

        class Loss:
            pass

        net, actor = value_net(), vtrace_actor()
        Loss.actor_network = actor
        est = build_value_estimator(Loss(), "vtrace", value_network=net)
        assert isinstance(est, VTrace) and est.actor_network is actor and est.value_network is net


class TestDeprecatedEstimateNames:
    @pytest.mark.parametrize(
        "old, new, kwargs",
        [
            ("TD0Estimate", TD0Estimator, {}),
            ("TD1Estimate", TD1Estimator, {}),
            ("TDLambdaEstimate", TDLambdaEstimator, {"lmbda": 0.6}),
        ],
    )
    def test_warns_and_computes_what_the_new_name_computes(self, old, new, kwargs):
        import rl.objectives.value as value

        old_cls = getattr(value, old)
        net, td_old, td_new = value_net(), batch(), batch()
        with pytest.warns(
            DeprecationWarning, match=f"{old} is deprecated, use {new.__name__} instead"
        ):
            est = old_cls(gamma=0.9, value_network=net, **kwargs)
        assert isinstance(est, new)
        est(td_old)
        new(gamma=0.9, value_network=net, **kwargs)(td_new)
        torch.testing.assert_close(td_old["value_target"], td_new["value_target"])
        torch.testing.assert_close(td_old["advantage"], td_new["advantage"])

    def test_td0_estimate_against_a_hand_computation(self):
        import rl.objectives.value as value

        td = batch()
        next_value = torch.randn(B, T, 1)
        with pytest.warns(DeprecationWarning):
            est = value.TD0Estimate(gamma=0.5, value_network=None)
        target = est.value_estimate(td, next_value=next_value)
        reward, _, terminated = flags(td)
        torch.testing.assert_close(target, reward + 0.5 * (~terminated).float() * next_value)
