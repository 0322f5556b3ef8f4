"""Evaluator: blocking and background evaluation rounds (TorchRL's Evaluator)."""

from __future__ import annotations

import copy
import gc
import math
import os
import sys
import threading
import time
import weakref
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from rl.collectors import Evaluator
from rl.collectors._evaluator import episode_metrics
from rl.envs import RewardSum, StepCounter, TransformedEnv, VecNorm

sys.path.insert(0, str(Path(__file__).parent))
from _collector_helpers import ReachEnv, children_of, constant_policy  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def _hand_rollout(action: float, goal: float = 3.0, max_steps: int = 100) -> tuple[float, int]:
    """Return and length of one episode of ReachEnv, run with env.rollout."""
    with torch.no_grad():
        td = ReachEnv(goal=goal).rollout(max_steps, constant_policy(action))
    return float(td["next", "reward"].sum()), td.shape[0]


def _reach():
    return ReachEnv(goal=3.0)


class _FailingReach(ReachEnv):
    def _step(self, tensordict):
        raise ValueError("the simulator exploded")


class _SignalReach(ReachEnv):
    """ReachEnv that sets ``stepped`` at its first step and records the perf_counter
    times around each step (``first_start``, ``last_end``)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.stepped = threading.Event()
        self.first_start = self.last_end = None

    def _step(self, tensordict):
        now = time.perf_counter()
        if self.first_start is None:
            self.first_start = now
        self.stepped.set()
        out = super()._step(tensordict)
        self.last_end = time.perf_counter()
        return out


class _Abort(BaseException):
    """Not an Exception: what a bare ``except Exception`` misses."""


class _AbortOnceReach(ReachEnv):
    aborted = False

    def _step(self, tensordict):
        if not _AbortOnceReach.aborted:
            _AbortOnceReach.aborted = True
            raise _Abort("stop right there")
        return super()._step(tensordict)


def _slow_counted_reach():
    """(process worker) a slow build; a StepCounter(3) of its own on an endless walk."""
    time.sleep(0.5)
    return TransformedEnv(ReachEnv(goal=math.inf), StepCounter(max_steps=3))


def _new_children(before: set[int]) -> list[int]:
    """This process's children that were not there before (a test worker may hold others
    for its lifetime, e.g. multiprocessing's resource tracker)."""
    return sorted(set(children_of(os.getpid())) - before)


def _wait_no_children(before: set[int], timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while _new_children(before) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _new_children(before)


def _evaluator_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "rl-evaluator" and t.is_alive()]


