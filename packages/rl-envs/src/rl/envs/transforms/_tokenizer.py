"""``Tokenizer``: strings in a tensordict become token ids (and back, for actions).

``transformers`` (``rl-envs[llm]``) is imported only to load a tokenizer given by name.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import NestedKey, NonTensorData, NonTensorStack, TensorDictBase

from rl.core import Bounded, Composite

from ._base import Transform

__all__ = ["Tokenizer"]


def _str_leaves(items: list) -> list:
    """``items`` (nested lists, from a stack of more than one dim) with ``str`` leaves."""
    return [_str_leaves(v) if isinstance(v, list) else str(v) for v in items]


def _strings(value) -> str | list:
    if isinstance(value, NonTensorStack):
        return _str_leaves(value.tolist())
    if isinstance(value, NonTensorData):
        return _strings(value.data)
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return str(value)


def _nested_shape(text) -> tuple[int, ...]:
    """The batch shape of a string (``()``) or of nested lists of strings."""
    shape = []
    while isinstance(text, list):
        shape.append(len(text))
        if not text:
            break
        text = text[0]
    return tuple(shape)


def _flatten(text) -> list[str]:
    if not text or not isinstance(text[0], list):
        return text
    return [t for row in text for t in _flatten(row)]


def _load_tokenizer(name: str):
    """``transformers.AutoTokenizer.from_pretrained(name)`` (a hub name or a local path)."""
    try:
        from transformers import AutoTokenizer
    except ImportError as err:
        raise ImportError(
            f"Tokenizer(tokenizer={name!r}) loads the tokenizer with transformers, which is "
            'not installed: pip install "rl-envs[llm]"'
        ) from err
    return AutoTokenizer.from_pretrained(name)


def _sibling(key: NestedKey, name: str) -> NestedKey:
    return name if isinstance(key, str) else (*key[:-1], name)


class Tokenizer(Transform):
    """Tokenizes the strings at ``in_keys`` into ``out_keys`` (with an ``attention_mask``
    beside each), and decodes the token ids at ``out_keys_inv`` back into strings at
    ``in_keys_inv`` before the env steps.

    Args:
        in_keys, out_keys (list of NestedKey, optional): strings in, token ids out.
        in_keys_inv, out_keys_inv (list of NestedKey, optional): strings the env reads,
            token ids the policy writes.

    Keyword Args:
        tokenizer: a ``transformers`` tokenizer, or the name or local path of one
            (loaded with ``transformers.AutoTokenizer.from_pretrained``). Required:
            TorchRL's default (``None`` -> bert-base-uncased, a download) is refused.
        use_raw_nontensor (bool): kept for TorchRL's signature.
        additional_tokens (list of str, optional): added to the tokenizer's vocabulary.
        skip_special_tokens (bool): when decoding. Defaults to ``True``.
        add_special_tokens (bool): when encoding. Defaults to ``False``.
        padding (bool): pad a batch of strings to the longest. Defaults to ``True``.
        max_length (int, optional): pad every sequence to this length; a string with more
            tokens raises.
        return_attention_mask (bool): write ``attention_mask`` beside the ids. Defaults
            to ``True``.
        missing_tolerance (bool): skip missing keys. Defaults to ``True``.
        call_before_reset (bool): tokenize the reset INPUT (before the base env resets).
            Defaults to ``False``.

    The token ids go to the device of the env's specs when the transform sits in an env
    (TorchRL's behaviour); decoded strings are plain non-tensor data. Specs: each
    ``out_key`` is a ``Bounded`` int64 spec ``[0, len(tokenizer))`` of shape
    ``[*env batch, max_length]`` (``-1`` when ``max_length`` is None), with an
    ``attention_mask`` ``Bounded(0, 2)`` beside it; with ``in_keys_inv``, the env's
    string action (or state) entry is exposed to the policy as such a token spec at
    ``out_keys_inv``.

    Raises:
        ValueError: no tokenizer, or a string longer than ``max_length`` tokens (the
            error names the key).
        KeyError: two ``out_keys`` whose ``attention_mask`` entries would collide, or an
            ``in_keys_inv`` entry the env's input specs lack.

    Examples:
        >>> from tensordict import TensorDict
        >>> from rl.envs.llm import Tokenizer
        >>> t = Tokenizer(in_keys=["text"], out_keys=["tokens"], tokenizer=tok)  # doctest: +SKIP
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        in_keys_inv: Sequence[NestedKey] | None = None,
        out_keys_inv: Sequence[NestedKey] | None = None,
        *,
        tokenizer=None,
        use_raw_nontensor: bool = False,
        additional_tokens: list[str] | None = None,
        skip_special_tokens: bool = True,
        add_special_tokens: bool = False,
        padding: bool = True,
        max_length: int | None = None,
        return_attention_mask: bool = True,
        missing_tolerance: bool = True,
        call_before_reset: bool = False,
    ):
        if tokenizer is None:
            raise ValueError(
                "Tokenizer needs a tokenizer (TorchRL's default downloads "
                "bert-base-uncased; rl downloads nothing by default): pass tokenizer= "
                "a transformers tokenizer object or the name / local path of one"
            )
        if isinstance(tokenizer, str):
            tokenizer = _load_tokenizer(tokenizer)
        super().__init__(
            in_keys=in_keys, out_keys=out_keys, in_keys_inv=in_keys_inv, out_keys_inv=out_keys_inv
        )
        self.tokenizer = tokenizer
        if additional_tokens:
            tokenizer.add_tokens(additional_tokens)
        self.use_raw_nontensor = use_raw_nontensor
        self.skip_special_tokens = skip_special_tokens
        self.add_special_tokens = add_special_tokens
        self.padding = padding
        self.max_length = max_length
        self.return_attention_mask = return_attention_mask
        self.missing_tolerance = missing_tolerance
        self.call_before_reset = call_before_reset

    # ------------------------------------------------------------------ encode / decode
    def call_tokenizer_fn(self, value, key: NestedKey = "text"):
        """``(ids, attention_mask)`` of a string (``[T]``) or a list of strings (``[B, T]``)."""
        text = _strings(value)
        # a batch of more than one dim ([B1, B2] strings): tokenized flat, then reshaped
        shape = _nested_shape(text)
        batch = [text] if isinstance(text, str) else _flatten(text)
        ids = [
            self.tokenizer(t, add_special_tokens=self.add_special_tokens)["input_ids"]
            for t in batch
        ]
        if self.max_length is not None:
            for t, row in zip(batch, ids):
                if len(row) > self.max_length:
                    raise ValueError(
                        f"the text at {key!r} tokenizes to {len(row)} tokens, more than "
                        f"max_length={self.max_length}: {t[:40]!r}..."
                    )
        width = self.max_length or max(len(r) for r in ids)
        if not self.padding and self.max_length is None and len({len(r) for r in ids}) > 1:
            width = None
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        if width is None:
            rows = [torch.tensor(r, dtype=torch.long) for r in ids]
            out = torch.nested.as_nested_tensor(rows)
            mask = torch.nested.as_nested_tensor([torch.ones_like(r) for r in rows])
        else:
            out = torch.full((len(ids), width), pad, dtype=torch.long)
            mask = torch.zeros((len(ids), width), dtype=torch.long)
            # the tokenizer's side, as when it pads itself (TorchRL calls it)
            left = getattr(self.tokenizer, "padding_side", "right") == "left"
            for i, r in enumerate(ids):
                cols = slice(width - len(r), width) if left else slice(0, len(r))
                out[i, cols] = torch.tensor(r, dtype=torch.long)
                mask[i, cols] = 1
        if isinstance(text, str):
            out, mask = out[0], mask[0]
        elif len(shape) > 1:
            if width is None:
                raise ValueError(
                    f"the texts at {key!r} (a batch of shape {tuple(shape)}) tokenize to "
                    "rows of different lengths: pass padding=True or max_length"
                )
            out, mask = out.reshape(*shape, width), mask.reshape(*shape, width)
        device = self._env_device()
        if device is not None and out.device != device:
            out, mask = out.to(device), mask.to(device)
        return out, mask

    def _env_device(self) -> torch.device | None:
        """The device of the env this transform sits in (None outside an env)."""
        parent = self.parent
        return None if parent is None else parent.device

    def call_tokenizer_inv_fn(self, value: torch.Tensor):
        """Strings of ``[T]`` or ``[B, T]`` token ids."""
        if value.ndim == 1:
            return NonTensorData(
                self.tokenizer.decode(value.tolist(), skip_special_tokens=self.skip_special_tokens)
            )
        texts = self.tokenizer.batch_decode(
            value.tolist(), skip_special_tokens=self.skip_special_tokens
        )
        return NonTensorStack(*[NonTensorData(t) for t in texts])

    # ------------------------------------------------------------------ hooks
    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            value = next_tensordict.get(in_key, None)
            if value is None:
                if self.missing_tolerance:
                    continue
                raise KeyError(f"Tokenizer: {in_key!r} is not in the tensordict")
            ids, mask = self.call_tokenizer_fn(value, in_key)
            next_tensordict.set(out_key, ids)
            if self.return_attention_mask:
                next_tensordict.set(_sibling(out_key, "attention_mask"), mask)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self._call(tensordict)

    def _reset_env_preprocess(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.call_before_reset:
            tol, self.missing_tolerance = self.missing_tolerance, True
            try:
                return self._call(tensordict)
            finally:
                self.missing_tolerance = tol
        return tensordict

    def _reset(self, tensordict, tensordict_reset):
        if self.call_before_reset:
            return tensordict_reset
        return super()._reset(tensordict, tensordict_reset)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        for in_key, out_key in zip(self.in_keys_inv, self.out_keys_inv):
            # a lazy stack of ragged token rows (one per env) comes padded
            pad = self.tokenizer.pad_token_id
            ids = tensordict.get(
                out_key, None, as_padded_tensor=True, padding_value=0 if pad is None else pad
            )
            if ids is None:
                if self.missing_tolerance:
                    continue
                raise KeyError(f"Tokenizer: {out_key!r} is not in the tensordict")
            tensordict.set(in_key, self.call_tokenizer_inv_fn(ids))
        return tensordict

    def _token_spec(self, shape, device, high: int | None = None) -> Bounded:
        """Ids in ``[0, len(tokenizer))`` (or ``[0, high)``) of ``[*shape, max_length or -1]``."""
        return Bounded(
            0,
            len(self.tokenizer) if high is None else high,
            shape=(*shape, self.max_length or -1),
            dtype=torch.int64,
            device=device,
        )

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        masks = set()
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            # an entry the specs lack (tokenized at reset from a data loader) still gets
            # its spec, at the observation spec's device
            if in_key in observation_spec.keys(True, True):
                device = observation_spec[in_key].device
            else:
                device = observation_spec.device
            shape = observation_spec.shape
            observation_spec[out_key] = self._token_spec(shape, device)
            if self.return_attention_mask:
                mask_key = _sibling(out_key, "attention_mask")
                if mask_key in masks:
                    raise KeyError(
                        f"Tokenizer: out_keys {self.out_keys} would write the same "
                        f"attention mask {mask_key!r} twice; nest the token entries under "
                        "different parents"
                    )
                masks.add(mask_key)
                observation_spec[mask_key] = self._token_spec(shape, device, high=2)
        return observation_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        """The env's string action / state entries ``in_keys_inv`` become token specs at
        ``out_keys_inv`` (what the policy writes)."""
        input_spec = input_spec.clone()
        for in_key, out_key in zip(self.in_keys_inv, self.out_keys_inv):
            for part in ("full_state_spec", "full_action_spec"):
                if part in input_spec.keys() and in_key in input_spec[part].keys(True, True):
                    spec = input_spec[part]
                    break
            else:
                raise KeyError(
                    f"Tokenizer: in_keys_inv entry {in_key!r} is in neither the action nor "
                    f"the state spec of the env (action keys "
                    f"{list(input_spec['full_action_spec'].keys(True, True))})"
                )
            inner = spec.pop(in_key)
            spec[out_key] = self._token_spec(spec.shape, inner.device)
        return input_spec
