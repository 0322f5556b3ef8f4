"""AsyncBatchedCollector: batches whose actions are the policy's on their observations,
clear errors on bad input, dead servers / env processes reported, nothing left behind."""

from __future__ import annotations

import functools
import gc
import multiprocessing as mp
import os
import signal
import threading
import traceback
import weakref

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from rl.collectors import AsyncBatchedCollector
from rl.collectors._async_batched import _EnvProcesses
from rl.core import ExplorationType
from rl.core import exploration_type as exploration_type_now
from rl.core.inference_server import InferenceServerConfig
from rl.envs import PendulumEnv, StepCounter, TransformedEnv

pytestmark = pytest.mark.timeout(120)


def make_policy() -> TensorDictModule:
    torch.manual_seed(0)
    return TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["action"])


def short_pendulum(max_steps: int = 4) -> TransformedEnv:
    return TransformedEnv(PendulumEnv(), StepCounter(max_steps=max_steps))


class BrokenPendulum(PendulumEnv):
    """Fails on its third step."""

    def _step(self, td):
        self.steps = getattr(self, "steps", 0) + 1
        if self.steps == 3:
            raise ValueError("pendulum snapped")
        return super()._step(td)


class LateBrokenPendulum(PendulumEnv):
    """Fails on its 40th step (after the first batches)."""

    def _step(self, td):
        self.steps = getattr(self, "steps", 0) + 1
        if self.steps == 40:
            raise ValueError("pendulum snapped late")
        return super()._step(td)


def failing_factory() -> PendulumEnv:
    raise OSError("cannot open the simulator")


def failing_in_a_worker() -> PendulumEnv:
    if mp.parent_process() is not None:
        raise OSError("cannot open the simulator in a worker")
    return PendulumEnv()


def seeded_pendulum(seed: int, max_steps: int = 5) -> TransformedEnv:
    return TransformedEnv(PendulumEnv(seed=seed), StepCounter(max_steps=max_steps))


def plain_loop(seed: int, policy, steps: int) -> list:
    """The transitions of a plain loop over ``seeded_pendulum(seed)`` with ``policy``."""
    env = seeded_pendulum(seed)
    td = env.reset()
    out = []
    with torch.no_grad():
        for _ in range(steps):
            transition, td = env.step_and_maybe_reset(policy(td))
            out.append(transition)
    return out


def collector_threads() -> list[threading.Thread]:
    return [
        t
        for t in threading.enumerate()
        if t.name.startswith(("AsyncBatchedCollector", "InferenceServer"))
    ]


def check_batch(batch, policy, num_envs):
    with torch.no_grad():
        torch.testing.assert_close(batch["action"], policy.module(batch["observation"]))
    assert set(batch["env_index"].tolist()) <= set(range(num_envs))
    # consecutive transitions of one env: the next observation is where it acted next
    for env in range(num_envs):
        steps = batch[batch["env_index"] == env]
        for t in range(len(steps) - 1):
            if not steps[t]["next", "done"].any():
                torch.testing.assert_close(
                    steps[t]["next", "observation"], steps[t + 1]["observation"]
                )