class TestEvaluate:
    @pytest.mark.parametrize("action", [0.7, 1.0, 2.0])
    def test_metrics_equal_hand_rollout(self, action):
        ret, length = _hand_rollout(action)
        evaluator = Evaluator(ReachEnv(), constant_policy(action), num_trajectories=3, max_steps=50)
        try:
            metrics = evaluator.evaluate(step=7)
        finally:
            evaluator.shutdown()
        assert metrics["eval/reward"] == pytest.approx(ret)
        assert metrics["eval/reward_std"] == 0.0
        assert metrics["eval/num_episodes"] == 3
        assert metrics["eval/episode_length"] == float(length)
        assert metrics["eval/step"] == 7
        assert metrics["eval/fps"] > 0
        assert set(metrics) == {
            "eval/reward",
            "eval/reward_std",
            "eval/num_episodes",
            "eval/episode_length",
            "eval/fps",
            "eval/step",
        }

    def test_batched_env_and_reward_sum(self):
        ret, length = _hand_rollout(0.7)
        env = TransformedEnv(ReachEnv(batch_size=(4,)), RewardSum())
        evaluator = Evaluator(env, constant_policy(0.7), num_trajectories=6, max_steps=20)
        try:
            metrics = evaluator.evaluate()
        finally:
            evaluator.shutdown()
        assert metrics["eval/num_episodes"] == 6
        assert metrics["eval/reward"] == pytest.approx(ret)
        assert metrics["eval/episode_length"] == float(length)

    def test_max_steps_truncates(self):
        # a constant 0.1 needs 30 steps: max_steps=4 cuts every episode at 4 (return 0.4)
        evaluator = Evaluator(_reach(), constant_policy(0.1), num_trajectories=2, max_steps=4)
        try:
            metrics = evaluator.evaluate()
        finally:
            evaluator.shutdown()
        assert metrics["eval/episode_length"] == 4.0
        assert metrics["eval/reward"] == pytest.approx(0.4)

    def test_weights_loaded_and_step_counter(self):
        eval_policy = constant_policy(0.5)
        evaluator = Evaluator(_reach(), eval_policy, num_trajectories=1, max_steps=20)
        try:
            first = evaluator.evaluate()  # the eval policy as it is
            second = evaluator.evaluate(constant_policy(2.0))  # a module's weights
            weights = TensorDict.from_module(constant_policy(1.0)).data
            third = evaluator.evaluate(weights_dict={"policy": weights})
        finally:
            evaluator.shutdown()
        assert first["eval/reward"] == pytest.approx(_hand_rollout(0.5)[0])
        assert second["eval/reward"] == pytest.approx(_hand_rollout(2.0)[0])
        assert third["eval/reward"] == pytest.approx(_hand_rollout(1.0)[0])
        assert [first["eval/step"], second["eval/step"], third["eval/step"]] == [0, 1, 2]
        # loaded in place: the eval policy keeps its parameters (and its state_dict keys)
        assert float(eval_policy.module.bias.detach()) == 1.0
        assert set(eval_policy.state_dict()) == {"module.weight", "module.bias"}

    def test_prefix_metrics_fn_and_callback(self):
        seen = []
        evaluator = Evaluator(
            _reach(),
            constant_policy(1.0),
            num_trajectories=2,
            max_steps=10,
            log_prefix="test",
            metrics_fn=lambda trajs: {"max_obs": float(trajs["next", "observation"].max())},
            on_result=seen.append,
        )
        try:
            metrics = evaluator.evaluate(step=42)
        finally:
            evaluator.shutdown()
        assert metrics["test/max_obs"] == 3.0
        assert len(seen) == 1 and isinstance(seen[0], TensorDict)
        assert seen[0]["test/step"].item() == 42
        assert seen[0]["test/reward"].item() == pytest.approx(3.0)

    def test_policy_factory_and_vecnorm_frozen(self):
        env = TransformedEnv(ReachEnv(), VecNorm(in_keys=["observation"]))
        with torch.no_grad():
            env.rollout(5, constant_policy(0.3))  # statistics gathered while training
        evaluator = Evaluator(
            env, policy_factory=lambda env: constant_policy(1.0), num_trajectories=1, max_steps=10
        )
        try:
            before = copy.deepcopy(env.transform.state_dict())
            metrics = evaluator.evaluate()
            after = env.transform.state_dict()
        finally:
            evaluator.shutdown()
        assert metrics["eval/episode_length"] == 3.0
        torch.testing.assert_close(after, before)  # the eval did not update them

    def test_extract_weights(self):
        policy = constant_policy(1.0)
        weights = Evaluator.extract_weights(policy)
        assert weights.device == torch.device("cpu")
        with torch.no_grad():
            policy.module.bias.fill_(5.0)
        assert float(weights["module", "bias"]) == 1.0


