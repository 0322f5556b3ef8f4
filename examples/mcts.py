"""Monte Carlo tree search (UCT) playing Tic-Tac-Toe against a uniformly random opponent.

Kocsis & Szepesvári 2006, "Bandit based Monte-Carlo Planning"; Browne et al. 2012, "A
Survey of Monte Carlo Tree Search Methods". No learning: at each of its moves the MCTS
player grows a search tree from the current position with ``num_simulations`` rounds of
selection (the children's ``UCBScore`` from ``rl.modules``), expansion (one step of
``TicTacToeEnv``), evaluation (a random play-out to the end, stepped by the same env) and
back-up, then plays the most visited move. The env is stateless and batched, so the
``num_games`` games, and their trees, advance together: each round is a handful of batched
env steps, whatever the number of games. The MCTS player moves first in even games and
second in odd ones. Every move played goes into an ``rl.data.MCTSForest``, whose tree from
the empty board summarises the match (its branching points and longest line).

    uv run examples/mcts.py
    uv run examples/mcts.py --seed 1 --num-simulations 200

No network is trained or evaluated here, and the env steps (whose batch is the games
still searching, a size that changes at every step) stay eager; ``--compile`` compiles
the search's policy, the selection rule a round applies at each depth (the children's
UCB scores, unvisited moves first, random tie-breaks, illegal moves masked, the argmax),
once for any number of games (dynamic shapes). ``--device cuda`` runs the games, the
env (a native torch env) and the search trees on the GPU; the match record stays on the
CPU. ``--cudagraphs`` is refused: the search runs on batches whose size changes.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Literal

import torch
import torch.fx.experimental._config
import tyro
from tensordict import TensorDict, TensorDictBase

from rl.core import seed_everything
from rl.core.loggers import generate_exp_name, get_logger
from rl.data import MCTSForest
from rl.envs import TicTacToeEnv
from rl.modules import UCBScore

sys.path.insert(0, str(Path(__file__).parent))
from _common import ProgressBar, check_cudagraphs, own_compiled, resolve_device  # noqa: E402

NO_WINNER, DRAW = -2, -1  # node_winner codes besides the winning player (0 or 1)


@dataclasses.dataclass
class Config:
    """MCTS settings and the match to play."""

    num_games: int = 200
    """Games against the random opponent, played side by side."""
    num_simulations: int = 800
    """Search rounds per MCTS move (selection, expansion, play-out, back-up)."""
    c: float = 1.0
    """UCB exploration weight."""
    seed: int = 0
    """Seed of torch, numpy and python random."""
    logger: Literal["csv", "tensorboard", "wandb", "mlflow"] = "csv"
    """Logging back-end (CSV needs nothing extra)."""
    log_dir: str = "runs"
    """Where the logs go."""
    exp_name: str | None = None
    """Run name (default: generated from the algorithm, the env and the seed)."""
    progress: bool = True
    """Show a progress bar (only when attached to a terminal)."""
    compile: bool = False
    """torch.compile the selection rule (UCB scores and the move chosen), once."""
    cudagraphs: bool = False
    """Refused: the search runs on batches whose size changes (see the module's docstring)."""
    device: str = "cpu"
    """Where the games, the env (a native torch env) and the search trees live: ``cpu``,
    ``cuda``, ``cuda:N``, or ``auto`` (CUDA where visible). The match record
    (``MCTSForest``) stays on the CPU."""


class Forest:
    """The search trees of a batch of games, one row of tensors per game.

    Node 0 is the root; node ``i`` of game ``g`` holds its position (``board``, ``turn``,
    ``mask``), its outcome if the game ended there, and for each of its 9 moves the child
    index (-1: not expanded), the visits and the summed result for the player to move.
    The tensors live on the roots' device.
    """

    def __init__(self, root: TensorDictBase, max_nodes: int) -> None:
        g, device = root.shape[0], root["board"].device
        self.games = torch.arange(g, device=device)
        self.states = root.select("board", "turn", "mask").unsqueeze(1).expand(g, max_nodes).clone()
        self.winner = torch.full((g, max_nodes), NO_WINNER, device=device)
        self.children = torch.full((g, max_nodes, 9), -1, device=device)
        self.visits = torch.zeros(g, max_nodes, 9, device=device)
        self.wins = torch.zeros(g, max_nodes, 9, device=device)
        self.size = torch.ones(g, dtype=torch.long, device=device)


def winner_of(step: TensorDictBase, mover: torch.Tensor) -> torch.Tensor:
    """The winning player (0 or 1), DRAW or NO_WINNER after a step made by ``mover``."""
    won = (step["player0", "reward"] + step["player1", "reward"]).squeeze(-1) > 0
    done = step["done"].squeeze(-1)
    return torch.where(won, mover, torch.where(done, DRAW, NO_WINNER))


def play_out(env: TicTacToeEnv, state: TensorDictBase, winner: torch.Tensor) -> torch.Tensor:
    """Plays random moves from ``state`` until each game ends; returns the winners."""
    winner = winner.clone()
    live = torch.nonzero(winner == NO_WINNER).squeeze(-1)
    state = state.select("board", "turn", "mask")[live]
    while len(live):
        mover = state["turn"].squeeze(-1).long()
        nxt = env.step(env.rand_action(state))["next"]
        result = winner_of(nxt, mover)
        winner[live] = result
        going = result == NO_WINNER
        live, state = live[going], nxt.select("board", "turn", "mask")[going]
    return winner


def make_select(score: UCBScore, compile: bool | dict = False):
    """The selection rule ``(win_count, visits, legal) -> move`` ``[G, 9] -> [G]``: the
    children's UCB scores (an unvisited move first, ties broken at random), illegal
    moves masked; compiled once with ``compile``, for any number of games ``G``."""

    def select(win_count, visits, legal):
        stats = TensorDict(
            win_count=win_count,
            visits=visits,
            total_visits=visits.sum(-1),
            batch_size=visits.shape[:1],
        )
        s = score(stats)["score"]
        s = torch.where(visits == 0, torch.inf, s)
        s = s + 1e-6 * torch.rand_like(s)  # break ties at random
        return torch.where(legal, s, -torch.inf).argmax(-1)

    if not compile:
        return select
    kwargs = dict(compile) if isinstance(compile, dict) else {}
    kwargs.setdefault("dynamic", True)
    compiled = own_compiled(select, kwargs)

    def select_any_size(win_count, visits, legal):
        # a size of 1 (one game left searching) is no special case of the dynamic graph
        with torch.fx.experimental._config.patch(backed_size_oblivious=True):
            return compiled(win_count, visits, legal)

    return select_any_size


def search(
    env: TicTacToeEnv, root: TensorDictBase, cfg: Config, score: UCBScore, select=None
) -> torch.Tensor:
    """Runs ``num_simulations`` UCT rounds from each root (on the roots' device); returns
    the most visited moves. ``select`` is the selection rule (default:
    :func:`make_select`'s, eager)."""
    select = select or make_select(score)
    forest = Forest(root, cfg.num_simulations + 1)
    g, device = root.shape[0], forest.games.device
    for _ in range(cfg.num_simulations):
        node = torch.zeros(g, dtype=torch.long, device=device)
        path_nodes, path_moves = [], []
        descending = torch.ones(g, dtype=torch.bool, device=device)
        leaf = torch.zeros(g, dtype=torch.long, device=device)  # the node a round stops at
        move = torch.zeros(g, dtype=torch.long, device=device)
        # 1. selection: follow the best UCB child until a move has no child yet
        while descending.any():
            a = select(
                forest.wins[forest.games, node],
                forest.visits[forest.games, node],
                forest.states["mask"][forest.games, node],
            )
            terminal = forest.winner[forest.games, node] != NO_WINNER
            descending &= ~terminal
            path_nodes.append(node.clone())
            path_moves.append(torch.where(descending, a, -1))
            child = forest.children[forest.games, node, a]
            stop = descending & (child < 0)
            leaf = torch.where(stop, node, leaf)
            move = torch.where(stop, a, move)
            leaf = torch.where(descending.logical_not() & terminal & (leaf == 0), node, leaf)
            descending &= child >= 0
            node = torch.where(descending, child, node)
        # 2. expansion: one env step per game that stopped on an unexpanded move
        expand = forest.winner[forest.games, leaf] == NO_WINNER
        value = forest.winner[forest.games, leaf].clone()
        rows = torch.nonzero(expand).squeeze(-1)
        if len(rows):
            parent = forest.states[rows, leaf[rows]].clone()
            parent["action"] = move[rows]
            nxt = env.step(parent)["next"]
            mover = parent["turn"].squeeze(-1).long()
            new = forest.size[rows]
            forest.states[rows, new] = nxt.select("board", "turn", "mask")
            forest.winner[rows, new] = winner_of(nxt, mover)
            forest.children[rows, leaf[rows], move[rows]] = new
            forest.size[rows] += 1
            # 3. evaluation: a random play-out from the new node
            value[rows] = play_out(env, nxt, forest.winner[rows, new])
        # 4. back-up: each move on the path scores 1 / 0.5 / 0 for the player who made it
        for nodes, moves in zip(path_nodes, path_moves):
            took = moves >= 0
            mover = forest.states["turn"][forest.games, nodes].squeeze(-1).long()
            result = torch.where(value == mover, 1.0, torch.where(value == DRAW, 0.5, 0.0))
            r, n, m = forest.games[took], nodes[took], moves[took]
            forest.visits[r, n, m] += 1
            forest.wins[r, n, m] += result[took]
    root_visits = forest.visits[:, 0]
    root_visits = torch.where(root["mask"], root_visits, -1.0)
    return root_visits.argmax(-1)


def main(cfg: Config) -> dict:
    device = resolve_device(cfg.device)  # a device this machine lacks stops the run here
    seed_everything(cfg.seed)
    torch.set_num_threads(1)
    check_cudagraphs(cfg.cudagraphs)
    if cfg.cudagraphs:
        raise ValueError(
            "mcts.py searches on batches of games whose size changes at every step: there "
            "is no fixed-shape CUDA computation to capture; run without --cudagraphs "
            "(--compile compiles the selection rule)"
        )
    env = TicTacToeEnv(device=device)
    score = UCBScore(c=cfg.c)
    select = make_select(score, cfg.compile)
    exp_name = cfg.exp_name or generate_exp_name("mcts", f"TicTacToe-s{cfg.seed}")
    logger = get_logger(cfg.logger, logger_name=cfg.log_dir, experiment_name=exp_name)
    logger.log_hparams(dataclasses.asdict(cfg))

    games = env.reset(TensorDict(batch_size=[cfg.num_games]))
    # the match record: every (position, move) -> next position played, in a search forest
    record = MCTSForest(max_size=9 * cfg.num_games)
    record.get_keys_from_env(env)  # board, turn and mask identify a position
    empty_board = games[0].clone().to("cpu")  # the record's root
    mcts_player = torch.arange(cfg.num_games, device=device) % 2
    winner = torch.full((cfg.num_games,), NO_WINNER, device=device)
    progress = ProgressBar(cfg.progress, total=9)
    start = time.perf_counter()
    for ply in range(9):
        live = torch.nonzero(winner == NO_WINNER).squeeze(-1)
        if not len(live):
            break
        state = games[live]
        mover = state["turn"].squeeze(-1).long()
        ours = mover == mcts_player[live]
        action = env.rand_action(state.clone())["action"]
        if ours.any():
            action[ours] = search(env, state[ours], cfg, score, select)
        state["action"] = action
        nxt = env.step(state)["next"]
        played = state.select(*record.observation_keys, "action").set("next", nxt)
        record.extend(played.to("cpu"))
        winner[live] = winner_of(nxt, mover)
        games[live] = nxt.select("board", "turn", "mask", "done", "terminated", "truncated")
        progress.values["games_over"] = float((winner != NO_WINNER).sum())
        progress.update(1)
        logger.log_scalar("play/games_over", float((winner != NO_WINNER).sum()), ply + 1)
    progress.close()
    seconds = time.perf_counter() - start
    match = record.get_tree(empty_board)
    logger.log_scalar("match/distinct_moves", float(len(record)), cfg.num_games)
    logger.log_scalar("match/branching_points", float(match.num_vertices()), cfg.num_games)

    won = (winner == mcts_player).float().mean().item()
    drawn = (winner == DRAW).float().mean().item()
    lost = 1.0 - won - drawn
    for name, value in [
        ("eval/win_rate", won),
        ("eval/draw_rate", drawn),
        ("eval/loss_rate", lost),
    ]:
        logger.log_scalar(name, value, cfg.num_games)
    logger.log_scalar("eval/win_or_draw_rate", won + drawn, cfg.num_games)
    print(
        f"{cfg.num_games} games against a random player in {seconds:.1f} s: "
        f"won {won:.1%}, drew {drawn:.1%}, lost {lost:.1%} (win or draw {won + drawn:.1%}); "
        f"the games played {len(record)} distinct moves, branching at {match.num_vertices()} "
        f"points of the match tree"
    )
    return {"win_rate": won, "draw_rate": drawn, "loss_rate": lost, "seconds": seconds}


if __name__ == "__main__":
    main(tyro.cli(Config, description=__doc__))
