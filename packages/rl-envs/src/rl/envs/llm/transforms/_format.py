"""``TemplateTransform``: a conversation rendered through a chat template, and the
assistant's reply cut back out of the generated text."""

from __future__ import annotations

from tensordict import NonTensorData, NonTensorStack

from rl.data.llm import History

from ...transforms import Transform

__all__ = ["TemplateTransform"]

_MARKERS = (  # (assistant-turn opener, turn closer) of the ChatML and Llama-3 templates
    ("<|im_start|>assistant\n", "<|im_end|>"),
    ("<|start_header_id|>assistant<|end_header_id|>", "<|eot_id|>"),
)


class TemplateTransform(Transform):
    """Applies a chat template to the conversation at ``"message"`` (with the assistant's
    turn opener at the end), and keeps only the last assistant reply of the text at
    ``"action"`` before the env steps.

    Args:
        tokenizer: a ``transformers`` tokenizer.
        chat_template (str, optional): a Jinja template; defaults to the tokenizer's.

    Raises:
        ValueError: no ``chat_template`` here nor on the tokenizer.

    Examples:
        >>> from rl.envs.llm import TemplateTransform
        >>> TemplateTransform._last_reply("<|im_start|>assistant\\nHi!<|im_end|>")
        'Hi!'
    """

    def __init__(self, tokenizer, chat_template: str | None = None):
        super().__init__(
            in_keys=["message"],
            out_keys=["message"],
            in_keys_inv=["action"],
            out_keys_inv=["action"],
        )
        if chat_template is None:
            chat_template = getattr(tokenizer, "chat_template", None)
        if chat_template is None:
            raise ValueError(
                "TemplateTransform: the tokenizer has no chat_template; pass chat_template="
            )
        self.chat_template = chat_template
        self.tokenizer = tokenizer

    def _apply_transform(self, message):
        if isinstance(message, NonTensorStack):
            items = message.tolist()
            if items and isinstance(items[0], dict):  # one conversation, stacked by message
                return self._apply_transform(items)
            return NonTensorStack(*[NonTensorData(self._apply_transform(m)) for m in items])
        if isinstance(message, NonTensorData):
            message = message.data
        if isinstance(message, History):
            return message.apply_chat_template(
                tokenizer=self.tokenizer, chat_template=self.chat_template
            )
        if isinstance(message, str):
            message = [{"role": "user", "content": message}]
        return self.tokenizer.apply_chat_template(
            message, add_generation_prompt=True, tokenize=False, chat_template=self.chat_template
        )

    def _reset(self, tensordict, tensordict_reset):
        return self._call(tensordict_reset)

    @staticmethod
    def _last_reply(text: str) -> str:
        for opener, closer in _MARKERS:
            if opener in text:
                reply = text.rsplit(opener, 1)[1]
                return reply.split(closer, 1)[0].strip("\n")
        return text

    def _inv_apply_transform(self, action):
        if isinstance(action, NonTensorStack):
            return NonTensorStack(*[NonTensorData(self._last_reply(a)) for a in action.tolist()])
        if isinstance(action, NonTensorData):
            action = action.data
        return self._last_reply(action)
