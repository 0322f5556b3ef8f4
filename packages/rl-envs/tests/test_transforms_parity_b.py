"""TorchRL-parity transforms (part b): action projection / scaling / flattening, action
chunks, episode control, replay-buffer transforms.

Expected values were computed by TorchRL 0.14.1 on the same inputs (written here as
literals) or by hand.
"""

from __future__ import annotations

import doctest
import importlib
from types import SimpleNamespace

import pytest
import torch
from tensordict import TensorDict

from rl.core import Bounded, Categorical, Composite, OneHot, Unbounded
from rl.envs import EnvBase, GymWrapper, TransformedEnv, check_env_specs
from rl.envs._done import default_done_spec
from rl.envs.transforms import (
    ActionScaling,
    BurnInTransform,
    Compose,
    ConditionalPolicySwitch,
    DiscreteActionProjection,
    EndOfLifeTransform,
    FlattenAction,
    MultiAction,
    MultiStepTransform,
    NextStateReconstructor,
    PolicyAgeFilter,
    RandomTruncationTransform,
    StepCounter,
    TerminateTransform,
)


class Counter(EnvBase):
    """count += sum(action); reward = sum(action); terminates once count >= limit."""

    def __init__(self, limit=100.0, act_shape=(1,), batch_size=()):
        super().__init__(batch_size=batch_size)
        bs = self.batch_size
        self.limit = limit
        self.observation_spec = Composite(observation=Unbounded(shape=(*bs, 1)), shape=bs)
        self.action_spec = Bounded(-2.0, 4.0, shape=(*bs, *act_shape))
        self.reward_spec = Unbounded(shape=(*bs, 1))
        self.full_done_spec = default_done_spec(bs, truncated=True)  # it truncates
        self.count = torch.zeros(*bs, 1)
        self.nsteps = 0

    def _reset(self, td):
        mask = None if td is None else td.get("_reset", None)
        fresh = torch.zeros(*self.batch_size, 1)
        self.count = fresh if mask is None else torch.where(mask, fresh, self.count)
        flag = torch.zeros(*self.batch_size, 1, dtype=torch.bool)
        return TensorDict(
            observation=self.count.clone(),
            done=flag,
            terminated=flag.clone(),
            truncated=flag.clone(),
            batch_size=self.batch_size,
        )

    def _step(self, td):
        self.nsteps += 1
        a = td["action"].reshape(*self.batch_size, -1).sum(-1, keepdim=True)
        self.count = self.count + a
        term = self.count >= self.limit
        return TensorDict(
            observation=self.count.clone(),
            reward=a.clone(),
            done=term.clone(),
            terminated=term,
            truncated=torch.zeros_like(term),
            batch_size=self.batch_size,
        )

    def _set_seed(self, seed):
        pass


# ----------------------------------------------------------------------------- action side
class TestDiscreteActionProjection:
    def test_inv_projects_and_resamples(self):
        torch.manual_seed(0)  # choice 2 is invalid: resampled, as TorchRL does with this seed
        t = DiscreteActionProjection(num_actions_effective=2, max_actions=3)
        td = TensorDict({"action": torch.tensor([0, 0, 1])}, [])
        out = t.inv(td)
        assert out["action"].tolist() == [1, 0]
        assert td["action"].tolist() == [0, 0, 1]  # the input is left alone
        assert t(td.clone())["action"].tolist() == [0, 0, 1]
        torch.manual_seed(0)
        a = torch.nn.functional.one_hot(torch.tensor([0, 1, 2, 3, 4, 2]), 5)
        out = DiscreteActionProjection(3, 5).inv(TensorDict({"action": a}, [6]))["action"]
        # TorchRL 0.14.1, same seed: choices 3 and 4 become 2 and 0
        assert out.argmax(-1).tolist() == [0, 1, 2, 2, 0, 2]

    def test_spec(self):
        base = Counter()
        base.action_spec = OneHot(2, dtype=torch.int64)
        env = TransformedEnv(base, DiscreteActionProjection(2, 5))
        assert isinstance(env.action_spec, OneHot)
        assert env.action_spec.shape == (5,) and env.action_spec.n == 5
        assert env.action_spec.dtype == torch.int64

    def test_errors(self):
        with pytest.raises(RuntimeError, match="greater or equal to `num_actions_effective`"):
            DiscreteActionProjection(5, 3)
        t = DiscreteActionProjection(2, 3)
        with pytest.raises(RuntimeError, match=r"action.shape\[-1\]=4 must match"):
            t.inv(TensorDict({"action": torch.zeros(4)}, []))


