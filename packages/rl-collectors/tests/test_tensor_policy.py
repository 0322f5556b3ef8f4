"""The collector's tensor fast path (rl.core.tensor_policy): rl.modules' actors, and that
the fast path changes no collected data. The recognition itself is tested in rl-core."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import (
    InteractionType,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictSequential,
    set_interaction_type,
)
from torch.testing import assert_close

from rl.collectors import Collector
from rl.core import tensor_policy

sys.path.insert(0, str(Path(__file__).parent))
from _collector_helpers import cartpole  # noqa: E402

# EnvPool's own spaces make gymnasium warn
pytestmark = pytest.mark.filterwarnings("ignore:.*precision lowered:UserWarning")


class Sampled(torch.nn.Module):
    """Logits of a small MLP, a sampled action and its log-prob (draws from torch's RNG)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)
        )

    def forward(self, obs):
        dist = torch.distributions.Categorical(logits=self.net(obs))
        action = dist.sample()
        return action, dist.log_prob(action)


def one_module():
    return TensorDictModule(Sampled(), ["observation"], ["action", "sample_log_prob"])


def sequence():
    """Two stages: the second reads what the first wrote and the observation."""
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 2)

    class Pick(torch.nn.Module):
        def forward(self, logits, obs):
            noise = torch.rand(logits.shape)
            return (logits + noise + obs[..., :2]).argmax(-1), noise

    return TensorDictSequential(
        TensorDictModule(net, ["observation"], ["logits"]),
        TensorDictModule(Pick(), ["logits", "observation"], ["action", "noise"]),
    )


