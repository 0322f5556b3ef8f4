"""TorchRL-parity transforms (part A): values checked against TorchRL 0.14.1 outputs.

The literal expectations below were computed by running TorchRL 0.14.1 on the same
inputs (or, for ``Crop``, by hand from ``torchvision.transforms.functional.crop``).
"""

from __future__ import annotations

import doctest
import importlib
import warnings

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from rl.core import Binary, Bounded, Composite, Unbounded
from rl.envs import (
    BatchSizeTransform,
    BinarizeReward,
    CartPoleEnv,
    CatFrames,
    Compose,
    Crop,
    ExpandAs,
    FiniteTensorDictCheck,
    Hash,
    LineariseRewards,
    ModuleTransform,
    NextObservationDelta,
    PendulumEnv,
    PermuteTransform,
    PinMemoryTransform,
    RandomCropTensorDict,
    RemoveEmptySpecs,
    Reward2GoTransform,
    RunningMeanStd,
    SerialEnv,
    SignTransform,
    Stack,
    StepCounter,
    SuccessReward,
    Timer,
    TrajCounter,
    TransformedEnv,
    UnaryTransform,
    VecNorm,
    VecNormV2,
    check_env_specs,
)


def _close(actual, expected, atol=1e-4):
    torch.testing.assert_close(
        actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=0
    )


def _buffer(transform):
    data = pytest.importorskip("rl.data")
    return data.ReplayBuffer(
        storage=data.LazyTensorStorage(100),
        sampler=data.SamplerWithoutReplacement(shuffle=False),
        transform=transform,
    )


class TestRewardMaps:
    def test_binarize(self):
        td = TensorDict({"reward": torch.tensor([[0.5], [0.0], [-1.0]])}, [3])
        out = BinarizeReward()(td)["reward"]
        assert out.dtype == torch.int8
        assert out.squeeze(-1).tolist() == [1, 0, 0]
        with pytest.raises(RuntimeError, match="last dim is a singleton"):
            BinarizeReward()(TensorDict(reward=torch.zeros(2)))

    def test_binarize_env_spec(self):
        env = TransformedEnv(PendulumEnv(), BinarizeReward())
        spec = env.reward_spec
        assert isinstance(spec, Binary) and spec.shape == (1,) and spec.dtype == torch.int8
        r = env.rollout(4)
        assert r["next", "reward"].dtype == torch.int8
        check_env_specs(env)

    def test_sign(self):
        td = TensorDict({"obs": torch.tensor([[0.5, 0.0, -2.0]])}, [1])
        assert SignTransform(in_keys=["obs"])(td)["obs"].tolist() == [[1.0, 0.0, -1.0]]
        env = TransformedEnv(PendulumEnv(), SignTransform(in_keys=["observation", "reward"]))
        for spec in (env.observation_spec["observation"], env.reward_spec):
            assert isinstance(spec, Bounded)
            assert spec.low.unique().tolist() == [-1.0] and spec.high.unique().tolist() == [1.0]
        r = env.rollout(5)
        assert set(r["next", "observation"].unique().tolist()) <= {-1.0, 0.0, 1.0}
        check_env_specs(env)

    def test_sign_inverse(self):
        t = SignTransform(in_keys_inv=["action"])
        assert t.inv(TensorDict(action=torch.tensor([-0.3, 2.0])))["action"].tolist() == [-1, 1]

    def test_linearise(self):
        t = LineariseRewards(in_keys=["reward"], weights=[1.0, -2.0])
        out = t(TensorDict({"reward": torch.tensor([[3.0, 1.0], [0.5, 2.0]])}, [2]))["reward"]
        _close(out, [[1.0], [-3.5]])
        spec = t.transform_reward_spec(
            Composite(
                reward=Bounded(torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 2.0]), shape=(2,))
            )
        )["reward"]
        _close(spec.low, [-5.0])
        _close(spec.high, [1.0])
        spec = LineariseRewards(in_keys=["reward"]).transform_reward_spec(
            Composite(reward=Unbounded(shape=(3, 4)))
        )["reward"]
        assert isinstance(spec, Unbounded) and spec.shape == (3, 1)

    def test_linearise_errors(self):
        with pytest.raises(ValueError, match="1-d weights"):
            LineariseRewards(in_keys=["reward"], weights=torch.ones(2, 2))
        t = LineariseRewards(in_keys=["reward"], weights=[1.0, 1.0, 1.0])
        with pytest.raises(ValueError, match="3 weights but the reward has 2 objectives"):
            t(TensorDict(reward=torch.ones(2)))
        with pytest.raises(NotImplementedError, match="discrete reward"):
            t.transform_reward_spec(Composite(reward=Binary(n=3, shape=(3,))))

    def test_success_reward(self):
        td = TensorDict({"success": torch.tensor([[True], [False]])}, [2])
        _close(SuccessReward(scale=2.5)(td)["reward"], [[2.5], [0.0]])
        env = TransformedEnv(PendulumEnv(), SuccessReward(success_key="done", scale=-2.0))
        spec = env.reward_spec
        assert isinstance(spec, Bounded) and spec.shape == (1,)
        _close(spec.low, [-2.0])
        _close(spec.high, [0.0])
        assert env.rollout(3)["next", "reward"].abs().sum() == 0  # never done in 3 steps
        with pytest.raises(RuntimeError, match="could not infer the reward shape"):
            _ = TransformedEnv(
                PendulumEnv(), SuccessReward(success_key="nope", reward_key="r2")
            ).reward_spec


