"""The containers an LLM policy reads and writes: ``Text``, ``Tokens``, ``Masks``,
``LogProbs`` and ``ChatHistory``, each with a ``prompt`` / ``response`` / ``full`` layout.

``full`` is the prompt followed by the response; ``padded`` says whether the tensors are a
padded batch (``True``) or a lazy stack of rows of their own length (``False``).
"""

from __future__ import annotations

import torch
from tensordict import TensorClass

from ._history import History

__all__ = ["ChatHistory", "LogProbs", "Masks", "Text", "Tokens"]


class Text(TensorClass["nocast"]):
    """Prompt, response and full text (strings).

    Examples:
        >>> from rl.data.llm import Text
        >>> Text(prompt="2+2=", response="4", full="2+2=4").full
        '2+2=4'
    """

    prompt: str | None = None
    response: str | None = None
    full: str | None = None


class Tokens(TensorClass["nocast"]):
    """Prompt, response and full token ids (``[*B, T]`` long tensors).

    Examples:
        >>> import torch
        >>> from rl.data.llm import Tokens
        >>> Tokens(full=torch.tensor([[1, 2, 3]]), padded=True, batch_size=(1,)).full.shape
        torch.Size([1, 3])
    """

    prompt: torch.Tensor | None = None
    response: torch.Tensor | None = None
    full: torch.Tensor | None = None
    padded: bool | None = None


class Masks(TensorClass["nocast"]):
    """Masks over the full sequence: ``all_attention_mask`` (real tokens) and
    ``all_assistant_mask`` (tokens the assistant wrote), both ``[*B, T]`` booleans.
    """

    all_attention_mask: torch.Tensor | None = None
    all_assistant_mask: torch.Tensor | None = None
    padded: bool | None = None


class LogProbs(TensorClass["nocast"]):
    """Per-token log-probabilities (``[*B, T]``) of the prompt, response and full sequence.

    ``full[..., t]`` is the log-probability of token ``t`` given tokens ``< t``; the first
    token of a sequence has no such probability and holds ``0``.
    """

    prompt: torch.Tensor | None = None
    response: torch.Tensor | None = None
    full: torch.Tensor | None = None
    padded: bool | None = None


class ChatHistory(TensorClass["nocast"]):
    """Prompt, response and full conversations (``History`` of shape ``[*B, N]``).

    ``full`` is ``prompt`` extended by ``response`` when both are given and ``full`` is not.

    Examples:
        >>> from rl.data.llm import ChatHistory, History
        >>> prompt = History.from_chats([[{"role": "user", "content": "hi"}]])
        >>> response = History.from_chats([[{"role": "assistant", "content": "yo"}]])
        >>> ChatHistory(prompt=prompt, response=response, batch_size=(1,)).full.shape
        torch.Size([1, 2])
    """

    prompt: History | None = None
    response: History | None = None
    full: History | None = None

    def __post_init__(self):
        if self.full is None and self.prompt is not None and self.response is not None:
            self.full = self.prompt.extend(self.response)
