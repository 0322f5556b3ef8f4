"""Ray-backed services of rl-collectors on the local Ray instance that conftest.py's
shared_ray shares: RayWeightUpdater, RayEvalWorker."""

import sys

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from rl.collectors import Collector, RayWeightUpdater
from rl.collectors.distributed import RayEvalWorker
from rl.envs import PendulumEnv, step_mdp

ray = pytest.importorskip("ray")

# what runs in Ray workers comes by value (this file is not importable there)
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

# a bound that catches a hang, not a speed check: a Ray worker's first start imports torch
pytestmark = pytest.mark.timeout(300)

WAIT_S = 240  # every ray.get here is bounded


def _policy() -> TensorDictModule:
    return TensorDictModule(torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])


def _remote_weights(actor) -> dict:
    return ray.get(actor.state_dict.remote(), timeout=WAIT_S)["policy_state_dict"]


@pytest.fixture(scope="module")
def remote_collector(shared_ray):
    """One remote collector (a Collector made a Ray actor) for the module's tests."""
    actor = ray.remote(num_cpus=0)(Collector).remote(
        PendulumEnv, _policy(), frames_per_batch=4, total_frames=8
    )
    yield actor
    ray.kill(actor, no_restart=True)


class TestRayWeightUpdater:
    def test_pushed_weights_reach_the_remote_policy(self, remote_collector):
        policy = _policy()
        weights = TensorDict.from_module(policy)
        updater = RayWeightUpdater(weights, [remote_collector], max_interval=1)
        assert updater.all_worker_ids() == [0]
        before = _remote_weights(remote_collector)

        with torch.no_grad():
            policy.module.weight.copy_(torch.tensor([[0.5, -1.0, 2.0]]))
            policy.module.bias.fill_(0.25)
        updater.push_weights()  # max_interval=1: the first push is skipped
        for key, value in _remote_weights(remote_collector).items():
            torch.testing.assert_close(value, before[key])
        updater.push_weights()  # the second one is sent: the policy's weights now
        for key, value in _remote_weights(remote_collector).items():
            torch.testing.assert_close(value, policy.state_dict()[key])

        # weights given to the push replace the policy's
        given = weights.data.clone().apply(torch.zeros_like)
        updater.push_weights(given, worker_ids=0)  # skipped (interval), then:
        updater.push_weights(given, worker_ids=0)
        remote = _remote_weights(remote_collector)
        torch.testing.assert_close(remote["module.weight"], torch.zeros(1, 3))
        torch.testing.assert_close(remote["module.bias"], torch.zeros(1))
        # the remote collector acts with them: a zero linear policy gives zero actions
        batch = ray.get(remote_collector.next.remote(), timeout=WAIT_S)
        torch.testing.assert_close(batch["action"], torch.zeros(4, 1))

    def test_errors_name_the_worker(self, remote_collector):
        updater = RayWeightUpdater(TensorDict.from_module(_policy()), [remote_collector])
        with pytest.raises(ValueError, match="has 1 remote collectors, got worker_id=3"):
            updater.push_weights(worker_ids=3)
        wrong = TensorDict({"module": {"weight": torch.zeros(5, 5), "bias": torch.zeros(1)}})
        with pytest.raises(RuntimeError, match="remote collector 0 .* failed to load the weights"):
            updater.push_weights(wrong)


def _seeded_pendulum():
    env = PendulumEnv()
    env.set_seed(7)
    return env


def _policy_of(env):
    return _policy()


def _local_mean_reward(weights, max_steps):
    """A plain step loop: the mean reward of one rollout of the policy with ``weights``."""
    env, policy = _seeded_pendulum(), _policy()
    weights.to_module(policy)
    td, rewards = env.reset(), []
    with torch.no_grad():
        for _ in range(max_steps):
            td = env.step(policy(td))
            rewards.append(td["next", "reward"])
            td = step_mdp(td)
    return torch.stack(rewards).mean().item()


class TestRayEvalWorker:
    def test_metrics_equal_a_local_evaluation(self, shared_ray):
        worker = RayEvalWorker(
            None, _seeded_pendulum, _policy_of, num_gpus=0, num_cpus=0, name="rl_test_eval"
        )
        try:
            assert worker.poll() is None  # nothing submitted
            weights = TensorDict.from_module(_policy()).data
            with torch.no_grad():
                weights.apply_(lambda w: w.fill_(0.3))
            worker.submit(weights, max_steps=5)
            result = worker.poll(timeout=WAIT_S)
            assert result["frames"] is None  # PendulumEnv renders no frame
            assert result["reward"] == pytest.approx(_local_mean_reward(weights, 5), rel=1e-6)
            # another handle on the named actor; a failed rollout names the worker
            other = RayEvalWorker.from_name("rl_test_eval")
            other.submit(TensorDict(bogus=torch.zeros(2)), max_steps=5)
            with pytest.raises(
                RuntimeError, match="RayEvalWorker 'rl_test_eval': the rollout failed"
            ):
                other.poll(timeout=WAIT_S)
        finally:
            worker.shutdown()
        with pytest.raises(RuntimeError, match="was shut down"):
            worker.submit(None, max_steps=1)
