"""TinyVLA: a small, dependency-free Vision-Language-Action policy."""

from __future__ import annotations

import hashlib

import torch
from tensordict import TensorDictBase
from tensordict.nn import InteractionType
from torch import nn

from rl.core.vla import ActionTokenizerBase

from ..models import MLP, ConvNet
from ._base import ActionHead, InputMode, LogProbsMode, OutputMode, SamplingMode, VLAWrapperBase

__all__ = ["TinyVLA"]


class TinyVLA(VLAWrapperBase):
    """A tiny reference VLA policy to run VLA pipelines end to end on a CPU.

    A convolutional image encoder, an optional MLP on the proprioceptive state and an
    embedding of the instruction feed a fused MLP trunk and a linear head (a
    continuous action chunk, or per-token logits for the ``"tokens"`` head; see
    :class:`~rl.modules.VLAWrapperBase`). The instruction string is hashed (SHA-1) to
    a row of the embedding table, so the policy is language-conditioned without a
    tokenizer. It exercises data pipelines, losses and collectors; it is not a
    competitive policy. Inputs have one leading batch dim (``image`` is
    ``[B, C, H, W]``; ``uint8`` images are scaled to ``[0, 1]``).

    Keyword Args:
        action_dim (int): the size of one action.
        chunk_size (int): the number of actions predicted at once.
        action_head (str): ``"continuous"`` or ``"tokens"``. Defaults to
            ``"continuous"``.
        vocab_size (int): bins per action dim for the token head. Defaults to ``256``.
        use_state (bool): read the proprioceptive state. Defaults to ``True``.
        hidden_dim (int): the trunk width. Defaults to ``128``.
        text_vocab (int): rows of the hashed instruction embedding. Defaults to ``256``.
        text_dim (int): the instruction embedding size. Defaults to ``32``.
        default_interaction_type, log_probs_mode, mode, input_mode, output_mode,
            return_vla_action_container, action_tokenizer, return_log_probs,
            return_logits, logits_only, inplace, num_samples: as in
            :class:`~rl.modules.VLAWrapperBase`.
        device (torch.device, optional): where the parameters are moved.

    Examples:
        >>> import torch
        >>> from tensordict import NonTensorStack, TensorDict
        >>> from rl.modules import TinyVLA
        >>> policy = TinyVLA(action_dim=3, chunk_size=2, action_head="tokens", vocab_size=16)
        >>> td = TensorDict(
        ...     {
        ...         "observation": {"image": torch.zeros(2, 3, 16, 16), "state": torch.zeros(2, 5)},
        ...         "language_instruction": NonTensorStack("pick", "place"),
        ...     },
        ...     batch_size=[2],
        ... )
        >>> out = policy(td)
        >>> out["vla_action", "tokens"].shape, out["vla_action", "log_probs"].shape
        (torch.Size([2, 2, 3]), torch.Size([2]))
    """

    def __init__(
        self,
        *,
        action_dim: int,
        chunk_size: int,
        action_head: ActionHead = "continuous",
        vocab_size: int = 256,
        use_state: bool = True,
        hidden_dim: int = 128,
        text_vocab: int = 256,
        text_dim: int = 32,
        default_interaction_type: InteractionType = InteractionType.DETERMINISTIC,
        log_probs_mode: LogProbsMode = "sequence",
        mode: SamplingMode | None = None,
        device: torch.device | str | None = None,
        input_mode: InputMode = "canonical",
        output_mode: OutputMode | None = None,
        return_vla_action_container: bool = True,
        action_tokenizer: ActionTokenizerBase | None = None,
        return_log_probs: bool | None = None,
        return_logits: bool = False,
        logits_only: bool = False,
        inplace: bool | str | None = True,
        num_samples: int | None = None,
    ) -> None:
        super().__init__(
            action_dim=action_dim,
            chunk_size=chunk_size,
            action_head=action_head,
            vocab_size=vocab_size,
            use_state=use_state,
            input_mode=input_mode,
            output_mode=output_mode,
            return_vla_action_container=return_vla_action_container,
            action_tokenizer=action_tokenizer,
            default_interaction_type=default_interaction_type,
            log_probs_mode=log_probs_mode,
            return_log_probs=return_log_probs,
            return_logits=return_logits,
            logits_only=logits_only,
            inplace=inplace,
            num_samples=num_samples,
            mode=mode,
            device=device,
        )
        self.hidden_dim = int(hidden_dim)
        self.text_vocab = int(text_vocab)
        self.image_encoder = nn.Sequential(
            ConvNet(num_cells=[16, 32], kernel_sizes=3, strides=2, paddings=1),
            nn.LazyLinear(hidden_dim),
            nn.ReLU(),
        )
        self.state_encoder = (
            MLP(out_features=hidden_dim, num_cells=[hidden_dim]) if use_state else None
        )
        self.text_embedding = nn.Embedding(text_vocab, text_dim)
        self.trunk = MLP(out_features=hidden_dim, num_cells=[hidden_dim])
        head_size = chunk_size * action_dim * (vocab_size if action_head == "tokens" else 1)
        self.head = nn.LazyLinear(head_size)
        if device is not None:
            self.to(device)

    def _instruction_rows(
        self, tensordict: TensorDictBase, batch: int, device: torch.device
    ) -> torch.Tensor:
        """One embedding row per batch element, from the instruction strings."""
        instruction = self._get_instruction(tensordict)
        data = instruction.tolist() if hasattr(instruction, "tolist") else instruction
        strings = [data] if isinstance(data, str) else list(_flatten(data))
        if len(strings) == 1 and batch != 1:
            strings = strings * batch
        rows = [
            int(hashlib.sha1(s.encode("utf-8")).hexdigest(), 16) % self.text_vocab for s in strings
        ]
        return torch.tensor(rows, dtype=torch.long, device=device)

    def _predict(self, tensordict: TensorDictBase) -> torch.Tensor:
        image = self._get_image(tensordict)
        image = image.float() / 255.0 if image.dtype == torch.uint8 else image.float()
        batch_shape = image.shape[:-3]
        batch = batch_shape.numel()
        features = [self.image_encoder(image.reshape(batch, *image.shape[-3:]))]
        if self.use_state:
            state = self._get_state(tensordict).float()
            features.append(self.state_encoder(state.reshape(batch, state.shape[-1])))
        features.append(
            self.text_embedding(self._instruction_rows(tensordict, batch, image.device))
        )
        fused = torch.cat([f.reshape(*batch_shape, -1) for f in features], dim=-1)
        return self.head(self.trunk(fused))


def _flatten(data):
    if isinstance(data, str):
        yield data
    elif isinstance(data, (list, tuple)):
        for item in data:
            yield from _flatten(item)
    else:
        yield str(data)