class TestActionScaling:
    def test_spec_and_inverse(self):
        env = TransformedEnv(Counter(act_shape=(3,)), ActionScaling())
        assert env.action_spec.space.low.tolist() == [-1.0] * 3
        assert env.action_spec.space.high.tolist() == [1.0] * 3
        td = env.reset()
        td["action"] = torch.tensor([-1.0, 0.0, 0.5])
        # low=-2, high=4: loc=1, scale=3 -> [-2, 1, 2.5] summed
        assert env.step(td)["next", "reward"].tolist() == [1.5]

    def test_unit_box(self):
        env = TransformedEnv(Counter(act_shape=(3,)), ActionScaling(standard_normal=False))
        assert env.action_spec.space.low.tolist() == [0.0] * 3
        assert env.action_spec.space.high.tolist() == [1.0] * 3
        td = env.reset()
        td["action"] = torch.tensor([0.0, 0.25, 1.0])
        assert env.step(td)["next", "reward"].tolist() == [1.5]
        t = env.transform[0]
        fwd = t(TensorDict({"action": torch.tensor([-2.0, 1.0, 4.0])}, []))["action"]
        assert fwd.tolist() == [0.0, 0.5, 1.0]
        assert t.loc.tolist() == [1.0] * 3 and t.scale.tolist() == [3.0] * 3

    def test_explicit_loc_scale(self):
        t = ActionScaling(loc=torch.ones(3), scale=torch.full((3,), 2.0))
        env = TransformedEnv(Counter(act_shape=(3,)), t)
        assert env.action_spec.space.low.tolist() == [-1.5] * 3
        assert env.action_spec.space.high.tolist() == [1.5] * 3
        t = ActionScaling(loc=1.0, scale=2.0, standard_normal=False)
        leaf = t._transform_leaf(Bounded(-3.0, 5.0, shape=(2,)))
        assert leaf.space.low.tolist() == [-0.5, -0.5] and leaf.space.high.tolist() == [1.5, 1.5]
        assert isinstance(t._transform_leaf(Unbounded(shape=(2,))), Unbounded)

    def test_from_stats(self):
        t = ActionScaling.from_stats(mean=torch.tensor([1.0, 2.0]), std=torch.tensor([2.0, 4.0]))
        out = t(TensorDict({"action": torch.tensor([[3.0, 6.0]])}, [1]))["action"]
        assert out.tolist() == [[1.0, 1.0]]
        assert t.denormalize(torch.tensor([[1.0, 1.0]])).tolist() == [[3.0, 6.0]]
        t = ActionScaling.from_stats(low=torch.tensor([0.0]), high=torch.tensor([4.0]))
        assert t.loc.tolist() == [2.0] and t.scale.tolist() == [2.0]

    def test_from_metadata(self):
        meta = SimpleNamespace(
            action_key="act", action_mean=torch.tensor([1.0]), action_std=torch.tensor([2.0])
        )
        t = ActionScaling.from_metadata(meta)
        assert t.in_keys_inv == ["act"] and t.loc.tolist() == [1.0] and t.scale.tolist() == [2.0]
        meta = SimpleNamespace(
            action_key="act", action_low=torch.tensor([0.0]), action_high=torch.tensor([4.0])
        )
        assert ActionScaling.from_metadata(meta).loc.tolist() == [2.0]
        t = ActionScaling.from_metadata(meta, in_keys_inv=[])
        assert t.in_keys == ["act"] and t.in_keys_inv == []
        with pytest.raises(ValueError, match="has no action normalization statistics"):
            ActionScaling.from_metadata(SimpleNamespace(action_key="a", dataset_id="d"))

    def test_state_dict_round_trip(self):
        env = TransformedEnv(Counter(act_shape=(3,)), ActionScaling())
        env.reset()
        state = env.transform[0].state_dict()
        fresh = ActionScaling()
        assert not fresh.initialized
        fresh.load_state_dict(state)
        assert fresh.initialized and fresh.scale.tolist() == [3.0] * 3

    def test_errors(self):
        with pytest.raises(ValueError, match="both be provided or both be None"):
            ActionScaling(loc=1.0)
        with pytest.raises(ValueError, match="must not contain zero entries"):
            ActionScaling(loc=1.0, scale=0.0)
        with pytest.raises(ValueError, match="forward-only mode"):
            ActionScaling(in_keys_inv=[])
        with pytest.raises(ValueError, match="single action key"):
            ActionScaling(in_keys_inv=["a", "b"])
        with pytest.raises(RuntimeError, match="cannot be used with an Unbounded action spec"):
            ActionScaling()._transform_leaf(Unbounded(shape=(2,)))
        t = ActionScaling(loc=torch.zeros(3), scale=torch.ones(3))
        with pytest.raises(ValueError, match=r"action shape \(2,\) does not match"):
            t(TensorDict({"action": torch.zeros(2)}, []))
        with pytest.raises(RuntimeError, match="has not been initialized"):
            ActionScaling()(TensorDict({"action": torch.zeros(2)}, []))