class TestReward2Go:
    def _data(self):
        done = torch.zeros(2, 6, 1, dtype=torch.bool)
        done[0, 2] = done[0, 5] = done[1, 3] = True
        reward = torch.arange(12.0).reshape(2, 6, 1)
        return TensorDict({"next": {"done": done, "reward": reward}}, [2, 6])

    # TorchRL 0.14.1: Reward2GoTransform(gamma=0.9, out_keys=["r2g"]).inv(td)["r2g"]
    EXPECTED = [2.52, 2.8, 2.0, 10.65, 8.5, 5.0, 25.341, 21.49, 16.1, 9.0, 19.9, 11.0]

    def test_values(self):
        data = self._data()
        out = Reward2GoTransform(gamma=0.9, out_keys=["r2g"]).inv(data)
        _close(out["r2g"].flatten(), self.EXPECTED, atol=1e-3)
        assert "r2g" not in data.keys()  # inv works on a shallow copy, as TorchRL's
        # forward (sampling side) leaves the data alone
        td = self._data()
        assert Reward2GoTransform(gamma=0.9)(td) is td

    def test_replay_buffer(self):
        rb = _buffer(Reward2GoTransform(gamma=0.9, out_keys=["r2g"]))
        rb.extend(self._data())
        full = rb[:]
        _close(full["r2g"].flatten(), self.EXPECTED, atol=1e-3)

    def test_errors(self):
        with pytest.raises(ValueError, match="only an inverse transform"):
            TransformedEnv(PendulumEnv(), Reward2GoTransform()).reset()
        # TorchRL's public message, matched as a pattern by its users
        with pytest.raises(ValueError, match=Reward2GoTransform.ENV_ERR):
            TransformedEnv(PendulumEnv(), Reward2GoTransform())
        # inside a Compose appended to an env, as TorchRL refuses it too
        with pytest.raises(ValueError, match=Reward2GoTransform.ENV_ERR):
            TransformedEnv(PendulumEnv()).append_transform(Compose(Reward2GoTransform()))
        no_end = TensorDict(
            {"next": {"done": torch.zeros(3, 1, dtype=torch.bool), "reward": torch.ones(3, 1)}},
            [3],
        )
        with pytest.raises(RuntimeError, match="no episode end"):
            Reward2GoTransform().inv(no_end)
        with pytest.raises(KeyError, match="none of its in_keys"):
            Reward2GoTransform(in_keys=[("next", "r")]).inv(self._data())


class TestHashUnary:
    # sha256("abc") and sha256("x" + "abc") as TorchRL's reproducible_hash gives them
    ABC = [186, 120, 22, 191, 143, 1, 207, 234, 65, 65, 64, 222, 93, 174, 34, 35]
    XABC = [209, 92, 96, 156, 120, 179, 16, 110, 197, 75, 159, 92, 76, 112, 67, 118]

    def test_hash_values(self):
        out = Hash(in_keys=["s"], out_keys=["h"])(TensorDict(s="abc"))["h"]
        assert out.dtype == torch.uint8 and out.shape == (32,)
        assert out[:16].tolist() == self.ABC
        seeded = Hash(in_keys=["s"], out_keys=["h"], seed="x")(TensorDict(s="abc"))["h"]
        assert seeded[:16].tolist() == self.XABC

    def test_hash_inverse_and_state(self):
        t = Hash(in_keys=["s"], out_keys=["h"], in_keys_inv=["s"], out_keys_inv=["h"])
        h = t(TensorDict(s="abc"))["h"]
        assert t.inv(TensorDict(h=h))["s"] == "abc"
        assert t.state_dict()["_repertoire"][tuple(h.tolist())] == "abc"
        with pytest.raises(RuntimeError, match="keeps no repertoire"):
            Hash(in_keys=["s"], out_keys=["h"]).get_input_from_hash(h)
        with pytest.raises(ValueError, match="must return a tensor"):
            Hash(in_keys=["s"], out_keys=["h"], hash_fn=lambda s: 3)(TensorDict(s="a"))

    def test_unary_then_hash_in_env(self):
        env = PendulumEnv().append_transform(
            UnaryTransform(
                in_keys=["observation"],
                out_keys=["obs_str"],
                fn=lambda t: str(t.numpy().tobytes()),
            )
        )
        env = env.append_transform(Hash(in_keys=["obs_str"], out_keys=["obs_hash"]))
        spec = env.observation_spec["obs_hash"]
        assert spec.shape == (32,) and spec.dtype == torch.uint8
        td = env.reset()
        assert td["obs_str"] == str(td["observation"].numpy().tobytes())
        assert torch.equal(td["obs_hash"], Hash.reproducible_hash(td["obs_str"]))
        nxt = env.step(td.set("action", env.action_spec.rand()))["next"]
        assert torch.equal(nxt["obs_hash"], Hash.reproducible_hash(nxt["obs_str"]))

    def test_unary_spec_and_env(self):
        t = UnaryTransform(
            in_keys=["observation"],
            out_keys=["o2"],
            fn=lambda x: x.sum(-1, keepdim=True).long(),
        )
        env = TransformedEnv(PendulumEnv(), t)
        spec = env.observation_spec["o2"]
        assert spec.shape == (1,) and spec.dtype == torch.int64
        r = env.rollout(3)
        assert torch.equal(r["next", "o2"], r["next", "observation"].sum(-1, keepdim=True).long())
        check_env_specs(env)

    def test_unary_inverse(self):
        t = UnaryTransform(
            in_keys=[], out_keys=[], in_keys_inv=["a"], out_keys_inv=["b"], fn=lambda x: x * 3
        )
        assert t.inv(TensorDict(b=torch.ones(1)))["a"].tolist() == [3.0]
        with pytest.raises(TypeError, match="fn must be callable"):
            UnaryTransform(in_keys=["a"], out_keys=["b"], fn=3)


class TestStackExpand:
    def test_stack(self):
        td = TensorDict({"a": torch.zeros(2), "b": torch.ones(2), "c": torch.ones(2)}, [])
        out = Stack(in_keys=["a", "b"], out_key="ab", dim=-2)(td.clone())
        assert out["ab"].tolist() == [[0.0, 0.0], [1.0, 1.0]]
        assert sorted(out.keys()) == ["ab", "c"]
        kept = Stack(in_keys=["a", "b"], out_key="ab", del_keys=False)(td.clone())
        assert sorted(kept.keys()) == ["a", "ab", "b", "c"]
        spec = Stack(in_keys=["a", "b"], out_key="ab").transform_observation_spec(
            Composite(a=Bounded(-1.0, 1.0, shape=(2,)), b=Bounded(-1.0, 1.0, shape=(2,)))
        )
        assert sorted(spec.keys()) == ["ab"] and spec["ab"].shape == (2, 2)

    def test_stack_nested_parent_removed(self):
        td = TensorDict({"g": {"a": torch.zeros(1), "b": torch.ones(1)}}, [])
        out = Stack(in_keys=[("g", "a"), ("g", "b")], out_key="ab")(td)
        assert sorted(out.keys()) == ["ab"]

    def test_stack_inverse(self):
        t = Stack(in_keys=["a", "b"], out_key="ab", in_key_inv="act", out_keys_inv=["a1", "a2"])
        out = t.inv(TensorDict(act=torch.tensor([[1.0, 2.0], [3.0, 4.0]])))
        assert out["a1"].tolist() == [1.0, 3.0] and sorted(out.keys()) == ["a1", "a2"]

    def test_stack_errors(self):
        with pytest.raises(ValueError, match="dim should be negative"):
            Stack(in_keys=["a", "b"], out_key="c", dim=0)
        with pytest.raises(ValueError, match="out_keys_inv but no in_key_inv"):
            Stack(in_keys=["a"], out_key="c", out_keys_inv=["x"])
        with pytest.raises(ValueError, match="cannot be one of in_keys"):
            Stack(in_keys=["a", "b"], out_key="a")
        with pytest.raises(KeyError, match="expected in_key 'b'"):
            Stack(in_keys=["a", "b"], out_key="c")(TensorDict(a=torch.zeros(1)))

    def test_expand_as(self):
        td = TensorDict({"done": torch.tensor([True]), "obs": torch.zeros(1, 3)}, [])
        out = ExpandAs("done", "obs", out_key="d")(td)["d"]
        assert out.shape == (1, 3) and out.all()
        env = TransformedEnv(PendulumEnv(), ExpandAs("done", "observation", out_key="done_obs"))
        assert env.observation_spec["done_obs"].shape == (3,)
        r = env.rollout(3)
        assert r["next", "done_obs"].shape == (3, 3) and r["done_obs"].shape == (3, 3)
        check_env_specs(env)
        with pytest.raises(KeyError, match="was not found in the env's output specs"):
            _ = TransformedEnv(PendulumEnv(), ExpandAs("nope", "observation")).observation_spec


