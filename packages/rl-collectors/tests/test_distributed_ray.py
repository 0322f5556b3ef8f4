"""RayCollector on a local Ray instance with 2 CPUs (one instance for this file)."""

import os

# the actors run with this interpreter, not through Ray's `uv run` integration
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

import functools  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from tensordict.nn import TensorDictModule  # noqa: E402

from rl.collectors import Collector  # noqa: E402
from rl.core._ray import acquire_runtime, local_ray, processes_left, release_runtime  # noqa: E402
from rl.envs import GymEnv  # noqa: E402

ray = pytest.importorskip("ray")

from rl.collectors.distributed import RayCollector  # noqa: E402
from rl.collectors.distributed._ray_config import layout_error, weights_to_send  # noqa: E402
from rl.collectors.distributed._ray_worker import UniqueTrajIdsBuffer  # noqa: E402

# the classes below are sent to the actors by value (this file is not importable there)
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.timeout(120)

cartpole = functools.partial(GymEnv, "CartPole-v1", categorical_action_encoding=True)


class MarkedPole(torch.nn.Module):
    """Pushes towards the side the pole leans to and writes its parameter as ``mark``:
    each step tells which weights acted."""

    def __init__(self):
        super().__init__()
        self.mark = torch.nn.Parameter(torch.zeros(1))

    def forward(self, obs):
        return (obs[..., 2] > 0).long(), self.mark.expand(*obs.shape[:-1], 1).clone()


class Exploding(torch.nn.Module):
    def forward(self, obs):
        raise ValueError("the policy exploded")


def marked_policy():
    return TensorDictModule(MarkedPole(), in_keys=["observation"], out_keys=["action", "mark"])


def set_mark(policy, value):
    policy.module.mark.data.fill_(value)


@pytest.fixture(scope="module")
def ray_local():
    with local_ray(num_cpus=2):  # checks that no Ray process is left on exit
        yield


class TestRayCollectorSync:
    def test_batches_frames_and_weights(self, ray_local):
        policy = marked_policy()
        collector = RayCollector(
            cartpole, policy, frames_per_batch=40, total_frames=100, num_collectors=2, sync=True
        )
        pids = collector.worker_pids
        assert collector.set_seed(3) != 3
        batches = []
        for i, batch in enumerate(collector):
            batches.append(batch)
            if i == 0:
                set_mark(policy, 1.0)  # in place here only: the actors keep their copy
            elif i == 1:
                collector.update_policy_weights_()  # from the next batch on
        assert [tuple(b.shape) for b in batches] == [(2, 20), (2, 20), (2, 10)]
        assert sum(b.numel() for b in batches) == 100 == collector._frames
        marks = [b["mark"].unique().tolist() for b in batches]
        assert marks == [[0.0], [0.0], [1.0]]
        # trajectory ids are unique across actors: actor i's ids are i mod 2
        for b in batches:
            ids = b["collector", "traj_ids"]
            assert (ids[0] % 2 == 0).all() and (ids[1] % 2 == 1).all()
        # actor 0 collected what a local collector seeded the same way collects
        set_mark(policy, 0.0)
        local = Collector(cartpole(), policy, frames_per_batch=20, total_frames=20)
        local.set_seed(3)
        expected = next(iter(local))
        for key in ["observation", "action", ("next", "reward"), ("next", "done")]:
            torch.testing.assert_close(batches[0][0][key], expected[key])
        collector.shutdown()
        assert collector.closed and ray.is_initialized()  # Ray was started by the fixture
        assert not processes_left(pids)


