"""FinancialRegimeEnv (TorchRL's toy trading env) and the rl.envs.custom namespace."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

from rl.envs import FinancialRegimeEnv, check_env_specs

GPU = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
DEVICES = ["cpu", pytest.param("cuda", marks=GPU)]
DT = 1.0 / 252.0


def _state(prices, holding=False, entry=0.0, **params):
    """One market state with the given price history and no randomness (volatility 0)."""
    params.setdefault("volatility", 0.0)
    td = FinancialRegimeEnv.gen_params(window_size=len(prices), **params)
    td["price_history"] = torch.tensor(prices, dtype=torch.float32)
    td["current_holdings"] = torch.tensor([holding])
    td["entry_price"] = torch.tensor([entry], dtype=torch.float32)
    td["step_count"] = torch.tensor(0)
    return td


def _step(env, td, action):
    td["action"] = torch.tensor([action])
    return env.step(td)["next"]


class TestFinancialRegimeEnv:
    @pytest.mark.parametrize("device", DEVICES)
    def test_specs(self, device):
        env = FinancialRegimeEnv(device=device, window_size=8)
        assert env.observation_spec["price_history"].shape == (8,)
        assert env.action_spec.shape == (1,) and env.action_spec.space.n == 3
        check_env_specs(env, seed=0, max_steps=10)
        rollout = env.rollout(4)
        assert rollout["next", "price_history"].device.type == device

    def test_reset_history(self):
        """The reset history is initial_price * exp(cumsum(volatility sqrt(dt) z))."""
        env = FinancialRegimeEnv(window_size=6, seed=5)
        td = env.reset()
        z = torch.randn(6, generator=torch.Generator().manual_seed(5))
        expected = 100.0 * torch.exp(torch.cumsum(z * 0.2 * math.sqrt(DT), 0))
        torch.testing.assert_close(td["price_history"], expected)
        assert not td["current_holdings"].item() and td["entry_price"].item() == 0
        assert td["step_count"].item() == 0

    def test_next_price_follows_the_walk(self):
        env = FinancialRegimeEnv(window_size=3, seed=2)
        td = _state([90.0, 95.0, 100.0], volatility=0.3, drift=0.1)
        nxt = _step(env, td, 0)
        z = torch.randn((), generator=torch.Generator().manual_seed(2))
        price = 100.0 * torch.exp(0.1 * DT + z * 0.3 * math.sqrt(DT))
        torch.testing.assert_close(
            nxt["price_history"], torch.stack([torch.tensor(95.0), torch.tensor(100.0), price])
        )
        assert nxt["reward"].item() == 0.0  # flat and holding no position

    def test_buy_hold_sell_rewards(self):
        """Hand-computed rewards with a deterministic (volatility 0) price."""
        env = FinancialRegimeEnv(seed=0)
        growth = math.exp(0.05 * DT)
        td = _state([100.0, 110.0])
        nxt = _step(env, td, 1)  # buy at 110
        assert nxt["current_holdings"].item() and nxt["entry_price"].item() == 110.0
        assert nxt["reward"].item() == pytest.approx(-0.001 * 110 + 0.1 * (growth - 1), rel=1e-5)
        price = nxt["price_history"][-1].item()
        assert price == pytest.approx(110 * growth, rel=1e-6)
        for action in (0, 1):  # hold, then buy while holding: only the shaping term
            before = nxt["price_history"][-1]
            nxt = _step(env, nxt, action)
            after = nxt["price_history"][-1]
            assert nxt["current_holdings"].item() and nxt["entry_price"].item() == 110.0
            torch.testing.assert_close(nxt["reward"][0], 0.1 * (after - before) / before)
            assert nxt["reward"].item() == pytest.approx(0.1 * (growth - 1), rel=1e-3)
        price = nxt["price_history"][-1].item()
        nxt = _step(env, nxt, 2)  # sell at price
        assert not nxt["current_holdings"].item() and nxt["entry_price"].item() == 0.0
        assert nxt["reward"].item() == pytest.approx((price - 110) / 110 - 0.001 * price, rel=1e-4)
        nxt = _step(env, nxt, 2)  # sell while flat
        assert nxt["reward"].item() == 0.0 and not nxt["current_holdings"].item()
        assert nxt["step_count"].item() == 5

    def test_sell_from_a_given_entry(self):
        env = FinancialRegimeEnv(seed=0)
        nxt = _step(env, _state([100.0, 120.0], holding=True, entry=100.0), 2)
        assert nxt["reward"].item() == pytest.approx(0.2 - 0.12, rel=1e-6)

    def test_truncation(self):
        params = FinancialRegimeEnv.gen_params(window_size=4, max_steps=3)
        env = FinancialRegimeEnv(params, seed=0)
        rollout = env.rollout(10)
        assert rollout.batch_size == (3,)
        assert rollout["next", "truncated"].squeeze(-1).tolist() == [False, False, True]
        assert not rollout["next", "terminated"].any()
        assert rollout["next", "done"].squeeze(-1).tolist() == [False, False, True]

    def test_seeded_runs_repeat(self):
        def run(seed):
            env = FinancialRegimeEnv(window_size=5, seed=seed)
            torch.manual_seed(0)  # the random actions
            return env.rollout(20, break_when_any_done=False)

        a, b, c = run(7), run(7), run(8)
        torch.testing.assert_close(
            a["next", "price_history"], b["next", "price_history"], rtol=0, atol=0
        )
        torch.testing.assert_close(a["next", "reward"], b["next", "reward"], rtol=0, atol=0)
        assert not torch.equal(a["price_history"], c["price_history"])
        default = [FinancialRegimeEnv().reset()["price_history"] for _ in range(2)]
        torch.testing.assert_close(default[0], default[1], rtol=0, atol=0)  # seed 0 by default

    def test_batched_markets(self):
        """A batch of markets with their own parameters steps at once."""
        params = FinancialRegimeEnv.gen_params(window_size=4, batch_size=[2])
        params["params", "volatility"] = torch.tensor([0.0, 0.5])
        env = FinancialRegimeEnv(FinancialRegimeEnv.gen_params(window_size=4), seed=0)
        td = env.reset(params.clone())
        assert td["price_history"].shape == (2, 4)
        torch.testing.assert_close(td["price_history"][0], torch.full((4,), 100.0))
        rollout = env.rollout(6, tensordict=env.reset(params.clone()), auto_reset=False)
        assert rollout.batch_size == (2, 6)
        flat = rollout["next", "price_history"][0, :, -1]
        torch.testing.assert_close(flat, 100 * torch.exp(0.05 * DT * torch.arange(1.0, 7.0)))
        plain = env.reset(TensorDict(batch_size=[3]))
        assert plain["price_history"].shape == (3, 4)

    def test_bad_params(self):
        with pytest.raises(TypeError, match="td_params must be a TensorDict with a 'params' entry"):
            FinancialRegimeEnv(TensorDict(window_size=3))


class TestCustomNamespace:
    def test_names(self):
        import rl.envs
        import rl.envs.custom as custom

        for name in [
            "AntEnv",
            "FinancialRegimeEnv",
            "HopperEnv",
            "HumanoidEnv",
            "MujocoEnv",
            "PendulumEnv",
            "SatelliteEnv",
            "TicTacToeEnv",
            "ToyVLAEnv",
            "Walker2dEnv",
            "LLMHashingEnv",
        ]:
            assert name in custom.__all__
            assert getattr(custom, name) is getattr(rl.envs, name)
        from rl.envs.llm import LLMHashingEnv

        assert custom.LLMHashingEnv is LLMHashingEnv
        with pytest.raises(AttributeError, match="has no attribute 'NoSuchEnv'"):
            custom.NoSuchEnv  # noqa: B018
