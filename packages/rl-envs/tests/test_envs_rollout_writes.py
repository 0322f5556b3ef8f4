"""How ``rollout`` writes its steps: per-step views filled by one ``_foreach_copy_`` (in
chunks of steps), ``buf[t] = value`` once a value needs grad; the cached spec keys."""

from __future__ import annotations

import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from rl.core import Unbounded
from rl.envs import PendulumEnv, TransformedEnv, step_mdp
from rl.envs.engine._buffers import StepViews as _Slots
from rl.envs.transforms import StepCounter


def _manual(env, policy, steps):
    td = env.reset()
    out = []
    for _ in range(steps):
        policy(td)
        out.append(env.step(td).clone())
        td = step_mdp(td, exclude_action=False)
    return torch.stack(out, -1)


class TestRolloutWrites:
    def test_long_rollout_matches_a_manual_loop(self):
        # 70 steps: three chunks of per-step views, episodes restarting at 25 steps
        def make():
            return TransformedEnv(PendulumEnv(batch_size=[2]), StepCounter(max_steps=25))

        policy = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["action"])
        env = make()
        env.set_seed(0)
        with torch.no_grad():
            rollout = env.rollout(70, policy, break_when_any_done=False)
        assert rollout.batch_size == (2, 70)
        assert rollout["next", "step_count"][0, :, 0].tolist() == [*range(1, 26)] * 2 + [
            *range(1, 21)
        ]
        # the steps that follow no reset equal a manual loop of step + step_mdp
        env = make()
        env.set_seed(0)
        with torch.no_grad():
            manual = _manual(env, policy, 25)
        torch.testing.assert_close(rollout[:, :25].exclude("next"), manual.exclude("next"))
        torch.testing.assert_close(rollout["next"][:, :25], manual["next"])

    def test_gradients_flow_through_the_rollout(self):
        env = PendulumEnv()
        policy = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["action"])
        rollout = env.rollout(40, policy, break_when_any_done=False)
        assert rollout["action"].requires_grad
        rollout["action"].sum().backward()
        assert policy.module.weight.grad is not None
        assert policy.module.weight.grad.abs().sum() > 0

    def test_slots_are_views_of_each_step(self):
        bufs = [torch.zeros(2, 70, 3), torch.zeros(2, 70)]
        slots = _Slots(bufs, 1, 70)
        for t in (0, 31, 32, 69, 5):
            torch._foreach_copy_(slots[t], [torch.full((2, 3), float(t)), torch.full((2,), 1.0)])
        assert bufs[0][0, :, 0].nonzero().flatten().tolist() == [5, 31, 32, 69]
        assert bufs[1][1].sum() == 5


class TestCachedKeys:
    def test_keys_follow_spec_changes(self):
        env = PendulumEnv()
        assert env.observation_keys == ["observation"]
        env.observation_spec = env.observation_spec.clone().set("extra", Unbounded(shape=(2,)))
        assert env.observation_keys == ["observation", "extra"]
        env.set_spec_lock_(False)
        env.full_observation_spec["more"] = Unbounded(shape=(1,))
        assert env.observation_keys == ["observation", "extra", "more"]
        env.set_spec_lock_(True)
        assert env.observation_keys == ["observation", "extra", "more"]
        env.full_done_spec = env.full_done_spec.clone().set(
            "lost", env.full_done_spec["done"].clone()
        )
        assert env.done_keys == ["done", "terminated", "truncated", "lost"]

    def test_returned_lists_are_copies(self):
        env = PendulumEnv()
        env.done_keys.append("oops")
        assert "oops" not in env.done_keys

    def test_transformed_env_keys_follow_its_transforms(self):
        env = TransformedEnv(PendulumEnv())
        assert "step_count" not in env.observation_keys
        env.append_transform(StepCounter())
        assert "step_count" in env.observation_keys
        td = env.rand_step(env.reset())
        assert isinstance(td, TensorDict) and "step_count" in td["next"].keys()
