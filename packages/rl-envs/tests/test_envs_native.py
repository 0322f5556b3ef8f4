"""Native torch envs: PendulumEnv and CartPoleEnv against gymnasium."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from rl.envs import CartPoleEnv, PendulumEnv, StepCounter, TransformedEnv, check_env_specs

GPU = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
DEVICES = ["cpu", pytest.param("cuda", marks=GPU)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("env_cls", [PendulumEnv, CartPoleEnv])
def test_native_env_on_device(env_cls, device):
    """Outputs live on the env device and the dynamics match the CPU env step for step."""
    env = env_cls(batch_size=[4], device=device)
    check_env_specs(env, seed=0, max_steps=10)
    env.set_seed(3)
    td = env.reset()
    init = env.state.cpu()
    torch.manual_seed(0)
    rollout = env.rollout(30, auto_reset=False, tensordict=td)
    assert rollout.device.type == device
    assert rollout["next", "observation"].device.type == device
    actions = iter(rollout["action"].cpu().unbind(1))

    def replay(td):
        td["action"] = next(actions)
        return td

    ref = env_cls(batch_size=[4])
    ref_td = ref.reset()
    ref.state = init
    ref_td["observation"] = td["observation"].cpu()
    expected = ref.rollout(30, replay, auto_reset=False, tensordict=ref_td)
    assert expected.batch_size == rollout.batch_size
    for key in [("next", "observation"), ("next", "reward"), ("next", "done")]:
        torch.testing.assert_close(rollout[key].cpu(), expected[key], rtol=0, atol=1e-5)


def _gym_pendulum(state):
    env = gym.make("Pendulum-v1").unwrapped
    env.reset(seed=0)
    env.state = np.array(state, dtype=np.float64)
    return env


class TestPendulumEnv:
    def test_matches_gymnasium(self):
        torch.manual_seed(0)
        n, steps = 4, 150
        env = PendulumEnv(batch_size=[n])
        env.set_seed(1)
        td = env.reset()
        gyms = [_gym_pendulum(env.state[i].tolist()) for i in range(n)]
        actions = torch.rand(steps, n, 1) * 6 - 3  # includes torques beyond the limit
        for t in range(steps):
            td["action"] = actions[t]
            td = env.step(td)
            for i, genv in enumerate(gyms):
                obs, reward, terminated, truncated, _ = genv.step(actions[t, i].numpy())
                torch.testing.assert_close(
                    td["next", "observation"][i], torch.from_numpy(obs), rtol=0, atol=1e-6
                )
                assert td["next", "reward"][i].item() == pytest.approx(reward, abs=1e-5)
                assert not terminated and not truncated
            assert not td["next", "done"].any()
            td = td["next"].exclude("reward")

    def test_reset_distribution_and_obs(self):
        env = PendulumEnv(batch_size=[2000])
        env.set_seed(0)
        td = env.reset()
        th, thdot = env.state.unbind(-1)
        assert th.abs().max() <= np.pi and th.abs().max() > 3.0
        assert thdot.abs().max() <= 1.0 and thdot.abs().max() > 0.99
        obs = td["observation"]
        torch.testing.assert_close(obs[:, 0], torch.cos(th).float())
        torch.testing.assert_close(obs[:, 1], torch.sin(th).float())
        torch.testing.assert_close(obs[:, 2], thdot.float())
        assert obs.dtype == torch.float32
        assert not td["done"].any() and td["done"].shape == (2000, 1)

    @pytest.mark.parametrize("batch_size", [[], [1], [5], [2, 3]])
    def test_check_env_specs(self, batch_size):
        check_env_specs(PendulumEnv(batch_size=batch_size), seed=0)

    def test_same_seed_same_rollout(self):
        def run():
            torch.manual_seed(3)
            env = PendulumEnv(batch_size=[3])
            env.set_seed(7)
            return env.rollout(20)

        a, b = run(), run()
        assert (a == b).all()
        env = PendulumEnv(batch_size=[3])
        env.set_seed(8)
        assert not (env.rollout(20)["observation"] == a["observation"]).all()

    def test_no_time_limit(self):
        env = PendulumEnv()
        rollout = env.rollout(300)
        assert rollout.batch_size == (300,)
        assert not rollout["next", "done"].any()

    def test_partial_reset_only_masked(self):
        env = PendulumEnv(batch_size=[4])
        env.set_seed(0)
        td = env.rollout(5)[..., -1]["next"].exclude("reward")
        before = env.state.clone()
        mask = torch.tensor([[True], [False], [True], [False]])
        td["_reset"] = mask
        out = env.reset(td)
        assert "_reset" not in out.keys()
        torch.testing.assert_close(env.state[1], before[1])
        torch.testing.assert_close(env.state[3], before[3])
        assert not torch.equal(env.state[0], before[0])
        assert not torch.equal(env.state[2], before[2])
        torch.testing.assert_close(out["observation"], env._observation())

    def test_issue_snippet_policy_rollout(self):
        env = PendulumEnv()
        policy = TensorDictModule(
            nn.Sequential(nn.LazyLinear(64), nn.Tanh(), nn.Linear(64, 1), nn.Tanh()),
            in_keys=["observation"],
            out_keys=["action"],
        )
        rollout = env.rollout(max_steps=32, policy=policy)
        assert rollout.batch_size == torch.Size([32])
        assert rollout["next", "reward"].shape[:1] == torch.Size([32])
        assert rollout["action"].abs().max() <= 1.0
        # the recorded transitions chain: next obs of t is the obs of t + 1
        torch.testing.assert_close(rollout["next", "observation"][:-1], rollout["observation"][1:])

    def test_issue_snippet_with_step_counter(self):
        env = TransformedEnv(PendulumEnv(), StepCounter(max_steps=200))
        policy = TensorDictModule(
            nn.Sequential(nn.LazyLinear(64), nn.Tanh(), nn.Linear(64, 1), nn.Tanh()),
            in_keys=["observation"],
            out_keys=["action"],
        )
        rollout = env.rollout(max_steps=32, policy=policy)
        assert rollout.batch_size == torch.Size([32])
        assert rollout["next", "step_count"][:, 0].tolist() == list(range(1, 33))
        check_env_specs(env)

    def test_step_counter_truncates_batched(self):
        env = TransformedEnv(PendulumEnv(batch_size=[3]), StepCounter(max_steps=5))
        rollout = env.rollout(12, break_when_any_done=False)
        truncated = rollout["next", "truncated"][0, :, 0]
        assert truncated.nonzero().flatten().tolist() == [4, 9]
        assert rollout["step_count"][0, :, 0].tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1]

    def test_wrong_action_shape(self):
        env = PendulumEnv(batch_size=[2])
        td = env.reset()
        td["action"] = torch.zeros(2, 3)
        with pytest.raises(ValueError, match=r"action has shape \(2, 3\), expected \(2, 1\)"):
            env.step(td)


def _gym_cartpole(state):
    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    env.unwrapped.state = np.array(state, dtype=np.float64)
    return env


class TestPendulumParams:
    """TorchRL's ``PendulumEnv(td_params=None, seed=None, device=None)``."""

    def test_gen_params_are_torchrls(self):
        params = PendulumEnv.gen_params(g=9.81, batch_size=[2])
        assert params.batch_size == (2,)
        values = {k: params["params", k][0].item() for k in ("max_speed", "max_torque", "dt")}
        assert values == pytest.approx({"max_speed": 8.0, "max_torque": 2.0, "dt": 0.05})
        assert params["params", "g"].tolist() == pytest.approx([9.81, 9.81])

    def test_params_drive_the_dynamics_and_specs(self):
        params = PendulumEnv.gen_params(batch_size=[2])
        params["params", "g"] = torch.tensor([10.0, 0.0])
        params["params", "max_torque"] = torch.tensor([2.0, 1.0])
        env = PendulumEnv(params, seed=0)
        assert env.batch_size == (2,)
        assert env.action_spec.high.reshape(-1).tolist() == [2.0, 1.0]
        th, thdot = (
            torch.tensor([0.3, 0.3], dtype=torch.float64),
            torch.zeros(2, dtype=torch.float64),
        )
        env.reset()
        env.state = torch.stack([th, thdot], -1)
        td = env.step(TensorDict(action=torch.full((2, 1), 1.5), batch_size=[2]))
        # by hand: thdot' = thdot + (3 g / 2 sin th + 3 clip(u)) dt, th' = th + thdot' dt
        u = torch.tensor([1.5, 1.0], dtype=torch.float64)
        g = torch.tensor([10.0, 0.0], dtype=torch.float64)
        new_thdot = thdot + (1.5 * g * torch.sin(th) + 3 * u) * 0.05
        torch.testing.assert_close(env.state[:, 1], new_thdot)
        torch.testing.assert_close(env.state[:, 0], th + new_thdot * 0.05)
        reward = -(th.square() + 0.001 * u.square())
        torch.testing.assert_close(td["next", "reward"].squeeze(-1), reward.float())
        check_env_specs(env)

    def test_seed(self):
        def still(td):
            return td.set("action", torch.zeros(1))

        a = PendulumEnv(seed=3).rollout(4, still)
        env = PendulumEnv()
        env.set_seed(3)
        b = env.rollout(4, still)
        torch.testing.assert_close(a["observation"], b["observation"])
        with pytest.raises(TypeError, match="td_params must be a TensorDict with a 'params'"):
            PendulumEnv({"g": 1.0})
        bad = PendulumEnv.gen_params().exclude(("params", "dt"))
        with pytest.raises(KeyError, match=r"td_params\['params'\] lacks \['dt'\]"):
            PendulumEnv(bad)


