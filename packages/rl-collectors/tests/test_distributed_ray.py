"""RayCollector on a local Ray instance with 2 CPUs (the one conftest.py's shared_ray shares)."""

import functools
import inspect
import os
import signal
import sys
import time
from types import SimpleNamespace

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from rl.collectors import Collector
from rl.core.ray_runtime import acquire_runtime, processes_left, release_runtime
from rl.envs import GymEnv

ray = pytest.importorskip("ray")

from rl.collectors.distributed import RayCollector  # noqa: E402
from rl.collectors.distributed._common import TRAJ_ID_STRIDE, check_frames  # noqa: E402
from rl.collectors.distributed._ray_config import weights_to_send  # noqa: E402
from rl.collectors.distributed._ray_worker import UniqueTrajIdsBuffer  # noqa: E402

# the classes below are sent to the actors by value (this file is not importable there)
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

# a bound that catches a hang, not a speed check: Ray's first call starts a worker process
# that imports torch and rl, which took over 120 s in CI runs on the loaded 2-core machine
# (each of the Ray test files takes under a minute here when the machine is quiet)
pytestmark = pytest.mark.timeout(300)

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


class CartPoleMarkingClose(GymEnv):
    """A CartPole that appends its process id to ``path`` when it is closed."""

    def __init__(self, path):
        super().__init__("CartPole-v1", categorical_action_encoding=True)
        self.path = str(path)

    def close(self, *args, **kwargs):
        with open(self.path, "a") as file:
            file.write(f"{os.getpid()}\n")
        super().close(*args, **kwargs)


def marked_policy(mark=0.0):
    policy = TensorDictModule(MarkedPole(), in_keys=["observation"], out_keys=["action", "mark"])
    set_mark(policy, mark)
    return policy


def set_mark(policy, value):
    policy.module.mark.data.fill_(value)


def append_line(path):
    with open(path, "a") as file:
        file.write("collect\n")


def tag(batch):
    batch.set("tagged", torch.ones(batch.shape))


def closed_pids(path):
    return {int(line) for line in path.read_text().split()} if path.exists() else set()


