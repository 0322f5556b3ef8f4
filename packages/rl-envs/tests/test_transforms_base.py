"""Transform, Compose and TransformedEnv: the list API, parents, specs, errors."""

from __future__ import annotations

import gc
import os
import pickle
import threading
import weakref

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

import pytest  # noqa: E402
import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from tensordict.nn import TensorDictModule  # noqa: E402
from torch import nn  # noqa: E402

from rl.envs import GymEnv, PendulumEnv, check_env_specs  # noqa: E402
from rl.envs.transforms import (  # noqa: E402
    Compose,
    DoubleToFloat,
    NoopResetEnv,
    ObservationNorm,
    RewardSum,
    StepCounter,
    ToTensorImage,
    Transform,
    TransformedEnv,
)


class TestSeedExamples:
    def test_tutorial_pixels(self):
        base = GymEnv("Pendulum-v1", from_pixels=True, pixels_only=False)
        env = TransformedEnv(base, Compose(NoopResetEnv(3), ToTensorImage()))
        env.append_transform(ObservationNorm(in_keys=["pixels"], loc=2, scale=1))
        env.insert_transform(0, StepCounter())
        parent = env.transform[2].parent
        assert isinstance(parent, TransformedEnv)
        assert parent.base_env is base
        assert [type(t) for t in parent.transform] == [StepCounter, NoopResetEnv]
        td = env.reset()
        assert td["pixels"].shape == torch.Size([3, 500, 500])
        assert td["pixels"].dtype == torch.float32
        # ToTensorImage maps to [0, 1], then ObservationNorm(loc=2, scale=1) adds 2
        assert float(td["pixels"].min()) >= 2.0 and float(td["pixels"].max()) <= 3.0
        # StepCounter comes first: the no-op steps (0 to 2) are counted
        assert 0 <= td["step_count"].item() <= 2
        assert "observation" in td.keys()
        text = repr(env)
        assert "NoopResetEnv(noops=3, random=True)" in text
        assert "ObservationNorm(loc=2.0000, scale=1.0000, keys=['pixels'])" in text
        env.close()

    def test_readme_rollout_with_policy(self):
        env = TransformedEnv(PendulumEnv(), StepCounter(max_steps=200))
        policy = TensorDictModule(
            nn.Sequential(nn.LazyLinear(64), nn.Tanh(), nn.Linear(64, 1), nn.Tanh()),
            in_keys=["observation"],
            out_keys=["action"],
        )
        rollout = env.rollout(max_steps=32, policy=policy)
        assert rollout.batch_size == torch.Size([32])
        assert rollout["next", "reward"].shape[:1] == torch.Size([32])
        torch.testing.assert_close(rollout["next", "step_count"].squeeze(-1), torch.arange(1, 33))
        torch.testing.assert_close(rollout["step_count"].squeeze(-1), torch.arange(32))


