"""rl.objectives.value: value estimators (modules) and their functional core."""

__all__: list[str] = []
