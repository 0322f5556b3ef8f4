"""SerialEnv and ParallelEnv behaviour: specs, seeds, partial resets, auto-resets.

Every test runs on both classes and checks values against literals or the other class.
The ParallelEnvs are started once per module: the CartPole one with ``spawn`` (the
default), the counter one with ``fork`` (a spawned worker re-imports torch, which takes
seconds on a small machine).
"""

from __future__ import annotations

import doctest
import functools
import importlib
import pickle
import sys
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from rl.envs import (
    CartPoleEnv,
    EnvCreator,
    GymEnv,
    ParallelEnv,
    SerialEnv,
    check_env_specs,
)

sys.path.insert(0, str(Path(__file__).parent))
from _batched_factories import CounterEnv  # noqa: E402

# worker 0 terminates after 2 unit steps, worker 1 is truncated after 3 steps
COUNTER_KWARGS = [{"limit": 2.0}, {"truncate_at": 3}, {}]
CARTPOLE = functools.partial(GymEnv, "CartPole-v1")


@pytest.fixture(scope="module")
def counters():
    """``{"serial": SerialEnv, "parallel": ParallelEnv}`` of three CounterEnvs."""
    envs = {
        "serial": SerialEnv(3, CounterEnv, COUNTER_KWARGS),
        "parallel": ParallelEnv(3, CounterEnv, COUNTER_KWARGS, mp_start_method="fork"),
    }
    yield envs
    for env in envs.values():
        env.close()


@pytest.fixture(scope="module")
def cartpoles():
    """``{"serial": ..., "parallel": ...}`` of two gymnasium CartPole-v1 envs."""
    envs = {
        "serial": SerialEnv(2, CARTPOLE),
        "parallel": ParallelEnv(2, CARTPOLE, mp_start_method="spawn"),
    }
    assert envs["parallel"].mp_start_method == "spawn"
    yield envs
    for env in envs.values():
        env.close()


KINDS = ["serial", "parallel"]


def ones_policy(td):
    return td.set("action", torch.ones(*td.batch_size, 1, device=td.device))


class ReplayPolicy:
    """Writes ``actions[t]`` at call ``t`` (the actions a policy-free rollout draws)."""

    def __init__(self, actions):
        self.actions = actions
        self.t = 0

    def __call__(self, td):
        td.set("action", self.actions[self.t])
        self.t += 1
        return td


class TestSpecs:
    @pytest.mark.parametrize("kind", KINDS)
    def test_batch_size_and_specs(self, counters, kind):
        env = counters[kind]
        assert env.batch_size == torch.Size([3])
        assert env.num_workers == 3
        assert env.observation_spec["observation"].shape == torch.Size([3, 3])
        assert env.action_spec.shape == torch.Size([3, 1])
        assert env.reward_spec.shape == torch.Size([3, 1])
        assert env.full_done_spec["terminated"].shape == torch.Size([3, 1])

    @pytest.mark.parametrize("kind", KINDS)
    def test_check_env_specs_counter(self, counters, kind):
        check_env_specs(counters[kind], seed=0)

    @pytest.mark.parametrize("kind", KINDS)
    def test_check_env_specs_gym_cartpole(self, cartpoles, kind):
        check_env_specs(cartpoles[kind], seed=0, max_steps=30)

    def test_check_env_specs_native_and_sub_batched(self):
        env = ParallelEnv(2, CartPoleEnv, mp_start_method="fork")
        check_env_specs(env, seed=0)
        assert env.action_spec.shape == torch.Size([2, 2])
        env.close()
        sub = functools.partial(CounterEnv, limit=2.0, batch_size=[2])
        for env in (SerialEnv(3, sub), ParallelEnv(3, sub, mp_start_method="fork")):
            assert env.batch_size == torch.Size([3, 2])
            assert env.observation_spec["observation"].shape == torch.Size([3, 2, 3])
            check_env_specs(env, seed=0, max_steps=5)
            env.close()


