"""RayTransform and RayDataLoadingPrimer on the local Ray instance that conftest.py's shared_ray shares."""

import sys

import pytest
import torch
from tensordict import TensorDict

from rl.envs import PendulumEnv, RayTransform, RewardScaling, TransformedEnv
from rl.envs.llm import ChatEnv, DataLoadingPrimer, RayDataLoadingPrimer

ray = pytest.importorskip("ray")

# the subclass below is pickled by value (this file is not importable in Ray workers)
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

# a bound that catches a hang, not a speed check: a Ray worker's first start imports torch
pytestmark = pytest.mark.timeout(300)

NAME = "rl_test_ray_reward_scaling"


class RayRewardScaling(RayTransform):
    """A RewardScaling that runs in a Ray actor."""

    def _create_actor(self, **kwargs):
        self.created = True
        return self.remote_transform(RewardScaling, **kwargs)


def _policy(td):
    return td.set("action", torch.full((1,), 0.5))


@pytest.fixture(scope="module")
def served(shared_ray):
    transform = RayRewardScaling(loc=1.0, scale=2.0, num_cpus=0, actor_name=NAME)
    yield transform
    ray.kill(transform.actor, no_restart=True)


class TestRayTransform:
    def test_outputs_equal_the_local_transform(self, served):
        local = TransformedEnv(PendulumEnv(), RewardScaling(loc=1.0, scale=2.0))
        remote = TransformedEnv(PendulumEnv(), served)
        assert remote.full_reward_spec == local.full_reward_spec
        assert remote.full_observation_spec == local.full_observation_spec
        local.set_seed(3)
        remote.set_seed(3)
        expected = local.rollout(4, _policy)
        got = remote.rollout(4, _policy)
        assert got.batch_size == expected.batch_size == torch.Size([4])
        torch.testing.assert_close(got.get(("next", "reward")), expected.get(("next", "reward")))
        torch.testing.assert_close(
            got.get(("next", "observation")), expected.get(("next", "observation"))
        )
        assert served.in_keys == ["reward"] and served.has_step

    def test_named_actor_is_shared_and_errors_name_it(self, served):
        again = RayRewardScaling(loc=5.0, scale=5.0, actor_name=NAME)
        assert not getattr(again, "created", False)  # the running actor was reused
        assert repr(again) == repr(served)
        data = TensorDict(reward=torch.tensor([[3.0]]))
        torch.testing.assert_close(again.forward(data)["reward"], torch.tensor([[7.0]]))
        with pytest.raises(
            RuntimeError,
            match=rf"RayRewardScaling's actor '{NAME}': RewardScaling.forward failed: .*reward",
        ):
            again.forward(TensorDict(other=torch.zeros(1)))
        clone = served.clone()
        assert clone.actor == served.actor and clone.parent is None


ROWS = [{"query": ["q0", "q1"]}, {"query": ["q2", "q3"]}, {"query": ["q4", "q5"]}]


class TestRayDataLoadingPrimer:
    def test_envs_share_one_queue_and_match_the_local_primer(self, shared_ray):
        local = ChatEnv(batch_size=(2,)).append_transform(DataLoadingPrimer(ROWS, batch_size=(2,)))
        expected = [list(local.reset()["query"]) for _ in range(3)]
        assert expected == [["q0", "q1"], ["q2", "q3"], ["q4", "q5"]]

        first = DataLoadingPrimer(ROWS, batch_size=(2,), use_ray_service=True, num_cpus=0)
        assert isinstance(first, RayDataLoadingPrimer)
        try:
            with pytest.raises(ValueError, match="exactly one of dataloader"):
                RayDataLoadingPrimer(num_cpus=0)
            # clients of the same actor, one per env
            clients = [first, first.clone(), first.clone()]
            envs = [ChatEnv(batch_size=(2,)).append_transform(t) for t in clients]
            got = [list(env.reset()["query"]) for env in envs]
            assert got == expected  # one queue: each env drew the next rows
        finally:
            ray.kill(first.actor, no_restart=True)