class TestCartPoleEnv:
    @pytest.mark.parametrize("categorical", [False, True])
    def test_matches_gymnasium(self, categorical):
        torch.manual_seed(0)
        n = 6
        env = CartPoleEnv(batch_size=[n], categorical_action_encoding=categorical)
        env.set_seed(0)
        td = env.reset()
        gyms = [_gym_cartpole(env.state[i].tolist()) for i in range(n)]
        alive = [True] * n
        for _ in range(60):
            td = env.rand_action(td)
            action = td["action"]
            ints = action if categorical else action.long().argmax(-1)
            td = env.step(td)
            for i, genv in enumerate(gyms):
                if not alive[i]:
                    continue
                obs, reward, terminated, truncated, _ = genv.step(int(ints[i]))
                torch.testing.assert_close(
                    td["next", "observation"][i], torch.from_numpy(obs), rtol=0, atol=1e-6
                )
                assert td["next", "reward"][i].item() == reward
                assert td["next", "terminated"][i].item() == terminated
                assert td["next", "truncated"][i].item() == truncated
                alive[i] = not (terminated or truncated)
            td = td["next"].exclude("reward")
        assert not any(alive)  # every cart-pole fell within 60 random steps

    def test_truncation_at_500(self):
        env = CartPoleEnv(batch_size=[2], categorical_action_encoding=True)
        env.reset()
        td = TensorDict(batch_size=[2])
        for step in range(1, 501):
            env.state = torch.zeros(2, 4, dtype=torch.float64)  # keep it balanced
            td["action"] = torch.tensor([0, 1])
            out = env._step(td)
            if step < 500:
                assert not out["truncated"].any()
        assert out["truncated"].all() and out["done"].all()
        assert not out["terminated"].any()

    @pytest.mark.parametrize("batch_size", [[], [3]])
    @pytest.mark.parametrize("categorical", [False, True])
    def test_check_env_specs(self, batch_size, categorical):
        env = CartPoleEnv(batch_size=batch_size, categorical_action_encoding=categorical)
        check_env_specs(env, seed=0, max_steps=40)

    def test_auto_reset_in_rollout(self):
        env = CartPoleEnv(batch_size=[8])
        env.set_seed(0)
        rollout = env.rollout(100, break_when_any_done=False)
        done = rollout["next", "done"]
        assert done.any()
        b, t = torch.nonzero(done[:, :-1, 0], as_tuple=True)
        root_next = rollout["observation"][b, t + 1]
        # after a done the root holds a fresh reset state, within the reset bounds
        assert root_next.abs().max() <= 0.05
        assert not rollout["done"].any()
        # elsewhere the chain is continuous
        keep = ~done[:, :-1, 0]
        torch.testing.assert_close(
            rollout["next", "observation"][:, :-1][keep], rollout["observation"][:, 1:][keep]
        )

    def test_reward_zero_after_termination(self):
        env = CartPoleEnv(categorical_action_encoding=True, max_episode_steps=None)
        env.reset()
        env.state = torch.tensor([3.0, 0.0, 0.0, 0.0], dtype=torch.float64)
        td = TensorDict(action=torch.tensor(1))
        first = env._step(td)
        second = env._step(td)
        assert first["terminated"].item() and first["reward"].item() == 1.0
        assert second["reward"].item() == 0.0
