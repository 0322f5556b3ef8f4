"""Token-level knowledge distillation of an LLM policy towards a teacher: ``DistillationLoss``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import LazyStackedTensorDict, NestedKey, TensorClass, TensorDictBase
from torch import nn

from .._loss import LossModule
from ._kl import k3_kl_token_estimate

__all__ = ["DistillationLoss", "DistillationLossOutput"]

_REDUCTIONS = ("mean", "sum", "none")
_DIRECTIONS = ("reverse", "forward")
_ASSISTANT_MASK = ("masks", "all_assistant_mask")
_ATTENTION_MASK = ("masks", "all_attention_mask")


class DistillationLossOutput(TensorClass["nocast"]):
    """Output of :class:`DistillationLoss`.

    ``loss_distill`` is the loss to backpropagate; ``kl_to_teacher`` (the mean
    per-sequence KL estimate, detached) is for logging only, so sum ``loss_distill``
    rather than the whole output.
    """

    loss_distill: torch.Tensor
    kl_to_teacher: torch.Tensor


def _rows(td: TensorDictBase, key: NestedKey) -> list[torch.Tensor] | None:
    """The per-sequence tensors at ``key``: a lazy stack's rows at their own length, the
    rows of a dense (padded) tensor otherwise; ``None`` when ``key`` is absent."""
    if isinstance(td, LazyStackedTensorDict):
        return td.get(key, None, as_list=True)
    value = td.get(key, None)
    return None if value is None else list(value.unbind(0))


class DistillationLoss(LossModule):
    r"""Distils a student LLM towards a teacher from their per-token log-probabilities.

    The student (``actor_network``, a scoring wrapper: ``generate=False``) scores the
    conversations at ``("history", "full")``; the teacher's log-probabilities of the same
    tokens are read from the input, at ``("next", "teacher_log_probs", "full")``, as
    :class:`~rl.envs.llm.RetrieveLogProb` ``(teacher,
    log_probs_full_key=("teacher_log_probs", "full"))`` writes them. On each scored token
    (the assistant's tokens, or every attended one with ``assistant_only=False``) the KL
    is estimated with :func:`~rl.objectives.llm.k3_kl_token_estimate`:

    - ``kl_direction="reverse"`` (default): ``KL(student || teacher)``,
      ``exp(d) - 1 - d`` with ``d = log q_teacher - log p_student``; unbiased when the
      tokens were sampled from the student (on-policy distillation);
    - ``kl_direction="forward"``: ``KL(teacher || student)``, ``d = log p_student - log
      q_teacher``; unbiased on teacher-generated tokens.

    The per-token estimates are summed over each sequence (divided by its number of
    scored tokens with ``normalize_by_seq_length``) and reduced over the batch. The
    teacher is detached: gradients reach the student only (the sampling distribution's
    score-function term is dropped, as in the KL terms of :class:`GRPOLoss` and
    :class:`SFTLoss`). See `On-Policy Distillation of Language Models
    <https://arxiv.org/abs/2306.13649>`_.

    The token masks are ``("masks", "all_assistant_mask")`` and ``("masks",
    "all_attention_mask")`` of the input when it has them, else those the student wrote
    while scoring, else the history re-tokenized with ``tokenizer``. The teacher's
    log-probabilities must be laid out as the student's (one tensor per sequence, or the
    same padding).

    Args:
        actor_network (TransformersWrapper): the student, in scoring mode.
        tokenizer: re-tokenizes the history when no masks are found; defaults to
            ``actor_network.tokenizer``.
        tokenizer_kwargs (dict, optional): passed to
            :meth:`~rl.data.llm.History.apply_chat_template` when re-tokenizing.
        kl_direction (str): ``"reverse"`` (default) or ``"forward"``.
        reduction (str): ``"mean"`` (default), ``"sum"`` or ``"none"`` (one value per
            sequence, of the input's batch shape).
        normalize_by_seq_length (bool): divide each sequence's KL by its number of scored
            tokens. Defaults to ``True``.
        assistant_only (bool): score the assistant's tokens only (default), else every
            attended token. Pair it with ``RetrieveLogProb(assistant_only=...)``: that
            transform writes 0 on the non-assistant tokens when ``True``.
        device: unused (TorchRL's signature); move the loss with ``.to()``.

    Raises:
        ValueError: an unknown ``kl_direction`` / ``reduction``; a sequence without a
            scored token; student and teacher log-probs (or masks) of different shapes;
            no masks and no tokenizer.
        KeyError: no teacher log-probs at ``teacher_log_prob``.
        RuntimeError: ``assistant_only=False`` with teacher log-probs that are exactly 0
            on (nearly) every non-assistant token, as ``RetrieveLogProb(assistant_only=True)``
            writes them.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.objectives.llm import DistillationLoss
        >>> class Student(torch.nn.Module):  # scores every token at log(1/2)
        ...     def forward(self, td):
        ...         td["log_probs", "full"] = torch.full((1, 3), 0.5).log()
        ...         return td
        >>> data = TensorDict(
        ...     {"history": {"full": torch.zeros(1, 3)},
        ...      "masks": {"all_assistant_mask": torch.tensor([[False, True, True]]),
        ...                "all_attention_mask": torch.ones(1, 3, dtype=torch.bool)},
        ...      "next": {"teacher_log_probs": {"full": torch.full((1, 3), 0.25).log()}}},
        ...     batch_size=(1,),
        ... )
        >>> out = DistillationLoss(Student())(data)
        >>> out.loss_distill  # exp(d) - 1 - d with d = log(0.25 / 0.5)
        tensor(0.1931)
    """

    @dataclass
    class _AcceptedKeys:
        """Keys: ``history`` (the scored conversations), ``teacher_log_prob`` (the
        teacher's per-token log-probs), ``log_probs`` (where the student writes its own)."""

        history: NestedKey = ("history", "full")
        teacher_log_prob: NestedKey = ("next", "teacher_log_probs", "full")
        log_probs: NestedKey = ("log_probs", "full")

    def __init__(
        self,
        actor_network: nn.Module,
        tokenizer=None,
        tokenizer_kwargs: dict | None = None,
        kl_direction: Literal["reverse", "forward"] = "reverse",
        reduction: Literal["mean", "sum", "none"] = "mean",
        normalize_by_seq_length: bool = True,
        assistant_only: bool = True,
        device: torch.device | None = None,
    ):
        super().__init__()
        if kl_direction not in _DIRECTIONS:
            raise ValueError(f"kl_direction {kl_direction!r} is not one of {_DIRECTIONS}")
        if reduction not in _REDUCTIONS:
            raise ValueError(f"reduction {reduction!r} is not one of {_REDUCTIONS}")
        self.actor_network = actor_network
        self.tokenizer = (
            tokenizer if tokenizer is not None else getattr(actor_network, "tokenizer", None)
        )
        tokenizer_kwargs = dict(tokenizer_kwargs or {})
        tokenizer_kwargs.setdefault("return_assistant_tokens_mask", True)
        tokenizer_kwargs.setdefault("tokenize", True)
        tokenizer_kwargs.setdefault("return_tensors", "pt")
        tokenizer_kwargs.setdefault("padding", False)
        tokenizer_kwargs.setdefault("add_generation_prompt", False)
        self.tokenizer_kwargs = tokenizer_kwargs
        self.kl_direction = kl_direction
        self.reduction = reduction
        self.normalize_by_seq_length = normalize_by_seq_length
        self.assistant_only = assistant_only
        self._set_in_keys()

    def _set_in_keys(self) -> None:
        self.in_keys = [self.tensor_keys.history, self.tensor_keys.teacher_log_prob]
        self.out_keys = []

    def _forward_value_estimator_keys(self, **kwargs) -> None:
        self._set_in_keys()

    def _masks(
        self, data: TensorDictBase, scored: TensorDictBase
    ) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
        """The attention and assistant masks of each sequence (input, then the student's
        output, then the tokenizer)."""
        attention = _rows(data, _ATTENTION_MASK)
        assistant = _rows(data, _ASSISTANT_MASK)
        if attention is None or (assistant is None and self.assistant_only):
            attention = _rows(scored, _ATTENTION_MASK)
            assistant = _rows(scored, _ASSISTANT_MASK)
        if attention is None or (assistant is None and self.assistant_only):
            if self.tokenizer is None:
                raise ValueError(
                    f"no token masks at {_ATTENTION_MASK} / {_ASSISTANT_MASK} in the input "
                    "or the student's output, and no tokenizer to recover them: pass "
                    "tokenizer= or provide the masks"
                )
            tokens = data.get(self.tensor_keys.history).apply_chat_template(
                tokenizer=self.tokenizer, **self.tokenizer_kwargs
            )
            attention = _rows(tokens, "attention_mask")
            assistant = _rows(tokens, "assistant_masks") if "assistant_masks" in tokens else None
            if assistant is None and self.assistant_only:
                raise ValueError(
                    "the chat template gives no assistant_masks (no {% generation %} "
                    "block): assistant_only=True cannot tell the assistant's tokens"
                )
        attention = [m.bool() for m in attention]
        if assistant is not None:
            assistant = [m.bool() for m in assistant]
        return attention, assistant

    def forward(self, tensordict: TensorDictBase) -> DistillationLossOutput:
        keys = self.tensor_keys
        batch_shape = tensordict.batch_size
        data = tensordict.reshape(-1) if tensordict.ndim != 1 else tensordict
        teacher = _rows(data, keys.teacher_log_prob)
        if teacher is None:
            raise KeyError(
                f"no teacher log-probs at {keys.teacher_log_prob}: write them with "
                "RetrieveLogProb(teacher, log_probs_full_key=('teacher_log_probs', 'full')) "
                "or point teacher_log_prob at them with set_keys()"
            )
        scored = self.actor_network(data.select(keys.history))
        student = _rows(scored, keys.log_probs)
        if student is None:
            raise KeyError(f"the student wrote no log-probs at {keys.log_probs}")
        attention, assistant = self._masks(data, scored)
        masks = (
            [att & ast for att, ast in zip(attention, assistant, strict=True)]
            if self.assistant_only
            else attention
        )
        shapes = [tuple(lp.shape) for lp in student]
        if [tuple(t.shape) for t in teacher] != shapes:
            raise ValueError(
                f"{keys.teacher_log_prob} has per-sequence shapes "
                f"{[tuple(t.shape) for t in teacher]}, expected {shapes} from the student's "
                f"{keys.log_probs}: both models must score the same tokens, laid out alike"
            )
        if [tuple(m.shape) for m in masks] != shapes:
            raise ValueError(
                f"the token masks have shapes {[tuple(m.shape) for m in masks]}, expected "
                f"{shapes} from the student's {keys.log_probs}"
            )
        if not all(bool(m.any()) for m in masks):
            which = "assistant tokens" if self.assistant_only else "attended tokens"
            raise ValueError(
                f"some sequences at {keys.history} have no {which} to distil on "
                "(their mask is all False)"
            )
        if not self.assistant_only and assistant is not None:
            _check_teacher_zeros(teacher, attention, assistant)
        per_sequence, counts = [], []
        for lp, tlp, mask in zip(student, teacher, masks, strict=True):
            lp = lp.masked_fill(~mask, 0.0)
            tlp = tlp.detach().to(lp.dtype).masked_fill(~mask, 0.0)
            if self.kl_direction == "reverse":
                kl = k3_kl_token_estimate(tlp, lp)
            else:
                kl = k3_kl_token_estimate(lp, tlp)
            per_sequence.append(kl.sum())
            counts.append(mask.sum())
        summed = torch.stack(per_sequence)
        if self.normalize_by_seq_length:
            summed = summed / torch.stack(counts).clamp_min(1).to(summed.dtype)
        if self.reduction == "mean":
            loss = summed.mean()
        elif self.reduction == "sum":
            loss = summed.sum()
        else:
            loss = summed.reshape(batch_shape)
        return DistillationLossOutput(loss_distill=loss, kl_to_teacher=summed.detach().mean())


def _check_teacher_zeros(
    teacher: list[torch.Tensor], attention: list[torch.Tensor], assistant: list[torch.Tensor]
) -> None:
    """Refuses teacher log-probs zero-filled outside the assistant's turns (what
    ``RetrieveLogProb(assistant_only=True)`` writes) when every attended token is scored:
    the student would be pulled towards probability one on those tokens."""
    zeros = total = 0
    for tlp, att, ast in zip(teacher, attention, assistant, strict=True):
        if tlp.shape != att.shape or tlp.shape != ast.shape:
            return
        others = att & ~ast
        total += int(others.sum())
        zeros += int(((tlp == 0.0) & others).sum())
    if total and zeros > 0.9 * total:
        raise RuntimeError(
            f"{zeros} of the {total} attended non-assistant tokens have a teacher "
            "log-probability of exactly 0.0, as RetrieveLogProb(assistant_only=True) writes "
            "them, but this loss has assistant_only=False and scores those tokens: build the "
            "loss with assistant_only=True, or the teacher's log-probs with "
            "RetrieveLogProb(assistant_only=False)"
        )
