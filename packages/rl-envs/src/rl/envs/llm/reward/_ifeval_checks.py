"""The verifiable instructions of IFEval (Zhou et al. 2023, https://arxiv.org/abs/2311.07911):
one check per instruction id, ``check(response, **kwargs) -> bool``.

Counting follows the benchmark's definitions (words are ``\\w+`` runs, paragraphs are split
by ``***`` or by blank lines, sentences end with ``.``, ``!`` or ``?``). Only the language
checks need a library (``langdetect``).
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable

__all__ = ["INSTRUCTIONS", "check_instruction"]

_has_langdetect = importlib.util.find_spec("langdetect") is not None
_RELATIONS = ("less than", "at least")


def _compare(count: int, target, relation: str | None) -> bool:
    relation = relation or "at least"
    if relation not in _RELATIONS:
        raise ValueError(f"relation={relation!r} is not one of {_RELATIONS}")
    return count < int(target) if relation == "less than" else count >= int(target)


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text)


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s.strip()]


def _language(text: str) -> str | None:
    if not _has_langdetect:
        raise ImportError("the IFEval language checks need langdetect (pip install langdetect)")
    import langdetect

    try:
        return langdetect.detect(text)
    except langdetect.LangDetectException:
        return None


def keyword_existence(response: str, keywords=(), **_) -> bool:
    return all(re.search(re.escape(k), response, re.I) for k in keywords)


def keyword_frequency(response: str, keyword="", frequency=1, relation=None, **_) -> bool:
    return _compare(len(re.findall(re.escape(keyword), response, re.I)), frequency, relation)


def forbidden_words(response: str, forbidden_words=(), **_) -> bool:
    return not any(re.search(r"\b" + re.escape(w) + r"\b", response, re.I) for w in forbidden_words)


def letter_frequency(response: str, letter="a", let_frequency=1, let_relation=None, **_) -> bool:
    return _compare(response.lower().count(letter.lower()), let_frequency, let_relation)


def response_language(response: str, language="en", **_) -> bool:
    return _language(response) == language


def number_sentences(response: str, num_sentences=1, relation=None, **_) -> bool:
    return _compare(len(_sentences(response)), num_sentences, relation)


def number_paragraphs(response: str, num_paragraphs=1, **_) -> bool:
    paragraphs = re.split(r"\s?\*\*\*\s?", response)
    count = len(paragraphs)
    for i, paragraph in enumerate(paragraphs):
        if not paragraph.strip():
            if i in (0, len(paragraphs) - 1):
                count -= 1
            else:
                return False
    return count == int(num_paragraphs)


def number_words(response: str, num_words=1, relation=None, **_) -> bool:
    return _compare(len(_words(response)), num_words, relation)


def nth_paragraph_first_word(
    response: str, num_paragraphs=1, nth_paragraph=1, first_word="", **_
) -> bool:
    paragraphs = [p for p in re.split(r"\n\n", response) if p.strip()]
    if len(paragraphs) != int(num_paragraphs) or int(nth_paragraph) > len(paragraphs):
        return False
    words = paragraphs[int(nth_paragraph) - 1].strip().split()
    if not words:
        return False
    word = words[0].strip("\"'").lstrip("*_#").rstrip(".,!?:;*_")
    return word.lower() == first_word.lower()


def number_placeholders(response: str, num_placeholders=1, **_) -> bool:
    return len(re.findall(r"\[.*?\]", response)) >= int(num_placeholders)


def postscript(response: str, postscript_marker="P.S.", **_) -> bool:
    marker = postscript_marker.strip()
    if marker == "P.P.S":
        pattern = r"\s*p\.\s?p\.\s?s.*$"
    elif marker == "P.S.":
        pattern = r"\s*p\.\s?s\..*$"
    else:
        pattern = r"\s*" + re.escape(marker.lower()) + r".*$"
    return bool(re.findall(pattern, response.lower(), flags=re.M))


def number_bullet_lists(response: str, num_bullets=1, **_) -> bool:
    stars = re.findall(r"^\s*\*[^\*].*$", response, flags=re.M)
    dashes = re.findall(r"^\s*-.*$", response, flags=re.M)
    return len(stars) + len(dashes) == int(num_bullets)


def constrained_response(response: str, **_) -> bool:
    options = ("My answer is yes.", "My answer is no.", "My answer is maybe.")
    return any(option in response.strip() for option in options)


def number_highlighted_sections(response: str, num_highlights=1, **_) -> bool:
    single = re.findall(r"\*[^\n\*]*\*", response)
    double = re.findall(r"\*\*[^\n\*]*\*\*", response)
    count = sum(1 for h in single if h.strip("*").strip())
    count += sum(1 for h in double if h.removeprefix("**").removesuffix("**").strip())
    return count >= int(num_highlights)


def multiple_sections(response: str, section_spliter="Section", num_sections=1, **_) -> bool:
    sections = re.split(r"\s?" + re.escape(section_spliter) + r"\s?\d+\s?", response)
    return len(sections) - 1 >= int(num_sections)


def json_format(response: str, **_) -> bool:
    text = response.strip()
    for prefix in ("```json", "```Json", "```JSON", "```"):
        text = text.removeprefix(prefix)
    text = text.removesuffix("```").strip()
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def title(response: str, **_) -> bool:
    return any(t.lstrip("<").rstrip(">").strip() for t in re.findall(r"<<[^\n]+>>", response))


def two_responses(response: str, **_) -> bool:
    parts = response.split("******")
    valid = []
    for i, part in enumerate(parts):
        if not part.strip():
            if i not in (0, len(parts) - 1):
                return False
        else:
            valid.append(part.strip())
    return len(valid) == 2 and valid[0] != valid[1]


def repeat_prompt(response: str, prompt_to_repeat="", **_) -> bool:
    return response.strip().lower().startswith(prompt_to_repeat.strip().lower())


def end_checker(response: str, end_phrase="", **_) -> bool:
    return response.strip().strip('"').lower().endswith(end_phrase.strip().lower())


def capital_word_frequency(response: str, capital_frequency=1, capital_relation=None, **_) -> bool:
    return _compare(
        sum(1 for w in _words(response) if w.isupper()), capital_frequency, capital_relation
    )


def english_capital(response: str, **_) -> bool:
    return response.isupper() and (not _has_langdetect or _language(response) == "en")


def english_lowercase(response: str, **_) -> bool:
    return response.islower() and (not _has_langdetect or _language(response) == "en")


def no_comma(response: str, **_) -> bool:
    return "," not in response


def quotation(response: str, **_) -> bool:
    text = response.strip()
    return len(text) > 1 and text[0] == '"' and text[-1] == '"'


#: instruction id -> check, as the IFEval benchmark names them
INSTRUCTIONS: dict[str, Callable[..., bool]] = {
    "keywords:existence": keyword_existence,
    "keywords:frequency": keyword_frequency,
    "keywords:forbidden_words": forbidden_words,
    "keywords:letter_frequency": letter_frequency,
    "language:response_language": response_language,
    "length_constraints:number_sentences": number_sentences,
    "length_constraints:number_paragraphs": number_paragraphs,
    "length_constraints:number_words": number_words,
    "length_constraints:nth_paragraph_first_word": nth_paragraph_first_word,
    "detectable_content:number_placeholders": number_placeholders,
    "detectable_content:postscript": postscript,
    "detectable_format:number_bullet_lists": number_bullet_lists,
    "detectable_format:constrained_response": constrained_response,
    "detectable_format:number_highlighted_sections": number_highlighted_sections,
    "detectable_format:multiple_sections": multiple_sections,
    "detectable_format:json_format": json_format,
    "detectable_format:title": title,
    "combination:two_responses": two_responses,
    "combination:repeat_prompt": repeat_prompt,
    "startend:end_checker": end_checker,
    "change_case:capital_word_frequency": capital_word_frequency,
    "change_case:english_capital": english_capital,
    "change_case:english_lowercase": english_lowercase,
    "punctuation:no_comma": no_comma,
    "startend:quotation": quotation,
}


def check_instruction(instruction_id: str, response: str, kwargs: dict | None = None) -> bool:
    """Whether ``response`` follows instruction ``instruction_id`` with its ``kwargs``
    (``None`` values dropped). An empty response follows nothing.

    Raises:
        KeyError: an unknown instruction id.
    """
    check = INSTRUCTIONS.get(instruction_id)
    if check is None:
        raise KeyError(
            f"instruction_id {instruction_id!r} is not an IFEval instruction; expected one of "
            f"{sorted(INSTRUCTIONS)}"
        )
    if not response.strip():
        return False
    return bool(check(response, **{k: v for k, v in (kwargs or {}).items() if v is not None}))
