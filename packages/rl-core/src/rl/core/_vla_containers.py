"""Typed containers for Vision-Language-Action data (TorchRL's ``torchrl.data.vla``).

A VLA policy reads camera images, an optional proprioceptive state and a language
instruction, and writes either a continuous action chunk or discrete action tokens.
These tensorclasses give those groups named fields while staying ordinary nested
TensorDict entries: ``td["vla_action"].chunk`` and ``td["vla_action", "chunk"]`` are
the same tensor.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.tensorclass import TensorClass

__all__ = ["VLAAction", "VLAImages", "VLAObservation"]


class VLAImages(TensorClass["nocast"]):
    """The camera observations of a VLA step.

    Args:
        image: the primary camera, ``[*B, C, H, W]``.
        wrist_image: an optional wrist camera, ``[*B, C, H, W]``.
        extra: further cameras or image features.
        padded: whether the images were padded to a common size.

    Examples:
        >>> import torch
        >>> from rl.core.vla import VLAImages
        >>> VLAImages(image=torch.zeros(2, 3, 16, 16), batch_size=[2]).image.shape
        torch.Size([2, 3, 16, 16])
    """

    image: torch.Tensor | None = None
    wrist_image: torch.Tensor | None = None
    extra: TensorDictBase | None = None
    padded: bool | None = None


class VLAObservation(TensorClass["nocast"]):
    """The inputs of a VLA policy, raw or already preprocessed for a model.

    Args:
        images: the camera observations (:class:`VLAImages`).
        state: the proprioceptive state, ``[*B, S]``.
        instruction: the language instruction (strings or token ids).
        preprocessed: model-ready inputs; a policy reading preprocessed
            observations uses this group first when it is set.

    Examples:
        >>> import torch
        >>> from rl.core.vla import VLAImages, VLAObservation
        >>> obs = VLAObservation(
        ...     images=VLAImages(image=torch.zeros(2, 3, 8, 8), batch_size=[2]),
        ...     state=torch.zeros(2, 5),
        ...     batch_size=[2],
        ... )
        >>> obs.state.shape
        torch.Size([2, 5])
    """

    images: VLAImages | None = None
    state: torch.Tensor | None = None
    instruction: object | None = None
    preprocessed: TensorDictBase | None = None


class VLAAction(TensorClass["nocast", "shadow"]):
    """The outputs of a VLA policy.

    Args:
        chunk: the continuous action chunk, ``[*B, H, A]``.
        tokens: the action tokens (bin ids), ``[*B, H, A]``.
        raw_tokens: the model's own token ids where they differ from ``tokens``.
        logits: the token logits, ``[*B, H, A, V]``.
        log_probs: the log-probability of the chosen tokens, ``[*B]`` (summed over
            the chunk) or ``[*B, H, A]`` (per token).
        mask: which tokens or actions are valid.
        padded: whether variable-length outputs were padded.

    Examples:
        >>> import torch
        >>> from rl.core.vla import VLAAction
        >>> VLAAction(chunk=torch.zeros(2, 4, 7), batch_size=[2]).chunk.shape
        torch.Size([2, 4, 7])
    """

    chunk: torch.Tensor | None = None
    tokens: torch.Tensor | None = None
    raw_tokens: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    log_probs: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    padded: bool | None = None


# ``chunk`` is also a TensorDict method: "shadow" lets the field exist, and this
# property makes ``action.chunk`` read the stored tensor rather than the method.
def _get_chunk(self: VLAAction) -> torch.Tensor | None:
    return self._tensordict.get("chunk", None)


def _set_chunk(self: VLAAction, value: torch.Tensor | None) -> None:
    self._tensordict.set("chunk", value)


VLAAction.chunk = property(_get_chunk, _set_chunk)
