"""The native envs' rollout kernel: the env's tensors written straight into the rollout's
buffers, checked against a step-by-step loop and against the generic kernel."""

from __future__ import annotations

import pytest
import torch
from tensordict import assert_close

from rl.envs import CartPoleEnv, PendulumEnv, RandomPolicy, RewardSum, StepCounter, step_mdp
from rl.envs._native._kernel import NativeKernel
from rl.envs.engine import EnvKernel, run_rollout
from rl.envs.transforms import TransformedEnv

BATCHES = [[], [1], [5], [2, 3]]


def _rollout(make, steps, policy, kernel_cls, **kwargs):
    """``env.rollout`` from a fixed seed with the env's kernel or :class:`EnvKernel`."""
    env = make()
    env.set_seed(3)
    torch.manual_seed(1)
    td = env.reset()
    torch.manual_seed(2)
    kernel = None if kernel_cls is None else kernel_cls(env)
    return run_rollout(
        env,
        steps,
        td,
        policy=RandomPolicy(env.action_spec) if policy else None,
        break_when_any_done=kwargs.get("break_when_any_done", False),
        break_when_all_done=kwargs.get("break_when_all_done", False),
        kernel=kernel,
    )


def _manual(env, steps, actions):
    """A plain loop: ``step``, record, ``step_mdp``, reset the done sub-envs."""
    env.set_seed(3)
    torch.manual_seed(1)
    td = env.reset()
    rows = []
    for t in range(steps):
        td["action"] = actions[..., t, :] if actions.dim() > 1 else actions[t]
        td = env.step(td)
        rows.append(td.clone())
        td = step_mdp(td)
        done = td["done"]
        if done.any():
            td["_reset"] = done.clone()
            td = env.reset(td)
    return torch.stack(rows, len(env.batch_size))


class TestNativeKernel:
    def test_native_envs_use_it(self):
        assert isinstance(PendulumEnv(batch_size=[2]).rollout_kernel(), NativeKernel)
        assert isinstance(CartPoleEnv().rollout_kernel(), NativeKernel)

    @pytest.mark.parametrize("batch", BATCHES)
    def test_matches_a_step_loop(self, batch):
        # short episodes: resets of some sub-envs in the middle of the rollout
        env = CartPoleEnv(batch_size=batch, max_episode_steps=7)
        out = _rollout(lambda: CartPoleEnv(batch_size=batch, max_episode_steps=7), 25, True, None)
        expected = _manual(env, 25, out["action"])
        assert_close(out, expected)
        assert out["next", "truncated"].any()
        # a reset row starts from the reset observation, the others from the last "next"
        done = out["next", "done"][..., :-1, :]
        carried = out["next", "observation"][..., :-1, :]
        root = out["observation"][..., 1:, :]
        keep = ~done.expand_as(root)
        assert torch.equal(root[keep], carried[keep])
        assert not torch.equal(root[~keep], carried[~keep])
        assert not out["done"].any()  # every root starts an unfinished episode

    @pytest.mark.parametrize("batch", BATCHES)
    @pytest.mark.parametrize("policy", [False, True])
    @pytest.mark.parametrize(
        "make",
        [
            lambda b: CartPoleEnv(batch_size=b, max_episode_steps=9),
            lambda b: PendulumEnv(batch_size=b),
            lambda b: TransformedEnv(CartPoleEnv(batch_size=b), StepCounter(6)),
            lambda b: TransformedEnv(PendulumEnv(batch_size=b), RewardSum()),
        ],
    )
    def test_same_rollout_as_the_generic_kernel(self, batch, policy, make):
        def kernel_of(env):
            return EnvKernel(env)

        ours = _rollout(lambda: make(batch), 30, policy, None)
        generic = _rollout(lambda: make(batch), 30, policy, kernel_of)
        assert_close(ours, generic)

    def test_early_stops(self):
        for kwargs in ({"break_when_any_done": True}, {"break_when_all_done": True}):
            ours = _rollout(lambda: CartPoleEnv(batch_size=[4]), 200, False, None, **kwargs)
            generic = _rollout(lambda: CartPoleEnv(batch_size=[4]), 200, False, EnvKernel, **kwargs)
            assert ours.shape[1] < 200
            assert_close(ours, generic)

    def test_pendulum_writes_no_done_flags(self):
        out = PendulumEnv(batch_size=[3]).rollout(50)
        assert out.shape == (3, 50)  # never done: no early stop
        for key in ("done", "terminated", "truncated"):
            assert not out["next", key].any() and not out[key].any()

    def test_a_subclass_with_its_own_step_keeps_it(self):
        class Doubled(PendulumEnv):
            def _step(self, tensordict):
                out = super()._step(tensordict)
                out["reward"] = out["reward"] * 2
                return out

        outs = []
        for cls in (Doubled, PendulumEnv):
            env = cls(batch_size=[2])
            env.set_seed(0)
            torch.manual_seed(0)
            outs.append(env.rollout(4))
        assert isinstance(Doubled(batch_size=[2]).rollout_kernel(), EnvKernel)
        assert torch.equal(outs[0]["next", "reward"], 2 * outs[1]["next", "reward"])
        checked = PendulumEnv(batch_size=[2], run_type_checks=True)
        assert isinstance(checked.rollout_kernel(), EnvKernel)

    def test_gradients_flow_through_a_policy(self):
        env = PendulumEnv(batch_size=[2])
        weight = torch.ones(1, requires_grad=True)

        def policy(td):
            td["action"] = (td["observation"][..., :1] * weight).clamp(-2, 2)
            return td

        out = env.rollout(5, policy)
        out["next", "reward"].sum().backward()
        assert weight.grad is not None and weight.grad.abs() > 0

    def test_a_bad_action_shape_from_a_policy_names_the_spec(self):
        env = CartPoleEnv(batch_size=[3])

        def policy(td):
            td["action"] = torch.zeros(3, 5, dtype=torch.int64)
            return td

        with pytest.raises(ValueError, match=r"action has shape \(3, 5\), expected \(3, 2\)"):
            env.rollout(3, policy)


class TestNativeKernelDeclared:
    def test_a_subclass_overriding_public_step_or_reset_keeps_its_methods(self):
        class Logged(CartPoleEnv):
            calls = 0

            def reset(self, tensordict=None, **kwargs):
                type(self).calls += 1
                return super().reset(tensordict, **kwargs)

        class Declared(PendulumEnv):
            uses_native_kernel = True

            def _step(self, tensordict):  # declared equivalent: the kernel is kept
                return super()._step(tensordict)

        assert not Logged.uses_native_kernel and isinstance(Logged().rollout_kernel(), EnvKernel)
        assert isinstance(Declared().rollout_kernel(), NativeKernel)
        env = Logged(batch_size=[4], max_episode_steps=5)
        env.rollout(12, break_when_any_done=False)
        assert Logged.calls >= 3  # the first reset, then the resets of the rollout

    def test_a_learnable_env_parameter_with_a_policy(self):
        class Geared(PendulumEnv):
            uses_native_kernel = True

            def __init__(self):
                super().__init__(batch_size=[2])
                self.gain = torch.nn.Parameter(torch.tensor(1.5))

            def _step_entries(self, action):
                return super()._step_entries(action * self.gain)

        env = Geared()
        out = env.rollout(6, lambda td: td.set("action", torch.ones(2, 1)))
        out["next", "reward"].sum().backward()
        assert env.gain.grad is not None and env.gain.grad.abs() > 0