class TestBackground:
    def test_trigger_uses_weights_of_trigger_time(self):
        train = constant_policy(1.0)
        evaluator = Evaluator(
            _reach(), constant_policy(0.5), num_trajectories=2, max_steps=20, busy_policy="queue"
        )
        try:
            assert evaluator.trigger_eval(train, step=1)
            with torch.no_grad():
                train.module.bias.fill_(2.0)  # training goes on after the trigger
            assert evaluator.trigger_eval(train, step=2)
            first, second = evaluator.wait(timeout=60), evaluator.wait(timeout=60)
        finally:
            evaluator.shutdown()
        assert (first["eval/step"], second["eval/step"]) == (1, 2)
        assert first["eval/reward"] == pytest.approx(_hand_rollout(1.0)[0])
        assert first["eval/episode_length"] == 3.0
        assert second["eval/reward"] == pytest.approx(_hand_rollout(2.0)[0])
        assert second["eval/episode_length"] == 2.0

    def test_pending_poll_wait(self):
        evaluator = Evaluator(_reach(), constant_policy(1.0), num_trajectories=2, max_steps=20)
        try:
            assert not evaluator.pending
            assert evaluator.poll() is None
            assert (
                evaluator.wait() is None
            )  # nothing pending: returns (the file's timeout catches a hang)
            assert evaluator.trigger_eval(step=3)
            assert evaluator.pending
            result = evaluator.poll(timeout=60)
            assert result["eval/step"] == 3
            assert result["eval/reward"] == pytest.approx(3.0)
            assert not evaluator.pending
            assert evaluator.poll() is None
        finally:
            evaluator.shutdown()

    def test_busy_policies(self):
        never_ends = dict(num_trajectories=1, max_steps=None, frames_per_batch=10)
        skip = Evaluator(ReachEnv(goal=math.inf), constant_policy(1.0), **never_ends)
        error = Evaluator(
            ReachEnv(goal=math.inf), constant_policy(1.0), busy_policy="error", **never_ends
        )
        try:
            assert skip.trigger_eval(step=0)
            assert not skip.trigger_eval(step=1)
            assert error.trigger_eval(step=0)
            with pytest.raises(RuntimeError, match="Evaluation already pending"):
                error.trigger_eval(step=1)
        finally:
            skip.shutdown()
            error.shutdown()

    def test_shutdown_stops_and_joins(self):
        env = _SignalReach(goal=math.inf)  # an episode that never ends
        evaluator = Evaluator(env, constant_policy(1.0), num_trajectories=1, frames_per_batch=10)
        evaluator.trigger_eval(step=0)
        assert env.stepped.wait(60)  # the round runs
        threads = _evaluator_threads()
        assert len(threads) == 1
        evaluator.shutdown(timeout=30)
        assert not threads[0].is_alive()  # joined, not abandoned after the timeout
        assert _evaluator_threads() == []
        assert not evaluator.pending
        assert env.is_closed
        with pytest.raises(RuntimeError, match="shut down"):
            evaluator.trigger_eval()
        evaluator.shutdown()  # idempotent

    def test_shutdown_stops_a_blocking_evaluate(self):
        env = _SignalReach(goal=math.inf)
        evaluator = Evaluator(env, constant_policy(1.0), num_trajectories=1, frames_per_batch=10)
        errors = []

        def run():
            try:
                evaluator.evaluate()
            except RuntimeError as err:
                errors.append(err)

        thread = threading.Thread(target=run)
        thread.start()
        assert env.stepped.wait(60)  # evaluate() is collecting
        evaluator.shutdown(timeout=30)
        thread.join(10)
        assert not thread.is_alive()
        assert len(errors) == 1 and "shut down" in str(errors[0])
        assert env.is_closed
        with pytest.raises(RuntimeError, match="the Evaluator was shut down"):
            evaluator.evaluate()

    def test_failure_reaches_caller(self):
        evaluator = Evaluator(_FailingReach(), constant_policy(1.0), num_trajectories=1)
        try:
            evaluator.trigger_eval(step=0)
            with pytest.raises(RuntimeError, match="background evaluation failed") as info:
                evaluator.wait(timeout=60)
            assert "the simulator exploded" in str(info.value.__cause__)
            assert not evaluator.pending
        finally:
            evaluator.shutdown()

    def test_lazy_build_in_worker_thread(self):
        threads = []

        def env_factory():
            threads.append(threading.current_thread().name)
            return _reach()

        def policy_factory(env):
            threads.append(threading.current_thread().name)
            return constant_policy(1.0)

        evaluator = Evaluator(env_factory, policy_factory=policy_factory, max_steps=10)
        try:
            assert threads == []
            evaluator.trigger_eval(step=0)
            assert evaluator.wait(timeout=60)["eval/num_episodes"] == 10
        finally:
            evaluator.shutdown()
        assert threads == ["rl-evaluator", "rl-evaluator"]

    def test_base_exception_ends_round_and_is_reported(self):
        _AbortOnceReach.aborted = False
        evaluator = Evaluator(
            _AbortOnceReach(), constant_policy(1.0), num_trajectories=1, busy_policy="queue"
        )
        try:
            assert evaluator.trigger_eval(step=0)
            assert evaluator.trigger_eval(step=1)  # queued behind the aborted one
            with pytest.raises(RuntimeError, match="background evaluation failed") as info:
                evaluator.wait(timeout=60)
            assert isinstance(info.value.__cause__, _Abort)
            # the thread ended on it: the queued request reports that it did not run
            with pytest.raises(RuntimeError, match="background evaluation failed") as info:
                evaluator.wait(timeout=60)
            assert "not run" in str(info.value.__cause__)
            assert not evaluator.pending
            assert evaluator.wait() is None  # nothing pending: no hang
            # a new request starts a new thread, and the env works again
            assert evaluator.trigger_eval(step=2)
            result = evaluator.wait(timeout=60)
            assert (result["eval/step"], result["eval/reward"]) == (2, pytest.approx(3.0))
        finally:
            evaluator.shutdown()

    def test_steps_unique_across_threads(self):
        evaluator = Evaluator(
            _reach(), constant_policy(1.0), num_trajectories=1, max_steps=5, busy_policy="queue"
        )
        steps, errors = [], []
        interval = sys.getswitchinterval()

        def blocking():
            try:
                for _ in range(5):
                    steps.append(evaluator.evaluate()["eval/step"])
            except Exception as err:  # reported below
                errors.append(err)

        sys.setswitchinterval(1e-6)  # interleave the threads as much as possible
        try:
            threads = [threading.Thread(target=blocking) for _ in range(3)]
            for thread in threads:
                thread.start()
            for _ in range(5):
                assert evaluator.trigger_eval()
            for thread in threads:
                thread.join(60)
            for _ in range(5):
                steps.append(evaluator.wait(timeout=60)["eval/step"])
        finally:
            sys.setswitchinterval(interval)
            evaluator.shutdown()
        assert errors == []
        assert sorted(steps) == list(range(20))