class TestRayCollectorAsync:
    def test_exact_frames_and_update_after_each_batch(self, ray_local):
        policy = marked_policy()
        collector = RayCollector(
            [cartpole, cartpole],
            policy,
            frames_per_batch=20,
            total_frames=130,
            update_after_each_batch=True,
        )
        assert collector.num_collectors == 2 and len(collector) == 7
        sizes, seen = [], {0: [], 1: []}
        for i, batch in enumerate(collector):
            sizes.append(batch.numel())
            actor = int(batch["collector", "traj_ids"][0]) % 2
            assert (batch["collector", "traj_ids"] % 2 == actor).all()
            seen[actor].append((i, batch["mark"].unique().tolist()))
            set_mark(policy, float(i + 1))  # the learner's weights after batch i
        # the shortened batch may finish before the last full one: completion order
        assert sorted(sizes) == [10] + [20] * 6 and sum(sizes) == 130
        # each batch acts with the weights the learner had when its actor started it:
        # at most the first batch of each actor (in flight from the start) is older
        for actor, batches in seen.items():
            for (prev, _), (_i, mark) in zip(batches, batches[1:]):
                assert mark == [float(prev + 1)], (actor, batches)
        collector.shutdown()


class TestRayCollectorReplayBuffer:
    def test_actors_extend_a_ray_replay_buffer(self, ray_local):
        data = pytest.importorskip("rl.data")
        rb = data.RayReplayBuffer(
            replay_buffer_cls=data.TensorDictReplayBuffer,
            storage=functools.partial(data.LazyTensorStorage, 100),
            remote_config={"num_cpus": 0},
        )
        collector = RayCollector(
            cartpole, None, frames_per_batch=20, total_frames=50, replay_buffer=rb
        )
        collector.start()  # collects in a background thread until total_frames
        deadline = time.monotonic() + 60
        while collector.is_running() and time.monotonic() < deadline:
            time.sleep(0.1)
        collector.async_shutdown()
        assert collector._iter == 3  # 20 + 20 + 10 frames: the last batch shortened
        assert collector._frames == 50 and len(rb) == 50
        stored = rb[:50]
        assert stored["next", "observation"].shape == (50, 4)
        steps = stored["collector", "traj_ids"]
        assert (steps[1:] >= steps[:-1]).all()  # in collection order, nothing twice
        rb.shutdown()

    def test_actors_write_trajectory_ids_unique_across_actors(self):
        written = []
        buffer = SimpleNamespace(extend=written.append)
        batch = TensorDict({("collector", "traj_ids"): torch.tensor([0, 0, 1, 2])}, [4])
        UniqueTrajIdsBuffer(buffer, index=1, num_collectors=3).extend(batch)
        assert written[0]["collector", "traj_ids"].tolist() == [1, 1, 4, 7]


class TestRayCollectorFailures:
    def test_killed_actor_raises_within_seconds(self, ray_local):
        collector = RayCollector(
            cartpole,
            marked_policy(),
            frames_per_batch=20,
            total_frames=200,
            sync=True,
            remote_configs={"num_cpus": 1},
        )
        collector.next()
        (pid,) = collector.worker_pids
        os.kill(pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=r"actor 0 \(pid \d+\) died while collecting"):
            collector.next()
        assert time.monotonic() - start < 10
        assert collector.closed
        with pytest.raises(RuntimeError, match="shut down"):
            collector.next()

    def test_actor_error_is_raised_with_its_traceback(self, ray_local):
        policy = TensorDictModule(Exploding(), in_keys=["observation"], out_keys=["action"])
        collector = RayCollector(cartpole, policy, frames_per_batch=10, total_frames=20)
        with pytest.raises(RuntimeError, match="actor 0 raised while collecting") as info:
            collector.next()
        assert "ValueError: the policy exploded" in str(info.value)
        # the actor's traceback, down to the line that raised
        assert 'raise ValueError("the policy exploded")' in str(info.value)
        assert collector.closed

    def test_restarted_actor_keeps_frames_exact(self, ray_local):
        policy = marked_policy()
        collector = RayCollector(
            cartpole,
            policy,
            frames_per_batch=20,
            total_frames=70,
            sync=True,
            remote_configs={"num_cpus": 1, "max_restarts": 1},
        )
        first = collector.next()
        set_mark(policy, 2.0)
        collector.update_policy_weights_()
        (pid,) = collector.worker_pids
        os.kill(pid, signal.SIGKILL)
        rest = list(collector)
        assert [b.numel() for b in [first, *rest]] == [20, 20, 20, 10]
        assert collector._frames == 70
        # the restarted actor got the latest weights, and new trajectory ids
        assert all(b["mark"].unique().tolist() == [2.0] for b in rest)
        assert rest[0]["collector", "traj_ids"].min() > first["collector", "traj_ids"].max()
        (new_pid,) = collector.worker_pids
        assert new_pid != pid
        collector.shutdown()
        assert not processes_left([new_pid])


