"""rl.data.llm: History (templates, masks, parsing, appending) and the prompt/response containers."""

from __future__ import annotations

import doctest
import importlib
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from rl.data.llm import ChatHistory, ContentBase, History, LogProbs, Masks, Text, Tokens  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from _tiny_tokenizer import make_tokenizer  # noqa: E402

CHATS = [
    [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
    [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "abc"},
        {"role": "assistant", "content": "z"},
    ],
]


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


class TestHistory:
    def test_from_chats_shape_and_fields(self):
        h = History.from_chats(CHATS[:1])
        assert h.shape == (1, 2)
        assert h[0, 0].role == "user" and h[0, 1].content == "yo"
        assert h[0, 1].is_complete

    def test_apply_chat_template_text(self, tok):
        h = History.from_chats(CHATS)
        texts = h.apply_chat_template(tokenizer=tok, add_generation_prompt=False)
        assert texts[0] == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n"
        assert texts[1].startswith("<|im_start|>system\ns<|im_end|>\n")
        prompt = History.from_chats([CHATS[0][:1]])[0].apply_chat_template(tokenizer=tok)
        assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"

    def test_assistant_mask_marks_assistant_tokens(self, tok):
        h = History.from_chats(CHATS)
        out = h.apply_chat_template(
            tokenizer=tok,
            add_generation_prompt=False,
            return_assistant_tokens_mask=True,
            padding=True,
        )
        ids, asst, att = (
            out["input_ids"],
            out["assistant_masks"].bool(),
            out["attention_mask"].bool(),
        )
        assert ids.shape == asst.shape == att.shape
        for row in range(2):
            marked = tok.decode(ids[row][asst[row]])
            assert marked == ["yo<|im_end|>", "z<|im_end|>"][row]
        # padding: the first (shorter) conversation's tail is not attended
        n0 = len(
            tok(h[0].apply_chat_template(tokenizer=tok, add_generation_prompt=False))["input_ids"]
        )
        assert att[0].sum() == n0 and not att[0, n0:].any()

    def test_unpadded_rows_keep_their_length(self, tok):
        h = History.from_chats(CHATS)
        out = h.apply_chat_template(tokenizer=tok, add_generation_prompt=False, tokenize=True)
        lens = [r.numel() for r in out.get("input_ids", as_list=True)]
        assert lens == [
            len(tok(t)["input_ids"])
            for t in h.apply_chat_template(tokenizer=tok, add_generation_prompt=False)
        ]

    def test_from_text_round_trip(self, tok):
        h = History.from_chats(CHATS)[1]
        text = h.apply_chat_template(tokenizer=tok, add_generation_prompt=False)
        back = History.from_text(text)
        assert back.role == ["system", "user", "assistant"]
        assert back.content == ["s", "abc", "z"]
        cut = History.from_text("<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\npart")
        assert cut[-1].content == "part" and not cut[-1].is_complete

    def test_append_and_extend(self):
        h = History.from_chats([CHATS[0], CHATS[0]])
        h2 = h.append(History(role="user", content="again", batch_size=(2,)))
        assert h2.shape == (2, 3) and h2[1, 2].content == "again"
        h3 = h.extend(History.from_chats([CHATS[0], CHATS[0]]))
        assert h3.shape == (2, 4) and h3[0].role == ["user", "assistant", "user", "assistant"]
        with pytest.raises(ValueError, match="expected \\(2,\\)"):
            h.extend(History.from_chats([CHATS[0]] * 3))

    def test_content_base(self):
        c = ContentBase(type="text", text="hello")
        assert c.text == "hello" and c.url is None

    def test_unknown_role_raises(self):
        with pytest.raises(ValueError, match="role 'robot'"):
            History(role="robot", content="beep")
        with pytest.raises(ValueError, match="role 'robot'"):
            History.from_chats([[{"role": "robot", "content": "x"}]])

    def test_missing_chat_template_raises(self):
        bare = make_tokenizer(chat_template=None)
        h = History.from_chats(CHATS[:1])
        with pytest.raises(ValueError, match="chat_template"):
            h.apply_chat_template(tokenizer=bare)
        # a named template works without the tokenizer's
        text = h.apply_chat_template(
            tokenizer=bare, chat_template_name="chatml_format", add_generation_prompt=False
        )
        assert text[0].startswith("<|im_start|>user\nhi")
        with pytest.raises(ValueError, match="chat_template_name 'nope'"):
            h.apply_chat_template(tokenizer=bare, chat_template_name="nope")

    def test_message_without_role_raises(self):
        with pytest.raises(ValueError, match="message 0"):
            History.from_chats([[{"content": "x"}]])


class TestContainers:
    def test_fields(self):
        tokens = Tokens(
            prompt=torch.tensor([[1, 2]]),
            response=torch.tensor([[3]]),
            full=torch.tensor([[1, 2, 3]]),
            padded=True,
            batch_size=(1,),
        )
        assert tokens.full.tolist() == [[1, 2, 3]] and tokens.padded
        masks = Masks(all_attention_mask=torch.ones(1, 3, dtype=torch.bool), batch_size=(1,))
        assert masks.all_assistant_mask is None
        lp = LogProbs(full=torch.zeros(1, 3), batch_size=(1,))
        assert lp.full.shape == (1, 3)
        text = Text(prompt="a", response="b", full="ab")
        assert (text.prompt, text.response, text.full) == ("a", "b", "ab")

    def test_chat_history_full_is_prompt_then_response(self):
        prompt = History.from_chats([CHATS[0][:1]])
        response = History.from_chats([CHATS[0][1:]])
        ch = ChatHistory(prompt=prompt, response=response, batch_size=(1,))
        assert ch.full.shape == (1, 2) and ch.full[0].role == ["user", "assistant"]


@pytest.mark.parametrize("name", ["rl.data.llm._history", "rl.data.llm._containers"])
def test_docstring_examples(name):
    result = doctest.testmod(
        importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    assert result.attempted > 0 and result.failed == 0
