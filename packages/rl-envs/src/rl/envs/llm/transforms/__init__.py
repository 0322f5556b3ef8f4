"""Transforms of the LLM environments."""

from ._dataloading import DataLoadingPrimer, as_nested_tensor, as_padded_tensor

__all__ = ["DataLoadingPrimer", "as_nested_tensor", "as_padded_tensor"]