class TestRayCollectorSync:
    def test_batches_frames_and_weights(self, shared_ray, tmp_path):
        policy = marked_policy()
        marking = functools.partial(CartPoleMarkingClose, tmp_path / "closed")
        collector = RayCollector(
            marking, policy, frames_per_batch=40, total_frames=100, num_collectors=2, sync=True
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
        collector.shutdown(30.0, False)  # TorchRL's (timeout, shutdown_ray)
        assert collector.closed and ray.is_initialized()  # Ray was started by the fixture
        assert not processes_left(pids)
        # each actor's collector was shut down (its env closed) before it was killed
        assert closed_pids(tmp_path / "closed") == set(pids)


class TestRayCollectorState:
    def test_crafted_env_state_is_refused_in_the_actor(self, shared_ray, tmp_path):
        """A checkpoint's worker state reaches the actors as plain data; a pickle payload
        in place of the env state is refused there and never runs."""
        marker = tmp_path / "pwned"
        inner = f"cos\nsystem\n(S'touch {marker}'\ntR.".encode()
        attack = b"cgymnasium.vector.utils.misc\nCloudpickleWrapper\n)\x81C"
        attack += bytes([len(inner)]) + inner + b"b."
        collector = RayCollector(
            cartpole, marked_policy(), frames_per_batch=20, total_frames=-1, num_collectors=1
        )
        try:
            next(iter(collector))
            torch.save(collector.state_dict(), tmp_path / "state.pt")
            state = torch.load(tmp_path / "state.pt", weights_only=True)
            assert isinstance(state["workers"][0]["env_state"], dict)
            state["workers"][0]["env_state"] = torch.frombuffer(
                bytearray(attack), dtype=torch.uint8
            )
            with pytest.raises(Exception, match="cannot restore the state of GymEnv"):
                collector.load_state_dict(state)
        finally:
            collector.shutdown()
        assert not marker.exists()


class TestRayCollectorAsync:
    def test_exact_frames_and_update_after_each_batch(self, shared_ray):
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


class TestRayCollectorPause:
    def test_pause_holds_and_resumes_or_stops(self, shared_ray):
        written = []
        buffer = SimpleNamespace(extend=written.append)
        # one actor: pausing is what is checked, not how many actors pause (each actor
        # costs a worker process importing torch and rl, about 7 s of CPU here)
        collector = RayCollector(
            cartpole, None, frames_per_batch=20, total_frames=-1, num_collectors=1,
            sync=False, replay_buffer=buffer,
        )  # fmt: skip

        def wait_for(predicate):
            deadline = time.monotonic() + 120
            while not predicate():
                assert time.monotonic() < deadline, "timed out"
                time.sleep(0.05)

        try:
            with collector.pause():  # not collecting: nothing to hold (as TorchRL)
                pass
            collector.start()
            wait_for(lambda: len(written) >= 2)
            with collector.pause(timeout=60):
                held = len(written)
                # the batches in flight were written: every frame counted is stored
                assert sum(batch.numel() for batch in written) == collector._frames
                time.sleep(0.5)
                assert len(written) == held
            wait_for(lambda: len(written) > held)
            with collector.pause(resume=False):
                held = len(written)
            assert not collector.is_running()
            time.sleep(0.5)
            assert len(written) == held
            collector.start()  # starts again
            wait_for(lambda: len(written) > held)
        finally:
            collector.async_shutdown()


class TestRayCollectorReplayBuffer:
    def test_actors_extend_a_ray_replay_buffer(self, shared_ray):
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

    def test_actors_write_trajectory_ids_unique_across_actors_and_lives(self):
        written = []
        buffer = SimpleNamespace(extend=written.append)
        batch = TensorDict({("collector", "traj_ids"): torch.tensor([0, 0, 1, 2])}, [4])
        wrapper = UniqueTrajIdsBuffer(buffer, index=1, num_collectors=3)
        wrapper.extend(batch.clone())
        assert written[0]["collector", "traj_ids"].tolist() == [1, 1, 4, 7]
        wrapper.generation = 2  # the second restart of actor 1
        wrapper.extend(batch.clone())
        offset = 2 * TRAJ_ID_STRIDE * 3
        assert written[1]["collector", "traj_ids"].tolist() == [offset + i for i in [1, 1, 4, 7]]


class TestRayCollectorFailures:
    def test_killed_actor_raises_within_seconds(self, shared_ray):
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

    def test_actor_error_is_raised_with_its_traceback(self, shared_ray):
        policy = TensorDictModule(Exploding(), in_keys=["observation"], out_keys=["action"])
        collector = RayCollector(cartpole, policy, frames_per_batch=10, total_frames=20)
        with pytest.raises(RuntimeError, match="actor 0 raised while collecting") as info:
            collector.next()
        assert "ValueError: the policy exploded" in str(info.value)
        # the actor's traceback, down to the line that raised
        assert 'raise ValueError("the policy exploded")' in str(info.value)
        assert collector.closed

    def test_restarted_actor_keeps_frames_exact_and_trajectory_ids_apart(self, shared_ray):
        data = pytest.importorskip("rl.data")
        rb = data.RayReplayBuffer(
            replay_buffer_cls=data.TensorDictReplayBuffer,
            storage=functools.partial(data.LazyTensorStorage, 100),
            remote_config={"num_cpus": 0},
        )
        policy = marked_policy()
        collector = RayCollector(
            cartpole,
            policy,
            frames_per_batch=20,
            total_frames=70,
            sync=True,
            replay_buffer=rb,
            remote_configs={"num_cpus": 1, "max_restarts": 1},
        )
        assert collector.next() is None and len(rb) == 20
        set_mark(policy, 2.0)
        collector.update_policy_weights_()
        (pid,) = collector.worker_pids
        os.kill(pid, signal.SIGKILL)  # idle: Ray restarts it before its next batch
        assert list(collector) == [None, None, None]
        assert collector._frames == 70 and len(rb) == 70
        stored = rb[:70]
        # the restarted actor got the latest weights
        assert stored["mark"][:20].unique().tolist() == [0.0]
        assert stored["mark"][20:].unique().tolist() == [2.0]
        # its own ids start again at 0: the driver's generation keeps them apart
        ids = stored["collector", "traj_ids"]
        assert set(ids[:20].tolist()).isdisjoint(ids[20:].tolist())
        assert (ids[:20] < TRAJ_ID_STRIDE).all() and (ids[20:] >= TRAJ_ID_STRIDE).all()
        (new_pid,) = collector.worker_pids
        assert new_pid != pid
        collector.shutdown()
        rb.shutdown()
        assert not processes_left([new_pid])


class TestRayCollectorPolicyFactoryAndHooks:
    def test_policy_built_in_the_actors_and_hooks_run_there(self, shared_ray, tmp_path):
        collector = RayCollector(
            cartpole,
            policy_factory=functools.partial(marked_policy, 4.0),
            frames_per_batch=10,
            total_frames=30,
            sync=True,  # each batch starts when asked for: new weights apply to the next
            pre_collect_hook=functools.partial(append_line, tmp_path / "pre"),
            post_collect_hook=tag,
        )
        assert collector.policy is None
        first = collector.next()
        assert first["mark"].unique().tolist() == [4.0]
        collector.update_policy_weights_()  # no policy here: nothing to send
        assert collector.next()["mark"].unique().tolist() == [4.0]
        collector.update_policy_weights_(marked_policy(7.0))  # explicit weights are sent
        last = collector.next()
        assert last["mark"].unique().tolist() == [7.0]
        # the post-collect hook changed each batch in the actor; the pre hook ran per batch
        torch.testing.assert_close(last["tagged"], torch.ones(1, 10))  # stacked: sync
        assert (tmp_path / "pre").read_text().split() == ["collect"] * 3
        collector.shutdown()


class TestRayCollectorArguments:
    def test_torchrl_defaults(self):
        params = inspect.signature(RayCollector).parameters
        defaults = {name: p.default for name, p in params.items()}
        assert defaults["max_frames_per_traj"] == -1 and defaults["init_random_frames"] == -1
        assert defaults["split_trajs"] is False and defaults["policy_factory"] is None
        shutdown = inspect.signature(RayCollector.shutdown).parameters
        assert list(shutdown)[:3] == ["self", "timeout", "shutdown_ray"]
        assert shutdown["close_env"].kind is inspect.Parameter.KEYWORD_ONLY

    @pytest.mark.parametrize(
        "kwargs, error, match",
        [
            ({"weight_updater": object()}, ValueError, "weight_updater is not supported by"),
            ({"weight_sync_schemes": {}}, ValueError, "weight_sync_schemes is not supported"),
            ({"weight_recv_schemes": {}}, ValueError, "weight_recv_schemes is not supported"),
            ({"trajs_per_batch": 4}, ValueError, "trajs_per_batch is not supported by"),
            ({"policy_factory": marked_policy}, ValueError, "pass policy or policy_factory"),
            ({"post_collect_hook": 3}, TypeError, "post_collect_hook must be callable, got int"),
        ],
    )
    def test_unsupported_torchrl_arguments(self, kwargs, error, match):
        with pytest.raises(error, match=match):
            RayCollector(cartpole, marked_policy(), frames_per_batch=10, **kwargs)

    def test_bad_arguments(self):
        with pytest.raises(ValueError, match="multiple of num_collectors=2 in sync mode"):
            RayCollector(cartpole, None, frames_per_batch=31, num_collectors=2, sync=True)
        with pytest.raises(ValueError, match="collector_class must be .* got 'nope'"):
            RayCollector(cartpole, None, frames_per_batch=10, collector_class="nope")
        with pytest.raises(
            ValueError, match=r"create_env_fn has 2 entries, expected one per collector \(3\)"
        ):
            RayCollector([cartpole, cartpole], None, frames_per_batch=10, num_collectors=3)
        with pytest.raises(ValueError, match="num_workers_per_collector=2 applies to"):
            RayCollector(cartpole, None, frames_per_batch=10, num_workers_per_collector=2)

    def test_layout_and_weight_errors(self):
        def check(per_step, fpb, total, sync, sizes=None):
            check_frames(per_step, frames_per_batch=fpb, total_frames=total, sync=sync,
                         who="actor", batch_sizes=sizes)  # fmt: skip

        check({0: 4, 1: 4}, 80, 160, True)
        check({0: 4, 1: 4}, 80, 40, True)  # 20 per actor
        with pytest.raises(ValueError, match=r"gives 30 frames per batch of actor 0, not a mul"):
            check({0: 4}, 30, -1, False)
        with pytest.raises(ValueError, match=r"total_frames=100 cannot be collected exactly"):
            check({0: 4, 1: 4}, 80, 100, True)
        with pytest.raises(ValueError, match="every actor needs the same env batch size"):
            check({0: 4, 1: 4}, 16, -1, True, {0: (4,), 1: (2, 2)})
        template = TensorDict.from_module(marked_policy()).data
        new = marked_policy()
        set_mark(new, 3.0)
        sent = weights_to_send(new, template)
        assert sent is not template and sent["module", "mark"].item() == 3.0
        from_state_dict = weights_to_send({"module.mark": torch.tensor([5.0])}, template)
        assert from_state_dict["module", "mark"].item() == 5.0
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