class TestLifecycle:
    def test_dropped_evaluator_is_collected_thread_backend(self):
        env = ReachEnv()
        evaluator = Evaluator(env, constant_policy(1.0), num_trajectories=1, max_steps=10)
        assert evaluator.trigger_eval(step=0)
        assert evaluator.wait(timeout=60)["eval/step"] == 0
        threads = _evaluator_threads()
        assert len(threads) == 1  # idle, waiting for the next request
        ref = weakref.ref(evaluator)
        del evaluator  # no shutdown()
        gc.collect()
        assert ref() is None
        threads[0].join(30)
        assert not threads[0].is_alive()
        assert env.is_closed

    def test_dropped_evaluator_is_collected_process_backend(self):
        before = set(children_of(os.getpid()))
        evaluator = Evaluator(
            _reach,
            policy_factory=lambda: constant_policy(1.0),
            num_trajectories=1,
            max_steps=10,
            backend="process",
        )
        assert evaluator.trigger_eval(step=0)
        assert evaluator.wait(timeout=60)["eval/reward"] == pytest.approx(3.0)
        assert _new_children(before)  # the worker
        threads = _evaluator_threads()
        ref = weakref.ref(evaluator)
        del evaluator
        gc.collect()
        assert ref() is None
        threads[0].join(30)
        assert not threads[0].is_alive()
        assert _wait_no_children(before) == []

    def test_shutdown_timeout_leaves_closing_to_the_thread(self):
        release = threading.Event()

        class BlockingReach(_SignalReach):
            def _step(self, tensordict):
                out = super()._step(tensordict)
                release.wait(60)  # a step that outlasts shutdown's timeout
                return out

        env = BlockingReach(goal=math.inf)
        evaluator = Evaluator(env, constant_policy(1.0), num_trajectories=1, frames_per_batch=2)
        assert evaluator.trigger_eval(step=0)
        assert env.stepped.wait(60)
        threads = _evaluator_threads()
        evaluator.shutdown(timeout=0.1)  # returns while the step still blocks
        assert threads[0].is_alive() and not env.is_closed
        release.set()
        threads[0].join(30)
        assert not threads[0].is_alive()
        assert env.is_closed  # closed by the thread on its way out


