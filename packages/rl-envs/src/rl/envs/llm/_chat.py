"""``ChatEnv``: a conversation as an environment, and ``DatasetChatEnv``: one fed by a dataset.

At reset the env reads a query (a string, a list of messages or a ``History``) under
``data_key`` and writes the prompt (``("history", "prompt")``, ``("text", "prompt")`` or
``("tokens", "prompt")`` after the input mode). At step it reads what the policy wrote
under ``(mode, "full")`` (the prompt followed by the response) and makes it the next
prompt, so that each step extends the conversation by one turn.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal

import torch
from tensordict import (
    LazyStackedTensorDict,
    NonTensorData,
    NonTensorStack,
    TensorDict,
    TensorDictBase,
    lazy_stack,
)

from rl.core import Composite, NonTensor
from rl.data.llm import ROLES, ChatHistory, History, Text, Tokens

from .._env_base import EnvBase
from ..transforms import TransformedEnv
from ._dataset import make_dataloader
from .transforms._dataloading import DataLoadingPrimer

__all__ = ["ChatEnv", "DatasetChatEnv"]

_INPUT_MODES = ("history", "text", "tokens")


def _check_role(name: str, role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"{name}={role!r} is not a chat role; expected one of {ROLES}")


def _to_python(content: Any) -> Any:
    """A query as plain Python (str, list, dict) or a ``History``."""
    if isinstance(content, History):
        return content
    if isinstance(content, NonTensorData):
        return _to_python(content.data)
    if isinstance(content, NonTensorStack):
        return [_to_python(item) for item in content.tolist()]
    if isinstance(content, (list, tuple)):
        return [_to_python(item) for item in content]
    return content


def _is_message(obj: Any) -> bool:
    return isinstance(obj, dict) and "role" in obj and "content" in obj


def _is_chat(obj: Any) -> bool:
    """A message, a list of messages or a list of lists of messages."""
    if _is_message(obj):
        return True
    if isinstance(obj, list) and obj:
        first = obj[0]
        return _is_message(first) or (
            isinstance(first, list) and bool(first) and _is_message(first[0])
        )
    return False


def _chat_reset(reset, tensordict: TensorDictBase | None, mode: str, **kwargs) -> TensorDictBase:
    """``reset`` (``EnvBase.reset``) where the new prompts REPLACE the caller's ``mode``
    container (conversations of another length cannot be updated in place), and the
    conversations outside a partial ``"_reset"`` mask keep theirs."""
    if tensordict is None:
        return reset(None, **kwargs)
    mask = tensordict.get("_reset", None)
    previous = tensordict.get(mode, None)
    if previous is None or (mask is not None and not bool(mask.any())):
        return reset(tensordict, **kwargs)
    tensordict.del_(mode)
    out = reset(tensordict, **kwargs)
    if mask is not None and not bool(mask.all()):
        keep = mask.reshape(-1)
        fresh = out.get(mode)
        rows = [fresh[i] if keep[i] else previous[i] for i in range(keep.numel())]
        out.set(mode, lazy_stack(rows).reshape(out.batch_size))
    return out


class ChatEnv(EnvBase):
    """A chat environment: the observation is the conversation so far, the action its next turn.

    Reset reads ``data_key`` (default ``"query"``) from the input tensordict: a string (a
    user message), a list of ``{"role", "content"}`` messages or a
    :class:`~rl.data.llm.History`; a ``system_prompt`` is put first. It writes the
    prompt, as a :class:`~rl.data.llm.ChatHistory` under ``"history"``, a
    :class:`~rl.data.llm.Text` under ``"text"`` (the chat template applied, ending with
    the assistant's turn opener) or :class:`~rl.data.llm.Tokens` under ``"tokens"``,
    after ``input_mode``. Step reads the policy's ``(mode, "full")`` (prompt and
    response) and returns it as the next ``(mode, "prompt")``. The env never ends an
    episode nor gives a reward: transforms do (a reward parser, a ``StepCounter``).

    Keyword Args:
        input_mode (str): ``"history"``, ``"text"`` or ``"tokens"``. Defaults to ``"history"``.
        batch_size (int or torch.Size): the number of conversations run at once; at least
            one dimension. Defaults to ``(1,)``.
        system_prompt (str, optional): a system message put before every query.
        tokenizer: a ``transformers`` tokenizer; needed by the text and tokens modes.
        template_kwargs (dict, optional): passed to ``History.apply_chat_template``.
        system_role (str): the system prompt's role. Defaults to ``"system"``.
        user_role (str): the role of a query given as a string. Defaults to ``"user"``.
        policy_role (str): the role of the policy's turns. Defaults to ``"assistant"``.
        data_key (str, optional): where reset reads the query. Defaults to ``"query"``.
        device (torch.device, optional): the env's device.

    Raises:
        ValueError: an unknown ``input_mode`` or role, an empty ``batch_size``, or the
            text / tokens mode without a tokenizer.

    Examples:
        >>> from tensordict import TensorDict
        >>> from rl.envs.llm import ChatEnv
        >>> env = ChatEnv(batch_size=(1,), system_prompt="Be brief.")
        >>> td = env.reset(TensorDict(query="Hello", batch_size=(1,)))
        >>> list(td["history"].prompt[0].role)
        ['system', 'user']
    """

    data_key: str = "query"
    # reset() keeps the conversations outside a partial reset mask itself (see _chat_reset)
    _reset_keeps_unmasked = True

    def __init__(
        self,
        *,
        input_mode: Literal["history", "text", "tokens"] = "history",
        batch_size: tuple | torch.Size | int | None = None,
        system_prompt: str | None = None,
        tokenizer=None,
        template_kwargs: dict[str, Any] | None = None,
        system_role: str = "system",
        user_role: str = "user",
        policy_role: str | None = "assistant",
        data_key: str | None = None,
        device: torch.device | None = None,
    ):
        if input_mode not in _INPUT_MODES:
            raise ValueError(f"input_mode={input_mode!r} is not one of {_INPUT_MODES}")
        if batch_size is None:
            batch_size = (1,)
        if isinstance(batch_size, int):
            batch_size = (batch_size,)
        batch_size = torch.Size(batch_size)
        if not len(batch_size):
            raise ValueError(f"{type(self).__name__} needs at least one batch dimension, got ()")
        _check_role("system_role", system_role)
        _check_role("user_role", user_role)
        if policy_role is not None:
            _check_role("policy_role", policy_role)
        if input_mode != "history" and tokenizer is None:
            raise ValueError(
                f"input_mode={input_mode!r} needs a tokenizer to apply the chat template"
            )
        super().__init__(batch_size=batch_size, device=device)
        self.input_mode = input_mode
        if data_key is not None:
            self.data_key = data_key
        self.system_prompt = system_prompt
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})
        self.system_role = system_role
        self.user_role = user_role
        self.policy_role = policy_role
        self._make_specs()

    def reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        """Resets the conversations (those of the ``"_reset"`` mask only, when given): see
        :class:`ChatEnv`. The prompts replace the input's ``input_mode`` entry."""
        return _chat_reset(super().reset, tensordict, self.input_mode, **kwargs)

    def _post_init(self) -> None:
        # TorchRL's ChatEnv has no reward entry: reward parsers and KL transforms add theirs
        super()._post_init()
        self.full_reward_spec = Composite(shape=self.batch_size, device=self.device)

    # ------------------------------------------------------------------ specs
    def _make_specs(self) -> None:
        bs, device = self.batch_size, self.device

        def container(field: str) -> Composite:
            return Composite(
                {
                    self.input_mode: Composite(
                        {field: NonTensor(shape=bs, device=device, example_data=None)},
                        shape=bs,
                        device=device,
                    )
                },
                shape=bs,
                device=device,
            )

        self.full_observation_spec = container("prompt")
        self.full_action_spec = container("full")
        self.full_state_spec = Composite(
            {self.data_key: NonTensor(shape=bs, device=device, example_data="a string")},
            shape=bs,
            device=device,
        )

    # ------------------------------------------------------------------ reset
    def _query_to_history(self, content: Any) -> History:
        """The query as a ``[*B, N]`` history."""
        bs = self.batch_size
        payload = _to_python(content)
        if isinstance(payload, list) and payload and all(isinstance(h, History) for h in payload):
            payload = lazy_stack(payload)
        if isinstance(payload, History):
            return self._align(payload)
        if _is_chat(payload):
            if _is_message(payload):
                payload = [payload]
            return self._align(History.from_chats(payload))
        if isinstance(payload, str):
            payload = [payload] * bs.numel()
        if not isinstance(payload, list) or len(payload) != bs.numel():
            raise ValueError(
                f"the query at {self.data_key!r} must be a string, a list of messages, a History "
                f"or {bs.numel()} strings (batch_size {tuple(bs)}), got {payload!r:.200}"
            )
        for item in payload:
            if not isinstance(item, str):
                raise TypeError(
                    f"the query at {self.data_key!r} holds a {type(item).__name__}, expected str"
                )
        rows = [History(role=self.user_role, content=q, batch_size=()) for q in payload]
        return lazy_stack(rows).reshape(*bs).unsqueeze(-1)

    def _align(self, history: History) -> History:
        """Brings a history of shape ``[N]`` or ``[*B, N]`` to ``[*B, N]``."""
        bs = self.batch_size
        if history.batch_dims == len(bs) + 1 and history.batch_size[: len(bs)] == bs:
            return history
        if history.batch_dims <= 1:
            if history.batch_dims == 0:
                history = lazy_stack([history])
            out = history
            for size in reversed(bs):
                out = lazy_stack([out] * size)
            return out
        raise ValueError(
            f"the History at {self.data_key!r} has shape {tuple(history.batch_size)}, expected "
            f"[N] or {[*bs, 'N']} for an env of batch_size {tuple(bs)}"
        )

    def _system_history(self) -> History:
        rows = [
            History(role=self.system_role, content=self.system_prompt, batch_size=())
            for _ in range(self.batch_size.numel())
        ]
        return lazy_stack(rows).reshape(*self.batch_size).unsqueeze(-1)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs) -> TensorDictBase:
        if tensordict is None:
            raise RuntimeError(
                f"{type(self).__name__}.reset() needs a tensordict with a {self.data_key!r} "
                "entry (a query), got None; append a DataLoadingPrimer to feed queries"
            )
        content = tensordict.get(self.data_key, None)
        if content is None:
            raise KeyError(
                f"{type(self).__name__}.reset() needs a {self.data_key!r} entry (a query); "
                f"the tensordict has keys {sorted(map(str, tensordict.keys()))}"
            )
        history = self._query_to_history(content)
        if self.system_prompt is not None:
            history = self._system_history().extend(history)
        out = TensorDict(batch_size=self.batch_size, device=self.device)
        out.set(self.input_mode, self._prompt_container(history))
        for key in tensordict.keys():
            if key not in (self.input_mode, "_reset", "next"):
                out.set(key, tensordict.get(key))
        return out

    def _prompt_container(self, history: History):
        bs = self.batch_size
        if self.input_mode == "history":
            return ChatHistory(prompt=history, batch_size=bs)
        flat = history.reshape(-1, history.batch_size[-1]) if len(bs) > 1 else history
        if self.input_mode == "text":
            texts = flat.apply_chat_template(
                tokenizer=self.tokenizer, add_generation_prompt=True, **self.template_kwargs
            )
            rows = [Text(prompt=t, batch_size=()) for t in texts]
        else:
            tokens = flat.apply_chat_template(
                tokenizer=self.tokenizer,
                add_generation_prompt=True,
                tokenize=True,
                return_dict=True,
                **self.template_kwargs,
            )
            ids = tokens.get("input_ids", as_list=True)
            rows = [Tokens(prompt=t, padded=False, batch_size=()) for t in ids]
        return lazy_stack(rows).reshape(*bs) if len(bs) > 1 else lazy_stack(rows)

    # ------------------------------------------------------------------ step
    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        mode = self.input_mode
        container = tensordict.get(mode, None)
        full = container.get("full", None) if container is not None else None
        if full is None:
            raise KeyError(
                f"{type(self).__name__}.step() needs the policy's ({mode!r}, 'full') entry (the "
                f"prompt followed by the response); run an LLM wrapper with input_mode={mode!r}"
            )
        cls = {"history": ChatHistory, "text": Text, "tokens": Tokens}[mode]
        out = TensorDict(batch_size=self.batch_size, device=self.device)
        if mode == "history" or not isinstance(container, LazyStackedTensorDict):
            fields = {"prompt": full}
            if mode == "tokens":
                fields["padded"] = container.get("padded", None)
            out.set(mode, cls(**fields, batch_size=self.batch_size))
        else:
            out.set(
                mode,
                lazy_stack([cls(prompt=row.full, batch_size=()) for row in container.unbind(0)]),
            )
        return out

    def _set_seed(self, seed: int | None) -> None:
        return None

    # ------------------------------------------------------------------ builders
    @classmethod
    def from_dataloader(
        cls,
        dataloader: Iterable,
        *,
        repeats: int | None = None,
        device: torch.device | None = None,
        group_repeats: bool = False,
        batch_size: tuple | torch.Size | None = None,
        primers: Composite | None = None,
        tokenizer=None,
        template_kwargs: dict[str, Any] | None = None,
        input_mode: Literal["history", "text", "tokens"] = "history",
        data_key: str | None = None,
        system_prompt: str | None = None,
    ) -> DatasetChatEnv:
        """A :class:`DatasetChatEnv` reading its queries from ``dataloader`` (see there)."""
        return DatasetChatEnv.from_dataloader(
            dataloader,
            repeats=repeats,
            device=device,
            group_repeats=group_repeats,
            batch_size=batch_size,
            primers=primers,
            tokenizer=tokenizer,
            template_kwargs=template_kwargs,
            input_mode=input_mode,
            data_key=data_key,
            system_prompt=system_prompt,
        )


