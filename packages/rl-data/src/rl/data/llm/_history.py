"""Chat turns as a TensorDict: ``History`` and its message content ``ContentBase``."""

from __future__ import annotations

import re
from typing import Any

import torch
from tensordict import TensorClass, TensorDict, lazy_stack

from ._chat_templates import _CHAT_TEMPLATES, _CUSTOM_INVERSE_PARSERS, _template_name_for

__all__ = ["ContentBase", "History", "ROLES"]

#: The roles a message may take (TorchRL's chat roles).
ROLES = ("system", "user", "assistant", "tool")

# A ChatML template whose assistant turns sit in {% generation %} blocks, so that
# ``return_assistant_tokens_mask=True`` marks the assistant's tokens.
_CHATML = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\n' }}{% generation %}{{ message['content'] }}"
    "{% if message.get('is_complete', True) %}{{ '<|im_end|>' }}{% endif %}{% endgeneration %}"
    "{{ '\n' }}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_CHAT_TEMPLATES["chatml_format"] = _CHATML

_CHATML_TURN = re.compile(r"<\|im_start\|>(\w+)\n(.*?)(<\|im_end\|>|$)", re.S)


class ContentBase(TensorClass["nocast", "shadow"]):
    """Content of one message: text, or a typed part (image URL, data, function call).

    Fields follow TorchRL's: ``type``, ``text``, ``url``, ``data``, ``mime_type``, ``name``,
    ``size``, ``function_name``, ``function_args``.

    Examples:
        >>> from rl.data.llm import ContentBase
        >>> ContentBase(type="text", text="Hello").text
        'Hello'
    """

    type: str
    text: str | None = None
    url: str | None = None
    data: str | None = None
    mime_type: str | None = None
    name: str | None = None
    size: int | None = None
    function_name: str | None = None
    function_args: dict | None = None


def _check_role(role: Any) -> None:
    if isinstance(role, str):
        if role not in ROLES:
            raise ValueError(f"role {role!r} is not a chat role; expected one of {ROLES}")
    elif isinstance(role, (list, tuple)):
        for r in role:
            _check_role(r)