class TestFps:
    def test_fps_counts_the_rollout_not_the_build(self):
        built = {}

        def env_factory():
            time.sleep(0.5)  # a slow build (a simulator, a worker)
            built["env"] = _SignalReach(goal=3.0)
            built["at"] = time.perf_counter()
            return built["env"]

        evaluator = Evaluator(
            env_factory,
            policy_factory=lambda env: constant_policy(1.0),
            num_trajectories=4,
            max_steps=10,
        )
        try:
            metrics = evaluator.evaluate()
            returned = time.perf_counter()
        finally:
            evaluator.shutdown()
        frames = metrics["eval/num_episodes"] * metrics["eval/episode_length"]
        assert frames == 12
        rollout_time = frames / metrics["eval/fps"]
        env = built["env"]
        # the timer encloses every env step and starts after the build returned
        assert rollout_time >= env.last_end - env.first_start
        assert rollout_time <= returned - built["at"]

    def test_fps_process_backend_excludes_worker_start(self):
        before = set(children_of(os.getpid()))
        evaluator = Evaluator(
            _slow_counted_reach,
            policy_factory=lambda: constant_policy(1.0),
            num_trajectories=2,
            backend="process",
        )
        try:
            start = time.perf_counter()
            metrics = evaluator.evaluate()
            took = time.perf_counter() - start
        finally:
            evaluator.shutdown()
        rollout_time = metrics["eval/num_episodes"] * metrics["eval/episode_length"]
        rollout_time /= metrics["eval/fps"]
        # the worker's start (and its 0.5 s env build) are outside the timed rollout
        assert rollout_time <= took - 0.5
        assert _wait_no_children(before) == []


class TestState:
    def test_state_dict_round_trip(self):
        evaluator = Evaluator(_reach(), constant_policy(1.0), num_trajectories=1, max_steps=10)
        restored = Evaluator(_reach(), constant_policy(1.0), num_trajectories=1, max_steps=10)
        try:
            evaluator.evaluate(), evaluator.evaluate()
            state = evaluator.state_dict()
            assert state == {"step_counter": 2}
            restored.load_state_dict(state)
            assert restored.evaluate()["eval/step"] == 2
            restored.trigger_eval()  # step 3, pending then unread
            with pytest.raises(RuntimeError, match="pending, queued, or unread"):
                restored.state_dict()
            with pytest.raises(RuntimeError, match="pending, queued, or unread"):
                restored.load_state_dict(state)
            assert restored.wait(timeout=60)["eval/step"] == 3
            assert restored.state_dict() == {"step_counter": 4}
            with pytest.raises(TypeError, match="step_counter must be an int, got 'x'"):
                restored.load_state_dict({"step_counter": "x"})
        finally:
            evaluator.shutdown()
            restored.shutdown()


class TestProcessBackend:
    def test_weights_reach_worker_and_no_process_left(self):
        before = set(children_of(os.getpid()))
        evaluator = Evaluator(
            _reach,
            policy_factory=lambda: constant_policy(0.5),
            num_trajectories=2,
            max_steps=20,
            backend="process",
        )
        try:
            first = evaluator.evaluate(step=0)
            second = evaluator.evaluate(constant_policy(2.0), step=1)
            assert evaluator.trigger_eval(constant_policy(1.0), step=2)
            third = evaluator.wait(timeout=60)
            assert _new_children(before)  # the worker
        finally:
            evaluator.shutdown()
        assert first["eval/reward"] == pytest.approx(_hand_rollout(0.5)[0])
        assert second["eval/reward"] == pytest.approx(_hand_rollout(2.0)[0])
        assert third["eval/reward"] == pytest.approx(_hand_rollout(1.0)[0])
        assert third["eval/step"] == 2
        assert _wait_no_children(before) == []

    @pytest.mark.parametrize("backend", ["thread", "process"])
    def test_max_steps_ignored_when_env_counts_steps(self, backend):
        # the env's own StepCounter(3) applies, in both back-ends; max_steps=10 is ignored
        kwargs = (
            dict(policy_factory=lambda: constant_policy(1.0))
            if backend == "process"
            else dict(policy=constant_policy(1.0))
        )
        env = _slow_counted_reach if backend == "process" else _slow_counted_reach()
        evaluator = Evaluator(env, num_trajectories=2, max_steps=10, backend=backend, **kwargs)
        try:
            metrics = evaluator.evaluate()
        finally:
            evaluator.shutdown()
        assert metrics["eval/episode_length"] == 3.0
        assert metrics["eval/reward"] == pytest.approx(3.0)

    def test_process_max_steps_truncates(self):
        evaluator = Evaluator(
            _reach,
            policy_factory=lambda: constant_policy(0.1),
            num_trajectories=2,
            max_steps=4,
            backend="process",
        )
        try:
            metrics = evaluator.evaluate()
        finally:
            evaluator.shutdown()
        assert metrics["eval/episode_length"] == 4.0
        assert metrics["eval/reward"] == pytest.approx(0.4)