class TestPermuteCrop:
    def test_permute(self):
        x = torch.arange(24.0).reshape(2, 3, 4)
        t = PermuteTransform([-1, -3, -2], in_keys=["x"], in_keys_inv=["y"], out_keys_inv=["z"])
        out = t(TensorDict(x=x))["x"]
        assert out.shape == (4, 2, 3)
        assert out.flatten()[:8].tolist() == [0.0, 4.0, 8.0, 12.0, 16.0, 20.0, 1.0, 5.0]
        back = t.inv(TensorDict(z=x))["y"]
        assert back.shape == (3, 4, 2)
        assert back.flatten()[:8].tolist() == [0.0, 12.0, 1.0, 13.0, 2.0, 14.0, 3.0, 15.0]
        assert torch.equal(t.inv(TensorDict(z=out))["y"], x)
        with pytest.raises(ValueError, match="Only tailing dims with negative indices"):
            PermuteTransform([0, 1])
        with pytest.raises(ValueError, match=r"permutation of \[-2, -1\], got \[-1, -10\]"):
            PermuteTransform([-1, -10])

    def test_permute_input_spec_matches_inv(self):
        # the outer action spec is the inner one permuted forward, so that inv (outer ->
        # inner) of a sample of it lands on the inner shape (TorchRL 0.14.1 permutes the
        # spec backward: (3, 4, 2) here, whose inverse gives (4, 2, 3), not (2, 3, 4))
        t = PermuteTransform([-1, -3, -2], in_keys_inv=["action"])
        spec = Composite(
            full_action_spec=Composite(action=Bounded(-1.0, 1.0, shape=(2, 3, 4))),
            full_state_spec=Composite(),
        )
        outer = t.transform_input_spec(spec)["full_action_spec", "action"]
        assert outer.shape == (4, 2, 3)
        inner = t.inv(TensorDict(action=outer.rand()))["action"]
        assert inner.shape == (2, 3, 4)

    def test_permute_env(self):
        env = TransformedEnv(PendulumEnv(), PermuteTransform([-1], in_keys=["observation"]))
        check_env_specs(env)

    def test_crop(self):
        img = torch.arange(30.0).reshape(1, 5, 6)
        out = Crop(2, 3, top=1, left=2, in_keys=["p"])(TensorDict(p=img))["p"]
        assert out.tolist() == [[[8.0, 9.0, 10.0], [14.0, 15.0, 16.0]]]
        oob = Crop(3, 2, top=4, left=5, in_keys=["p"])(TensorDict(p=img))["p"]
        assert oob.tolist() == [[[29.0, 0.0], [0.0, 0.0], [0.0, 0.0]]]
        spec = Crop(2, 3, in_keys=["p"]).transform_observation_spec(
            Composite(p=Bounded(0.0, 1.0, shape=(1, 5, 6)))
        )["p"]
        assert spec.shape == (1, 2, 3)
        assert Crop(4)(TensorDict(pixels=torch.zeros(3, 8, 8)))["pixels"].shape == (3, 4, 4)