class TestFlattenAction:
    def test_env(self):
        env = TransformedEnv(Counter(act_shape=(3, 5), batch_size=(2,)), FlattenAction(-2, -1))
        assert env.action_spec.shape == (2, 15) and isinstance(env.action_spec, Bounded)
        td = env.reset()
        td["action"] = torch.arange(30.0).reshape(2, 15) / 100
        torch.testing.assert_close(env.step(td)["next", "reward"], torch.tensor([[1.05], [3.3]]))

    def test_positive_dims(self):
        t = FlattenAction(0, 1, allow_positive_dim=True)
        env = TransformedEnv(Counter(act_shape=(3, 5), batch_size=(2,)), t)
        assert env.action_spec.shape == (2, 15)
        assert (t.first_dim, t.last_dim) == (1, 2)
        td = env.reset()
        td["action"] = torch.arange(30.0).reshape(2, 15) / 100
        # (TorchRL 0.14.1 fails here: it unflattens with the span counted without batch dims)
        torch.testing.assert_close(env.step(td)["next", "reward"], torch.tensor([[1.05], [3.3]]))

    def test_outside_env(self):
        t = FlattenAction(-2, -1, action_shape=(3, 5))
        assert t.inv(TensorDict({"action": torch.zeros(4, 15)}, [4]))["action"].shape == (4, 3, 5)
        assert t(TensorDict({"action": torch.zeros(4, 3, 5)}, [4]))["action"].shape == (4, 15)

    def test_discrete_spec(self):
        base = Counter(act_shape=(2, 3))
        base.action_spec = Categorical(4, shape=(2, 3))
        spec = TransformedEnv(base, FlattenAction(-2, -1)).action_spec
        assert isinstance(spec, Categorical) and spec.shape == (6,) and spec.n == 4

    def test_errors(self):
        with pytest.raises(ValueError, match="first_dim should be smaller than 0"):
            FlattenAction(first_dim=0)
        with pytest.raises(ValueError, match="last_dim should be smaller than 0"):
            FlattenAction(last_dim=0)
        with pytest.raises(ValueError, match=r"first_dim \(-1\) must be <= last_dim \(-2\)"):
            FlattenAction(-1, -2)
        with pytest.raises(RuntimeError, match="no stored unflatten shape for key 'action'"):
            FlattenAction(-3, -1).inv(TensorDict({"action": torch.zeros(4, 15)}, [4]))
        with pytest.raises(RuntimeError, match="not compatible with an action of shape"):
            _ = TransformedEnv(Counter(act_shape=(3,)), FlattenAction(-3, -1)).action_spec


