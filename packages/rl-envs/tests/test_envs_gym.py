"""GymEnv / GymWrapper: spaces, seeding, vector autoreset, pixels, frame skip, back-ends."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from _engine_helpers import rollout_generic
from gymnasium.vector import AutoresetMode
from tensordict import TensorDict

from rl.core import (
    Binary,
    Bounded,
    Categorical,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    Unbounded,
)
from rl.envs import GymEnv, GymWrapper, StepCounter, TransformedEnv, check_env_specs, step_mdp


def _generic(env, steps, **kwargs):
    """The rollout that the generic (``_step`` + ``reset``) loop produces."""
    td = env.reset()
    return rollout_generic(
        env, steps, td, policy=None, callback=None,
        break_when_any_done=kwargs.get("break_when_any_done", False),
        break_when_all_done=False,
    )  # fmt: skip


def _plain_replay(env_fn, seed, actions, num_envs=None):
    """Replays integer ``actions`` [T] (or [N, T]) in plain gym envs with auto-reset.

    Returns (root obs, next obs, reward, terminated, truncated) as arrays, laid out like a
    rollout: ``next`` holds the final obs of an episode, the following root the reset one.
    """
    if num_envs is None:
        return [a[0] for a in _plain_replay(env_fn, seed, actions[None], 1)]
    out = {k: [] for k in ("obs", "next", "reward", "term", "trunc")}
    for i in range(num_envs):
        env = env_fn()
        env.reset(seed=seed + i)  # what set_seed does (as TorchRL)
        obs, _ = env.reset()  # the rollout's own reset
        rows = {k: [] for k in out}
        for a in actions[i]:
            rows["obs"].append(obs)
            obs, r, te, tr, _ = env.step(int(a))
            rows["next"].append(obs)
            rows["reward"].append(r)
            rows["term"].append(te)
            rows["trunc"].append(tr)
            if te or tr:
                obs, _ = env.reset()
        for k in out:
            out[k].append(np.array(rows[k]))
    return [np.stack(out[k]) for k in ("obs", "next", "reward", "term", "trunc")]


def _assert_matches_plain(rollout, plain, nb):
    obs, nxt, reward, term, trunc = plain
    torch.testing.assert_close(rollout["observation"], torch.as_tensor(obs))
    torch.testing.assert_close(rollout["next", "observation"], torch.as_tensor(nxt))
    torch.testing.assert_close(rollout["next", "reward"][..., 0], torch.as_tensor(reward).float())
    assert rollout["next", "terminated"][..., 0].tolist() == term.tolist()
    assert rollout["next", "truncated"][..., 0].tolist() == trunc.tolist()
    done = torch.as_tensor(term | trunc)
    assert rollout["next", "done"][..., 0].tolist() == done.tolist()


class TestSpaces:
    def test_all_spaces_one_hot(self, all_spaces_env_cls):
        env = GymWrapper(all_spaces_env_cls())
        spec = env.observation_spec
        assert isinstance(spec["box"], Bounded) and spec["box"].shape == (2,)
        assert isinstance(spec["discrete"], OneHot) and spec["discrete"].shape == (4,)
        assert isinstance(spec["multi_discrete"], MultiOneHot) and spec["multi_discrete"].shape == (
            5,
        )
        assert isinstance(spec["multi_binary"], Binary) and spec["multi_binary"].shape == (3,)
        assert spec["tuple", "0"].dtype == torch.float64
        assert isinstance(spec["tuple", "1"], OneHot)
        assert isinstance(spec["nested", "inner"], Unbounded)
        assert isinstance(env.action_spec, MultiOneHot) and env.action_spec.shape == (5,)
        check_env_specs(env, seed=0)

    def test_all_spaces_categorical(self, all_spaces_env_cls):
        env = GymWrapper(all_spaces_env_cls(), categorical_action_encoding=True)
        spec = env.observation_spec
        assert isinstance(spec["discrete"], Categorical) and spec["discrete"].shape == ()
        assert isinstance(spec["multi_discrete"], MultiCategorical)
        assert isinstance(env.action_spec, MultiCategorical) and env.action_spec.shape == (2,)
        check_env_specs(env, seed=0)

    def test_positional_arguments_as_torchrl(self):
        # TorchRL's GymWrapper(env=None, categorical_action_encoding=False, **kwargs)
        env = GymWrapper(gym.make("CartPole-v1"), True)
        assert isinstance(env.action_spec, Categorical)
        with pytest.raises(TypeError, match="GymWrapper needs the gymnasium env to wrap"):
            GymWrapper()

    def test_values_converted(self, all_spaces_env_cls):
        gym_env = all_spaces_env_cls()
        env = GymWrapper(gym_env, categorical_action_encoding=True)
        env.set_seed(5)
        seen = []  # the observations the gym env returns
        sample = gym_env._obs
        gym_env._obs = lambda: seen.append(sample()) or seen[-1]
        td = env.reset()
        obs = seen[-1]
        assert td["discrete"].item() == obs["discrete"] - 1  # Discrete(start=1)
        assert td["multi_discrete"].tolist() == obs["multi_discrete"].tolist()
        torch.testing.assert_close(td["tuple", "0"], torch.as_tensor(obs["tuple"][0]))
        torch.testing.assert_close(td["nested", "inner"], torch.as_tensor(obs["nested"]["inner"]))
        td["action"] = torch.tensor([2, 1])
        td = env.step(td)
        assert gym_env.last_action.tolist() == [2, 1]
        assert td["next", "reward"].item() == 3.0

    def test_one_hot_action_to_gym(self, all_spaces_env_cls):
        gym_env = all_spaces_env_cls()
        env = GymWrapper(gym_env)
        td = env.reset()
        td["action"] = torch.tensor([False, False, True, True, False])
        env.step(td)
        assert gym_env.last_action.tolist() == [2, 0]

    def test_unsupported_space(self):
        class TextEnv(gym.Env):
            observation_space = gym.spaces.Text(5)
            action_space = gym.spaces.Discrete(2)

        with pytest.raises(TypeError, match="gym space Text.* is not supported"):
            GymWrapper(TextEnv())

    @pytest.mark.parametrize(
        "name",
        ["CartPole-v1", "Pendulum-v1", "MountainCarContinuous-v0", "Acrobot-v1", "FrozenLake-v1"],
    )
    def test_check_env_specs_classic(self, name):
        check_env_specs(GymEnv(name), seed=0, max_steps=20)

    @pytest.mark.parametrize("name", ["CartPole-v1", "Pendulum-v1"])
    def test_check_env_specs_vector(self, name):
        env = GymEnv(name, num_envs=3)
        check_env_specs(env, seed=0, max_steps=20)
        env.close()


class TestSingleEnv:
    def test_matches_plain_gym_loop(self):
        env = GymEnv("CartPole-v1", categorical_action_encoding=True)
        env.set_seed(3)
        rollout = env.rollout(300, break_when_any_done=False)
        assert rollout["next", "done"].sum() >= 5
        plain = _plain_replay(lambda: gym.make("CartPole-v1"), 3, rollout["action"].numpy())
        _assert_matches_plain(rollout, plain, 0)
        assert not rollout["done"].any()

    def test_truncation_kept_apart(self):
        env = GymEnv("Pendulum-v1", max_episode_steps=7)
        rollout = env.rollout(20, break_when_any_done=False)
        trunc = rollout["next", "truncated"][:, 0]
        assert trunc.nonzero().flatten().tolist() == [6, 13]
        assert not rollout["next", "terminated"].any()
        torch.testing.assert_close(rollout["next", "done"], rollout["next", "truncated"])

    def test_break_when_any_done(self):
        env = GymEnv("CartPole-v1")
        rollout = env.rollout(1000)
        assert rollout["next", "done"][-1].item()
        assert not rollout["next", "done"][:-1].any()

    @pytest.mark.parametrize("name", ["CartPole-v1", "Pendulum-v1"])
    def test_fast_path_equals_generic(self, name):
        env = GymEnv(name, max_episode_steps=25)
        env.set_seed(0)
        torch.manual_seed(0)
        fast = env.rollout(100, break_when_any_done=False)
        env.set_seed(0)
        torch.manual_seed(0)
        generic = _generic(env, 100)
        assert set(fast.keys(True, True)) == set(generic.keys(True, True))
        assert (fast == generic).all()

    def test_same_seed_same_rollout(self):
        env = GymEnv("Pendulum-v1")
        results = []
        for seed in (1, 1, 2):
            env.set_seed(seed)
            torch.manual_seed(0)
            results.append(env.rollout(30))
        assert (results[0] == results[1]).all()
        assert not torch.equal(results[0]["observation"], results[2]["observation"])

    def test_policy_rollout_and_step(self):
        env = GymEnv("Pendulum-v1")

        def policy(td):
            td["action"] = -td["observation"][..., 2:3].clamp(-2, 2)
            return td

        rollout = env.rollout(10, policy)
        torch.testing.assert_close(
            rollout["action"], -rollout["observation"][..., 2:3].clamp(-2, 2)
        )
        td = env.reset()
        with pytest.raises(KeyError, match="needs the action key 'action'"):
            env.step(td)

    def test_frame_skip(self):
        env = GymEnv("Pendulum-v1", frame_skip=3)
        env.set_seed(0)
        td = env.reset()
        td["action"] = torch.tensor([0.5])
        td = env.step(td)
        ref = gym.make("Pendulum-v1")
        ref.reset(seed=0)
        ref.reset()
        total = 0.0
        for _ in range(3):
            obs, r, *_ = ref.step(np.array([0.5], np.float32))
            total += r
        assert td["next", "reward"].item() == pytest.approx(total, rel=1e-6)
        torch.testing.assert_close(td["next", "observation"], torch.from_numpy(obs))

    def test_pixels(self):
        env = GymEnv("Pendulum-v1", from_pixels=True, pixels_only=False)
        td = env.reset()
        assert td["pixels"].shape == (500, 500, 3) and td["pixels"].dtype == torch.uint8
        assert td["observation"].shape == (3,)
        frame = env.env.render()
        assert torch.equal(td["pixels"], torch.from_numpy(frame))
        check_env_specs(env, max_steps=2)
        only = GymEnv("CartPole-v1", from_pixels=True)
        assert set(only.observation_keys) == {"pixels"}
        assert only.reset()["pixels"].shape == (400, 600, 3)

    def test_device(self):
        env = GymEnv("CartPole-v1", device="cpu")
        rollout = env.rollout(5)
        assert rollout.device == torch.device("cpu")
        assert env.observation_spec["observation"].device == torch.device("cpu")

    def test_bad_arguments(self):
        with pytest.raises(ValueError, match=r"batch_size must be \[\] for this gym env"):
            GymEnv("CartPole-v1", batch_size=[2])
        with pytest.raises(ValueError, match=r"batch_size must be \[4\]"):
            GymEnv("CartPole-v1", num_envs=4, batch_size=[3])
        with pytest.raises(ValueError, match="frame_skip must be a positive int, got 0"):
            GymEnv("CartPole-v1", frame_skip=0)
        with pytest.raises(ValueError, match=r"num_envs must be 0 \(one env\) or a positive int"):
            GymEnv("CartPole-v1", num_envs=-1)
        with pytest.raises(ValueError, match="num_workers must be a positive int, got 0"):
            GymEnv("CartPole-v1", num_workers=0)
        with pytest.raises(ValueError, match="vectorization_mode must be 'sync' or 'async'"):
            GymEnv("CartPole-v1", num_envs=2, vectorization_mode="threads")
        with pytest.raises(ValueError, match="needs a gym env made with render_mode='rgb_array'"):
            GymWrapper(gym.make("CartPole-v1"), from_pixels=True)

    def test_num_envs_as_torchrl(self):
        """0 (the default) and None: one env; 1: a vector env of one, batch [1]; the
        vector env of one steps as the single env does on the same seed."""
        assert GymEnv("CartPole-v1").batch_size == torch.Size([])
        assert GymEnv("CartPole-v1", num_envs=None).batch_size == torch.Size([])
        single = GymEnv("CartPole-v1", num_envs=0, categorical_action_encoding=True)
        vector = GymEnv("CartPole-v1", num_envs=1, categorical_action_encoding=True)
        assert vector.batch_size == torch.Size([1])
        assert vector.is_vector and not single.is_vector

        def push_right(td):
            return td.set("action", torch.ones(td.batch_size, dtype=torch.int64))

        single.set_seed(3)
        vector.set_seed(3)
        a = single.rollout(5, push_right)
        b = vector.rollout(5, push_right)
        assert b["next", "observation"].shape == (1, 5, 4)
        torch.testing.assert_close(a["next", "observation"], b["next", "observation"][0])
        torch.testing.assert_close(a["next", "reward"], b["next", "reward"][0])

    def test_num_workers_gives_a_parallel_env(self):
        """num_workers=2: a ParallelEnv of two GymEnvs, each a vector env of num_envs."""
        from rl.envs import ParallelEnv

        env = GymEnv("CartPole-v1", num_workers=2, num_envs=3, categorical_action_encoding=True)
        try:
            assert isinstance(env, ParallelEnv)
            assert env.batch_size == torch.Size([2, 3])
            env.set_seed(0)
            rollout = env.rollout(4, break_when_any_done=False)
            assert rollout["next", "observation"].shape == (2, 3, 4, 4)
            assert rollout["action"].dtype == torch.int64
        finally:
            env.close()
        assert GymEnv("CartPole-v1", num_workers=1).batch_size == torch.Size([])

    def test_action_outside_spec_debug_mode(self):
        env = GymEnv("Pendulum-v1", run_type_checks=True)
        td = env.reset()
        td["action"] = torch.tensor([5.0])
        with pytest.raises(
            ValueError, match=r"action 'action' = tensor\(\[5\.\]\) is outside action_spec"
        ):
            env.step(td)


class TestVectorEnv:
    @pytest.mark.parametrize("mode", ["sync", "async"])
    def test_matches_plain_gym_loop(self, mode):
        env = GymEnv(
            "CartPole-v1", num_envs=3, vectorization_mode=mode,
            categorical_action_encoding=True, max_episode_steps=15,
        )  # fmt: skip
        assert env.batch_size == (3,)
        env.set_seed(10)
        rollout = env.rollout(60, break_when_any_done=False)
        env.close()
        assert rollout.batch_size == (3, 60)
        assert rollout["next", "terminated"].any() and rollout["next", "truncated"].any()
        plain = _plain_replay(
            lambda: gym.make("CartPole-v1", max_episode_steps=15), 10, rollout["action"].numpy(), 3
        )
        _assert_matches_plain(rollout, plain, 1)

    def test_next_step_user_env(self):
        """A user-made NEXT_STEP vector env: no dummy step is recorded."""
        venv = gym.vector.SyncVectorEnv(
            [lambda: gym.make("CartPole-v1", max_episode_steps=12)] * 2,
            autoreset_mode=AutoresetMode.NEXT_STEP,
        )
        env = GymWrapper(venv, categorical_action_encoding=True)
        assert env.autoreset_mode == AutoresetMode.NEXT_STEP
        env.set_seed(4)
        rollout = env.rollout(50, break_when_any_done=False)
        assert (rollout["next", "reward"] == 1).all()  # a dummy step would have reward 0
        plain = _plain_replay(
            lambda: gym.make("CartPole-v1", max_episode_steps=12), 4, rollout["action"].numpy(), 2
        )
        _assert_matches_plain(rollout, plain, 1)
        env.set_seed(4)
        torch.manual_seed(0)
        generic = _generic(env, 50)
        env.set_seed(4)
        torch.manual_seed(0)
        assert (env.rollout(50, break_when_any_done=False) == generic).all()

    @pytest.mark.parametrize("mode", ["sync", "async"])
    def test_fast_path_equals_generic(self, mode):
        # async: the pipelined loop (next step sent before this one's bookkeeping)
        env = GymEnv("CartPole-v1", num_envs=4, max_episode_steps=9, vectorization_mode=mode)
        env.set_seed(0)
        torch.manual_seed(0)
        fast = env.rollout(40, break_when_any_done=False)
        env.set_seed(0)
        torch.manual_seed(0)
        generic = _generic(env, 40)
        assert fast["next", "truncated"].sum() >= 16  # episodes end on every sub-env
        assert (fast == generic).all()
        # the env continues from where the pipelined rollout left it
        env.set_seed(1)
        torch.manual_seed(1)
        a = env.rollout(13, break_when_any_done=False)
        b = env.rollout(
            13, break_when_any_done=False, auto_reset=False, tensordict=step_mdp(a[..., -1])
        )
        env.set_seed(1)
        torch.manual_seed(1)
        both = _generic(env, 26)
        env.close()
        assert (a == both[:, :13]).all()
        assert (b == both[:, 13:]).all()

    def test_step_and_maybe_reset_same_step(self):
        env = GymEnv("CartPole-v1", num_envs=2, max_episode_steps=3)
        td = env.reset()
        for t in range(1, 7):
            td = env.rand_action(td)
            td, root = env.step_and_maybe_reset(td)
            if t % 3 == 0:
                assert td["next", "truncated"].all()
                # the final observation is kept in next, the root holds the reset one
                assert not torch.equal(td["next", "observation"], root["observation"])
                assert root["observation"].abs().max() <= 0.05
            else:
                torch.testing.assert_close(td["next", "observation"], root["observation"])
            td = root

    def test_partial_reset_only_masked(self):
        env = GymEnv("Pendulum-v1", num_envs=3)
        td = env.reset()
        for _ in range(3):
            td = step_mdp(env.rand_step(td))
        before = td["observation"].clone()
        td["_reset"] = torch.tensor([[False], [True], [False]])
        td = env.reset(td)
        torch.testing.assert_close(td["observation"][[0, 2]], before[[0, 2]])
        assert not torch.equal(td["observation"][1], before[1])
        # the gym sub-envs agree: stepping continues from the kept states
        td["action"] = torch.zeros(3, 1)
        nxt = env.step(td)["next", "observation"]
        th_dot_change = (nxt[:, 2] - before[:, 2]).abs()
        assert th_dot_change[[0, 2]].max() < 1.0

    def test_masked_reset_before_any_reset_resets_all(self):
        env = GymEnv("CartPole-v1", num_envs=3)
        env.set_seed(7)
        td = env.reset(TensorDict({"_reset": torch.tensor([[True], [False], [True]])}, [3]))
        assert td["observation"].shape == (3, 4)
        assert td["observation"].abs().max() <= 0.05  # every row a fresh CartPole state
        assert not td["done"].any()
        # the env is now usable as after a plain reset
        assert env.rand_step(td)["next", "observation"].shape == (3, 4)

    def test_pixels_vector(self):
        env = GymEnv("Pendulum-v1", num_envs=2, from_pixels=True, pixels_only=False)
        td = env.reset()
        assert td["pixels"].shape == (2, 500, 500, 3)
        check_env_specs(env, max_steps=2)

    def test_batch_size_and_device(self):
        env = GymEnv("CartPole-v1", num_envs=2, batch_size=[2], device="cpu")
        assert env.batch_size == (2,) and env.device == torch.device("cpu")


@pytest.mark.mujoco
class TestMujoco:
    def test_half_cheetah(self, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)  # MuJoCo writes MUJOCO_LOG.TXT into the working dir
        env = GymEnv("HalfCheetah-v5")
        assert env.observation_spec["observation"].shape == (17,)
        assert env.observation_spec["observation"].dtype == torch.float64
        assert isinstance(env.action_spec, Bounded) and env.action_spec.shape == (6,)
        check_env_specs(env, seed=0, max_steps=5)


@pytest.mark.atari
class TestAtari:
    def test_pong(self):
        env = GymEnv("ALE/Pong-v5")
        assert env.observation_spec["observation"].shape == (210, 160, 3)
        assert env.observation_spec["observation"].dtype == torch.uint8
        assert isinstance(env.action_spec, OneHot) and env.action_spec.shape == (6,)
        check_env_specs(env, seed=0, max_steps=4)


def test_wrong_action_shape_gym():
    env = GymEnv("Pendulum-v1")
    td = env.reset()
    td["action"] = torch.zeros(2)
    with pytest.raises(
        ValueError, match=r"action 'action' has shape \(2,\), expected \(1,\) from action_spec"
    ):
        env.step(td)


def test_partial_reset_after_fast_rollout():
    """A masked reset after a fast-path rollout returns the sub-envs' true observations."""
    env = GymEnv("CartPole-v1", num_envs=3, categorical_action_encoding=True)
    env.set_seed(0)
    rollout = env.rollout(500)  # stops at the first done, reset in the same step
    last = rollout[:, -1]
    td = step_mdp(last)
    done = last["next", "done"]
    assert done.any() and not done.all()
    td["_reset"] = torch.ones(3, 1, dtype=torch.bool)
    td = env.reset(td)
    states = torch.tensor(
        np.stack([sub.unwrapped.state for sub in env.env.envs]), dtype=torch.float32
    )
    # every row is the state its sub-env is in: reset ones for done rows, fresh resets else
    torch.testing.assert_close(td["observation"], states)
    assert (td["observation"][done[:, 0]].abs() <= 0.05).all()


