"""Global switches of ``torchrl.envs``: the gym backend and nested TransformedEnv unwrapping.

``rl.envs`` wraps the gymnasium API only, so ``set_gym_backend`` accepts gymnasium (by
name or module) and says so for anything else; it exists so that code written for
TorchRL (``with set_gym_backend("gymnasium"): ...``) carries over.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from types import ModuleType

__all__ = [
    "auto_unwrap_transformed_env",
    "gym_backend",
    "set_auto_unwrap_transformed_env",
    "set_gym_backend",
]

_SUPPORTED_GYM = ("gymnasium",)
_GYM_BACKEND: list[ModuleType] = []  # stack of backends set by set_gym_backend


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


class set_gym_backend(contextlib.ContextDecorator):  # noqa: N801 (TorchRL's name)
    """Selects the gym library used by ``GymEnv`` (a context manager, decorator or ``.set()``).

    Args:
        backend: ``"gymnasium"`` or the ``gymnasium`` module. Other gym libraries
            (``"gym"``, ``"gym_super_mario_bros"``...) raise: ``rl.envs`` wraps the gymnasium
            API only.

    Raises:
        ValueError: the backend is not gymnasium.
        ImportError: the backend cannot be imported.

    Examples:
        >>> from rl.envs import gym_backend, set_gym_backend
        >>> with set_gym_backend("gymnasium"):
        ...     gym_backend().__name__
        'gymnasium'
        >>> gym_backend("spaces").__name__
        'gymnasium.spaces'
    """

    def __init__(self, backend: str | ModuleType) -> None:
        name = backend if isinstance(backend, str) else getattr(backend, "__name__", repr(backend))
        if name.split(".")[0] not in _SUPPORTED_GYM:
            raise ValueError(
                f"set_gym_backend got {name!r}: rl.envs wraps the gymnasium API only "
                f"(supported backends: {list(_SUPPORTED_GYM)})"
            )
        self.backend = importlib.import_module(name) if isinstance(backend, str) else backend
        self._pushed = 0

    def set(self) -> None:
        """Sets the backend for the rest of the program (no context)."""
        _GYM_BACKEND.append(self.backend)

    def __enter__(self) -> None:
        _GYM_BACKEND.append(self.backend)
        self._pushed += 1

    def __exit__(self, *exc) -> None:
        if self._pushed:
            self._pushed -= 1
            _GYM_BACKEND.pop()


def gym_backend(submodule: str | None = None) -> ModuleType:
    """The gym library in use (gymnasium), or one of its submodules.

    Args:
        submodule: e.g. ``"spaces"`` or ``"wrappers"``; ``None`` returns the library.

    Examples:
        >>> from rl.envs import gym_backend
        >>> gym_backend().__name__
        'gymnasium'
    """
    module = _GYM_BACKEND[-1] if _GYM_BACKEND else importlib.import_module("gymnasium")
    if submodule is None:
        return module
    return importlib.import_module(f"{module.__name__}.{submodule}")


_AUTO_UNWRAP: list[bool] = []


class set_auto_unwrap_transformed_env(contextlib.ContextDecorator):  # noqa: N801
    """Whether ``TransformedEnv(TransformedEnv(env, t1), t2)`` flattens to one list.

    When ``True``, the outer env takes the inner env's base env and (clones of) the
    transforms ``[t1, t2]``; when ``False`` it keeps the inner ``TransformedEnv`` as its
    base env. The two behave the same. A context manager, a decorator, or ``.set()`` for
    the whole program; the ``AUTO_UNWRAP_TRANSFORMED_ENV`` environment variable sets the
    default. Unlike TorchRL (which unwraps by default, with a warning), nesting is kept
    when nothing is set: the nested structure is what the user built.

    Args:
        mode: unwrap nested transformed envs.

    Examples:
        >>> from rl.envs import PendulumEnv, StepCounter, TransformedEnv
        >>> from rl.envs import set_auto_unwrap_transformed_env
        >>> inner = TransformedEnv(PendulumEnv(), StepCounter())
        >>> with set_auto_unwrap_transformed_env(True):
        ...     env = TransformedEnv(inner, StepCounter(step_count_key="c"))
        >>> type(env.base_env).__name__, len(env.transform)
        ('PendulumEnv', 2)
        >>> type(TransformedEnv(inner, StepCounter(step_count_key="c")).base_env).__name__
        'TransformedEnv'
    """

    def __init__(self, mode: bool) -> None:
        self.mode = bool(mode)
        self._pushed = 0

    def set(self) -> None:
        """Sets the mode for the rest of the program (no context)."""
        _AUTO_UNWRAP.append(self.mode)
        os.environ["AUTO_UNWRAP_TRANSFORMED_ENV"] = str(self.mode)

    def __enter__(self) -> None:
        _AUTO_UNWRAP.append(self.mode)
        self._pushed += 1

    def __exit__(self, *exc) -> None:
        if self._pushed:
            self._pushed -= 1
            _AUTO_UNWRAP.pop()


def auto_unwrap_transformed_env(allow_none: bool = False) -> bool | None:
    """The current :class:`set_auto_unwrap_transformed_env` mode.

    Args:
        allow_none: return ``None`` when nothing set it (else the default, ``False``).
    """
    if _AUTO_UNWRAP:
        return _AUTO_UNWRAP[-1]
    value = os.environ.get("AUTO_UNWRAP_TRANSFORMED_ENV")
    if value is not None:
        return _truthy(value)
    return None if allow_none else False