class TestTransformList:
    def test_single_transform_attributes_read_through(self):
        # TorchRL's env.transform is the single transform itself
        env = TransformedEnv(PendulumEnv(), ObservationNorm(in_keys=["observation"]))
        env.transform.init_stats(num_iter=4, reduce_dim=0, cat_dim=0)
        norm = env.transform[0]
        assert env.transform.loc is norm.loc and norm.loc.shape == (3,)
        with pytest.raises(
            AttributeError, match="Compose \\(of one ObservationNorm\\) has no attribute 'nope'"
        ):
            _ = env.transform.nope
        two = Compose(StepCounter(), RewardSum())
        with pytest.raises(AttributeError, match="max_steps"):
            _ = two.max_steps  # several transforms: nothing is read through

    def test_single_transform_is_wrapped_in_compose(self):
        t = StepCounter()
        env = TransformedEnv(PendulumEnv(), t)
        assert isinstance(env.transform, Compose)
        assert env.transform[0] is t
        assert t.container is env  # through the Compose, as TorchRL
        assert env.transform.container is env

    def test_append_insert_index(self):
        env = TransformedEnv(PendulumEnv())
        a, b, c = StepCounter(), RewardSum(), DoubleToFloat()
        assert env.append_transform(a) is env
        env.append_transform(c)
        env.insert_transform(1, b)
        assert list(env.transform) == [a, b, c]
        assert env.transform[-1] is c
        assert len(env.transform) == 3
        env.insert_transform(-1, ObservationNorm(loc=0.0, scale=1.0))
        assert isinstance(env.transform[2], ObservationNorm)

    def test_insert_out_of_range(self):
        env = TransformedEnv(PendulumEnv(), StepCounter())
        with pytest.raises(IndexError, match="insert index 5 out of range"):
            env.insert_transform(5, RewardSum())
        with pytest.raises(ValueError, match="insert index -3 out of range"):  # TorchRL's type
            env.insert_transform(-3, RewardSum())

    def test_non_transform_rejected(self):
        with pytest.raises(TypeError, match="Compose expects a Transform or a callable, got int"):
            Compose(StepCounter(), 3)
        with pytest.raises(ValueError, match="Compose.insert expects a Transform"):  # TorchRL's
            TransformedEnv(PendulumEnv()).insert_transform(0, "ffff")
        with pytest.raises(TypeError, match="unexpected keyword arguments"):
            Compose(StepCounter(), foo=1)

    def test_callables_are_wrapped(self):
        # TorchRL: a plain callable on tensordicts is accepted wherever a transform is
        def add_y(data):
            if "y" in data.keys():
                data["y"] += 1
                return data
            return data.set("y", torch.zeros(data.shape))

        env = TransformedEnv(PendulumEnv(), add_y)
        env.append_transform(add_y)
        env.insert_transform(0, add_y)
        env.transform.append(add_y)
        assert env.reset()["y"] == 3
        env.transform = add_y
        assert env.reset()["y"] == 0
        t = Compose(transforms=[StepCounter(), add_y])
        assert len(t) == 2 and isinstance(t[1], Transform)
        with pytest.raises(TypeError, match="expects an EnvBase"):
            TransformedEnv(object(), StepCounter())

    def test_transform_in_two_containers(self):
        t = StepCounter()
        env1 = TransformedEnv(PendulumEnv(), t)
        with pytest.raises(RuntimeError, match="already belongs to Compose"):
            TransformedEnv(PendulumEnv(), t)
        env2 = TransformedEnv(PendulumEnv(), t.clone())
        assert env2.transform[0] is not t and env1.transform[0] is t

    def test_env_and_transforms_form_no_reference_cycle(self):
        # containers are weak references (TorchRL): a dropped env is freed at once (its
        # workers closed) and its transforms are free to join another env
        gc.disable()
        try:
            t = StepCounter()
            env = TransformedEnv(PendulumEnv(), Compose(t, RewardSum()))
            env.rollout(3)
            assert env.transform[1].parent.transform[0] is not t
            assert t.container is env
            ref = weakref.ref(env)
            del env
            assert ref() is None
        finally:
            gc.enable()
        assert t.container is None and t.parent is None
        assert TransformedEnv(PendulumEnv(), t).transform[0] is t

    def test_members_of_a_compose_in_no_env_can_move(self):
        # TorchRL: only a transform inside an env is pinned to its container
        loose = Compose(StepCounter(), RewardSum())
        base = PendulumEnv()
        env = TransformedEnv(base, Compose(DoubleToFloat(), *loose))
        assert [type(t) for t in env.transform] == [DoubleToFloat, StepCounter, RewardSum]
        assert env.transform[2].parent.base_env is base
        assert [type(t) for t in env.transform[2].parent.transform] == [DoubleToFloat, StepCounter]

    def test_append_plain_compose_flattens(self):
        env = TransformedEnv(PendulumEnv(), StepCounter())
        env.append_transform(Compose(RewardSum(), StepCounter(step_count_key="other")))
        assert [type(t) for t in env.transform] == [StepCounter, RewardSum, StepCounter]
        assert all(t.container is env for t in env.transform)
        assert [type(t) for t in env.transform[2].parent.transform] == [StepCounter, RewardSum]
        assert env.rollout(3)["next", "other"].squeeze(-1).tolist() == [1, 2, 3]

    def test_parent_chain(self):
        base = PendulumEnv()
        env = TransformedEnv(base, Compose(StepCounter(), RewardSum(), DoubleToFloat()))
        assert list(env.transform[0].parent.transform) == []
        p2 = env.transform[2].parent
        assert [type(t) for t in p2.transform] == [StepCounter, RewardSum]
        # parent holds copies: the original transforms keep their container
        assert p2.transform[0] is not env.transform[0]
        assert env.transform[0].container is env
        assert p2.base_env is base
        assert "step_count" in p2.observation_spec.keys()
        assert "episode_reward" in p2.observation_spec.keys()
        assert StepCounter().parent is None

    def test_parent_refreshed_after_init_stats(self):
        env = TransformedEnv(PendulumEnv(), Compose(ObservationNorm(), StepCounter()))
        assert env.transform[1].parent.transform[0].loc is None
        env.transform[0].init_stats(20)
        torch.testing.assert_close(env.transform[1].parent.transform[0].loc, env.transform[0].loc)

    def test_parent_of_nested_compose(self):
        inner = Compose(RewardSum(), DoubleToFloat())
        env = TransformedEnv(PendulumEnv(), Compose(StepCounter(), inner))
        assert env.transform[1] is inner
        parent = inner[1].parent
        assert [type(t) for t in parent.transform] == [StepCounter, RewardSum]

    def test_parent_shares_what_transforms_refer_to(self):
        # a lock (as in a logger held by VideoRecorder) can be neither deep-copied nor pickled
        lock = threading.Lock()
        holder = RewardSum()
        holder.resource = lock
        inner = Compose(holder, DoubleToFloat())
        env = TransformedEnv(PendulumEnv(), Compose(inner, StepCounter(max_steps=2)))
        parent = env.transform[-1].parent
        copied = parent.transform[0][0]
        assert copied is not holder and copied.resource is lock
        # the originals stay in their env; the copies belong to the parent
        assert holder.container is env and inner[1].container is env
        assert copied.container is parent
        assert [type(t) for t in parent.transform[0]] == [RewardSum, DoubleToFloat]
        assert "episode_reward" in parent.observation_spec.keys()
        assert env.rollout(5)["next", "step_count"].squeeze(-1).tolist() == [1, 2]

    def test_pop_and_slice(self):
        env = TransformedEnv(PendulumEnv(), Compose(StepCounter(), RewardSum()))
        assert "episode_reward" in env.observation_spec.keys()
        popped = env.transform.pop(1)
        assert isinstance(popped, RewardSum) and popped.container is None
        assert "episode_reward" not in env.observation_spec.keys()
        sliced = env.transform[0:1]
        assert isinstance(sliced, Compose) and isinstance(sliced[0], StepCounter)


