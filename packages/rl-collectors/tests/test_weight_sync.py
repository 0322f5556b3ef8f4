"""Weight-sync schemes: the weights reach the workers' policy copies, cleanly."""

import functools
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from rl.collectors import (
    Collector,
    DistributedWeightSyncScheme,
    MultiAsyncCollector,
    MultiProcessWeightSyncScheme,
    MultiSyncCollector,
    NoWeightSyncScheme,
    RayWeightSyncScheme,
    RPCWeightSyncScheme,
    SharedMemTransport,
    SharedMemWeightSyncScheme,
    WeightStrategy,
    WeightSyncScheme,
)
from rl.envs import PendulumEnv

sys.path.insert(0, str(Path(__file__).parent))
from _collector_helpers import live_processes  # noqa: E402


def constant_policy(value: float) -> TensorDictModule:
    """Pendulum policy whose action is ``value`` whatever the observation."""
    module = torch.nn.Linear(3, 1)
    with torch.no_grad():
        module.weight.zero_()
        module.bias.fill_(value)
    return TensorDictModule(module, ["observation"], ["action"])


def bias_weights(value: float) -> TensorDict:
    return TensorDict({"module": {"weight": torch.zeros(1, 3), "bias": torch.full((1,), value)}})


class TestWeightStrategy:
    def test_round_trip_tensordict_and_state_dict(self):
        source, target = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
        strategy = WeightStrategy()
        strategy.apply_weights(target, strategy.extract_weights(source))
        torch.testing.assert_close(target.weight, source.weight)
        with pytest.warns(UserWarning, match="state_dict strategy is experimental"):
            as_dict = WeightStrategy("state_dict")
        weights = as_dict.extract_weights(torch.nn.Linear(3, 2))
        assert set(weights) == {"weight", "bias"}
        as_dict.apply_weights(target, weights)
        torch.testing.assert_close(target.bias, weights["bias"])

    def test_out_of_place_makes_the_module_use_the_tensors(self):
        module = torch.nn.Linear(2, 1)
        shared = TensorDict.from_module(module).data.clone()
        WeightStrategy().apply_weights(module, shared, inplace=False)
        shared["bias"].fill_(3.0)
        assert float(module.bias.detach()) == 3.0
        assert isinstance(module.bias, torch.nn.Parameter)

    def test_unknown_key_names_it(self):
        with pytest.raises(KeyError, match="'nope'"):
            WeightStrategy().apply_weights(torch.nn.Linear(2, 1), TensorDict(nope=torch.zeros(1)))
        with pytest.raises(ValueError, match="extract_as must be"):
            WeightStrategy("pickle")


class TestFromBackend:
    @pytest.mark.parametrize(
        ("backend", "cls"),
        [
            ("none", NoWeightSyncScheme),
            ("direct", NoWeightSyncScheme),
            ("shared", SharedMemWeightSyncScheme),
            ("thread", SharedMemWeightSyncScheme),
            ("process", MultiProcessWeightSyncScheme),
            ("multiprocessing", MultiProcessWeightSyncScheme),
            ("distributed", DistributedWeightSyncScheme),
            ("rpc", RPCWeightSyncScheme),
            ("ray", RayWeightSyncScheme),
        ],
    )
    def test_backend_names(self, backend, cls):
        assert type(WeightSyncScheme.from_backend(backend)) is cls

    def test_kwargs_and_unknown(self):
        assert WeightSyncScheme.from_backend("shared", sync=False).sync is False
        with pytest.raises(ValueError, match="Unsupported weight-sync backend 'carrier'"):
            WeightSyncScheme.from_backend("carrier")

    def test_remote_schemes_refuse_to_run(self):
        with pytest.raises(NotImplementedError, match="RayCollector"):
            RayWeightSyncScheme().init_on_sender(model_id="policy")
        copy = RayWeightSyncScheme(backend="nccl")._copy_uninitialized()
        assert copy._backend == "nccl" and not copy.initialized_on_sender


