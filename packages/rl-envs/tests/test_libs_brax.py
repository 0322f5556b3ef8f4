"""BraxWrapper / BraxEnv against Brax stepped directly in JAX, and the gradients of the
differentiable step against the same dynamics written in torch.

The tests use two tiny envs that compile in a fraction of a second: Brax's ``fast`` test
env, and ``Drift`` (below: a random start, a linear step, a quadratic reward), wrapped in
Brax's ``EpisodeWrapper`` for a time limit. XLA's optimisations are off for the module:
they cost most of the compile time and change no value here.
"""

from __future__ import annotations

import doctest
import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from brax.envs.base import Env, State
from brax.envs.wrappers.training import EpisodeWrapper
from tensordict import TensorDict

from rl.core import Bounded
from rl.envs import BraxEnv, BraxWrapper, ParallelEnv, check_env_specs, step_mdp
from rl.envs.libs import BraxEnv as LibsBraxEnv

EPISODE = 3
SPEED = 0.1


class Drift(Env):
    """A point in the plane: starts uniform in [0, 1)^2, moves by ``SPEED * action``,
    rewarded ``-|position|^2`` after the move."""

    def reset(self, rng):
        obs = jax.random.uniform(rng, (2,))
        return State(None, obs, jnp.zeros(()), jnp.zeros(()))

    def step(self, state, action):
        obs = state.obs + SPEED * action
        return state.replace(obs=obs, reward=-jnp.sum(obs**2))

    @property
    def observation_size(self):
        return 2

    @property
    def action_size(self):
        return 2

    @property
    def backend(self):
        return "none"


@pytest.fixture(scope="module", autouse=True)
def _fast_compiles():
    previous = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", True)
    yield
    jax.config.update("jax_disable_most_optimizations", previous)


@pytest.fixture(scope="module")
def drift():
    return EpisodeWrapper(Drift(), episode_length=EPISODE, action_repeat=1)


def as_torch(x) -> torch.Tensor:
    return torch.as_tensor(np.array(x))


class TestBraxSpecs:
    @pytest.mark.parametrize("batch_size", [(), (2, 3)])
    def test_specs_follow_brax(self, drift, batch_size):
        env = BraxWrapper(drift, batch_size=batch_size)
        bs = torch.Size(batch_size)
        assert env.batch_size == bs
        action = env.action_spec
        assert isinstance(action, Bounded) and action.shape == (*bs, 2)
        assert float(action.space.low.min()) == -1.0 and float(action.space.high.max()) == 1.0
        assert env.observation_spec["observation"].shape == (*bs, 2)
        assert env.reward_spec.shape == (*bs, 1)
        # EpisodeWrapper's info["truncation"] gives a truncated flag; fast has none
        assert set(env.full_done_spec.keys()) == {"done", "terminated", "truncated"}
        fast = BraxEnv("fast", batch_size=batch_size)
        assert set(fast.full_done_spec.keys()) == {"done", "terminated"}
        assert fast.action_spec.shape == (*bs, 1)

    def test_names_and_errors(self, drift):
        assert "fast" in BraxEnv.available_envs
        assert LibsBraxEnv is BraxEnv
        assert BraxWrapper(drift).episode_length == EPISODE  # read from the Brax env
        with pytest.raises(
            ValueError, match=r"'fats' is not a Brax environment; did you mean 'fast'"
        ):
            BraxEnv("fats")
        with pytest.raises(ValueError, match=r"batch_size .* got \[0\]"):
            BraxWrapper(drift, batch_size=[0])
        with pytest.raises(TypeError, match="Brax environment .* got str"):
            BraxWrapper("fast")
        with pytest.raises(ValueError, match="cache_clear_frequency .* got 0"):
            BraxWrapper(drift, cache_clear_frequency=0)
        with pytest.raises(ValueError, match="num_workers must be a positive int, got 0"):
            BraxEnv("fast", num_workers=0)
        with pytest.raises(NotImplementedError, match="from_pixels"):
            BraxWrapper(drift, from_pixels=True)
        with pytest.raises(RuntimeError, match=r"step\(\) called before reset\(\)"):
            BraxWrapper(drift).step(TensorDict(action=torch.zeros(2)))

    def test_missing_brax_names_the_extra(self, monkeypatch):
        module = importlib.import_module("rl.envs.libs.brax")
        monkeypatch.setattr(module, "_has_brax", False)
        assert BraxEnv.available_envs == []
        with pytest.raises(ImportError, match=r'pip install "rl-envs\[brax\]"'):
            BraxEnv("fast")

    def test_num_workers_gives_a_parallel_env(self):
        env = BraxEnv("fast", num_workers=2)
        try:
            assert isinstance(env, ParallelEnv) and env.num_workers == 2
        finally:
            env.close()


