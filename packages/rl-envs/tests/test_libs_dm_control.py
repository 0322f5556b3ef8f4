"""DMControlEnv / DMControlWrapper (DeepMind Control Suite back-end)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from rl.core import Bounded, Unbounded
from rl.envs import check_env_specs

pytest.importorskip("dm_control")

from rl.envs import DMControlEnv, DMControlWrapper  # noqa: E402
from rl.envs.libs.dm_control import _headless_gl, _import_dm_control  # noqa: E402


def _can_render() -> bool:
    suite = _import_dm_control()
    try:
        suite.load("cartpole", "balance").physics.render(height=8, width=8)
    except Exception:  # no OpenGL back-end on this machine
        return False
    return True


class TestDMControlEnv:
    def test_specs(self):
        env = DMControlEnv("cheetah", "run")
        assert env.batch_size == torch.Size([])
        assert set(env.observation_spec.keys()) == {"position", "velocity"}
        assert env.observation_spec["position"].shape == torch.Size([8])
        assert env.observation_spec["position"].dtype == torch.float64
        assert isinstance(env.action_spec, Bounded)
        assert env.action_spec.shape == torch.Size([6])
        assert_close(env.action_spec.space.low, -torch.ones(6, dtype=torch.float64))
        assert isinstance(env.reward_spec, Unbounded)
        assert env.reward_spec.shape == torch.Size([1])
        assert env.reward_spec.dtype == torch.float64
        check_env_specs(env)

    def test_scalar_observations_get_shape_one(self):
        env = DMControlEnv("walker", "walk")
        assert env.observation_spec["height"].shape == torch.Size([1])
        check_env_specs(env)
        assert env.rollout(3)["next", "height"].shape == torch.Size([3, 1])

    def test_matches_dm_control_directly(self):
        """Observations and rewards are those of the suite env stepped by hand."""
        suite = _import_dm_control()
        env = DMControlEnv("cartpole", "swingup", seed=3)
        raw = suite.load("cartpole", "swingup", task_kwargs={"random": 3})
        td = env.reset()
        ts = raw.reset()
        assert_close(td["position"], torch.from_numpy(ts.observation["position"]))
        for value in (-1.0, 0.5, 1.0):
            td["action"] = torch.tensor([value], dtype=torch.float64)
            td = env.step(td)
            ts = raw.step(np.array([value]))
            assert_close(td["next", "velocity"], torch.from_numpy(ts.observation["velocity"]))
            assert_close(td["next", "reward"], torch.tensor([ts.reward], dtype=torch.float64))
            td = td["next"].exclude("reward")

    def test_seeding_reproducible(self):
        env = DMControlEnv("cartpole", "swingup")

        def run(seed):
            env.set_seed(seed)
            torch.manual_seed(0)
            return env.rollout(20)

        a, b, c = run(1), run(1), run(2)
        assert_close(a, b)
        assert not torch.equal(a["position"], c["position"])

    def test_time_limit_truncates(self):
        env = DMControlEnv("cartpole", "balance", time_limit=0.1)  # 10 control steps
        rollout = env.rollout(50)
        assert rollout.batch_size == torch.Size([10])
        assert rollout["next", "truncated"][-1].item()
        assert not rollout["next", "terminated"].any()
        assert rollout["next", "done"][-1].item() and not rollout["next", "done"][:-1].any()

    def test_termination_from_discount(self):
        """A LAST step with discount 0 is ``terminated`` (not ``truncated``)."""
        from dm_env import StepType, TimeStep

        env = DMControlEnv("cartpole", "balance")
        td = env.reset()
        real_step = env.env.step

        def ending_step(action):
            ts = real_step(action)
            return TimeStep(StepType.LAST, ts.reward, 0.0, ts.observation)

        env.env.step = ending_step
        td["action"] = torch.zeros(1, dtype=torch.float64)
        out = env.step(td)["next"]
        assert out["terminated"].item() and out["done"].item()
        assert not out["truncated"].item()

    def test_frame_skip_sums_rewards(self):
        suite = _import_dm_control()
        env = DMControlEnv("cartpole", "swingup", frame_skip=3, seed=0)
        raw = suite.load("cartpole", "swingup", task_kwargs={"random": 0})
        td = env.reset()
        raw.reset()
        td["action"] = torch.full((1,), 0.3, dtype=torch.float64)
        out = env.step(td)["next"]
        rewards = [raw.step(np.array([0.3])).reward for _ in range(3)]
        assert_close(out["reward"], torch.tensor([sum(rewards)], dtype=torch.float64))

    def test_nested_observations_step_as_nested_entries(self):
        """A nested dm_env observation comes out as nested TensorDict entries."""
        from dm_env import TimeStep

        suite = _import_dm_control()
        raw = suite.load("cartpole", "balance", task_kwargs={"random": 0})
        flat_spec = raw.observation_spec()
        raw.observation_spec = lambda: {
            "position": flat_spec["position"],
            "extra": {"velocity": flat_spec["velocity"]},
        }

        def nest(ts):
            obs = ts.observation
            nested = {"position": obs["position"], "extra": {"velocity": obs["velocity"]}}
            return TimeStep(ts.step_type, ts.reward, ts.discount, nested)

        real_reset, real_step = raw.reset, raw.step
        raw.reset = lambda: nest(real_reset())
        raw.step = lambda action: nest(real_step(action))
        env = DMControlWrapper(raw)
        assert env.observation_spec["extra", "velocity"].shape == torch.Size([2])
        twin = suite.load("cartpole", "balance", task_kwargs={"random": 0})
        td = env.reset()
        ts = twin.reset()
        assert_close(td["extra", "velocity"], torch.from_numpy(ts.observation["velocity"]))
        td["action"] = torch.full((1,), 0.5, dtype=torch.float64)
        nxt = env.step(td)["next"]
        ts = twin.step(np.array([0.5]))
        assert_close(nxt["extra", "velocity"], torch.from_numpy(ts.observation["velocity"]))
        assert_close(nxt["position"], torch.from_numpy(ts.observation["position"]))
        check_env_specs(env)

    def test_step_output_entries(self):
        """Flags are separate bool tensors, observations copies of dm_control's arrays."""
        env = DMControlEnv("cartpole", "balance", seed=0, device="cpu")
        td = env.reset()
        td["action"] = torch.zeros(1, dtype=torch.float64)
        nxt = env.step(td)["next"]
        assert nxt.device == torch.device("cpu")
        for key in ("done", "terminated", "truncated"):
            assert nxt[key].dtype == torch.bool and nxt[key].shape == torch.Size([1])
        nxt["done"][0] = True
        assert not nxt["terminated"].item() and not nxt["truncated"].item()
        before = nxt["position"].clone()
        env.step(td)
        assert torch.equal(nxt["position"], before)

    def test_missing_action(self):
        env = DMControlEnv("cartpole", "balance")
        td = env.reset()
        with pytest.raises(KeyError, match="needs the action key 'action'"):
            env.step(td)

    def test_wrapper(self):
        suite = _import_dm_control()
        env = DMControlWrapper(suite.load("reacher", "easy"))
        check_env_specs(env)
        assert "DMControlWrapper" in repr(env)
        env.close()

    def test_pixels(self):
        if not _can_render():
            pytest.skip(f"no OpenGL back-end renders here (MUJOCO_GL candidate: {_headless_gl()})")
        env = DMControlEnv(
            "cartpole",
            "balance",
            from_pixels=True,
            pixels_only=False,
            render_kwargs={"height": 24, "width": 32},
        )
        assert set(env.observation_spec.keys()) == {"position", "velocity", "pixels"}
        assert env.observation_spec["pixels"].shape == torch.Size([24, 32, 3])
        assert env.observation_spec["pixels"].dtype == torch.uint8
        check_env_specs(env)
        rollout = env.rollout(3)
        assert rollout["next", "pixels"].shape == torch.Size([3, 24, 32, 3])
        assert rollout["next", "pixels"].float().std() > 0  # a rendered scene, not blank
        only = DMControlEnv("cartpole", "balance", from_pixels=True, pixels_only=True,
                            render_kwargs={"height": 24, "width": 32})  # fmt: skip
        assert list(only.observation_spec.keys()) == ["pixels"]

    def test_collector(self):
        from rl.collectors import Collector

        env = DMControlEnv("cartpole", "balance", seed=0)
        collector = Collector(env, None, frames_per_batch=20, total_frames=40)
        batches = list(collector)
        collector.shutdown()
        assert [b.batch_size for b in batches] == [torch.Size([20])] * 2
        assert batches[0]["next", "position"].shape == torch.Size([20, 3])
        assert_close(batches[1]["position"][0], batches[0]["next", "position"][-1])

    def test_num_workers_returns_parallel_env(self, monkeypatch):
        """``num_workers > 1`` builds a ParallelEnv of single envs; here the ParallelEnv
        is swapped for an in-process SerialEnv (no worker process to start)."""
        import rl.envs
        from rl.envs import SerialEnv

        made = {}

        def parallel(num_workers, create_env_fn):
            made["n"], made["factory"] = num_workers, create_env_fn
            return SerialEnv(num_workers, create_env_fn)

        monkeypatch.setattr(rl.envs, "ParallelEnv", parallel)
        out = DMControlEnv("cartpole", "balance", num_workers=2, frame_skip=2)
        assert isinstance(out, SerialEnv) and made["n"] == 2
        assert out.batch_size == torch.Size([2])
        single = made["factory"]()
        assert isinstance(single, DMControlEnv) and single.frame_skip == 2
        assert out.rollout(3)["next", "position"].shape == torch.Size([2, 3, 3])
        assert isinstance(DMControlEnv("cartpole", "balance", num_workers=1), DMControlEnv)
        with pytest.raises(ValueError, match="num_workers must be a positive int, got 0"):
            DMControlEnv("cartpole", "balance", num_workers=0)

    def test_available_envs(self):
        envs = dict(DMControlEnv.available_envs)
        assert "run" in envs["cheetah"] and "balance" in envs["cartpole"]

    def test_errors(self):
        with pytest.raises(
            ValueError, match="'cheeta' is not a dm_control suite domain.*'cheetah'"
        ):
            DMControlEnv("cheeta", "run")
        with pytest.raises(ValueError, match="'jump' is not a task of the dm_control domain"):
            DMControlEnv("cheetah", "jump")
        with pytest.raises(TypeError, match="env must be a dm_control Environment"):
            DMControlWrapper(object())
        with pytest.raises(ValueError, match="frame_skip must be a positive int, got 0"):
            DMControlEnv("cartpole", "balance", frame_skip=0)

    def test_missing_library_message(self, monkeypatch):
        import rl.envs.libs.dm_control as module

        monkeypatch.setattr(module, "_has_dm_control", False)
        with pytest.raises(ImportError, match=r'pip install "rl-envs\[dm_control\]"'):
            DMControlEnv("cartpole", "balance")


