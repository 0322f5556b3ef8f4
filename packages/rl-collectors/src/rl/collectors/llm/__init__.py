"""LLM collection: ``LLMCollector`` runs an LLM policy in a chat environment."""

from ._collector import LLMCollector

__all__ = ["LLMCollector"]