class TestSeeding:
    @pytest.mark.parametrize("kind", KINDS)
    def test_per_worker_seeds_chain(self, counters, kind):
        def chain(seed):
            """Each worker's seed (worker i gets the seed worker i - 1 returned)."""
            seeds = []
            for _ in range(3):
                seeds.append(seed)
                seed = CounterEnv().set_seed(seed)
            return seeds, seed

        env = counters[kind]
        seeds0, next0 = chain(0)
        seeds7, next7 = chain(7)
        assert len(set(seeds7)) == 3
        assert env.set_seed(0) == next0
        before = env.reset()["observation"][:, 2]  # reset count + seed offset
        assert env.set_seed(7) == next7
        after = env.reset()["observation"][:, 2]
        offsets = [s7 % 1000 - s0 % 1000 for s0, s7 in zip(seeds0, seeds7)]
        assert (after - before - 1).tolist() == offsets

    def test_same_seed_identical_rollouts(self, cartpoles):
        rollouts = []
        for kind in ("parallel", "serial", "parallel"):
            env = cartpoles[kind]
            env.set_seed(3)
            torch.manual_seed(3)
            rollouts.append(env.rollout(60, break_when_any_done=False))
        for rollout in rollouts[1:]:
            assert (rollout == rollouts[0]).all()
        obs = rollouts[0]["observation"]
        assert not torch.equal(obs[0], obs[1])  # workers got different seeds
        env = cartpoles["parallel"]
        env.set_seed(4)
        torch.manual_seed(3)
        other = env.rollout(60, break_when_any_done=False)
        assert not torch.equal(other["observation"], obs)

    def test_matches_sub_envs_stepped_by_hand(self, cartpoles):
        env = cartpoles["parallel"]
        env.set_seed(11)
        torch.manual_seed(0)
        rollout = env.rollout(15, break_when_any_done=True)
        steps = rollout.batch_size[-1]
        seed = 11
        for i in range(2):
            sub = CARTPOLE()
            next_seed = sub.set_seed(seed)
            td = sub.reset()
            for t in range(steps):
                td["action"] = rollout["action"][i, t]
                torch.testing.assert_close(td["observation"], rollout["observation"][i, t])
                td = sub.step(td)
                torch.testing.assert_close(
                    td["next", "observation"], rollout["next", "observation"][i, t]
                )
                td = td["next"].exclude("reward")
            seed = next_seed
            sub.close()


