"""Chess on python-chess (TorchRL's ``ChessEnv``): moves are indices into the SAN list."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import io
from typing import Any

import torch
from tensordict import NonTensorData, TensorDict, TensorDictBase

from rl.core import Binary, Bounded, Categorical, Composite, NonTensor, Unbounded

from .._env_base import EnvBase, _EnvMeta
from ._san_moves import san_moves

__all__ = ["ChessEnv"]

# the most legal moves a chess position has (https://www.stmintz.com/ccc/index.php?id=424966)
_MAX_LEGAL_MOVES = 218
_INSTALL = 'pip install "rl-envs[chess]"'
_INSTALL_PIXELS = 'pip install "rl-envs[chess_pixels]"'


class _StateConfigError(ValueError, RuntimeError):
    """A stateless ChessEnv without a state entry: a bad argument (ValueError), and the
    RuntimeError TorchRL raises for it."""


class _classproperty:
    """A read-only attribute computed from the class (``ChessEnv.lib``, ``env.lib``)."""

    def __init__(self, fget) -> None:
        self.fget = fget

    def __get__(self, instance, owner):
        return self.fget(owner)


@functools.cache
def _san_index() -> dict[str, int]:
    """SAN string -> action index (built once, with the list)."""
    return {san: i for i, san in enumerate(san_moves())}


def _string(tensordict: TensorDictBase, key: str) -> str | None:
    """The string stored under ``key`` (a ``NonTensorData`` entry), or ``None``."""
    value = tensordict.get(key, None)
    if isinstance(value, NonTensorData):
        value = value.data
    return value


class _ChessEnvMeta(_EnvMeta):
    """Appends the transforms TorchRL's ``ChessEnv`` comes with: a ``Hash`` of the
    ``san`` / ``fen`` / ``pgn`` strings (``include_hash=True``; with ``include_hash_inv``
    the hashes also map back to their strings, so a hash alone can set the board), then
    an ``ActionMask`` (``mask_actions=True``, the default)."""

    def __call__(cls, *args, **kwargs):
        env = super().__call__(*args, **kwargs)
        if kwargs.get("include_hash", False):
            from ..transforms import Hash

            inv = kwargs.get("include_hash_inv", False)
            names = [n for n in ("san", "fen", "pgn") if kwargs.get(f"include_{n}", False)]
            hashes = [f"{n}_hash" for n in names]
            env = env.append_transform(
                Hash(names, hashes, names if inv else None, hashes if inv else None)
            )
        if kwargs.get("mask_actions", True):
            from ..transforms import ActionMask

            env = env.append_transform(ActionMask())
        return env


class ChessEnv(EnvBase, metaclass=_ChessEnvMeta):
    """A game of chess played by one policy for both sides, on python-chess.

    An action is an index into :attr:`san_moves`, the 29,275 strings any chess move can be
    written as in Standard Algebraic Notation (``"e4"``, ``"Nbd7"``, ``"exd8=Q#"``,
    ``"O-O"``), in TorchRL's order: the same index names the same move as in TorchRL. The
    move is applied with python-chess (which reads the SAN as it does in a PGN file: a
    missing or extra ``+``/``#`` is accepted); a move that is not legal in the position
    raises a ``ValueError``. With ``mask_actions=True`` (the default) the env is returned
    inside a :class:`~rl.envs.TransformedEnv` with an :class:`~rl.envs.ActionMask`, and
    ``"action_mask"`` (29,275 booleans) allows exactly the legal moves, so that
    ``rand_action`` and masked policies only play legal moves.

    Observations: ``"turn"`` (``True`` when white is to move), and on request ``"san"``
    (the move that led to the position, ``"<start>"`` at the initial position), ``"fen"``
    (the position), ``"pgn"`` (the game so far), ``"legal_moves"`` (the indices of the
    legal moves, padded to 218 with 29,275) and ``"pixels"`` (the board drawn by
    python-chess, ``uint8`` of shape ``(3, 390, 390)``).

    The reward goes to the player who just moved: 1 for a checkmate, 0.5 for a draw
    (stalemate, insufficient material, the fifty-move rule, fivefold repetition, the
    seventy-five-move rule), 0 otherwise. A finished game is ``done`` and
    ``terminated``. Repetitions need the move history, which a stateless env that reads
    ``"fen"`` does not have (as TorchRL's).

    A stateful env (the default) keeps its board in :attr:`board`. A stateless one
    (``stateful=False``) reads the board from the input at every step: from ``"fen"``
    when ``include_fen`` (else from ``"pgn"``), so positions can be stepped in any order.
    :meth:`reset` starts from the standard position, or from the ``"fen"`` (``"pgn"``
    when ``include_fen=False``) the input holds, as TorchRL 0.14.1 does with
    ``set_state`` unspecified; resets inside a rollout (with a ``"_reset"`` mask) always
    start a new game.

    Args:
        stateful: keep the board in the env. If ``False``, ``include_fen`` or
            ``include_pgn`` must be set: the board travels in the data.
        include_san: add ``"san"``.
        include_fen: add ``"fen"``.
        include_pgn: add ``"pgn"``.
        include_legal_moves: add ``"legal_moves"``.
        include_hash: append a :class:`~rl.envs.Hash` transform writing ``"san_hash"``,
            ``"fen_hash"`` and ``"pgn_hash"`` (SHA-256, ``uint8`` of shape ``(32,)``) for
            the strings included.
        include_hash_inv: the ``Hash`` also maps hashes back to their strings on the way
            in, so that a ``"fen_hash"`` (or ``"pgn_hash"``) alone sets the board at
            :meth:`reset` and, for a stateless env, at every step.
        mask_actions: append an :class:`~rl.envs.ActionMask` transform and write
            ``"action_mask"``.
        pixels: add ``"pixels"`` (needs ``pip install "rl-envs[chess_pixels]"``:
            cairosvg, with the system cairo library, and Pillow).

    Raises:
        ImportError: python-chess is missing (``pip install "rl-envs[chess]"``), or with
            ``pixels=True`` cairosvg, the cairo library or Pillow is.
        ValueError: ``include_hash_inv=True`` without ``include_hash=True``;
            ``stateful=False`` without ``include_fen`` or ``include_pgn`` (also a
            ``RuntimeError``, as TorchRL's); at reset, a position that is already over;
            at a step, a move that is not legal in the position.
        KeyError: a stateless step whose input lacks the state entry (``"fen"`` or
            ``"pgn"``).

    Differences from TorchRL, where its behaviour is a bug: ``"legal_moves"`` has the
    218 entries its spec declares (TorchRL writes 219); ``"san"`` holds the move's
    actual SAN (TorchRL echoes the action's string, which may differ in its ``+``/``#``);
    a stateless env with both ``"fen"`` and ``"pgn"`` extends the input PGN (TorchRL
    starts a one-move PGN from the FEN at each step); :meth:`cardinality` counts the
    legal moves (TorchRL's raises an ``AttributeError``). ``reset(td, set_state=...)``
    is not supported: the state in the input is honoured (see above).

    python-chess: https://python-chess.readthedocs.io

    Examples:
        >>> import torch
        >>> from rl.envs import ChessEnv
        >>> env = ChessEnv(include_fen=True, include_san=True)
        >>> td = env.reset()
        >>> td["fen"], td["san"], int(td["action_mask"].sum())
        ('rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1', '<start>', 20)
        >>> td["action"] = torch.tensor(env.san_moves.index("e4"))
        >>> nxt = env.step(td)["next"]
        >>> nxt["san"], nxt["fen"], bool(nxt["turn"])
        ('e4', 'rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1', False)
        >>> _ = torch.manual_seed(0)
        >>> rollout = env.rollout(5)  # random legal moves (the mask)
        >>> list(rollout["next", "san"])
        ['f4', 'Nf6', 'd3', 'e5', 'fxe5']
    """

    _PGN_RESTART = """[Event "?"]
[Site "?"]
[Date "????.??.??"]
[Round "?"]
[White "?"]
[Black "?"]
[Result "*"]

*"""

    def __init__(
        self,
        *,
        stateful: bool = True,
        include_san: bool = False,
        include_fen: bool = False,
        include_pgn: bool = False,
        include_legal_moves: bool = False,
        include_hash: bool = False,
        include_hash_inv: bool = False,
        mask_actions: bool = True,
        pixels: bool = False,
    ):
        chess = self.lib
        if include_hash_inv and not include_hash:
            raise ValueError(
                "'include_hash_inv=True' can only be set if 'include_hash=True' (the inverse "
                f"maps back the hashes it writes), but got 'include_hash={include_hash}'."
            )
        if not stateful and not (include_fen or include_pgn):
            raise _StateConfigError(
                "At least one state representation (pgn or fen) must be enabled when "
                "stateful is False: ChessEnv(stateful=False) reads the board from the data, "
                "set include_fen=True or include_pgn=True"
            )
        if pixels:
            self._check_pixels_backend()
        super().__init__()
        self.stateful = stateful
        self.include_san = include_san
        self.include_fen = include_fen
        self.include_pgn = include_pgn
        self.include_legal_moves = include_legal_moves
        self.include_hash = include_hash
        self.include_hash_inv = include_hash_inv
        self.mask_actions = mask_actions
        self.pixels = pixels
        n = len(self.san_moves)
        observation = Composite(turn=Categorical(n=2, shape=(), dtype=torch.bool))
        if include_legal_moves:
            # padded with n: the bound is n + 1, as TorchRL's
            observation["legal_moves"] = Bounded(
                0, n + 1, shape=(_MAX_LEGAL_MOVES,), dtype=torch.int64
            )
        if include_san:
            observation["san"] = NonTensor(shape=(), example_data="Nc6")
        if include_pgn:
            observation["pgn"] = NonTensor(shape=(), example_data=self._PGN_RESTART)
        if include_fen:
            observation["fen"] = NonTensor(shape=(), example_data="any")
        # the state spec lists what a reset may read (fen, pgn) and what a stateless step
        # reads, as TorchRL's (every observation but the mask and the pixels)
        self.full_state_spec = observation.clone()
        if pixels:
            observation["pixels"] = Unbounded(shape=(3, 390, 390), dtype=torch.uint8)
        if mask_actions:
            observation["action_mask"] = Binary(n=n, dtype=torch.bool)
        self.full_observation_spec = observation
        self.full_action_spec = Composite(action=Categorical(n=n, shape=(), dtype=torch.int64))
        self.full_reward_spec = Composite(reward=Unbounded(shape=(1,), dtype=torch.float32))
        self.board = chess.Board()

    # ------------------------------------------------------------------ class attributes
    @_classproperty
    def lib(cls):
        """The ``chess`` module (python-chess), imported on first use."""
        if importlib.util.find_spec("chess") is None:
            raise ImportError(f"ChessEnv needs python-chess: {_INSTALL}")
        import chess
        import chess.pgn

        return chess

    @_classproperty
    def san_moves(cls) -> tuple[str, ...]:
        """The SAN string of each action index: 29,275 strings in TorchRL's order, the
        last one empty (it names no move). Built once per process from the SAN rules."""
        return san_moves()

    @staticmethod
    def _check_pixels_backend() -> None:
        missing = [m for m in ("cairosvg", "PIL") if importlib.util.find_spec(m) is None]
        if missing:
            names = ", ".join("Pillow" if m == "PIL" else m for m in missing)
            raise ImportError(
                f"ChessEnv(pixels=True) draws the board with cairosvg and Pillow; missing: "
                f"{names}. Install them with {_INSTALL_PIXELS}"
            )
        try:
            importlib.import_module("cairosvg")
        except OSError as err:  # cairocffi found no cairo shared library
            raise ImportError(
                "ChessEnv(pixels=True) needs the cairo library that cairosvg loads "
                f"(libcairo2 on Debian/Ubuntu, cairo on conda/Homebrew): {err}"
            ) from err

    # ------------------------------------------------------------------ board helpers
    def _board_from(self, tensordict: TensorDictBase):
        """The board of a stateless step: set from the input's ``"fen"`` (else ``"pgn"``)."""
        key = "fen" if self.include_fen else "pgn"
        value = _string(tensordict, key)
        if value is None:
            raise KeyError(
                f"ChessEnv(stateful=False) reads the board from {key!r}, but the input has "
                f"keys {sorted(map(str, tensordict.keys(True)))}"
            )
        if key == "fen":
            self.board.set_fen(value)
            return self.board
        return self._pgn_to_board(value, self.board)

    def _legal_moves_to_index(
        self,
        tensordict: TensorDictBase | None = None,
        board: Any = None,
        return_mask: bool = False,
        pad: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """The action indices of the legal moves (in python-chess's order).

        Args:
            tensordict: for a stateless env, the data holding the position (ignored when
                ``board`` is given).
            board: the position (default: the env's board, or the one in ``tensordict``).
            return_mask: also return the ``(29275,)`` boolean mask of the legal moves.
            pad: pad the indices to 218 entries with 29,275 (``"legal_moves"``).
        """
        if board is None:
            if not self.stateful and tensordict is not None:
                board = self._board_from(tensordict)
            else:
                board = self.board
        index = _san_index()
        indices = torch.tensor([index[board.san(m)] for m in board.legal_moves], dtype=torch.long)
        mask = self._move_index_to_mask(indices) if return_mask else None
        if pad:
            padded = torch.full((_MAX_LEGAL_MOVES,), len(self.san_moves), dtype=torch.long)
            padded[: indices.numel()] = indices
            indices = padded
        return (indices, mask) if return_mask else indices

    @classmethod
    def _move_index_to_mask(cls, indices: torch.Tensor) -> torch.Tensor:
        mask = torch.zeros(len(cls.san_moves), dtype=torch.bool)
        mask[indices] = True
        return mask

    def _is_done(self, board) -> bool:
        return board.is_game_over() or board.is_fifty_moves()

    def _observe(self, board, dest: TensorDictBase) -> None:
        """Writes the position's legal moves, mask and image into ``dest``."""
        if self.include_legal_moves or self.mask_actions:
            indices, mask = self._legal_moves_to_index(
                board=board, return_mask=self.mask_actions, pad=True
            )
            if self.mask_actions:
                dest.set("action_mask", mask)
            if self.include_legal_moves:
                dest.set("legal_moves", indices)
        if self.pixels:
            dest.set("pixels", self._get_tensor_image(board))

    # ------------------------------------------------------------------ env hooks
    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        fen = pgn = None
        # a user's reset may set the position; a rollout's (a "_reset" mask) starts anew
        if tensordict is not None and "_reset" not in tensordict.keys():
            if self.include_fen:
                fen = _string(tensordict, "fen")
            elif self.include_pgn:
                pgn = _string(tensordict, "pgn")
        if fen is not None:
            self.board.set_fen(fen)
            if self._is_done(self.board):
                raise ValueError(f"Cannot reset to a fen that is a gameover state. fen: {fen}")
        elif pgn is not None:
            self.board = self._pgn_to_board(pgn)
            if self._is_done(self.board):
                raise ValueError(f"Cannot reset to a pgn that is a gameover state. pgn: {pgn}")
        else:
            self.board.reset()
        board = self.board
        dest = TensorDict(batch_size=self.batch_size)
        if self.include_san:
            san = "<start>"
            if board.move_stack:  # the last move's SAN, read in the position before it
                move = board.pop()
                san = board.san(move)
                board.push(move)
            dest.set("san", san)
        if self.include_fen:
            dest.set("fen", board.fen() if fen is None else fen)
        if self.include_pgn:
            dest.set("pgn", self._board_to_pgn(board) if pgn is None else pgn)
        dest.set("turn", torch.tensor(board.turn))
        self._observe(board, dest)
        return dest

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        board = self.board if self.stateful else self._board_from(tensordict)
        action = int(tensordict.get("action"))
        moves = self.san_moves
        if not 0 <= action < len(moves):
            raise ValueError(f"action {action} is outside [0, {len(moves)})")
        try:
            move = board.parse_san(moves[action])
        except ValueError as err:
            raise ValueError(
                f"action {action} ({moves[action]!r}) is not a legal move in {board.fen()!r}: {err}"
            ) from err
        san = board.san(move)
        board.push(move)

        dest = TensorDict(batch_size=self.batch_size)
        if self.include_fen:
            dest.set("fen", board.fen())
        if self.include_pgn:
            pgn = None if self.stateful else _string(tensordict, "pgn")
            if pgn is not None:
                pgn = self._add_move_to_pgn(pgn, move)
            else:
                pgn = self._board_to_pgn(board)
            dest.set("pgn", pgn)
        if self.include_san:
            dest.set("san", san)
        self._observe(board, dest)
        done = self._is_done(board)
        reward = 1.0 if board.is_checkmate() else (0.5 if done else 0.0)
        dest.set("reward", torch.tensor([reward], dtype=torch.float32))
        dest.set("turn", torch.tensor(board.turn))
        dest.set("done", torch.tensor([done]))
        dest.set("terminated", torch.tensor([done]))
        return dest

    def _set_seed(self, seed: int | None) -> None:
        """Chess has no randomness: nothing to seed."""

    # ------------------------------------------------------------------ public helpers
    def all_actions(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """The legal moves of the position, as a batch of actions.

        Args:
            tensordict: if given, the env is first reset to the position it holds
                (``"fen"``/``"pgn"``), as TorchRL's.

        Returns:
            a TensorDict of batch size ``[k]`` whose ``"action"`` holds the ``k`` legal
            moves' indices, in increasing order.

        Raises:
            RuntimeError: the env was built with ``mask_actions=False``.
        """
        if not self.mask_actions:
            raise RuntimeError(
                "Cannot generate legal actions since 'mask_actions=False' was set. If you "
                "really want to generate all actions, not just legal ones, call "
                "'env.full_action_spec.enumerate()'."
            )
        if tensordict is not None:
            self.reset(tensordict)
        indices = self._legal_moves_to_index(board=self.board).sort().values
        return TensorDict({"action": indices}, batch_size=[indices.numel()])

    def cardinality(self, tensordict: TensorDictBase | None = None) -> int:
        """The number of legal moves in the position (of ``tensordict`` for a stateless
        env, else of :attr:`board`)."""
        board = self.board
        if not self.stateful and tensordict is not None:
            board = self._board_from(tensordict)
        return board.legal_moves.count()

    def get_legal_moves(self, tensordict: TensorDictBase | None = None, uci: bool = False):
        """The legal moves of the position, as strings.

        Args:
            tensordict: the data holding the position; required for a stateless env,
                ignored by a stateful one.
            uci: UCI strings (``"e2e4"``) instead of SAN (``"e4"``).

        Raises:
            ValueError: a stateless env and no ``tensordict``.
        """
        board = self.board
        if not self.stateful:
            if tensordict is None:
                raise ValueError(
                    "ChessEnv(stateful=False).get_legal_moves needs the tensordict that "
                    "holds the position"
                )
            board = self._board_from(tensordict)
        write = board.uci if uci else board.san
        return [write(move) for move in board.legal_moves]

    # ------------------------------------------------------------------ PGN and image
    @classmethod
    def _pgn_to_board(cls, pgn_string: str, board: Any = None):
        """The final position of a PGN game, with its moves (into ``board`` if given)."""
        game = cls.lib.pgn.read_game(io.StringIO(pgn_string))
        if game is None:
            raise ValueError(f"Invalid PGN string: {pgn_string!r}")
        start = game.board()
        if board is None:
            board = start
        else:
            board.set_fen(start.fen())
        for move in game.mainline_moves():
            board.push(move)
        return board

    @classmethod
    def _add_move_to_pgn(cls, pgn_string: str, move: Any) -> str:
        """The PGN with ``move`` appended to its main line."""
        game = cls.lib.pgn.read_game(io.StringIO(pgn_string))
        if game is None:
            raise ValueError(f"Invalid PGN string: {pgn_string!r}")
        game.end().add_variation(move)
        return str(game)

    @classmethod
    def _board_to_pgn(cls, board: Any) -> str:
        """The PGN of the game played on ``board`` (its move stack)."""
        return str(cls.lib.pgn.Game.from_board(board))

    @classmethod
    def _get_tensor_image(cls, board: Any) -> torch.Tensor:
        """python-chess's SVG drawing of ``board`` as a ``(3, 390, 390)`` ``uint8`` image."""
        import cairosvg
        import chess.svg
        from PIL import Image

        svg = chess.svg.board(board, size=390)  # as python-chess draws it in notebooks
        png = cairosvg.svg2png(bytestring=svg.encode("utf-8"))
        with Image.open(io.BytesIO(png)) as image:
            rgb = torch.frombuffer(bytearray(image.convert("RGB").tobytes()), dtype=torch.uint8)
            return rgb.reshape(image.height, image.width, 3).permute(2, 0, 1).contiguous()