class TestSpecsAndErrors:
    def test_specs_cached_and_locked(self):
        env = TransformedEnv(PendulumEnv(), StepCounter())
        assert env.is_spec_locked
        assert "step_count" in env.observation_spec.keys()
        assert env.__dict__["_output_spec"].is_locked and env.__dict__["_input_spec"].is_locked
        with pytest.raises(RuntimeError, match="locked"):
            env.observation_spec["extra"] = env.observation_spec["step_count"].clone()
        env.append_transform(StepCounter(step_count_key="other"))
        assert env.__dict__["_output_spec"] is None
        assert "other" in env.observation_spec.keys() and env.observation_spec.is_locked

    def test_spec_lock_opt_out(self):
        env = TransformedEnv(PendulumEnv(), StepCounter(), spec_locked=False)
        assert not env.is_spec_locked and not env.observation_spec.is_locked
        env.set_spec_lock_(True)
        assert env.observation_spec.is_locked

    @pytest.mark.parametrize("cache_specs", [True, False])
    def test_cache_specs(self, cache_specs):
        class Dynamic(Transform):
            enabled = False

            def transform_observation_spec(self, observation_spec):
                if self.enabled:
                    observation_spec["dynamic"] = observation_spec["observation"].clone()
                return observation_spec

        t = Dynamic()
        env = TransformedEnv(PendulumEnv(), t, cache_specs=cache_specs)
        assert "dynamic" not in env.observation_keys
        t.enabled = True
        # cached specs follow list changes only; uncached ones are rebuilt at each access
        assert ("dynamic" in env.observation_keys) is (not cache_specs)
        assert env.observation_spec.is_locked

    def test_batch_locked_is_read_only(self):
        env = TransformedEnv(PendulumEnv(), StepCounter())
        assert env.batch_locked
        with pytest.raises(RuntimeError, match="batch_locked is a read-only property"):
            env.batch_locked = False

    def test_allow_done_after_reset_is_the_base_envs(self):
        base = PendulumEnv()
        base.allow_done_after_reset = True
        env = TransformedEnv(base, StepCounter())
        assert env.allow_done_after_reset and env._allow_done_after_reset  # TorchRL's name
        with pytest.raises(RuntimeError, match="read-only property for TransformedEnvs"):
            env._allow_done_after_reset = False
        base._allow_done_after_reset = False
        assert not env.allow_done_after_reset and not base.allow_done_after_reset

    def test_wrong_batch_size_raises_value_and_runtime_error(self):
        env = TransformedEnv(PendulumEnv(), StepCounter())
        td = env.reset()
        td["action"] = env.action_spec.rand()
        wrong = td.expand(2).clone()
        # a ValueError (rl), and TorchRL's RuntimeError with its words
        for error in (ValueError, RuntimeError):
            with pytest.raises(error, match=r"Expected a tensordict with shape==env.batch_size, "):
                env.step(wrong)
        with pytest.raises(
            ValueError, match=r"batch_size \(2,\), expected the env batch_size \(\)"
        ):
            env.step(wrong)

    def test_attribute_error_inside_a_spec_is_reported(self):
        class Buggy(Transform):
            broken = True

            def transform_observation_spec(self, observation_spec):
                if self.broken:
                    raise AttributeError("bug")
                return observation_spec

        with pytest.raises(AttributeError):  # the specs are built with the env
            TransformedEnv(PendulumEnv(), Buggy())
        # not silently answered with the base env's spec
        Buggy.broken = False
        env = TransformedEnv(PendulumEnv(), Buggy())
        Buggy.broken = True
        env.empty_cache()
        with pytest.raises(AttributeError, match="observation_spec because an internal error"):
            _ = env.observation_spec
        with pytest.raises(AttributeError, match="no attribute 'tralala'"):
            _ = env.tralala

    def test_specs_recomputed_when_list_changes(self):
        env = TransformedEnv(PendulumEnv())
        assert "step_count" not in env.observation_spec.keys()
        env.append_transform(StepCounter())
        assert "step_count" in env.observation_spec.keys()
        assert "step_count" in env.state_spec.keys()
        check_env_specs(env)

    def test_missing_in_key_names_key_and_keys_present(self):
        t = ObservationNorm(loc=0.0, scale=1.0, in_keys=["pixels"])
        td = TensorDict({"observation": torch.zeros(3)}, [])
        with pytest.raises(
            KeyError,
            match=r"ObservationNorm expected in_key 'pixels'.*keys present: \['observation'\]",
        ):
            t(td)

    def test_missing_in_key_inside_env(self):
        env = TransformedEnv(PendulumEnv(), ObservationNorm(loc=0.0, scale=1.0, in_keys=["pixels"]))
        td = env.reset()  # reset tolerates absent keys
        with pytest.raises(KeyError, match="'pixels'.*keys present"):
            env.rand_step(td)

    def test_in_out_keys_length_mismatch(self):
        with pytest.raises(ValueError, match="as many out_keys as in_keys"):
            ObservationNorm(loc=0.0, scale=1.0, in_keys=["a", "b"], out_keys=["c"])

    def test_bad_key_type(self):
        with pytest.raises(TypeError, match="a key must be a str or a tuple of str"):
            ObservationNorm(loc=0.0, scale=1.0, in_keys=[3])
        with pytest.raises(TypeError, match="a key must be a str or a tuple of str"):
            ObservationNorm(loc=0.0, scale=1.0, in_keys=[("a", ())])

    def test_keys_of_keys_are_unravelled(self):
        # tensordict's unravel_key: a part of a key may be a key itself
        t = ObservationNorm(loc=0.0, scale=2.0, in_keys=[("a", (("b",),))], out_keys=[(("c",),)])
        assert t.in_keys == [("a", "b")] and t.out_keys == ["c"]
        td = t(TensorDict({("a", "b"): torch.ones(2)}, []))
        torch.testing.assert_close(td["c"], torch.full((2,), 2.0))

    def test_identity_transform(self):
        td = TensorDict({"x": torch.ones(2)}, [])
        assert Transform()(td) is td
        env = TransformedEnv(PendulumEnv(), Transform())
        check_env_specs(env)