class TestSchemeLifecycle:
    def test_send_before_init_and_connect_raise(self):
        scheme = SharedMemWeightSyncScheme()
        with pytest.raises(RuntimeError, match="initialized on sender"):
            scheme.send()
        with pytest.raises(RuntimeError, match="Neither init_on_sender nor init_on_receiver"):
            scheme.connect()

    def test_shared_transport_per_worker_updates(self):
        transport = SharedMemTransport()
        bufs = {0: TensorDict(w=torch.zeros(2)), 1: TensorDict(w=torch.zeros(2))}
        transport.register_weights(bufs, {}, per_worker=True)
        transport.send_weights({1: TensorDict(w=torch.ones(2))})
        assert bufs[0]["w"].sum() == 0 and bufs[1]["w"].sum() == 2
        flat = SharedMemTransport()
        flat.register_weights({0: TensorDict(w=torch.zeros(2))}, {})
        with pytest.raises(ValueError, match="per_worker=True"):
            flat.send_weights({0: TensorDict(w=torch.ones(2))})

    def test_no_scheme_is_a_no_op(self):
        scheme = NoWeightSyncScheme()
        scheme.init_on_sender(model_id="policy")
        scheme.connect()
        assert scheme.send() is None and scheme.synchronized_on_sender


class TestMultiprocessCollectors:
    @pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector])
    @pytest.mark.parametrize(
        "scheme_cls", [SharedMemWeightSyncScheme, MultiProcessWeightSyncScheme]
    )
    def test_weights_reach_the_workers(self, cls, scheme_cls):
        policy = constant_policy(0.25)
        collector = cls(
            [PendulumEnv, PendulumEnv], policy, frames_per_batch=20, total_frames=200,
            weight_sync_schemes={"policy": scheme_cls()}, track_policy_version=True,
        )  # fmt: skip
        pids = collector.worker_pids
        try:
            batches = iter(collector)
            assert torch.all(next(batches)["action"] == 0.25)
            with torch.no_grad():
                policy.module.bias.fill_(-0.5)
            collector.update_policy_weights_()
            # sync: every worker applied them before the call returned
            state = collector.state_dict()
            for i in range(2):
                assert state[f"worker{i}"]["policy_state_dict"]["module.bias"].item() == -0.5
            batch = next(batches)
            assert torch.all(batch["action"] == -0.5)
            assert torch.all(batch["policy_version"] == 1)
            # given weights (not the policy's) go through too; an asynchronous worker may
            # be collecting batches begun before the update: a later batch has them
            collector.update_policy_weights_(bias_weights(0.75))
            later = [next(batches)["action"] for _ in range(4)]
            assert any(torch.all(a == 0.75) for a in later)
            if scheme_cls is MultiProcessWeightSyncScheme or cls is MultiSyncCollector:
                # copies are applied between batches: a batch has one set of weights (shared
                # memory is read as it is written, so a batch in flight may mix them)
                assert all(torch.all(a == 0.75) or torch.all(a == -0.5) for a in later)
            if cls is MultiSyncCollector:
                assert torch.all(later[0] == 0.75)
        finally:
            collector.shutdown()
        assert live_processes(pids) == []

    def test_per_worker_weights_with_distinct_factories(self):
        factories = [lambda v=v: constant_policy(float(v)) for v in range(3)]
        collector = MultiSyncCollector(
            [PendulumEnv] * 3, policy_factory=factories, frames_per_batch=30,
            weight_sync_schemes={"policy": SharedMemWeightSyncScheme(per_worker_weights=True)},
        )  # fmt: skip
        try:
            batches = iter(collector)
            actions = next(batches)["action"]
            assert [actions[i].unique().item() for i in range(3)] == [0.0, 1.0, 2.0]
            collector.update_policy_weights_({0: bias_weights(10.0), 2: bias_weights(30.0)})
            actions = next(batches)["action"]
            assert [actions[i].unique().item() for i in range(3)] == [10.0, 1.0, 30.0]
        finally:
            collector.shutdown()

    @pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector])
    def test_policy_with_factory_is_the_weight_source(self, cls):
        """As TorchRL: with weight_sync_schemes, ``policy`` (which need not pickle: it
        stays here) may come with ``policy_factory`` (which builds the workers')."""

        class Unpicklable(torch.nn.Linear):
            def __reduce_ex__(self, protocol):
                raise TypeError("this policy cannot be pickled")

        module = Unpicklable(3, 1)
        with torch.no_grad():
            module.weight.zero_()
            module.bias.fill_(0.25)
        policy = TensorDictModule(module, ["observation"], ["action"])
        # made of library objects only: the spawned workers unpickle it without this file
        factory = functools.partial(
            TensorDictModule, torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"]
        )
        # one spawned worker (an interpreter importing torch and rl): that every worker
        # gets the weights is test_weights_reach_the_workers' (two forked workers)
        collector = cls(
            [PendulumEnv], policy, policy_factory=factory,
            frames_per_batch=10, total_frames=-1, mp_start_method="spawn",
            weight_sync_schemes={"policy": MultiProcessWeightSyncScheme()},
        )  # fmt: skip
        try:
            batches = iter(collector)
            # the workers run the factory's policy with the policy's weights (sent at
            # start-up)
            assert torch.all(next(batches)["action"] == 0.25)
            with torch.no_grad():
                module.bias.fill_(-0.5)
            collector.update_policy_weights_()  # read from the policy
            later = [next(batches)["action"] for _ in range(4)]
            assert torch.all(later[-1] == -0.5)
        finally:
            collector.shutdown()
        with pytest.raises(TypeError, match="policy_factory cannot be used with policy"):
            cls([PendulumEnv], policy, policy_factory=lambda: constant_policy(0.0),
                frames_per_batch=20)  # fmt: skip

    def test_unknown_model_id_is_named(self):
        collector = MultiSyncCollector(
            [PendulumEnv], constant_policy(0.0), frames_per_batch=10,
            weight_sync_schemes={"policy": MultiProcessWeightSyncScheme()},
        )  # fmt: skip
        try:
            with pytest.raises(
                KeyError, match="'critic' not found.*Available models: \\['policy'\\]"
            ):
                collector.update_policy_weights_(bias_weights(1.0), model_id="critic")
        finally:
            collector.shutdown()

    def test_dead_worker_is_reported_not_waited_for(self):
        policy = constant_policy(0.0)
        collector = MultiSyncCollector(
            [PendulumEnv, PendulumEnv], policy, frames_per_batch=20,
            weight_sync_schemes={"policy": SharedMemWeightSyncScheme()},
        )  # fmt: skip
        pids = collector.worker_pids
        try:
            os.kill(pids[1], signal.SIGKILL)
            time.sleep(0.3)
            with pytest.raises(RuntimeError, match="worker 1 died before acknowledging"):
                collector.update_policy_weights_()
        finally:
            collector.shutdown()
        assert live_processes(pids) == []

    def test_both_updater_and_schemes_refused(self):
        from rl.collectors import VanillaWeightUpdater

        policy = constant_policy(0.0)
        with pytest.raises(ValueError, match="both weight_sync_schemes and weight_updater"):
            Collector(
                PendulumEnv(), policy, frames_per_batch=10,
                weight_updater=VanillaWeightUpdater.from_policy(policy),
                weight_sync_schemes={"policy": NoWeightSyncScheme()},
            )  # fmt: skip

    def test_shared_buffers_are_the_policy_tensors_on_its_device(self):
        # as TorchRL: on the policy's device the workers read the policy's own tensors
        policy = constant_policy(0.0)
        collector = MultiSyncCollector(
            [PendulumEnv, PendulumEnv], policy, frames_per_batch=20,
            weight_sync_schemes={"policy": SharedMemWeightSyncScheme()},
        )  # fmt: skip
        try:
            assert policy.module.bias.is_shared()
            with torch.no_grad():
                policy.module.bias.add_(2.0)
            state = collector.state_dict()
            assert state["worker1"]["policy_state_dict"]["module.bias"].item() == 2.0
        finally:
            collector.shutdown()