# --------------------------------------------------------------------------- replay side
def _batch(start, T=5, B=2, done_at=()):
    obs = torch.arange(start, start + T).float().expand(B, T) + 10 * torch.arange(B).unsqueeze(-1)
    obs = obs.unsqueeze(-1)
    done = torch.zeros(B, T, 1, dtype=torch.bool)
    for b, t in done_at:
        done[b, t] = True
    nxt = {
        "observation": obs + 1,
        "reward": (obs + 1) * 0.5,
        "done": done,
        "terminated": done.clone(),
        "truncated": torch.zeros_like(done),
    }
    return TensorDict({"observation": obs, "action": torch.ones(B, T, 1), "next": nxt}, [B, T])


class TestMultiStepTransform:
    def test_values_across_calls(self):
        t = MultiStepTransform(3, 0.9)
        assert t.inv(_batch(0, T=3)) is None  # no step has its full look-ahead yet
        out = t.inv(_batch(3, T=5, done_at=[(0, 1), (1, 4)]))
        # TorchRL 0.14.1 on the same inputs
        assert out["steps_to_next_obs"].tolist() == [[3, 3, 3, 2, 1], [3, 3, 3, 3, 3]]
        torch.testing.assert_close(
            out["gamma"], torch.tensor([[0.729, 0.729, 0.729, 0.81, 0.9], [0.729] * 5])
        )
        assert out["nonterminal"].tolist() == [[True] * 4 + [False], [True] * 5]
        assert out["observation"].squeeze(-1).tolist() == [
            [0.0, 1.0, 2.0, 3.0, 4.0],
            [10.0, 11.0, 12.0, 13.0, 14.0],
        ]
        assert out["next", "observation"].squeeze(-1).tolist() == [
            [3.0, 4.0, 5.0, 5.0, 5.0],
            [13.0, 14.0, 15.0, 16.0, 17.0],
        ]
        torch.testing.assert_close(
            out["next", "reward"].squeeze(-1),
            torch.tensor([[2.615, 3.97, 5.325, 4.25, 2.5], [16.165, 17.52, 18.875, 20.23, 21.585]]),
        )
        assert out["next", "original_reward"].squeeze(-1).tolist() == [
            [0.5, 1.0, 1.5, 2.0, 2.5],
            [5.5, 6.0, 6.5, 7.0, 7.5],
        ]
        # done entries are not moved
        assert out["next", "done"].squeeze(-1).tolist() == [[False] * 4 + [True], [False] * 5]
        out = t.inv(_batch(8, T=4, done_at=[(1, 0)]))
        torch.testing.assert_close(
            out["next", "reward"].squeeze(-1),
            torch.tensor([[9.39, 10.745, 12.1, 13.455], [22.94, 16.6, 9.0, 9.5]]),
        )
        assert out["steps_to_next_obs"].tolist() == [[3, 3, 3, 3], [3, 2, 1, 1]]
        assert out["next", "observation"].squeeze(-1).tolist() == [
            [8.0, 9.0, 10.0, 11.0],
            [18.0, 18.0, 18.0, 19.0],
        ]

    def test_mask(self):
        data = _batch(0, T=6, B=1, done_at=[(0, 2)])
        data["mask"] = torch.tensor([[True, True, True, True, False, True]])
        out = MultiStepTransform(2, 0.5).inv(data)
        assert out["nonterminal"].tolist() == [[True, True, False, True]]
        assert out["gamma"].tolist() == [[0.25, 0.25, 0.5, 0.25]]

    def test_errors(self):
        with pytest.raises(ValueError, match="strictly positive integer"):
            MultiStepTransform(0, 0.9)
        t = MultiStepTransform(2, 0.9)
        with pytest.raises(ValueError, match="strictly positive integer"):
            t.n_steps = 1.5
        env = TransformedEnv(Counter(), MultiStepTransform(2, 0.9))
        with pytest.raises(ValueError, match="exclusively to replay buffers"):
            env.rollout(3)


