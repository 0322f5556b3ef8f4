"""Pure tensor functions of the value estimators."""

__all__: list[str] = []
