"""TransformedEnv.rollout(policy) over a gym env (the policy fast path) gives the step loop's result."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch
from _engine_helpers import rollout_generic
from gymnasium.vector import AutoresetMode
from tensordict.nn import TensorDictModule

from rl.envs import GymEnv, GymWrapper
from rl.envs.transforms import (
    ClipTransform,
    Compose,
    DoubleToFloat,
    InitTracker,
    ObservationNorm,
    RewardScaling,
    RewardSum,
    StepCounter,
    Transform,
    TransformedEnv,
)
from rl.envs.transforms._kernel import TransformKernel


@pytest.fixture
def fast_calls(monkeypatch):
    """Counts the rollouts whose transforms ran on the base env's kernel (the steps taken)."""
    calls = []
    finish = TransformKernel.finish

    def spy(self, steps):
        calls.append(steps)
        return finish(self, steps)

    monkeypatch.setattr(TransformKernel, "finish", spy)
    return calls


class _SometimesCopy(Transform):
    """Elementwise; returns its input object itself while the cart is near the centre."""

    _elementwise = True

    def _apply_transform(self, obs):
        return obs if bool((obs[..., 0].abs() < 0.05).all()) else obs * 1.0


def _bench_stack():
    return Compose(StepCounter(), RewardSum(), DoubleToFloat(), ObservationNorm(loc=0.5, scale=2.0))


STACKS = {
    "bench": _bench_stack,
    "reward": lambda: Compose(RewardScaling(0.0, 3.0), RewardSum(), StepCounter()),
    "init_clip": lambda: Compose(
        InitTracker(), ClipTransform(in_keys=["observation"], low=-0.1, high=0.1)
    ),
    "empty": lambda: Compose(),
    # the observation is replaced at some steps only: the copies start mid-rollout
    "sometimes": lambda: Compose(_SometimesCopy(in_keys=["observation"]), RewardSum()),
}


def _policy(td):
    """Stochastic one-hot actions that depend on the transformed root, plus extra outputs."""
    logits = torch.randn(*td.batch_size, 2) + td["observation"][..., :2]
    td["action"] = torch.nn.functional.one_hot(logits.argmax(-1), 2).bool()
    td["logits"] = logits
    seen = td["observation"].sum(-1, keepdim=True)
    for key in ("step_count", "episode_reward", "is_init"):
        if key in td.keys():
            seen = seen + td[key]
    td["seen"] = seen
    return td


def _obs_replacing_policy(td):
    td["observation"] = td["observation"] * 2
    return _policy(td)


def _count_replacing_policy(td):
    # the step counter of the next step is computed from this value, as in the step loop
    if "step_count" in td.keys():
        td["step_count"] = td["step_count"] + 10
    return _policy(td)


def _next_writing_policy(td):
    td = _policy(td)
    td["next", "hidden"] = torch.ones(*td.batch_size, 1)
    return td


def _compare(env, policy, steps, **kwargs):
    env.set_seed(0)
    torch.manual_seed(0)
    fast = env.rollout(steps, policy, **kwargs)
    env.set_seed(0)
    torch.manual_seed(0)
    generic = rollout_generic(
        env,
        steps,
        env.reset(),
        policy=policy,
        callback=None,
        break_when_any_done=kwargs.get("break_when_any_done", True),
        break_when_all_done=kwargs.get("break_when_all_done", False),
    )
    assert set(fast.keys(True, True)) == set(generic.keys(True, True))
    assert fast.batch_size == generic.batch_size
    for key in generic.keys(True, True):
        assert fast[key].dtype == generic[key].dtype, key
        torch.testing.assert_close(fast[key], generic[key], rtol=0, atol=0, msg=str(key))
    return fast


BREAKS = [(False, False), (True, False), (False, True)]