class TestNextStateReconstructor:
    @pytest.fixture
    def data(self):
        done = torch.tensor([[False]] * 3 + [[True]] + [[False]] * 4)
        return TensorDict(
            {
                "observation": torch.arange(8.0).view(8, 1),
                ("next", "done"): done,
                ("collector", "traj_ids"): torch.tensor([0, 0, 0, 0, 1, 1, 2, 2]),
                "sc": torch.tensor([0, 1, 2, 3, 0, 1, 5, 7]),
            },
            [8],
        )

    def test_values(self, data):
        nan = float("nan")
        out = NextStateReconstructor()(data.clone())["next", "observation"].squeeze(-1)
        torch.testing.assert_close(
            out, torch.tensor([1.0, 2.0, 3.0, nan, 5.0, nan, 7.0, nan]), equal_nan=True
        )
        t = NextStateReconstructor(step_count_key="sc", traj_key=None, done_key=None)
        torch.testing.assert_close(
            t(data.clone())["next", "observation"].squeeze(-1),
            torch.tensor([1.0, 2.0, 3.0, nan, 5.0, nan, nan, nan]),
            equal_nan=True,
        )
        out = NextStateReconstructor(keys=["sc"], fill_value=-1)(data.clone())["next", "sc"]
        assert out.tolist() == [1, 2, 3, -1, 1, -1, 7, -1]
        t = NextStateReconstructor(traj_key="nope", strict=False)
        torch.testing.assert_close(
            t(data.clone())["next", "observation"].squeeze(-1),
            torch.tensor([1.0, 2.0, 3.0, nan, 5.0, 6.0, 7.0, nan]),
            equal_nan=True,
        )

    def test_errors(self, data):
        with pytest.raises(TypeError, match="root key 'sc' has non-floating dtype"):
            NextStateReconstructor(keys=["sc"])(data.clone())
        with pytest.raises(KeyError, match="trajectory key 'nope' is not present"):
            NextStateReconstructor(traj_key="nope")(data.clone())
        with pytest.raises(ValueError, match=r"expects a flat ``\(B,\)`` sample"):
            NextStateReconstructor()(data.clone().reshape(2, 4))


class TestPolicyAgeFilter:
    def test_filters_both_paths(self):
        version = [3]
        t = PolicyAgeFilter(lambda: version[0], max_policy_lag=1)
        data = TensorDict(
            {
                "policy_version": torch.tensor([[0, 3], [2, 2], [3, 3], [1, 3]]),
                "x": torch.arange(4),
            },
            [4],
        )
        assert t(data)["x"].tolist() == [1, 2]
        assert t.inv(data)["x"].tolist() == [1, 2]
        version[0] = 4
        assert t(data)["x"].tolist() == [2]
        assert PolicyAgeFilter(1, 1)(TensorDict({"x": torch.zeros(2)}, [2])).shape == (2,)

    def test_errors(self):
        with pytest.raises(ValueError, match="max_policy_lag must be non-negative, got -1"):
            PolicyAgeFilter(1, -1)
        with pytest.raises(KeyError, match="'policy_version' is not present in the data"):
            PolicyAgeFilter(1, 1, strict=True)(TensorDict({"x": torch.zeros(2)}, [2]))


# ------------------------------------------------------------------------------ env side
def _const(value):
    from tensordict.nn import TensorDictModule

    return TensorDictModule(
        lambda obs: torch.full_like(obs, float(value)), in_keys=["observation"], out_keys=["action"]
    )