class TestModuleBehaviour:
    def test_state_dict_round_trip(self):
        env = TransformedEnv(
            PendulumEnv(), Compose(StepCounter(), ObservationNorm(loc=1.0, scale=2.0))
        )
        sd = env.state_dict()
        assert set(sd) == {
            "transforms.1.loc",
            "transforms.1.scale",
            "transforms.1.standard_normal",
        }
        env2 = TransformedEnv(
            PendulumEnv(), Compose(StepCounter(), ObservationNorm(loc=0.0, scale=1.0))
        )
        env2.load_state_dict(sd)
        assert float(env2.transform[1].loc) == 1.0 and float(env2.transform[1].scale) == 2.0

    def test_pickle_relinks_containers(self):
        env = TransformedEnv(PendulumEnv(), Compose(StepCounter(max_steps=4), RewardSum()))
        env2 = pickle.loads(pickle.dumps(env))
        assert env2.transform.container is env2
        assert env2.transform[0].container is env2
        r = env2.rollout(10)
        assert r.batch_size == torch.Size([4])

    def test_compose_as_module_in_sequence(self):
        t = Compose(ObservationNorm(loc=1.0, scale=2.0), ObservationNorm(loc=0.0, scale=10.0))
        td = TensorDict({"observation": torch.tensor([1.0])}, [])
        # (1 * 2 + 1) * 10
        assert float(t(td)["observation"]) == 30.0
        assert isinstance(t, nn.Module)
        assert len(list(t.buffers())) == 4

    def test_in_tensordict_sequential(self):
        from tensordict.nn import TensorDictSequential

        torch.manual_seed(0)
        linear = nn.Linear(3, 1)
        policy = TensorDictModule(linear, in_keys=["observation"], out_keys=["action"])
        seq = TensorDictSequential(ObservationNorm(loc=1.0, scale=2.0), policy)
        obs = torch.randn(4, 3)
        out = seq(TensorDict(observation=obs.clone(), batch_size=[4]))
        torch.testing.assert_close(out["action"], linear(obs * 2 + 1))

    def test_attribute_forwarding_to_base_env(self):
        env = TransformedEnv(GymEnv("CartPole-v1"), StepCounter())
        assert env.env_name == "CartPole-v1"
        with pytest.raises(AttributeError, match="has no attribute '_not_there'"):
            _ = env._not_there
        env.close()
        assert env.base_env.is_closed


