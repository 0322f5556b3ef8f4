"""Tic-Tac-Toe as a stateless, batched torch environment (TorchRL's ``TicTacToeEnv``)."""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase

from rl.core import Categorical, Composite, Unbounded

from .._env_base import EnvBase

__all__ = ["TicTacToeEnv"]


class TicTacToeEnv(EnvBase):
    """Tic-Tac-Toe for one or two players, batched over the input's batch dims.

    The env is stateless: everything it needs is in the tensordict it is given, so any
    batch of positions can be stepped at once (``env.reset(TensorDict(batch_size=[N]))``).
    The board is written from the point of view of the player about to move: ``1`` for
    their marks, ``0`` for the opponent's, ``-1`` for an empty cell. ``"turn"`` says whose
    move it is (0 or 1) and ``"mask"`` which of the 9 cells are free; :meth:`rand_action`
    draws among the free cells. The player who completes a line gets a reward of 1 under
    ``("player0", "reward")`` or ``("player1", "reward")``; a win or a full board ends
    the game (``done`` and ``terminated``; ``truncated`` stays ``False``).

    Args:
        single_player: if ``True``, ``"player1"`` plays uniformly at random, inside
            :meth:`step`, after each move of ``"player0"``. Defaults to ``False``: the
            two players alternate and a policy plays both.
        device: where the tensors live. Defaults to ``None`` (the default device).

    Examples:
        >>> import torch
        >>> from rl.envs import TicTacToeEnv
        >>> env = TicTacToeEnv()
        >>> td = env.reset()
        >>> td["board"]
        tensor([[-1, -1, -1],
                [-1, -1, -1],
                [-1, -1, -1]], dtype=torch.int32)
        >>> td["action"] = torch.tensor(4)
        >>> nxt = env.step(td)["next"]
        >>> nxt["turn"], nxt["mask"].sum()
        (tensor([1], dtype=torch.int32), tensor(8))
        >>> env.rollout(10).batch_size[0] <= 9
        True
    """

    batch_locked: bool = False

    def __init__(self, *, single_player: bool = False, device=None) -> None:
        super().__init__(device=device)
        self.single_player = single_player
        self.action_spec = Categorical(n=9, shape=(), device=device)
        self.full_observation_spec = Composite(
            board=Unbounded(shape=(3, 3), dtype=torch.int, device=device),
            turn=Categorical(2, shape=(1,), dtype=torch.int, device=device),
            mask=Categorical(2, shape=(9,), dtype=torch.bool, device=device),
            device=device,
        )
        self.state_spec = self.observation_spec.clone()
        self.reward_spec = Composite(
            {
                ("player0", "reward"): Unbounded(shape=(1,), device=device),
                ("player1", "reward"): Unbounded(shape=(1,), device=device),
            },
            device=device,
        )
        flag = Categorical(2, shape=(1,), dtype=torch.bool, device=device)
        self.full_done_spec = Composite(
            done=flag, terminated=flag.clone(), truncated=flag.clone(), device=device
        )

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        shape = tensordict.shape if tensordict is not None else ()
        state = self.state_spec.zero(shape)
        state["board"] -= 1
        state["mask"].fill_(True)
        return state.update(self.full_done_spec.zero(shape))

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        board = tensordict["board"].clone()
        turn = tensordict["turn"]
        action = tensordict["action"]
        cells = board.flatten(-2, -1)
        cells.scatter_(-1, action.reshape(*cells.shape[:-1], 1), 1)
        wins = self.win(board, action)
        mask = cells == -1
        done = wins | ~mask.any(-1, keepdim=True)
        out = TensorDict(
            {
                "done": done,
                "terminated": done.clone(),
                "truncated": torch.zeros_like(done),
                ("player0", "reward"): (wins & (turn == 0)).float(),
                ("player1", "reward"): (wins & (turn == 1)).float(),
                # the next mover reads the board with their own marks as 1
                "board": torch.where(board == -1, board, 1 - board),
                "turn": 1 - turn,
                "mask": mask,
            },
            batch_size=tensordict.batch_size,
            device=self.device,
        )
        if not self.single_player:
            return out
        rows = (~done & (turn == 0)).squeeze(-1)
        if not rows.any():
            return out
        if rows.all():
            return self._opponent_step(out)
        out[rows] = self._opponent_step(out[rows])
        return out

    def _opponent_step(self, state: TensorDictBase) -> TensorDictBase:
        """Player 1's random move after player 0's; player 0's reward stays as earned."""
        return self._step(self.rand_action(state))

    def _set_seed(self, seed: int | None) -> None:
        if seed is not None:
            torch.manual_seed(seed)

    @staticmethod
    def win(board: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Whether the mark just put at ``action`` completes a line of the mover (``1``).

        Args:
            board: ``[*B, 3, 3]`` board with the mover's marks as ``1``.
            action: ``[*B]`` or ``[*B, 1]`` cell index in ``0..8``.

        Returns:
            ``[*B, 1]`` bool.
        """
        action = action.reshape(board.shape[:-2])
        row, col = action // 3, action % 3
        mine = board == 1
        row_win = mine.all(-1).gather(-1, row.unsqueeze(-1)).squeeze(-1)
        col_win = mine.all(-2).gather(-1, col.unsqueeze(-1)).squeeze(-1)
        diag_win = (row == col) & mine.diagonal(0, -2, -1).all(-1)
        anti_win = (row + col == 2) & mine.flip(-1).diagonal(0, -2, -1).all(-1)
        return (row_win | col_win | diag_win | anti_win).unsqueeze(-1)

    @staticmethod
    def full(board: torch.Tensor) -> bool:
        """Whether no cell of a single ``[3, 3]`` board is empty."""
        return bool((board != -1).all())

    def _draws_actions_per_step(self) -> bool:
        return True  # random actions follow "mask", which changes at every step

    def rand_action(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Writes a uniformly random action among the free cells of ``"mask"`` (if any)."""
        if tensordict is None:
            tensordict = TensorDict(batch_size=self.batch_size, device=self.device)
        mask = tensordict.get("mask", None)
        if mask is None:
            action = torch.randint(9, tensordict.shape, device=self.device)
        else:
            action = torch.multinomial(mask.reshape(-1, 9).float(), 1).reshape(mask.shape[:-1])
        tensordict.set(self.action_key, action)
        return tensordict
