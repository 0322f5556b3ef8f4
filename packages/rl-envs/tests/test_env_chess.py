"""ChessEnv and its SAN action list, checked against python-chess's own board."""

from __future__ import annotations

import doctest
import hashlib
import importlib.util
import io

import pytest
import torch
from tensordict import TensorDict

chess = pytest.importorskip("chess")
pytest.importorskip("chess.pgn")

from rl.envs import ChessEnv, TransformedEnv, check_env_specs  # noqa: E402
from rl.envs._native import _chess, _san_moves  # noqa: E402
from rl.envs._native._san_moves import san_moves  # noqa: E402

pytestmark = pytest.mark.chess

START = chess.STARTING_FEN
# a game with both castlings, a file-disambiguated move (Nbd2), an en-passant capture
# (axb6), checks and a promotion
GAME = (
    "e4 d5 exd5 Nf6 Nf3 Nxd5 d4 Nc6 Nbd2 Bf5 Bc4 Qd7 O-O O-O-O a4 e5 a5 b5 axb6 Nxd4 "
    "bxa7 Nxf3+ Nxf3 Kb7 a8=Q+ Kb6 Qxd8 Qxd8"
).split()
SCHOLARS_MATE = "e4 e5 Bc4 Nc6 Qh5 Nf6 Qxf7#".split()


def legal_indices(board) -> list[int]:
    """The action indices of the legal moves, by a plain search of the list."""
    moves = san_moves()
    return sorted(moves.index(board.san(m)) for m in board.legal_moves)


def play(env, sans, td=None):
    """Plays ``sans`` from a reset (or from ``td``); returns the last ``"next"``."""
    td = env.reset() if td is None else td
    for san in sans:
        td["action"] = torch.tensor(env.san_moves.index(san))
        nxt = env.step(td)["next"]
        td = nxt.exclude("reward")
    return nxt


class TestSanMoves:
    def test_list_as_torchrl(self):
        moves = san_moves()
        assert len(moves) == 29275 and moves[-1] == ""
        body = list(moves[:-1])
        assert len(set(body)) == len(body)
        assert body == sorted(body, key=lambda s: (len(s), s))  # TorchRL's order
        assert moves[:3] == ("a2", "a3", "a4") and moves[-2] == "hxg8=R+"
        assert san_moves() is moves  # built once
        assert ChessEnv.san_moves is moves

    def test_counts_by_kind(self):
        moves = san_moves()[:-1]
        # every move comes with no suffix, "+" and "#"
        bare = [m for m in moves if m[-1] not in "+#"]
        assert len(bare) * 3 == len(moves)
        assert sum(m.startswith("O-O") for m in bare) == 2
        # pawn pushes (ranks 2-7) and promotions (8 files x 2 ranks x 4 pieces)
        assert sum(len(m) == 2 for m in bare) == 48
        assert sum(len(m) == 4 and m[2] == "=" for m in bare) == 64
        # king: one a side, never disambiguated: 64 squares, with and without capture
        assert sum(m[0] == "K" for m in bare) == 128
        # a rook move to the edge along its file never needs its rank
        assert "R1a2" in moves and "R2a1" not in moves and "R8a7" in moves
        # two rooks on one file and a third on the rank cannot both be needed: no squares
        assert not [m for m in bare if m[0] == "R" and len(m.replace("x", "")) == 5]

    def test_every_move_of_real_positions_is_listed(self):
        boards = []
        board = chess.Board()
        for san in GAME:
            boards.append(board.copy())
            board.push_san(san)
        # three queens that need a square disambiguation, promotions by capture, checks
        boards.append(chess.Board("7k/8/8/8/4Q2Q/8/8/K6Q w - - 0 1"))
        boards.append(chess.Board("1n2k3/P7/8/8/8/8/8/4K3 w - - 0 1"))
        boards.append(chess.Board("r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1"))
        index = set(san_moves())
        for b in boards:
            for move in b.legal_moves:
                assert b.san(move) in index, (b.fen(), b.san(move))
        three_queens = boards[-3]
        sans = {three_queens.san(m) for m in three_queens.legal_moves}
        assert {"Qh4e1+", "Qee1+", "Q1e1+"} <= sans  # square, file and rank

    def test_docstring_examples(self):
        for module in (_san_moves, _chess):
            result = doctest.testmod(
                module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
            )
            assert result.attempted > 0 and result.failed == 0, module.__name__


