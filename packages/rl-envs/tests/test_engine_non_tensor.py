"""Non-tensor entries (strings) in a rollout: recorded per step, carried from "next" into
the next root like any observation, and set back by a reset."""

from __future__ import annotations

import torch
from tensordict import NonTensorData, TensorDict

from rl.core import Composite, NonTensor, Unbounded
from rl.envs import EnvBase, PendulumEnv, SerialEnv, StepCounter, Transform


class Tag(Transform):
    """Writes the step count as a string: ``"step k"``; ``"reset"`` at a reset."""

    def _call(self, next_tensordict):
        count = next_tensordict.get("step_count")
        next_tensordict["tag"] = f"step {int(count.reshape(-1)[0])}"
        return next_tensordict

    def _reset(self, tensordict, tensordict_reset):
        return tensordict_reset.set("tag", NonTensorData("reset"))

    def transform_observation_spec(self, observation_spec):
        observation_spec["tag"] = NonTensor(shape=())
        return observation_spec


def make_env(max_steps=None):
    return PendulumEnv().append_transform(StepCounter(max_steps)).append_transform(Tag())


def test_rollout_records_and_carries_non_tensor_entries():
    env = make_env()
    out = env.rollout(4)
    assert out["tag"].tolist() == ["reset", "step 1", "step 2", "step 3"]
    assert out["next", "tag"].tolist() == ["step 1", "step 2", "step 3", "step 4"]
    assert out.batch_size == torch.Size([4])
    # the tensors are as before
    assert out["next", "step_count"].squeeze(-1).tolist() == [1, 2, 3, 4]


def test_a_reset_inside_the_rollout_sets_the_root_entry():
    env = make_env(max_steps=2)
    out = env.rollout(5, break_when_any_done=False)
    assert out["tag"].tolist() == ["reset", "step 1", "reset", "step 1", "reset"]
    assert out["next", "tag"].tolist() == ["step 1", "step 2", "step 1", "step 2", "step 1"]


def test_stops_early_with_as_many_entries_as_steps():
    env = make_env(max_steps=3)
    out = env.rollout(10)  # stops at the first done
    assert out.batch_size == torch.Size([3])
    assert out["next", "tag"].tolist() == ["step 1", "step 2", "step 3"]


def test_env_without_non_tensor_entries_is_unchanged():
    out = PendulumEnv().append_transform(StepCounter()).rollout(3)
    assert "tag" not in out.keys(True)
    assert out["next", "step_count"].squeeze(-1).tolist() == [1, 2, 3]


def test_batched_env_stacks_them_per_sub_env():
    env = SerialEnv(2, make_env)
    out = env.rollout(3)
    assert out.batch_size == torch.Size([2, 3])
    assert out["next", "tag"].tolist() == [["step 1", "step 2", "step 3"]] * 2
    assert out["tag"].tolist() == [["reset", "step 1", "step 2"]] * 2
    env.close()


class Labelled(EnvBase):
    """Counts steps; writes the count as a string ``"label"`` (declared by its spec)."""

    def __init__(self):
        super().__init__()
        self.observation_spec = Composite(
            observation=Unbounded(shape=(1,)), label=NonTensor(shape=())
        )
        self.action_spec = Unbounded(shape=(1,))
        self.reward_spec = Unbounded(shape=(1,))

    def _reset(self, tensordict):
        self.t = 0
        out = TensorDict(observation=torch.zeros(1), done=torch.zeros(1, dtype=torch.bool))
        return out.set_non_tensor("label", "start")

    def _step(self, tensordict):
        self.t += 1
        out = TensorDict(
            observation=torch.full((1,), float(self.t)),
            reward=torch.zeros(1),
            done=torch.zeros(1, dtype=torch.bool),
        )
        return out.set_non_tensor("label", f"step {self.t}")

    def _set_seed(self, seed):
        pass


def test_check_env_specs_checks_declared_non_tensor_entries():
    from rl.envs import check_env_specs

    env = Labelled()
    assert env.rollout(3)["next", "label"].tolist() == ["step 1", "step 2", "step 3"]
    check_env_specs(env)  # a declared string entry that changes along the rollout is found

    class Undeclared(Tag):
        def transform_observation_spec(self, observation_spec):
            return observation_spec  # writes "tag" without declaring it: ignored, as before

    check_env_specs(PendulumEnv().append_transform(StepCounter()).append_transform(Undeclared()))