@pytest.mark.slow
def test_num_workers_rollout_matches_one_env():
    """Spawned workers (JAX does not survive a fork) each step their own env."""
    env = BraxEnv("fast", batch_size=[3], num_workers=2)
    try:
        env.set_seed(0)
        rollout = env.rollout(3, lambda td: td.set("action", torch.ones(2, 3, 1)))
    finally:
        env.close()
    single = BraxEnv("fast", batch_size=[3])
    single.set_seed(0)
    expected = single.rollout(3, lambda td: td.set("action", torch.ones(3, 1)))
    assert rollout.shape == (2, 3, 3)
    for i in range(2):
        torch.testing.assert_close(
            rollout["next", "observation"][i], expected["next", "observation"]
        )


class TestBraxRollout:
    def test_fast_env_rollout(self):
        env = BraxEnv("fast")
        env.set_seed(0)
        check_env_specs(env)
        rollout = env.rollout(4, lambda td: td.set("action", torch.ones(1)))
        # fast: the velocity grows by dt = 0.02 per step with a positive action, the
        # reward is the position after the step
        vel = 0.02 * torch.arange(1, 5)
        pos = torch.cumsum(vel * 0.02, 0)
        torch.testing.assert_close(rollout["next", "observation"], torch.stack([pos, vel], -1))
        torch.testing.assert_close(rollout["next", "reward"], pos.unsqueeze(-1))

    def test_matches_brax_stepped_in_jax(self, drift):
        env = BraxWrapper(drift, batch_size=[2])
        check_env_specs(env)
        env.set_seed(5)
        td = env.reset()
        keys = jax.random.split(jax.random.PRNGKey(5), 3)
        state = jax.jit(jax.vmap(drift.reset))(keys[1:])
        step = jax.jit(jax.vmap(drift.step))
        torch.testing.assert_close(td["observation"], as_torch(state.obs))
        actions = torch.tensor([[[1.0, -1.0], [0.5, 0.0]], [[0.0, 0.25], [-1.0, -1.0]]])
        for t in range(EPISODE):
            td["action"] = actions[t % 2]
            out = env.step(td)
            state = step(state, jnp.asarray(actions[t % 2].numpy()))
            nxt = out["next"]
            torch.testing.assert_close(nxt["observation"], as_torch(state.obs))
            torch.testing.assert_close(nxt["reward"], as_torch(state.reward).reshape(2, 1))
            last = t == EPISODE - 1
            # the time limit truncates: done and truncated, not terminated
            assert nxt["truncated"].tolist() == [[last], [last]]
            assert nxt["done"].tolist() == [[last], [last]]
            assert not bool(nxt["terminated"].any())
            td = step_mdp(out)

    def test_seeding(self, drift):
        def run(seed):
            env = BraxWrapper(drift, batch_size=[2])
            env.set_seed(seed)
            torch.manual_seed(0)
            return env.rollout(5, break_when_any_done=False)

        a, b, c = run(0), run(0), run(1)
        torch.testing.assert_close(a, b)
        assert not torch.equal(a["observation"], c["observation"])

    def test_batched_equals_single_envs(self, drift):
        batched = BraxWrapper(drift, batch_size=[2])
        batched.set_seed(2)
        td = batched.reset()
        state = batched.env_state()
        action = torch.tensor([[0.5, -0.5], [1.0, 0.0]])
        out = batched.step(td.set("action", action))
        for i in range(2):
            single = BraxWrapper(drift)
            single.reset()
            single.load_env_state(
                {"key": state["key"], "state": [leaf[i : i + 1] for leaf in state["state"]]}
            )
            sout = single.step(TensorDict(action=action[i]))
            torch.testing.assert_close(sout["next"], out["next"][i])

    def test_partial_reset_keeps_the_other_envs(self, drift):
        env = BraxWrapper(drift, batch_size=[2])
        env.set_seed(4)
        td = step_mdp(env.step(env.reset().set("action", torch.ones(2, 2))))
        before = env.env_state()
        td["_reset"] = torch.tensor([[False], [True]])
        out = env.reset(td.clone())
        torch.testing.assert_close(out["observation"][0], td["observation"][0])
        env.load_env_state(before)
        full = env.reset()
        torch.testing.assert_close(out["observation"][1], full["observation"][1])