class TestResets:
    @pytest.mark.parametrize("kind", KINDS)
    @pytest.mark.parametrize("with_obs", [True, False])
    def test_partial_reset_only_masked(self, counters, kind, with_obs):
        env = counters[kind]
        env.set_seed(0)
        td = env.reset()
        for _ in range(2):
            td = ones_policy(td)
            td = env.step(td)["next"].exclude("reward")
        before = td["observation"].clone()
        assert before[:, 0].tolist() == [2.0, 2.0, 2.0]
        mask = torch.tensor([[True], [False], [True]])
        inp = td.clone() if with_obs else TensorDict(batch_size=[3])
        inp["_reset"] = mask
        out = env.reset(inp)
        assert "_reset" not in out.keys()
        obs = out["observation"]
        assert obs[:, 0].tolist() == [0.0, 2.0, 0.0]  # counts
        assert obs[:, 1].tolist() == [0.0, 2.0, 0.0]  # steps
        assert torch.equal(obs[:, 2] - before[:, 2], torch.tensor([1.0, 0.0, 1.0]))
        assert not out["done"].any()
        # the next step continues from there
        out = env.step(ones_policy(out))
        assert out["next", "observation"][:, 0].tolist() == [1.0, 3.0, 1.0]

    @pytest.mark.parametrize("kind", KINDS)
    def test_bad_reset_mask(self, counters, kind):
        env = counters[kind]
        with pytest.raises(ValueError, match=r"'_reset' has shape \(2,\), expected \(3, 1\)"):
            env._reset(TensorDict(_reset=torch.ones(2, dtype=torch.bool)))

    @pytest.mark.parametrize("kind", KINDS)
    def test_terminated_and_truncated_through_auto_reset(self, counters, kind):
        env = counters[kind]
        rollout = env.rollout(7, ones_policy, break_when_any_done=False)
        nxt = rollout["next"]
        term = nxt["terminated"].squeeze(-1).int().tolist()
        trunc = nxt["truncated"].squeeze(-1).int().tolist()
        assert term == [[0, 1, 0, 1, 0, 1, 0], [0] * 7, [0] * 7]
        assert trunc == [[0] * 7, [0, 0, 1, 0, 0, 1, 0], [0] * 7]
        assert torch.equal(nxt["done"], nxt["terminated"] | nxt["truncated"])
        counts = nxt["observation"][..., 0].tolist()
        assert counts == [[1, 2, 1, 2, 1, 2, 1], [1, 2, 3, 1, 2, 3, 1], [1, 2, 3, 4, 5, 6, 7]]
        # the root after a done step is the reset state, else the previous next state
        root = rollout["observation"][..., 0].tolist()
        assert root == [[0, 1, 0, 1, 0, 1, 0], [0, 1, 2, 0, 1, 2, 0], [0, 1, 2, 3, 4, 5, 6]]
        assert not rollout["done"].any()

    @pytest.mark.parametrize("kind", KINDS)
    def test_fast_rollout_equals_generic_loop(self, counters, kind):
        env = counters[kind]
        env.set_seed(1)  # first: starting the workers draws their seeds from torch's RNG
        torch.manual_seed(5)
        fast = env.rollout(12, break_when_any_done=False)
        torch.manual_seed(5)
        actions = env.full_action_spec.rand((12,))["action"]
        env.set_seed(1)
        generic = env.rollout(12, ReplayPolicy(actions), break_when_any_done=False)
        for td in (fast, generic):  # reset counts relative to the rollout's first reset
            start = td["observation"][:, :1, 2].clone()
            td["observation"][..., 2] -= start
            td["next", "observation"][..., 2] -= start
        assert (fast == generic).all()
        done = fast["next", "done"].squeeze(-1)
        assert done.any()  # the auto-reset path was exercised
        nxt_obs, root_obs = fast["next", "observation"], fast["observation"]
        for i, t in zip(*torch.where(~done[:, :-1])):
            assert torch.equal(root_obs[i, t + 1], nxt_obs[i, t])
        for i, t in zip(*torch.where(done[:, :-1])):
            assert root_obs[i, t + 1, 1] == 0  # steps since reset

    @pytest.mark.parametrize("kind", KINDS)
    def test_break_when_all_done(self, kind):
        kwargs = [{"limit": 2.0}, {"truncate_at": 3}, {"limit": 4.0}]
        if kind == "serial":
            env = SerialEnv(3, CounterEnv, kwargs)
        else:
            env = ParallelEnv(3, CounterEnv, kwargs, mp_start_method="fork")
        rollout = env.rollout(10, ones_policy, break_when_any_done=False, break_when_all_done=True)
        assert rollout.batch_size == torch.Size([3, 4])  # the last one is done at step 4
        assert rollout["next", "done"].squeeze(-1).int().tolist() == [
            [0, 1, 0, 1],
            [0, 0, 1, 0],
            [0, 0, 0, 1],
        ]
        rollout = env.rollout(50, break_when_any_done=False, break_when_all_done=True)
        seen = rollout["next", "done"].squeeze(-1).cummax(-1).values
        assert seen[:, -1].all() and not seen[:, -2].all()
        env.close()

    @pytest.mark.parametrize("kind", KINDS)
    def test_break_when_any_done(self, counters, kind):
        rollout = counters[kind].rollout(10, ones_policy)
        assert rollout.batch_size == torch.Size([3, 2])
        rollout = counters[kind].rollout(10)  # random actions in [0, 1): later
        assert rollout["next", "done"][:, -1].any()
        assert not rollout["next", "done"][:, :-1].any()

    @pytest.mark.parametrize("kind", KINDS)
    def test_step_and_maybe_reset(self, counters, kind):
        env = counters[kind]
        td = env.reset()
        for step in range(3):
            td = ones_policy(td)
            td, root = env.step_and_maybe_reset(td)
            if step == 1:  # worker 0 terminated at its second step
                assert td["next", "terminated"].squeeze(-1).tolist() == [True, False, False]
                assert td["next", "observation"][:, 0].tolist() == [2.0, 2.0, 2.0]
                assert root["observation"][:, 0].tolist() == [0.0, 2.0, 2.0]
                assert not root["done"].any()
                # a partial reset of another worker keeps worker 0's reset state
                mask = torch.tensor([[False], [True], [False]])
                partial = env.reset(TensorDict(_reset=mask, batch_size=[3]))
                assert partial["observation"][:, 0].tolist() == [0.0, 0.0, 2.0]
                root["observation"][1] = partial["observation"][1]
            td = root
        assert td["observation"][:, 0].tolist() == [1.0, 1.0, 3.0]


class TestBadInput:
    @pytest.mark.parametrize("kind", KINDS)
    def test_action_shape(self, counters, kind):
        env = counters[kind]
        td = env.reset()
        td["action"] = torch.ones(3, 2)
        with pytest.raises(ValueError, match=r"'action' has shape \(3, 2\), expected \(3, 1\)"):
            env.step(td)

    @pytest.mark.parametrize("kind", KINDS)
    def test_missing_action(self, counters, kind):
        env = counters[kind]
        with pytest.raises(KeyError, match="action"):
            env.step(env.reset())

    def test_constructor_arguments(self):
        with pytest.raises(ValueError, match="num_workers must be a positive int, got 0"):
            SerialEnv(0, CounterEnv)
        with pytest.raises(ValueError, match="create_env_kwargs has 2 entries, expected one"):
            SerialEnv(3, CounterEnv, [{}, {}])
        with pytest.raises(TypeError, match="create_env_kwargs must be a dict"):
            SerialEnv(2, CounterEnv, 3)
        with pytest.raises(TypeError, match="must return an rl.envs.EnvBase, got object"):
            SerialEnv(2, object)
        with pytest.raises(ValueError, match="mp_start_method must be one of"):
            ParallelEnv(2, CounterEnv, mp_start_method="threads")

    def test_sub_envs_with_different_specs(self):
        from _batched_factories import WideCounterEnv

        with pytest.raises(ValueError, match=r"sub-env 1 declares 'observation' with shape"):
            SerialEnv(2, [CounterEnv, WideCounterEnv])


