"""The tensor-policy protocol (rl.core.tensor_policy): which policies get a tensor twin,
and that the twin writes the same keys, values and random draws as the policy."""

from __future__ import annotations

import doctest

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
    set_skip_existing,
)
from torch.testing import assert_close

from rl.core import TensorPolicy, tensor_policy


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


class TestTensorPolicy:
    def test_docstrings(self):
        from rl.core import _tensor_policy

        result = doctest.testmod(_tensor_policy, optionflags=doctest.ELLIPSIS)
        assert result.attempted > 0 and result.failed == 0

    def test_plain_module_and_sequence_are_recognised(self):
        fast = tensor_policy(one_module())
        assert isinstance(fast, TensorPolicy)
        assert fast.in_keys == ["observation"]
        assert fast.out_keys == ["action", "sample_log_prob"]
        seq = tensor_policy(sequence())
        assert seq.in_keys == ["observation"]
        assert seq.out_keys == ["logits", "action", "noise"]
        prob = tensor_policy(prob_actor())
        assert prob.in_keys == ["observation"]
        assert prob.out_keys == ["logits", "action", "action_log_prob"]

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
        for make in (one_module, sequence):
            policy = make()
            torch.manual_seed(1)
            expected = policy(td.clone())
            torch.manual_seed(1)
            got = tensor_policy(policy)(td.clone())
            assert list(got.keys()) == list(expected.keys())
            assert (got == expected).all()

    def test_other_policies_keep_the_general_path(self):
        net = torch.nn.Linear(4, 2)
        hooked = TensorDictModule(net, ["observation"], ["action"])
        hooked.register_forward_hook(lambda *args: None)

        class Custom(TensorDictModule):
            def forward(self, tensordict):
                return super().forward(tensordict)

        sampled_twice = ProbabilisticTensorDictSequential(
            TensorDictModule(lambda x: (x, x), ["observation"], ["logits", "action"]),
            ProbabilisticTensorDictModule(
                in_keys=["logits"],
                out_keys=["action"],
                distribution_class=torch.distributions.Categorical,
            ),
        )
        nested = TensorDictModule(net, [("agents", "observation")], ["action"])
        selected = TensorDictModule(
            lambda x: (x, x), ["observation"], ["action", "extra"]
        ).select_out_keys("action")
        for policy in (
            hooked,
            Custom(net, ["observation"], ["action"]),
            sampled_twice,  # the prefix writes the sample: the last module does not draw
            prob_actor(num_samples=2),
            prob_actor(generator=torch.Generator()),
            nested,
            selected,
            TensorDictModule(net, ["observation"], ["action"], inplace=False),
            lambda td: td,
            TensorDictSequential(hooked),
        ):
            assert tensor_policy(policy) is None, policy

    def test_policy_twin_protocol(self):
        """A policy's own ``tensor_forward`` is asked first and its answer is final."""

        class Twin(TensorDictModule):
            twin = None

            def tensor_forward(self):
                return self.twin

        policy = Twin(torch.nn.Linear(4, 2), ["observation"], ["action"])
        assert tensor_policy(policy) is None  # declined, though structurally plain
        policy.twin = (["observation"], ["doubled"], lambda obs: (obs * 2,))
        fast = tensor_policy(policy)
        assert (fast.in_keys, fast.out_keys) == (["observation"], ["doubled"])
        td = fast(TensorDict(observation=torch.ones(3, 4), batch_size=[3]))
        assert_close(td["doubled"], torch.full((3, 4), 2.0))
        with pytest.raises(KeyError, match="observation"):
            fast(TensorDict(other=torch.ones(3, 4), batch_size=[3]))
        policy.twin = ([("nested", "observation")], ["action"], lambda obs: (obs,))
        assert tensor_policy(policy) is None

    def test_usable_follows_attributes_changed_after_construction(self):
        policy = prob_actor()
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

    def test_usable_follows_hooks_and_skip_existing(self):
        policy = one_module()
        fast = tensor_policy(policy)
        assert fast.usable()
        with set_skip_existing(True):
            assert not fast.usable()
        handle = policy.register_forward_pre_hook(lambda *args: None)
        assert not fast.usable()
        handle.remove()
        assert fast.usable()

    def test_usable_sees_a_hook_on_an_inner_module_added_after_checks(self):
        """A hook on a module inside the policy, added after the twin was built and
        checked, turns the fast path off (the twin would skip it)."""
        policy = prob_actor()
        fast = tensor_policy(policy)
        assert fast.usable()
        inner = policy.module[0]
        handle = inner.register_forward_hook(lambda *args: None)
        assert not fast.usable()
        handle.remove()
        assert fast.usable()


def test_compiled_policy_has_no_tensor_twin():
    # torch.compile's wrapper forwards attribute reads to the module it wraps; a twin
    # built through it would run that module eagerly, or call it with tensors
    policy = TensorDictSequential(
        TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["logits"]),
        TensorDictModule(lambda x: x.argmax(-1), ["logits"], ["action"]),
    )
    assert tensor_policy(policy) is not None
    assert tensor_policy(torch.compile(policy)) is None
