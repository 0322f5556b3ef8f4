"""AsyncEnvPool (threading and multiprocessing): values against SerialEnv, env_index
routing, partial receives, errors, and shutdown leaving no thread or process behind."""

from __future__ import annotations

import doctest
import functools
import gc
import importlib
import os
import pickle
import signal
import sys
import threading
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from rl.envs import (
    AsyncEnvPool,
    PendulumEnv,
    ProcessorAsyncEnvPool,
    SerialEnv,
    StepCounter,
    ThreadingAsyncEnvPool,
    TransformedEnv,
    check_env_specs,
)

sys.path.insert(0, str(Path(__file__).parent))
from _batched_factories import CounterEnv, RaisingEnv, SlowEnv  # noqa: E402

BACKENDS = ["threading", "multiprocessing"]


@pytest.fixture
def make_pool():
    pools = []

    def make(*args, **kwargs):
        pool = AsyncEnvPool(*args, **kwargs)
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        pool.close()


def _counts(td) -> list[float]:
    return td["next", "observation"][..., 0].tolist()


class TestAsyncEnvPool:
    def test_backend_dispatch_and_argument_errors(self, make_pool):
        assert type(make_pool([CounterEnv])) is ThreadingAsyncEnvPool
        pool = make_pool([CounterEnv], backend="multiprocessing", exchange="shm")
        assert type(pool) is ProcessorAsyncEnvPool
        with pytest.raises(ValueError, match="backend must be 'threading' or 'multiprocessing'"):
            AsyncEnvPool([CounterEnv], backend="asyncio")
        with pytest.raises(ValueError, match="exchange='shm' is only supported"):
            AsyncEnvPool([CounterEnv], exchange="shm")
        with pytest.raises(ValueError, match="stack must be"):
            AsyncEnvPool([CounterEnv], stack="flat")
        with pytest.raises(ValueError, match="a list of 2 dicts"):
            AsyncEnvPool([CounterEnv, CounterEnv], create_env_kwargs=[{}])
        with pytest.raises(ValueError, match="exchange must be 'queue', 'shm' or 'auto'"):
            AsyncEnvPool([CounterEnv], exchange="pipe")
        assert make_pool([CounterEnv], exchange=None).exchange == "auto"
        with pytest.raises(NotImplementedError, match="only envs_per_worker=1"):
            AsyncEnvPool([CounterEnv] * 2, backend="multiprocessing", envs_per_worker=2)
        with pytest.raises(ValueError, match="needs backend='multiprocessing'"):
            AsyncEnvPool([CounterEnv], worker_affinity=[0])
        with pytest.raises(ValueError, match="non-empty sets of the CPU ids"):
            AsyncEnvPool([CounterEnv], backend="multiprocessing", worker_affinity=[10**6])

    def test_worker_timeout_reaches_the_workers(self, make_pool):
        # ParallelEnv's 30 s by default; a subclass may wait without a limit (what
        # AsyncBatchedCollector's env processes do)
        from rl.envs import ProcessorAsyncEnvPool

        class Unlimited(ProcessorAsyncEnvPool):
            _worker_timeout = None

        pool = make_pool([CounterEnv], backend="multiprocessing")
        assert pool._workers.timeout == 30.0
        unlimited = Unlimited([CounterEnv])
        try:
            assert unlimited._workers.timeout is None
            td = unlimited.step(unlimited.reset().set("action", torch.ones(1, 1)))
            assert _counts(td) == [1.0]
        finally:
            unlimited.close()

    def test_worker_affinity(self, make_pool):
        cpu = min(os.sched_getaffinity(0))
        pool = make_pool([CounterEnv] * 2, backend="multiprocessing", worker_affinity=[[cpu]] * 2)
        assert [os.sched_getaffinity(pid) for pid in pool.worker_pids] == [{cpu}, {cpu}]
        td = pool.step(pool.reset().set("action", torch.ones(2, 1)))
        assert _counts(td) == [1.0, 1.0]

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_steps_match_serial_env(self, make_pool, backend):
        pool = make_pool([PendulumEnv] * 3, backend=backend)
        serial = SerialEnv(3, PendulumEnv)
        assert pool.batch_size == serial.batch_size == (3,)
        assert pool.set_seed(7) == serial.set_seed(7)
        td, ref = pool.reset(), serial.reset()
        torch.testing.assert_close(td["observation"], ref["observation"])
        assert td["env_index"] == [0, 1, 2]
        for t in range(4):
            action = torch.full((3, 1), 0.5 * t - 1.0)
            td = pool.step(td.set("action", action))
            ref = serial.step(ref.set("action", action.clone()))
            torch.testing.assert_close(td["next", "observation"], ref["next", "observation"])
            torch.testing.assert_close(td["next", "reward"], ref["next", "reward"])
            td, ref = pool.step_mdp(td), serial.step_mdp(ref)
        serial.close()

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_env_index_routing(self, make_pool, backend):
        pool = make_pool([CounterEnv] * 3, backend=backend)
        pool.reset()
        # rows in the order 2, 0: each row reaches the env its index names
        rows = TensorDict(
            action=torch.tensor([[1.0], [0.5]]), env_index=torch.tensor([2, 0]), batch_size=[2]
        )
        pool.async_step_send(rows)
        out = pool.async_step_recv(min_get=2)
        assert out["env_index"] == [0, 2]  # sorted by env index
        assert _counts(out) == [0.5, 1.0]
        # env 1 alone, received apart with env_index=1 (no pool dim)
        pool.async_step_send(TensorDict(action=torch.tensor([0.25])), env_index=1)
        one = pool.async_step_recv(env_index=1)
        assert one.batch_size == () and one["env_index"] == 1
        assert one["next", "observation"].tolist() == [0.25, 1.0, 1.0]
        # a row of a received batch goes back with its own index
        again = pool.step_mdp(out)[1].set("action", torch.tensor([1.0]))
        pool.async_step_send(again)
        out = pool.async_step_recv()
        assert out["env_index"] == [2] and _counts(out) == [2.0]
        # the synchronous step saw every count
        td = pool.step(pool.reset().set("action", torch.ones(3, 1)))
        assert _counts(td) == [1.0, 1.0, 1.0]

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_masked_reset_keeps_the_other_envs(self, make_pool, backend):
        pool = make_pool([CounterEnv] * 3, backend=backend)
        td = pool.step(pool.reset().set("action", torch.ones(3, 1)))
        root = pool.step_mdp(td)
        root["_reset"] = torch.tensor([[False], [True], [False]])
        out = pool.reset(root)
        # [count, steps, resets]: env 1 restarted (second reset), envs 0 and 2 kept
        assert out["observation"].tolist() == [[1, 1, 1], [0, 0, 2], [1, 1, 1]]

    def test_threading_takes_envs_that_differ(self, make_pool):
        from rl.envs import CartPoleEnv

        pool = make_pool([PendulumEnv, CartPoleEnv], stack="lazy")
        reset = pool.reset()
        assert [t["observation"].shape for t in reset.tensordicts] == [(3,), (4,)]
        pool.async_reset_send(env_index=1)
        assert pool.async_reset_recv(env_index=1)["observation"].shape == (4,)

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_partial_receives(self, make_pool, backend):
        pool = make_pool([CounterEnv] * 3, backend=backend)
        pool.async_reset_send(env_index=[0, 1, 2])
        first = pool.async_reset_recv(min_get=1, max_get=1, timeout=0.0)
        rest = pool.async_reset_recv(min_get=2)
        assert first.shape == (1,) and rest.shape == (2,)
        assert sorted(first["env_index"] + rest["env_index"]) == [0, 1, 2]
        stats = pool.stats(reset=True)
        assert (stats["batches"], stats["items"]) == (2, 3)
        assert stats["batch_fill_ratio"] == pytest.approx(3 / 3)
        assert pool.stats()["batches"] == 0

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_threads_driving_their_own_env(self, make_pool, backend):
        # two threads step env 0 (slow) and env 1 with per-env sends and receives
        slow = functools.partial(SlowEnv, 0.02)
        pool = make_pool([slow, CounterEnv], backend=backend)
        pool.reset()
        counts = {0: [], 1: []}

        def drive(index):
            for _ in range(4):
                pool.async_step_send(TensorDict(action=torch.ones(1)), env_index=index)
                counts[index].append(
                    pool.async_step_recv(env_index=index)["next", "observation"][0]
                )

        threads = [threading.Thread(target=drive, args=(i,)) for i in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert counts == {0: [1, 2, 3, 4], 1: [1, 2, 3, 4]}

    def test_results_arrive_as_envs_finish(self, make_pool):
        # env 0 sleeps: env 1's step is received first, env 0's later
        pool = make_pool([functools.partial(SlowEnv, 0.3), CounterEnv], backend="multiprocessing")
        pool.reset()
        pool.async_step_send(pool.reset().set("action", torch.ones(2, 1)))
        first = pool.async_step_recv(min_get=1)
        assert first["env_index"] == [1]
        second = pool.async_step_recv(min_get=1)
        assert second["env_index"] == [0] and _counts(second) == [1.0]

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_step_and_maybe_reset(self, make_pool, backend):
        maker = functools.partial(CounterEnv, limit=1.0)
        pool = make_pool([maker] * 2, backend=backend)
        serial = SerialEnv(2, maker)
        action = torch.tensor([[1.0], [0.5]])  # env 0 terminates, env 1 does not
        out, root = pool.step_and_maybe_reset(pool.reset().set("action", action))
        ref, ref_root = serial.step_and_maybe_reset(serial.reset().set("action", action))
        torch.testing.assert_close(out["next", "observation"], ref["next", "observation"])
        torch.testing.assert_close(out["next", "done"], ref["next", "done"])
        torch.testing.assert_close(root["observation"], ref_root["observation"])
        assert root["observation"][:, 0].tolist() == [0.0, 0.5]  # env 0 was reset
        assert root["env_index"] == [0, 1]
        # the same, env by env
        pool.async_step_and_maybe_reset_send(root, env_index=None)
        out, root = pool.async_step_and_maybe_reset_recv(min_get=2)
        assert _counts(out) == [1.0, 1.0] and root["observation"][:, 0].tolist() == [0.0, 0.0]
        serial.close()

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_bad_indices_and_states(self, make_pool, backend):
        pool = make_pool([CounterEnv] * 2, backend=backend)
        td = pool.reset().set("action", torch.ones(2, 1))
        with pytest.raises(IndexError, match="env_index 5 is out of range for a pool of 2"):
            pool.async_step_send(td[:1], env_index=[5])
        with pytest.raises(ValueError, match="names a sub-env more than once"):
            pool.async_step_send(td.set("env_index", torch.tensor([1, 1])))
        with pytest.raises(KeyError, match="no 'env_index' entry"):
            pool.async_step_send(td.exclude("env_index"))
        with pytest.raises(ValueError, match="an 'env_index' entry in the tensordict or"):
            pool.async_reset_send()
        with pytest.raises(ValueError, match="first dim of 1"):
            pool.async_step_send(td, env_index=[0])
        with pytest.raises(RuntimeError, match="cannot wait for 1 step"):
            pool.async_step_recv()
        with pytest.raises(RuntimeError, match="no reset was sent to env 0"):
            pool.async_reset_recv(env_index=0)
        pool.async_step_send(td.set("env_index", torch.tensor([0, 1])))
        with pytest.raises(RuntimeError, match=r"env\(s\) \[0\] .* still processing"):
            pool.async_reset_send(env_index=[0])
        with pytest.raises(RuntimeError, match="still processing an operation"):
            pool.step(td)
        with pytest.raises(ValueError, match="max_get must be greater"):
            pool.async_step_recv(min_get=2, max_get=1)
        with pytest.raises(ValueError, match="min_get must be positive"):
            pool.async_step_recv(min_get=0)
        assert pool.async_step_recv(min_get=2).shape == (2,)

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_check_env_specs_and_transformed(self, make_pool, backend):
        pool = make_pool([CounterEnv] * 2, backend=backend)
        check_env_specs(pool)
        env = TransformedEnv(pool, StepCounter())
        rollout = env.rollout(3)
        assert rollout.shape == (2, 3)
        assert rollout["next", "step_count"][0, :, 0].tolist() == [1, 2, 3]

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_pickle_builds_a_new_pool(self, make_pool, backend):
        pool = make_pool([CounterEnv] * 2, backend=backend, stack="lazy")
        copy = pickle.loads(pickle.dumps(pool))
        try:
            assert type(copy) is type(pool) and copy.stack == "lazy"
            td = copy.step(copy.reset().set("action", torch.ones(2, 1)))
            assert _counts(td) == [1.0, 1.0]
            if backend == "multiprocessing":
                assert set(copy.worker_pids).isdisjoint(pool.worker_pids)
        finally:
            copy.close()

    def test_worker_error_is_reported(self, make_pool):
        pool = make_pool([functools.partial(RaisingEnv, 1)], backend="threading")
        with pytest.raises(RuntimeError, match="env 0 raised during step") as info:
            pool.step(pool.reset().set("action", torch.ones(1, 1)))
        assert "boom at step 1" in str(info.value.__cause__)
        pool = make_pool([functools.partial(RaisingEnv, 1)], backend="multiprocessing")
        with pytest.raises(RuntimeError, match="boom at step 1"):
            pool.step(pool.reset().set("action", torch.ones(1, 1)))
        assert pool.worker_pids == []  # a failure shuts the pool down
        with pytest.raises(RuntimeError, match="is shut down"):
            pool.reset()

    def test_worker_failure_reaches_every_driving_thread(self, make_pool):
        # env 0's worker raises at its second step while two threads drive envs 0 and 1:
        # both threads raise an error naming that failure (whichever thread read it),
        # none hangs, and the pool's workers are gone
        pool = make_pool([functools.partial(RaisingEnv, 2), CounterEnv], backend="multiprocessing")
        pids = pool.worker_pids
        pool.reset()
        errors = {}

        def drive(index):
            try:
                for _ in range(200):
                    pool.async_step_send(TensorDict(action=torch.ones(1)), env_index=index)
                    pool.async_step_recv(env_index=index)
            except RuntimeError as err:
                errors[index] = str(err)

        threads = [threading.Thread(target=drive, args=(i,)) for i in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in threads)
        assert sorted(errors) == [0, 1]
        for error in errors.values():
            assert "ProcessorAsyncEnvPool worker 0 raised during step" in error
            assert "boom at step 2" in error
        assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)
        with pytest.raises(
            RuntimeError, match="(?s)is shut down: a worker failed .*boom at step 2"
        ):
            pool.async_step_send(TensorDict(action=torch.ones(1)), env_index=1)
        with pytest.raises(
            RuntimeError, match="(?s)is shut down: a worker failed .*boom at step 2"
        ):
            pool.async_step_recv(env_index=1)

    def test_killed_worker_is_named(self, make_pool):
        pool = make_pool([CounterEnv] * 2, backend="multiprocessing")
        pids = pool.worker_pids
        reset = pool.reset()
        os.kill(pids[1], signal.SIGKILL)
        with pytest.raises(
            RuntimeError,
            match=r"ProcessorAsyncEnvPool worker 1 \(pid \d+\) died during step with exit code -9",
        ):
            pool.step(reset.set("action", torch.ones(2, 1)))
        assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)
        with pytest.raises(RuntimeError, match="(?s)is shut down: a worker failed .*worker 1"):
            pool.async_reset_recv()
        pool.close()
        with pytest.raises(RuntimeError, match="is shut down: a worker failed"):
            pool.reset()

    def test_interrupted_wait_is_named(self, make_pool, monkeypatch):
        pool = make_pool([CounterEnv], backend="multiprocessing")
        pids = pool.worker_pids
        pool.async_reset_send(env_index=0)

        def interrupt(*args, **kwargs):
            raise KeyboardInterrupt

        monkeypatch.setattr(pool._workers._pool, "collect", interrupt)
        with pytest.raises(KeyboardInterrupt):
            pool.async_reset_recv(env_index=0)
        assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)
        with pytest.raises(
            RuntimeError, match=r"a wait for its workers was interrupted \(KeyboardInterrupt\)"
        ):
            pool.reset()

    def test_shutdown_leaves_nothing_behind(self):
        pool = AsyncEnvPool([CounterEnv] * 2, backend="multiprocessing")
        pids = pool.worker_pids
        assert len(pids) == 2 and all(os.path.exists(f"/proc/{pid}") for pid in pids)
        pool.close()
        pool.close()  # idempotent
        assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)
        pool = AsyncEnvPool([CounterEnv] * 2, backend="multiprocessing")
        pids = pool.worker_pids
        del pool
        gc.collect()
        assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)
        pool = AsyncEnvPool([CounterEnv] * 2, backend="threading")
        pool.step(pool.reset().set("action", torch.ones(2, 1)))
        pool.close()
        assert not [t for t in threading.enumerate() if t.name.startswith("AsyncEnvPool")]


@pytest.mark.parametrize("name", ["_pool", "_threading", "_processes"])
def test_docstring_examples(name):
    module = importlib.import_module(f"rl.envs._async.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
