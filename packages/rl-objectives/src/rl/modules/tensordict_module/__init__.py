"""rl.modules.tensordict_module."""

__all__: list[str] = []
