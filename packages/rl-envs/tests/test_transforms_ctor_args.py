"""TorchRL 0.14 constructor arguments of the rl-envs transforms (issue #20)."""

from __future__ import annotations

import inspect

import pytest
import torch
from tensordict import TensorDict

from rl.core import Unbounded
from rl.envs import PendulumEnv, TransformedEnv
from rl.envs.transforms import (
    ActionDiscretizer,
    CatTensors,
    Compose,
    ObservationNorm,
    RewardSum,
    SqueezeTransform,
    StepCounter,
    TargetReturn,
    TensorDictPrimer,
    TimeMaxPool,
    UnsqueezeTransform,
)


def _episode_cumsum(reward: torch.Tensor, episode_len: int) -> torch.Tensor:
    """Plain loop: running sums that restart every ``episode_len`` steps."""
    out, total = [], 0.0
    for t, r in enumerate(reward.tolist()):
        total = r if t % episode_len == 0 else total + r
        out.append(total)
    return torch.tensor(out)


# ----------------------------------------------------------------------------- RewardSum


def test_reward_sum_reset_keys_per_agent():
    # a nested reset entry clears only the agents it flags (TorchRL 0.14.1 gives [[0], [5]])
    t = RewardSum(in_keys=[("agents", "reward")], reset_keys=[("agents", "_reset")])
    assert t.out_keys == [("agents", "episode_reward")]
    td = TensorDict(
        {
            "agents": TensorDict(
                {
                    "episode_reward": torch.tensor([[3.0], [5.0]]),
                    "_reset": torch.tensor([[True], [False]]),
                },
                [2],
            )
        },
        [],
    )
    out = t._reset(td, TensorDict({}, []))
    torch.testing.assert_close(out["agents", "episode_reward"], torch.tensor([[0.0], [5.0]]))


def test_reward_sum_reset_keys_ignore_root_reset():
    # with reset_keys given, the root "_reset" is not what decides
    t = RewardSum(reset_keys=["my_reset"])
    td = TensorDict(
        {
            "episode_reward": torch.tensor([[1.0], [2.0]]),
            "_reset": torch.tensor([[True], [True]]),
            "my_reset": torch.tensor([[False], [True]]),
        },
        [2],
    )
    out = t._reset(td, TensorDict({}, [2]))
    torch.testing.assert_close(out["episode_reward"], torch.tensor([[1.0], [0.0]]))


def test_reward_sum_reset_keys_length_mismatch():
    # as TorchRL: built, then refused at reset
    t = RewardSum(in_keys=["r1", "r2"], reset_keys=["_reset"])
    with pytest.raises(ValueError, match="one reset key per in_key"):
        t._reset(TensorDict({}, []), TensorDict({}, []))


def test_reward_sum_reward_spec_true():
    env = TransformedEnv(
        PendulumEnv(), Compose(StepCounter(max_steps=2), RewardSum(reward_spec=True))
    )
    assert "episode_reward" in env.reward_keys
    assert "episode_reward" not in env.observation_spec.keys(True, True)
    r = env.rollout(5, break_when_any_done=False)
    reward = r["next", "reward"].squeeze(-1)
    torch.testing.assert_close(r["next", "episode_reward"].squeeze(-1), _episode_cumsum(reward, 2))


def test_reward_sum_reward_spec_default_is_observation():
    env = TransformedEnv(PendulumEnv(), RewardSum())
    assert "episode_reward" in env.observation_spec.keys(True, True)
    assert "episode_reward" not in env.reward_keys


# ----------------------------------------------------------------------------- TargetReturn


def test_target_return_reset_key():
    t = TargetReturn(10.0, reset_key="my_reset")
    td = TensorDict(
        {
            "target_return": torch.tensor([[4.0], [6.0]]),
            "_reset": torch.tensor([[False], [False]]),
            "my_reset": torch.tensor([[True], [False]]),
        },
        [2],
    )
    out = t._reset(td, TensorDict({}, [2]))
    torch.testing.assert_close(out["target_return"], torch.tensor([[10.0], [6.0]]))


def test_target_return_reset_key_in_env():
    env = TransformedEnv(PendulumEnv(batch_size=[2]), TargetReturn(5.0, reset_key="_reset"))
    td = env.rand_step(env.reset())
    stepped = td["next", "target_return"].clone()
    root = td["next"].clone()
    root["_reset"] = torch.tensor([[True], [False]])
    out = env.reset(root)
    torch.testing.assert_close(out["target_return"][0], torch.tensor([5.0]))
    torch.testing.assert_close(out["target_return"][1], stepped[1])