class TestPolicyFastPath:
    @pytest.mark.parametrize("stack", list(STACKS))
    @pytest.mark.parametrize("num_envs", [1, 3])
    @pytest.mark.parametrize("breaks", BREAKS, ids=["none", "any", "all"])
    def test_equals_step_loop(self, fast_calls, stack, num_envs, breaks):
        env = TransformedEnv(GymEnv("CartPole-v1", num_envs=num_envs), STACKS[stack]())
        any_done, all_done = breaks
        fast = _compare(
            env, _policy, 80, break_when_any_done=any_done, break_when_all_done=all_done
        )
        assert len(fast_calls) == 1
        done = fast["next", "done"]
        assert done.any()
        if num_envs > 1 and not any_done:
            # partial resets: the sub-envs finish their episodes at different steps
            assert not (done.all(0) == done.any(0)).all()

    @pytest.mark.parametrize(
        "policy", [_obs_replacing_policy, _count_replacing_policy], ids=["obs", "count"]
    )
    @pytest.mark.parametrize("num_envs", [1, 3])
    def test_policy_replaces_root_entries(self, fast_calls, policy, num_envs):
        env = TransformedEnv(GymEnv("CartPole-v1", num_envs=num_envs), _bench_stack())
        _compare(env, policy, 60, break_when_any_done=False)
        assert len(fast_calls) == 1

    def test_policy_writing_next_uses_step_loop(self, fast_calls):
        env = TransformedEnv(GymEnv("CartPole-v1", num_envs=2), _bench_stack())
        fast = _compare(env, _next_writing_policy, 40, break_when_any_done=False)
        assert not fast_calls
        assert ("next", "hidden") in fast.keys(True, True)

    def test_module_reads_transformed_observation(self, fast_calls):
        env = TransformedEnv(GymEnv("CartPole-v1"), _bench_stack())
        torch.manual_seed(0)
        net = TensorDictModule(torch.nn.Linear(4, 2), in_keys=["observation"], out_keys=["action"])
        actor = TensorDictModule(
            lambda x: torch.nn.functional.one_hot(x.argmax(-1), 2).bool(),
            in_keys=["action"],
            out_keys=["action"],
        )

        def policy(td):
            with torch.no_grad():
                return actor(net(td))

        fast = _compare(env, policy, 200, break_when_any_done=False)
        assert len(fast_calls) == 1
        # the policy saw the normalised observation: its action is a function of it
        expected = net.module(fast["observation"]).argmax(-1)
        assert (fast["action"].float().argmax(-1) == expected).all()

    @pytest.mark.parametrize("num_envs", [1, 3])
    def test_truncating_step_counter_uses_step_loop(self, fast_calls, num_envs):
        env = TransformedEnv(
            GymEnv("CartPole-v1", num_envs=num_envs),
            Compose(StepCounter(max_steps=5), RewardSum(), ObservationNorm(loc=0.5, scale=2.0)),
        )
        fast = _compare(env, _policy, 30, break_when_any_done=False)
        assert not fast_calls
        assert int(fast["next", "step_count"].max()) == 5

    def test_action_side_transform_uses_step_loop(self, fast_calls):
        env = TransformedEnv(
            GymEnv("Pendulum-v1"),
            ObservationNorm(loc=0.0, scale=2.0, in_keys_inv=["action"]),
        )

        def policy(td):
            td["action"] = torch.rand(1) - 0.5
            return td

        _compare(env, policy, 20)
        assert not fast_calls

    def test_base_env_without_fast_path_uses_step_loop(self, fast_calls):
        class StepOverride(GymWrapper):
            def _step(self, tensordict):
                return super()._step(tensordict)

        env = TransformedEnv(StepOverride(gym.make("CartPole-v1")), _bench_stack())
        _compare(env, _policy, 60, break_when_any_done=False)
        assert not fast_calls

    def test_nested_transformed_env_uses_step_loop(self, fast_calls):
        inner = TransformedEnv(GymEnv("CartPole-v1"), StepCounter())
        env = TransformedEnv(inner, Compose(RewardSum(), ObservationNorm(loc=0.5, scale=2.0)))
        _compare(env, _policy, 60, break_when_any_done=False)
        assert not fast_calls

    @pytest.mark.parametrize("mode", ["async", "next_step"])
    def test_other_vector_envs(self, fast_calls, mode):
        if mode == "async":
            base = GymEnv("CartPole-v1", num_envs=3, vectorization_mode="async")
        else:
            base = GymWrapper(
                gym.vector.SyncVectorEnv(
                    [lambda: gym.make("CartPole-v1")] * 3,
                    autoreset_mode=AutoresetMode.NEXT_STEP,
                )
            )
        env = TransformedEnv(base, _bench_stack())
        try:
            for any_done, all_done in BREAKS:
                _compare(
                    env, _policy, 60, break_when_any_done=any_done, break_when_all_done=all_done
                )
        finally:
            env.close()
        assert len(fast_calls) == len(BREAKS)

    def test_continue_from_reset_tensordict(self, fast_calls):
        env = TransformedEnv(GymEnv("CartPole-v1"), _bench_stack())
        env.set_seed(0)
        torch.manual_seed(0)
        td = env.reset()
        fast = env.rollout(50, _policy, auto_reset=False, tensordict=td, break_when_any_done=False)
        assert len(fast_calls) == 1
        env.set_seed(0)
        torch.manual_seed(0)
        generic = rollout_generic(
            env, 50, env.reset(), policy=_policy, callback=None,
            break_when_any_done=False, break_when_all_done=False,
        )  # fmt: skip
        assert (fast == generic).all()
        # from a tensordict that is not a fresh reset: the kernel too (it needs no raw root)
        second = env.rollout(5, _policy, auto_reset=False, tensordict=fast[-1]["next"].clone())
        assert len(fast_calls) == 2
        assert second["step_count"][0].item() == fast["next", "step_count"][-1].item()
        assert second["step_count"][1].item() == second["step_count"][0].item() + 1

    def test_missing_action_error(self):
        env = TransformedEnv(GymEnv("CartPole-v1"), _bench_stack())
        with pytest.raises(KeyError, match="action"):
            env.rollout(5, lambda td: td)


