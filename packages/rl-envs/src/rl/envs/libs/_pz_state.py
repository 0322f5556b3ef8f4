"""Reads a PettingZoo AEC env's state (``agent_selection``, ``rewards``, ...) without the
``__getattr__`` hop of every wrapper (3 us each) and with the same result.

``getattr(wrapper, name)`` on a PettingZoo wrapper is the wrapper's own instance attribute
when it has one, else ``getattr(wrapper.env, name)`` (``BaseWrapper.__getattr__``). For a
wrapper class where this provably holds for the state names (no class in its MRO defines
one of them or ``env``, no ``__getattribute__`` override, ``__getattr__`` is PettingZoo's
forwarding one), :class:`AECState` keeps the wrapper's instance ``__dict__`` and checks it
on every read: a wrapper that assigns ``self.rewards`` in ``step()`` (PettingZoo's own
``TerminateIllegalWrapper`` did) is read as plain attribute access reads it. The first
wrapper of any other kind (a property, its own ``__getattr__``) ends the walk and is read
with ``getattr``.
"""

from __future__ import annotations

from functools import cache
from typing import Any

__all__ = ["AECState"]

STATE_NAMES = ("agent_selection", "rewards", "terminations", "truncations", "infos", "agents")


@cache
def _forwards(cls: type) -> bool:
    """Whether ``getattr(obj, name)`` for a state name is ``obj.__dict__[name]`` or else
    ``getattr(obj.env, name)``, for every instance ``obj`` of ``cls``."""
    from pettingzoo.utils.wrappers import BaseWrapper, OrderEnforcingWrapper

    if not issubclass(cls, BaseWrapper) or cls.__getattribute__ is not object.__getattribute__:
        return False
    # OrderEnforcingWrapper's only raises before the first reset, then forwards
    if cls.__getattr__ not in (BaseWrapper.__getattr__, OrderEnforcingWrapper.__getattr__):
        return False
    names = (*STATE_NAMES, "env")
    return not any(name in klass.__dict__ for klass in cls.__mro__ for name in names)


class AECState:
    """``getattr(env, name)`` for the state names of an AEC env, read past the forwarding
    wrappers (rebuild it when the wrapper chain changes: the env wrapper does at reset).

    Args:
        env: the (wrapped) PettingZoo ``AECEnv``, after its reset.
    """

    __slots__ = ("_dicts", "holder")

    def __init__(self, env: Any) -> None:
        dicts = []
        obj = env
        while _forwards(type(obj)) and "env" in obj.__dict__:
            dicts.append(obj.__dict__)
            obj = obj.__dict__["env"]
        self._dicts = tuple(dicts)
        #: the first env down the chain read with ``getattr`` (the raw env, or a wrapper
        #: that does not only forward)
        self.holder = obj

    def get(self, name: str) -> Any:
        """The value ``getattr(env, name)`` returns."""
        for attrs in self._dicts:
            if name in attrs:
                return attrs[name]
        return getattr(self.holder, name)