class TestVecNormV2:
    # TorchRL 0.14.1, VecNormV2(in_keys=["obs"], decay=...)._step on four single samples
    INPUTS = ([1.0, 2.0], [3.0, -1.0], [0.0, 5.0], [2.0, 2.0])
    EXPECTED = {
        0.9: (
            [[0.0, 0.0], [0.4511, -0.9197], [-0.7695, 0.9352], [0.303, -0.0291]],
            [1.5001, 2.0785],
            [1.6495, 2.7025],
        ),
        1.0: (
            [[0.0, 0.0], [1.0, -1.0], [-1.069, 1.2247], [0.4472, 0.0]],
            [1.5, 2.0],
            [1.118, 2.1213],
        ),
    }

    @pytest.mark.parametrize("decay", [0.9, 1.0])
    def test_values(self, decay):
        t = VecNormV2(in_keys=["obs"], decay=decay)
        outs = torch.stack([t(TensorDict(obs=torch.tensor(v)))["obs"] for v in self.INPUTS])
        out, loc, scale = self.EXPECTED[decay]
        _close(outs, out, atol=2e-4)
        _close(t.loc["obs"], loc, atol=2e-4)
        _close(t.scale["obs"], scale, atol=2e-4)

    def test_reduce_batch_dims(self):
        t = VecNormV2(in_keys=["obs"], decay=0.9, reduce_batch_dims=True)
        a = t(TensorDict(obs=torch.tensor([[1.0], [3.0]]), batch_size=[2]))["obs"]
        b = t(TensorDict(obs=torch.tensor([[0.0], [5.0]]), batch_size=[2]))["obs"]
        _close(torch.stack([a, b]).flatten(), [-0.4856, 0.4856, -0.8389, 1.0039], atol=2e-4)

    def test_new_api(self):
        t = VecNorm(in_keys=["obs"], decay=0.9, new_api=True)
        assert type(t) is VecNormV2 and t.decay == 0.9 and t.in_keys == ["obs"]
        assert type(VecNorm(in_keys=["obs"], new_api=False)) is VecNorm
        with pytest.raises(TypeError, match="unexpected arguments"):
            VecNorm(in_keys=["obs"], new_api=True, foo=1)

    def test_env_freeze_state_dict(self):
        env = TransformedEnv(PendulumEnv(), VecNormV2(in_keys=["observation", "reward"]))
        r = env.rollout(5)
        assert r["next", "observation"].shape == (5, 3)
        check_env_specs(env)
        t = env.transform[0]
        sd = t.state_dict()
        other = VecNormV2(in_keys=["observation", "reward"])
        other.load_state_dict(sd)
        torch.testing.assert_close(other.loc["observation"], t.loc["observation"])
        frozen = t.frozen_copy()
        before = frozen.loc["observation"].clone()
        frozen(TensorDict(observation=torch.ones(3), reward=torch.ones(1)))
        torch.testing.assert_close(frozen.loc["observation"], before)
        norm = t.to_observation_norm()
        td = TensorDict(observation=torch.ones(3), reward=torch.ones(1))
        torch.testing.assert_close(t.denorm(norm(td.clone()))["observation"], torch.ones(3))

    @pytest.mark.parametrize("decay", [0.9, 1.0])
    def test_stateless_values(self, decay):
        # TorchRL 0.14.1: the same outputs as the stateful version; raw loc (decay 0.9)
        t = VecNormV2(in_keys=["obs"], decay=decay, stateful=False)
        root = TensorDict(obs=torch.tensor(self.INPUTS[0]))
        root = t._reset(root, root)
        outs = [root["obs"]]
        for v in self.INPUTS[1:]:
            root = t._step(root, TensorDict(obs=torch.tensor(v)))
            outs.append(root["obs"])
        _close(torch.stack(outs), self.EXPECTED[decay][0], atol=2e-4)
        assert root["_vecnorm_count", "obs"].tolist() == [4, 4]
        raw_loc = [0.5159, 0.7148] if decay == 0.9 else [1.5, 2.0]
        _close(root["_vecnorm_loc", "obs"], raw_loc, atol=2e-4)

    def test_stateless_env_partial_resets(self):
        env = TransformedEnv(
            CartPoleEnv(batch_size=[3]), VecNormV2(in_keys=["observation"], stateful=False)
        )
        env.set_seed(0)
        torch.manual_seed(0)  # the rollout's random actions come from the global generator
        r = env.rollout(40, break_when_any_done=False)
        check_env_specs(env)
        count = r["_vecnorm_count", "observation"][..., 0]
        done = r["next", "done"][..., 0]
        assert done.sum() >= 3
        # per env and per episode: 1 at each episode start, +1 at every step
        starts = torch.ones_like(done)
        starts[:, 1:] = done[:, :-1]
        expected = torch.zeros_like(count)
        for i in range(3):
            n = 0
            for t in range(40):
                n = 1 if starts[i, t] else n + 1
                expected[i, t] = n
        assert torch.equal(count, expected)
        # a second stateless VecNormV2 gets its own prefix
        env2 = env.append_transform(VecNormV2(in_keys=["observation"], stateful=False))
        assert len([k for k in env2.observation_spec.keys() if k.endswith("_loc")]) == 2

    def test_errors(self):
        with pytest.raises(NotImplementedError, match="shared_data is not supported"):
            VecNormV2(in_keys=["obs"], stateful=False, shared_data=TensorDict())
        with pytest.raises(RuntimeError, match="stateless"):
            _ = VecNormV2(in_keys=["obs"], stateful=False).loc
        with pytest.raises(RuntimeError, match="reduce_batch_dims=True and stateful=False"):
            VecNormV2(in_keys=["obs"], stateful=False, reduce_batch_dims=True)
        with pytest.raises(RuntimeError, match="initialized before calling denorm"):
            VecNormV2(in_keys=["obs"]).denorm(TensorDict(obs=torch.ones(1)))
        with pytest.raises(KeyError, match=r"expected in_keys \['obs'\]"):
            VecNormV2(in_keys=["obs"])(TensorDict(x=torch.ones(1)))

    def test_running_mean_std(self):
        rms = RunningMeanStd(shape=(2,))
        rms.update(torch.tensor([[1.0, 2.0], [3.0, 6.0], [2.0, 1.0]]))
        rms.update(torch.tensor([[0.0, 0.0]]))
        _close(rms.mean, [1.5, 2.2499])
        _close(rms.var, [1.25, 5.1875])
        _close(rms.count, 4.0001)
        _close(rms.normalize(torch.tensor([1.0, 1.0])), [-0.4472, -0.5488])


class TestEnvCounters:
    def test_traj_counter(self):
        env = TransformedEnv(PendulumEnv(), StepCounter(max_steps=2))
        env.append_transform(TrajCounter())
        r = env.rollout(7, break_when_any_done=False)
        assert r["traj_count"].flatten().tolist() == [0, 0, 1, 1, 2, 2, 3]
        assert r["next", "traj_count"].flatten().tolist() == [0, 0, 1, 1, 2, 2, 3]
        spec = env.observation_spec["traj_count"]
        assert isinstance(spec, Bounded) and spec.dtype == torch.int64 and spec.shape == (1,)
        t = env.transform[-1]
        assert t.state_dict() == {"traj_count": 4}
        fresh = TrajCounter()
        fresh.load_state_dict({"traj_count": 10})
        assert fresh.state_dict() == {"traj_count": 10}
        with pytest.raises(RuntimeError, match="within an environment step or reset"):
            TrajCounter()(TensorDict())

    def test_traj_counter_without_ids_in_input(self):
        # a batched env's worker steps from the action alone: the ids come from its state
        env = TransformedEnv(PendulumEnv(), TrajCounter())
        td = env.reset()
        env.reset()  # a second episode: id 1
        step = env.step(td.exclude("traj_count").set("action", env.action_spec.rand()))
        assert step["next", "traj_count"].tolist() == [1]
        assert env.step(step["next"].set("action", env.action_spec.rand()))[
            "next", "traj_count"
        ].tolist() == [1]

    def test_traj_counter_serial_env(self):
        env = TransformedEnv(SerialEnv(2, lambda: PendulumEnv()), StepCounter(max_steps=2))
        env.append_transform(TrajCounter())
        r = env.rollout(4, break_when_any_done=False)
        # both envs end together every 2 steps: ids 0,1 then 2,3
        assert r["traj_count"].squeeze(-1).tolist() == [[0, 0, 2, 2], [1, 1, 3, 3]]
        check_env_specs(env)

    def test_timer(self):
        env = TransformedEnv(PendulumEnv(), Timer())
        assert {"time_step", "time_policy", "time_reset"} <= set(env.observation_spec.keys())
        r = env.rollout(3)
        for key in ("time_step", "time_policy", "time_reset"):
            assert r["next", key].shape == (3,) and bool((r["next", key] >= 0).all())
        assert r["next", "time_reset"].abs().sum() == 0
        with pytest.raises(TypeError, match="three out_keys"):
            Timer(out_keys=["a"])
        with pytest.raises(NotImplementedError, match="only runs inside an env"):
            Timer()(TensorDict())


