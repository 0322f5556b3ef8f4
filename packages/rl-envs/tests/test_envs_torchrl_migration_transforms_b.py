"""Snippets of TorchRL 0.14's docstrings for the part-b transforms, with ``torchrl.`` changed
to ``rl.`` (and nothing else, unless a comment says why).

Outputs that TorchRL prints are asserted where they do not depend on the simulator's
seeding; where they do (gym envs seeded by ``set_seed``, random sampling), the property the
docstring states is asserted instead.
"""

from __future__ import annotations

import math

import torch
from tensordict import TensorDict


def test_discrete_action_projection_docstring():
    from rl.envs.transforms import DiscreteActionProjection

    torch.manual_seed(0)
    N = 3
    M = 2
    action = torch.zeros(N, dtype=torch.long)
    action[-1] = 1
    td = TensorDict({"action": action}, [])
    transform = DiscreteActionProjection(num_actions_effective=M, max_actions=N)
    out = transform.inv(td)
    # the docstring prints ``tensor([1])`` for td["action"]; TorchRL 0.14.1 itself leaves
    # ``td`` as it is and returns the projected one-hot action (choice 2 is resampled)
    assert td.get("action").tolist() == [0, 0, 1]
    assert out.get("action").tolist() == [1, 0]


def test_action_scaling_docstring():
    from rl.data import LazyTensorStorage, TensorDictReplayBuffer
    from rl.envs.transforms import ActionScaling

    t = ActionScaling.from_stats(mean=torch.tensor([1.0, 2.0]), std=torch.tensor([2.0, 4.0]))
    td = TensorDict({"action": torch.tensor([[3.0, 6.0]])}, batch_size=[1])
    assert t(td)["action"].tolist() == [[1.0, 1.0]]
    t = ActionScaling.from_stats(
        mean=torch.tensor([1.0, 2.0]),
        std=torch.tensor([2.0, 4.0]),
        in_keys_inv=[],
    )
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), transform=t, batch_size=2)
    raw = TensorDict({"action": torch.tensor([[3.0, 6.0]]).expand(10, 2)}, batch_size=[10])
    rb.extend(raw)  # stored as-is
    assert rb.sample()["action"].tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert t.denormalize(torch.tensor([[1.0, 1.0]])).tolist() == [[3.0, 6.0]]


def test_terminate_transform_docstring():
    from rl.envs import GymEnv, TransformedEnv
    from rl.envs.transforms import TerminateTransform

    env = TransformedEnv(
        GymEnv("Pendulum-v1"),
        TerminateTransform(lambda td: td["observation"][..., 0] > 0.99),
    )
    rollout = env.rollout(200, break_when_any_done=True)
    stopped = rollout["next", "observation"][:, 0] > 0.99
    # the rollout ends at the first step where the predicate holds (or after 200 steps)
    assert not stopped[:-1].any()
    assert bool(stopped[-1]) == bool(rollout["next", "terminated"][-1])
    assert bool(stopped[-1]) or rollout.shape[0] == 200


def test_random_truncation_docstring():
    from rl.envs import Compose, GymEnv, StepCounter, TransformedEnv
    from rl.envs.transforms import RandomTruncationTransform

    base_env = GymEnv("Pendulum-v1")
    env = TransformedEnv(
        base_env,
        Compose(
            StepCounter(),
            RandomTruncationTransform(prob=0.1, min_horizon=50, max_horizon=200),
        ),
    )
    rollout = env.rollout(300)
    # Episode length will be at most 200 steps
    assert rollout.shape[0] <= 200
    assert bool(rollout["next", "truncated"][-1]) and bool(rollout["next", "done"][-1])


def test_conditional_policy_switch_docstring():
    from tensordict.nn import TensorDictModule as Mod

    from rl.envs import Compose, ConditionalPolicySwitch, GymEnv, StepCounter

    base_env = GymEnv("CartPole-v1", categorical_action_encoding=True)
    policy = Mod(lambda: torch.ones((), dtype=torch.int64), in_keys=[], out_keys=["action"])
    policy_switch = Mod(lambda: torch.zeros((), dtype=torch.int64), in_keys=[], out_keys=["action"])
    cond = lambda td: td.get("observation")[..., 0] >= 0  # noqa: E731
    env = base_env.append_transform(
        Compose(
            StepCounter(step_count_key="step_count_total"),
            ConditionalPolicySwitch(condition=cond, policy=policy_switch),
            StepCounter(step_count_key="step_count_main"),
        )
    )
    env.set_seed(0)
    torch.manual_seed(0)
    r = env.rollout(100, policy=policy)
    n = r.shape[0]
    assert (r["action"] == 1).all()
    # the main policy acts once per outer step; the switch policy acts after each step
    # that ends with observation[0] >= 0 (TorchRL prints 1, 3, 5, ... then 26, 27)
    assert r["step_count_main"].squeeze(-1).tolist() == list(range(n))
    total = r["step_count_total"].squeeze(-1)
    jumps = total[1:] - total[:-1]
    assert set(jumps.tolist()) <= {1, 2}
    assert jumps.eq(2).any()  # the switch policy acted
    # at reset, the switch policy acts if observation[0] >= 0 (CartPole resets near 0)
    assert total[0].item() in (0, 1)


