"""The registry of named chat templates that ``History`` renders and parses."""

from __future__ import annotations

import logging
from collections.abc import Callable

__all__ = ["add_chat_template"]

logger = logging.getLogger(__name__)

#: template name -> Jinja template (``History`` registers ``"chatml_format"``).
_CHAT_TEMPLATES: dict[str, str] = {}
#: template name -> ``text -> History`` parser used by ``History.from_text``.
_CUSTOM_INVERSE_PARSERS: dict[str, Callable] = {}
#: template name -> keywords matched (case-insensitively) in a tokenizer's ``name_or_path``.
_CUSTOM_MODEL_FAMILY_KEYWORDS: dict[str, list[str]] = {}


def add_chat_template(
    template_name: str,
    template: str,
    inverse_parser: Callable | None = None,
    model_family_keywords: list[str] | None = None,
) -> None:
    """Registers a chat template under a name, for the rest of the session.

    Args:
        template_name (str): the name given as ``chat_template_name`` to
            :meth:`History.apply_chat_template` and :meth:`History.from_text`.
        template (str): a Jinja template whose assistant content sits in
            ``{% generation %}`` blocks (for ``assistant_masks``).
        inverse_parser (callable, optional): ``text -> History``, used by
            :meth:`History.from_text` for this template.
        model_family_keywords (list of str, optional): when a tokenizer's ``name_or_path``
            holds one of them (case-insensitive), ``apply_chat_template`` and ``from_text``
            pick this template without a ``chat_template_name``.

    Raises:
        ValueError: the template has no ``{% generation %}`` block.

    Examples:
        >>> from rl.data.llm import add_chat_template
        >>> add_chat_template(
        ...     "plain",
        ...     "{% for m in messages %}{% if m['role'] == 'assistant' %}"
        ...     "{% generation %}{{ m['content'] }}{% endgeneration %}"
        ...     "{% else %}{{ m['role'] + ': ' + m['content'] + '\\n' }}{% endif %}{% endfor %}",
        ... )
    """
    if "{% generation %}" not in template:
        raise ValueError(
            f"Template '{template_name}' must include '{{% generation %}}' blocks around "
            "assistant message content to enable token masking."
        )
    _CHAT_TEMPLATES[template_name] = template
    if inverse_parser is not None:
        _CUSTOM_INVERSE_PARSERS[template_name] = inverse_parser
    if model_family_keywords is not None:
        _CUSTOM_MODEL_FAMILY_KEYWORDS[template_name] = list(model_family_keywords)
    logger.info("added chat template %r with assistant token masking", template_name)


def _template_name_for(tokenizer) -> str | None:
    """The registered template whose family keywords match the tokenizer's name, if any."""
    model_name = (getattr(tokenizer, "name_or_path", None) or "").lower()
    for name, keywords in _CUSTOM_MODEL_FAMILY_KEYWORDS.items():
        if any(k.lower() in model_name for k in keywords):
            return name
    return None