class TestBraxGradients:
    def test_gradient_through_two_steps(self, drift):
        env = BraxWrapper(drift, batch_size=[2], requires_grad=True)
        env.set_seed(9)
        td = env.reset()
        obs0 = td["observation"].clone()
        a0 = torch.tensor([[0.3, -0.2], [0.1, 0.4]], requires_grad=True)
        a1 = torch.tensor([[-0.5, 0.5], [0.2, 0.0]], requires_grad=True)
        out0 = env.step(td.set("action", a0))
        out1 = env.step(step_mdp(out0).set("action", a1))
        loss = out0["next", "reward"].sum() + 2 * out1["next", "reward"].sum()
        grads = torch.autograd.grad(loss, (a0, a1))

        # the same dynamics in torch
        b0, b1 = a0.detach().requires_grad_(), a1.detach().requires_grad_()
        obs1 = obs0 + SPEED * b0
        obs2 = obs1 + SPEED * b1
        expected_loss = -(obs1**2).sum() - 2 * (obs2**2).sum()
        expected = torch.autograd.grad(expected_loss, (b0, b1))
        torch.testing.assert_close(loss, expected_loss.detach())
        torch.testing.assert_close(grads, expected)

    def test_rollout_gradient_reaches_the_first_action(self, drift):
        env = BraxWrapper(drift, batch_size=[2], requires_grad=True)
        env.set_seed(0)
        w = torch.tensor(0.3, requires_grad=True)
        rollout = env.rollout(3, lambda td: td.set("action", w * torch.ones(2, 2)))
        (grad,) = torch.autograd.grad(rollout["next", "reward"].sum(), w)
        v = w.detach().requires_grad_()
        obs, expected_loss = rollout["observation"][:, 0].detach(), 0
        for _ in range(3):
            obs = obs + SPEED * v * torch.ones(2, 2)
            expected_loss = expected_loss - (obs**2).sum()
        (expected,) = torch.autograd.grad(expected_loss, v)
        torch.testing.assert_close(grad, expected)

    @pytest.mark.parametrize("cut", ["detached input", "detach_state"])
    def test_cutting_the_history(self, drift, cut):
        env = BraxWrapper(drift, batch_size=[2], requires_grad=True)
        env.set_seed(1)
        td = env.reset()
        a0 = torch.full((2, 2), 0.5, requires_grad=True)
        out0 = env.step(td.set("action", a0))
        out0["next", "reward"].sum().backward()
        td = step_mdp(out0)
        if cut == "detach_state":
            env.detach_state()
        else:
            td = td.detach()  # TorchRL's way: the history went through the tensordict
        a1 = torch.full((2, 2), -0.5, requires_grad=True)
        out1 = env.step(td.set("action", a1))
        a0.grad = None
        out1["next", "reward"].sum().backward()  # would raise through the freed graph
        assert a0.grad is None
        obs1 = out0["next", "observation"].detach()
        torch.testing.assert_close(a1.grad, -2 * SPEED * (obs1 + SPEED * a1.detach()))


def test_docstring_examples():
    module = importlib.import_module("rl.envs.libs.brax")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
