"""rl.modules.llm: LLMMaskedCategorical and TransformersWrapper on a tiny GPT-2 built in code."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from tensordict import TensorDict  # noqa: E402

from rl.data.llm import ChatHistory, History, Text, Tokens  # noqa: E402
from rl.modules.llm import LLMMaskedCategorical, TransformersWrapper  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from _tiny_llm import make_model, make_tokenizer  # noqa: E402

PROMPTS = [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "abcd"}]]
CHATS = [
    [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
    [{"role": "user", "content": "abcd"}, {"role": "assistant", "content": "xyz"}],
]


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    return make_model(tok)


def direct_log_probs(model, ids: torch.Tensor) -> torch.Tensor:
    """log p(ids[t] | ids[:t]) for t >= 1 of one unpadded sequence, from a plain model call."""
    with torch.no_grad():
        logits = model(input_ids=ids[None]).logits[0]
    return logits[:-1].log_softmax(-1).gather(-1, ids[1:, None]).squeeze(-1)


class TestLLMMaskedCategorical:
    def test_log_prob_position_mask(self):
        torch.manual_seed(0)
        logits = torch.randn(2, 4, 5)
        mask = torch.tensor([[False, True, True, False], [True, True, True, True]])
        tokens = torch.randint(5, (2, 4))
        lp = LLMMaskedCategorical(logits, mask).log_prob(tokens)
        expected = logits.log_softmax(-1).gather(-1, tokens[..., None]).squeeze(-1)
        torch.testing.assert_close(lp, torch.where(mask, expected, 0.0))
        ent = LLMMaskedCategorical(logits, mask).entropy()
        p = logits.softmax(-1)
        torch.testing.assert_close(ent, torch.where(mask, -(p * p.log()).sum(-1), 0.0))

    def test_token_mask(self):
        logits = torch.zeros(1, 2, 3)
        mask = torch.tensor([[[True, True, False], [True, True, True]]])
        dist = LLMMaskedCategorical(logits, mask)
        lp = dist.log_prob(torch.tensor([[2, 0]]))
        assert lp[0, 0] == -float("inf")
        torch.testing.assert_close(lp[0, 1], torch.tensor(3.0).reciprocal().log())
        assert (dist.sample((50,))[:, 0, 0] != 2).all()

    def test_bad_mask_shape(self):
        with pytest.raises(ValueError, match="mask has shape \\(3,\\)"):
            LLMMaskedCategorical(torch.zeros(2, 3, 4), torch.ones(3, dtype=torch.bool))


class TestTransformersWrapper:
    def test_score_history_matches_model(self, tok, model):
        history = History.from_chats(CHATS)
        td = TensorDict({"history": ChatHistory(full=history, batch_size=(2,))}, batch_size=(2,))
        wrapper = TransformersWrapper(model, tokenizer=tok, generate=False, pad_output=True)
        out = wrapper(td)
        lp, att, asst = (
            out["log_probs", "full"],
            out["masks", "all_attention_mask"],
            out["masks", "all_assistant_mask"],
        )
        tokens = out["tokens", "full"]
        assert lp.shape == att.shape == asst.shape == tokens.shape
        for i in range(2):
            n = int(att[i].sum())
            ids = tokens[i, :n]
            assert tok.decode(ids) == history[i].apply_chat_template(
                tokenizer=tok, add_generation_prompt=False
            )
            torch.testing.assert_close(
                lp[i, 1:n], direct_log_probs(model, ids), atol=1e-5, rtol=1e-5
            )
            assert lp[i, 0] == 0 and (lp[i, n:] == 0).all()
            assert tok.decode(ids[asst[i, :n]]) == CHATS[i][1]["content"] + "<|im_end|>"

    def test_unpadded_rows(self, tok, model):
        history = History.from_chats(CHATS)
        td = TensorDict({"history": ChatHistory(full=history, batch_size=(2,))}, batch_size=(2,))
        out = TransformersWrapper(model, tokenizer=tok, generate=False)(td)
        rows = out.get(("log_probs", "full"), as_list=True)
        lens = [
            len(
                tok(history[i].apply_chat_template(tokenizer=tok, add_generation_prompt=False))[
                    "input_ids"
                ]
            )
            for i in range(2)
        ]
        assert [r.numel() for r in rows] == lens
        assert out["tokens"][0].padded is False

    def test_generate_history(self, tok, model):
        torch.manual_seed(1)
        history = History.from_chats(PROMPTS)
        td = TensorDict({"history": ChatHistory(prompt=history, batch_size=(2,))}, batch_size=(2,))
        wrapper = TransformersWrapper(model, tokenizer=tok, generate_kwargs={"max_new_tokens": 4})
        out = wrapper(td)
        for i in range(2):
            row = out[i]
            prompt, response, full = (row["tokens", k] for k in ("prompt", "response", "full"))
            torch.testing.assert_close(full, torch.cat([prompt, response]))
            assert 1 <= response.numel() <= 4
            assert tok.decode(prompt) == history[i].apply_chat_template(tokenizer=tok)
            lp = row["log_probs", "response"]
            torch.testing.assert_close(
                lp, direct_log_probs(model, full)[-response.numel() :], atol=1e-5, rtol=1e-5
            )
            asst = row["masks", "all_assistant_mask"]
            assert asst.sum() == response.numel() and asst[-response.numel() :].all()
            full_h = row["history", "full"]
            assert full_h.role == ["user", "assistant"]
            assert full_h[-1].content == row["text", "response"]

    def test_generate_text_and_tokens_inputs(self, tok, model):
        torch.manual_seed(0)
        text = TensorDict({"text": Text(prompt="ab", batch_size=())}, batch_size=()).unsqueeze(0)
        wrapper = TransformersWrapper(
            model,
            tokenizer=tok,
            input_mode="text",
            generate_kwargs={"max_new_tokens": 3, "do_sample": False},
        )
        out = wrapper(text)
        assert out[0]["text", "full"].startswith("ab")
        ids = torch.tensor(tok("ab")["input_ids"])
        tokens = TensorDict({"tokens": Tokens(prompt=ids[None], batch_size=(1,))}, batch_size=(1,))
        out2 = TransformersWrapper(
            model,
            tokenizer=tok,
            input_mode="tokens",
            generate_kwargs={"max_new_tokens": 3, "do_sample": False},
        )(tokens)
        # greedy decoding: the same prompt gives the same answer through both inputs
        torch.testing.assert_close(out2[0]["tokens", "response"], out[0]["tokens", "response"])

    @pytest.mark.parametrize("pad_output", [True, False])
    def test_score_the_generated_tokens(self, tok, model, pad_output):
        """A tokens-mode scorer reads a generating wrapper's output (padded, with its
        ``padded`` flag stored by the container, or rows of their own length)."""
        torch.manual_seed(0)
        td = TensorDict(
            {"history": ChatHistory(prompt=History.from_chats(PROMPTS), batch_size=(2,))},
            batch_size=(2,),
        )
        td = TransformersWrapper(
            model, tokenizer=tok, pad_output=pad_output, generate_kwargs={"max_new_tokens": 4}
        )(td)
        scorer = TransformersWrapper(
            model,
            tokenizer=tok,
            input_mode="tokens",
            generate=False,
            pad_output=True,
            log_probs_key="scored",
        )
        out = scorer(td.copy())
        for i in range(2):
            ids = (
                td.get(("tokens", "full"), as_list=True)[i]
                if not pad_output
                else (td["tokens", "full"][i][td["masks", "all_attention_mask"][i].bool()])
            )
            lp = out["scored", "full"][i, 1 : ids.numel()]
            torch.testing.assert_close(lp, direct_log_probs(model, ids), atol=1e-5, rtol=1e-4)

    def test_prompt_longer_than_context(self, tok):
        small = make_model(tok, n_positions=16)
        history = History.from_chats([[{"role": "user", "content": "x" * 40}]])
        td = TensorDict({"history": ChatHistory(prompt=history, batch_size=(1,))}, batch_size=(1,))
        with pytest.raises(
            ValueError, match="prompt tokens are .* longer than the model's context of 16"
        ):
            TransformersWrapper(small, tokenizer=tok)(td)

    def test_bad_arguments(self, tok, model):
        with pytest.raises(ValueError, match="input_mode 'audio'"):
            TransformersWrapper(model, tokenizer=tok, input_mode="audio")
        with pytest.raises(ValueError, match="needs a tokenizer"):
            TransformersWrapper(model)
        bare = make_tokenizer(chat_template=None)
        td = TensorDict(
            {"history": ChatHistory(prompt=History.from_chats(PROMPTS[:1]), batch_size=(1,))},
            batch_size=(1,),
        )
        with pytest.raises(ValueError, match="chat_template"):
            TransformersWrapper(model, tokenizer=bare)(td)
