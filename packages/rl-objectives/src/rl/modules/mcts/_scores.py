"""MCTS child scores (UCB, UCB1-Tuned, PUCT, EXP3), as TorchRL's ``torchrl.modules.mcts``.

Each score reads per-action statistics of a node (``[*B, A]`` tensors) and writes
``[*B, A]`` scores under ``score_key``; the search then expands the arg-max (UCB, PUCT,
UCB1-Tuned) or samples from them (EXP3, whose scores are probabilities).
"""

from __future__ import annotations

import enum
import functools
import math
import warnings
from abc import abstractmethod

import torch
from tensordict import NestedKey, TensorDictBase
from tensordict.nn import TensorDictModuleBase

__all__ = ["EXP3Score", "MCTSScore", "MCTSScores", "PUCTScore", "UCB1TunedScore", "UCBScore"]


def _parent_visits(n_total: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A ``[*B]`` parent count made broadcastable to the ``[*B, A]`` child statistics."""
    n_total = torch.as_tensor(n_total, device=like.device)
    if 0 < n_total.ndim < like.ndim:
        n_total = n_total.unsqueeze(-1)
    return n_total


class MCTSScore(TensorDictModuleBase):
    """Base of the MCTS scores: ``forward(node)`` writes the children's scores in ``node``."""

    @abstractmethod
    def forward(self, node: TensorDictBase) -> TensorDictBase: ...


class UCBScore(MCTSScore):
    """Upper-confidence score ``W_i / N_i + c * sqrt(N) / (1 + N_i)``.

    ``W_i`` is a child's summed return (``win_count``), ``N_i`` its visits and ``N`` the
    parent's visits. An unvisited child (``N_i = 0``) scores ``inf`` (or ``nan`` when
    ``W_i = 0``, as in TorchRL: mask those before ranking, or start visits at 1).
    Auer et al., 2002, https://link.springer.com/article/10.1023/A:1013689704352.

    Args:
        c: exploration weight (keyword only).
        win_count_key: ``[*B, A]`` summed returns.
        visits_key: ``[*B, A]`` visit counts.
        total_visits_key: ``[*B]`` or scalar parent visit count.
        score_key: where the ``[*B, A]`` scores go.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.modules import UCBScore
        >>> node = TensorDict(win_count=torch.tensor([1.0, 3.0]),
        ...                   visits=torch.tensor([2.0, 4.0]), total_visits=torch.tensor(6.0))
        >>> UCBScore(c=1.0)(node)["score"]
        tensor([1.3165, 1.2399])
    """

    def __init__(
        self,
        *,
        c: float,
        win_count_key: NestedKey = "win_count",
        visits_key: NestedKey = "visits",
        total_visits_key: NestedKey = "total_visits",
        score_key: NestedKey = "score",
    ) -> None:
        super().__init__()
        self.c = c
        self.win_count_key = win_count_key
        self.visits_key = visits_key
        self.total_visits_key = total_visits_key
        self.score_key = score_key
        self.in_keys = [win_count_key, total_visits_key, visits_key]
        self.out_keys = [score_key]

    def forward(self, node: TensorDictBase) -> TensorDictBase:
        wins = node.get(self.win_count_key)
        visits = node.get(self.visits_key)
        n_total = _parent_visits(node.get(self.total_visits_key), visits)
        node.set(self.score_key, wins / visits + self.c * n_total.sqrt() / (1 + visits))
        return node


class PUCTScore(MCTSScore):
    """AlphaZero's score ``W_i / N_i + c * P_i * sqrt(N) / (1 + N_i)``.

    Like :class:`UCBScore` with the exploration term weighted by a prior ``P_i``
    (``prior_prob``, e.g. a policy network's probabilities). Silver et al., 2017,
    https://arxiv.org/abs/1712.01815.

    Args:
        c: exploration weight (keyword only).
        win_count_key: ``[*B, A]`` summed returns.
        visits_key: ``[*B, A]`` visit counts.
        total_visits_key: ``[*B]`` or scalar parent visit count.
        prior_prob_key: ``[*B, A]`` prior probabilities.
        score_key: where the ``[*B, A]`` scores go.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.modules import PUCTScore
        >>> node = TensorDict(win_count=torch.tensor([1.0, 3.0]), visits=torch.tensor([2.0, 4.0]),
        ...                   total_visits=torch.tensor(4.0), prior_prob=torch.tensor([0.5, 0.5]))
        >>> PUCTScore(c=1.0)(node)["score"]
        tensor([0.8333, 0.9500])
    """

    def __init__(
        self,
        *,
        c: float,
        win_count_key: NestedKey = "win_count",
        visits_key: NestedKey = "visits",
        total_visits_key: NestedKey = "total_visits",
        prior_prob_key: NestedKey = "prior_prob",
        score_key: NestedKey = "score",
    ) -> None:
        super().__init__()
        self.c = c
        self.win_count_key = win_count_key
        self.visits_key = visits_key
        self.total_visits_key = total_visits_key
        self.prior_prob_key = prior_prob_key
        self.score_key = score_key
        self.in_keys = [win_count_key, prior_prob_key, total_visits_key, visits_key]
        self.out_keys = [score_key]

    def forward(self, node: TensorDictBase) -> TensorDictBase:
        wins = node.get(self.win_count_key)
        visits = node.get(self.visits_key)
        prior = node.get(self.prior_prob_key)
        n_total = _parent_visits(node.get(self.total_visits_key), visits)
        explore = self.c * prior * n_total.sqrt() / (1 + visits)
        node.set(self.score_key, wins / visits + explore)
        return node


class UCB1TunedScore(MCTSScore):
    """UCB1-Tuned: UCB whose exploration term uses each child's reward variance.

    ``score_i = mean_i + sqrt(ln N / N_i * min(1/4, V_i))`` with
    ``V_i = (S_i / N_i - mean_i^2) + sqrt(C ln N / N_i)`` (clamped at 0), ``mean_i =
    W_i / N_i`` and ``S_i`` the summed squared rewards. Unvisited children get
    ``finfo.max / 10`` so they are tried first. Auer et al., 2002.

    Args:
        win_count_key: ``[*B, A]`` summed rewards ``W_i``.
        visits_key: ``[*B, A]`` visits ``N_i``.
        total_visits_key: ``[*B]`` or scalar parent visits ``N`` (``ln`` of at least 1).
        sum_squared_rewards_key: ``[*B, A]`` summed squared rewards ``S_i``.
        score_key: where the ``[*B, A]`` scores go.
        exploration_constant: ``C``. Defaults to 2.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.modules import UCB1TunedScore
        >>> node = TensorDict(win_count=torch.tensor([2.0, 0.0]), visits=torch.tensor([4.0, 0.0]),
        ...                   total_visits=torch.tensor(4.0),
        ...                   sum_squared_rewards=torch.tensor([2.0, 0.0]))
        >>> score = UCB1TunedScore()(node)["score"]
        >>> round(score[0].item(), 4), score[1].item() > 1e30
        (0.7944, True)
    """

    def __init__(
        self,
        *,
        win_count_key: NestedKey = "win_count",
        visits_key: NestedKey = "visits",
        total_visits_key: NestedKey = "total_visits",
        sum_squared_rewards_key: NestedKey = "sum_squared_rewards",
        score_key: NestedKey = "score",
        exploration_constant: float = 2.0,
    ) -> None:
        super().__init__()
        self.win_count_key = win_count_key
        self.visits_key = visits_key
        self.total_visits_key = total_visits_key
        self.sum_squared_rewards_key = sum_squared_rewards_key
        self.score_key = score_key
        self.exploration_constant = exploration_constant
        self.in_keys = [win_count_key, visits_key, total_visits_key, sum_squared_rewards_key]
        self.out_keys = [score_key]

    def forward(self, node: TensorDictBase) -> TensorDictBase:
        wins = node.get(self.win_count_key)
        visits = node.get(self.visits_key)
        squares = node.get(self.sum_squared_rewards_key)
        n_total = _parent_visits(node.get(self.total_visits_key), visits)
        log_n = n_total.clamp(min=1.0).log().expand_as(visits)
        visited = visits > 0
        safe_n = torch.where(visited, visits, torch.ones_like(visits))
        mean = wins / safe_n
        variance = squares / safe_n - mean.square()
        v = (variance + (self.exploration_constant * log_n / safe_n).sqrt()).clamp(min=0)
        explore = (log_n / safe_n * v.clamp(max=0.25)).sqrt()
        unvisited = torch.full_like(mean, torch.finfo(mean.dtype).max / 10.0)
        node.set(self.score_key, torch.where(visited, mean + explore, unvisited))
        return node


class EXP3Score(MCTSScore):
    """EXP3 probabilities ``p_i = (1 - gamma) w_i / sum_j w_j + gamma / K``.

    An adversarial-bandit rule: the scores are a distribution to sample a child from, and
    :meth:`update_weights` multiplies the chosen child's weight by
    ``exp(gamma / K * reward / p_i)``. Weights start at 1 when ``node`` has none. Auer et
    al., 2002, https://doi.org/10.1137/S0097539701398375.

    Args:
        gamma: exploration share in ``[0, 1]``. Defaults to 0.1.
        weights_key: ``[*B, K]`` weights ``w``.
        action_prob_key: where the probabilities are also written.
        reward_key: the reward entry (kept for TorchRL's signature).
        score_key: where the ``[*B, K]`` probabilities go.
        num_actions_key: ``K`` (an int or a tensor holding it).

    Raises:
        ValueError: ``gamma`` outside ``[0, 1]``; weights whose last dim is not ``K``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.modules import EXP3Score
        >>> exp3 = EXP3Score(gamma=0.1)
        >>> node = TensorDict(num_actions=torch.tensor(2))
        >>> exp3(node)["score"]
        tensor([0.5000, 0.5000])
        >>> exp3.update_weights(node, action_idx=0, reward=1.0)
        >>> node["weights"]
        tensor([1.1052, 1.0000])
    """

    def __init__(
        self,
        *,
        gamma: float = 0.1,
        weights_key: NestedKey = "weights",
        action_prob_key: NestedKey = "action_prob",
        reward_key: NestedKey = "reward",
        score_key: NestedKey = "score",
        num_actions_key: NestedKey = "num_actions",
    ) -> None:
        super().__init__()
        if not 0 <= gamma <= 1:
            raise ValueError(f"gamma must be between 0 and 1, got {gamma}")
        self.gamma = gamma
        self.weights_key = weights_key
        self.action_prob_key = action_prob_key
        self.reward_key = reward_key
        self.score_key = score_key
        self.num_actions_key = num_actions_key
        self.in_keys = [weights_key, num_actions_key]
        self.out_keys = [score_key]

    def forward(self, node: TensorDictBase) -> TensorDictBase:
        num_actions = node.get(self.num_actions_key)
        if isinstance(num_actions, torch.Tensor):
            k = int(num_actions.flatten()[0].item())
        elif isinstance(num_actions, int):
            k = num_actions
        else:
            raise ValueError(
                f"'{self.num_actions_key}' ('num_actions') must be an integer or a tensor, "
                f"got {type(num_actions).__name__}."
            )
        weights = node.get(self.weights_key, None)
        if weights is None:
            weights = torch.ones((*node.batch_size, k), device=node.device)
            node.set(self.weights_key, weights)
        if weights.shape[-1] != k:
            raise ValueError(
                f"Shape of weights {weights.shape} implies {weights.shape[-1]} actions, "
                f"but num_actions is {k}."
            )
        total = weights.sum(-1, keepdim=True)
        total = torch.where(total == 0, torch.ones_like(total), total)
        probs = (1 - self.gamma) * weights / total + self.gamma / k
        node.set(self.score_key, probs)
        if self.action_prob_key != self.score_key:
            node.set(self.action_prob_key, probs)
        return node

    def update_weights(self, node: TensorDictBase, action_idx: int, reward: float) -> None:
        """Multiplies the weight of ``action_idx`` by ``exp(gamma / K * reward / p_i)``.

        ``node`` must hold the weights and the probabilities of the last ``forward``. A
        reward outside ``[0, 1]`` warns; a child of probability 0 is left unchanged (with
        a warning).
        """
        if not 0 <= reward <= 1:
            warnings.warn(
                f"Reward {reward} is outside the expected [0,1] range for EXP3.",
                UserWarning,
                stacklevel=2,
            )
        weights = node.get(self.weights_key)
        probs = node.get(self.score_key)
        if weights.ndim == 0:
            raise ValueError(f"Invalid weights dimensions: {weights.ndim}")
        k = weights.shape[-1]
        p_i = probs[..., action_idx]
        if (p_i <= 0).any():
            shown = p_i.item() if p_i.numel() == 1 else p_i
            warnings.warn(
                f"Probability p_i(t) for action {action_idx} is {shown}. "
                "Weight will not be updated for zero probability actions.",
                UserWarning,
                stacklevel=2,
            )
            return
        reward_t = torch.as_tensor(reward, device=weights.device, dtype=weights.dtype)
        # in place, so that updating a slice of a batched node updates the node itself
        weights[..., action_idx] *= torch.exp(self.gamma / k * reward_t / p_i)
        node.set(self.weights_key, weights)


class MCTSScores(enum.Enum):
    """The scores with TorchRL's default settings; call a member to build one.

    ``PUCT`` (``c=5``), ``UCB`` (``c=sqrt(2)``), ``UCB1_TUNED``
    (``exploration_constant=2``), ``EXP3`` (``gamma=0.1``).

    Examples:
        >>> from rl.modules import MCTSScores
        >>> MCTSScores.UCB.value().c == 2 ** 0.5
        True
    """

    PUCT = enum.member(functools.partial(PUCTScore, c=5))
    UCB = enum.member(functools.partial(UCBScore, c=math.sqrt(2)))
    UCB1_TUNED = enum.member(functools.partial(UCB1TunedScore, exploration_constant=2.0))
    EXP3 = enum.member(functools.partial(EXP3Score, gamma=0.1))
