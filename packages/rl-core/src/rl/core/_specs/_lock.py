"""Locking of the specs with entries (:class:`Composite`, :class:`StackedComposite`).

A locked spec refuses changes to its entries and shape (``RuntimeError``), as a locked
TensorDict does. ``lock_(recurse=True)`` (the default) locks nested Composites too and
records the locking parent in each of them, so a nested spec cannot be unlocked while a
parent that locked it still is; ``unlock_()`` on that parent unlocks the whole graph.
Copies (``clone``, indexing, ``expand``, ...) are never locked.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

__all__ = ["_Lockable"]


class _Lockable:
    """Mixin giving ``lock_``/``unlock_``/``is_locked``/``locked`` to specs with entries."""

    _locked: bool = False
    _lock_parents: tuple | list = ()

    def _lock_children(self) -> Iterator[_Lockable]:
        """The nested lockable specs a recursive lock reaches."""
        raise NotImplementedError(f"{type(self).__name__} must define _lock_children()")

    @property
    def is_locked(self) -> bool:
        """Whether the spec is locked (settable: ``spec.is_locked = True`` locks it)."""
        return self._locked

    @is_locked.setter
    def is_locked(self, value: bool) -> None:
        if value:
            self.lock_()
        else:
            self.unlock_()

    @property
    def locked(self) -> bool:
        """Alias of :attr:`is_locked` (read-only)."""
        return self._locked

    def lock_(self, recurse: bool | None = None) -> Any:
        """Locks the spec: setting or deleting entries and setting ``shape`` raise ``RuntimeError``.

        Args:
            recurse: also lock the nested Composites (default ``True``, as TorchRL), also
                when the spec itself is already locked.

        Returns:
            The spec itself.

        Examples:
            >>> from rl.core import Composite, Unbounded
            >>> spec = Composite(obs=Unbounded(shape=(3,)), nested=Composite())
            >>> spec.lock_().is_locked, spec["nested"].is_locked
            (True, True)
            >>> try:
            ...     spec["reward"] = Unbounded(shape=(1,))
            ... except RuntimeError as err:
            ...     print(err)
            Cannot modify a locked Composite (key 'reward'): call unlock_() first
            >>> spec.unlock_().is_locked
            False
        """
        recurse = True if recurse is None else recurse
        if self._locked and not recurse:
            return self
        # Locking again with recurse reaches nested specs a non-recursive lock left open
        # (the behaviour TorchRL's lock_ documents).
        self._propagate_lock(recurse, None)
        return self

    def _propagate_lock(self, recurse: bool, parents: list | None) -> None:
        self._locked = True
        if parents is None:
            chain: list = []
        else:
            known = list(self._lock_parents)
            self._lock_parents = known + [p for p in parents if all(p is not k for k in known)]
            chain = list(parents)
        chain.append(weakref.ref(self))
        if recurse:
            for child in self._lock_children():
                child._propagate_lock(True, chain)

    def unlock_(self, recurse: bool | None = None) -> Any:
        """Unlocks the spec (and, with ``recurse``, the default, its nested Composites).

        Raises:
            RuntimeError: when a parent that locked this spec recursively is still locked;
                the spec stays locked.
        """
        recurse = True if recurse is None else recurse
        subs = self._propagate_unlock(recurse)
        try:
            for sub in subs:
                sub._check_unlock()
            self._check_unlock()
        except RuntimeError:
            self.lock_(recurse=recurse)
            raise
        return self

    def _propagate_unlock(self, recurse: bool) -> list:
        self._locked = False
        if not recurse:
            return []
        out: list = []
        for child in self._lock_children():
            out.extend(child._propagate_unlock(True))
            out.append(child)
        return out

    def _check_unlock(self) -> None:
        for ref in self._lock_parents:
            parent = ref()
            if parent is not None and parent._locked:
                raise RuntimeError(
                    f"Cannot unlock a {type(self).__name__} that a locked parent "
                    f"{type(parent).__name__} locked recursively: unlock the parent (the root "
                    "of the locked graph) first"
                )
        self._lock_parents = ()

    def _check_unlocked(self, what: str) -> None:
        if self._locked:
            raise RuntimeError(
                f"Cannot modify a locked {type(self).__name__} ({what}): call unlock_() first"
            )

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_lock_parents", None)  # weak references do not pickle; rebuilt on load
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self._locked:
            self._locked = False
            self.lock_()