@pytest.mark.parametrize("num_envs", [1, 3])
def test_transformed_gym_env_matches_base(num_envs):
    """Transforms go through _step/_reset; the base entries equal the fast-path rollout."""
    base = GymEnv("CartPole-v1", num_envs=num_envs, max_episode_steps=20)
    base.set_seed(1)
    torch.manual_seed(0)
    plain = base.rollout(60, break_when_any_done=False)
    env = TransformedEnv(
        GymEnv("CartPole-v1", num_envs=num_envs, max_episode_steps=20), StepCounter()
    )
    env.set_seed(1)
    torch.manual_seed(0)
    transformed = env.rollout(60, break_when_any_done=False)
    assert (transformed.exclude("step_count", ("next", "step_count")) == plain).all()
    steps = transformed["next", "step_count"][..., 0]
    done = transformed["next", "done"][..., 0]
    assert steps.max() <= 20
    assert (steps[done] > 0).all()
    check_env_specs(env)


def test_rollout_equals_tutorial_loop():
    """TorchRL's tutorial: a manual step / step_mdp loop equals env.rollout(policy=...)."""
    from tensordict import TensorDict
    from tensordict.nn import TensorDictModule

    env = GymEnv("Pendulum-v1")
    actor = TensorDictModule(torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])
    torch.manual_seed(0)
    env.set_seed(0)
    max_steps = 100
    tensordict = env.reset()
    tensordicts = TensorDict({}, [max_steps])
    for i in range(max_steps):
        actor(tensordict)
        tensordicts[i] = env.step(tensordict)
        if tensordict["next", "done"].any():
            break
        tensordict = step_mdp(tensordict)
    torch.manual_seed(0)
    env.set_seed(0)
    rollout = env.rollout(policy=actor, max_steps=max_steps)
    assert rollout.batch_size == (100,)
    assert (rollout.detach() == tensordicts.detach()).all()