class TestTerminateTransform:
    def test_stops_rollout(self):
        env = TransformedEnv(Counter(), TerminateTransform(lambda td: td["observation"] >= 5))
        r = env.rollout(10, _const(1))
        assert r.shape == (5,)
        assert r["next", "terminated"].squeeze(-1).tolist() == [False] * 4 + [True]
        assert r["next", "done"].squeeze(-1).tolist() == [False] * 4 + [True]
        assert not r["next", "truncated"].any()

    def test_write_done_false(self):
        stop = TerminateTransform(
            lambda td: td["observation"].squeeze(-1) >= torch.tensor([3.0, 5.0]), write_done=False
        )
        env = TransformedEnv(Counter(batch_size=(2,)), stop)
        r = env.rollout(4, _const(1), break_when_any_done=False)
        assert r["next", "terminated"].squeeze(-1).tolist() == [
            [False, False, True, True],
            [False] * 4,
        ]
        assert not r["next", "done"].any()

    def test_errors(self):
        with pytest.raises(ValueError, match="`stop` must be a callable"):
            TerminateTransform(3)
        with pytest.raises(RuntimeError, match="without a parent environment"):
            TerminateTransform(lambda td: True)(TensorDict({}, []))


class TestRandomTruncationTransform:
    def test_horizons_match_torchrl_stream(self):
        torch.manual_seed(0)
        t = RandomTruncationTransform(min_horizon=2, max_horizon=6, prob=0.5)
        env = TransformedEnv(Counter(batch_size=(4,)), Compose(StepCounter(), t))
        r = env.rollout(20, _const(0.5), break_when_any_done=False)
        # TorchRL 0.14.1, same seed and draws
        assert r["next", "truncated"].squeeze(-1).int().tolist() == [
            [0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0],
            [0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0],
            [0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0],
            [1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0],
        ]
        assert (r["next", "step_count"] <= 6).all()
        assert sorted(env.full_done_spec.keys()) == ["done", "terminated", "truncated"]

    def test_errors(self):
        with pytest.raises(RuntimeError, match="requires a StepCounter earlier"):
            TransformedEnv(Counter(), RandomTruncationTransform(2, 5))  # when built (TorchRL)
        env = TransformedEnv(Counter())
        with pytest.raises(RuntimeError, match="requires a StepCounter earlier"):
            env.append_transform(RandomTruncationTransform(2, 5))
        with pytest.raises(ValueError, match="min_horizon must be >= 1, got 0"):
            RandomTruncationTransform(0, 5)
        with pytest.raises(ValueError, match=r"min_horizon \(3\) must be <= max_horizon \(2\)"):
            RandomTruncationTransform(3, 2)
        with pytest.raises(ValueError, match=r"prob must be in \[0, 1\], got 1.5"):
            RandomTruncationTransform(1, 2, 1.5)
        with pytest.raises(NotImplementedError, match="cannot be called independently"):
            RandomTruncationTransform(1, 2)(TensorDict({}, []))


class TestConditionalPolicySwitch:
    def test_switch_on_step(self):
        switch = ConditionalPolicySwitch(
            condition=lambda td: td["total"] % 2 == 1, policy=_const(3)
        )
        env = TransformedEnv(
            Counter(),
            Compose(
                StepCounter(step_count_key="total"), switch, StepCounter(step_count_key="main")
            ),
        )
        r = env.rollout(5, _const(1))
        # TorchRL 0.14.1
        assert r["total"].squeeze(-1).tolist() == [0, 2, 4, 6, 8]
        assert r["main"].squeeze(-1).tolist() == [0, 1, 2, 3, 4]
        assert r["observation"].squeeze(-1).tolist() == [0.0, 4.0, 8.0, 12.0, 16.0]
        assert r["next", "reward"].squeeze(-1).tolist() == [3.0] * 5
        assert r["next", "observation"].squeeze(-1).tolist() == [4.0, 8.0, 12.0, 16.0, 20.0]

    def test_switch_on_reset(self):
        switch = ConditionalPolicySwitch(
            condition=lambda td: td["total"] % 2 == 0, policy=_const(2)
        )
        env = TransformedEnv(Counter(), Compose(StepCounter(step_count_key="total"), switch))
        r = env.rollout(3, _const(1))
        assert r["total"].squeeze(-1).tolist() == [1, 3, 5]
        assert r["observation"].squeeze(-1).tolist() == [2.0, 5.0, 8.0]

    def test_errors(self):
        cond = ConditionalPolicySwitch(
            condition=lambda td: td["observation"].squeeze(-1) > torch.tensor([0.0, 5.0]),
            policy=_const(3),
        )
        env = TransformedEnv(Counter(batch_size=(2,)), cond)
        with pytest.raises(RuntimeError, match="Cannot run partial steps in a batched locked"):
            env.rollout(3, _const(1))
        env = TransformedEnv(Counter(), ConditionalPolicySwitch(lambda td: td, lambda td: 1))
        with pytest.raises(RuntimeError, match="should return a boolean or a tensor"):
            env.rollout(3, _const(1))


