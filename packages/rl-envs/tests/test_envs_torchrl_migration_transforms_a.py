"""Snippets of TorchRL 0.14's documentation for the parity transforms (part A), run on ``rl``.

Each test is a docstring example of TorchRL with ``torchrl.`` replaced by ``rl.`` (and
``torchrl.data`` specs / buffers by ``rl.core`` / ``rl.data``), asserting the documented
outputs. Where a snippet needs a simulator that is not installed here (ALE, VMAS,
mo-gymnasium) the same calls run on ``Pendulum-v1`` and the comment says so.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rl.envs import (
    CatFrames,
    Compose,
    GymEnv,
    Hash,
    PermuteTransform,
    RemoveEmptySpecs,
    Reward2GoTransform,
    RunningMeanStd,
    SignTransform,
    Stack,
    StepCounter,
    SuccessReward,
    Timer,
    TrajCounter,
    TransformedEnv,
    UnaryTransform,
    UnsqueezeTransform,
    VecNormV2,
    check_env_specs,
)


def test_stack_docstring():
    td = TensorDict({"key1": torch.zeros(3), "key2": torch.ones(3)}, [])
    transform = Stack(in_keys=["key1", "key2"], out_key="out", dim=-2)
    out = transform(td)
    assert list(out.keys()) == ["out"] and out["out"].shape == (2, 3)
    torch.testing.assert_close(td["out"], torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]))

    agent_0 = TensorDict({"obs": torch.rand(4, 5), "reward": torch.zeros(1)})
    agent_1 = TensorDict({"obs": torch.rand(4, 5), "reward": torch.zeros(1)})
    td = TensorDict({"agent_0": agent_0, "agent_1": agent_1})
    transform = Stack(in_keys=["agent_0", "agent_1"], out_key="agents")
    out = transform(td)
    assert list(out.keys()) == ["agents"]
    assert out["agents"].batch_size == (2,)
    assert out["agents", "obs"].shape == (2, 4, 5)
    assert out["agents", "reward"].shape == (2, 1)


def test_sign_transform_docstring():
    base_env = GymEnv("Pendulum-v1")
    env = TransformedEnv(base_env, SignTransform(in_keys=["observation"]))
    r = env.rollout(100)
    obs = r["observation"]
    assert (torch.logical_or(torch.logical_or(obs == -1, obs == 1), obs == 0.0)).all()


def test_success_reward_docstring():
    t = SuccessReward(scale=1.0)
    td = TensorDict({"success": torch.tensor([[True], [False]])}, batch_size=[2])
    assert t(td)["reward"].squeeze(-1).tolist() == [1.0, 0.0]


def test_permute_transform_docstring():
    # TorchRL's example uses GymEnv("ALE/Pong-v5") pixels [210, 160, 3]; same calls on a
    # pixel-like entry made by UnsqueezeTransform (ALE is not installed here)
    base_env = TransformedEnv(
        GymEnv("Pendulum-v1"),
        UnsqueezeTransform(-1, in_keys=["observation"], out_keys=["pixels"]),
    )
    base_env = base_env.append_transform(
        UnaryTransform(
            in_keys=["pixels"], out_keys=["pixels"], fn=lambda x: x.expand(*x.shape[:-1], 2)
        )
    )
    assert base_env.rollout(2)["next", "pixels"].shape == (2, 3, 2)
    env = TransformedEnv(base_env, PermuteTransform((-1, -2), in_keys=["pixels"]))
    r = env.rollout(2)  # channels are moved first
    assert r["next", "pixels"].shape == (2, 2, 3)
    assert r["pixels"].shape == (2, 2, 3)


def test_unary_and_hash_docstring():
    env = GymEnv("Pendulum-v1")
    env = env.append_transform(
        UnaryTransform(
            in_keys=["observation"],
            out_keys=["observation_str"],
            fn=lambda tensor: str(tensor.numpy().tobytes()),
        )
    )
    env = env.append_transform(Hash(in_keys=["observation_str"], out_keys=["observation_hash"]))
    spec = env.observation_spec
    assert type(spec["observation_str"]).__name__ == "NonTensor"
    assert spec["observation_hash"].shape == (32,)
    assert spec["observation_hash"].dtype == torch.uint8
    td = env.reset()
    assert isinstance(td["observation_str"], str)
    assert td["observation_hash"].shape == (32,)


def test_timer_docstring():
    env = GymEnv("Pendulum-v1").append_transform(Timer())
    r = env.rollout(10)
    assert r["time_policy"].shape == (10,)
    assert r["time_step"].shape == (10,)
    assert r["time_policy"][0] == 0
    assert bool((r["next", "time_step"] > 0).all())


def test_traj_counter_docstring():
    env = GymEnv("Pendulum-v1").append_transform(StepCounter(6))
    env = env.append_transform(TrajCounter())
    r = env.rollout(18, break_when_any_done=False)  # 18 // 6 = 3 trajectories
    assert r["next", "traj_count"].squeeze(-1).tolist() == [0] * 6 + [1] * 6 + [2] * 6


def test_running_mean_std_docstring():
    rms = RunningMeanStd(shape=(4,))
    rms.update(torch.randn(32, 4))
    normed = rms.normalize(torch.randn(8, 4))
    assert normed.shape == torch.Size([8, 4])


def test_vecnorm_v2_docstring():
    torch.manual_seed(0)
    env = GymEnv("Pendulum-v1")
    env_trsf = env.append_transform(
        VecNormV2(in_keys=["observation", "reward"], out_keys=["observation_norm", "reward_norm"])
    )
    r = env_trsf.rollout(10)
    assert r["next", "reward"].shape == (10, 1) and r["next", "reward_norm"].shape == (10, 1)
    # the first normalised value is ~0 (the statistics are that single sample)
    assert abs(float(r["next", "reward_norm"][0])) < 1e-2
    # normalised rewards stay within a few units, raw ones are unchanged
    assert bool((r["next", "reward_norm"].abs() < 5).all())


def test_remove_empty_specs_docstring():
    from rl.core import Categorical, Composite, Unbounded
    from rl.envs import EnvBase

    class DummyEnv(EnvBase):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.observation_spec = Composite(
                observation=Unbounded((*self.batch_size, 3)),
                other=Composite(
                    another_other=Composite(shape=self.batch_size),
                    shape=self.batch_size,
                ),
                shape=self.batch_size,
            )
            self.action_spec = Unbounded((*self.batch_size, 3))
            self.done_spec = Categorical(2, (*self.batch_size, 1), dtype=torch.bool)
            self.full_done_spec["truncated"] = self.full_done_spec["terminated"].clone()
            self.reward_spec = Composite(
                reward=Unbounded(*self.batch_size, 1),
                other_reward=Composite(shape=self.batch_size),
                shape=self.batch_size,
            )

        def _reset(self, tensordict):
            return self.observation_spec.rand().update(self.full_done_spec.zero())

        def _step(self, tensordict):
            return (
                TensorDict({}, batch_size=[])
                .update(self.observation_spec.rand())
                .update(self.full_done_spec.zero())
                .update(self.full_reward_spec.rand())
            )

        def _set_seed(self, seed) -> None:
            pass

    base_env = DummyEnv()
    env = TransformedEnv(base_env, RemoveEmptySpecs())
    r = env.rollout(2)
    assert "other" not in r["next"].keys() and "other_reward" not in r["next"].keys()
    assert sorted(env.observation_spec.keys()) == ["observation"]
    check_env_specs(env)


def test_reward2go_replay_buffer_docstring():
    data = pytest.importorskip("rl.data")
    torch.manual_seed(0)
    r2g = Reward2GoTransform(gamma=0.99, out_keys=["reward_to_go"])
    rb = data.ReplayBuffer(storage=data.LazyTensorStorage(100), transform=r2g)
    batch, timesteps = 4, 5
    done = torch.zeros(batch, timesteps, 1, dtype=torch.bool)
    for i in range(batch):
        while not done[i].any():
            done[i] = done[i].bernoulli_(0.1)
    reward = torch.ones(batch, timesteps, 1)
    td = TensorDict({"next": {"done": done, "reward": reward}}, [batch, timesteps])
    rb.extend(td)
    sample = rb.sample(1)
    assert sample["next", "reward"].tolist() == [[[1.0]] * 5]
    # with unit rewards the reward-to-go counts the discounted steps to the episode end
    d = sample["next", "done"][0, :, 0].tolist()
    expected, acc = [], 0.0
    for t in range(4, -1, -1):
        acc = 1.0 + (0.0 if d[t] else 0.99 * acc)
        expected.insert(0, acc)
    torch.testing.assert_close(sample["reward_to_go"][0, :, 0], torch.tensor(expected))


def test_catframes_replay_buffer_docstring():
    # TorchRL's example stacks CartPole pixels; the same pipeline on Pendulum observations
    # (UnsqueezeTransform + CatFrames online, CatFrames on root and next keys offline)
    data = pytest.importorskip("rl.data")
    env = TransformedEnv(
        GymEnv("Pendulum-v1"),
        Compose(
            UnsqueezeTransform(-2, in_keys=["observation"], out_keys=["obs_trsf"]),
            CatFrames(dim=-2, N=4, in_keys=["obs_trsf"]),
        ),
    )
    env.set_seed(0)
    collected = env.rollout(10)
    t = Compose(
        UnsqueezeTransform(
            -2,
            in_keys=["observation", ("next", "observation")],
            out_keys=["obs_trsf", ("next", "obs_trsf")],
        ),
        CatFrames(dim=-2, N=4, in_keys=["obs_trsf", ("next", "obs_trsf")]),
    )
    rb = data.TensorDictReplayBuffer(storage=data.LazyTensorStorage(1000), transform=t)
    data_exclude = collected.exclude("obs_trsf", ("next", "obs_trsf"))
    rb.add(data_exclude)
    s = rb.sample(1)  # the buffer has only one element
    torch.testing.assert_close(s.squeeze(0)["obs_trsf"], collected["obs_trsf"])
    torch.testing.assert_close(s.squeeze(0)["next", "obs_trsf"], collected["next", "obs_trsf"])
