"""Helpers shared by the simulator back-ends of :mod:`rl.envs.libs`."""

from __future__ import annotations

__all__ = ["ClassProperty"]


class ClassProperty:
    """A read-only property computed from the class (``Wrapper.available_envs``), read
    the same way from the class and from its instances."""

    def __init__(self, fget):
        self.fget = fget

    def __get__(self, instance, owner):
        return self.fget(owner)