class TestMultiAction:
    def test_chunk(self):
        env = TransformedEnv(Counter(limit=10), MultiAction())
        # the chunk dim is dynamic (-1), as TorchRL's
        assert env.action_spec.shape == (-1, 1) and env.reward_spec.shape == (-1, 1)
        td = env.reset()
        td["action"] = torch.tensor([[1.0], [2.0], [3.0]])
        out = env.step(td)
        assert out["next", "reward"].tolist() == [[1.0], [2.0], [3.0]]
        assert out["next", "observation"].tolist() == [6.0]
        assert env.base_env.nsteps == 3

    def test_done_inside_chunk(self):
        env = TransformedEnv(Counter(limit=2), MultiAction(stack_observations=True))
        td = env.reset()
        td["action"] = torch.tensor([[1.0], [2.0], [3.0], [1.0]])
        out = env.step(td)
        # TorchRL 0.14.1: the executed rewards then one zero slot; observations stop at done
        assert out["next", "reward"].squeeze(-1).tolist() == [1.0, 2.0, 0.0]
        assert out["next", "observation"].squeeze(-1).tolist() == [1.0, 3.0, 3.0]
        assert out["next", "done"].tolist() == [True]

    def test_batched(self):
        env = TransformedEnv(Counter(limit=4, batch_size=(2,)), MultiAction())
        td = env.reset()
        td["action"] = torch.tensor([[[1.0], [2.0], [3.0]], [[4.0], [1.0], [1.0]]])
        out = env.step(td)
        assert out["next", "reward"].squeeze(-1).tolist() == [[1.0, 2.0, 3.0], [4.0, 1.0, 1.0]]
        assert out["next", "observation"].squeeze(-1).tolist() == [6.0, 6.0]
        assert out["next", "done"].squeeze(-1).tolist() == [True, True]

    def test_keys_and_options(self):
        env = TransformedEnv(Counter(), MultiAction(stack_rewards=False))
        td = env.reset()
        td["action"] = torch.ones(3, 1)
        assert env.step(td)["next", "reward"].tolist() == [1.0]
        assert env.reward_spec.shape == (1,)
        env = TransformedEnv(Counter(), MultiAction(action_key="action", chunk_key="chunk"))
        assert list(env.full_action_spec.keys()) == ["chunk"]
        td = env.reset()
        td["chunk"] = torch.ones(2, 1)
        assert env.step(td)["next", "observation"].tolist() == [2.0]
        r = TransformedEnv(Counter(), MultiAction()).rollout(3)
        assert r["action"].shape == (3, 1, 1) and r["next", "reward"].shape == (3, 1, 1)

    def test_from_vla(self):
        t = MultiAction.from_vla(stack_rewards=False)
        assert t.out_keys_inv == [("vla_action", "chunk")] and t.in_keys_inv == ["action"]
        assert not t.stack_rewards

    def test_errors(self):
        with pytest.raises(ValueError, match="dim must be an int >= 1"):
            MultiAction(dim=0)
        t = MultiAction()
        with pytest.raises(RuntimeError, match="runs inside a TransformedEnv only"):
            t.inv(TensorDict({"action": torch.ones(2, 1)}, []))


