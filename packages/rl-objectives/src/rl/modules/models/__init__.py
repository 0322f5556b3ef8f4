"""rl.modules.models."""

__all__: list[str] = []
