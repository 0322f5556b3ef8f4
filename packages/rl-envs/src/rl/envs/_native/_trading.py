"""``FinancialRegimeEnv``: one traded asset whose price follows a geometric Brownian motion."""

from __future__ import annotations

import math

import torch
from tensordict import TensorDict, TensorDictBase

from rl.core import Binary, Categorical, Composite, Unbounded

from .._env_base import EnvBase
from .._td_utils import make_composite_from_td

__all__ = ["FinancialRegimeEnv"]

_DT = 1.0 / 252.0  # one trading day, in years
_HOLD, _BUY, _SELL = 0, 1, 2
_SHAPING = 0.1  # weight of the unrealised return while a position is held


class FinancialRegimeEnv(EnvBase):
    """A toy trading env (TorchRL's ``FinancialRegimeEnv``): hold, buy or sell one asset.

    The env is stateless: the state travels in the tensordict (``"price_history"``
    ``[*B, window_size]``, ``"current_holdings"`` ``[*B, 1]`` bool, ``"entry_price"``
    ``[*B, 1]``, ``"step_count"`` ``[*B]`` and the market ``"params"``), so any batch of
    markets steps at once (``env.reset(TensorDict(batch_size=[N]))``).

    Each step draws the next price ``p' = p * exp(drift * dt + volatility * sqrt(dt) * z)``
    with ``z ~ N(0, 1)`` and ``dt = 1/252``, where ``p`` is the last price of the history,
    which then shifts by one. The action (``"action"`` ``[*B, 1]``: 0 hold, 1 buy,
    2 sell) is executed at ``p``:

    - buy without a position: open one at ``p``, reward ``-transaction_cost * p``;
    - sell with a position opened at ``e``: close it, reward
      ``(p - e) / e - transaction_cost * p``;
    - otherwise (hold, buy while holding, sell while flat) nothing happens;
    - a position held after the action adds ``0.1 * (p' - p) / p`` to the reward.

    The episode is truncated (never terminated) after ``max_steps`` steps. A reset draws
    a history of ``window_size`` prices from ``initial_price`` with the same random walk
    (zero drift). All draws come from the env's generator, seeded with 0 unless ``seed``
    is given, so runs repeat exactly.

    Args:
        td_params: the market, as returned by :meth:`gen_params`; ``None``: the defaults
            (with ``window_size``).
        seed: seeds the env's generator. Defaults to 0 (as TorchRL).
        device: where the tensors live.
        window_size: length of the price history when ``td_params`` is ``None``
            (default 50).

    Raises:
        TypeError: ``td_params`` without a ``"params"`` entry.

    Examples:
        >>> import torch
        >>> from rl.envs import FinancialRegimeEnv
        >>> env = FinancialRegimeEnv(window_size=5, seed=1)
        >>> td = env.reset()
        >>> td["price_history"].shape, td["current_holdings"]
        (torch.Size([5]), tensor([False]))
        >>> td["action"] = torch.tensor([1])
        >>> nxt = env.step(td)["next"]
        >>> bool(nxt["current_holdings"]), bool(nxt["entry_price"] == td["price_history"][-1])
        (True, True)
    """

    DEFAULT_WINDOW_SIZE = 50
    DEFAULT_INITIAL_PRICE = 100.0
    DEFAULT_MAX_STEPS = 252  # one trading year
    metadata = {"render_modes": ["human"], "render_fps": 1}
    batch_locked: bool = False

    def __init__(self, td_params=None, seed=None, device=None, window_size=None) -> None:
        if td_params is None:
            td_params = self.gen_params(window_size=window_size, device=device)
        elif not isinstance(td_params, TensorDictBase) or "params" not in td_params.keys():
            raise TypeError(
                "td_params must be a TensorDict with a 'params' entry (see "
                f"FinancialRegimeEnv.gen_params()), got {type(td_params).__name__}"
            )
        super().__init__(device=device)
        self._params = td_params["params"].to(self.device) if self.device else td_params["params"]
        self._make_spec(td_params)
        self.set_seed(0 if seed is None else seed)

    @staticmethod
    def gen_params(
        window_size=None,
        initial_price=100.0,
        volatility=0.2,
        drift=0.05,
        transaction_cost=0.001,
        max_steps=252,
        batch_size=None,
        device=None,
    ) -> TensorDictBase:
        """The market parameters under ``"params"``, expanded to ``batch_size``.

        Args:
            window_size: length of the price history (default 50).
            initial_price: the price the reset history starts from.
            volatility: annualised volatility of the log price.
            drift: annualised drift of the log price.
            transaction_cost: fraction of the price paid on each buy and sell.
            max_steps: steps before truncation (252: one trading year).
            batch_size: leading dims of the returned TensorDict.
            device: where its tensors live.

        Examples:
            >>> from rl.envs import FinancialRegimeEnv
            >>> params = FinancialRegimeEnv.gen_params(volatility=0.5, batch_size=[2])
            >>> params["params", "volatility"]
            tensor([0.5000, 0.5000])
        """
        if window_size is None:
            window_size = FinancialRegimeEnv.DEFAULT_WINDOW_SIZE
        params = TensorDict(
            {
                "window_size": window_size,
                "initial_price": initial_price,
                "volatility": volatility,
                "drift": drift,
                "transaction_cost": transaction_cost,
                "max_steps": max_steps,
            },
            [],
        )
        td = TensorDict({"params": params}, [], device=device)
        if batch_size:
            td = td.expand(batch_size).contiguous()
        return td

    def _make_spec(self, td_params: TensorDictBase) -> None:
        window = int(td_params["params", "window_size"].reshape(-1)[0])
        device = self.device
        self.observation_spec = Composite(
            price_history=Unbounded(shape=(window,), dtype=torch.float32, device=device),
            current_holdings=Binary(shape=(1,), dtype=torch.bool, device=device),
            entry_price=Unbounded(shape=(1,), dtype=torch.float32, device=device),
            step_count=Unbounded(shape=(), dtype=torch.long, device=device),
            params=make_composite_from_td(td_params["params"], unsqueeze_null_shapes=False),
            shape=(),
            device=device,
        )
        self.state_spec = self.observation_spec.clone()
        flag = Categorical(2, shape=(1,), dtype=torch.bool, device=device)
        self.full_done_spec = Composite(
            done=flag, terminated=flag.clone(), truncated=flag.clone(), device=device
        )
        self.action_spec = Categorical(3, shape=(1,), dtype=torch.long, device=device)
        self.reward_spec = Unbounded(shape=(1,), dtype=torch.float32, device=device)

    def _set_seed(self, seed: int | None) -> None:
        self.rng = torch.Generator(device=self.device or "cpu")
        if seed is None:
            self.rng.seed()
        else:
            self.rng.manual_seed(int(seed))

    def _randn(self, shape) -> torch.Tensor:
        return torch.randn(shape, generator=self.rng, device=self.rng.device).to(self.device)

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        shape = tensordict.batch_size if tensordict is not None else torch.Size([])
        if tensordict is not None and "params" in tensordict.keys():
            params = tensordict["params"]
        else:
            params = self._params.expand(shape).clone()
        window = int(params["window_size"].reshape(-1)[0])
        volatility = params["volatility"].unsqueeze(-1)
        returns = self._randn((*shape, window)) * volatility * math.sqrt(_DT)
        history = params["initial_price"].unsqueeze(-1) * torch.exp(torch.cumsum(returns, -1))
        return TensorDict(
            {
                "price_history": history.to(torch.float32),
                "current_holdings": torch.zeros((*shape, 1), dtype=torch.bool, device=self.device),
                "entry_price": torch.zeros((*shape, 1), dtype=torch.float32, device=self.device),
                "step_count": torch.zeros(shape, dtype=torch.long, device=self.device),
                "params": params,
            },
            batch_size=shape,
            device=self.device,
        )

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        history = tensordict["price_history"]
        holding = tensordict["current_holdings"].squeeze(-1)
        entry = tensordict["entry_price"].squeeze(-1)
        action = tensordict["action"].reshape(holding.shape)
        step_count = tensordict.get("step_count", None)
        if step_count is None:
            step_count = torch.zeros_like(action)
        params = tensordict["params"]
        cost = params["transaction_cost"]

        price = history[..., -1]
        shock = self._randn(price.shape) * params["volatility"] * math.sqrt(_DT)
        next_price = price * torch.exp(params["drift"] * _DT + shock)

        buy = (action == _BUY) & ~holding
        sell = (action == _SELL) & holding
        safe_entry = entry.clamp(min=1e-6)
        reward = torch.where(buy, -cost * price, torch.zeros_like(price))
        reward = torch.where(sell, (price - safe_entry) / safe_entry - cost * price, reward)
        new_holding = (holding | buy) & ~sell
        reward = reward + torch.where(
            new_holding, _SHAPING * (next_price - price) / price, torch.zeros_like(price)
        )
        new_entry = torch.where(buy, price, torch.where(sell, torch.zeros_like(entry), entry))

        step_count = step_count + 1
        truncated = (step_count >= params["max_steps"]).unsqueeze(-1)
        return TensorDict(
            {
                "price_history": torch.cat([history[..., 1:], next_price.unsqueeze(-1)], -1),
                "current_holdings": new_holding.unsqueeze(-1),
                "entry_price": new_entry.unsqueeze(-1),
                "step_count": step_count,
                "params": params,
                "reward": reward.unsqueeze(-1).to(torch.float32),
                "done": truncated,
                "terminated": torch.zeros_like(truncated),
                "truncated": truncated.clone(),
            },
            batch_size=tensordict.batch_size,
            device=self.device,
        )
