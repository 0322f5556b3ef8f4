"""Every string a chess move can be written as in SAN: the action space of ``ChessEnv``.

The list is built from the rules of Standard Algebraic Notation, not read from a file: a
piece letter (none for a pawn), the disambiguation of the moving piece (its file, its
rank or its square) where another piece of the same kind could reach the same square, an
``x`` for a capture, the target square, a promotion (``=Q``), then nothing, ``+`` (check)
or ``#`` (checkmate); plus both castlings. A disambiguation is listed only when some
position needs it, with the rule python-chess (and the PGN standard) applies: the file
when it tells the pieces apart, else the rank, else the whole square.

The strings are sorted by length, then by character code, and an empty string ends the
list (TorchRL reads its ``san_moves.txt`` with ``split("\\n")`` and keeps the empty
string after the last newline): action ``i`` names the same move as in TorchRL, and there
are 29,275 actions.
"""

from __future__ import annotations

import functools
import itertools

__all__ = ["san_moves"]

_FILES = "abcdefgh"
_RANKS = "12345678"
_PROMOTIONS = "BNQR"
_SUFFIXES = ("", "+", "#")

_DIAGONAL = ((1, 1), (1, -1), (-1, 1), (-1, -1))
_STRAIGHT = ((1, 0), (-1, 0), (0, 1), (0, -1))
_KNIGHT = ((1, 2), (2, 1), (-1, 2), (-2, 1), (1, -2), (2, -1), (-1, -2), (-2, -1))
# (directions, slides): a slider moves any number of squares along a direction
_PIECES = {
    "B": (_DIAGONAL, True),
    "K": (_DIAGONAL + _STRAIGHT, False),
    "N": (_KNIGHT, False),
    "Q": (_DIAGONAL + _STRAIGHT, True),
    "R": (_STRAIGHT, True),
}


def _square(file: int, rank: int) -> str:
    return _FILES[file] + _RANKS[rank]


def _sources(piece: str, file: int, rank: int) -> list[tuple[int, int, int]]:
    """The squares ``(file, rank, ray)`` from which ``piece`` reaches ``(file, rank)`` on an
    empty board. ``ray`` numbers the direction seen from the target: two pieces on the same
    ray cannot both reach it (the nearer one blocks the other)."""
    directions, slides = _PIECES[piece]
    out = []
    for ray, (df, dr) in enumerate(directions):
        f, r = file + df, rank + dr
        while 0 <= f < 8 and 0 <= r < 8:
            out.append((f, r, ray))
            if not slides:
                break
            f, r = f + df, r + dr
    return out


def _disambiguations(piece: str, file: int, rank: int) -> set[str]:
    """The prefixes (``""``, a file, a rank, a square) that a ``piece`` move to
    ``(file, rank)`` can carry in some position."""
    prefixes = {""}
    if piece == "K":  # one king a side: never ambiguous
        return prefixes
    sources = _sources(piece, file, rank)
    for f, r, ray in sources:
        # the other pieces of the same kind that can reach the target along with this one
        # (off its ray), by the rays they lie on
        on_file, on_rank, elsewhere = set(), set(), False
        for other_f, other_r, other_ray in sources:
            if other_ray == ray:
                continue
            if other_f == f:
                on_file.add(other_ray)
            else:
                elsewhere = True
            if other_r == r:
                on_rank.add(other_ray)
        if elsewhere:
            prefixes.add(_FILES[f])  # another piece off its file: the file tells them apart
        if on_file:
            prefixes.add(_RANKS[r])  # another piece on its file: the rank is needed
        # a piece on its file and another on its rank (on two rays: neither blocks the
        # other): only the square tells them apart
        if on_file and on_rank and len(on_file | on_rank) > 1:
            prefixes.add(_square(f, r))
    return prefixes


def _moves_without_suffix() -> set[str]:
    moves = {"O-O", "O-O-O"}
    for piece, (file, rank) in itertools.product(_PIECES, itertools.product(range(8), range(8))):
        target = _square(file, rank)
        for prefix in _disambiguations(piece, file, rank):
            moves.add(piece + prefix + target)
            moves.add(piece + prefix + "x" + target)
    for file in range(8):
        pushes = [_square(file, rank) for rank in range(1, 7)]
        promotions = [_square(file, rank) + "=" for rank in (0, 7)]
        for other in (file - 1, file + 1):
            if 0 <= other < 8:
                capture = _FILES[file] + "x"
                pushes += [capture + _square(other, rank) for rank in range(1, 7)]
                promotions += [capture + _square(other, rank) + "=" for rank in (0, 7)]
        moves.update(pushes)
        moves.update(p + piece for p in promotions for piece in _PROMOTIONS)
    return moves


@functools.cache
def san_moves() -> tuple[str, ...]:
    """The SAN strings of every chess move, in TorchRL's order (built once per process).

    Returns:
        29,275 strings: the 29,274 moves sorted by length then character code, and a
        final empty string that names no move.

    Examples:
        >>> moves = san_moves()
        >>> len(moves), moves[:3], moves[-2:]
        (29275, ('a2', 'a3', 'a4'), ('hxg8=R+', ''))
        >>> moves.index("Nf3"), moves.index("O-O-O"), moves.index("exd8=Q#")
        (218, 7983, 29174)
    """
    moves = [m + s for m in _moves_without_suffix() for s in _SUFFIXES]
    moves.sort()
    moves.sort(key=len)  # stable: by length, then by character code
    return (*moves, "")