class TestGymFastStep:
    """Single gym sub-envs are stepped straight into the buffers; same results as ``_step``."""

    @pytest.mark.parametrize(
        "kwargs", [{}, {"categorical_action_encoding": True}], ids=["onehot", "categorical"]
    )
    def test_same_as_generic_step(self, kwargs):
        fast = SerialEnv(3, functools.partial(GymEnv, "CartPole-v1", **kwargs))
        slow = SerialEnv(3, functools.partial(GymEnv, "CartPole-v1", **kwargs))
        assert all(core.fast_step is not None for core in fast._cores)
        assert all(core.fast_reset is not None for core in fast._cores)
        for core in slow._cores:
            core.fast_step = core.fast_reset = None
        rollouts = []
        for env in (fast, slow):
            env.set_seed(0)
            torch.manual_seed(0)
            rollouts.append(env.rollout(50, break_when_any_done=False))
        assert rollouts[0]["next", "done"].any()
        assert (rollouts[0] == rollouts[1]).all()
        # explicit partial resets and seeds go through the fast reset alike
        for env in (fast, slow):
            env.set_seed(3)
        mask = torch.tensor([[True], [False], [True]])
        resets = [env.reset(TensorDict({"_reset": mask}, [3])) for env in (fast, slow)]
        assert (resets[0] == resets[1]).all()
        assert not resets[0]["done"].any()
        after = []
        for env in (fast, slow):
            torch.manual_seed(1)
            after.append(
                env.rollout(
                    30, break_when_any_done=False, auto_reset=False, tensordict=resets.pop(0)
                )
            )
        assert (after[0] == after[1]).all()

    def test_not_used_for_other_envs(self):
        env = SerialEnv(2, CounterEnv)
        assert all(core.fast_step is None for core in env._cores)
        assert all(core.fast_reset is None for core in env._cores)
        env = SerialEnv(2, functools.partial(GymEnv, "CartPole-v1", num_envs=2))
        assert env.batch_size == torch.Size([2, 2])
        assert all(core.fast_step is None for core in env._cores)
        check_env_specs(env, seed=0, max_steps=20)


class TestNestedKeys:
    @pytest.mark.parametrize("kind", KINDS)
    def test_nested_observation(self, kind):
        from _batched_factories import NestedObsEnv

        if kind == "serial":
            env = SerialEnv(2, NestedObsEnv)
        else:
            env = ParallelEnv(2, NestedObsEnv, mp_start_method="fork")
        check_env_specs(env, seed=0)
        assert env.observation_spec["agent", "count"].shape == torch.Size([2, 1])
        for policy in (None, lambda td: td.set("action", torch.ones(2, 1))):
            rollout = env.rollout(8, policy, break_when_any_done=False)
            torch.testing.assert_close(
                rollout["next", "agent", "count"], rollout["next", "observation"][..., :1]
            )
            torch.testing.assert_close(rollout["agent", "count"], rollout["observation"][..., :1])
        counts = rollout["next", "agent", "count"].squeeze(-1).tolist()
        assert counts == [[1, 2, 3, 1, 2, 3, 1, 2]] * 2
        td = env.reset()
        td["action"] = torch.ones(2, 1)
        for _ in range(3):
            td, root = env.step_and_maybe_reset(td)
            td = root.set("action", torch.ones(2, 1))
        assert root["agent", "count"].squeeze(-1).tolist() == [0.0, 0.0]  # reset at 3
        env.close()