class TestMisc:
    def test_remove_empty_specs(self):
        td = TensorDict(
            {"a": torch.zeros(1), "e": TensorDict(), "n": {"e2": TensorDict(), "x": torch.zeros(1)}}
        )
        out = RemoveEmptySpecs()(td)
        assert sorted(map(str, out.keys(True))) == ["('n', 'x')", "a", "n"]
        spec = Composite(
            full_observation_spec=Composite(obs=Unbounded(shape=(1,)), empty=Composite()),
            full_reward_spec=Composite(reward=Unbounded(shape=(1,))),
            full_done_spec=Composite(done=Binary(n=1, shape=(1,), dtype=torch.bool)),
        )
        out_spec = RemoveEmptySpecs().transform_output_spec(spec)
        assert list(out_spec["full_observation_spec"].keys()) == ["obs"]
        check_env_specs(TransformedEnv(PendulumEnv(), RemoveEmptySpecs()))

    def test_finite_check(self):
        t = FiniteTensorDictCheck()
        td = TensorDict(x=torch.ones(2), i=torch.ones(2, dtype=torch.int64))
        assert t(td) is td
        with pytest.raises(ValueError, match="Encountered a non-finite tensor"):
            t(TensorDict(x=torch.tensor([1.0, float("nan")])))
        check_env_specs(TransformedEnv(PendulumEnv(), FiniteTensorDictCheck()))

    def test_pin_memory_needs_accelerator(self):
        t = PinMemoryTransform()
        td = TensorDict(x=torch.ones(2))
        if torch.cuda.is_available():
            assert t(td)["x"].is_pinned()
        else:
            with pytest.raises(RuntimeError):
                t(td)

    def test_random_crop(self):
        torch.manual_seed(0)
        td = TensorDict(t=torch.arange(10).expand(3, 10), batch_size=[3, 10])
        out = RandomCropTensorDict(4)(td)
        assert out.shape == (3, 4) and bool((out["t"].diff(dim=-1) == 1).all())
        full = RandomCropTensorDict(10)(td)
        assert torch.equal(full["t"], td["t"])
        mask = torch.zeros(3, 10, dtype=torch.bool)
        mask[:, :5] = True
        td["mask"] = mask
        out = RandomCropTensorDict(5, mask_key="mask")(td)
        assert out["t"].tolist() == [[0, 1, 2, 3, 4]] * 3
        with pytest.raises(RuntimeError, match="cannot take 11 steps"):
            RandomCropTensorDict(11)(td)
        with pytest.raises(RuntimeError, match="shortest trajectory has 5"):
            RandomCropTensorDict(6, mask_key="mask")(td)
        with pytest.raises(RuntimeError, match="batch_size"):
            RandomCropTensorDict(1)(TensorDict())

    def test_batch_size_transform(self):
        t = BatchSizeTransform(reshape_fn=lambda td: td.reshape(-1))
        assert t(TensorDict(x=torch.zeros(2, 3), batch_size=[2, 3])).batch_size == (6,)
        assert t.transform_env_batch_size(torch.Size([2, 3])) == (6,)
        e = BatchSizeTransform(batch_size=[4])
        assert e.transform_env_batch_size(torch.Size([])) == (4,)
        reset = e._reset(None, TensorDict(x=torch.zeros(2)))
        assert reset.batch_size == (4,)
        with pytest.raises(ValueError, match="exactly one of batch_size or reshape_fn"):
            BatchSizeTransform()

    def test_module_transform(self):
        module = TensorDictModule(lambda x: x + 1, in_keys=["observation"], out_keys=["obs1"])
        t = ModuleTransform(
            module=module,
            observation_spec_transform=lambda s: s.set("obs1", Unbounded(shape=(3,))),
            no_grad=True,
        )
        assert t.in_keys == ["observation"] and t.out_keys == ["obs1"]
        env = TransformedEnv(PendulumEnv(), t)
        r = env.rollout(3)
        torch.testing.assert_close(r["next", "obs1"], r["next", "observation"] + 1)
        check_env_specs(env)
        inv = ModuleTransform(
            module_factory=lambda: TensorDictModule(lambda a: a * 0, ["action"], ["action"]),
            inverse=True,
        )
        assert inv.in_keys == [] and inv.in_keys_inv == ["action"]
        assert inv.inv(TensorDict(action=torch.ones(1)))["action"].tolist() == [0.0]
        with pytest.raises(ValueError, match="got neither"):
            ModuleTransform()
        with pytest.raises(NotImplementedError, match="use_ray_service"):
            ModuleTransform(module=module, use_ray_service=True)

    def test_next_observation_delta(self):
        env = TransformedEnv(PendulumEnv(batch_size=[2]), NextObservationDelta())
        r = env.rollout(4, break_when_any_done=False)
        delta = r["next", "delta", "observation"]
        assert delta.dtype == torch.float16
        # TorchRL: the stored transition keeps the delta, not ("next", "observation")
        assert ("next", "observation") not in r.keys(True)
        obs = r["observation"]
        torch.testing.assert_close(
            delta[:, :-1], (obs[:, 1:] - obs[:, :-1]).half(), atol=1e-3, rtol=0
        )
        check_env_specs(env)
        assert ("next", "delta", "observation") in env.fake_tensordict().keys(True)
        out = NextObservationDelta(in_keys=["observation"])(r.clone())
        torch.testing.assert_close(
            out["next", "observation"][:, :-1], obs[:, 1:], atol=2e-3, rtol=0
        )
        assert "delta" not in out["next"].keys()
        with pytest.raises(ValueError, match="delta_dtype must be a floating-point"):
            NextObservationDelta(delta_dtype=torch.int32)

    def test_next_observation_delta_inferred_in_keys(self):
        # without in_keys, in an env they are the floating observation entries (TorchRL)
        t = NextObservationDelta()
        assert t.in_keys == []
        base = PendulumEnv(spec_locked=False)
        base.observation_spec["count"] = Bounded(0, 9, shape=(1,), dtype=torch.int64)
        env = TransformedEnv(base, t)
        assert env.transform.in_keys == ["observation"]
        t.in_keys = ["observation"]  # given keys replace the inferred ones
        assert env.transform.in_keys == ["observation"] and not t._auto_keys

    def test_next_observation_delta_refused_in_batched_workers(self):
        # a worker's buffers hold the spec keys only: the delta would silently vanish, so
        # building the batched env refuses it (TorchRL); outside the batched env it works
        def make():
            return TransformedEnv(PendulumEnv(), Compose(StepCounter(), NextObservationDelta()))

        with pytest.raises(RuntimeError, match="cannot live inside a SerialEnv/ParallelEnv"):
            SerialEnv(2, make)
        env = TransformedEnv(SerialEnv(2, PendulumEnv), NextObservationDelta())
        assert ("next", "delta", "observation") in env.rollout(2).keys(True)


