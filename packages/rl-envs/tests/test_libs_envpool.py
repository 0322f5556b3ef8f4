"""MultiThreadedEnv / MultiThreadedEnvWrapper (EnvPool back-end)."""

from __future__ import annotations

import pytest
import torch
from _engine_helpers import rollout_generic
from tensordict.nn import TensorDictModule
from torch.testing import assert_close

from rl.core import Categorical, OneHot, Unbounded
from rl.envs import check_env_specs

envpool = pytest.importorskip("envpool")

from rl.envs import MultiThreadedEnv, MultiThreadedEnvWrapper  # noqa: E402

# EnvPool's own spaces (read by the envpool.make calls of these tests) make gymnasium warn
pytestmark = pytest.mark.filterwarnings("ignore:.*precision lowered:UserWarning")


@pytest.fixture
def cartpole():
    env = MultiThreadedEnv(4, "CartPole-v1", create_env_kwargs={"seed": 0})
    yield env
    env.close()


def _policy() -> TensorDictModule:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))

    class Greedy(torch.nn.Module):
        def forward(self, obs):
            logits = net(obs)
            return logits.argmax(-1), logits

    return TensorDictModule(Greedy(), ["observation"], ["action", "logits"])


class TestMultiThreadedEnv:
    def test_specs_and_batch(self, cartpole):
        assert cartpole.batch_size == torch.Size([4])
        assert isinstance(cartpole.action_spec, Categorical)
        assert cartpole.action_spec.shape == torch.Size([4])
        assert cartpole.observation_spec["observation"].shape == torch.Size([4, 4])
        assert cartpole.reward_spec.shape == torch.Size([4, 1])
        for key in ("done", "terminated", "truncated"):
            assert cartpole.full_done_spec[key].shape == torch.Size([4, 1])
        check_env_specs(cartpole)
        rollout = cartpole.rollout(30, break_when_any_done=False)
        assert rollout.batch_size == torch.Size([4, 30])
        assert rollout["next", "reward"].shape == torch.Size([4, 30, 1])
        assert rollout["next", "done"].any()

    def test_matches_envpool_directly(self):
        """Observations and rewards are those of the pool stepped by hand."""
        env = MultiThreadedEnv(3, "Pendulum-v1", create_env_kwargs={"seed": 7})
        pool = envpool.make("Pendulum-v1", env_type="gymnasium", num_envs=3, seed=7)
        td = env.reset()
        obs, _ = pool.reset()
        assert_close(td["observation"], torch.from_numpy(obs))
        actions = torch.linspace(-2, 2, 3 * 5).reshape(5, 3, 1)
        for action in actions:
            td["action"] = action
            td = env.step(td)
            obs, r, te, tr, _ = pool.step(action.numpy())
            assert_close(td["next", "observation"], torch.from_numpy(obs))
            assert_close(td["next", "reward"], torch.from_numpy(r).unsqueeze(-1))
            td = td["next"].exclude("reward")
        env.close()
        pool.close()

    def test_seeding_reproducible(self, cartpole):
        def run(seed):
            cartpole.set_seed(seed)
            torch.manual_seed(0)
            return cartpole.rollout(40, break_when_any_done=False)

        a, b, c = run(3), run(3), run(4)
        assert_close(a, b)
        assert not torch.equal(a["observation"], c["observation"])

    def test_wrapper_seed_rebuilds_pool(self):
        pool = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=2, seed=0)
        env = MultiThreadedEnvWrapper(pool)
        env.set_seed(5)
        assert env.env is not pool and env.env.config["seed"] == 5
        reference = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=2, seed=5)
        assert_close(env.reset()["observation"], torch.from_numpy(reference.reset()[0]))
        env.close()
        reference.close()

    @pytest.mark.parametrize(
        "break_when_any_done,break_when_all_done", [(False, False), (True, False), (False, True)]
    )
    @pytest.mark.parametrize("with_policy", [False, True])
    def test_fast_path_equals_generic_loop(
        self, cartpole, break_when_any_done, break_when_all_done, with_policy
    ):
        """The send/recv fast path records what ``_step`` + partial ``reset`` record."""
        policy = _policy() if with_policy else None
        kwargs = {
            "break_when_any_done": break_when_any_done,
            "break_when_all_done": break_when_all_done,
        }
        cartpole.set_seed(1)
        torch.manual_seed(0)
        fast = cartpole.rollout(120, policy, **kwargs)
        cartpole.set_seed(1)
        torch.manual_seed(0)
        generic = rollout_generic(
            cartpole, 120, cartpole.reset(), policy=policy, callback=None, **kwargs
        )
        assert fast["next", "done"].any()
        assert fast.batch_size == generic.batch_size
        assert set(fast.keys(True, True)) == set(generic.keys(True, True))
        for key in fast.keys(True, True):
            assert_close(fast[key], generic[key], msg=str(key))

    def test_partial_reset(self, cartpole):
        td = cartpole.reset()
        for _ in range(3):
            td = cartpole.rand_step(td)["next"].exclude("reward")
        before = td["observation"].clone()
        mask = torch.tensor([True, False, True, False]).unsqueeze(-1)
        td.set("_reset", mask)
        out = cartpole.reset(td)
        assert "_reset" not in out.keys()
        assert_close(out["observation"][1], before[1])
        assert_close(out["observation"][3], before[3])
        # fresh CartPole states are drawn in [-0.05, 0.05]
        assert out["observation"][0].abs().max() <= 0.05
        assert not torch.equal(out["observation"][0], before[0])

    def test_no_filler_step_after_done(self, cartpole):
        """A done sub-env restarts with a real step (EnvPool's filler step has reward 0)."""
        rollout = cartpole.rollout(200, break_when_any_done=False)
        assert rollout["next", "done"].sum() >= 4
        assert (rollout["next", "reward"] == 1).all()
        done = rollout["next", "done"][..., :-1, 0]
        root_next = rollout["observation"][:, 1:]
        assert (root_next[done].abs() <= 0.05).all()  # the reset observations

    def test_dict_observation_and_continuous_action(self):
        env = MultiThreadedEnv("CheetahRun-v1", 2, create_env_kwargs={"seed": 0})
        assert set(env.observation_spec.keys()) == {"position", "velocity"}
        assert isinstance(env.observation_spec["position"], Unbounded)
        assert env.observation_spec["position"].dtype == torch.float64
        assert env.action_spec.shape == torch.Size([2, 6])
        check_env_specs(env)
        assert env.rollout(5)["next", "velocity"].shape == torch.Size([2, 5, 9])
        env.close()

    def test_one_hot_actions(self):
        env = MultiThreadedEnv(2, "CartPole-v1", categorical_action_encoding=False)
        assert isinstance(env.action_spec, OneHot)
        check_env_specs(env)
        env.close()

    def test_argument_order_and_ale_prefix(self):
        env = MultiThreadedEnv("CartPole-v1", 2)
        assert env.batch_size == torch.Size([2]) and env.env_name == "CartPole-v1"
        env.close()

    def test_errors(self, cartpole):
        with pytest.raises(ValueError, match="'CartPol-v1' is not an EnvPool task.*'CartPole-v1'"):
            MultiThreadedEnv(2, "CartPol-v1")
        with pytest.raises(ValueError, match="num_workers must be a positive int, got 0"):
            MultiThreadedEnv(0, "CartPole-v1")
        with pytest.raises(ValueError, match="may not set 'num_envs'"):
            MultiThreadedEnv(2, "CartPole-v1", create_env_kwargs={"num_envs": 3})
        with pytest.raises(TypeError, match="env_type='gymnasium'"):
            MultiThreadedEnvWrapper(envpool.make("CartPole-v1", env_type="dm", num_envs=2))
        async_pool = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=4, batch_size=2)
        with pytest.raises(ValueError, match="batch_size=2 and num_envs=4"):
            MultiThreadedEnvWrapper(async_pool)
        async_pool.close()
        td = cartpole.reset()
        td["action"] = torch.zeros(4, 2, dtype=torch.int64)
        with pytest.raises(
            ValueError, match=r"action 'action' has shape \(4, 2\), expected \(4,\)"
        ):
            cartpole.step(td)

    def test_step_before_reset_raises(self):
        env = MultiThreadedEnv(2, "CartPole-v1")
        td = env.full_action_spec.rand()
        with pytest.raises(RuntimeError, match=r"step\(\) before reset\(\)"):
            env.step(td)
        env.reset()
        env.set_seed(1)  # a new pool: reset again
        with pytest.raises(RuntimeError, match=r"step\(\) before reset\(\)"):
            env.step(td)
        env.close()

    def test_collector(self, cartpole):
        from rl.collectors import Collector

        policy = _policy()
        collector = Collector(cartpole, policy, frames_per_batch=64, total_frames=256)
        batches = list(collector)
        collector.shutdown()
        assert len(batches) == 4
        for batch in batches:
            assert batch.batch_size == torch.Size([4, 16])
            assert batch["logits"].shape == torch.Size([4, 16, 2])
            assert_close(batch["action"], batch["logits"].argmax(-1))
        data = torch.cat(batches, dim=1)
        # the batches continue each other: root obs of step t + 1 is next obs of step t
        # except where an episode ended
        not_done = ~data["next", "done"][:, :-1, 0]
        assert_close(
            data["observation"][:, 1:][not_done], data["next", "observation"][:, :-1][not_done]
        )
        ids = data["collector", "traj_ids"]
        assert (ids[:, 1:][not_done] == ids[:, :-1][not_done]).all()

    def test_missing_library_message(self, monkeypatch):
        import rl.envs.libs.envpool as module

        monkeypatch.setattr(module, "_has_envpool", False)
        with pytest.raises(ImportError, match=r'pip install "rl-envs\[envpool\]"'):
            MultiThreadedEnv(2, "CartPole-v1")


def test_step_output_is_fresh(cartpole):
    """Step outputs are not views the next step overwrites."""
    td = cartpole.reset()
    td = cartpole.rand_step(td)
    first = td["next", "observation"].clone()
    keep = td["next", "observation"]
    nxt = td["next"].exclude("reward")
    cartpole.rand_step(nxt)
    assert_close(keep, first)