def _stochastic_policy(td):
    """Random one-hot actions from torch's generator, plus extra outputs."""
    logits = torch.randn(*td.batch_size, 2)
    td["action"] = torch.nn.functional.one_hot(logits.argmax(-1), 2).bool()
    td["logits"] = logits
    td["obs_sum"] = td["observation"].sum(-1, keepdim=True)
    return td


def _next_writing_policy(td):
    td = _stochastic_policy(td)
    td["next", "hidden"] = torch.ones(*td.batch_size, 1)
    return td


def _obs_replacing_policy(td):
    td["observation"] = td["observation"] * 2
    return _stochastic_policy(td)


def _sync_next_step():
    venv = gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1", max_episode_steps=7)] * 3,
        autoreset_mode=AutoresetMode.NEXT_STEP,
    )
    return GymWrapper(venv)


@pytest.mark.parametrize(
    "make_env",
    [
        lambda: GymEnv("CartPole-v1", max_episode_steps=7),
        lambda: GymEnv("CartPole-v1", num_envs=3, max_episode_steps=7),
        lambda: GymEnv("CartPole-v1", num_envs=3, vectorization_mode="async", max_episode_steps=7),
        _sync_next_step,
    ],
    ids=["single", "sync", "async", "next_step"],
)
@pytest.mark.parametrize(
    "policy", [_stochastic_policy, _next_writing_policy, _obs_replacing_policy]
)
@pytest.mark.parametrize("breaks", [(False, False), (True, False), (False, True)])
def test_policy_fast_path_equals_generic(make_env, policy, breaks):
    env = make_env()
    any_done, all_done = breaks
    kwargs = {"break_when_any_done": any_done, "break_when_all_done": all_done}
    env.set_seed(0)
    torch.manual_seed(0)
    fast = env.rollout(25, policy, **kwargs)
    env.set_seed(0)
    torch.manual_seed(0)
    td = env.reset()
    generic = rollout_generic(env, 25, td, policy=policy, callback=None, **kwargs)
    env.close()
    assert set(fast.keys(True, True)) == set(generic.keys(True, True))
    assert fast.batch_size == generic.batch_size
    assert (fast == generic).all()
    if not any_done:
        assert fast["next", "done"].any()


