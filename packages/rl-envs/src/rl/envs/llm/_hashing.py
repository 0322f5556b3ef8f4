"""``LLMHashingEnv``: token chains named by a running hash, one token per step."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from tensordict import NestedKey, NonTensorData, NonTensorStack, TensorDict, TensorDictBase

from rl.core import Categorical, Composite, NonTensor, Unbounded
from rl.data import SipHash

from .._env_base import EnvBase

__all__ = ["LLMHashingEnv"]


class LLMHashingEnv(EnvBase):
    """A token-by-token generation env whose state carries a hash of the chain so far.

    The observation is the token ids (``observation_key``), their hash under
    ``"hashing"`` (``[*B, 1]``) and, with ``text_output``, their decoded text. A step
    appends the action token (``"action"``, ``[*B, 1]``); the new hash is
    ``hashing_module(cat([hash, action]))``, so that equal chains get equal hashes (nodes
    of a tree search, repeated prefixes). The env never ends an episode. It takes any
    leading batch dims (not batch-locked).

    Args:
        vocab_size (int, optional): the number of tokens; defaults to the tokenizer's.

    Keyword Args:
        hashing_module (callable, optional): ``[*B, T] -> [*B]`` int64 hashes; defaults to
            :class:`rl.data.SipHash`.
        observation_key (NestedKey): defaults to ``"observation"``.
        text_output (bool): write the decoded text. Defaults to ``True``.
        tokenizer: ``decode`` / ``batch_decode`` for the text, and ``__call__`` for
            :meth:`make_tensordict`.
        text_key (NestedKey, optional): defaults to ``"text"``.

    Raises:
        TypeError: neither ``vocab_size`` nor a tokenizer.
        RuntimeError: a reset without the prompt tokens.
    """

    def __init__(
        self,
        vocab_size: int | None = None,
        *,
        hashing_module: Callable[[torch.Tensor], torch.Tensor] | None = None,
        observation_key: NestedKey = "observation",
        text_output: bool = True,
        tokenizer=None,
        text_key: NestedKey | None = "text",
    ):
        if vocab_size is None:
            if tokenizer is None:
                raise TypeError("LLMHashingEnv needs a vocab_size integer when tokenizer is None")
            vocab_size = tokenizer.vocab_size
        super().__init__()
        self.__dict__["_batch_locked"] = False
        self._hashing_module = SipHash() if hashing_module is None else hashing_module
        self._tokenizer = tokenizer
        self.observation_key = observation_key
        self.text_output = text_output
        if text_output and text_key is None:
            text_key = "text"
        self.text_key = text_key if text_output else None
        obs = {
            observation_key: Categorical(n=vocab_size, shape=(-1,), dtype=torch.int64),
            "hashing": Unbounded(shape=(1,), dtype=torch.int64),
        }
        if self.text_key is not None:
            obs[self.text_key] = NonTensor(shape=(), example_data="a string")
        self.full_observation_spec = Composite(obs)
        self.full_action_spec = Composite(
            action=Categorical(vocab_size, shape=(1,), dtype=torch.int64)
        )

    def _post_init(self) -> None:
        super()._post_init()
        self.full_reward_spec = Composite(shape=self.batch_size)  # no reward, as TorchRL

    def make_tensordict(self, input: str | list[str]) -> TensorDictBase:
        """Tokenizes ``input`` (a prompt or a list of prompts) and resets on it.

        The tokenizer is called on ``input`` alone; it may return the ids (a list, a
        tensor) or a mapping with ``"input_ids"`` (a Hugging Face tokenizer's output).
        """
        ids = self._tokenizer(input)
        if isinstance(ids, Mapping):
            ids = ids["input_ids"]
        ids = torch.as_tensor(ids)
        if isinstance(input, str) and ids.ndim > 1:
            ids = ids[0]
        td = TensorDict({self.observation_key: ids}, batch_size=ids.shape[:-1], device=self.device)
        return self.reset(td)

    def _hash(self, values: torch.Tensor) -> torch.Tensor:
        """``[*B, T] -> [*B, 1]`` hashes of the last dim."""
        if values.ndim == 1:
            return self._hashing_module(values.unsqueeze(0)).reshape(1)
        flat = values.reshape(-1, values.shape[-1])
        return self._hashing_module(flat).reshape(*values.shape[:-1], 1)

    def _text(self, obs: torch.Tensor):
        if obs.ndim > 1:
            return NonTensorStack(*[NonTensorData(t) for t in self._tokenizer.batch_decode(obs)])
        return NonTensorData(self._tokenizer.decode(obs))

    def _flags(self, batch_size) -> dict:
        return {
            "done": torch.zeros((*batch_size, 1), dtype=torch.bool),
            "terminated": torch.zeros((*batch_size, 1), dtype=torch.bool),
        }

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        obs = None if tensordict is None else tensordict.get(self.observation_key, None)
        if obs is None:
            raise RuntimeError(
                f"resetting {type(self).__name__} needs a prompt: the token ids at "
                f"{self.observation_key!r}"
            )
        out = tensordict.empty()
        out.set(self.observation_key, obs)
        out.set("hashing", self._hash(obs))
        if self.text_key is not None:
            out.set(self.text_key, self._text(obs))
        out.update(self._flags(tensordict.batch_size))
        return out

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get("action")
        obs = torch.cat([tensordict.get(self.observation_key), action], -1)
        out = tensordict.empty()
        out.set(self.observation_key, obs)
        out.set("hashing", self._hash(torch.cat([tensordict.get("hashing"), action], -1)))
        if self.text_key is not None:
            out.set(self.text_key, self._text(obs))
        out.update(self._flags(tensordict.batch_size))
        return out

    def _set_seed(self, seed: int | None) -> None:
        return None
