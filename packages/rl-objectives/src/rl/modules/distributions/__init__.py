"""rl.modules.distributions."""

__all__: list[str] = []