class TestRayCollectorArguments:
    def test_bad_arguments(self):
        with pytest.raises(ValueError, match="multiple of num_collectors=2 in sync mode"):
            RayCollector(cartpole, None, frames_per_batch=31, num_collectors=2, sync=True)
        with pytest.raises(ValueError, match="collector_class must be .* got 'nope'"):
            RayCollector(cartpole, None, frames_per_batch=10, collector_class="nope")
        with pytest.raises(ValueError, match="create_env_fn has 2 entries but num_collectors=3"):
            RayCollector([cartpole, cartpole], None, frames_per_batch=10, num_collectors=3)
        with pytest.raises(ValueError, match="num_workers_per_collector=2 applies to"):
            RayCollector(cartpole, None, frames_per_batch=10, num_workers_per_collector=2)

    def test_layout_and_weight_errors(self):
        info = {"granularity": 4, "env_batch_size": (4,)}
        assert layout_error([info, info], 80, 160, 2, sync=True) is None
        assert layout_error([info, info], 80, 40, 2, sync=True) is None  # 20 per actor
        assert "not a multiple of its 4 frames per step" in layout_error([info], 30, -1, 1, False)
        message = layout_error([info, info], 80, 100, 2, sync=True)
        assert "total_frames=100 cannot be split exactly: the last batch has 20" in message
        other = {"granularity": 2, "env_batch_size": (2,)}
        assert "needs the same batch size" in layout_error([info, other], 16, -1, 2, True)
        template = TensorDict.from_module(marked_policy()).data
        new = marked_policy()
        set_mark(new, 3.0)
        sent = weights_to_send(new, template)
        assert sent is not template and sent["module", "mark"].item() == 3.0
        with pytest.raises(KeyError):  # another structure fails here, not in the actors
            weights_to_send(TensorDict({"other": torch.zeros(1)}), template)
        with pytest.raises(TypeError, match="policy weights must be .* got int"):
            weights_to_send(3, template)

    def test_missing_ray(self, monkeypatch):
        monkeypatch.setitem(sys.modules, "ray", None)
        with pytest.raises(ImportError, match=r'pip install "rl-collectors\[ray\]"'):
            RayCollector(cartpole, None, frames_per_batch=10)

    def test_runtime_shut_down_by_its_last_rl_user_only(self):
        calls = []
        fake = SimpleNamespace(running=False)
        fake.is_initialized = lambda: fake.running
        fake.init = lambda **kw: (calls.append(("init", kw)), setattr(fake, "running", True))
        fake.shutdown = lambda: (calls.append(("shutdown",)), setattr(fake, "running", False))
        first = acquire_runtime(fake, {"num_cpus": 2})
        second = acquire_runtime(fake, None)  # e.g. a RayReplayBuffer made afterwards
        assert first and second and calls == [("init", {"num_cpus": 2})]
        release_runtime(fake, first)
        assert fake.running
        release_runtime(fake, second)
        assert not fake.running and calls[-1] == ("shutdown",)
        # Ray started by the user: nobody here shuts it down
        fake.running = True
        held = acquire_runtime(fake, None)
        release_runtime(fake, held)
        assert not held and fake.running