class TestSpecConversion:
    def test_nested_observations_become_nested_keys(self):
        from dm_env import specs

        from rl.envs.libs.dm_control import _leaves, _spec_of

        tree = {
            "a": specs.Array((2,), np.float64, "a"),
            "b": {"c": specs.Array((), np.float32, "c")},
        }
        leaves = _leaves(tree)
        assert [key for key, _ in leaves] == [("a",), ("b", "c")]
        spec = _spec_of(leaves[1][1], categorical=False)
        assert isinstance(spec, Unbounded)
        assert spec.shape == torch.Size([1]) and spec.dtype == torch.float32

    def test_discrete_and_bounded(self):
        from dm_env import specs

        from rl.core import Categorical, OneHot
        from rl.envs.libs.dm_control import _spec_of

        discrete = specs.DiscreteArray(5)
        assert isinstance(_spec_of(discrete, categorical=True), Categorical)
        one_hot = _spec_of(discrete, categorical=False)
        assert isinstance(one_hot, OneHot) and one_hot.shape == torch.Size([5])
        bounded = _spec_of(specs.BoundedArray((3,), np.float64, -2.0, [1.0, 2.0, 3.0]), False)
        assert_close(bounded.space.high, torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))
        assert_close(bounded.space.low, torch.full((3,), -2.0, dtype=torch.float64))