class TestCatFramesUnfolding:
    T = 7

    def _td(self, **extra):
        obs = torch.arange(self.T, dtype=torch.float32).unsqueeze(-1)
        done = torch.zeros(self.T, 1, dtype=torch.bool)
        done[2] = True
        return TensorDict({"obs": obs, "next": {"obs": obs + 100, "done": done, **extra}}, [self.T])

    # TorchRL 0.14.1, CatFrames(N=3, dim=-1, in_keys=["obs", ("next", "obs")], padding_value=-1)
    EXPLICIT = {
        "same": (
            [[0, 0, 0], [0, 0, 1], [0, 1, 2], [3, 3, 3], [3, 3, 4], [3, 4, 5], [4, 5, 6]],
            [
                [0, 0, 100],
                [0, 100, 101],
                [100, 101, 102],
                [3, 3, 103],
                [3, 103, 104],
                [103, 104, 105],
                [104, 105, 106],
            ],
        ),
        "constant": (
            [[-1, -1, 0], [-1, 0, 1], [0, 1, 2], [-1, -1, 3], [-1, 3, 4], [3, 4, 5], [4, 5, 6]],
            [
                [-1, 0, 100],
                [0, 100, 101],
                [100, 101, 102],
                [-1, 3, 103],
                [3, 103, 104],
                [103, 104, 105],
                [104, 105, 106],
            ],
        ),
    }

    @pytest.mark.parametrize("padding", ["same", "constant"])
    def test_explicit_next_key(self, padding):
        t = CatFrames(
            N=3, dim=-1, in_keys=["obs", ("next", "obs")], padding=padding, padding_value=-1
        )
        out = t(self._td())
        root, nxt = self.EXPLICIT[padding]
        assert out["obs"].tolist() == root
        assert out["next", "obs"].tolist() == nxt

    def test_next_key_alone(self):
        out = CatFrames(N=3, dim=-1, in_keys=[("next", "obs")])(self._td())
        assert out["obs"].flatten().tolist() == list(range(self.T))
        assert out["next", "obs"][:4].tolist() == [
            [100, 100, 100],
            [100, 100, 101],
            [100, 101, 102],
            [103, 103, 103],
        ]

    # TorchRL 0.14.1 future=True / mask_key="m" on the same data
    @pytest.mark.parametrize(
        "padding,future,stack,mask",
        [
            (
                "same",
                True,
                [[0, 1, 2], [1, 2, 2], [2, 2, 2], [3, 4, 5], [4, 5, 6], [5, 6, 6], [6, 6, 6]],
                [[0, 0, 0], [0, 0, 1], [0, 1, 1], [0, 0, 0], [0, 0, 0], [0, 0, 1], [0, 1, 1]],
            ),
            (
                "constant",
                True,
                [[0, 1, 2], [1, 2, -1], [2, -1, -1], [3, 4, 5], [4, 5, 6], [5, 6, -1], [6, -1, -1]],
                [[0, 0, 0], [0, 0, 1], [0, 1, 1], [0, 0, 0], [0, 0, 0], [0, 0, 1], [0, 1, 1]],
            ),
            (
                "same",
                False,
                [[0, 0, 0], [0, 0, 1], [0, 1, 2], [3, 3, 3], [3, 3, 4], [3, 4, 5], [4, 5, 6]],
                [[1, 1, 0], [1, 0, 0], [0, 0, 0], [1, 1, 0], [1, 0, 0], [0, 0, 0], [0, 0, 0]],
            ),
        ],
    )
    def test_future_and_mask(self, padding, future, stack, mask):
        t = CatFrames(
            N=3,
            dim=-1,
            in_keys=["obs"],
            padding=padding,
            padding_value=-1,
            future=future,
            mask_key="m",
        )
        out = t(self._td())
        assert out["obs"].tolist() == stack
        assert out["m"].int().tolist() == mask

    def test_done_key_as_inverse_and_named_time(self):
        td = self._td()
        td["next", "d2"] = td["next"].pop("done")
        out = CatFrames(N=3, dim=-1, in_keys=["obs"], done_key="d2")(td)
        assert out["obs"][3].tolist() == [3, 3, 3]
        t = CatFrames(N=3, dim=-1, in_keys=["obs"], as_inverse=True)
        assert t(self._td())["obs"].shape == (7, 1)
        assert t.inv(self._td())["obs"][:3].tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 2]]
        td = TensorDict(
            {"obs": torch.arange(10.0).reshape(5, 2, 1), "next": {"done": torch.zeros(5, 2, 1)}},
            [5, 2],
            names=["time", None],
        )
        out = CatFrames(N=2, dim=-1, in_keys=["obs"])(td)["obs"]
        assert out[:2].tolist() == [[[0, 0], [1, 1]], [[0, 2], [1, 3]]]

    def test_errors(self):
        td = self._td()
        del td["next", "done"]
        with pytest.raises(KeyError, match="entry to delimit the stored episodes"):
            CatFrames(N=3, dim=-1, in_keys=["obs"])(td)
        with pytest.raises(NotImplementedError, match="future=True.*history"):
            CatFrames(N=2, dim=-1, in_keys=["obs", ("next", "obs")], future=True)(self._td())
        for kwargs in ({"future": True}, {"mask_key": "m"}):
            env = TransformedEnv(
                PendulumEnv(), CatFrames(N=2, dim=-1, in_keys=["observation"], **kwargs)
            )
            with pytest.raises(RuntimeError, match="only works offline, on stored data"):
                env.reset()
        env = TransformedEnv(
            PendulumEnv(), CatFrames(N=2, dim=-1, in_keys=["observation"], as_inverse=True)
        )
        with pytest.raises(RuntimeError, match="CatFrames as inverse is not supported"):
            env.reset()

    def test_unnamed_time_dim_warns(self):
        # the last batch dim is taken as time, with TorchRL's UserWarning; a dim named
        # "time" is used silently
        with pytest.warns(UserWarning, match="name the time dim"):
            out = CatFrames(N=3, dim=-1, in_keys=["obs"])(self._td())
        assert out["obs"].tolist() == self.EXPLICIT["same"][0]
        td = self._td().refine_names("time")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            CatFrames(N=3, dim=-1, in_keys=["obs"])(td)

    @pytest.mark.parametrize("padding", ["same", "constant"])
    def test_step_before_reset_pads_with_padding_value(self, padding):
        # outside an env, steps before any reset see padding_value history (TorchRL)
        t = CatFrames(N=3, dim=-1, in_keys=["x"], padding=padding, padding_value=-1)
        td = TensorDict({"x": torch.tensor([[5.0]])}, [1])
        assert t._call(td.clone())["x"].tolist() == [[-1, -1, 5]]
        assert t._call(td.clone().set("x", torch.tensor([[6.0]])))["x"].tolist() == [[-1, 5, 6]]
        t._reset(td.clone(), td.clone())
        after = t._call(td.clone().set("x", torch.tensor([[7.0]])))["x"].tolist()
        assert after == ([[5, 5, 7]] if padding == "same" else [[-1, 5, 7]])

    def test_replay_buffer_sampling(self):
        rb = _buffer(CatFrames(N=3, dim=-1, in_keys=["obs", ("next", "obs")]))
        rb.extend(self._td().unsqueeze(0))
        sample = rb.sample(1)
        assert sample["obs"].tolist() == [self.EXPLICIT["same"][0]]
        assert sample["next", "obs"].tolist() == [self.EXPLICIT["same"][1]]

    def test_reset_key_in_env(self):
        def run(**kwargs):
            env = TransformedEnv(
                CartPoleEnv(batch_size=[3]),
                CatFrames(N=3, dim=-1, in_keys=["observation"], **kwargs),
            )
            env.set_seed(0)
            torch.manual_seed(0)
            return env.rollout(30, break_when_any_done=False)

        default, keyed = run(), run(reset_key="_reset")
        assert default["next", "done"].any()
        torch.testing.assert_close(keyed["observation"], default["observation"])

    def test_env_path_unchanged(self):
        env = TransformedEnv(PendulumEnv(), CatFrames(N=3, dim=-1, in_keys=["observation"]))
        r = env.rollout(4)
        assert r["next", "observation"].shape == (4, 9)
        check_env_specs(env)