class _DictActionEnv(gym.Env):
    """Dict / Tuple action space: the reward echoes what the env received."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Dict(
        {
            "move": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
            "pick": gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.MultiBinary(2))),
        }
    )

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        assert self.action_space.contains(action), action
        self.last = action
        return np.zeros(1, np.float32), float(action["pick"][0]), False, False, {}


@pytest.mark.parametrize("num_envs", [1, 2])
def test_dict_action_space(num_envs):
    if num_envs == 1:
        gym_env = _DictActionEnv()
    else:
        gym_env = gym.vector.SyncVectorEnv([_DictActionEnv] * num_envs)
    env = GymWrapper(gym_env, categorical_action_encoding=True)
    # as TorchRL: a Dict space's entries are the action keys; a mixed Tuple nests
    assert set(env.action_keys) == {"move", ("pick", "0"), ("pick", "1")}
    check_env_specs(env, seed=0)
    td = env.reset()
    td["move"] = torch.full((*env.batch_size, 2), 0.5)
    td["pick", "0"] = torch.full(env.batch_size, 2)
    td["pick", "1"] = torch.ones((*env.batch_size, 2), dtype=torch.int8)
    td = env.step(td)
    assert (td["next", "reward"] == 2.0).all()
    last = gym_env.last if num_envs == 1 else gym_env.envs[1].last
    assert last["pick"][0] == 2 and last["pick"][1].tolist() == [1, 1]
    np.testing.assert_allclose(last["move"], [0.5, 0.5])
    rollout = env.rollout(5, break_when_any_done=False)
    torch.testing.assert_close(rollout["next", "reward"][..., 0], rollout["pick", "0"].float())


# TorchRL 0.14.1: GymEnv(name).set_seed(seed); GymEnv.reset()["observation"]
_TORCHRL_FIRST_OBS = {
    ("CartPole-v1", 0): [0.031327024102211, 0.04127555713057518, 0.010663577355444431, 0.02294965647161007],
    ("CartPole-v1", 1): [-0.018816854804754257, -0.007667355239391327, 0.03277026116847992, -0.009080085903406143],
    ("Pendulum-v1", 0): [-0.9670438766479492, -0.2546098530292511, -0.9669447541236877],
    ("Pendulum-v1", 1): [-0.617070734500885, -0.7869076728820801, 0.8972988724708557],
}  # fmt: skip


class TestSeeding:
    @pytest.mark.parametrize("name, seed", sorted(_TORCHRL_FIRST_OBS))
    def test_first_observation_matches_torchrl(self, name, seed):
        env = GymEnv(name)
        env.set_seed(seed)
        obs = env.reset()["observation"]
        torch.testing.assert_close(obs, torch.tensor(_TORCHRL_FIRST_OBS[name, seed]))
        # TorchRL's set_seed is gymnasium's reset(seed=seed): the env's first reset is
        # the second of the seeded gym env, and so on
        ref = gym.make(name)
        ref.reset(seed=seed)
        for _ in range(2):
            torch.testing.assert_close(obs, torch.as_tensor(ref.reset()[0]))
            obs = env.reset()["observation"]

    def test_vector_env_seeds_sub_envs_in_order(self):
        env = GymEnv("CartPole-v1", num_envs=2)
        env.set_seed(0)
        obs = env.reset()["observation"]
        torch.testing.assert_close(obs[0], torch.tensor(_TORCHRL_FIRST_OBS["CartPole-v1", 0]))
        torch.testing.assert_close(obs[1], torch.tensor(_TORCHRL_FIRST_OBS["CartPole-v1", 1]))
        # a masked reset right after set_seed resets the masked rows only
        env.set_seed(0)
        td = env.reset(TensorDict({"_reset": torch.tensor([[True], [False]])}, [2]))
        torch.testing.assert_close(
            td["observation"][0], torch.tensor(_TORCHRL_FIRST_OBS["CartPole-v1", 0])
        )
        env.close()

    def test_same_seed_same_rollout_and_next_seed(self):
        env = GymEnv("Pendulum-v1")
        rollouts = []
        for seed in (3, 3, 4):
            assert env.set_seed(seed) != seed  # the next seed of the chain, as TorchRL
            torch.manual_seed(0)
            rollouts.append(env.rollout(5)["next", "observation"])
        torch.testing.assert_close(rollouts[0], rollouts[1])
        assert not torch.equal(rollouts[0], rollouts[2])


_ACTION_SPACES = {
    "dict": gym.spaces.Dict(
        {"move": gym.spaces.Box(-1.0, 1.0, (2,), np.float32), "fire": gym.spaces.Discrete(3)}
    ),
    "tuple_box": gym.spaces.Tuple(
        (gym.spaces.Box(-1.0, 1.0, (2,), np.float32), gym.spaces.Box(-2.0, 2.0, (2,), np.float32))
    ),
    "tuple_discrete": gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Discrete(3))),
    "tuple_mixed": gym.spaces.Tuple(
        (gym.spaces.Box(-1.0, 1.0, (2,), np.float32), gym.spaces.Discrete(3))
    ),
    "dict_of_tuple": gym.spaces.Dict(
        {
            "arm": gym.spaces.Tuple((gym.spaces.Box(-1.0, 1.0, (1,), np.float32),) * 2),
            "grip": gym.spaces.Discrete(2),
        }
    ),
}

# TorchRL 0.14.1's GymWrapper(env).full_action_spec (key: class, shape) for each space,
# one-hot (categorical_action_encoding=False); "tuple_mixed" raises there ("Found more
# than one type of specs"), here its items nest under "0" and "1".
_TORCHRL_ACTION_SPECS = {
    "dict": {"fire": ("OneHot", (3,)), "move": ("Bounded", (2,))},
    "tuple_box": {"action": ("Bounded", (2, 2))},
    "tuple_discrete": {"action": ("OneHot", (2, 3))},
    "tuple_mixed": {("action", "0"): ("Bounded", (2,)), ("action", "1"): ("OneHot", (3,))},
    "dict_of_tuple": {"arm": ("Bounded", (2, 1)), "grip": ("OneHot", (2,))},
}


class _EchoActionEnv(gym.Env):
    """Keeps the action it receives (checked against its space) and returns it as info."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, kind: str = "dict") -> None:
        self.action_space = _ACTION_SPACES[kind]
        self.received = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        assert self.action_space.contains(action), action
        self.received.append(action)
        return np.zeros(1, np.float32), 0.0, False, False, {}