class TestChessEnv:
    def test_construction_and_specs(self):
        env = ChessEnv()
        assert isinstance(env, TransformedEnv)  # the ActionMask
        assert env.action_spec.n == 29275 and env.action_spec.shape == ()
        assert set(env.observation_spec.keys()) == {"turn", "action_mask"}
        bare = ChessEnv(mask_actions=False)
        assert isinstance(bare, ChessEnv) and "action_mask" not in bare.reset().keys()
        full = ChessEnv(
            include_san=True, include_fen=True, include_pgn=True, include_legal_moves=True
        )
        assert set(full.observation_spec.keys()) == {
            "turn",
            "san",
            "fen",
            "pgn",
            "legal_moves",
            "action_mask",
        }
        assert full.observation_spec["legal_moves"].shape == (218,)
        from rl.envs.custom import ChessEnv as CustomChessEnv

        assert CustomChessEnv is ChessEnv

    @pytest.mark.parametrize(
        "kwargs",
        [
            {},
            {"include_fen": True, "include_san": True, "include_legal_moves": True},
            {"stateful": False, "include_fen": True},
            {"stateful": False, "include_pgn": True, "include_hash": True},
            {"include_fen": True, "include_hash": True, "include_hash_inv": True},
        ],
    )
    def test_check_env_specs(self, kwargs):
        check_env_specs(ChessEnv(**kwargs))

    @pytest.mark.parametrize("stateful", [True, False])
    def test_moves_match_python_chess(self, stateful):
        env = ChessEnv(stateful=stateful, include_fen=True, include_san=True, include_pgn=True)
        board = chess.Board()
        td = env.reset()
        assert td["fen"] == START and td["san"] == "<start>" and bool(td["turn"])
        for san in GAME:
            td["action"] = torch.tensor(env.san_moves.index(san))
            nxt = env.step(td)["next"]
            board.push_san(san)
            assert nxt["fen"] == board.fen()
            assert nxt["san"] == san
            assert bool(nxt["turn"]) == board.turn
            assert nxt["reward"].item() == 0.0 and not nxt["done"].item()
            td = nxt.exclude("reward")
        # the PGN is the game so far, move by move
        assert td["pgn"] == str(chess.pgn.Game.from_board(board))

    def test_action_mask_and_legal_moves_are_the_legal_moves(self):
        env = ChessEnv(include_legal_moves=True)
        board = chess.Board()
        td = env.reset()
        for san in GAME[:12]:
            expected = legal_indices(board)
            mask = td["action_mask"]
            assert mask.shape == (29275,) and mask.dtype == torch.bool
            assert mask.nonzero().flatten().tolist() == expected
            padded = td["legal_moves"]
            assert padded.shape == (218,)
            assert sorted(padded[: len(expected)].tolist()) == expected
            assert (padded[len(expected) :] == 29275).all()
            assert sorted(env.all_actions()["action"].tolist()) == expected
            assert env.cardinality() == len(expected)
            assert env.get_legal_moves() == [board.san(m) for m in board.legal_moves]
            assert env.get_legal_moves(uci=True) == [m.uci() for m in board.legal_moves]
            td["action"] = torch.tensor(env.san_moves.index(san))
            td = env.step(td)["next"].exclude("reward")
            board.push_san(san)
        # the masked spec draws legal moves only
        assert env.action_spec.mask.nonzero().flatten().tolist() == legal_indices(board)

    def test_scholars_mate_ends_with_a_win_for_the_mover(self):
        env = ChessEnv(include_fen=True)
        td = env.reset()
        rewards = []
        for san in SCHOLARS_MATE:
            td["action"] = torch.tensor(env.san_moves.index(san))
            nxt = env.step(td)["next"]
            rewards.append(nxt["reward"].item())
            td = nxt.exclude("reward")
        assert rewards == [0.0] * 6 + [1.0]
        assert nxt["done"].item() and nxt["terminated"].item()
        assert not bool(nxt["turn"])  # black is mated, and to move
        assert not nxt["action_mask"].any()
        board = chess.Board(nxt["fen"])
        assert board.is_checkmate()

    @pytest.mark.parametrize(
        "fen, san, reward",
        [
            ("5k2/6r1/8/8/8/8/7r/1K6 b - - 0 1", "Rg1#", 1.0),  # black mates
            ("5k2/6r1/8/8/8/8/7r/K7 b - - 0 1", "Rb7", 0.5),  # stalemate
            ("5k2/8/8/8/3r4/2K5/8/8 w - - 0 1", "Kxd4", 0.5),  # insufficient material
            ("5k2/8/1R6/8/6r1/2K5/8/8 b - - 99 123", "Kf7", 0.5),  # fifty moves
        ],
    )
    @pytest.mark.parametrize("stateful", [True, False])
    def test_end_rewards_from_a_fen(self, fen, san, reward, stateful):
        env = ChessEnv(stateful=stateful, include_fen=True)
        td = env.reset(TensorDict(fen=fen))
        assert td["fen"] == fen and env.board.fen() == fen
        assert bool(td["turn"]) == chess.Board(fen).turn
        td["action"] = torch.tensor(env.san_moves.index(san))
        nxt = env.step(td)["next"]
        assert nxt["reward"].item() == reward
        assert nxt["done"].item() and nxt["terminated"].item()

    def test_stateless_fen_round_trip(self):
        env = ChessEnv(stateful=False, include_fen=True)
        board = chess.Board()
        board.push_san("e4")
        # the position travels in the data: the env's own board plays no part
        env.reset()
        env.board.push_san("d4")
        td = TensorDict(fen=board.fen(), action=torch.tensor(env.san_moves.index("c5")))
        nxt = env.step(td)["next"]
        board.push_san("c5")
        assert nxt["fen"] == board.fen()
        # two positions stepped in turn, in any order
        other = TensorDict(fen=START, action=torch.tensor(env.san_moves.index("Nf3")))
        start = chess.Board()
        start.push_san("Nf3")
        assert env.step(other)["next", "fen"] == start.fen()
        with pytest.raises(KeyError, match="reads the board from 'fen'"):
            env.step(TensorDict(action=torch.tensor(0)))

    def test_stateless_pgn_round_trip(self):
        env = ChessEnv(stateful=False, include_pgn=True, include_san=True)
        nxt = play(env, SCHOLARS_MATE[:4])
        board = chess.Board()
        for san in SCHOLARS_MATE[:4]:
            board.push_san(san)
        assert nxt["pgn"] == str(chess.pgn.Game.from_board(board))
        # a reset to that PGN restores the game, its history and its last move
        td = env.reset(TensorDict(pgn=nxt["pgn"]))
        assert td["pgn"] == nxt["pgn"] and td["san"] == "Nc6"
        assert env.board.move_stack == board.move_stack
        assert td["action_mask"].nonzero().flatten().tolist() == legal_indices(board)
        # and the game goes on from it
        nxt = play(env, SCHOLARS_MATE[4:], td)
        assert nxt["reward"].item() == 1.0 and nxt["done"].item()
        game = chess.pgn.read_game(io.StringIO(nxt["pgn"]))
        for san in SCHOLARS_MATE[4:]:
            board.push_san(san)
        assert list(game.mainline_moves()) == board.move_stack

    def test_stateless_matches_stateful(self):
        rollouts = []
        for kwargs in ({"stateful": True}, {"stateful": False}):
            env = ChessEnv(include_fen=True, include_pgn=True, **kwargs)
            torch.manual_seed(1)
            rollouts.append(env.rollout(30, break_when_any_done=False))
        a, b = rollouts
        assert torch.equal(a["action"], b["action"])
        assert list(a["next", "fen"]) == list(b["next", "fen"])
        assert list(a["next", "pgn"]) == list(b["next", "pgn"])

    def test_random_rollout_plays_legal_moves(self):
        env = ChessEnv(include_fen=True, include_san=True)
        torch.manual_seed(0)
        rollout = env.rollout(60, break_when_any_done=False)
        board = chess.Board()
        games = 1
        for t in range(rollout.shape[0]):
            if t and rollout["next", "done"][t - 1].item():  # a new game after the last one
                assert board.is_game_over()
                board = chess.Board()
                games += 1
            assert rollout["fen"][t] == board.fen()
            action = rollout["action"][t].item()
            assert action in legal_indices(board)
            board.push(board.parse_san(env.san_moves[action]))
            assert rollout["next", "fen"][t] == board.fen()
            assert rollout["next", "san"][t] == env.san_moves[action]
            assert rollout["next", "done"][t].item() == board.is_game_over()
        assert games == 2  # this seed mates at step 13: the rollout goes on with a new game

    def test_reset_ignores_the_state_inside_a_rollout(self):
        # a rollout's reset carries a "_reset" mask and the last (game-over) position:
        # it starts a new game instead of raising
        env = ChessEnv(include_fen=True)
        nxt = play(env, SCHOLARS_MATE)
        td = nxt.clone()
        td["_reset"] = torch.tensor([True])
        assert env.reset(td)["fen"] == START

    def test_hash_entries(self):
        env = ChessEnv(include_fen=True, include_san=True, include_pgn=True, include_hash=True)
        td = env.reset()
        for key in ("fen", "san", "pgn"):
            digest = hashlib.sha256(td[key].encode()).digest()
            assert td[f"{key}_hash"].tolist() == list(digest)
            assert td[f"{key}_hash"].dtype == torch.uint8

    @pytest.mark.parametrize("stateful", [True, False])
    def test_hash_inv_sets_the_board_from_a_hash(self, stateful):
        env = ChessEnv(
            include_fen=True, include_hash=True, include_hash_inv=True, stateful=stateful
        )
        fen = "8/8/2kq4/4K3/1R3Q2/8/8/8 w - - 0 1"  # two legal moves: Kf5, Ke4
        td = env.reset(TensorDict(fen=fen))
        assert td["action_mask"].sum() == 2
        assert env.reset()["action_mask"].sum() == 20
        by_hash = env.reset(td.select("fen_hash"))
        assert by_hash["fen"] == fen and env.board.fen() == fen
        # a step from the hash alone
        step_in = by_hash.select("fen_hash")
        step_in["action"] = torch.tensor(env.san_moves.index("Kf5"))
        nxt = env.step(step_in)["next"]
        board = chess.Board(fen)
        board.push_san("Kf5")
        assert nxt["fen"] == board.fen() and "fen" not in step_in.keys()

    def test_errors(self):
        with pytest.raises(
            ValueError, match="'include_hash_inv=True' can only be set if 'include_hash=True'"
        ):
            ChessEnv(include_fen=True, include_hash_inv=True)
        for error in (ValueError, RuntimeError):  # RuntimeError: TorchRL's type
            with pytest.raises(error, match="At least one state representation"):
                ChessEnv(stateful=False)
        env = ChessEnv(include_fen=True)
        td = env.reset()
        td["action"] = torch.tensor(env.san_moves.index("e5"))
        with pytest.raises(ValueError, match=r"action \d+ \('e5'\) is not a legal move"):
            env.step(td)
        with pytest.raises(ValueError, match="gameover state"):
            env.reset(TensorDict(fen="1R3k2/2R5/8/8/8/8/2K5/8 b - - 0 1"))
        with pytest.raises(RuntimeError, match="Cannot generate legal actions"):
            ChessEnv(mask_actions=False).all_actions()
        with pytest.raises(ValueError, match="needs the tensordict"):
            ChessEnv(stateful=False, include_fen=True, mask_actions=False).get_legal_moves()

    def test_pixels_missing_backend(self, monkeypatch):
        real = importlib.util.find_spec
        monkeypatch.setattr(
            importlib.util,
            "find_spec",
            lambda name, *a: None if name == "cairosvg" else real(name, *a),
        )
        with pytest.raises(ImportError, match=r"missing: cairosvg.*rl-envs\[chess_pixels\]"):
            ChessEnv(pixels=True)

    @pytest.mark.skipif(importlib.util.find_spec("cairosvg") is None, reason="needs cairosvg")
    def test_pixels(self):
        env = ChessEnv(include_fen=True, pixels=True)
        td = env.reset()
        image = td["pixels"]
        assert image.shape == (3, 390, 390) and image.dtype == torch.uint8
        assert image.float().std() > 10  # a drawn board, not a blank image
        td["action"] = torch.tensor(env.san_moves.index("e4"))
        after = env.step(td)["next", "pixels"]
        assert after.shape == (3, 390, 390) and not torch.equal(after, image)
