"""The chat env under a transform, found without building the transform's ``parent``."""

from __future__ import annotations

from typing import Any

__all__ = ["base_env_of", "input_mode_of"]


def base_env_of(transform) -> Any | None:
    """The innermost env holding ``transform`` (``None`` outside an env).

    ``transform.parent`` clones the transforms before it; this walks the containers only.
    """
    env = transform._top_env()
    while env is not None and getattr(env, "base_env", None) is not None:
        env = env.base_env
    return env


def input_mode_of(transform, default: str = "history") -> str:
    """The ``input_mode`` of the chat env holding ``transform`` (``default`` without one)."""
    env = base_env_of(transform)
    return getattr(env, "input_mode", default) if env is not None else default