class TestStructuredActions:
    @pytest.mark.parametrize("kind", sorted(_ACTION_SPACES))
    def test_specs_as_torchrl(self, kind):
        env = GymWrapper(_EchoActionEnv(kind))
        spec = env.full_action_spec
        got = {k: (type(spec[k]).__name__, tuple(spec[k].shape)) for k in env.action_keys}
        assert got == _TORCHRL_ACTION_SPECS[kind]
        check_env_specs(env, seed=0, max_steps=3)

    def test_tuple_bounds_are_stacked(self):
        spec = GymWrapper(_EchoActionEnv("tuple_box")).action_spec
        torch.testing.assert_close(spec.space.low[:, 0], torch.tensor([-1.0, -2.0]))
        torch.testing.assert_close(spec.space.high[:, 1], torch.tensor([1.0, 2.0]))

    def test_actions_reach_gym_in_its_structure(self):
        gym_env = _EchoActionEnv("dict_of_tuple")
        env = GymWrapper(gym_env, categorical_action_encoding=True)
        assert isinstance(env.full_action_spec["grip"], Categorical)
        td = env.reset()
        td["arm"] = torch.tensor([[0.25], [-0.5]])
        td["grip"] = torch.tensor(1)
        env.step(td)
        got = gym_env.received[-1]
        assert isinstance(got["arm"], tuple) and got["grip"] == 1
        np.testing.assert_allclose(np.concatenate(got["arm"]), [0.25, -0.5])

    @pytest.mark.parametrize("categorical", [False, True])
    def test_tuple_of_discrete_round_trip(self, categorical):
        gym_env = _EchoActionEnv("tuple_discrete")
        env = GymWrapper(gym_env, categorical_action_encoding=categorical)
        td = env.reset()
        choice = torch.tensor([2, 0])
        td["action"] = choice if categorical else torch.eye(3, dtype=torch.int64)[choice]
        env.step(td)
        assert tuple(int(a) for a in gym_env.received[-1]) == (2, 0)
        rollout = env.rollout(4)  # the fast path converts presampled actions too
        sent = np.array([[int(a) for a in action] for action in gym_env.received[-4:]])
        expected = rollout["action"] if categorical else rollout["action"].argmax(-1)
        assert sent.tolist() == expected.tolist()

    def test_vector_env_tuple_action(self):
        venv = gym.vector.SyncVectorEnv([lambda: _EchoActionEnv("tuple_box")] * 2)
        env = GymWrapper(venv)
        assert env.full_action_spec["action"].shape == (2, 2, 2)
        td = env.reset()
        td["action"] = torch.arange(8.0).reshape(2, 2, 2) / 10
        env.step(td)
        for i, sub in enumerate(venv.envs):
            first, second = sub.received[-1]
            np.testing.assert_allclose(first, [4 * i / 10, (4 * i + 1) / 10], rtol=1e-6)
            np.testing.assert_allclose(second, [(4 * i + 2) / 10, (4 * i + 3) / 10], rtol=1e-6)

    def test_tuple_observation_is_stacked(self):
        class TupleObs(_EchoActionEnv):
            observation_space = gym.spaces.Tuple((gym.spaces.Box(-5.0, 5.0, (2,), np.float32),) * 3)

            def reset(self, *, seed=None, options=None):
                return tuple(np.full(2, i, np.float32) for i in range(3)), {}

        env = GymWrapper(TupleObs("tuple_box"))
        obs = env.reset()["observation"]
        assert obs.shape == (3, 2) and obs[:, 0].tolist() == [0.0, 1.0, 2.0]