def test_burn_in_docstring():
    from rl.data import LazyMemmapStorage, TensorDictReplayBuffer
    from rl.envs.transforms import BurnInTransform
    from rl.modules import GRUModule

    gru_module = GRUModule(
        input_size=10,
        hidden_size=10,
        in_keys=["observation", "hidden"],
        out_keys=["intermediate", ("next", "hidden")],
        default_recurrent_mode=True,
    )
    burn_in_transform = BurnInTransform(modules=[gru_module], burn_in=5)
    # the docstring builds a float "is_init"; rl.modules' GRUModule takes a bool mask
    td = TensorDict(
        {
            "observation": torch.randn(2, 10, 10),
            "hidden": torch.randn(2, 10, gru_module.gru.num_layers, 10),
            "is_init": torch.zeros(2, 10, 1, dtype=torch.bool),
        },
        batch_size=[2, 10],
    )
    td = burn_in_transform(td)
    assert td.shape == torch.Size([2, 5])
    buffer = TensorDictReplayBuffer(storage=LazyMemmapStorage(2), batch_size=1)
    buffer.append_transform(burn_in_transform)
    td = TensorDict(
        {
            "observation": torch.randn(2, 10, 10),
            "hidden": torch.randn(2, 10, gru_module.gru.num_layers, 10),
            "is_init": torch.zeros(2, 10, 1, dtype=torch.bool),
        },
        batch_size=[2, 10],
    )
    buffer.extend(td)
    td = buffer.sample(1)
    assert td.shape == torch.Size([1, 5])


def test_multi_step_transform_docstring():
    from rl.data import LazyTensorStorage, ReplayBuffer
    from rl.envs import GymEnv, MultiStepTransform, SerialEnv, StepCounter, TransformedEnv

    rb = ReplayBuffer(
        storage=LazyTensorStorage(100, ndim=2),
        transform=MultiStepTransform(n_steps=3, gamma=0.95),
    )
    base_env = SerialEnv(2, lambda: GymEnv("CartPole-v1"))
    env = TransformedEnv(base_env, StepCounter())
    _ = env.set_seed(0)
    _ = torch.manual_seed(0)
    tdreset = env.reset()
    for _ in range(10):
        rollout = env.rollout(
            max_steps=50, break_when_any_done=False, tensordict=tdreset, auto_reset=False
        )
        rb.extend(rollout)
        tdreset = rollout[..., -1]["next"]
    data = rb[:]
    ahead = data["next", "step_count"] - data["step_count"]
    # The next step_count is 3 steps in the future (fewer where an episode ends first)
    assert ahead[:, :5].eq(3).all()
    assert ((ahead >= 1) & (ahead <= 3)).all()
    assert data["steps_to_next_obs"].eq(ahead.squeeze(-1)).all()


def test_next_state_reconstructor_docstring():
    from rl.data import LazyTensorStorage, ReplayBuffer
    from rl.data.replay_buffers.samplers import SliceSampler
    from rl.envs.transforms.rb_transforms import NextStateReconstructor

    rb = ReplayBuffer(
        storage=LazyTensorStorage(100),
        sampler=SliceSampler(slice_len=4, traj_key=("collector", "traj_ids")),
        transform=NextStateReconstructor(),
        batch_size=8,
    )
    data = TensorDict(
        {
            "observation": torch.arange(8, dtype=torch.float32).view(8, 1),
            ("next", "reward"): torch.zeros(8, 1),
            ("next", "done"): torch.tensor([[False]] * 7 + [[True]]),
            ("collector", "traj_ids"): torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]),
        },
        batch_size=[8],
    )
    rb.extend(data)
    sample = rb.sample()  # ('next', 'observation') is reconstructed
    obs = sample["observation"].squeeze(-1)
    nxt = sample["next", "observation"].squeeze(-1)
    for i in range(8):
        if i % 4 == 3:  # a slice ends: the next step is not in the sample (or is a splice)
            assert math.isnan(nxt[i]) or nxt[i] == obs[i + 1]
        else:
            assert nxt[i] == obs[i + 1] == obs[i] + 1


def test_policy_age_filter_docstring():
    from rl.data import LazyStackStorage, ReplayBuffer
    from rl.envs.transforms import PolicyAgeFilter

    current_version = 3
    rb = ReplayBuffer(
        storage=LazyStackStorage(100),
        transform=PolicyAgeFilter(lambda: current_version, max_policy_lag=1),
    )
    data = TensorDict(
        {"observation": torch.randn(4, 3), "policy_version": torch.tensor([0, 2, 2, 3])},
        batch_size=[4],
    )
    rb.extend(data)  # version 0 is filtered out on write
    assert len(rb) == 3
    sample = rb.sample(3)  # remaining data is fresh enough
    assert sample.batch_size[0] == 3
