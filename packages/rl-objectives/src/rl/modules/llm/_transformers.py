"""LLM policies: ``LLMWrapperBase`` and the Hugging Face ``TransformersWrapper``."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Literal

import torch
from tensordict import (
    LazyStackedTensorDict,
    NestedKey,
    NonTensorData,
    NonTensorStack,
    TensorDictBase,
    lazy_stack,
)
from tensordict.nn import TensorDictModuleBase
from torch import nn

from rl.data.llm import ChatHistory, History, LogProbs, Masks, Text, Tokens

from ..distributions import LLMMaskedCategorical
from ._batching import RequestBatcher

__all__ = ["LLMWrapperBase", "TransformersWrapper"]

_INPUT_MODES = ("history", "text", "tokens")


class LLMWrapperBase(TensorDictModuleBase):
    """Base of the LLM policies: what they read and write, and their distributions.

    A wrapper reads a prompt (``input_mode``: ``"history"``, ``"text"`` or ``"tokens"``)
    and writes, under ``text_key``, ``tokens_key``, ``masks_key``, ``log_probs_key`` (and
    ``history_key`` in history mode), the containers :class:`~rl.data.llm.Text`,
    :class:`~rl.data.llm.Tokens`, :class:`~rl.data.llm.Masks`,
    :class:`~rl.data.llm.LogProbs` (and :class:`~rl.data.llm.ChatHistory`). With
    ``generate=True`` it samples a response; with ``generate=False`` it scores the ``full``
    sequence it is given.

    Subclasses implement ``forward`` and ``_logits(tokens, attention_mask)``.
    """

    generate: bool
    pad_output: bool
    text_key: NestedKey
    tokens_key: NestedKey
    masks_key: NestedKey
    log_probs_key: NestedKey
    history_key: NestedKey

    _batcher: RequestBatcher | None = None

    def _logits(self, tokens: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _forward_batch(self, tensordict: TensorDictBase, **kwargs) -> TensorDictBase:
        """One model call on ``tensordict``: what a batch of queued calls runs."""
        raise NotImplementedError

    # ------------------------------------------------------------------ batching
    def _setup_batching(
        self,
        batching: bool | None,
        min_batch_size: int | None,
        max_batch_size: int | None,
        batching_timeout: float,
    ) -> None:
        """Checks the batching arguments and builds the queue when batching is on."""
        if batching is False and (min_batch_size is not None or max_batch_size is not None):
            raise ValueError(
                f"min_batch_size={min_batch_size} and max_batch_size={max_batch_size} must "
                "be None when batching=False"
            )
        if batching or min_batch_size is not None or max_batch_size is not None:
            self._batcher = RequestBatcher(
                1 if min_batch_size is None else min_batch_size, max_batch_size, batching_timeout
            )
        else:
            self._batcher = None

    @property
    def batching(self) -> bool:
        """Whether calls are queued and run in batches (``batching=True`` or a batch size)."""
        return self._batcher is not None

    def _batched_call(self, tensordict: TensorDictBase, **kwargs) -> TensorDictBase:
        """``_forward_batch`` on ``tensordict``, through the batching queue when it is on.

        An ``inplace`` wrapper writes each row's outputs into the row it read; the rows of
        a dense ``[B]`` input are copies of its structure, so their outputs are written
        back into ``tensordict``, which is returned.
        """
        if self._batcher is None:
            return self._forward_batch(tensordict, **kwargs)
        out = self._batcher.submit(self._forward_batch, tensordict, **kwargs)
        if getattr(self, "inplace", False) is True and out is not tensordict:
            keys = [k for k in self.out_keys if k in out.keys(True)]
            tensordict.update(out.select(*keys), keys_to_update=keys)
            return tensordict
        return out

    def cleanup_batching(self, *, flush: bool = False) -> None:
        """Empties the batching queue.

        Args:
            flush (bool): run the queued calls now, so that their callers get their
                results (``True``), or drop them, so that their callers raise
                :class:`concurrent.futures.CancelledError` (``False``, the default).
        """
        if self._batcher is None:
            return
        if flush:
            self._batcher.flush(self._forward_batch)
        else:
            self._batcher.cancel()

    def get_batching_state(self) -> dict:
        """The batching queue's state: ``batching_enabled``, ``min_batch_size``,
        ``max_batch_size``, ``queue_size``, ``processing``, ``lock_state``,
        ``pending_futures`` and ``timeout`` (only ``batching_enabled`` without batching)."""
        if self._batcher is None:
            return {"batching_enabled": False}
        return self._batcher.state()

    def get_dist(
        self,
        tensordict: TensorDictBase,
        tensordict_out: TensorDictBase | None = None,
        logits_key: NestedKey = "logits",
        mask_key: NestedKey | None = None,
        **kwargs,
    ) -> LLMMaskedCategorical:
        """The per-token distribution over the ``full`` tokens of ``tensordict``.

        ``logits[..., t, :]`` scores token ``t`` given the tokens before it. Positions
        counted: those of ``mask_key`` if given, else the attention mask without the first
        token (which has no context). The distribution lives where the wrapper writes its
        outputs: on ``tensordict``'s device when it has one, else on the model's.
        """
        tokens, attention = self._full_tokens(tensordict)
        logits = self._logits(tokens, attention)
        if mask_key is not None:
            mask = _padded(tensordict, mask_key)
            if mask is None:
                raise KeyError(f"the tensordict has no mask at {mask_key}")
            mask = mask.bool()
        else:
            mask = attention.bool().clone()
        mask[..., 0] = False
        return _masked_dist(tensordict, logits, mask & attention.bool())

    def _get_sft_dist(self, tensordict: TensorDictBase, **kwargs) -> LLMMaskedCategorical:
        """Distribution scoring the response: the assistant's tokens
        (``masks.all_assistant_mask``) when stored, else the tokens past ``tokens.prompt``."""
        asst_key = (*_as_tuple(self.masks_key), "all_assistant_mask")
        prompt = tensordict.get((*_as_tuple(self.tokens_key), "prompt"), None)
        if prompt is None or asst_key in tensordict.keys(True):
            return self._get_rlhf_dist(tensordict)
        tokens, attention = self._full_tokens(tensordict)
        plen = _row_lengths(tensordict, (*_as_tuple(self.tokens_key), "prompt"), tokens.device)
        pos = torch.arange(tokens.shape[-1], device=tokens.device)
        mask = attention.bool() & (pos >= plen.unsqueeze(-1))
        return _masked_dist(tensordict, self._logits(tokens, attention), mask)

    def _get_rlhf_dist(self, tensordict: TensorDictBase, **kwargs) -> LLMMaskedCategorical:
        """Distribution scoring the assistant's tokens (``masks.all_assistant_mask``)."""
        return self.get_dist(
            tensordict, mask_key=(*_as_tuple(self.masks_key), "all_assistant_mask")
        )

    def _get_generic_dist(self, tensordict: TensorDictBase, **kwargs) -> LLMMaskedCategorical:
        """Distribution scoring every attended token but the first."""
        return self.get_dist(tensordict)

    def _full_tokens(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        key = (*_as_tuple(self.tokens_key), "full")
        tokens = _padded(tensordict, key)
        if tokens is None:
            raise KeyError(f"the tensordict has no full tokens at {key}: run the wrapper first")
        mask_key = (*_as_tuple(self.masks_key), "all_attention_mask")
        attention = _padded(tensordict, mask_key)
        if attention is None:
            lengths = _row_lengths(tensordict, key, tokens.device)
            attention = torch.arange(tokens.shape[-1], device=tokens.device) < lengths.unsqueeze(-1)
        return tokens.long(), attention.long()


def _as_tuple(key: NestedKey) -> tuple:
    return (key,) if isinstance(key, str) else tuple(key)


def _padded(tensordict: TensorDictBase, key) -> torch.Tensor | None:
    """The entry at ``key`` as one right-padded tensor (zeros): rows of their own length,
    a jagged nested tensor (``layout=torch.jagged``) or a padded tensor; ``None`` if absent."""
    value = tensordict.get(key, None, as_padded_tensor=True, padding_value=0)
    if isinstance(value, torch.Tensor) and value.is_nested:
        value = value.to_padded_tensor(0)
    return value


def _row_lengths(tensordict: TensorDictBase, key, device: torch.device) -> torch.Tensor:
    """Lengths of the rows at ``key`` (their own lengths when stacked lazily), on ``device``."""
    return torch.tensor([r.shape[-1] for r in _rows(tensordict, key)], device=device)


def _masked_dist(
    tensordict: TensorDictBase, logits: torch.Tensor, mask: torch.Tensor
) -> LLMMaskedCategorical:
    """The distribution of ``logits`` ``[B, T, C]`` over the positions of ``mask``
    ``[B, T]``, where TorchRL's wrappers put their outputs: on ``tensordict``'s device when
    it has one, else where the model computed ``logits``."""
    device = logits.device if tensordict.device is None else tensordict.device
    return LLMMaskedCategorical(logits.to(device), mask.to(device))


def _rows(tensordict: TensorDictBase, key) -> list[torch.Tensor]:
    """The entries at ``key``, one per row of a ``[B]`` tensordict, each at its own length."""
    if not tensordict.batch_dims:
        return [tensordict.get(key)]
    if isinstance(tensordict, LazyStackedTensorDict):
        return list(tensordict.get(key, as_list=True))
    # row by row: the container at ``key`` may be a lazy stack of rows of their own length
    # inside a dense tensordict
    return [row.get(key) for row in tensordict.unbind(0)]


class TransformersWrapper(LLMWrapperBase):
    """A Hugging Face causal language model as a TensorDict policy.

    Args:
        model: a ``transformers`` causal LM (``model(input_ids, attention_mask).logits``
            and ``model.generate``).

    Keyword Args:
        tokenizer: its tokenizer (needs a ``chat_template`` in history mode unless
            ``chat_template`` / ``chat_template_name`` is given).
        input_mode (str): ``"history"`` (reads ``ChatHistory`` at ``history_key``),
            ``"text"`` (reads ``Text`` at ``text_key``) or ``"tokens"`` (reads ``Tokens`` at
            ``tokens_key``). Defaults to ``"history"``.
        input_key (NestedKey, optional): where the input container is; defaults to the
            mode's key.
        generate (bool): sample a response (``True``) or score the ``full`` input
            (``False``). Defaults to ``True``.
        generate_kwargs (dict, optional): passed to ``model.generate`` (``max_new_tokens``
            defaults to 32, ``do_sample`` to ``True``).
        tokenizer_kwargs (dict, optional): passed to the tokenizer.
        pad_output (bool): write padded ``[B, T]`` tensors (right padding, ``padded=True``)
            instead of rows of their own length (see ``layout``). Defaults to ``False``.
        pad_model_input (bool, optional): how a scoring wrapper (``generate=False``) feeds
            the model: padded rows ``[B, T]`` (``True``, the default) or packed, all
            sequences in one row ``[1, sum n_i]`` with a block-diagonal causal attention
            mask and positions restarting at each sequence (``False``: no compute on
            padding; the model must take a 4D additive attention mask, as ``transformers``'
            models with eager or SDPA attention do; the mask is ``N x N`` for ``N`` tokens
            in all, so padding may take less memory for many long sequences). The
            log-probabilities are the same up to float rounding; the outputs' padding is
            ``pad_output``'s. Giving it with
            ``generate=True`` raises a ``ValueError``, as in TorchRL.
        inplace (bool, optional): write into the input tensordict (default) or a new one.
        device (torch.device, optional): where the model computes: the tokens and
            attention masks are moved there before each call of the model (``forward``,
            ``generate``), and the tokens, masks and log-probabilities written are there
            too, unless the input tensordict has a device, to which they are then moved (as
            TorchRL's wrapper moves them). Defaults to the device of the model's parameters
            (TorchRL moves nothing then: its model must be on the CPU).
        layout (torch.layout, optional): with ``pad_output=False``, how rows of their own
            length are written: ``torch.strided`` (the default: a lazy stack of rows, each a
            tensor of its length) or ``torch.jagged`` (each field one ``[B, j]`` jagged
            nested tensor). ``torch.jagged`` with ``pad_output=True`` raises a
            ``ValueError``. The attribute ``layout`` is ``None`` when ``pad_output=True``
            and none is given, as in TorchRL (whose wrapper stores it but writes lazy
            stacks either way).
        return_log_probs (bool, optional): also write log-probabilities when generating
            (always in scoring mode). Defaults to ``True``.
        chat_template_name, chat_template: the chat template for history inputs.
        history_key, text_key, tokens_key, masks_key, log_probs_key: output keys.
        batching (bool, optional): queue the calls made from several threads and run them
            as one batched model call (see Batching below). ``True`` turns it on with
            ``min_batch_size=1``; giving a batch size turns it on too. Defaults to off.
        min_batch_size (int, optional): rows needed to run a batch before
            ``batching_timeout``. Defaults to 1 when batching.
        max_batch_size (int, optional): most rows in one model call. Defaults to all
            the queued rows.
        batching_timeout (float): seconds a call waits for ``min_batch_size`` rows before
            it runs the rows queued so far. Defaults to 10.0.
        prefer_tokens (bool): in history mode, when generating, take the prompt's tokens
            from the input's ``(tokens_key, "prompt")`` (else ``(tokens_key, "full")``),
            row by row, instead of applying the chat template to the history: the model
            then continues exactly the tokens an environment keeps (``ChatEnv`` with a
            tokenizer, ``IncrementalTokenizer``). A row holding neither is tokenized from
            its history; padded tokens (``padded=True``) lose their padding tokens. The
            history is still read (it is the prompt of the ``ChatHistory`` written).
            Other modes read tokens or text as they do without it. Defaults to ``False``.

    **Batching.** With batching on, a call puts the rows of its input (a ``[B]``
    tensordict, or a ``[]`` one as one row) in a queue shared by all threads, and runs
    batches itself: while ``min_batch_size`` rows or more wait, it runs the model once on
    up to ``max_batch_size`` of them and hands each row's outputs back to its caller, the
    same outputs an unbatched call gives (up to float rounding, and with the same random
    draws only when generating greedily). A call whose rows wait longer than
    ``batching_timeout`` runs the rows queued so far, however few: no call waits longer
    than that plus the batches before its own. No thread is started: batches run in the
    calling threads, one at a time, so nothing outlives the calls.
    :meth:`cleanup_batching` drops (or, with ``flush=True``, runs) the queued rows;
    :meth:`get_batching_state` reports the queue. An ``inplace`` wrapper writes the
    outputs into the caller's input; keyword arguments of a call only reach the batch it
    runs itself. (TorchRL's queue waits without a timeout when fewer than
    ``min_batch_size`` rows come; here the timeout is honoured, as TorchRL documents.)

    Raises:
        ValueError: an unknown ``input_mode``; a prompt longer than the model's context
            (``n_positions`` / ``max_position_embeddings``); ``pad_model_input`` with
            ``generate=True``; an unknown ``layout``, or ``torch.jagged`` with
            ``pad_output=True``; a batch size with ``batching=False``, below 1, or
            ``min_batch_size > max_batch_size``; a ``batching_timeout`` that is not a
            positive number; an input with more than one batch dimension when batching.

    Examples:
        See ``docs/llm.md``: the model and tokenizer must be built or loaded first.
    """

    def __init__(
        self,
        model,
        *,
        tokenizer=None,
        input_mode: Literal["history", "text", "tokens"] = "history",
        input_key: NestedKey | None = None,
        attention_mask_key: str = "attention_mask",
        generate: bool = True,
        generate_kwargs: dict | None = None,
        tokenizer_kwargs: dict | None = None,
        pad_output: bool = False,
        pad_model_input: bool | None = None,
        inplace: bool | None = None,
        device: torch.device | None = None,
        layout: torch.layout | None = None,
        num_samples: int | None = None,
        chat_template_name: str | None = None,
        chat_template: str | None = None,
        return_log_probs: bool | None = None,
        history_key: NestedKey = "history",
        text_key: NestedKey = "text",
        tokens_key: NestedKey = "tokens",
        masks_key: NestedKey = "masks",
        log_probs_key: NestedKey = "log_probs",
        batching: bool | None = None,
        min_batch_size: int | None = None,
        max_batch_size: int | None = None,
        batching_timeout: float = 10.0,
        prefer_tokens: bool = False,
    ):
        super().__init__()
        self._setup_batching(batching, min_batch_size, max_batch_size, batching_timeout)
        if input_mode not in _INPUT_MODES:
            raise ValueError(f"input_mode {input_mode!r} is not one of {_INPUT_MODES}")
        if input_mode != "tokens" and tokenizer is None:
            raise ValueError(f"input_mode={input_mode!r} needs a tokenizer")
        if num_samples is not None:
            raise NotImplementedError(
                "num_samples is not supported yet: repeat the prompts instead"
            )
        self.model = model
        self.tokenizer = tokenizer
        self.input_mode = input_mode
        self.history_key, self.text_key = history_key, text_key
        self.tokens_key, self.masks_key, self.log_probs_key = tokens_key, masks_key, log_probs_key
        self.input_key = (
            input_key
            or {"history": history_key, "text": text_key, "tokens": tokens_key}[input_mode]
        )
        self.attention_mask_key = attention_mask_key
        self.generate = generate
        self.generate_kwargs = {"max_new_tokens": 32, "do_sample": True, **(generate_kwargs or {})}
        self.tokenizer_kwargs = dict(tokenizer_kwargs or {})
        self.pad_output = pad_output
        if pad_model_input is not None and generate:
            raise ValueError(
                f"pad_model_input={pad_model_input} is only for scoring (generate=False), "
                "got generate=True"
            )
        self.pad_model_input = True if pad_model_input is None else bool(pad_model_input)
        if layout not in (None, torch.strided, torch.jagged):
            raise ValueError(f"layout must be torch.strided or torch.jagged, got {layout!r}")
        if pad_output and layout is torch.jagged:
            raise ValueError("layout=torch.jagged is for pad_output=False, got pad_output=True")
        self.layout = torch.strided if layout is None and not pad_output else layout
        self.prefer_tokens = bool(prefer_tokens)
        self.inplace = True if inplace is None else inplace
        self.device = None if device is None else torch.device(device)
        self.return_log_probs = True if return_log_probs is None else return_log_probs
        self.chat_template_name = chat_template_name
        self.chat_template = chat_template
        self.in_keys = [self.input_key]
        self.out_keys = [k for k in (history_key, text_key, tokens_key, masks_key, log_probs_key)]
        cfg = getattr(model, "config", None)
        self.max_length = getattr(cfg, "n_positions", None) or getattr(
            cfg, "max_position_embeddings", None
        )

    # ------------------------------------------------------------------ model calls
    def _logits(self, tokens: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """``[B, T, C]`` logits aligned with ``tokens``: row ``t`` scores token ``t``
        (computed on the model's device, where ``tokens`` and the mask are moved)."""
        self._check_length(tokens.shape[-1], "full")
        device = self._model_device()
        tokens, attention_mask = tokens.to(device), attention_mask.to(device)
        if self.pad_model_input:
            positions = (attention_mask.cumsum(-1) - 1).clamp_min(0)
            logits = self.model(
                input_ids=tokens, attention_mask=attention_mask, position_ids=positions
            ).logits
        else:
            logits = self._packed_logits(tokens, attention_mask)
        return torch.cat([torch.zeros_like(logits[..., :1, :]), logits[..., :-1, :]], -2)

    def _packed_logits(self, tokens: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The model's logits ``[B, T, C]`` for ``tokens`` ``[B, T]`` (zero where
        ``attention_mask`` is 0), from one call on the attended tokens packed in one row.

        Token ``k`` of the packed row ``[1, N]`` attends to the tokens ``<= k`` of its own
        sequence only (a ``[1, 1, N, N]`` additive mask: 0 or the dtype's lowest value),
        and its position counts from its sequence's first attended token, so each sequence
        is scored as if it were alone.
        """
        keep = attention_mask.bool()
        seq = torch.arange(tokens.shape[0], device=tokens.device)[:, None].expand_as(tokens)[keep]
        positions = (attention_mask.long().cumsum(-1) - 1)[keep]
        order = torch.arange(seq.numel(), device=tokens.device)
        allowed = (seq[:, None] == seq[None, :]) & (order[None, :] <= order[:, None])
        dtype = next(
            (p.dtype for p in _parameters(self.model) if p.is_floating_point()), torch.float32
        )
        mask = torch.zeros(allowed.shape, dtype=dtype, device=tokens.device)
        mask = mask.masked_fill(~allowed, torch.finfo(dtype).min)[None, None]
        packed = self.model(
            input_ids=tokens[keep][None], attention_mask=mask, position_ids=positions[None]
        ).logits[0]
        logits = packed.new_zeros((*tokens.shape, packed.shape[-1]))
        return logits.masked_scatter(keep[..., None], packed)

    def _model_device(self) -> torch.device:
        """Where the model computes: ``device`` if given, else its parameters' device (the
        CPU for a model without parameters)."""
        if self.device is not None:
            return self.device
        first = next(_parameters(self.model), None)
        return torch.device("cpu") if first is None else first.device

    def _check_length(self, length: int, field: str) -> None:
        if self.max_length is not None and length > self.max_length:
            raise ValueError(
                f"the {field} tokens are {length} long, longer than the model's context of "
                f"{self.max_length} (config.n_positions / max_position_embeddings)"
            )

    def _template_kwargs(self) -> dict:
        return {"chat_template": self.chat_template, "chat_template_name": self.chat_template_name}

    # ------------------------------------------------------------------ inputs
    def _read_prompt_rows(self, td: TensorDictBase) -> tuple[list[torch.Tensor], dict]:
        """Token rows of the prompt (generate) or full sequence (score), and the containers read."""
        which = "prompt" if self.generate else "full"
        extra = {}
        key = (*_as_tuple(self.input_key), which)
        if self.input_mode == "history":
            history = td.get(key, None)
            if history is None:
                raise KeyError(f"history input: no History at {key}")
            extra["history"] = history
            given = [None] * td.batch_size[0]
            if self.prefer_tokens and self.generate:
                given = self._given_prompt_tokens(td)
            rows = given
            if any(g is None for g in given):
                out = history.apply_chat_template(
                    tokenizer=self.tokenizer,
                    add_generation_prompt=self.generate,
                    tokenize=True,
                    return_dict=True,
                    return_assistant_tokens_mask=not self.generate,
                    **self._template_kwargs(),
                )
                if out.batch_dims == 0:
                    out = out.unsqueeze(0)
                templated = list(out.get("input_ids", as_list=True))
                rows = [t if g is None else g for g, t in zip(given, templated)]
                if not self.generate:
                    extra["assistant"] = [
                        m.bool() for m in out.get("assistant_masks", as_list=True)
                    ]
        elif self.input_mode == "text":
            text = td.get(key, None)
            if text is None:
                raise KeyError(f"text input: no text at {key}")
            texts = (
                [text]
                if isinstance(text, str)
                else [str(t) for t in (text.tolist() if hasattr(text, "tolist") else text)]
            )
            extra["text"] = texts
            rows = [
                torch.as_tensor(self.tokenizer(t, **self.tokenizer_kwargs)["input_ids"])
                for t in texts
            ]
        else:
            if key not in td.keys(True):
                raise KeyError(f"tokens input: no tokens at {key}")
            rows = _rows(td, key)
            mask_key = (*_as_tuple(self.masks_key), "all_attention_mask")
            padded = _flag(td.get((*_as_tuple(self.tokens_key), "padded"), False))
            if not self.generate and mask_key in td.keys(True) and padded:
                masks = _rows(td, mask_key)
                rows = [r[m.bool()] for r, m in zip(rows, masks)]
        for r in rows:
            self._check_length(r.shape[-1], which)
        return [r.long().reshape(-1) for r in rows], extra

    def _given_prompt_tokens(self, td: TensorDictBase) -> list[torch.Tensor | None]:
        """Per row of ``td``, the prompt's tokens it holds (``prefer_tokens``): those at
        ``(tokens_key, "prompt")``, else at ``(tokens_key, "full")``, without their padding
        tokens when stored padded; ``None`` for a row holding neither."""
        found = []
        for row in td.unbind(0):
            tokens = None
            for field in ("prompt", "full"):
                tokens = row.get((*_as_tuple(self.tokens_key), field), None)
                if tokens is not None:
                    break
            padded = row.get((*_as_tuple(self.tokens_key), "padded"), False)
            if tokens is not None and _flag(padded):
                tokens = tokens[tokens != self._pad_id()]
            found.append(tokens)
        return found

    # ------------------------------------------------------------------ forward
    @torch.no_grad()
    def _generate(self, rows: list[torch.Tensor]) -> list[torch.Tensor]:
        """The responses to the prompts ``rows`` (each ``[n_i]``), sampled by the model on
        its device, as rows on the prompts' device, each cut after its first
        end-of-sequence token (or before its first padding token)."""
        width = max(r.numel() for r in rows)
        pad_id = self._pad_id()
        host = rows[0].device
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long, device=host)
        att = torch.zeros((len(rows), width), dtype=torch.long, device=host)
        for i, r in enumerate(rows):  # left padding: every prompt ends where generation starts
            ids[i, width - r.numel() :] = r
            att[i, width - r.numel() :] = 1
        kwargs = dict(self.generate_kwargs)
        kwargs.setdefault("pad_token_id", pad_id)
        if self.max_length is not None:
            kwargs["max_new_tokens"] = min(kwargs["max_new_tokens"], self.max_length - width)
        device = self._model_device()
        out = self.model.generate(input_ids=ids.to(device), attention_mask=att.to(device), **kwargs)
        responses = []
        eos = getattr(self.tokenizer, "eos_token_id", None) if self.tokenizer is not None else None
        # one copy back: the cuts read the tokens' values, and the text is decoded from them
        for seq in out[:, width:].to(host):
            keep = seq.numel()
            if eos is not None and (seq == eos).any():
                keep = int((seq == eos).nonzero()[0]) + 1
            pads = (seq[:keep] == pad_id).nonzero()
            if pad_id != eos and pads.numel():
                keep = int(pads[0])
            responses.append(seq[:keep])
        return responses

    def _pad_id(self) -> int:
        tok = self.tokenizer
        for attr in ("pad_token_id", "eos_token_id"):
            value = getattr(tok, attr, None) if tok is not None else None
            if value is not None:
                return value
        return 0

    def forward(self, tensordict: TensorDictBase, **kwargs) -> TensorDictBase:
        return self._batched_call(tensordict, **kwargs)

    def _forward_batch(self, tensordict: TensorDictBase, **kwargs) -> TensorDictBase:
        td = tensordict if tensordict.batch_dims else tensordict.unsqueeze(0)
        rows, extra = self._read_prompt_rows(td)
        if len(rows) != td.batch_size[0]:
            raise ValueError(
                f"read {len(rows)} prompts for a tensordict of batch {tuple(td.batch_size)}"
            )
        device = self._model_device()
        if self.generate:
            prompts = rows
            responses = self._generate(prompts)
            fulls = [torch.cat([p, r]) for p, r in zip(prompts, responses)]
        else:
            fulls = rows
            prompts = responses = None
        # the rows (where they were read: the text is decoded from them) padded on the
        # right, then moved to the model's device: one copy each
        tokens = _right_pad(fulls, self._pad_id()).to(device)
        positions = torch.arange(tokens.shape[-1], device=device)
        lengths = torch.tensor([f.numel() for f in fulls], device=device)
        attention = (positions < lengths.unsqueeze(-1)).long()
        if self.generate:  # the response's tokens
            plens = torch.tensor([p.numel() for p in prompts], device=device)
            assistant = attention.bool() & (positions >= plens.unsqueeze(-1))
        elif "assistant" in extra:
            assistant = _right_pad(extra["assistant"], False).to(device)
        else:
            assistant = None
        out = td if self.inplace else td.empty()
        logp = None
        if self.return_log_probs or not self.generate:
            grad = torch.is_grad_enabled() and not self.generate
            with torch.set_grad_enabled(grad):
                logits = self._logits(tokens, attention)
                dist = LLMMaskedCategorical(logits, _no_first(attention.bool()))
                logp = dist.log_prob(tokens)
        self._write(out, extra, prompts, responses, fulls, tokens, attention, assistant, logp)
        if not tensordict.batch_dims:  # a jagged tensor has no squeeze along its batch
            out = out[0] if self.layout is torch.jagged else out.squeeze(0)
        return out

    def _write(self, out, extra, prompts, responses, fulls, tokens, attention, assistant, logp):
        """Writes the containers into ``out``: the tensors cut from ``tokens``,
        ``attention``, ``assistant`` and ``logp`` (``[B, T]``, right-padded, on the model's
        device; ``out`` moves them to its own device if it has one), the text decoded from
        the rows ``prompts``, ``responses`` and ``fulls`` (``None`` when scoring)."""
        n = len(fulls)
        lengths = [f.numel() for f in fulls]

        def rows_or_pad(values, fill=0):
            if values is None:
                return None
            return _right_pad(values, fill) if self.pad_output else values

        def container(cls, **fields):
            if self.pad_output:
                return cls(**fields, padded=True, batch_size=(n,))
            if self.layout is torch.jagged:
                nested = {k: None if v is None else jagged(v) for k, v in fields.items()}
                return cls(**nested, padded=False, batch_size=(n,))
            rows = []
            for i in range(n):
                rows.append(
                    cls(
                        **{k: (v[i] if v is not None else None) for k, v in fields.items()},
                        padded=False,
                        batch_size=(),
                    )
                )
            return lazy_stack(rows)

        offsets = {}

        def jagged(rows):
            # one offsets tensor per set of lengths: fields of the same lengths share their
            # ragged dimension, so that they combine (``log_probs * mask``)
            key = (rows[0].device, *(r.numel() for r in rows))
            if key not in offsets:
                bounds = [0, *itertools.accumulate(r.numel() for r in rows)]
                offsets[key] = torch.tensor(bounds, device=rows[0].device)
            lengths = key[1:]
            return torch.nested.nested_tensor_from_jagged(
                torch.cat(rows),
                offsets[key],
                min_seqlen=min(lengths),
                max_seqlen=max(lengths),  # else to_padded_tensor pads to the total length
            )

        def cut(padded):
            return None if padded is None else [padded[i, :k] for i, k in enumerate(lengths)]

        full_rows, log_rows = cut(tokens), cut(logp)
        tok_fields = {"full": full_rows}
        lp_fields = {"full": log_rows}
        if prompts is not None:
            plens = [p.numel() for p in prompts]
            tok_fields.update(
                prompt=[f[:p] for f, p in zip(full_rows, plens)],
                response=[f[p:] for f, p in zip(full_rows, plens)],
            )
            if log_rows is not None:
                lp_fields.update(
                    prompt=[lr[:p] for lr, p in zip(log_rows, plens)],
                    response=[lr[p:] for lr, p in zip(log_rows, plens)],
                )
        out.set(
            self.tokens_key,
            container(Tokens, **{k: rows_or_pad(v, self._pad_id()) for k, v in tok_fields.items()}),
        )
        out.set(
            self.masks_key,
            container(
                Masks,
                all_attention_mask=rows_or_pad(cut(attention.bool())),
                all_assistant_mask=rows_or_pad(cut(assistant)),
            ),
        )
        if log_rows is not None:
            lp_out = {k: rows_or_pad(v) for k, v in lp_fields.items()}
            if self.pad_output:
                out.set(self.log_probs_key, LogProbs(**lp_out, padded=True, batch_size=(n,)))
            else:
                out.set(self.log_probs_key, container(LogProbs, **lp_fields))
        if self.tokenizer is not None:
            decode = self.tokenizer.decode
            texts = {"full": [decode(f) for f in fulls]}
            if prompts is not None:
                texts.update(
                    prompt=[decode(p) for p in prompts],
                    response=[decode(r, skip_special_tokens=True) for r in responses],
                )
            out.set(
                self.text_key,
                lazy_stack(
                    [Text(**{k: v[i] for k, v in texts.items()}, batch_size=()) for i in range(n)]
                ),
            )
        if self.input_mode == "history" and self.generate:
            prompt_h = extra["history"]
            if prompt_h.batch_dims == 1:
                prompt_h = prompt_h.unsqueeze(0)
            resp = lazy_stack(
                [
                    History(
                        role="assistant",
                        content=self.tokenizer.decode(r, skip_special_tokens=True),
                        is_complete=bool(r.numel()) and int(r[-1]) == self.tokenizer.eos_token_id,
                        batch_size=(),
                    )
                    for r in responses
                ]
            ).unsqueeze(-1)
            out.set(self.history_key, ChatHistory(prompt=prompt_h, response=resp, batch_size=(n,)))


def _right_pad(rows: list[torch.Tensor], fill) -> torch.Tensor:
    """The rows ``[n_i]`` as one ``[B, max n_i]`` tensor (their dtype, on their device),
    right-padded with ``fill``."""
    width = max(r.numel() for r in rows)
    out = torch.full((len(rows), width), fill, dtype=rows[0].dtype, device=rows[0].device)
    for i, r in enumerate(rows):
        out[i, : r.numel()] = r
    return out


def _flag(value) -> bool:
    """A boolean stored in a tensordict: a bool, a one-element tensor, ``NonTensorData``
    or a ``NonTensorStack`` (true when every row's is)."""
    if isinstance(value, NonTensorStack):
        return all(bool(v) for v in value.tolist())
    if isinstance(value, NonTensorData):
        return bool(value.data)
    return bool(value)


def _parameters(model) -> Iterator[torch.Tensor]:
    """The parameters of ``model`` (none when it is not a module)."""
    return model.parameters() if isinstance(model, nn.Module) else iter(())


def _no_first(mask: torch.Tensor) -> torch.Tensor:
    mask = mask.clone()
    mask[..., 0] = False
    return mask
