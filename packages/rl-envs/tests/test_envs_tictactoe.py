"""TicTacToeEnv: specs, keys, rewards and done flags against hand-played games."""

import pytest
import torch
from tensordict import TensorDict

from rl.envs import TicTacToeEnv, check_env_specs
from rl.envs.custom import TicTacToeEnv as CustomTicTacToeEnv


def play(env, moves, td=None):
    td = env.reset() if td is None else td
    for m in moves:
        td["action"] = torch.as_tensor(m)
        td = env.step(td)
        nxt = td["next"]
        if nxt["done"].all():
            return nxt
        td = nxt.exclude("player0", "player1")
    return nxt


class TestTicTacToeEnv:
    def test_custom_module_and_specs(self):
        assert CustomTicTacToeEnv is TicTacToeEnv
        env = TicTacToeEnv()
        assert env.action_spec.shape == torch.Size([])
        assert env.action_spec.n == 9
        assert set(env.observation_spec.keys()) == {"board", "turn", "mask"}
        assert env.observation_spec["board"].dtype == torch.int32
        assert env.observation_spec["mask"].dtype == torch.bool
        assert set(env.full_reward_spec.keys(True, True)) == {
            ("player0", "reward"),
            ("player1", "reward"),
        }
        assert set(env.full_done_spec.keys()) == {"done", "terminated", "truncated"}
        check_env_specs(env)

    def test_reset(self):
        td = TicTacToeEnv().reset()
        assert (td["board"] == -1).all() and td["mask"].all()
        assert td["turn"].item() == 0 and not td["done"].any()

    def test_row_win_player0(self):
        env = TicTacToeEnv()
        # player0: 0, 1, 2 (top row); player1: 3, 4
        nxt = play(env, [0, 3, 1, 4, 2])
        assert nxt["done"].item() and nxt["terminated"].item() and not nxt["truncated"].item()
        assert nxt["player0", "reward"].item() == 1.0
        assert nxt["player1", "reward"].item() == 0.0

    def test_diag_win_player1(self):
        env = TicTacToeEnv()
        # player1 takes the anti-diagonal 2, 4, 6
        nxt = play(env, [0, 2, 1, 4, 5, 6])
        assert nxt["done"].item()
        assert nxt["player1", "reward"].item() == 1.0
        assert nxt["player0", "reward"].item() == 0.0

    def test_draw(self):
        env = TicTacToeEnv()
        nxt = play(env, [0, 1, 2, 4, 3, 5, 7, 6, 8])
        assert nxt["done"].item()
        assert nxt["player0", "reward"].item() == 0.0 and nxt["player1", "reward"].item() == 0.0
        assert not nxt["mask"].any()

    def test_board_from_movers_view(self):
        env = TicTacToeEnv()
        td = env.reset()
        td["action"] = torch.tensor(4)
        nxt = env.step(td)["next"]
        # the mark of player0 is the opponent's (0) for player1, who moves next
        assert nxt["board"][1, 1].item() == 0
        assert nxt["turn"].item() == 1 and nxt["mask"].sum().item() == 8

    def test_batched_step_and_rand_action(self):
        env = TicTacToeEnv()
        td = env.reset(TensorDict(batch_size=[6]))
        assert td["board"].shape == (6, 3, 3)
        torch.manual_seed(0)
        for _ in range(9):
            env.rand_action(td)
            assert td["mask"].gather(-1, td["action"].unsqueeze(-1)).all()
            td = env.step(td)["next"]
            if td["done"].all():
                break
            td = td.exclude("player0", "player1")

    def test_single_player_random_opponent(self):
        torch.manual_seed(1)
        env = TicTacToeEnv(single_player=True)
        td = env.reset()
        td["action"] = torch.tensor(4)
        nxt = env.step(td)["next"]
        # the random player1 has answered: two marks, player0 to move again
        assert nxt["turn"].item() == 0 and nxt["mask"].sum().item() == 7
        ro = env.rollout(9)
        assert ro["next", "done"][-1].item()

    def test_win_helper(self):
        board = torch.full((3, 3), -1)
        board[0] = 1
        assert TicTacToeEnv.win(board, torch.tensor(1)).item()
        assert not TicTacToeEnv.win(board, torch.tensor(4)).item()
        assert not TicTacToeEnv.full(board)

    @pytest.mark.parametrize("batch", [[], [3]])
    def test_rollout(self, batch):
        env = TicTacToeEnv()
        td = env.reset(TensorDict(batch_size=batch))
        ro = env.rollout(9, tensordict=td, auto_reset=False)
        assert ro["next", "done"].any()