class TestBurnInTransform:
    @pytest.fixture
    def gru(self):
        modules = pytest.importorskip("rl.modules")
        torch.manual_seed(0)
        return modules.GRUModule(
            input_size=3,
            hidden_size=4,
            in_keys=["observation", "hidden"],
            out_keys=["intermediate", ("next", "hidden")],
            default_recurrent_mode=True,
        )

    def test_burn_in(self, gru):
        t = BurnInTransform(modules=[gru], burn_in=3)
        assert t.out_keys == ["hidden"]
        assert set(t.in_keys) == {"observation", "hidden", "is_init"}
        g = torch.Generator().manual_seed(1)
        td = TensorDict(
            {
                "observation": torch.randn(2, 6, 3, generator=g),
                "hidden": torch.randn(2, 6, 1, 4, generator=g),
                "is_init": torch.zeros(2, 6, 1, dtype=torch.bool),
            },
            [2, 6],
        )
        before = td["hidden"].clone()
        out = t(td)
        assert out.shape == (2, 3)
        with torch.no_grad():
            expected = gru(td[:, :3].clone())["next", "hidden"][:, -1]
        torch.testing.assert_close(out["hidden"][:, 0], expected)
        torch.testing.assert_close(out["hidden"][:, 1:], before[:, 4:])
        torch.testing.assert_close(td["hidden"], before)  # the input is left alone
        assert BurnInTransform(modules=[gru], burn_in=0)(td) is td

    def test_errors(self, gru):
        with pytest.raises(ValueError, match="All modules must be TensorDictModules"):
            BurnInTransform([torch.nn.Linear(2, 2)], 2)
        t = BurnInTransform(gru, 2)
        with pytest.raises(RuntimeError, match="can only be appended to a ReplayBuffer"):
            t._step(None, None)
        with pytest.warns(UserWarning, match="'next' key is not needed"):
            BurnInTransform(gru, 2, out_keys=[("next", "hidden")])


@pytest.mark.parametrize(
    "make",
    [
        lambda: MultiAction(),
        lambda: ActionScaling(),
        lambda: FlattenAction(-1, -1),
        lambda: TerminateTransform(lambda td: td["observation"] > 3),
        lambda: Compose(StepCounter(), RandomTruncationTransform(2, 4)),
    ],
    ids=["MultiAction", "ActionScaling", "FlattenAction", "Terminate", "RandomTruncation"],
)
def test_check_env_specs(make):
    check_env_specs(TransformedEnv(Counter(), make()))


def test_end_of_life_matches_torchrl(lives_env_cls):
    # conftest's LivesEnv: a life lost every 3 steps, read through unwrapped.ale.lives()
    env = TransformedEnv(GymWrapper(lives_env_cls(every=3, ale=True)), EndOfLifeTransform())
    obs_spec = env.full_observation_spec
    assert obs_spec["end-of-life"].shape == (1,) and obs_spec["end-of-life"].dtype == torch.bool
    assert obs_spec["lives"].shape == () and obs_spec["lives"].dtype == torch.int64
    td = env.reset()
    assert td["end-of-life"].tolist() == [False] and td["lives"].item() == 3
    r = env.rollout(12)
    # TorchRL 0.14.1 on the same gym env
    assert r.shape == (9,)
    assert r["next", "end-of-life"].squeeze(-1).int().tolist() == [0, 0, 1, 0, 0, 1, 0, 0, 1]
    assert r["next", "lives"].tolist() == [3, 3, 2, 2, 2, 1, 1, 1, 0]
    assert r["lives"].tolist() == [3, 3, 3, 2, 2, 2, 1, 1, 1]
    assert r["end-of-life"].squeeze(-1).int().tolist() == [0, 0, 0, 1, 0, 0, 1, 0, 0]


@pytest.mark.parametrize(
    "name",
    ["_action", "_control", "_frames", "_nstep", "_replay"],
)
def test_docstring_examples(name):
    module = importlib.import_module(f"rl.envs.transforms.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