class TestDevice:
    def test_cpu_device_argument(self):
        env = SerialEnv(2, CounterEnv, device="cpu")
        assert env.device == torch.device("cpu")
        assert env.observation_spec["observation"].device == torch.device("cpu")
        check_env_specs(env, seed=0)

    @pytest.mark.parametrize("kind", KINDS)
    def test_outputs_carry_the_device(self, kind):
        # TorchRL's README asserts ``env.reset().device == env.device`` for a batched env
        cls = SerialEnv if kind == "serial" else ParallelEnv
        kwargs = {} if kind == "serial" else {"mp_start_method": "fork"}
        env = cls(2, CounterEnv, device="cpu", **kwargs)
        td = env.reset()
        assert td.device == torch.device("cpu")
        td["action"] = torch.ones(2, 1)
        assert env.step(td)["next"].device == torch.device("cpu")
        assert env.rollout(3).device == torch.device("cpu")
        env.close()
        env = cls(2, CounterEnv, **kwargs)  # no device: the sub-env's, None
        assert env.device is None and env.reset().device is None
        env.close()

    @pytest.mark.gpu
    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
    @pytest.mark.parametrize("kind", KINDS)
    def test_cuda_outputs_and_sub_envs(self, kind):
        cls = SerialEnv if kind == "serial" else ParallelEnv
        env = cls(2, CounterEnv, device="cuda")  # CPU sub-envs, CUDA outputs
        rollout = env.rollout(4, ones_policy, break_when_any_done=False)
        assert rollout.device.type == "cuda"
        assert rollout["next", "observation"][:, :, 0].tolist() == [[1, 2, 3, 4]] * 2
        check_env_specs(env, seed=0)
        env.close()
        env = cls(2, functools.partial(CartPoleEnv, device="cuda"))  # CUDA sub-envs
        assert env.device.type == "cuda"
        check_env_specs(env, seed=0, max_steps=20)
        env.close()


class TestParallelOptions:
    def test_num_sub_threads(self):
        from _batched_factories import ThreadCountEnv

        env = ParallelEnv(2, ThreadCountEnv, mp_start_method="fork", num_sub_threads=2)
        env.start()
        assert [env._pool.call(i, "seed", 0, False) for i in range(2)] == [2, 2]
        env.close()
        with pytest.raises(ValueError, match="num_sub_threads must be at least 1, got 0"):
            ParallelEnv(2, CounterEnv, num_sub_threads=0)
        with pytest.raises(TypeError, match="num_sub_threads must be an int, got 1.5"):
            ParallelEnv(2, CounterEnv, num_sub_threads=1.5)

    def test_lazy_start_and_restart_after_close(self):
        env = ParallelEnv(2, CounterEnv, mp_start_method="fork")
        assert env.worker_pids == [] and env.is_closed  # specs are known without workers
        assert env.observation_spec["observation"].shape == torch.Size([2, 3])
        env.start()
        first = env.worker_pids
        assert len(first) == 2 and not env.is_closed
        env.close()
        with pytest.raises(RuntimeError, match="no running workers"):
            env.step(ones_policy(TensorDict(batch_size=[2])))
        td = env.reset()
        assert env.worker_pids and not set(env.worker_pids) & set(first)
        assert env.step(ones_policy(td))["next", "observation"][:, 0].tolist() == [1.0, 1.0]
        env.close()


class TestPickle:
    @pytest.mark.parametrize("kind", KINDS)
    def test_copy_builds_its_own_sub_envs(self, kind):
        make = EnvCreator(lambda: CounterEnv(limit=2.0))
        if kind == "serial":
            env = SerialEnv(2, make)
        else:
            env = ParallelEnv(2, make, mp_start_method="fork", num_sub_threads=1)
        env.reset()
        clone = pickle.loads(pickle.dumps(env))
        assert type(clone) is type(env) and clone.batch_size == env.batch_size
        if kind == "parallel":
            assert clone.mp_start_method == "fork" and clone.worker_pids == []
        rollouts = []
        for e in (env, clone):
            e.set_seed(3)
            rollouts.append(e.rollout(5, ones_policy, break_when_any_done=False))
        for r in rollouts:  # drop the reset counts (the original was reset once more)
            r["observation"] = r["observation"][..., :2]
            r["next", "observation"] = r["next", "observation"][..., :2]
        assert (rollouts[0] == rollouts[1]).all()
        env.step(ones_policy(env.reset()))  # the clone does not share the original's state
        assert clone.reset()["observation"][:, 0].tolist() == [0.0, 0.0]
        env.close()
        clone.close()


class TestSerialEnv:
    def test_close_and_restart(self):
        env = SerialEnv(2, CounterEnv)
        first = env.envs
        env.close()
        assert env.is_closed and first[0].is_closed
        td = env.reset()
        assert td["observation"].shape == (2, 3) and not env.is_closed
        assert env.envs[0] is not first[0]


@pytest.mark.parametrize(
    "module",
    ["rl.envs._batched._serial", "rl.envs._batched._parallel", "rl.envs._batched._creator"],
)
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