def _copy_obs():
    return UnaryTransform(in_keys=["observation"], out_keys=["obs2"], fn=lambda x: x * 2)


ENV_TRANSFORMS = {
    "sign": lambda: SignTransform(in_keys=["observation", "reward"]),
    "binarize": lambda: BinarizeReward(),
    "linearise": lambda: LineariseRewards(in_keys=["reward"], weights=[2.0]),
    "success": lambda: SuccessReward(success_key="done"),
    "unary": _copy_obs,
    "stack": lambda: Compose(
        _copy_obs(),
        UnaryTransform(in_keys=["observation"], out_keys=["obs3"], fn=lambda x: x * 3),
        Stack(in_keys=["obs2", "obs3"], out_key="st"),
    ),
    "expand_as": lambda: ExpandAs("done", "observation", out_key="done_obs"),
    "permute": lambda: PermuteTransform([-1], in_keys=["observation"]),
    "vecnorm_v2": lambda: VecNormV2(in_keys=["observation", "reward"]),
    "vecnorm_v2_stateless": lambda: VecNormV2(in_keys=["observation", "reward"], stateful=False),
    "traj_counter": lambda: Compose(StepCounter(max_steps=2), TrajCounter()),
    "timer": lambda: Timer(),
    "finite": lambda: FiniteTensorDictCheck(),
    "remove_empty": lambda: RemoveEmptySpecs(),
    "next_obs_delta": lambda: NextObservationDelta(),
    "module": lambda: ModuleTransform(
        module=TensorDictModule(lambda x: x.sum(-1, keepdim=True), ["observation"], ["s"]),
        observation_spec_transform=lambda s: s.set("s", Unbounded(shape=(*s.shape, 1))),
    ),
    "catframes": lambda: CatFrames(N=2, dim=-1, in_keys=["observation"]),
}


@pytest.mark.parametrize("name", sorted(ENV_TRANSFORMS))
def test_in_serial_env(name):
    env = TransformedEnv(SerialEnv(2, lambda: PendulumEnv()), ENV_TRANSFORMS[name]())
    r = env.rollout(3, break_when_any_done=False)
    assert r.batch_size == (2, 3)
    check_env_specs(env)


DATA_TRANSFORMS = {
    "sign": lambda: SignTransform(in_keys=[("next", "observation")]),
    "binarize": lambda: BinarizeReward(in_keys=[("next", "reward")]),
    "linearise": lambda: LineariseRewards(in_keys=[("next", "reward")], out_keys=["lin"]),
    "permute": lambda: PermuteTransform([-1], in_keys=["observation"]),
    "stack": lambda: Stack(in_keys=["observation", ("next", "observation")], out_key="both"),
    "expand_as": lambda: ExpandAs(("next", "done"), "observation", out_key="d"),
    "finite": lambda: FiniteTensorDictCheck(),
    "remove_empty": lambda: RemoveEmptySpecs(),
    "unary": lambda: UnaryTransform(in_keys=["observation"], out_keys=["o2"], fn=torch.neg),
    "vecnorm_v2": lambda: VecNormV2(in_keys=["observation"]),
    "catframes": lambda: CatFrames(N=2, dim=-1, in_keys=["observation", ("next", "observation")]),
    "random_crop": lambda: RandomCropTensorDict(3),
}


@pytest.mark.parametrize("name", sorted(DATA_TRANSFORMS))
def test_in_replay_buffer(name):
    torch.manual_seed(0)
    rollout = TransformedEnv(PendulumEnv(batch_size=[2]), StepCounter(max_steps=3)).rollout(
        5, break_when_any_done=False
    )
    rb = _buffer(DATA_TRANSFORMS[name]())
    rb.extend(rollout)
    sample = rb.sample(len(rb))  # the transform runs at sampling, in storage order
    expected = DATA_TRANSFORMS[name]()(rollout.clone())
    assert sample.batch_size == expected.batch_size
    if name == "random_crop":
        return
    for key in expected.keys(True, True):
        torch.testing.assert_close(sample[key], expected[key])