class _FailingStepEnv(gym.Env):
    """Discrete(2) env whose step fails on a valid action: not a rejected action."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        raise AssertionError("the simulator broke")


_REJECTED = (
    r"action 'action'{where} holds {value}, expected a value in action_spec "
    r"Categorical\(shape=torch\.Size\(\[{shape}\]\), n=2.*\); gymnasium's step rejected it "
    r"with AssertionError: .*7.* invalid \(pass run_type_checks=True"
)


class TestRejectedActions:
    """An action outside gym's space: by default passed to gym (as TorchRL); gym's own
    refusal is re-raised naming the key, the spec and the value, on every step path."""

    def _seven(self, td):
        return td.set("action", torch.full(td.batch_size, 7))

    def test_step(self):
        env = GymEnv("CartPole-v1", categorical_action_encoding=True)
        td = self._seven(env.reset())
        with pytest.raises(
            ValueError, match=_REJECTED.format(where="", value="7", shape="")
        ) as info:
            env.step(td)
        assert isinstance(info.value.__cause__, AssertionError)

    @pytest.mark.parametrize("break_when_any_done", [True, False])
    def test_rollout_with_policy(self, break_when_any_done):
        env = GymEnv("CartPole-v1", categorical_action_encoding=True)
        with pytest.raises(ValueError, match=_REJECTED.format(where="", value="7", shape="")):
            env.rollout(5, self._seven, break_when_any_done=break_when_any_done)
        # the generic loop (a tensordict with more than the env's keys) says the same
        td = env.reset().set("extra", torch.zeros(()))
        with pytest.raises(ValueError, match=_REJECTED.format(where="", value="7", shape="")):
            env.rollout(5, self._seven, tensordict=td, auto_reset=False)

    def test_vector_env_step(self):
        env = GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=True)
        td = env.reset().set("action", torch.tensor([0, 7]))
        with pytest.raises(
            ValueError, match=_REJECTED.format(where="", value=r"\[0, 7\]", shape="2")
        ):
            env.step(td)

    def test_vector_env_rollout(self):
        # SAME_STEP SyncVectorEnv: the fast loop steps each sub-env and names it
        env = GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=True)
        policy = lambda td: td.set("action", torch.tensor([0, 7]))  # noqa: E731
        match = _REJECTED.format(where=r" \(sub-env 1\)", value="7", shape="2")
        with pytest.raises(ValueError, match=match):
            env.rollout(5, policy)

    def test_next_step_vector_env_rollout(self):
        # a NEXT_STEP vector env takes the batched loop
        vec = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
        env = GymWrapper(vec, categorical_action_encoding=True)
        policy = lambda td: td.set("action", torch.tensor([7, 0]))  # noqa: E731
        with pytest.raises(
            ValueError, match=_REJECTED.format(where="", value=r"\[7, 0\]", shape="2")
        ):
            env.rollout(5, policy)

    def test_run_type_checks_catches_it_before_gym(self):
        env = GymEnv("CartPole-v1", categorical_action_encoding=True, run_type_checks=True)
        td = self._seven(env.reset())
        with pytest.raises(ValueError) as info:
            env.step(td)
        assert info.value.__cause__ is None  # the spec check, gym was never called

    def test_a_valid_action_keeps_the_simulators_error(self):
        env = GymWrapper(_FailingStepEnv(), categorical_action_encoding=True)
        td = env.reset().set("action", torch.tensor(1))
        with pytest.raises(AssertionError, match="the simulator broke"):
            env.step(td)
        with pytest.raises(AssertionError, match="the simulator broke"):
            env.rollout(3, lambda td: td.set("action", torch.tensor(1)))


def test_rollout_and_step_write_the_same_reward_dtype_after_reward_spec_is_replaced():
    from rl.core import Unbounded

    env = GymEnv("Pendulum-v1")
    env.reward_spec = Unbounded(shape=(1,), dtype=torch.float64)
    env.set_seed(0)
    rollout = env.rollout(3)
    stepped = env.rand_step(env.reset())
    assert rollout["next", "reward"].dtype == stepped["next", "reward"].dtype
