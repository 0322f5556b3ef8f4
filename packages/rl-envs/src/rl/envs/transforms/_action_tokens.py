"""ActionTokenizerTransform: actions <-> the tokens of a token (RT-2 / OpenVLA) policy."""

from __future__ import annotations

from typing import Literal

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey, unravel_key

from rl.core import Categorical
from rl.core.vla import ACTION_KEY, ACTION_TOKENS_KEY, ActionTokenizerBase

from ._base import Transform

__all__ = ["ActionTokenizerTransform"]


class ActionTokenizerTransform(Transform):
    """Encodes actions into tokens and decodes tokens into actions with a tokenizer.

    The bins belong to the tokenizer (dataset bounds, OpenVLA's vocabulary tail), so the
    same instance serves the replay buffer (targets) and the env (execution):

    - ``mode="encode"`` (default): ``forward`` writes ``tokenizer.encode(td[in_key])`` at
      ``out_key`` (a replay-buffer sample gets its token targets); ``inv`` decodes the
      tokens at ``out_key`` into the action at ``in_key`` (a token policy acting on an
      env). In an env, the policy-facing action spec becomes a
      :class:`~rl.core.Categorical` over the vocabulary at ``out_key`` in place of the
      continuous action, and a step without tokens raises.
    - ``mode="decode"``: the other way round (``forward`` decodes, ``inv`` encodes), to
      sit after a token policy in a ``TensorDictSequential``; the env's specs are left
      alone.

    Without a parent env, ``inv`` passes data that holds no tokens through unchanged
    (raw actions written to a replay buffer).

    Args:
        tokenizer: the codec (an :class:`~rl.core.vla.ActionTokenizerBase`).
        in_key: the continuous action (``"action"``).
        out_key: the tokens (``("vla_action", "tokens")``).
        mode: ``"encode"`` or ``"decode"``.

    Raises:
        TypeError: ``tokenizer`` is not an ``ActionTokenizerBase``.
        ValueError: an unknown ``mode``.

    Examples:
        >>> from tensordict import TensorDict
        >>> from rl.core.vla import UniformActionTokenizer
        >>> t = ActionTokenizerTransform(UniformActionTokenizer(256, low=-1.0, high=1.0))
        >>> t(TensorDict({"action": torch.tensor([[-1.0, 0.0, 1.0]])}, [1]))["vla_action", "tokens"]
        tensor([[  0, 128, 255]])
    """

    def __init__(
        self,
        tokenizer: ActionTokenizerBase,
        *,
        in_key: NestedKey = ACTION_KEY,
        out_key: NestedKey = ACTION_TOKENS_KEY,
        mode: Literal["encode", "decode"] = "encode",
    ) -> None:
        if not isinstance(tokenizer, ActionTokenizerBase):
            raise TypeError(
                f"tokenizer must be an ActionTokenizerBase, got {type(tokenizer).__name__}"
            )
        if mode not in ("encode", "decode"):
            raise ValueError(f"mode must be 'encode' or 'decode', got {mode!r}")
        action_key, token_key = unravel_key(in_key), unravel_key(out_key)
        if mode == "encode":
            # the forward side is ``forward`` alone (data path): no key is declared for
            # it, so the env's output specs never see the tokens
            super().__init__(in_keys=[], in_keys_inv=[action_key], out_keys_inv=[token_key])
        else:
            super().__init__(
                in_keys=[token_key],
                out_keys=[action_key],
                in_keys_inv=[token_key],
                out_keys_inv=[action_key],
            )
        self.tokenizer = tokenizer
        self.mode = mode
        self._action_key = action_key
        self._token_key = token_key

    @property
    def in_key(self) -> NestedKey:
        return self._action_key

    @property
    def out_key(self) -> NestedKey:
        return self._token_key

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.mode == "encode":
            source, dest, fn = self._action_key, self._token_key, self.tokenizer.encode
        else:
            source, dest, fn = self._token_key, self._action_key, self.tokenizer.decode
        value = tensordict.get(source, None)
        if value is None:
            if self.missing_tolerance:
                return tensordict
            raise KeyError(
                f"{type(self).__name__} ({self.mode}) expected {source!r} in the tensordict; "
                f"keys present: {sorted(map(str, tensordict.keys(True, True)))}"
            )
        tensordict.set(dest, fn(value))
        return tensordict

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        # the env's step / reset outputs carry no action: nothing to transform there
        return next_tensordict

    @property
    def has_step(self) -> bool:
        return False

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        if self.mode == "encode":
            return self.tokenizer.decode(value)
        return self.tokenizer.encode(value)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        expected = self._token_key if self.mode == "encode" else self._action_key
        if tensordict.get(expected, None) is None:
            if self.container is None or self._top_env() is None:
                return tensordict  # raw data written to a buffer
            raise KeyError(
                f"{type(self).__name__} expected the policy's {expected!r} entry to "
                f"{'decode' if self.mode == 'encode' else 'encode'} for the env, but it is "
                f"absent; keys present: {sorted(map(str, tensordict.keys(True, True)))}"
            )
        return super()._inv_call(tensordict)

    def transform_input_spec(self, input_spec):
        if self.mode == "decode":
            return input_spec
        input_spec = input_spec.clone()
        actions = input_spec["full_action_spec"]
        if self._action_key not in actions.keys(True, True):
            raise KeyError(
                f"{type(self).__name__} found no {self._action_key!r} in the env's action spec; "
                f"keys present: {list(actions.keys(True, True))}"
            )
        leaf = actions[self._action_key]
        shape = leaf.shape
        concrete = torch.Size([1 if d < 0 else d for d in shape])
        token_spec = Categorical(
            n=self.tokenizer.vocab_size, shape=concrete, device=leaf.device, dtype=torch.long
        )
        if concrete != shape:  # a dynamic (-1) dim, as MultiAction's chunk
            token_spec = token_spec.expand(shape)
        actions[self._token_key] = token_spec
        if self._token_key != self._action_key:
            del actions[self._action_key]
        input_spec["full_action_spec"] = actions
        return input_spec

    def transform_output_spec(self, output_spec):
        return output_spec