# ----------------------------------------------------------------------------- TimeMaxPool


def test_time_max_pool_reset_key():
    t = TimeMaxPool(in_keys=["x"], T=3, reset_key="my_reset")
    t._reset(None, TensorDict({"x": torch.tensor([[1.0], [1.0]])}, [2]))
    nxt = t._step(TensorDict({}, [2]), TensorDict({"x": torch.tensor([[9.0], [9.0]])}, [2]))
    torch.testing.assert_close(nxt["x"], torch.tensor([[9.0], [9.0]]))
    td = TensorDict(
        {"my_reset": torch.tensor([[True], [False]]), "_reset": torch.tensor([[False], [True]])},
        [2],
    )
    out = t._reset(td, TensorDict({"x": torch.tensor([[2.0], [2.0]])}, [2]))
    # sub-env 0 restarts its window (max 2); sub-env 1 keeps the 9 it saw
    torch.testing.assert_close(out["x"], torch.tensor([[2.0], [9.0]]))


# ----------------------------------------------------------------------------- TensorDictPrimer


def test_primer_reset_key():
    t = TensorDictPrimer(h=Unbounded(shape=(1,)), default_value=7.0, reset_key="my_reset")
    td = TensorDict(
        {
            "h": torch.tensor([[1.0], [2.0]]),
            "_reset": torch.tensor([[True], [True]]),
            "my_reset": torch.tensor([[False], [True]]),
        },
        [2],
    )
    out = t._reset(td, TensorDict({}, [2]))
    torch.testing.assert_close(out["h"], torch.tensor([[1.0], [7.0]]))


@pytest.mark.parametrize(("expand_specs", "shape"), [(None, (2,)), (True, (2, 2)), (False, (2,))])
def test_primer_expand_specs(expand_specs, shape):
    # a (2,) spec on a [2] env: None/False read it as already batched, True expands it
    env = TransformedEnv(
        PendulumEnv(batch_size=[2]),
        TensorDictPrimer(h=Unbounded(shape=(2,)), expand_specs=expand_specs),
    )
    assert env.observation_spec["h"].shape == shape
    assert env.reset()["h"].shape == shape


def test_primer_expand_specs_false_mismatch():
    with pytest.raises(ValueError, match="expand_specs=False.*'h'"):
        env = TransformedEnv(
            PendulumEnv(batch_size=[2]),
            TensorDictPrimer(h=Unbounded(shape=(3,)), expand_specs=False),
        )
        env.reset()


def test_primer_single_default_value_partial_reset():
    calls = []

    def make(reset):
        calls.append(reset.clone())
        n = int(reset.sum())
        return TensorDict({"a": torch.full((n, 1), 3.0), "b": torch.full((n, 2), 4.0)}, [n])

    t = TensorDictPrimer(
        a=Unbounded(shape=(1,)),
        b=Unbounded(shape=(2,)),
        default_value=make,
        single_default_value=True,
    )
    td = TensorDict(
        {
            "a": torch.zeros(3, 1),
            "b": torch.zeros(3, 2),
            "_reset": torch.tensor([[True], [False], [True]]),
        },
        [3],
    )
    out = t._reset(td, TensorDict({}, [3]))
    torch.testing.assert_close(out["a"].squeeze(-1), torch.tensor([3.0, 0.0, 3.0]))
    torch.testing.assert_close(out["b"][:, 0], torch.tensor([4.0, 0.0, 4.0]))
    assert len(calls) == 1
    assert calls[0].tolist() == [True, False, True]


def test_primer_single_default_value_full_reset_in_env():
    def make(reset):
        return {"h": torch.arange(2.0).unsqueeze(-1) + 10.0}

    env = TransformedEnv(
        PendulumEnv(batch_size=[2]),
        TensorDictPrimer(h=Unbounded(shape=(1,)), default_value=make, single_default_value=True),
    )
    torch.testing.assert_close(env.reset()["h"], torch.tensor([[10.0], [11.0]]))


def test_primer_callable_default_value_per_key():
    env = TransformedEnv(
        PendulumEnv(),
        TensorDictPrimer(h=Unbounded(shape=(3,)), default_value=lambda: torch.arange(3.0)),
    )
    torch.testing.assert_close(env.reset()["h"], torch.arange(3.0))


