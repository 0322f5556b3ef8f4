"""``LLMEnv``: text (or tokens) that each step extends by the policy's output (TorchRL's
older LLM environment; :class:`~rl.envs.llm.ChatEnv` is the current one)."""

from __future__ import annotations

import warnings
from collections.abc import Iterable

import torch
from tensordict import (
    LazyStackedTensorDict,
    NestedKey,
    NonTensorData,
    NonTensorStack,
    TensorDictBase,
    unravel_key,
)

from rl.core import Bounded, Composite, NonTensor, Unbounded

from .._env_base import EnvBase
from .transforms._dataloading import DataLoadingPrimer

__all__ = ["LLMEnv"]


class LLMEnv(EnvBase):
    """A text-generation environment: the observation is a string (or token ids) and each
    action is appended to it.

    A :class:`~rl.envs.llm.DataLoadingPrimer` (see :meth:`from_dataloader`) writes the
    prompt at reset; the env never ends an episode by itself unless ``eos_token_id`` is
    given (done when the action holds it) or ``assign_done`` writes per-token flags.

    Keyword Args:
        token_key (NestedKey): the token observation. Defaults to ``"tokens"``.
        str_key (NestedKey): the text observation. Defaults to ``"text"``.
        attention_key (NestedKey): the attention mask. Defaults to ``"attention_mask"``.
        action_key (NestedKey, optional): ``"text_response"`` (text) or
            ``"tokens_response"`` (tokens) by default.
        reward_key (NestedKey): defaults to ``"reward"``.
        from_text (bool): text observations and actions (``True``) or token ids.
            Defaults to ``True``.
        device (torch.device, optional): the env's device.
        vocab_size (int, optional): bounds the token specs.
        assign_reward (bool): write a zero reward per action token (tokens only).
        assign_done (bool): write per-token done flags under ``"tokens_data"`` (tokens only).
        batch_size (int or torch.Size, optional): at most one dim. Defaults to ``()``.
        has_attention (bool): keep an attention mask beside the tokens. Defaults to ``True``.
        as_llm_data (bool): not supported (``False``).
        eos_token_id (int, optional): the action token that ends an episode.

    Raises:
        ValueError: ``from_text`` with ``assign_reward`` / ``assign_done``.
        TypeError: a batch size of more than one dim.

    Examples:
        >>> import torch
        >>> from rl.envs.llm import LLMEnv
        >>> env = LLMEnv.from_dataloader([{"text": ["2+2="]}], batch_size=(1,), eos_token_id=0)
        >>> td = env.reset()
        >>> td["text_response"], td["tokens_response"] = ["4"], torch.tensor([[7]])
        >>> list(env.step(td)["next", "text"])
        ['2+2=4']
    """

    _DEFAULT_TOKEN_KEY = "tokens"
    _DEFAULT_STR_KEY = "text"
    _DEFAULT_ATTENTION_KEY = "attention_mask"
    _DEFAULT_ACTION_TOKENS_KEY = "tokens_response"
    _DEFAULT_ACTION_STR_KEY = "text_response"

    def __init__(
        self,
        *,
        token_key: NestedKey | None = None,
        str_key: NestedKey | None = None,
        attention_key: NestedKey | None = None,
        action_key: NestedKey | None = None,
        reward_key: NestedKey = "reward",
        from_text: bool = True,
        device: torch.device | None = None,
        vocab_size: int | None = None,
        assign_reward: bool = False,
        assign_done: bool = False,
        batch_size: int | torch.Size | None = None,
        has_attention: bool = True,
        as_llm_data: bool = False,
        eos_token_id: int | None = None,
    ):
        warnings.warn("LLMEnv is deprecated: use ChatEnv instead", DeprecationWarning, stacklevel=2)
        if as_llm_data:
            raise NotImplementedError("as_llm_data=True is not supported")
        if from_text and (assign_reward or assign_done):
            raise ValueError(
                "from_text cannot be True when either of assign_reward / assign_done are True: "
                "tokens are required to give the reward its shape"
            )
        if batch_size is None:
            batch_size = ()
        elif isinstance(batch_size, int):
            batch_size = (batch_size,)
        if len(batch_size) > 1:
            raise TypeError(f"batch-size of LLMEnv must be 0 or 1d, got {tuple(batch_size)}")
        super().__init__(device=device, batch_size=batch_size)
        self.from_text = from_text
        self.has_attention = has_attention
        self.vocab_size = vocab_size
        self.token_key = unravel_key(token_key or self._DEFAULT_TOKEN_KEY)
        self.str_key = unravel_key(str_key or self._DEFAULT_STR_KEY)
        self.attention_key = unravel_key(attention_key or self._DEFAULT_ATTENTION_KEY)
        if action_key is None:
            action_key = (
                self._DEFAULT_ACTION_STR_KEY if from_text else self._DEFAULT_ACTION_TOKENS_KEY
            )
        self._action_key = unravel_key(action_key)
        self._reward_key = unravel_key(reward_key)
        self.assign_reward = assign_reward
        self.assign_done = assign_done
        self.eos_token_id = eos_token_id
        if eos_token_id is None:
            warnings.warn(
                "eos_token_id is missing: the env cannot tell when a generation ends",
                UserWarning,
                stacklevel=2,
            )
        self._make_specs()

    def _make_specs(self) -> None:
        bs, device = self.batch_size, self.device

        def tokens():
            if self.vocab_size is None:
                return Unbounded(shape=(*bs, -1), dtype=torch.int64, device=device)
            return Bounded(0, self.vocab_size, shape=(*bs, -1), dtype=torch.int64, device=device)

        if self.from_text:
            obs = {self.str_key: NonTensor(shape=bs, device=device, example_data="a string")}
            act = {self._action_key: NonTensor(shape=bs, device=device, example_data="a string")}
        else:
            obs = {self.token_key: tokens()}
            if self.has_attention:
                obs[self.attention_key] = Unbounded(
                    shape=(*bs, -1), dtype=torch.int64, device=device
                )
            act = {self._action_key: tokens()}
        self.full_observation_spec = Composite(obs, shape=bs, device=device)
        self.full_action_spec = Composite(act, shape=bs, device=device)
        if self.assign_reward:
            self.full_reward_spec = Composite(
                {self._reward_key: Unbounded(shape=(*bs, -1), device=device)},
                shape=bs,
                device=device,
            )
        done = {
            "done": Unbounded(shape=(*bs, 1), dtype=torch.bool, device=device),
            "terminated": Unbounded(shape=(*bs, 1), dtype=torch.bool, device=device),
        }
        if self.assign_done:
            done["tokens_data"] = Composite(
                done=Unbounded(shape=(*bs, -1), dtype=torch.bool, device=device),
                terminated=Unbounded(shape=(*bs, -1), dtype=torch.bool, device=device),
                shape=bs,
                device=device,
            )
        self.full_done_spec = Composite(done, shape=bs, device=device)

    def _post_init(self) -> None:
        super()._post_init()
        if not self.assign_reward:  # TorchRL's LLMEnv writes no reward unless asked
            self.full_reward_spec = Composite(shape=self.batch_size, device=self.device)

    @classmethod
    def from_dataloader(
        cls,
        dataloader: Iterable,
        *,
        tokenizer=None,
        token_key: NestedKey | None = None,
        str_key: NestedKey | None = None,
        attention_key: NestedKey | None = None,
        action_key: NestedKey | None = None,
        reward_key: NestedKey = "reward",
        from_text: bool = True,
        device: torch.device | None = None,
        vocab_size: int | None = None,
        batch_size: int | torch.Size | None = None,
        has_attention: bool = True,
        assign_reward: bool = False,
        assign_done: bool = False,
        primers: Composite | None = None,
        example_data=None,
        stack_method=None,
        repeats: int | None = None,
        group_repeats: bool = False,
        eos_token_id: int | None = None,
    ):
        """An ``LLMEnv`` whose prompts come from ``dataloader`` through a
        :class:`~rl.envs.llm.DataLoadingPrimer` (same arguments as the constructor, plus
        the primer's ``primers``, ``stack_method``, ``repeats``, ``group_repeats``).
        ``tokenizer`` is accepted for TorchRL's signature: tokenize in the dataloader."""
        primer = DataLoadingPrimer(
            dataloader=dataloader,
            primers=primers,
            stack_method=stack_method,
            repeats=repeats,
            device=device,
            group_repeats=group_repeats,
            batch_size=batch_size,
        )
        env = cls(
            from_text=from_text,
            device=device,
            token_key=token_key,
            str_key=str_key,
            attention_key=attention_key,
            action_key=action_key,
            reward_key=reward_key,
            vocab_size=vocab_size,
            assign_reward=assign_reward,
            assign_done=assign_done,
            batch_size=primer.batch_size,
            has_attention=has_attention,
            eos_token_id=eos_token_id,
        )
        return env.append_transform(primer)

    # ------------------------------------------------------------------ step
    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        out = tensordict.empty()
        action = tensordict.get(self._action_key, None)
        if action is None:
            raise KeyError(f"LLMEnv.step() needs the action at {self._action_key!r}")
        if self.from_text:
            obs = tensordict.get(self.str_key)
            if not self.batch_size:
                if not isinstance(obs, str) or not isinstance(action, str):
                    raise TypeError(
                        f"a batch-less LLMEnv takes str observations and actions, got "
                        f"{type(obs).__name__} and {type(action).__name__}"
                    )
                out.set(self.str_key, NonTensorData(obs + action))
            else:
                obs_list = obs.tolist() if hasattr(obs, "tolist") else list(obs)
                act_list = action.tolist() if hasattr(action, "tolist") else list(action)
                out.set(
                    self.str_key,
                    NonTensorStack(*[NonTensorData(o + a) for o, a in zip(obs_list, act_list)]),
                )
        else:
            obs = tensordict.get(self.token_key)
            if getattr(obs, "is_nested", False) or isinstance(tensordict, LazyStackedTensorDict):
                obs_rows = tensordict.get(self.token_key, as_list=True)
                act_rows = tensordict.get(self._action_key, as_list=True)
                out.set(
                    self.token_key,
                    torch.nested.as_nested_tensor(
                        [torch.cat([o, a], -1) for o, a in zip(obs_rows, act_rows)]
                    ),
                )
            else:
                out.set(self.token_key, torch.cat([obs, action], -1))
                if self.has_attention:
                    mask = tensordict.get(self.attention_key, None)
                    if mask is None:
                        mask = torch.ones_like(obs)
                    out.set(self.attention_key, torch.cat([mask, torch.ones_like(action)], -1))
        if self.assign_reward:
            out.set(self._reward_key, torch.zeros_like(action, dtype=torch.get_default_dtype()))
        self._make_done(tensordict, out)
        return out

    def _make_done(self, tensordict: TensorDictBase, out: TensorDictBase) -> None:
        shape = (*tensordict.batch_size, 1)
        done = torch.zeros(shape, dtype=torch.bool, device=self.device)
        per_token = None
        if self.eos_token_id is not None:
            key = self._DEFAULT_ACTION_TOKENS_KEY if self.from_text else self._action_key
            action = tensordict.get(key, None)
            if action is None:
                raise KeyError(
                    f"LLMEnv(eos_token_id={self.eos_token_id}) reads the action tokens at "
                    f"{key!r} to find the end of generation; it is missing"
                )
            per_token = action == self.eos_token_id
            done = per_token.any(-1, keepdim=True)
        if self.assign_done:
            if per_token is None:
                per_token = torch.zeros_like(tensordict.get(self._action_key), dtype=torch.bool)
            out.set(("tokens_data", "done"), per_token.clone())
            out.set(("tokens_data", "terminated"), per_token.clone())
        out.set("done", done)
        out.set("terminated", done.clone())

    # ------------------------------------------------------------------ reset
    def _reset(self, tensordict: TensorDictBase | None, **kwargs) -> TensorDictBase:
        key = self.str_key if self.from_text else self.token_key
        if tensordict is None or tensordict.get(key, None) is None:
            have = [] if tensordict is None else sorted(map(str, tensordict.keys(True, True)))
            raise KeyError(
                f"LLMEnv.reset() needs the observation {key!r} (keys: {have}); append a "
                "DataLoadingPrimer (LLMEnv.from_dataloader) to write prompts at reset"
            )
        out = tensordict.exclude("_reset").copy()
        shape = (*tensordict.batch_size, 1)
        out.set("done", torch.zeros(shape, dtype=torch.bool, device=self.device))
        out.set("terminated", torch.zeros(shape, dtype=torch.bool, device=self.device))
        if self.assign_done:  # no action yet: one False flag per row
            out.set(
                ("tokens_data", "done"), torch.zeros(shape, dtype=torch.bool, device=self.device)
            )
            out.set(
                ("tokens_data", "terminated"),
                torch.zeros(shape, dtype=torch.bool, device=self.device),
            )
        return out

    def _set_seed(self, seed: int | None) -> None:
        return None
