"""Weight updaters (WeightUpdaterBase and its three implementations) and a collector's
update_policy_weights_ through them."""

import gc

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from rl.collectors import (
    Collector,
    MultiProcessedWeightUpdater,
    RemoteModuleWeightUpdater,
    VanillaWeightUpdater,
    WeightUpdaterBase,
)
from rl.envs import PendulumEnv


def linear_policy():
    return TensorDictModule(torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])


class Recording(WeightUpdaterBase):
    def __init__(self, workers=None):
        self.workers = workers
        self.calls = []

    def all_worker_ids(self):
        return self.workers

    def _skip_update(self, worker_id):
        return worker_id == "skip"

    def _get_server_weights(self):
        return TensorDict(w=torch.full((1,), 7.0))

    def _sync_weights_with_worker(self, *, worker_id=None, server_weights):
        self.calls.append((worker_id, float(server_weights["w"][0])))


class TestWeightUpdaterBase:
    def test_push_to_all_workers_then_post_hooks(self):
        updater = Recording(workers=[0, "skip", 2])
        order = []
        updater.register_post_hook(lambda: order.append(list(updater.calls)))
        updater(TensorDict(w=torch.ones(1)))
        assert updater.calls == [(0, 1.0), (2, 1.0)]
        assert order == [[(0, 1.0), (2, 1.0)]]

    def test_server_weights_and_single_worker(self):
        updater = Recording(workers=[0, 1])
        updater.push_weights(worker_ids=1)
        assert updater.calls == [(1, 7.0)]

    def test_single_target(self):
        updater = Recording(workers=None)
        updater(TensorDict(w=torch.zeros(1)))
        assert updater.calls == [(None, 0.0)]

    def test_module_mapped_to_its_parameters(self):
        net = torch.nn.Linear(2, 1)
        weights = Recording()._maybe_map_weights(net)
        assert isinstance(weights, TensorDict)
        torch.testing.assert_close(weights["weight"], net.weight.data)
        with pytest.raises(TypeError, match="policy_or_weights must be None"):
            Recording()._maybe_map_weights(3)

    def test_collector_registration_is_weak(self):
        class Owner:
            pass

        updater, owner = Recording(), Owner()
        assert updater.collector is None
        updater.register_collector(owner)
        assert updater.collector is owner
        del owner
        gc.collect()
        assert updater.collector is None
        updater.register_collector(Owner())
        with pytest.raises(ValueError, match="collectors"):
            _ = updater.collector


class TestImplementations:
    def test_vanilla_copies_in_place(self):
        net = torch.nn.Linear(3, 2)
        weight = net.weight
        updater = VanillaWeightUpdater.from_policy(net)
        target = TensorDict.from_module(torch.nn.Linear(3, 2)).data
        updater(target)
        assert net.weight is weight  # same parameter, new values
        torch.testing.assert_close(net.weight.data, target["weight"])

    def test_vanilla_weight_getter(self):
        net = torch.nn.Linear(3, 2)
        source = torch.nn.Linear(3, 2)
        updater = VanillaWeightUpdater(
            weight_getter=lambda: TensorDict.from_module(source).data,
            policy_weights=TensorDict.from_module(net).data,
        )
        updater()
        torch.testing.assert_close(net.bias.data, source.bias.data)

    def test_multiprocessed_updates_every_copy(self):
        copies = {0: TensorDict(w=torch.zeros(2)), 1: TensorDict(w=torch.zeros(2))}
        updater = MultiProcessedWeightUpdater(
            get_server_weights=lambda: TensorDict(w=torch.tensor([1.0, 2.0])),
            policy_weights=copies,
        )
        assert updater.all_worker_ids() == [0, 1]
        updater()
        for td in copies.values():
            assert td["w"].tolist() == [1.0, 2.0]
        updater(TensorDict(w=torch.full((2,), 5.0)), worker_ids=[1])
        assert copies[0]["w"].tolist() == [1.0, 2.0]
        assert copies[1]["w"].tolist() == [5.0, 5.0]

    def test_remote_module_needs_weights(self):
        updater = RemoteModuleWeightUpdater()
        updater(TensorDict(w=torch.zeros(1)))  # accepted
        with pytest.raises(RuntimeError, match="requires the weights"):
            updater()


class TestCollectorWithUpdater:
    def test_update_policy_weights_goes_through_the_updater(self):
        policy = linear_policy()
        updater = VanillaWeightUpdater(policy_weights=TensorDict.from_module(policy).data)
        collector = Collector(
            PendulumEnv(), policy, frames_per_batch=4, total_frames=8,
            weight_updater=updater, track_policy_version=True,
        )  # fmt: skip
        try:
            assert collector.weight_updater is updater
            assert updater.collector is collector
            assert collector._legacy_weight_updater
            zeros = TensorDict.from_module(policy).data.clone().zero_()
            collector.update_policy_weights_(zeros)
            assert collector.policy_version == 1
            batch = next(iter(collector))
            assert (batch["action"] == 0).all()
        finally:
            collector.shutdown()

    def test_updater_factory(self):
        built = []

        def factory():
            built.append(Recording())
            return built[-1]

        collector = Collector(
            PendulumEnv(), linear_policy(), frames_per_batch=4, total_frames=8,
            weight_updater=factory,
        )  # fmt: skip
        try:
            collector.update_policy_weights_(TensorDict(w=torch.ones(1)), worker_ids=3)
            assert built[0].calls == [(3, 1.0)]
        finally:
            collector.shutdown()

    def test_bad_updater(self):
        with pytest.raises(TypeError, match="weight_updater must be a WeightUpdaterBase"):
            Collector(PendulumEnv(), linear_policy(), frames_per_batch=4, weight_updater=3)

    def test_default_path_in_place(self):
        policy = linear_policy()
        collector = Collector(PendulumEnv(), policy, frames_per_batch=4, total_frames=8)
        try:
            assert collector.weight_updater is None
            other = linear_policy()
            collector.update_policy_weights_(TensorDict.from_module(other))
            torch.testing.assert_close(policy.module.weight.data, other.module.weight.data)
        finally:
            collector.shutdown()
