"""Dimension names of a :class:`Composite` (TorchRL's ``names`` / ``refine_names``).

Names label the batch dims of a Composite as a TensorDict's ``names`` do; the TensorDicts
``rand``/``zero``/``one`` build carry them. Setting names also names the leading dims of
nested Composites (their extra dims get ``None``). Copies keep them; ``expand`` and
``unsqueeze`` add unnamed dims; indexing with ints and ``squeeze`` drop the named dims they
remove; other indexing and ``reshape`` clear them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["_Named"]


class _Named:
    """Mixin giving ``names``/``refine_names`` to :class:`Composite`."""

    _names: list | None = None

    def _has_names(self) -> bool:
        """Whether some batch dim is named (TorchRL's name)."""
        return self._names is not None

    def _erase_names(self) -> None:
        """Forgets the names of this spec's batch dims (TorchRL's name; ``names = None``)."""
        self._names = None

    @property
    def names(self) -> list[str | None]:
        """The names of the batch dims (``None`` for an unnamed dim)."""
        if not self._has_names():
            return [None] * len(self.shape)  # type: ignore[attr-defined]
        return list(self._names)

    @names.setter
    def names(self, value: Sequence[str | None] | None) -> None:
        if value is None:
            self._erase_names()
            return
        value = list(value)
        ndim = len(self.shape)  # type: ignore[attr-defined]
        if len(value) != ndim:
            raise ValueError(
                f"Composite of shape {tuple(self.shape)} takes {ndim} names, got "  # type: ignore[attr-defined]
                f"{len(value)}: {value}"
            )
        self._names = value if any(n is not None for n in value) else None
        for spec in self._specs.values():  # type: ignore[attr-defined]
            if getattr(spec, "_is_composite", False) and spec.ndim >= ndim:
                spec.names = value + [None] * (spec.ndim - ndim)

    def refine_names(self, *names: str | None) -> Any:
        """Names unnamed dims (``...`` stands for the dims left as they are); returns the spec.

        Raises:
            RuntimeError: if a dim already has another name.

        Examples:
            >>> from rl.core import Composite
            >>> spec = Composite({}, shape=[3, 4, 5, 6])
            >>> spec.refine_names(None, None, None, "d").names
            [None, None, None, 'd']
            >>> spec.refine_names("a", ..., "d").names
            ['a', None, None, 'd']
        """
        current = self.names
        if any(n is Ellipsis for n in names):
            pos = names.index(Ellipsis)
            fill = len(current) - len(names) + 1
            names = (*names[:pos], *current[pos : pos + fill], *names[pos + 1 :])
        if len(names) != len(current):
            raise RuntimeError(
                f"refine_names: {len(current)} names expected for shape "
                f"{tuple(self.shape)}, got {list(names)}"  # type: ignore[attr-defined]
            )
        for have, want in zip(current, names):
            if have is not None and have != want:
                raise RuntimeError(
                    f"refine_names: cannot rename dims named {current} to {list(names)}"
                )
        self.names = list(names)
        return self

    def _names_after_index(self, idx: tuple) -> list | None:
        """The names left by an int/slice index (``None`` for any other index)."""
        if not self._has_names() or not all(isinstance(i, int | slice) for i in idx):
            return None
        return [n for n, i in zip(self._names, idx) if not isinstance(i, int)] + self._names[
            len(idx) :
        ]
