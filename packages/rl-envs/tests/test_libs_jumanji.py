"""JumanjiWrapper / JumanjiEnv against Jumanji stepped directly in JAX.

One small Snake (4 x 4, time limit 3) serves every test: the wrappers of one Jumanji env
share their compiled functions, so the file compiles each of reset / step / partial
reset once per batch size (1 and 2). XLA's optimisations are off for the module: they
cost most of the compile time and change no value here.
"""

from __future__ import annotations

import doctest
import importlib

import jax
import jax.numpy as jnp
import jumanji
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rl.core import Binary, Bounded, Categorical, OneHot
from rl.envs import JumanjiEnv, JumanjiWrapper, check_env_specs, step_mdp
from rl.envs.libs import JumanjiWrapper as LibsJumanjiWrapper

OBS_KEYS = ("grid", "step_count", "action_mask")


@pytest.fixture(scope="module", autouse=True)
def _fast_compiles():
    previous = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", True)
    yield
    jax.config.update("jax_disable_most_optimizations", previous)


@pytest.fixture(scope="module")
def snake():
    return jumanji.make("Snake-v1", num_rows=4, num_cols=4, time_limit=3)


def first_valid_action(td: TensorDict) -> TensorDict:
    """A deterministic policy: the first action the mask allows."""
    return td.set("action", td["action_mask"].int().argmax(-1).to(torch.int32))


def as_torch(x) -> torch.Tensor:
    return torch.as_tensor(np.array(x))


class TestJumanjiSpecs:
    @pytest.mark.parametrize("batch_size", [(), (2, 3)])
    def test_specs_follow_jumanji(self, snake, batch_size):
        env = JumanjiWrapper(snake, batch_size=batch_size)
        bs = torch.Size(batch_size)
        assert env.batch_size == bs and env.batch_locked
        action = env.action_spec
        assert isinstance(action, Categorical) and action.n == 4
        assert action.shape == bs and action.dtype == torch.int32
        grid = env.observation_spec["grid"]
        assert isinstance(grid, Bounded) and grid.shape == (*bs, 4, 4, 5)
        assert grid.dtype == torch.float32
        assert float(grid.space.low.min()) == 0.0 and float(grid.space.high.max()) == 1.0
        step_count = env.observation_spec["step_count"]
        assert isinstance(step_count, Categorical) and step_count.n == 3
        assert step_count.shape == bs
        mask = env.observation_spec["action_mask"]
        assert isinstance(mask, Binary) and mask.shape == (*bs, 4)
        assert set(env.observation_spec.keys()) == set(OBS_KEYS)
        assert env.reward_spec.shape == (*bs, 1) and env.reward_spec.dtype == torch.float32
        assert set(env.full_done_spec.keys()) == {"done", "terminated", "truncated"}
        assert env.full_done_spec["done"].shape == (*bs, 1)

    def test_one_hot_actions(self, snake):
        env = JumanjiWrapper(snake, categorical_action_encoding=False, batch_size=[2])
        assert isinstance(env.action_spec, OneHot)
        assert env.action_spec.shape == (2, 4)

    def test_names_and_errors(self, snake):
        assert "Snake-v1" in JumanjiEnv.available_envs
        assert LibsJumanjiWrapper is JumanjiWrapper
        assert JumanjiWrapper(snake).num_rows == 4  # read from the Jumanji env
        with pytest.raises(ValueError, match=r"'Snake-v9'.*did you mean 'Snake-v1'"):
            JumanjiEnv("Snake-v9")
        with pytest.raises(ValueError, match=r"batch_size .* got \(2, 0\)"):
            JumanjiWrapper(snake, batch_size=(2, 0))
        with pytest.raises(ValueError, match="batch_size .* got 'two'"):
            JumanjiWrapper(snake, batch_size="two")
        with pytest.raises(TypeError, match="Jumanji Environment .* got str"):
            JumanjiWrapper("Snake-v1")
        with pytest.raises(NotImplementedError, match="from_pixels"):
            JumanjiWrapper(snake, from_pixels=True)
        with pytest.raises(NotImplementedError, match="frame_skip=1 only, got 2"):
            JumanjiWrapper(snake, frame_skip=2)
        with pytest.raises(RuntimeError, match=r"step\(\) called before reset\(\)"):
            JumanjiWrapper(snake).step(TensorDict(action=torch.tensor(0, dtype=torch.int32)))

    def test_missing_jumanji_names_the_extra(self, monkeypatch):
        module = importlib.import_module("rl.envs.libs.jumanji")
        monkeypatch.setattr(module, "_has_jumanji", False)
        assert JumanjiEnv.available_envs == []
        with pytest.raises(ImportError, match=r'pip install "rl-envs\[jumanji\]"'):
            JumanjiEnv("Snake-v1")

    def test_env_by_name_takes_jumanji_arguments(self):
        env = JumanjiEnv("Snake-v1", num_rows=5, num_cols=6)
        assert env.observation_spec["grid"].shape == (5, 6, 5)
        assert repr(env) == "JumanjiEnv(env=Snake-v1, batch_size=torch.Size([]))"