def _default_collate_fn(batch: list[dict]) -> dict:
    """Stacks dict rows into a dict of lists, renaming ``"text"`` to ``"query"`` (as TorchRL:
    ``"text"`` is the key LLM wrappers write)."""
    out: dict[str, list] = {}
    for row in batch:
        for key, value in row.items():
            out.setdefault("query" if key == "text" else key, []).append(value)
    return out


class DatasetChatEnv(TransformedEnv):
    """A :class:`ChatEnv` whose queries come from a dataset, through a :class:`DataLoadingPrimer`.

    Each reset draws ``num_envs`` rows (each repeated ``repeats`` times in a row, for
    group-relative advantages); the row's fields (``"query"``, ``"answer"``...) are
    written into the reset output, where reward parsers read them.

    The dataset is LOCAL: nothing is downloaded. ``dataset`` is a list of dicts, an
    object with ``__len__`` / ``__getitem__`` returning dicts (a ``datasets.Dataset``
    already in memory, a torch ``Dataset``), or a path to a ``.json`` / ``.jsonl`` /
    ``.csv`` file (or ``.parquet`` with ``pyarrow`` installed), or a folder holding
    ``<split>.<ext>`` files.

    Keyword Args:
        dataset: the rows (see above). A Hub name such as ``"openai/gsm8k"`` is refused.
        shuffle (bool): draw rows in random order. Defaults to ``True``.
        name (str, optional): a subset: with a folder, rows are read from ``<name>/``.
        split (str, optional): with a folder or a dict of splits, the split to read;
            defaults to ``"train"`` when present.
        num_envs (int): how many conversations run at once. Defaults to ``1``.
        repeats (int, optional): how many times each row is served in a row.
        batch_size_dl (int): rows per dataloader batch. Defaults to ``1``.
        seed (int, optional): the shuffling seed.
        group_repeats (bool): deliver the repeats of a row in one batch. Defaults to ``False``.
        tokenizer, device, template_kwargs, input_mode, data_key, system_prompt: as
            :class:`ChatEnv` (``system_prompt`` defaults to the class's ``SYSTEM_PROMPT``).
        apply_template (bool): kept for TorchRL's signature (templates apply per mode).
        collate_fn (callable, optional): turns a list of rows into a dict of lists; the
            default renames ``"text"`` to ``"query"``.
        primers (Composite, optional): the specs of the dataset's fields.
        ray_backend (bool): a Ray-served dataloader; not supported here (``False``).

    Raises:
        ValueError: a dataset that is not local (see :func:`load_local_dataset`).
        NotImplementedError: ``ray_backend=True``.

    Examples:
        >>> from rl.envs.llm import DatasetChatEnv
        >>> rows = [{"query": "2+2?", "answer": "4"}, {"query": "3+3?", "answer": "6"}]
        >>> env = DatasetChatEnv(dataset=rows, shuffle=False, num_envs=2)
        >>> td = env.reset()
        >>> list(td["answer"])
        ['4', '6']
    """

    SYSTEM_PROMPT: str | None = None
    _reset_keeps_unmasked = True  # as ChatEnv: the transforms and reset() keep the others

    def __init__(
        self,
        *,
        dataset: Any,
        shuffle: bool = True,
        name: str | None = None,
        split: Literal["train", "val", "test"] | None = None,
        num_envs: int = 1,
        repeats: int | None = None,
        batch_size_dl: int = 1,
        seed: int | None = None,
        group_repeats: bool = False,
        tokenizer=None,
        device: torch.device | None = None,
        template_kwargs: dict[str, Any] | None = None,
        apply_template: bool | None = False,
        collate_fn: Callable[[list], Any] | None = None,
        input_mode: Literal["history", "text", "tokens"] = "history",
        data_key: str | None = None,
        primers: Composite | None = None,
        system_prompt: str | None = None,
        ray_backend: bool = False,
        dataloader_actor_name: str | None = None,
    ):
        if ray_backend or dataloader_actor_name is not None:
            raise NotImplementedError(
                "ray_backend / dataloader_actor_name (a Ray-served dataloader) is not supported"
            )
        dataloader = make_dataloader(
            dataset,
            name=name,
            split=split,
            seed=seed,
            batch_size=batch_size_dl,
            shuffle=shuffle,
            collate_fn=collate_fn if collate_fn is not None else _default_collate_fn,
        )
        self._from_dataloader(
            self,
            dataloader,
            repeats=repeats,
            device=device,
            group_repeats=group_repeats,
            batch_size=(num_envs,),
            primers=primers,
            tokenizer=tokenizer,
            template_kwargs=template_kwargs,
            input_mode=input_mode,
            data_key=data_key,
            system_prompt=system_prompt,
        )

    @classmethod
    def from_dataloader(
        cls,
        dataloader: Iterable,
        *,
        repeats: int | None = None,
        device: torch.device | None = None,
        group_repeats: bool = False,
        batch_size: tuple | torch.Size | None = None,
        primers: Composite | None = None,
        tokenizer=None,
        template_kwargs: dict[str, Any] | None = None,
        input_mode: Literal["history", "text", "tokens"] = "history",
        data_key: str | None = None,
        system_prompt: str | None = None,
    ) -> DatasetChatEnv:
        """A chat env reading its queries from any iterable of dict batches.

        Args:
            dataloader: yields mappings of batched fields (a torch ``DataLoader``).

        Keyword Args:
            see the class (``batch_size`` is the env's, default ``(1,)``).
        """
        self = cls.__new__(cls)
        return cls._from_dataloader(
            self,
            dataloader,
            repeats=repeats,
            device=device,
            group_repeats=group_repeats,
            batch_size=batch_size,
            primers=primers,
            tokenizer=tokenizer,
            template_kwargs=template_kwargs,
            input_mode=input_mode,
            data_key=data_key,
            system_prompt=system_prompt,
        )

    @classmethod
    def _from_dataloader(
        cls,
        self,
        dataloader,
        *,
        repeats,
        device,
        group_repeats,
        batch_size,
        primers,
        tokenizer,
        template_kwargs,
        input_mode,
        data_key,
        system_prompt,
    ):
        if batch_size is None:
            batch_size = (1,)
        primer = DataLoadingPrimer(
            dataloader=dataloader,
            repeats=repeats,
            device=device,
            group_repeats=group_repeats,
            batch_size=batch_size,
            primers=primers,
        )
        base = ChatEnv(
            batch_size=batch_size,
            system_prompt=cls.SYSTEM_PROMPT if system_prompt is None else system_prompt,
            tokenizer=tokenizer,
            template_kwargs=template_kwargs,
            input_mode=input_mode,
            data_key=data_key,
            device=device,
        )
        TransformedEnv.__init__(self, base, primer)
        return self

    def reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        """Draws new rows and resets the conversations (see :class:`ChatEnv`)."""
        return _chat_reset(super().reset, tensordict, self.base_env.input_mode, **kwargs)

    def reset_dataloader(self) -> DatasetChatEnv:
        """Restarts the dataloader from its first batch (a finite one that ran out)."""
        self.transform[0].reset_dataloader()
        return self
