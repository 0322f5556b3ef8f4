"""examples/mcts.py: the batched UCT search plays legal, sensible moves on a tiny budget."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="module")
def mcts():
    spec = importlib.util.spec_from_file_location("example_mcts", EXAMPLES / "mcts.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_smoke_runs_and_logs(mcts, tmp_path):
    out = mcts.main(
        mcts.Config(num_games=6, num_simulations=8, log_dir=str(tmp_path), progress=False)
    )
    assert out["win_rate"] + out["draw_rate"] + out["loss_rate"] == pytest.approx(1.0)
    csvs = list(tmp_path.rglob("*.csv"))
    assert any("win_or_draw_rate" in str(p) for p in csvs)
    assert any("branching_points" in str(p) for p in csvs)  # the match record (MCTSForest)


def test_search_takes_a_winning_move_and_blocks(mcts):
    from rl.envs import TicTacToeEnv
    from rl.modules import UCBScore

    env = TicTacToeEnv()
    torch.manual_seed(0)
    # game 0: the mover (1) has cells 0 and 1, the opponent (0) cells 3 and 4: win at 2
    # game 1: the mover has 0 and 8, the opponent has 3 and 4: block at 5
    board = torch.full((2, 9), -1, dtype=torch.int32)
    board[0, [0, 1]] = 1
    board[0, [3, 4]] = 0
    board[1, [0, 8]] = 1
    board[1, [3, 4]] = 0
    root = TensorDict(
        board=board.view(2, 3, 3),
        turn=torch.zeros(2, 1, dtype=torch.int32),
        mask=board == -1,
        batch_size=[2],
    )
    cfg = mcts.Config(num_simulations=200)
    moves = mcts.search(env, root, cfg, UCBScore(c=cfg.c))
    assert moves.tolist() == [2, 5]