class TestAsyncBatchedCollector:
    @pytest.mark.parametrize(
        "kwargs",
        [
            {"env_backend": "threading"},
            {"env_backend": "multiprocessing"},
            {"server_config": InferenceServerConfig(service_backend="process", max_batch_size=3)},
        ],
        ids=["threads", "env-processes", "process-server"],
    )
    def test_actions_are_the_policys_and_nothing_is_left(self, kwargs):
        policy = make_policy()
        source = (
            {"policy_factory": make_policy} if "server_config" in kwargs else {"policy": policy}
        )
        collector = AsyncBatchedCollector(
            [PendulumEnv] * 3, frames_per_batch=12, total_frames=36, **source, **kwargs
        )
        batches = list(collector)
        assert [b.shape for b in batches] == [torch.Size([12])] * 3
        whole = torch.cat(batches)
        check_batch(whole, policy, 3)
        assert (whole["policy_version"] == 0).all()
        assert collector.server_stats()["requests"] >= 36
        collector.shutdown()
        collector.shutdown()  # idempotent
        assert mp.active_children() == []
        assert collector_threads() == []

    @pytest.mark.parametrize("env_backend", ["threading", "multiprocessing"])
    def test_transitions_match_a_plain_loop(self, env_backend):
        # seeded envs (episodes of 5 steps, so batches cross resets): each env's
        # transitions, in order, are those of a plain loop over the same env and policy
        policy = make_policy()
        collector = AsyncBatchedCollector(
            [functools.partial(seeded_pendulum, seed) for seed in (3, 7)],
            policy=policy,
            frames_per_batch=8,
            total_frames=32,
            env_backend=env_backend,
        )
        whole = torch.cat(list(collector))
        if env_backend == "multiprocessing":
            # the env processes wait for their env as long as it takes (a first step may
            # compile), as before the pool (the pool's wiring: test_async_env_pool.py)
            assert isinstance(collector._env_pool, _EnvProcesses)
            assert _EnvProcesses._worker_timeout is None
        collector.shutdown()
        assert whole.shape == torch.Size([32])
        keys = [
            "observation", "action", "step_count", "done", "terminated", "truncated",
            ("next", "observation"), ("next", "reward"), ("next", "done"),
            ("next", "terminated"), ("next", "truncated"), ("next", "step_count"),
        ]  # fmt: skip
        assert set(whole.keys(True, True)) == {
            *keys,
            "env_index",
            "policy_version",
            ("collector", "traj_ids"),
        }
        for env, seed in enumerate((3, 7)):
            ours = whole[whole["env_index"] == env]
            expected = torch.stack(plain_loop(seed, policy, len(ours)))
            assert len(ours) > 0
            for key in keys:
                torch.testing.assert_close(
                    ours[key], expected[key], msg=lambda m, k=key: f"{k}: {m}"
                )
            # a new trajectory id after each done, ids of env e are e modulo 2
            done_before = torch.cat(
                [torch.zeros(1), expected["next", "done"].flatten()[:-1].float()]
            )
            episode = done_before.cumsum(0).long()
            torch.testing.assert_close(ours["collector", "traj_ids"], episode * 2 + env)

    def test_env_processes_are_gone_after_an_env_error_and_shutdown(self):
        collector = AsyncBatchedCollector(
            [PendulumEnv, LateBrokenPendulum],
            policy=make_policy(),
            frames_per_batch=4,
            env_backend="multiprocessing",
        )
        batches = iter(collector)
        next(batches)
        pids = collector._env_pool.worker_pids
        assert len(pids) == 2 and all(os.path.exists(f"/proc/{pid}") for pid in pids)
        with pytest.raises(RuntimeError, match="worker 1 raised during step_and_maybe_reset"):
            for _ in range(100):
                next(batches)
        # the failure shut the pool down: no worker outlives it, even before shutdown()
        assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)
        collector.shutdown(timeout=2.0)
        assert mp.active_children() == []
        assert collector_threads() == []
        # a clean run: the workers are gone after shutdown()
        collector = AsyncBatchedCollector(
            [PendulumEnv] * 2,
            policy=make_policy(),
            frames_per_batch=4,
            total_frames=8,
            env_backend="multiprocessing",
        )
        assert len(list(collector)) == 2
        pids = collector._env_pool.worker_pids
        collector.shutdown()
        assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)
        assert mp.active_children() == []

    @pytest.mark.parametrize(
        ("factories", "error", "match"),
        [
            # the first factory also builds the env the pool reads its specs from
            ([failing_factory, PendulumEnv], OSError, "cannot open the simulator"),
            (
                [PendulumEnv, failing_in_a_worker],
                RuntimeError,
                "(?s)worker 1 raised during start-up.*cannot open the simulator in a worker",
            ),
        ],
        ids=["first", "in-a-worker"],
    )
    def test_env_factory_error_is_raised(self, factories, error, match):
        collector = AsyncBatchedCollector(
            factories, policy=make_policy(), frames_per_batch=4, env_backend="multiprocessing"
        )
        with pytest.raises(error, match=match):
            next(iter(collector))
        collector.shutdown()
        assert mp.active_children() == []
        assert collector_threads() == []

    @pytest.mark.parametrize("env_backend", ["threading", "multiprocessing"])
    def test_garbage_collection_stops_threads_and_processes(self, env_backend):
        # a collector dropped mid-iteration, without shutdown(): its coordinator threads
        # must not keep it alive, so that its __del__ stops them and the env processes
        collector = AsyncBatchedCollector(
            [PendulumEnv] * 2,
            policy=make_policy(),
            frames_per_batch=4,
            total_frames=-1,
            env_backend=env_backend,
        )
        iterator = iter(collector)
        next(iterator)
        assert collector_threads()
        ref = weakref.ref(collector)
        del iterator, collector
        gc.collect()
        assert ref() is None
        assert mp.active_children() == []
        assert collector_threads() == []

    @pytest.mark.parametrize(
        "process_server", [False, True], ids=["thread-server", "process-server"]
    )
    def test_weight_updates_reach_the_server_and_bump_the_version(self, process_server):
        kwargs = (
            {
                "policy_factory": make_policy,
                "server_config": InferenceServerConfig(service_backend="process"),
            }
            if process_server
            else {"policy": make_policy()}
        )
        collector = AsyncBatchedCollector(
            [PendulumEnv] * 2, frames_per_batch=8, total_frames=64, **kwargs
        )
        zeros = TensorDict.from_module(make_policy()).detach().apply(torch.zeros_like)
        batches = []
        for i, batch in enumerate(collector):
            batches.append(batch)
            if i == 0:
                collector.update_policy_weights_(zeros)
        collector.shutdown()
        whole = torch.cat(batches)
        new = whole["policy_version"] == 1
        assert set(whole["policy_version"].tolist()) == {0, 1} and new[-8:].all()
        assert (whole["action"][new] == 0).all()
        with torch.no_grad():
            old = make_policy().module(whole["observation"][~new])
        torch.testing.assert_close(whole["action"][~new], old)
        assert collector.policy_version == 1

    def test_completed_trajectories_and_traj_ids(self):
        policy = make_policy()
        collector = AsyncBatchedCollector(
            [functools.partial(short_pendulum, 3), functools.partial(short_pendulum, 5)],
            policy=policy,
            frames_per_batch=1,
            total_frames=24,
            yield_completed_trajectories=True,
        )
        trajs = list(collector)
        collector.shutdown()
        assert sum(t.numel() for t in trajs) >= 24
        for traj in trajs:
            env = int(traj["env_index"][0])
            assert traj.shape == torch.Size([3 if env == 0 else 5])
            assert traj["next", "done"][-1].all() and not traj["next", "done"][:-1].any()
            assert (traj["collector", "traj_ids"] == traj["collector", "traj_ids"][0]).all()
            assert int(traj["collector", "traj_ids"][0]) % 2 == env
            check_batch(traj, policy, 2)
        ids = [int(t["collector", "traj_ids"][0]) for t in trajs]
        assert len(set(ids)) == len(ids)

    def test_postproc_replay_buffer_and_version_key(self):
        seen = []
        stored = []

        class Buffer:
            def extend(self, batch):
                stored.append(batch)

        collector = AsyncBatchedCollector(
            [PendulumEnv] * 2,
            policy=make_policy(),
            frames_per_batch=4,
            total_frames=8,
            postproc=lambda b: seen.append(b.shape) or b,
            replay_buffer=Buffer(),
            policy_version_key=None,
        )
        assert list(collector) == [None, None]
        collector.shutdown()
        assert seen == [torch.Size([4])] * 2
        assert all("policy_version" not in b.keys() for b in stored)

    def test_policy_error_is_raised_by_the_iterator(self):
        def broken(td):
            raise ValueError("policy exploded")

        collector = AsyncBatchedCollector([PendulumEnv] * 2, policy=broken, frames_per_batch=4)
        with pytest.raises(
            RuntimeError, match="worker thread failed: ValueError\\('policy exploded'\\)"
        ):
            next(iter(collector))
        collector.shutdown()
        assert collector_threads() == []

    def test_killed_server_process_is_reported(self):
        collector = AsyncBatchedCollector(
            [PendulumEnv] * 2,
            policy_factory=make_policy,
            frames_per_batch=4,
            server_config=InferenceServerConfig(service_backend="process"),
        )
        batches = iter(collector)
        next(batches)
        collector._server._process.kill()
        with pytest.raises(RuntimeError, match="inference server died"):
            for _ in range(50):
                next(batches)
        collector.shutdown(timeout=2.0)
        assert mp.active_children() == []
        assert collector_threads() == []

    def test_killed_env_process_is_reported(self):
        collector = AsyncBatchedCollector(
            [PendulumEnv] * 2,
            policy=make_policy(),
            frames_per_batch=4,
            env_backend="multiprocessing",
        )
        batches = iter(collector)
        next(batches)
        pids = collector._env_pool.worker_pids
        os.kill(pids[1], signal.SIGKILL)
        with pytest.raises(
            RuntimeError, match=r"worker 1 \(pid \d+\) died during \w+ with exit code -9"
        ):
            for _ in range(50):
                next(batches)
        collector.shutdown(timeout=2.0)
        assert mp.active_children() == []
        assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)

    @pytest.mark.parametrize("policy_backend", ["threading", "multiprocessing"])
    @pytest.mark.parametrize(
        ("exploration_type", "expected"),
        [(ExplorationType.RANDOM, 1.0), (ExplorationType.DETERMINISTIC, 0.0)],
    )
    def test_policy_runs_under_the_exploration_type(
        self, policy_backend, exploration_type, expected
    ):
        def policy(td):
            random = exploration_type_now() is ExplorationType.RANDOM
            return td.set("action", torch.full((*td.batch_size, 1), float(random)))

        before = exploration_type_now()
        collector = AsyncBatchedCollector(
            [PendulumEnv] * 2,
            policy=policy,
            frames_per_batch=6,
            total_frames=6,
            exploration_type=exploration_type,
            policy_backend=policy_backend,
        )
        (batch,) = list(collector)
        collector.shutdown()
        assert batch["action"].flatten().tolist() == [expected] * 6
        assert exploration_type_now() is before  # the server thread's type did not leak

    @pytest.mark.parametrize("env_backend", ["threading", "multiprocessing"])
    def test_env_error_is_raised_with_its_traceback(self, env_backend):
        collector = AsyncBatchedCollector(
            [BrokenPendulum], policy=make_policy(), frames_per_batch=4, env_backend=env_backend
        )
        with pytest.raises(RuntimeError, match="pendulum snapped") as info:
            next(iter(collector))
        # the worker's traceback: in the message (env process) or in the cause (thread)
        cause = info.value.__cause__
        text = str(info.value) + "".join(traceback.format_exception(cause) if cause else [])
        assert "in _step" in text and "pendulum snapped" in text
        collector.shutdown()
        assert mp.active_children() == []
        assert collector_threads() == []

    @pytest.mark.parametrize("env_backend", ["threading", "multiprocessing"])
    def test_reset_at_each_iter_restarts_every_episode(self, env_backend):
        collector = AsyncBatchedCollector(
            [functools.partial(short_pendulum, 50)] * 2,
            policy=make_policy(),
            frames_per_batch=6,
            total_frames=18,
            reset_at_each_iter=True,
            env_backend=env_backend,
        )
        ids = []
        for batch in collector:
            for env in range(2):
                steps = batch[batch["env_index"] == env]
                assert steps["step_count"].flatten().tolist() == list(range(len(steps)))
                ids.append(set(steps["collector", "traj_ids"].tolist()))
        collector.shutdown()
        # one new trajectory per env and batch, never an id used before
        assert all(len(i) == 1 for i in ids if i)
        flat = [next(iter(i)) for i in ids if i]
        assert len(set(flat)) == len(flat)

    def test_reset_refused_while_a_coordinator_is_inside_a_step(self):
        """A coordinator that did not stop (its env step outlasts the shutdown timeout)
        keeps its env: reset_at_each_iter raises instead of starting a second one."""
        release = threading.Event()

        class Stuck(PendulumEnv):
            def _step(self, td):
                if getattr(self, "stick", False):
                    release.wait(30)
                return super()._step(td)

        envs = [Stuck(), Stuck()]
        collector = AsyncBatchedCollector(
            [lambda e=e: e for e in envs],
            policy=make_policy(),
            frames_per_batch=4,
            total_frames=40,
            reset_at_each_iter=True,
        )
        collector._shutdown_timeout = 0.05
        it = iter(collector)
        next(it)
        envs[0].stick = True
        try:
            with pytest.raises(RuntimeError, match="did not stop within 0.05 s"):
                for _ in range(5):
                    next(it)
            # asked again (a new iterator), it refuses again: no second coordinator on
            # the stuck env
            with pytest.raises(RuntimeError, match="did not stop within 0.05 s"):
                next(iter(collector))
        finally:
            release.set()
            collector._shutdown_timeout = 5.0
            collector.shutdown()
        assert collector_threads() == []

    @pytest.mark.parametrize(
        ("kwargs", "error", "match"),
        [
            ({"policy_factory": make_policy}, TypeError, "mutually exclusive"),
            ({"create_env_fn": PendulumEnv}, TypeError, "must be a list of environment factories"),
            ({"frames_per_batch": 0}, ValueError, "frames_per_batch must be a positive int, got 0"),
            ({"total_frames": 0}, ValueError, r"total_frames must be a positive int or -1"),
            (
                {"env_exchange": "shared"},
                ValueError,
                "supports only env_exchange='auto' in rl, got 'shared'",
            ),
            ({"env_backend": "ray"}, ValueError, "env_backend='ray' is not supported"),
            (
                {"policy_backend": "monarch"},
                ValueError,
                "policy_backend='monarch' is not available",
            ),
            (
                {"server_config": InferenceServerConfig(), "max_batch_size": 2},
                ValueError,
                "server_config is mutually exclusive with max_batch_size",
            ),
            (
                {"server_config": InferenceServerConfig(service_backend="process")},
                TypeError,
                "needs policy_factory",
            ),
        ],
    )
    def test_bad_arguments(self, kwargs, error, match):
        args = {
            "create_env_fn": [PendulumEnv],
            "policy": make_policy(),
            "frames_per_batch": 4,
            **kwargs,
        }
        with pytest.raises(error, match=match):
            AsyncBatchedCollector(**args)
        assert collector_threads() == []

    def test_neither_policy_nor_factory(self):
        with pytest.raises(TypeError, match="one of policy or policy_factory must be provided"):
            AsyncBatchedCollector([PendulumEnv], frames_per_batch=4)
