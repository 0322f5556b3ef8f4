"""LLM collection: ``LLMCollector`` runs an LLM policy in a chat environment;
``RayLLMCollector`` runs one in a Ray actor (``rl-collectors[ray]``)."""

from ._collector import LLMCollector
from ._ray import RayLLMCollector

__all__ = ["LLMCollector", "RayLLMCollector"]