class TestJumanjiRollout:
    def test_single_env_rollout_matches_specs(self, snake):
        env = JumanjiWrapper(snake)
        env.set_seed(0)
        # check_env_specs draws its actions from torch's generator: seeded, so that the
        # outcome does not depend on the tests run before (Snake's own step_count spec,
        # DiscreteArray(time_limit), excludes the value its truncating step writes, which
        # a run of random actions reaching the time limit would show)
        torch.manual_seed(0)
        check_env_specs(env)
        torch.manual_seed(0)
        rollout = env.rollout(6, break_when_any_done=False)
        assert rollout.batch_size == (6,)
        for key in OBS_KEYS:
            spec = env.observation_spec[key]
            value = rollout["next", key]
            assert value.shape == (6, *spec.shape) and value.dtype == spec.dtype
        assert rollout["action"].dtype == torch.int32
        assert rollout["next", "reward"].shape == (6, 1)
        # the time limit ends the episode at the third step at the latest
        assert bool(rollout["next", "done"][:3].any())

    def test_matches_jumanji_stepped_in_jax(self, snake):
        env = JumanjiWrapper(snake, batch_size=[2])
        env.set_seed(3)
        td = env.reset()
        # TorchRL's key scheme: split(key, n + 1), the first row is the next key
        keys = jax.random.split(jax.random.PRNGKey(3), 3)
        state, timestep = jax.jit(jax.vmap(snake.reset))(keys[1:])
        step = jax.jit(jax.vmap(snake.step))
        for t in range(3):
            for key in OBS_KEYS:
                expected = as_torch(getattr(timestep.observation, key))
                torch.testing.assert_close(td[key], expected, msg=f"{key} at step {t}")
            first_valid_action(td)
            out = env.step(td)
            state, timestep = step(state, jnp.asarray(td["action"].numpy()))
            last = as_torch(timestep.step_type == jumanji.types.StepType.LAST)
            ended = as_torch(timestep.discount == 0)
            nxt = out["next"]
            torch.testing.assert_close(nxt["reward"], as_torch(timestep.reward).reshape(2, 1))
            torch.testing.assert_close(nxt["terminated"], (last & ended).reshape(2, 1))
            torch.testing.assert_close(nxt["truncated"], (last & ~ended).reshape(2, 1))
            torch.testing.assert_close(nxt["done"], last.reshape(2, 1))
            td = step_mdp(out)
        for key in OBS_KEYS:
            torch.testing.assert_close(td[key], as_torch(getattr(timestep.observation, key)))
        # Snake ends at its time limit with discount 0: terminated
        assert bool(td["terminated"].all())

    def test_seeding(self, snake):
        def run(seed):
            env = JumanjiWrapper(snake, batch_size=[2])
            assert env.set_seed(seed) is not None
            return env.rollout(5, first_valid_action, break_when_any_done=False)

        a, b, c = run(0), run(0), run(1)
        torch.testing.assert_close(a, b)
        assert not torch.equal(a["grid"], c["grid"])
        # unseeded envs draw their key from torch's generator
        torch.manual_seed(7)
        d = JumanjiWrapper(snake, batch_size=[2]).reset()
        torch.manual_seed(7)
        e = JumanjiWrapper(snake, batch_size=[2]).reset()
        torch.testing.assert_close(d, e)

    def test_batched_equals_single_envs(self, snake):
        batched = JumanjiWrapper(snake, batch_size=[2])
        batched.set_seed(11)
        td = batched.reset()
        state = batched.env_state()
        singles = []
        for i in range(2):
            single = JumanjiWrapper(snake)
            single.reset()
            # the single env takes row i of the batched env's Jumanji state
            single.load_env_state(
                {"key": state["key"], "state": [leaf[i : i + 1] for leaf in state["state"]]}
            )
            singles.append((single, td[i].clone()))
        for _ in range(2):
            out = batched.step(first_valid_action(td))
            for i, (single, std) in enumerate(singles):
                sout = single.step(first_valid_action(std))
                torch.testing.assert_close(sout["next"], out["next"][i])
                singles[i] = (single, step_mdp(sout))
            td = step_mdp(out)

    def test_partial_reset(self, snake):
        env = JumanjiWrapper(snake, batch_size=[2])
        env.set_seed(5)
        td = step_mdp(env.step(first_valid_action(env.reset())))
        before = env.env_state()
        td["_reset"] = torch.tensor([[True], [False]])
        out = env.reset(td.clone())
        after = env.env_state()
        # sub-env 1 keeps its state and observation
        for old, new in zip(before["state"], after["state"]):
            torch.testing.assert_close(new[1], old[1])
        for key in OBS_KEYS:
            torch.testing.assert_close(out[key][1], td[key][1])
        assert not bool(out["done"].any())
        # sub-env 0 is what a full reset with the same key gives
        env.load_env_state(before)
        full = env.reset()
        for key in OBS_KEYS:
            torch.testing.assert_close(out[key][0], full[key][0])

    def test_env_state_refuses_foreign_state(self, snake):
        env = JumanjiWrapper(snake, batch_size=[2])
        with pytest.raises(ValueError, match="expected the dict of JumanjiWrapper.env_state"):
            env.load_env_state({"observation": 1})
        state = env.env_state()
        assert state["state"] is None
        env.reset()
        state = env.env_state()
        state["state"] = state["state"][:-1]
        with pytest.raises(ValueError, match="cannot restore the state of JumanjiWrapper"):
            env.load_env_state(state)


def test_docstring_examples():
    module = importlib.import_module("rl.envs.libs.jumanji")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
