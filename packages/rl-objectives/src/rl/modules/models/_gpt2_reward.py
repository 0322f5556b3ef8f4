"""``GPT2RewardModel``: a GPT-2 whose language-model head is replaced by a scalar reward.

Reward models of RLHF (`Ouyang et al. 2022 <https://arxiv.org/abs/2203.02155>`_) score a
token sequence; this one scores every position and reads the sequence's reward at its
last token before the padding. transformers comes with ``pip install "rl-objectives[llm]"``
and is imported when a model is built.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from rl.core.trainers import atomic_save

__all__ = ["GPT2RewardModel"]

_has_transformers = importlib.util.find_spec("transformers") is not None
#: GPT-2's end-of-text token, its padding token in TorchRL's data pipelines
_GPT2_EOS = 50256
_CHECKPOINT = "reward_model.pt"


def _first_pad(input_ids: torch.Tensor, pad_token_id: int) -> torch.Tensor:
    """``[B, T] -> [B]``: the index of each row's first padding token (T if none)."""
    is_pad = input_ids == pad_token_id
    first = is_pad.int().argmax(-1)
    return torch.where(is_pad.any(-1), first, torch.full_like(first, input_ids.shape[-1]))


class GPT2RewardModel(nn.Module):
    """A GPT-2 transformer with a bias-free linear reward head.

    ``forward(input_ids, attention_mask)`` returns the reward at each position ``[B, T]``
    and each sequence's reward at its last token before the first padding token ``[B]``
    (the last position when there is no padding). :meth:`compute_reward_loss` compares a
    chosen and a rejected batch.

    Args:
        model_path: a path (or hub id) of a GPT-2 model to start from; ``None`` builds a
            randomly initialised GPT-2 of the default size.
        pad_token_id: the padding token. ``None`` takes the tokenizer's at ``model_path``
            (its padding, else end-of-text token), else the model config's. With
            ``model_path=None`` no tokenizer is looked up (TorchRL downloads GPT-2's,
            whose answer is the config's end-of-text token, 50256).

    Raises:
        ImportError: transformers is not installed.
        ValueError: no padding token can be inferred.

    Examples:
        >>> import torch, tempfile
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> path = tempfile.mkdtemp()
        >>> GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=11)).save_pretrained(path)
        >>> reward_model = GPT2RewardModel(path, pad_token_id=0)
        >>> rewards, end_scores = reward_model(torch.tensor([[3, 4, 0]]), torch.tensor([[1, 1, 0]]))
        >>> rewards.shape, end_scores.shape
        (torch.Size([1, 3]), torch.Size([1]))
        >>> bool(end_scores[0] == rewards[0, 1])
        True
    """

    def __init__(
        self, model_path: str | Path | None = None, pad_token_id: int | None = None
    ) -> None:
        if not _has_transformers:
            raise ImportError(
                'GPT2RewardModel needs transformers: pip install "rl-objectives[llm]" '
                "(or pip install transformers)"
            )
        from transformers import GPT2LMHeadModel  # noqa: PLC0415 (optional back-end)

        super().__init__()
        if model_path is not None:
            model = GPT2LMHeadModel.from_pretrained(model_path, return_dict=False)
        else:
            model = GPT2LMHeadModel(GPT2LMHeadModel.config_class())
        self._take(model, self._get_pad_token_id(model, model_path, pad_token_id))

    def _take(self, model: nn.Module, pad_id: int) -> None:
        self.config = model.config
        self.transformer = model.transformer
        self.lm_head = nn.Linear(self.config.n_embd, 1, bias=False)
        self.pad_id = pad_id

    @staticmethod
    def _get_pad_token_id(
        model: Any, model_path: str | Path | None, pad_token_id: int | None
    ) -> int:
        if pad_token_id is not None:
            return pad_token_id
        if model_path is not None:
            tokenizer = None
            try:
                from transformers import AutoTokenizer  # noqa: PLC0415

                tokenizer = AutoTokenizer.from_pretrained(model_path)
            except Exception:  # noqa: BLE001 - a model saved without its tokenizer
                tokenizer = None
            for name in ("pad_token_id", "eos_token_id"):
                value = getattr(tokenizer, name, None)
                if value is not None:
                    return value
        for name in ("pad_token_id", "eos_token_id"):
            value = getattr(model.config, name, None)
            if value is not None:
                return value
        raise ValueError(
            "GPT2RewardModel could not infer a padding token id from the tokenizer or the "
            "model config: pass pad_token_id="
        )

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(rewards [B, T], end_scores [B])`` of the token ids ``[B, T]``."""
        hidden = self.transformer(
            input_ids=input_ids, attention_mask=attention_mask, return_dict=False, use_cache=False
        )[0]
        rewards = self.lm_head(hidden).squeeze(-1)
        return rewards, self._compute_end_scores(rewards, input_ids)

    def _compute_end_scores(self, rewards: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
        # the token before the first padding; a row starting with padding wraps to its
        # last position, as TorchRL's index -1 does
        last = (_first_pad(input_ids, self.pad_id) - 1) % input_ids.shape[-1]
        return rewards.gather(-1, last.unsqueeze(-1)).squeeze(-1)

    def compute_reward_loss(
        self=None,
        chosen_batch: Any = None,
        rejected_batch: Any = None,
        pad_token_id: int | None = None,
    ) -> torch.Tensor:
        """The pairwise loss ``-log sigmoid(r_chosen - r_rejected)`` of two batches.

        For each pair, the per-position rewards are compared from the first token where
        the two sequences differ (the shared prompt is left out) to the later of their
        first padding tokens, and averaged; the loss is the mean over the pairs. Identical
        pairs, and pairs that differ only after that end, carry no preference and are left
        out (TorchRL gives NaN for the latter); with none left the loss is a zero that
        keeps the graph.

        Called on an instance, ``pad_token_id`` defaults to the model's; called on the
        class (``GPT2RewardModel.compute_reward_loss(chosen, rejected[, pad_token_id])``)
        it defaults to GPT-2's end-of-text token, 50256.

        Args:
            chosen_batch: has ``input_ids`` ``[B, T]`` and ``rewards`` ``[B, T]``.
            rejected_batch: the same for the rejected sequences.
            pad_token_id: the padding token.

        Returns:
            The scalar loss.

        Raises:
            TypeError: a batch is missing, or ``pad_token_id`` is given twice.

        Examples:
            >>> import torch
            >>> from types import SimpleNamespace
            >>> chosen = SimpleNamespace(input_ids=torch.tensor([[1, 2, 0]]),
            ...                          rewards=torch.tensor([[0.0, 1.0, 9.0]]))
            >>> rejected = SimpleNamespace(input_ids=torch.tensor([[1, 3, 0]]),
            ...                            rewards=torch.tensor([[0.0, -1.0, 9.0]]))
            >>> GPT2RewardModel.compute_reward_loss(chosen, rejected, pad_token_id=0)
            tensor(0.1269)
        """
        if isinstance(self, GPT2RewardModel):
            if chosen_batch is None or rejected_batch is None:
                raise TypeError("compute_reward_loss is missing chosen_batch or rejected_batch")
            if pad_token_id is None:
                pad_token_id = self.pad_id
        else:
            # called on the class: the batches may arrive shifted by one position
            if self is not None:
                if chosen_batch is None:
                    raise TypeError("compute_reward_loss is missing rejected_batch")
                if rejected_batch is not None:
                    if pad_token_id is not None:
                        raise TypeError("compute_reward_loss got two values for pad_token_id")
                    pad_token_id = rejected_batch
                chosen_batch, rejected_batch = self, chosen_batch
            elif chosen_batch is None or rejected_batch is None:
                raise TypeError("compute_reward_loss is missing chosen_batch or rejected_batch")
            if pad_token_id is None:
                pad_token_id = _GPT2_EOS
        return GPT2RewardModel._compute_reward_loss(chosen_batch, rejected_batch, pad_token_id)

    @staticmethod
    def _compute_reward_loss(
        chosen_batch: Any, rejected_batch: Any, pad_token_id: int
    ) -> torch.Tensor:
        chosen_ids, rejected_ids = chosen_batch.input_ids, rejected_batch.input_ids
        chosen, rejected = chosen_batch.rewards, rejected_batch.rewards
        end = torch.maximum(
            _first_pad(chosen_ids, pad_token_id), _first_pad(rejected_ids, pad_token_id)
        )
        differs = chosen_ids != rejected_ids
        start = differs.int().argmax(-1)
        positions = torch.arange(chosen_ids.shape[-1], device=chosen_ids.device)
        window = (
            (positions >= start[:, None])
            & (positions < end[:, None])
            & differs.any(-1, keepdim=True)
        )
        count = window.sum(-1)
        per_pair = (-F.logsigmoid(chosen - rejected) * window).sum(-1) / count.clamp(min=1)
        valid = count > 0
        if not valid.any():
            return chosen.sum() * 0.0 + rejected.sum() * 0.0
        return per_pair[valid].mean()

    @classmethod
    def from_pretrained(cls, path: str | Path) -> GPT2RewardModel:
        """A reward model saved by :meth:`save_pretrained` at ``path``, else ``cls(path)``.

        The checkpoint is read with ``torch.load(weights_only=True)``: it holds the
        weights and the padding token, the architecture is the saved ``config.json``
        (TorchRL pickles and unpickles the whole module).
        """
        path = Path(path)
        if not (path / _CHECKPOINT).exists():
            return cls(path)
        from transformers import GPT2Config, GPT2LMHeadModel  # noqa: PLC0415

        state = torch.load(path / _CHECKPOINT, map_location="cpu", weights_only=True)
        model = cls.__new__(cls)
        nn.Module.__init__(model)
        model._take(GPT2LMHeadModel(GPT2Config.from_pretrained(path)), int(state["pad_id"]))
        model.load_state_dict(state["state_dict"])
        return model.eval()  # as transformers' from_pretrained leaves its models

    def save_pretrained(self, path: str | Path) -> None:
        """Writes the model config (``config.json``) and the weights and padding token
        (``reward_model.pt``, written atomically) to the directory ``path``."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.config.save_pretrained(path)
        atomic_save({"state_dict": self.state_dict(), "pad_id": self.pad_id}, path / _CHECKPOINT)