def prob_actor(distribution=torch.distributions.Categorical, return_log_prob=True, **kwargs):
    """A TensorDictModule writing the distribution's parameters, then tensordict's
    probabilistic module (as a TorchRL user writes an actor)."""
    torch.manual_seed(0)
    if distribution is torch.distributions.Categorical:
        head = TensorDictModule(torch.nn.Linear(4, 2), ["observation"], ["logits"])
        dist_keys = ["logits"]
    else:

        class LocScale(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.net = torch.nn.Linear(4, 2)

            def forward(self, obs):
                loc, scale = self.net(obs).chunk(2, -1)
                return loc, torch.nn.functional.softplus(scale) + 0.1

        head = TensorDictModule(LocScale(), ["observation"], ["loc", "scale"])
        dist_keys = ["loc", "scale"]
    return ProbabilisticTensorDictSequential(
        head,
        ProbabilisticTensorDictModule(
            in_keys=dist_keys,
            out_keys=["action"],
            distribution_class=distribution,
            return_log_prob=return_log_prob,
            **kwargs,
        ),
    )


def rl_prob_actor():
    """rl.modules' ProbabilisticActor (its own tensor twin, asked for duck-typed)."""
    modules = pytest.importorskip("rl.modules")
    torch.manual_seed(0)
    return modules.ProbabilisticActor(
        TensorDictModule(torch.nn.Linear(4, 2), ["observation"], ["logits"]),
        in_keys=["logits"],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )


def rl_qvalue_actor():
    modules = pytest.importorskip("rl.modules")
    from rl.core import Categorical

    torch.manual_seed(0)
    return modules.QValueActor(torch.nn.Linear(4, 2), spec=Categorical(2))


def rl_actor():
    """rl.modules' Actor: a plain TensorDictModule for the structural analysis."""
    modules = pytest.importorskip("rl.modules")
    return modules.Actor(Sampled(), out_keys=["action", "sample_log_prob"])


def collect(env_fn, policy, fast: bool, batches: int = 3, frames: int = 96) -> list:
    env = env_fn()
    env.set_seed(3)
    torch.manual_seed(5)
    collector = Collector(env, policy, frames_per_batch=frames)
    if not fast:
        collector._tensor_policy = None
    out = [collector.next() for _ in range(batches)]
    collector.shutdown()
    return out


def assert_same(fast: list, slow: list) -> None:
    for a, b in zip(fast, slow):
        assert a.batch_size == b.batch_size
        assert list(a.keys(True, True)) == list(b.keys(True, True))
        for key in a.keys(True, True):
            assert_close(a[key], b[key], msg=str(key), rtol=0, atol=0)


def envpool_cartpole():
    pytest.importorskip("envpool")
    from rl.envs import MultiThreadedEnv

    return MultiThreadedEnv(8, "CartPole-v1", create_env_kwargs={"seed": 0})


ENVS = {
    "envpool": envpool_cartpole,
    "gym-vector": lambda: cartpole(4),
}


class TestTensorPolicy:
    @pytest.mark.parametrize(
        "itype",
        [
            InteractionType.RANDOM,
            InteractionType.DETERMINISTIC,
            InteractionType.MODE,
            InteractionType.MEAN,
            None,
        ],
    )
    @pytest.mark.parametrize("distribution", [torch.distributions.Normal, "categorical"])
    @pytest.mark.parametrize("return_log_prob", [True, False])
    def test_probabilistic_call_matches_policy(self, itype, distribution, return_log_prob):
        """Sampling (joint sample + log-prob or not), modes and the default interaction
        type as tensordict's probabilistic sequence."""
        if distribution == "categorical":
            distribution = torch.distributions.Categorical
        policy = prob_actor(distribution, return_log_prob=return_log_prob)
        td = TensorDict(observation=torch.randn(5, 4), batch_size=[5])
        fast = tensor_policy(policy)
        nan_mean = distribution is torch.distributions.Categorical and itype is InteractionType.MEAN
        if nan_mean and return_log_prob:
            # a categorical's mean is NaN: both raise when scoring it, with torch's argument
            # checks on (torch.compile's start-up turns them off for the whole process, so
            # an earlier test in this worker may have)
            validate = torch.distributions.Distribution._validate_args
            torch.distributions.Distribution.set_default_validate_args(True)
            try:
                for fn in (policy, fast):
                    with set_interaction_type(itype), pytest.raises(ValueError, match="support"):
                        fn(td.clone())
            finally:
                torch.distributions.Distribution.set_default_validate_args(validate)
            return
        outs = []
        for fn in (policy, fast):
            torch.manual_seed(1)
            if itype is None:
                outs.append(fn(td.clone()))
            else:
                with set_interaction_type(itype):
                    outs.append(fn(td.clone()))
        expected, got = outs
        assert list(got.keys()) == list(expected.keys())
        for key in expected.keys():
            assert_close(got[key], expected[key], rtol=0, atol=0, equal_nan=nan_mean, msg=key)

    def test_call_matches_policy(self):
        td = TensorDict(observation=torch.randn(5, 4), batch_size=[5])
        for make in (rl_actor,):
            policy = make()
            torch.manual_seed(1)
            expected = policy(td.clone())
            torch.manual_seed(1)
            got = tensor_policy(policy)(td.clone())
            assert list(got.keys()) == list(expected.keys())
            assert (got == expected).all()

    def test_actor_inside_a_sequence_uses_its_twin(self):
        """A TensorDictSequential holding an actor with a twin (then a plain module)."""
        actor = rl_prob_actor()
        policy = TensorDictSequential(
            actor, TensorDictModule(lambda a: a * 2, ["action"], ["doubled"])
        )
        fast = tensor_policy(policy)
        assert fast.in_keys == ["observation"]
        assert fast.out_keys == ["logits", "action", "action_log_prob", "doubled"]
        td = TensorDict(observation=torch.randn(6, 4), batch_size=[6])
        outs = []
        for fn in (policy, fast):
            torch.manual_seed(3)
            with set_interaction_type(InteractionType.RANDOM):
                outs.append(fn(td.clone()))
        assert list(outs[1].keys()) == list(outs[0].keys())
        assert (outs[1] == outs[0]).all()
        actor.register_forward_hook(lambda *args: None)
        assert tensor_policy(policy) is None

    def test_usable_follows_attributes_changed_after_construction(self):
        policy = rl_prob_actor()
        fast = tensor_policy(policy)
        assert fast.out_keys[-1] == "action_log_prob"
        policy.module[-1].return_log_prob = False
        assert fast.usable()
        assert fast.out_keys[-1] == "action"
        td = TensorDict(observation=torch.randn(6, 4), batch_size=[6])
        outs = []
        for fn in (policy, fast):
            torch.manual_seed(3)
            with set_interaction_type(InteractionType.RANDOM):
                outs.append(fn(td.clone()))
        assert list(outs[1].keys()) == list(outs[0].keys())
        assert (outs[1] == outs[0]).all()

    def test_usable_follows_hooks_on_a_twin_module(self):
        policy = rl_prob_actor()
        fast = tensor_policy(policy)
        assert fast.usable()
        handle = policy.module[-1].register_forward_hook(lambda *args: None)
        assert not fast.usable()
        handle.remove()
        assert fast.usable()

    @pytest.mark.parametrize("kind", sorted(ENVS))
    @pytest.mark.parametrize(
        "make",
        [one_module, sequence, prob_actor, rl_prob_actor, rl_qvalue_actor],
        ids=["module", "sequence", "prob", "ProbabilisticActor", "QValueActor"],
    )
    def test_fast_and_general_paths_collect_the_same_data(self, kind, make):
        assert tensor_policy(make()) is not None
        fast = collect(ENVS[kind], make(), fast=True)
        slow = collect(ENVS[kind], make(), fast=False)
        assert torch.cat([b["next", "done"] for b in fast]).any()
        assert_same(fast, slow)

    def test_hook_added_after_construction_is_called(self):
        policy = one_module()
        env = envpool_cartpole()
        collector = Collector(env, policy, frames_per_batch=32, trust_policy=True)
        calls = []
        policy.register_forward_hook(lambda *args: calls.append(1))
        collector.next()
        collector.shutdown()
        assert len(calls) == 32 // 8

    def test_envpool_wrong_action_shape_later_raises(self):
        """An action of the wrong shape after step 0 is reported, naming the key."""

        class Shrinks(torch.nn.Module):
            calls = 0

            def forward(self, obs):
                self.calls += 1
                action = torch.zeros(obs.shape[0], dtype=torch.int64)
                return action if self.calls < 3 else action[:2]

        env = envpool_cartpole()
        policy = TensorDictModule(Shrinks(), ["observation"], ["action"])
        collector = Collector(env, policy, frames_per_batch=40, trust_policy=True)
        with pytest.raises(ValueError, match=r"action 'action' has shape \(2,\), expected \(8,\)"):
            collector.next()
        collector.shutdown()

    def test_envpool_rollout_with_grad_enabled(self):
        """Outputs that require grad are recorded through torch (not numpy), as the
        TensorDict path records them."""
        env = envpool_cartpole()
        policy = sequence()
        fast = tensor_policy(policy)
        out = []
        for fn in (fast, policy):
            env.set_seed(2)
            torch.manual_seed(2)
            out.append(env.rollout(30, fn, break_when_any_done=False))
        env.close()
        got, expected = out
        assert got["logits"].requires_grad
        for key in expected.keys(True, True):
            assert_close(got[key].detach(), expected[key].detach(), rtol=0, atol=0, msg=str(key))


def test_a_wrapper_does_not_take_the_twin_of_the_module_it_wraps():
    """A TensorDictModuleWrapper forwards attribute reads (``tensor_forward``) to the actor
    it wraps; its own forward does more, so it has no twin and runs as itself."""
    from tensordict.nn import TensorDictModuleWrapper

    class ZeroAction(TensorDictModuleWrapper):
        def forward(self, td):
            td = self.td_module(td)
            td["action"] = torch.zeros_like(td["action"])
            return td

    actor = rl_prob_actor()
    wrapper = ZeroAction(actor)
    assert getattr(wrapper, "tensor_forward", None) is not None  # forwarded to the actor
    assert tensor_policy(actor) is not None
    assert tensor_policy(wrapper) is None
    env = cartpole()
    env.set_seed(0)
    rollout = env.rollout(5, wrapper, break_when_any_done=False)
    assert (rollout["action"] == 0).all()
