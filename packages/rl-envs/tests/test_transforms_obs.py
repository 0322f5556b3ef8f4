"""Observation / reward / key / dtype transforms: values, specs, errors."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rl.core import Bounded, Composite, Unbounded
from rl.envs import EnvBase, GymEnv, PendulumEnv, check_env_specs
from rl.envs._done import default_done_spec
from rl.envs.transforms import (
    CatTensors,
    ClipTransform,
    Compose,
    DeviceCastTransform,
    DoubleToFloat,
    DTypeCastTransform,
    ExcludeTransform,
    FlattenObservation,
    ObservationNorm,
    RenameTransform,
    RewardClipping,
    RewardScaling,
    SelectTransform,
    SqueezeTransform,
    StepCounter,
    TransformedEnv,
    UnsqueezeTransform,
)


def _td(**kw):
    return TensorDict(kw, [])


class TestObservationNorm:
    def test_affine_values(self):
        t = ObservationNorm(loc=torch.tensor([1.0, 2.0]), scale=torch.tensor([2.0, 3.0]))
        out = t(_td(observation=torch.tensor([1.0, 1.0])))["observation"]
        torch.testing.assert_close(out, torch.tensor([3.0, 5.0]))
        t = ObservationNorm(loc=1.0, scale=2.0, standard_normal=True)
        torch.testing.assert_close(
            t(_td(observation=torch.tensor([5.0])))["observation"], torch.tensor([2.0])
        )

    def test_inverse(self):
        t = ObservationNorm(loc=1.0, scale=2.0, in_keys_inv=["action"], in_keys=[])
        td = _td(action=torch.tensor([3.0]))
        out = t.inv(td)
        assert float(out["action"]) == 1.0  # (3 - 1) / 2
        assert float(td["action"]) == 3.0  # inv works on a copy

    def test_env_specs_and_values(self):
        base = PendulumEnv()
        env = TransformedEnv(base, ObservationNorm(loc=1.0, scale=0.5))
        check_env_specs(env)
        torch.manual_seed(0)
        base.set_seed(0)
        raw = base.rollout(5)
        torch.manual_seed(0)
        env.set_seed(0)
        r = env.rollout(5)
        torch.testing.assert_close(r["next", "observation"], raw["next", "observation"] * 0.5 + 1.0)
        spec = env.observation_spec["observation"]
        assert isinstance(spec, Bounded)
        torch.testing.assert_close(spec.high, base.observation_spec["observation"].high * 0.5 + 1.0)

    def test_init_stats(self):
        base = PendulumEnv()
        env = TransformedEnv(base, ObservationNorm(in_keys=["observation"]))
        torch.manual_seed(0)
        env.set_seed(0)
        env.transform[0].init_stats(num_iter=300)
        t = env.transform[0]
        assert t.loc.shape == torch.Size([3]) and t.scale.shape == torch.Size([3])
        # the same random rollout of the base env, replayed: its stats are the ones used
        torch.manual_seed(0)
        base.set_seed(0)
        data = base.rollout(300)["observation"]
        mean, std = data.mean(0), data.std(0)
        torch.testing.assert_close(t.scale, 1 / std)
        torch.testing.assert_close(t.loc, -mean / std)
        normed = t(TensorDict(observation=data.clone(), batch_size=[300]))
        torch.testing.assert_close(normed["observation"].mean(0), torch.zeros(3), atol=1e-4, rtol=0)
        torch.testing.assert_close(normed["observation"].std(0), torch.ones(3))
        check_env_specs(env)
        with pytest.raises(RuntimeError, match="already set"):
            t.init_stats(10)

    def test_init_stats_batched_keep_dims(self):
        env = TransformedEnv(
            PendulumEnv(batch_size=[4]),
            ObservationNorm(in_keys=["observation"], standard_normal=True),
        )
        env.transform[0].init_stats(num_iter=50, reduce_dim=(0, 1), cat_dim=1)
        assert env.transform[0].loc.shape == torch.Size([3])
        check_env_specs(env)

    def test_errors(self):
        with pytest.raises(ValueError, match="scale must be non-zero with standard_normal=True"):
            ObservationNorm(loc=0.0, scale=0.0, standard_normal=True)
        # obs * 0 + loc is a valid (constant) map, as in TorchRL
        const = ObservationNorm(loc=2.0, scale=0.0)(TensorDict({"observation": torch.ones(3)}, []))
        assert const["observation"].tolist() == [2.0, 2.0, 2.0]
        with pytest.raises(ValueError, match="needs both loc and scale"):
            ObservationNorm(loc=1.0)
        with pytest.raises(RuntimeError, match="call init_stats"):
            ObservationNorm()(_td(observation=torch.zeros(1)))
        with pytest.raises(RuntimeError, match="needs the transform to be in a TransformedEnv"):
            ObservationNorm().init_stats(5)
        with pytest.raises(ValueError, match="num_iter must be a positive int"):
            ObservationNorm().init_stats(0)

    def test_state_dict_initialises_uninitialised(self):
        src = ObservationNorm(loc=torch.ones(3), scale=torch.full((3,), 2.0), standard_normal=True)
        dst = ObservationNorm()
        dst.load_state_dict(src.state_dict())
        torch.testing.assert_close(dst.loc, torch.ones(3))
        torch.testing.assert_close(dst.scale, torch.full((3,), 2.0))
        assert dst.standard_normal is True
        out = dst(_td(observation=torch.full((3,), 5.0)))["observation"]
        torch.testing.assert_close(out, torch.full((3,), 2.0))  # (5 - 1) / 2

    def test_state_dict_holds_standard_normal(self):
        sd = ObservationNorm(loc=1.0, scale=2.0, standard_normal=True).state_dict()
        assert list(sd) == ["standard_normal", "loc", "scale"]
        assert sd["standard_normal"].dtype == torch.bool and bool(sd["standard_normal"])
        # loading flips the map of an initialised norm too: 3 * 2 + 1 -> (3 - 1) / 2
        dst = ObservationNorm(loc=0.0, scale=1.0)
        dst.load_state_dict(sd)
        assert float(dst(_td(observation=torch.tensor(3.0)))["observation"]) == 1.0
        dst.load_state_dict(ObservationNorm(loc=1.0, scale=2.0).state_dict())
        assert float(dst(_td(observation=torch.tensor(3.0)))["observation"]) == 7.0

    def test_state_dict_without_standard_normal(self):
        dst = ObservationNorm(loc=0.0, scale=1.0, standard_normal=True)
        old = {"loc": torch.tensor(1.0), "scale": torch.tensor(2.0)}
        with pytest.raises(
            RuntimeError, match='Missing key\\(s\\) in state_dict: "standard_normal"'
        ):
            dst.load_state_dict(old)
        result = dst.load_state_dict(old, strict=False)
        assert result.missing_keys == ["standard_normal"] and result.unexpected_keys == []
        assert dst.standard_normal is True and float(dst.scale) == 2.0

    def test_uninitialised_state_dict_raises(self):
        env = TransformedEnv(PendulumEnv(), ObservationNorm(in_keys=["observation"]))
        with pytest.raises(
            ValueError, match="Attempted to use an uninitialized parameter.*init_stats"
        ):
            env.state_dict()
        env.transform.init_stats(10)
        assert set(env.state_dict()) == {
            "transforms.0.standard_normal",
            "transforms.0.loc",
            "transforms.0.scale",
        }


class TestRewardScalingClipping:
    def test_scaling(self):
        t = RewardScaling(loc=1.0, scale=2.0)
        assert float(t(_td(reward=torch.tensor([3.0])))["reward"]) == 7.0
        t = RewardScaling(loc=1.0, scale=2.0, standard_normal=True)
        assert float(t(_td(reward=torch.tensor([3.0])))["reward"]) == 1.0
        with pytest.raises(ValueError, match="RewardScaling scale must be non-zero"):
            RewardScaling(0.0, 0.0)

    def test_scaling_env(self):
        env = TransformedEnv(PendulumEnv(), RewardScaling(loc=0.0, scale=0.1))
        check_env_specs(env)
        r = env.rollout(5)
        assert (r["next", "reward"] <= 0).all() and (r["next", "reward"] >= -1.7).all()

    def test_clipping(self):
        t = RewardClipping(-1.0, 1.0)
        out = t(TensorDict(reward=torch.tensor([[-5.0], [0.5], [3.0]]), batch_size=[3]))["reward"]
        assert out.squeeze(-1).tolist() == [-1.0, 0.5, 1.0]
        env = TransformedEnv(PendulumEnv(), RewardClipping(-1.0, 0.0))
        spec = env.reward_spec
        assert isinstance(spec, Bounded) and float(spec.low.min()) == -1.0
        check_env_specs(env)
        with pytest.raises(ValueError, match="clamp_min <= clamp_max"):
            RewardClipping(1.0, -1.0)
        with pytest.raises(ValueError, match="needs clamp_min or clamp_max"):
            RewardClipping()


class TestClipTransform:
    def test_values_and_spec(self):
        env = TransformedEnv(
            PendulumEnv(), ClipTransform(in_keys=["observation"], low=-0.5, high=0.5)
        )
        r = env.rollout(10)
        assert r["next", "observation"].abs().max() <= 0.5
        spec = env.observation_spec["observation"]
        assert float(spec.high.max()) == 0.5 and float(spec.low.min()) == -0.5
        check_env_specs(env)

    def test_inverse_on_actions(self):
        env = TransformedEnv(
            PendulumEnv(), ClipTransform(in_keys_inv=["action"], low=-1.0, high=1.0)
        )
        # the action spec stays the inner env's: anything sent is clipped on its way in
        assert float(env.action_spec.high.max()) == 2.0
        td = env.reset()
        td["action"] = torch.tensor([1.0])
        out = env.transform.inv(td.set("action", torch.tensor([3.0])))
        assert float(out["action"]) == 1.0
        check_env_specs(env)

    def test_errors(self):
        with pytest.raises(ValueError, match="`low` must be strictly lower than `high`"):
            ClipTransform(in_keys=["x"], low=1.0, high=1.0)
        with pytest.raises(TypeError, match="Either one or both of `high` and `low`"):
            ClipTransform(in_keys=["x"])
        with pytest.raises(TypeError, match="low and high must be scalars or None"):
            ClipTransform(in_keys=["x"], low=torch.zeros(2))
        with pytest.raises(TypeError):  # the bounds are keyword-only, as TorchRL
            ClipTransform(["x"], None, None, None, -1.0, 1.0)


class Float64Env(EnvBase):
    """A float64 env: the observation is the last action; _step checks the action dtype."""

    def __init__(self):
        super().__init__()
        self.observation_spec = Composite(observation=Unbounded(shape=(2,), dtype=torch.float64))
        self.action_spec = Bounded(-1.0, 1.0, shape=(2,), dtype=torch.float64)
        self.reward_spec = Unbounded(shape=(1,), dtype=torch.float64)
        self.full_done_spec = default_done_spec((), truncated=True)  # it truncates

    def _reset(self, tensordict):
        flag = torch.zeros(1, dtype=torch.bool)
        return TensorDict(
            observation=torch.zeros(2, dtype=torch.float64),
            done=flag,
            terminated=flag.clone(),
            truncated=flag.clone(),
        )

    def _step(self, tensordict):
        action = tensordict["action"]
        if action.dtype != torch.float64:
            raise TypeError(f"Float64Env needs a float64 action, got {action.dtype}")
        flag = torch.zeros(1, dtype=torch.bool)
        return TensorDict(
            observation=action.clone(),
            reward=action.sum(-1, keepdim=True),
            done=flag,
            terminated=flag.clone(),
            truncated=flag.clone(),
        )

    def _set_seed(self, seed):
        pass


class TestDTypeCasts:
    def test_double_to_float_on_float64_env(self):
        env = TransformedEnv(Float64Env(), DoubleToFloat())
        assert env.observation_spec["observation"].dtype == torch.float32
        assert env.reward_spec.dtype == torch.float32
        assert env.action_spec.dtype == torch.float32
        check_env_specs(env)  # the env raises if it gets a float32 action
        td = env.reset()
        td["action"] = torch.tensor([0.25, -0.5])
        out = env.step(td)
        assert out["next", "observation"].dtype == torch.float32
        torch.testing.assert_close(out["next", "observation"], torch.tensor([0.25, -0.5]))
        assert td["action"].dtype == torch.float32  # the caller's action is not replaced

    def test_double_to_float_on_data(self):
        td = _td(a=torch.zeros(2, dtype=torch.float64), b=torch.zeros(2, dtype=torch.int64))
        out = DoubleToFloat()(td)
        assert out["a"].dtype == torch.float32 and out["b"].dtype == torch.int64

    def test_double_to_float_env_with_float64_specs(self):
        base = GymEnv("Pendulum-v1", spec_locked=False)  # edited in place below
        base.observation_spec["observation"] = Unbounded(shape=(3,), dtype=torch.float64)
        base.action_spec = Bounded(-2.0, 2.0, shape=(1,), dtype=torch.float64)
        env = TransformedEnv(base, DoubleToFloat())
        assert env.observation_spec["observation"].dtype == torch.float32
        assert env.action_spec.dtype == torch.float32
        td = env.reset()
        td["action"] = torch.zeros(1, dtype=torch.float32)
        inner = env.transform.inv(td)
        assert inner["action"].dtype == torch.float64
        env.close()

    def test_double_to_float_inverse_on_data(self):
        # outside an env, inv casts every float32 leaf back to float64 (TorchRL)
        td = _td(a=torch.ones(2), n=torch.zeros(2, dtype=torch.int64))
        out = DoubleToFloat().inv(td)
        assert out["a"].dtype == torch.float64 and out["n"].dtype == torch.int64
        assert td["a"].dtype == torch.float32  # on a copy of the input
        torch.testing.assert_close(out["a"], torch.ones(2, dtype=torch.float64))

    def test_double_to_float_in_env_leaves_float32_actions(self):
        # in an env, the keys come from the specs: a float32 action stays float32
        env = TransformedEnv(PendulumEnv(), DoubleToFloat())
        td = env.reset().set("action", torch.zeros(1))
        assert env.transform.inv(td)["action"].dtype == torch.float32
        check_env_specs(env)

    def test_input_spec_without_state_spec(self):
        t = DoubleToFloat(in_keys=["action"], in_keys_inv=["action"])
        spec = Composite(
            full_action_spec=Composite(action=Bounded(0, 1, (3,), dtype=torch.float64)),
            full_state_spec=None,
        )
        out = t.transform_input_spec(spec)
        assert out["full_action_spec", "action"].dtype == torch.float32

    def test_explicit_keys_and_inverse(self):
        t = DTypeCastTransform(torch.int64, torch.float32, in_keys=["count"], in_keys_inv=["act"])
        td = _td(count=torch.tensor([3]), act=torch.tensor([1.0]))
        assert t(td)["count"].dtype == torch.float32
        assert t.inv(td)["act"].dtype == torch.int64
        with pytest.raises(TypeError, match="dtype_in must be a torch.dtype"):
            DTypeCastTransform("int64", torch.float32)

    def test_env_step_count_as_float(self):
        env = TransformedEnv(
            PendulumEnv(),
            Compose(
                StepCounter(),
                DTypeCastTransform(
                    torch.int64, torch.float32, in_keys=["step_count"], out_keys=["t"]
                ),
            ),
        )
        assert env.observation_spec["t"].dtype == torch.float32
        r = env.rollout(3)
        assert r["next", "t"].squeeze(-1).tolist() == [1.0, 2.0, 3.0]
        check_env_specs(env)


class TestDeviceCast:
    def test_cpu_round_trip(self):
        env = TransformedEnv(PendulumEnv(), DeviceCastTransform("cpu"))
        assert env.device == torch.device("cpu")
        check_env_specs(env)

    def test_indexed_cpu_device(self):
        # torch has one CPU: data sent to "cpu:1" reports "cpu", which check_env_specs
        # takes as the specs' "cpu:1"
        env = TransformedEnv(PendulumEnv(device="cpu:0"), DeviceCastTransform("cpu:1"))
        assert env.device == torch.device("cpu:1")
        assert env.rollout(2)["next", "observation"].device == torch.device("cpu")
        check_env_specs(env)

    def test_some_keys_leave_the_env_without_a_device(self):
        # as TorchRL: entries on two devices, so the env and the data have none
        cast = DeviceCastTransform("cpu:1", in_keys=["observation"], in_keys_inv=["action"])
        env = TransformedEnv(PendulumEnv(device="cpu:0"), cast)
        assert env.device is None
        check_env_specs(env)
        t = DeviceCastTransform("cpu:1", "cpu:0", in_keys=["a"], out_keys=["b"])
        td = TensorDict({"a": torch.ones(())}, [], device="cpu:0")
        out = t._call(td)
        assert out.device is None and td.device == torch.device("cpu:0")
        assert "b" in out.keys() and "b" not in td.keys()

    @pytest.mark.gpu
    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
    def test_cuda(self):
        env = TransformedEnv(PendulumEnv(), DeviceCastTransform("cuda:0"))
        td = env.reset()
        assert td.device.type == "cuda"
        assert env.rollout(3)["next", "observation"].device.type == "cuda"


class TestShapes:
    def test_flatten(self):
        t = FlattenObservation(-2, -1, in_keys=["x"])
        assert t(TensorDict(x=torch.zeros(4, 2, 3), batch_size=[4]))["x"].shape == torch.Size(
            [4, 6]
        )
        with pytest.raises(ValueError, match="negative int"):
            FlattenObservation(0, 1)

    def test_unsqueeze_squeeze_env(self):
        env = TransformedEnv(
            PendulumEnv(batch_size=[2]),
            Compose(
                UnsqueezeTransform(-1, in_keys=["observation"], in_keys_inv=["action"]),
            ),
        )
        assert env.observation_spec["observation"].shape == torch.Size([2, 3, 1])
        assert env.action_spec.shape == torch.Size([2, 1, 1])
        r = env.rollout(3)
        assert r["next", "observation"].shape == torch.Size([2, 3, 3, 1])
        check_env_specs(env)
        env2 = TransformedEnv(PendulumEnv(), SqueezeTransform(-1, in_keys=["reward"]))
        assert env2.reward_spec.shape == torch.Size([])
        assert env2.rollout(2)["next", "reward"].shape == torch.Size([2])
        check_env_specs(env2)

    def test_squeeze_wrong_dim_at_spec_time(self):
        with pytest.raises(ValueError, match="cannot squeeze dim -1 of 'observation'.*size 3"):
            TransformedEnv(PendulumEnv(), SqueezeTransform(-1, in_keys=["observation"]))

    def test_flatten_env(self):
        env = TransformedEnv(
            PendulumEnv(),
            Compose(
                UnsqueezeTransform(-1, in_keys=["observation"]),
                FlattenObservation(-2, -1, in_keys=["observation"]),
            ),
        )
        assert env.observation_spec["observation"].shape == torch.Size([3])
        check_env_specs(env)


class TestKeys:
    def test_rename_env(self):
        env = TransformedEnv(
            PendulumEnv(),
            RenameTransform(["observation"], ["obs"], in_keys_inv=["action"], out_keys_inv=["act"]),
        )
        assert (
            "obs" in env.observation_spec.keys()
            and "observation" not in env.observation_spec.keys()
        )
        assert list(env.full_action_spec.keys()) == ["act"]
        td = env.reset()
        assert "obs" in td.keys() and "observation" not in td.keys()
        td["act"] = torch.zeros(1)
        out = env.step(td)
        assert "obs" in out["next"].keys()
        check_env_specs(env)

    def test_rename_copy(self):
        out = RenameTransform(["a"], ["b"], create_copy=True)(_td(a=torch.ones(1)))
        assert set(out.keys()) == {"a", "b"}

    def test_exclude(self):
        env = TransformedEnv(PendulumEnv(), Compose(StepCounter(), ExcludeTransform("step_count")))
        assert "step_count" not in env.observation_spec.keys()
        assert "step_count" not in env.reset().keys()
        check_env_specs(env)
        # as TorchRL: a reward (or done) entry can be excluded too
        env = TransformedEnv(PendulumEnv(), ExcludeTransform("reward"))
        assert env.reward_keys == [] and "reward" not in env.rollout(2)["next"].keys()

    def test_select(self):
        env = TransformedEnv(PendulumEnv(), Compose(StepCounter(), SelectTransform("observation")))
        assert list(env.observation_spec.keys()) == ["observation"]
        r = env.rollout(3)
        assert "step_count" not in r.keys()
        assert "reward" in r["next"].keys()
        check_env_specs(env)

    def test_cat_tensors(self):
        env = TransformedEnv(
            PendulumEnv(batch_size=[2]),
            Compose(
                StepCounter(),
                CatTensors(["observation", "step_count"], "vec", del_keys=False),
            ),
        )
        # different dtypes: the result type of float32 and int64 is float32
        spec = env.observation_spec["vec"]
        assert spec.shape == torch.Size([2, 4]) and spec.dtype == torch.float32
        r = env.rollout(3)
        torch.testing.assert_close(r["next", "vec"][..., :3], r["next", "observation"])
        assert r["next", "vec"][..., 3].tolist() == [[1, 2, 3], [1, 2, 3]]
        check_env_specs(env)
        env = TransformedEnv(PendulumEnv(), CatTensors(["observation"], "vec"))
        assert list(env.observation_spec.keys()) == ["vec"]
        assert "observation" not in env.rollout(2).keys()
        check_env_specs(env)

    def test_cat_tensors_errors(self):
        with pytest.raises(ValueError, match="needs at least one in_key"):
            CatTensors([])
        t = CatTensors(["a", "b"], "ab")
        with pytest.raises(KeyError, match="'b'.*keys present"):
            t(_td(a=torch.zeros(1)))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
class TestTransformJoinsTheEnvDevice:
    """As TorchRL: a transform's buffers move to the env's device when it joins it (built
    with the env, set, appended or inserted)."""

    def test_constructor_append_insert_and_setter(self):
        from rl.envs.transforms import ObservationNorm, RewardScaling

        env = TransformedEnv(PendulumEnv(device="cuda:0"), ObservationNorm(loc=0.5, scale=2.0))
        assert env.transform[0].loc.device.type == "cuda"
        env.append_transform(RewardScaling(loc=1.0, scale=3.0))
        env.insert_transform(0, ObservationNorm(loc=0.0, scale=1.0))
        assert all(t.loc.device.type == "cuda" for t in env.transform)
        td = env.rollout(3)
        assert td["next", "observation"].device.type == "cuda"
        env.transform = ObservationNorm(loc=0.5, scale=2.0)
        assert env.transform[0].loc.device.type == "cuda"
        obs = torch.randn(5, 3, device="cuda:0")
        out = env.transform(TensorDict(observation=obs, batch_size=[5], device="cuda:0"))
        torch.testing.assert_close(out["observation"], obs * 2.0 + 0.5)