@pytest.mark.parametrize(
    "name",
    [
        "_episode",
        "_image",
        "_keys",
        "_module",
        "_norm",
        "_replay",
        "_reward",
        "_shape",
        "_tensor",
    ],
)
def test_docstring_examples(name):
    module = importlib.import_module(f"rl.envs.transforms.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


# parameter names and defaults of TorchRL 0.14.1's constructors (inspect.signature)
TORCHRL_SIGNATURES = {
    "BatchSizeTransform": [
        ("batch_size", "None"),
        ("reshape_fn", "None"),
        ("reset_func", "None"),
        ("env_kwarg", "False"),
    ],
    "BinarizeReward": [("in_keys", "None"), ("out_keys", "None")],
    "CatFrames": [
        ("N", "<req>"),
        ("dim", "<req>"),
        ("in_keys", "None"),
        ("out_keys", "None"),
        ("padding", "'same'"),
        ("padding_value", "0"),
        ("as_inverse", "False"),
        ("reset_key", "None"),
        ("done_key", "None"),
        ("future", "False"),
        ("mask_key", "None"),
    ],
    "Crop": [
        ("w", "<req>"),
        ("h", "None"),
        ("top", "0"),
        ("left", "0"),
        ("in_keys", "None"),
        ("out_keys", "None"),
    ],
    "ExpandAs": [("in_key", "<req>"), ("ref_key", "<req>"), ("out_key", "None")],
    "FiniteTensorDictCheck": [],
    "Hash": [
        ("in_keys", "<req>"),
        ("out_keys", "<req>"),
        ("in_keys_inv", "None"),
        ("out_keys_inv", "None"),
        ("hash_fn", "None"),
        ("seed", "None"),
        ("use_raw_nontensor", "False"),
        ("repertoire", "None"),
    ],
    "LineariseRewards": [("in_keys", "<req>"), ("out_keys", "None"), ("weights", "None")],
    "ModuleTransform": [
        ("module", "None"),
        ("module_factory", "None"),
        ("no_grad", "False"),
        ("inverse", "False"),
        ("device", "None"),
        ("use_ray_service", "False"),
        ("actor_name", "None"),
        ("num_gpus", "None"),
        ("num_cpus", "None"),
        ("observation_spec_transform", "None"),
        ("action_spec_transform", "None"),
        ("reward_spec_transform", "None"),
        ("done_spec_transform", "None"),
        ("state_spec_transform", "None"),
    ],
    "NextObservationDelta": [
        ("in_keys", "None"),
        ("delta_dtype", "torch.float16"),
        ("restore_dtype", "'root'"),
        ("drop_delta", "True"),
        (
            "excluded_dtypes",
            "(torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool)",
        ),
    ],
    "PermuteTransform": [
        ("dims", "<req>"),
        ("in_keys", "None"),
        ("out_keys", "None"),
        ("in_keys_inv", "None"),
        ("out_keys_inv", "None"),
    ],
    "PinMemoryTransform": [],
    "RandomCropTensorDict": [("sub_seq_len", "<req>"), ("sample_dim", "-1"), ("mask_key", "None")],
    "RemoveEmptySpecs": [
        ("in_keys", "None"),
        ("out_keys", "None"),
        ("in_keys_inv", "None"),
        ("out_keys_inv", "None"),
    ],
    "Reward2GoTransform": [
        ("gamma", "1.0"),
        ("in_keys", "None"),
        ("out_keys", "None"),
        ("done_key", "'done'"),
    ],
    "RunningMeanStd": [("shape", "()"), ("epsilon", "0.0001")],
    "SignTransform": [
        ("in_keys", "None"),
        ("out_keys", "None"),
        ("in_keys_inv", "None"),
        ("out_keys_inv", "None"),
    ],
    "Stack": [
        ("in_keys", "<req>"),
        ("out_key", "<req>"),
        ("in_key_inv", "None"),
        ("out_keys_inv", "None"),
        ("dim", "-1"),
        ("allow_positive_dim", "False"),
        ("del_keys", "True"),
    ],
    "SuccessReward": [("success_key", "'success'"), ("reward_key", "'reward'"), ("scale", "1.0")],
    "Timer": [("out_keys", "None"), ("time_key", "'time'")],
    "TrajCounter": [("out_key", "'traj_count'"), ("repeats", "None")],
    "UnaryTransform": [
        ("in_keys", "<req>"),
        ("out_keys", "<req>"),
        ("in_keys_inv", "None"),
        ("out_keys_inv", "None"),
        ("fn", "<req>"),
        ("inv_fn", "None"),
        ("use_raw_nontensor", "False"),
    ],
    "VecNorm": [
        ("in_keys", "None"),
        ("out_keys", "None"),
        ("shared_td", "None"),
        ("lock", "None"),
        ("decay", "0.9999"),
        ("eps", "0.0001"),
        ("shapes", "None"),
        ("new_api", "None"),
    ],
    "VecNormV2": [
        ("in_keys", "<req>"),
        ("out_keys", "None"),
        ("lock", "None"),
        ("stateful", "True"),
        ("decay", "0.9999"),
        ("eps", "0.0001"),
        ("shared_data", "None"),
        ("reduce_batch_dims", "False"),
    ],
}


@pytest.mark.parametrize("name", sorted(TORCHRL_SIGNATURES))
def test_constructor_matches_torchrl(name):
    import inspect

    import rl.envs

    params = list(inspect.signature(getattr(rl.envs, name).__init__).parameters.values())[1:]
    got = [
        (p.name, "<req>" if p.default is inspect.Parameter.empty else repr(p.default))
        for p in params
    ]
    assert got == TORCHRL_SIGNATURES[name]


class TestModuleTransformMoves:
    """As TorchRL: a ModuleTransform built with an I/O device sends the data where its
    module is after a move, also when the move reaches it through a Compose or a
    TransformedEnv; a dtype-only move keeps the device."""

    def _transform(self, device):
        net = TensorDictModule(torch.nn.Linear(3, 2), in_keys=["observation"], out_keys=["y"])
        return ModuleTransform(module=net, device=device)

    def test_to_moves_the_io_device_with_the_module(self):
        t = self._transform("cpu")
        t.to(torch.float64)
        assert t._io_device == torch.device("cpu")
        assert t.module.module.weight.dtype is torch.float64
        composed = Compose(t)
        composed.to("meta")  # a Compose moves each transform with its own to()
        assert t._io_device == torch.device("meta")
        assert t.module.module.weight.device.type == "meta"

    def test_without_an_io_device_none_is_set(self):
        t = self._transform(None)
        Compose(t).to("meta")
        assert t._io_device is None

    def test_in_a_cpu_env_the_module_runs_on_the_env_data(self):
        env = TransformedEnv(PendulumEnv(device="cpu"), self._transform("cpu"))
        td = env.rollout(2)
        assert td["y"].shape == (2, 2) and td["y"].device.type == "cpu"
