"""RayReplayBuffer on a local Ray instance with 2 CPUs (the one conftest.py's shared_ray shares)."""

import sys
from functools import partial

import pytest
import torch

from rl.core.ray_runtime import processes_left
from rl.data import LazyTensorStorage, ReplayBuffer, TensorDictReplayBuffer
from rl.data.replay_buffers._utils import CheckpointAliases

ray = pytest.importorskip("ray")

from rl.data import RayReplayBuffer  # noqa: E402

# the functions below run in Ray workers by value (this file is not importable there)
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

# a bound that catches a hang, not a speed check: Ray's first call starts a worker process
# that imports torch and rl, which took over 120 s in CI runs on the loaded 2-core machine
# (each of the Ray test files takes under a minute here when the machine is quiet)
pytestmark = pytest.mark.timeout(300)


def _write(buffer, data):
    buffer.extend(data)
    return len(buffer)


class TestRayReplayBuffer:
    def test_local_buffer_api(self, shared_ray, tmp_path, make_transitions, assert_consistent):
        rb = RayReplayBuffer(
            replay_buffer_cls=TensorDictReplayBuffer,
            storage=partial(LazyTensorStorage, 20),  # built in the actor
            batch_size=4,
            remote_config={"num_cpus": 0},
            transport="ray",
            delayed_init=True,  # TorchRL's option, passed on to the buffer class
        )
        assert rb.transport_kind == "ray"
        local = TensorDictReplayBuffer(storage=LazyTensorStorage(20), batch_size=4)
        data = make_transitions(12)
        torch.testing.assert_close(rb.extend(data), local.extend(data))
        one = make_transitions(1, start=12)[0]
        assert rb.add(one) == local.add(one) == 12
        assert len(rb) == 13 and rb.write_count == 13 and rb.batch_size == 4
        torch.testing.assert_close(rb[3]["observation"], data[3]["observation"])
        batch, info = rb.sample(return_info=True)
        assert batch.shape == (4,)
        assert_consistent(batch)  # every sampled item is whole
        torch.testing.assert_close(info["index"], batch["index"])
        with pytest.raises(ValueError, match="batch_size must be a positive int, got -1"):
            rb.sample(-1)  # the actor's error, with its type
        # state_dict round trip and checkpoint files on the actor's machine
        state = rb.state_dict()
        rb.empty()
        assert len(rb) == 0
        rb.load_state_dict(state)
        assert len(rb) == 13
        torch.testing.assert_close(rb[:13]["id"], torch.arange(13))
        rb.dumps(tmp_path / "rb")
        rb.empty()
        rb.loads(tmp_path / "rb")
        torch.testing.assert_close(rb[:13]["id"], torch.arange(13))
        rb.empty()
        rb.load(tmp_path / "rb")  # TorchRL's other names: save / dump / load
        torch.testing.assert_close(rb[:13]["id"], torch.arange(13))
        rb.shutdown(timeout=5.0)  # TorchRL's signature
        with pytest.raises(RuntimeError, match="RayReplayBuffer was shut down"):
            len(rb)
        rb.shutdown()  # idempotent

    def test_remote_writers_and_learner(self, shared_ray, make_transitions, assert_consistent):
        rb = RayReplayBuffer(
            replay_buffer_cls=TensorDictReplayBuffer,
            storage=LazyTensorStorage(100),
            batch_size=8,
            remote_config={"num_cpus": 0},
        )
        write = ray.remote(num_cpus=1)(_write)
        # two Ray tasks extend the one buffer through copies of the handle
        lengths = ray.get([write.remote(rb, make_transitions(10, s)) for s in (0, 10)])
        assert sorted(lengths)[-1] == 20 and len(rb) == 20
        torch.testing.assert_close(rb[:20]["id"].sort().values, torch.arange(20))
        assert_consistent(rb.sample())
        # a copy does not own the actor: shutting it down leaves the buffer running
        copy = ray.cloudpickle.loads(ray.cloudpickle.dumps(rb))
        copy.shutdown()
        assert len(rb) == 20
        pid = ray.get(rb.actor.info.remote())["pid"]
        rb.shutdown()
        assert not processes_left([pid])


class TestServiceBackend:
    def test_service_backend_ray_builds_a_ray_buffer(self, shared_ray, make_transitions):
        # TorchRL's selector: the buffer class, built in a Ray actor
        rb = TensorDictReplayBuffer(
            storage=partial(LazyTensorStorage, 10),
            batch_size=3,
            service_backend="ray",
            service_backend_options={"remote_config": {"num_cpus": 0}},
        )
        try:
            assert isinstance(rb, RayReplayBuffer) and rb.service_backend == "ray"
            rb.extend(make_transitions(5))
            assert len(rb) == 5 and rb.sample().shape == (3,)
        finally:
            rb.shutdown()


class TestRayReplayBufferArguments:
    @pytest.mark.parametrize(
        "kwargs, match",
        [
            ({"transport": "distributed"}, "transport='distributed' is not supported by"),
            ({"transport": "tcp"}, r"transport must be one of \('auto', 'ray'\), got 'tcp'"),
            ({"transport_options": {"port": 1}}, "transport_options configure TorchRL's"),
        ],
    )
    def test_unsupported_transports(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            RayReplayBuffer(batch_size=4, **kwargs)

    def test_service_backend_options_are_checked(self):
        with pytest.raises(TypeError, match=r"Ray replay-buffer service options: \['num_cpus'\]"):
            ReplayBuffer(service_backend="ray", service_backend_options={"num_cpus": 1})

    def test_checkpoint_names_and_type(self):
        # dump / save / load are the local buffers' aliases of dumps / loads
        assert issubclass(RayReplayBuffer, CheckpointAliases)
        for name in ("dump", "save", "load"):
            assert getattr(RayReplayBuffer, name) is getattr(CheckpointAliases, name)
        # not a ReplayBuffer: it has no local storage, sampler or writer to read
        assert not issubclass(RayReplayBuffer, ReplayBuffer)
        assert RayReplayBuffer.service_backend == "ray"


class TestRayReplayBufferImport:
    def test_missing_ray(self, monkeypatch):
        monkeypatch.setitem(sys.modules, "ray", None)
        with pytest.raises(ImportError, match=r'pip install "rl-data\[ray\]"'):
            RayReplayBuffer(batch_size=4)