class TestCollectorContinuation:
    """A rollout that goes on from the root the last one ended on (a collector's next
    batch) runs the transform kernel too, with the step loop's data."""

    def test_kernel_at_every_batch(self, fast_calls):
        from rl.collectors import Collector
        from rl.envs import Compose, ObservationNorm, RewardSum, StepCounter, TransformedEnv
        from rl.envs.engine import EnvKernel

        torch.manual_seed(0)
        net = torch.nn.Linear(4, 2)

        def policy(td):
            td["action"] = net(td["observation"]).argmax(-1)
            return td

        outs = []
        for step_loop in (False, True):
            env = TransformedEnv(
                GymEnv("CartPole-v1", num_envs=4, categorical_action_encoding=True),
                Compose(
                    StepCounter(),
                    RewardSum(),
                    ObservationNorm(
                        loc=torch.zeros(4), scale=torch.full((4,), 2.0), in_keys=["observation"]
                    ),
                ),
            )
            env.set_seed(0)
            if step_loop:
                env.__dict__["rollout_kernel"] = lambda env=env: EnvKernel(env)
            collector = Collector(env, policy, frames_per_batch=64, total_frames=640)
            outs.append(torch.cat(list(collector), -1))
        assert len(fast_calls) == 10  # every batch of the first collector, none of the second
        assert outs[0]["next", "done"].any()
        assert (outs[0] == outs[1]).all()

    def test_root_given_is_the_root_used(self):
        env = TransformedEnv(
            GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=True), StepCounter()
        )
        env.set_seed(0)

        def policy(td):
            td["action"] = torch.zeros(2, dtype=torch.int64)
            return td

        out = env.rollout(3, policy, break_when_any_done=False)
        root = out["next"][..., -1].exclude("reward").clone()
        root["step_count"] = root["step_count"] + 10  # not the values the rollout ended on
        again = env.rollout(2, policy, auto_reset=False, tensordict=root)
        assert again["step_count"][:, 0].squeeze(-1).tolist() == [13, 13]
        assert again["next", "step_count"][:, -1].squeeze(-1).tolist() == [15, 15]