class TestLeafSpecs:
    """A leaf spec given to ``transform_*_spec`` is mapped as the in_key's (TorchRL)."""

    def test_reward_scaling_leaf(self):
        from rl.core import Unbounded
        from rl.envs.transforms import RewardScaling

        t = RewardScaling(loc=1.0, scale=2.0, in_keys=["reward"])
        out = t.transform_reward_spec(Unbounded((1,)))
        assert isinstance(out, Unbounded) and out.shape == (1,)

    def test_double_to_float_leaf(self):
        from rl.core import Unbounded

        t = DoubleToFloat(in_keys=["observation"])
        out = t.transform_observation_spec(Unbounded((3,), dtype=torch.float64))
        assert out.dtype == torch.float32 and out.shape == (3,)

    def test_cat_tensors_leaf(self):
        from rl.core import Bounded
        from rl.envs.transforms import CatTensors

        spec = Bounded(0, 1, (1, 4, 32))
        assert CatTensors(["a"], "b", dim=-2).transform_observation_spec(spec) is spec
        with pytest.raises(ValueError, match="cannot infer the output spec of 2 in_keys"):
            CatTensors(["a", "c"], "b", dim=-2).transform_observation_spec(spec)


class TestObservationTransform:
    def test_default_keys_and_subclasses(self):
        from rl.envs.transforms import (
            CatFrames,
            CenterCrop,
            Crop,
            FlattenObservation,
            GrayScale,
            ObservationTransform,
            Resize,
            VideoRecorder,
        )

        class Halve(ObservationTransform):
            def _apply_transform(self, obs):
                return obs / 2

        assert Halve().in_keys == ["observation", "pixels"]
        assert Halve(in_keys=["x"], out_keys=["y"]).out_keys == ["y"]
        td = Halve()(TensorDict(observation=torch.ones(2), pixels=torch.full((2,), 4.0)))
        assert td["observation"].tolist() == [0.5, 0.5] and td["pixels"].tolist() == [2.0, 2.0]
        made = [
            CatFrames(N=2, dim=-1),
            CenterCrop(2),
            Crop(2),
            FlattenObservation(-2, -1),
            GrayScale(),
            ObservationNorm(loc=0.0, scale=1.0),
            Resize(2, 2),
            ToTensorImage(),
            VideoRecorder(None, "tag"),
        ]
        assert all(isinstance(t, ObservationTransform) for t in made)
        # each keeps its own default keys
        assert ObservationNorm(loc=0.0, scale=1.0).in_keys == ["observation"]
        assert CatFrames(N=2, dim=-1).in_keys == ["pixels"]
        assert not isinstance(StepCounter(), ObservationTransform)