class TestArguments:
    def test_errors(self):
        policy = constant_policy(1.0)
        with pytest.raises(ValueError, match="Unknown backend 'gpu'. Choose 'thread' or"):
            Evaluator(_reach, policy, backend="gpu")
        with pytest.raises(NotImplementedError, match="supported back-ends: 'thread' and"):
            Evaluator(_reach, policy, backend="ray")
        with pytest.raises(ValueError, match="Unknown busy_policy 'replace'"):
            Evaluator(_reach, policy, busy_policy="replace")
        with pytest.raises(ValueError, match="policy.*must be provided"):
            Evaluator(_reach)
        with pytest.raises(ValueError, match="not both"):
            Evaluator(_reach, policy, policy_factory=lambda env: policy)
        with pytest.raises(ValueError, match="`env` must be a callable returning an env, got"):
            Evaluator(_reach(), policy_factory=lambda: policy, backend="process")
        with pytest.raises(ValueError, match="pass `policy_factory`"):
            Evaluator(_reach, policy, backend="process")
        with pytest.raises(ValueError, match="num_trajectories must be a positive int, got 0"):
            Evaluator(_reach, policy, num_trajectories=0)
        with pytest.raises(ValueError, match="may not set 'trajs_per_batch'"):
            Evaluator(_reach, policy, collector_kwargs={"trajs_per_batch": 2})
        with pytest.raises(ValueError, match="traj_format must be 'padded' or 'cat', got 'x'"):
            Evaluator(_reach, policy, collector_kwargs={"traj_format": "x"})
        with pytest.raises(TypeError, match="collector_cls must be Collector or a subclass"):
            Evaluator(_reach, policy, collector_cls="MultiSyncCollector")
        evaluator = Evaluator(_reach, policy, max_steps=5)
        try:
            with pytest.raises(TypeError, match="weights must be an nn.Module or a TensorDict"):
                evaluator.evaluate(weights=[1.0])
        finally:
            evaluator.shutdown()


class TestEpisodeMetrics:
    def _trajs(self):
        # two episodes: rewards [1, 2] and [3, 4, 5]
        rewards = torch.tensor([[1.0, 2.0, 0.0], [3.0, 4.0, 5.0]]).unsqueeze(-1)
        mask = torch.tensor([[True, True, False], [True, True, True]])
        return TensorDict(
            {("next", "reward"): rewards, ("collector", "mask"): mask}, batch_size=[2, 3]
        )

    def test_padded(self):
        metrics = episode_metrics(self._trajs())
        assert metrics["reward"] == pytest.approx(7.5)
        assert metrics["reward_std"] == pytest.approx(torch.tensor([3.0, 12.0]).std().item())
        assert (metrics["num_episodes"], metrics["episode_length"]) == (2, 2.5)
        assert metrics["frame_count"] == 5

    def test_cat_and_single(self):
        flat = TensorDict(
            {
                ("next", "reward"): torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]).unsqueeze(-1),
                ("collector", "traj_ids"): torch.tensor([4, 4, 7, 7, 7]),
            },
            batch_size=[5],
        )
        metrics = episode_metrics(flat)
        assert metrics["reward"] == pytest.approx(7.5)
        assert metrics["num_episodes"] == 2
        single = episode_metrics(flat.exclude(("collector", "traj_ids")))
        assert (single["reward"], single["num_episodes"], single["reward_std"]) == (15.0, 1, 0.0)
