"""Helpers shared by the simulator back-ends of :mod:`rl.envs.libs`."""

from __future__ import annotations

__all__ = ["ClassProperty", "ForwardsEnvAttributes"]


class ClassProperty:
    """A read-only property computed from the class (``Wrapper.available_envs``), read
    the same way from the class and from its instances."""

    def __init__(self, fget):
        self.fget = fget

    def __get__(self, instance, owner):
        return self.fget(owner)


class ForwardsEnvAttributes:
    """Mixin of a wrapper: an attribute it lacks is read from the wrapped env
    (``self._env``), as TorchRL's wrappers do (``wrapper.scenario`` of a VMAS env)."""

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            env = self.__dict__.get("_env")
            if env is None or name.startswith("__"):
                raise
            return getattr(env, name)