class History(TensorClass["nocast"]):
    """A conversation: one message per entry along the last dimension.

    A ``History`` of shape ``[*B, N]`` holds ``N`` messages for each of the ``*B``
    conversations; ``role`` is one of ``"system"``, ``"user"``, ``"assistant"``, ``"tool"``.

    Args:
        role (str): who speaks.
        content (str or ContentBase): what is said.
        is_complete (bool): ``False`` for an assistant turn cut before its end token.
            Defaults to ``True``.
        tool_calls (list[dict], optional): tool calls the message makes.
        tool_responses (list[str], optional): the tools' answers.

    Raises:
        ValueError: a role outside ``ROLES``.

    Examples:
        >>> import torch
        >>> from rl.data.llm import History
        >>> h = History.from_chats([[{"role": "user", "content": "hi"}]])
        >>> h.shape
        torch.Size([1, 1])
        >>> h = h.append(History(role="assistant", content="hello", batch_size=(1,)))
        >>> h.shape, h[0, 1].content
        (torch.Size([1, 2]), 'hello')
    """

    role: str
    content: str | ContentBase
    is_complete: bool = True
    tool_calls: list[dict] | None = None
    tool_responses: list[str] | None = None

    def __post_init__(self):
        if not self.batch_size:
            _check_role(self.role)

    # ------------------------------------------------------------------ building
    @classmethod
    def from_chats(cls, chats: list[list[dict]]) -> History:
        """Builds a ``[len(chats), N]`` history from lists of ``{"role", "content"}`` dicts.

        Conversations of unequal length are stacked lazily (ragged last dimension).
        """
        if isinstance(chats, list) and chats and isinstance(chats[0], dict):
            chats = [chats]
        rows = []
        for chat in chats:
            msgs = []
            for i, msg in enumerate(chat):
                if "role" not in msg or "content" not in msg:
                    raise ValueError(f"message {i} {msg!r} lacks a 'role' or a 'content' field")
                msgs.append(
                    cls(
                        role=msg["role"],
                        content=msg["content"],
                        is_complete=msg.get("is_complete", True),
                        batch_size=(),
                    )
                )
            rows.append(lazy_stack(msgs))
        return lazy_stack(rows)

    @classmethod
    def from_text(
        cls,
        text: str | list[str],
        chat_template_name: str | None = None,
        chat_template: str | None = None,
        tokenizer=None,
    ) -> History:
        """Parses ChatML text (``<|im_start|>role\\ncontent<|im_end|>``) back into a history.

        A last assistant turn without ``<|im_end|>`` gets ``is_complete=False``. Only the
        ChatML layout is parsed, unless ``chat_template_name`` (or a tokenizer whose name
        matches keywords given to :func:`add_chat_template`) names a template registered
        with an ``inverse_parser``, which then parses; any other name raises
        ``NotImplementedError``.
        """
        if chat_template_name is None and tokenizer is not None:
            chat_template_name = _template_name_for(tokenizer)
        if chat_template_name in _CUSTOM_INVERSE_PARSERS:
            parse = _CUSTOM_INVERSE_PARSERS[chat_template_name]
            if isinstance(text, list):
                return lazy_stack([parse(t) for t in text])
            return parse(text)
        if chat_template_name not in (None, "chatml_format"):
            raise NotImplementedError(
                f"from_text parses chatml_format only, got chat_template_name={chat_template_name!r}"
            )
        if isinstance(text, list):
            return lazy_stack([cls.from_text(t) for t in text])
        msgs = []
        for match in _CHATML_TURN.finditer(text):
            role, content, end = match.groups()
            msgs.append(cls(role=role, content=content, is_complete=bool(end), batch_size=()))
        if not msgs:
            raise ValueError(f"text {text[:40]!r} holds no <|im_start|>role turn")
        return lazy_stack(msgs)

    def append(self, history: History, *, inplace: bool = True, dim: int = -1) -> History:
        """Appends one message (shape ``[*B]``) to each conversation (shape ``[*B, N]``).

        Returns the new history of shape ``[*B, N + 1]``. ``inplace`` is accepted for
        TorchRL's signature; the result is always returned (a lazy stack cannot grow in place
        when it has a batch).
        """
        if history.batch_dims == self.batch_dims:
            return self.extend(history, inplace=inplace, dim=dim)
        return self.extend(history.unsqueeze(-1), inplace=inplace, dim=dim)

    def extend(self, history: History, *, inplace: bool = True, dim: int = -1) -> History:
        """Concatenates ``history`` (``[*B, M]``) after ``self`` (``[*B, N]``) along ``dim``."""
        if dim not in (-1, self.batch_dims - 1):
            raise ValueError(f"History grows along its last dim, got dim={dim}")
        if history.batch_size[:-1] != self.batch_size[:-1]:
            raise ValueError(
                f"history has batch {tuple(history.batch_size[:-1])}, expected "
                f"{tuple(self.batch_size[:-1])} to extend a history of shape {tuple(self.batch_size)}"
            )
        if self.batch_dims == 1:
            return lazy_stack(list(self.unbind(0)) + list(history.unbind(0)))
        return lazy_stack([a.extend(b) for a, b in zip(self.unbind(0), history.unbind(0))])

    # ------------------------------------------------------------------ templates
    def _messages(self) -> list[dict] | list[list[dict]]:
        if self.batch_dims == 0:
            raise ValueError("a History of shape () is one message: stack it into shape [N]")
        if self.batch_dims > 1:
            return [h._messages() for h in self.unbind(0)]
        out = []
        for msg in self.unbind(0):
            _check_role(msg.role)
            content = msg.content
            if isinstance(content, ContentBase):
                content = content.text
            out.append({"role": msg.role, "content": content, "is_complete": msg.is_complete})
        return out

    def apply_chat_template(
        self,
        *,
        tokenizer,
        add_generation_prompt: bool = True,
        chat_template: str | None = None,
        chat_template_name: str | None = None,
        continue_final_message: bool = False,
        tokenize: bool | None = None,
        padding: bool | str = False,
        truncation: bool | str = False,
        return_tensors: str | None = None,
        return_dict: bool | None = None,
        return_assistant_tokens_mask: bool = False,
        **kwargs,
    ) -> str | list[str] | TensorDict:
        """Renders the conversation(s) through a chat template.

        Keyword Args:
            tokenizer: a ``transformers`` tokenizer.
            add_generation_prompt (bool): end with the assistant's turn opener. Defaults to ``True``.
            chat_template (str, optional): a Jinja template; else ``chat_template_name``'s,
                else the tokenizer's ``chat_template``.
            chat_template_name (str, optional): ``"chatml_format"`` or a name given to
                :func:`add_chat_template` (picked from the tokenizer's ``name_or_path``
                when its family keywords match).
            continue_final_message (bool): leave the last message open.
            tokenize (bool, optional): return tokens; defaults to ``return_dict`` or
                ``return_assistant_tokens_mask``.
            padding, truncation, return_tensors: passed to the tokenizer.
            return_dict (bool, optional): return a ``TensorDict`` with ``input_ids``,
                ``attention_mask`` (and ``assistant_masks``). Defaults to ``tokenize``.
            return_assistant_tokens_mask (bool): add ``assistant_masks`` (``1`` on the
                assistant's tokens; the template must mark them with ``{% generation %}``).

        Returns:
            a string (shape ``[N]``), a list of strings (``[B, N]``), or a TensorDict of
            tokens; with ``padding=False`` rows of unequal length are stacked lazily.

        Raises:
            ValueError: no ``chat_template`` (argument, name or tokenizer's), an unknown
                ``chat_template_name``, or an unknown role.
        """
        if chat_template is None and chat_template_name is None:
            chat_template_name = _template_name_for(tokenizer)
        if chat_template is None and chat_template_name is not None:
            if chat_template_name not in _CHAT_TEMPLATES:
                raise ValueError(
                    f"chat_template_name {chat_template_name!r} is unknown; "
                    f"expected one of {sorted(_CHAT_TEMPLATES)}"
                )
            chat_template = _CHAT_TEMPLATES[chat_template_name]
        if chat_template is None and getattr(tokenizer, "chat_template", None) is None:
            raise ValueError(
                "the tokenizer has no chat_template: set tokenizer.chat_template, or pass "
                "chat_template= or chat_template_name='chatml_format'"
            )
        if tokenize is None:
            tokenize = bool(return_dict) or return_assistant_tokens_mask
        if return_dict is None:
            return_dict = tokenize
        messages = self._messages()
        batched = self.batch_dims > 1
        convs = messages if batched else [messages]
        common = dict(
            chat_template=chat_template,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
            **kwargs,
        )
        if not tokenize:
            texts = [tokenizer.apply_chat_template(c, tokenize=False, **common) for c in convs]
            return texts if batched else texts[0]
        rows = []
        for conv in convs:
            out = tokenizer.apply_chat_template(
                conv,
                tokenize=True,
                return_dict=True,
                return_assistant_tokens_mask=return_assistant_tokens_mask,
                truncation=truncation,
                **common,
            )
            row = {
                "input_ids": torch.as_tensor(out["input_ids"], dtype=torch.long).reshape(-1),
                "attention_mask": torch.as_tensor(out["attention_mask"], dtype=torch.long).reshape(
                    -1
                ),
            }
            if return_assistant_tokens_mask:
                row["assistant_masks"] = torch.as_tensor(
                    out["assistant_masks"], dtype=torch.long
                ).reshape(-1)
            rows.append(TensorDict(row, batch_size=()))
        if padding:
            width = max(r["input_ids"].numel() for r in rows)
            pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
            padded = []
            for r in rows:
                extra = width - r["input_ids"].numel()
                side = getattr(tokenizer, "padding_side", "right")
                padded.append(
                    TensorDict(
                        {
                            k: _pad(v, extra, pad_id if k == "input_ids" else 0, side)
                            for k, v in r.items()
                        },
                        batch_size=(),
                    )
                )
            result = torch.stack(padded)
        else:
            result = lazy_stack(rows)
        if not return_dict:
            return result["input_ids"] if padding else result
        return result if batched else result[0]


def _pad(value: torch.Tensor, extra: int, fill: int, side: str) -> torch.Tensor:
    pad = value.new_full((extra,), fill)
    return torch.cat([pad, value]) if side == "left" else torch.cat([value, pad])
