"""``EnvCreator``: an environment factory that can be shipped to another process."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Mapping
from typing import Any

import cloudpickle

__all__ = ["EnvCreator"]


def _rebuild_creator(payload: bytes) -> EnvCreator:
    create_env_fn, create_env_kwargs = pickle.loads(payload)
    return EnvCreator(create_env_fn, create_env_kwargs)


class EnvCreator:
    """Wraps an environment factory so that it can be sent to a worker process.

    The factory is serialized with ``cloudpickle``: importable functions and classes
    (and ``functools.partial`` of them) travel by reference, lambdas and local functions
    by value, so both work with the ``"spawn"`` start method. Whatever a lambda closes
    over must itself be picklable.

    Args:
        create_env_fn: a callable returning an :class:`~rl.envs.EnvBase` (an env class,
            a function, a ``functools.partial``, a lambda).
        create_env_kwargs: keyword arguments passed to ``create_env_fn`` at each call.

    Raises:
        TypeError: ``create_env_fn`` is not callable or ``create_env_kwargs`` not a mapping.

    Examples:
        >>> import pickle
        >>> from rl.envs import CartPoleEnv, EnvCreator
        >>> creator = EnvCreator(lambda: CartPoleEnv(max_episode_steps=100))
        >>> clone = pickle.loads(pickle.dumps(creator))
        >>> env = clone()
        >>> env.max_episode_steps
        100
    """

    def __init__(
        self,
        create_env_fn: Callable[..., Any],
        create_env_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        if isinstance(create_env_fn, EnvCreator):
            base_kwargs = dict(create_env_fn.create_env_kwargs)
            create_env_fn = create_env_fn.create_env_fn
        else:
            base_kwargs = {}
        if not callable(create_env_fn):
            raise TypeError(
                f"create_env_fn must be a callable returning an env, got {create_env_fn!r}"
            )
        if create_env_kwargs is not None and not isinstance(create_env_kwargs, Mapping):
            raise TypeError(
                f"create_env_kwargs must be a mapping of keyword arguments, got "
                f"{type(create_env_kwargs).__name__} {create_env_kwargs!r}"
            )
        base_kwargs.update(create_env_kwargs or {})
        self.create_env_fn = create_env_fn
        self.create_env_kwargs = base_kwargs

    def __call__(self, **kwargs: Any) -> Any:
        """Builds an environment (``kwargs`` override ``create_env_kwargs``)."""
        return self.create_env_fn(**{**self.create_env_kwargs, **kwargs})

    def dumps(self) -> bytes:
        """The pickled creator, raising a ``TypeError`` that names the factory on failure."""
        try:
            return pickle.dumps(self)
        except Exception as err:
            raise TypeError(
                f"cannot pickle the env factory {self.create_env_fn!r} to send it to a worker "
                f"process ({type(err).__name__}: {err}); pass an importable function, a "
                "functools.partial or a lambda whose captured variables can be pickled"
            ) from err

    def __reduce__(self):
        payload = cloudpickle.dumps((self.create_env_fn, self.create_env_kwargs))
        return _rebuild_creator, (payload,)

    def __repr__(self) -> str:
        return f"EnvCreator({self.create_env_fn!r}, create_env_kwargs={self.create_env_kwargs})"