def test_primer_argument_errors():
    with pytest.raises(ValueError, match="incompatible"):
        TensorDictPrimer(h=Unbounded(shape=(1,)), random=True, default_value=1.0)
    with pytest.raises(ValueError, match="needs a callable"):
        TensorDictPrimer(h=Unbounded(shape=(1,)), default_value=1.0, single_default_value=True)
    with pytest.raises(KeyError, match="not primers"):
        TensorDictPrimer(h=Unbounded(shape=(1,)), default_value={"g": 1.0})


def test_primer_dict_of_callables():
    t = TensorDictPrimer(
        h=Unbounded(shape=(2,)),
        c=Unbounded(shape=(1,)),
        default_value={"h": lambda: torch.tensor([1.0, 2.0]), "c": 4.0},
    )
    out = TransformedEnv(PendulumEnv(), t).reset()
    torch.testing.assert_close(out["h"], torch.tensor([1.0, 2.0]))
    torch.testing.assert_close(out["c"], torch.tensor([4.0]))


def test_primer_call_before_env_reset_values():
    t = TensorDictPrimer(h=Unbounded(shape=(2,)), default_value=2.0, call_before_env_reset=True)
    assert t.call_before_env_reset is True
    env = TransformedEnv(PendulumEnv(), t)
    torch.testing.assert_close(env.reset()["h"], torch.full((2,), 2.0))


# ----------------------------------------------------------------------------- CatTensors


def test_cat_tensors_in_keys_none_uses_every_observation():
    env = TransformedEnv(
        PendulumEnv(),
        Compose(
            TensorDictPrimer(extra=Unbounded(shape=(2,)), default_value=-1.0),
            CatTensors(out_key="vec"),
        ),
    )
    assert env.transform[1].in_keys == ["extra", "observation"]
    assert list(env.observation_spec.keys(True, True)) == ["vec"]
    td = env.reset()
    assert td["vec"].shape == (5,)
    torch.testing.assert_close(td["vec"][:2], torch.tensor([-1.0, -1.0]))
    r = env.rollout(3)
    assert r["next", "vec"].shape == (3, 5)


def test_cat_tensors_in_keys_none_errors():
    with pytest.raises(ValueError, match="only supports dim=-1"):
        CatTensors(dim=-2)
    with pytest.raises(RuntimeError, match="in a TransformedEnv"):
        CatTensors()(TensorDict({"a": torch.zeros(2)}, []))


# ----------------------------------------------------------------------------- defaults


def _default(cls, name):
    return inspect.signature(cls.__init__).parameters[name].default


def test_defaults_follow_torchrl():
    # TorchRL 0.14.1 defaults: eps=None, dim=None, sampling=None
    assert _default(ObservationNorm, "eps") is None
    assert _default(UnsqueezeTransform, "dim") is None
    assert _default(SqueezeTransform, "dim") is None
    assert _default(ActionDiscretizer, "sampling") is None
    assert _default(CatTensors, "in_keys") is None


@pytest.mark.parametrize("cls", [UnsqueezeTransform, SqueezeTransform])
def test_squeeze_dim_required(cls):
    with pytest.raises(TypeError, match="dim must be passed"):
        cls(in_keys=["x"])


def test_action_discretizer_sampling_none_is_median():
    t_none = ActionDiscretizer(5)
    assert t_none.sampling is ActionDiscretizer.SamplingStrategy.MEDIAN
    a = TransformedEnv(PendulumEnv(), ActionDiscretizer(5)).action_spec
    b = TransformedEnv(PendulumEnv(), ActionDiscretizer(5, sampling="median")).action_spec
    assert a == b
    td = TensorDict({"action": torch.tensor(3)}, [])
    env_a = TransformedEnv(PendulumEnv(), ActionDiscretizer(5))
    env_b = TransformedEnv(PendulumEnv(), ActionDiscretizer(5, sampling="median"))
    torch.testing.assert_close(
        env_a.transform.inv(td.clone())["action"], env_b.transform.inv(td.clone())["action"]
    )


def test_observation_norm_default_eps_floors_std():
    # a constant observation: init_stats' std is floored at float32 eps (TorchRL's default)
    env = TransformedEnv(
        PendulumEnv(),
        Compose(
            TensorDictPrimer(c=Unbounded(shape=(1,)), default_value=1.5),
            ObservationNorm(in_keys=["c"], standard_normal=True),
        ),
    )
    env.transform[1].init_stats(num_iter=4, reduce_dim=0, cat_dim=0)
    torch.testing.assert_close(env.transform[1].loc, torch.tensor([1.5]))
    torch.testing.assert_close(
        env.transform[1].scale, torch.tensor([torch.finfo(torch.float32).eps])
    )
