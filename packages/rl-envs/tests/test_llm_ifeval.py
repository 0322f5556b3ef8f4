"""rl.envs.llm IFEval: the instruction checks on hand-written responses, the scorer's reward."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from tensordict import lazy_stack  # noqa: E402

from rl.data.llm import History  # noqa: E402
from rl.envs.llm import IFEvalEnv, IfEvalScorer  # noqa: E402
from rl.envs.llm.reward import check_instruction  # noqa: E402
from rl.envs.llm.reward._ifeval import score_response  # noqa: E402


@pytest.mark.parametrize(
    "instruction, response, kwargs, ok",
    [
        ("punctuation:no_comma", "no commas here", {}, True),
        ("punctuation:no_comma", "one, comma", {}, False),
        ("keywords:existence", "The Cat sat", {"keywords": ["cat", "sat"]}, True),
        ("keywords:existence", "The dog sat", {"keywords": ["cat"]}, False),
        (
            "keywords:frequency",
            "a b a c a",
            {"keyword": "a", "frequency": 3, "relation": "at least"},
            True,
        ),
        (
            "keywords:frequency",
            "a b a",
            {"keyword": "a", "frequency": 2, "relation": "less than"},
            False,
        ),
        ("keywords:forbidden_words", "fine words", {"forbidden_words": ["bad"]}, True),
        ("keywords:forbidden_words", "Bad words", {"forbidden_words": ["bad"]}, False),
        (
            "keywords:letter_frequency",
            "zzZ",
            {"letter": "z", "let_frequency": 3, "let_relation": "at least"},
            True,
        ),
        (
            "length_constraints:number_words",
            "one two three",
            {"num_words": 3, "relation": "at least"},
            True,
        ),
        (
            "length_constraints:number_words",
            "one two three",
            {"num_words": 3, "relation": "less than"},
            False,
        ),
        (
            "length_constraints:number_sentences",
            "A. B! C?",
            {"num_sentences": 4, "relation": "less than"},
            True,
        ),
        ("length_constraints:number_paragraphs", "p1\n***\np2", {"num_paragraphs": 2}, True),
        ("length_constraints:number_paragraphs", "p1\n***\n***\np2", {"num_paragraphs": 2}, False),
        (
            "length_constraints:nth_paragraph_first_word",
            "Hello there\n\nWorld is big",
            {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "world"},
            True,
        ),
        (
            "detectable_content:number_placeholders",
            "[name] at [place]",
            {"num_placeholders": 2},
            True,
        ),
        ("detectable_content:postscript", "Hi.\nP.S. bye", {"postscript_marker": "P.S."}, True),
        ("detectable_content:postscript", "Hi.", {"postscript_marker": "P.S."}, False),
        ("detectable_format:number_bullet_lists", "* a\n* b\n- c", {"num_bullets": 3}, True),
        ("detectable_format:number_bullet_lists", "* a\n* b", {"num_bullets": 3}, False),
        ("detectable_format:constrained_response", "My answer is yes.", {}, True),
        (
            "detectable_format:number_highlighted_sections",
            "*one* and **two**",
            {"num_highlights": 2},
            True,
        ),
        (
            "detectable_format:multiple_sections",
            "Section 1 a Section 2 b",
            {"section_spliter": "Section", "num_sections": 2},
            True,
        ),
        ("detectable_format:json_format", '```json\n{"a": 1}\n```', {}, True),
        ("detectable_format:json_format", "{a: 1}", {}, False),
        ("detectable_format:title", "<<My Title>> text", {}, True),
        ("combination:two_responses", "first\n******\nsecond", {}, True),
        ("combination:two_responses", "same\n******\nsame", {}, False),
        ("combination:repeat_prompt", "Say hi. Hi!", {"prompt_to_repeat": "say hi."}, True),
        (
            "startend:end_checker",
            'The end. "Any questions?"',
            {"end_phrase": "Any questions?"},
            True,
        ),
        ("startend:quotation", '"quoted"', {}, True),
        (
            "change_case:capital_word_frequency",
            "THE BIG dog",
            {"capital_frequency": 2, "capital_relation": "at least"},
            True,
        ),
        ("change_case:english_lowercase", "all lower", {}, True),
        ("change_case:english_capital", "ALL UPPER", {}, True),
        ("punctuation:no_comma", "   ", {}, False),  # an empty response follows nothing
    ],
)
def test_instruction_checks(instruction, response, kwargs, ok):
    assert check_instruction(instruction, response, kwargs) is ok


def test_unknown_instruction_and_mismatched_kwargs():
    with pytest.raises(KeyError, match="instruction_id 'style:haiku' is not an IFEval instruction"):
        check_instruction("style:haiku", "text")
    with pytest.raises(ValueError, match="2 instruction ids for 1 kwargs dicts"):
        score_response("x", ["punctuation:no_comma", "startend:quotation"], [{}])


def test_loose_accuracy_forgives_markdown():
    # strict fails on the asterisks' line, loose drops the first line
    score = score_response("**Title**, here\nno commas below", ["punctuation:no_comma"], [{}])
    assert not score.prompt_level_strict_acc.item() and score.prompt_level_loose_acc.item()


def test_env_reward_by_hand():
    rows = [
        {
            "key": 1,
            "prompt": "Two bullets, no commas.",
            "instruction_id_list": [
                "punctuation:no_comma",
                "detectable_format:number_bullet_lists",
            ],
            "kwargs": [{}, {"num_bullets": 2}],
        },
        {
            "key": 2,
            "prompt": "End with bye.",
            "instruction_id_list": ["startend:end_checker"],
            "kwargs": [{"end_phrase": "bye"}],
        },
    ]
    env = IFEvalEnv(dataset=rows, num_envs=2, shuffle=False)
    td = env.reset()
    answers = ["<think>t</think><answer>* hi\n* there, you</answer>", "no answer tags, bye"]
    turns = lazy_stack([History(role="assistant", content=a, batch_size=()) for a in answers])
    td["history"].full = td["history"].prompt.extend(turns.unsqueeze(-1))
    nxt = env.step(td)["next"]
    # row 0, strict: the comma fails, the bullets pass; loose: dropping the last line drops
    # the comma, so both pass: 0.4*0 + 0.3*0.5 + 0.2*1 + 0.1*1 + 0.1 (answer) + 0.05 (think)
    # row 1: no <answer>, so the empty answer follows nothing: 0
    torch.testing.assert_close(nxt["reward"], torch.tensor([[[0.6]], [[0.0]]]))
    assert nxt["terminated"].flatten().tolist() == [True, False]  # an answer ends it
    assert nxt["ifeval_score"][0].inst_level_strict_acc.tolist() == [False, True]
    with pytest.raises(ValueError, match="format_weights takes 4 weights"):
        IfEvalScorer(format_weights=[1.0])
