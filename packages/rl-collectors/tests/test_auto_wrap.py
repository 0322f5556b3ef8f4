"""Policies on tensors (a ``nn.Module`` whose ``forward`` takes observation entries) are
wrapped when the collector is built, as TorchRL's collectors do."""

from __future__ import annotations

import pytest
import torch
from tensordict.nn import TensorDictModule
from torch import nn

from rl.collectors import Collector, MultiAsyncCollector, MultiSyncCollector
from rl.envs import PendulumEnv

pytestmark = pytest.mark.timeout(120)


class OnObservation(nn.Module):
    """``forward(observation)``: a linear action, and with ``extra`` outputs a tuple."""

    def __init__(self, extra: int = 0):
        super().__init__()
        self.linear = nn.Linear(3, 1)
        self.extra = extra

    def forward(self, observation, scale: float = 1.0):
        action = self.linear(observation) * scale
        if not self.extra:
            return action
        return (action, *(observation * (i + 1) for i in range(self.extra)))


class WantsMore(nn.Module):
    def forward(self, observation, other_stuff):
        return observation[..., :1] + other_stuff


def _constant(module: OnObservation, value: float) -> OnObservation:
    with torch.no_grad():
        module.linear.weight.zero_()
        module.linear.bias.fill_(value)
    return module


class TestAutoWrap:
    def test_reads_the_named_entries_and_writes_the_action(self):
        policy = OnObservation()
        collector = Collector(PendulumEnv(), policy, frames_per_batch=8, total_frames=8)
        try:
            batch = next(iter(collector))
        finally:
            collector.shutdown()
        with torch.no_grad():
            expected = policy.linear(batch["observation"])
        torch.testing.assert_close(batch["action"], expected)

    def test_tuple_outputs_go_to_output_keys(self):
        policy = OnObservation(extra=2)
        collector = Collector(PendulumEnv(), policy, frames_per_batch=8, total_frames=8)
        try:
            batch = next(iter(collector))
        finally:
            collector.shutdown()
        torch.testing.assert_close(batch["output1"], batch["observation"])
        torch.testing.assert_close(batch["output2"], batch["observation"] * 2)

    def test_weights_given_to_the_collector_reach_the_module(self):
        policy = _constant(OnObservation(), 0.0)
        collector = Collector(PendulumEnv(), policy, frames_per_batch=4, total_frames=-1)
        try:
            batches = iter(collector)
            assert next(batches)["action"].eq(0.0).all()
            state = {"linear.weight": torch.zeros(1, 3), "linear.bias": torch.full((1,), 0.5)}
            collector.update_policy_weights_(state)
            assert next(batches)["action"].eq(0.5).all()
            assert policy.linear.bias.item() == 0.5
        finally:
            collector.shutdown()

    @pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector])
    def test_multiprocess_workers_wrap_it_and_take_weights(self, cls):
        policy = _constant(OnObservation(), 0.0)
        collector = cls([PendulumEnv, PendulumEnv], policy, frames_per_batch=8, total_frames=-1)
        try:
            batches = iter(collector)
            assert next(batches)["action"].eq(0.0).all()
            _constant(policy, -1.0)
            collector.update_policy_weights_()
            later = [next(batches)["action"] for _ in range(4)]
            assert later[-1].eq(-1.0).all()
        finally:
            collector.shutdown()

    def test_incompatible_forward_is_refused_at_construction(self):
        match = (
            r"forward takes \['observation', 'other_stuff'\] but the env's observation_spec "
            r"has entries \['observation'\]: \['other_stuff'\] cannot be read"
        )
        with pytest.raises(TypeError, match=match):
            Collector(PendulumEnv(), WantsMore(), frames_per_batch=8)
        with pytest.raises(TypeError, match=match + r".*\(in MultiSyncCollector worker 0\)"):
            MultiSyncCollector([PendulumEnv], WantsMore(), frames_per_batch=8)
        # nn.Linear's forward takes "input", which no observation entry is named
        with pytest.raises(TypeError, match=r"forward takes \['input'\]"):
            Collector(PendulumEnv(), nn.Linear(3, 1), frames_per_batch=8)

    def test_a_module_on_tensordicts_is_left_as_it_is(self):
        class OnTensorDict(nn.Module):
            def forward(self, tensordict):
                return tensordict.set("action", tensordict["observation"][..., :1] * 0 + 0.5)

        collector = Collector(PendulumEnv(), OnTensorDict(), frames_per_batch=4, total_frames=4)
        try:
            assert next(iter(collector))["action"].eq(0.5).all()
        finally:
            collector.shutdown()

    def test_trust_policy_runs_it_as_given(self):
        collector = Collector(PendulumEnv(), WantsMore(), frames_per_batch=8, trust_policy=True)
        collector.shutdown()

    def test_wrapping_moves_no_generator(self):
        """The call that counts the outputs leaves torch's generator where it was: a
        collector built around the module draws what one built around its explicit
        TensorDictModule does."""
        draws = []
        for explicit in (False, True):
            torch.manual_seed(0)
            policy = OnObservation()
            if explicit:
                policy = TensorDictModule(policy, in_keys=["observation"], out_keys=["action"])
            Collector(PendulumEnv(), policy, frames_per_batch=8).shutdown()
            draws.append(torch.rand(3))
        torch.testing.assert_close(draws[0], draws[1])
