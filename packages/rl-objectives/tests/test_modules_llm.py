"""rl.modules.llm: LLMMaskedCategorical and TransformersWrapper on a tiny GPT-2 built in code."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

pytest.importorskip("transformers")

from tensordict import TensorDict, lazy_stack  # noqa: E402

from rl.data.llm import ChatHistory, History, Text, Tokens  # noqa: E402
from rl.modules.llm import LLMMaskedCategorical, TransformersWrapper  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from _tiny_llm import make_model, make_tokenizer  # noqa: E402

META = torch.device("meta")  # a GPU's stand-in: see TestTransformersWrapperDevice
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


@pytest.fixture
def meta_masks(monkeypatch):
    """``transformers``' attention masks built without reading a ``meta`` mask's values (a
    ``meta`` tensor counts as traced, as a tensor under ``torch.compile`` does)."""
    import transformers.masking_utils as masking

    traced = masking.is_tracing
    monkeypatch.setattr(
        masking,
        "is_tracing",
        lambda tensor=None: traced(tensor) or (tensor is not None and tensor.is_meta),
    )


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


def chats(device=None) -> TensorDict:
    """``CHATS`` as the ``("history", "full")`` a scorer reads."""
    history = ChatHistory(full=History.from_chats(CHATS), batch_size=(2,))
    return TensorDict({"history": history}, batch_size=(2,), device=device)


def prompts() -> TensorDict:
    """``PROMPTS`` as the ``("history", "prompt")`` a generating wrapper reads."""
    history = ChatHistory(prompt=History.from_chats(PROMPTS), batch_size=(2,))
    return TensorDict({"history": history}, batch_size=(2,))


OUTPUTS = [
    ("tokens", "full"),
    ("masks", "all_attention_mask"),
    ("masks", "all_assistant_mask"),
    ("log_probs", "full"),
]
GENERATED = [*OUTPUTS, ("tokens", "prompt"), ("tokens", "response"), ("log_probs", "response")]


def devices(out: TensorDict, keys, pad_output: bool) -> set[torch.device]:
    """The devices of the tensors at ``keys`` (of every row when not padded)."""
    if pad_output:
        return {out.get(key).device for key in keys}
    return {row.device for key in keys for row in out.get(key, as_list=True)}


class SpyLM(nn.Module):
    """A causal LM's stand-in with one parameter on ``device``: records the devices of the
    tensors it is called with and answers there (uniform logits). ``generate`` answers
    ``max_new_tokens`` end-of-sequence tokens made on the CPU: the values a ``meta`` tensor
    lacks (a model on a GPU answers there; the wrapper copies the answer back either way)."""

    def __init__(self, tok, device=None) -> None:
        super().__init__()
        self.vocab, self.eos = len(tok), tok.eos_token_id
        self.weight = nn.Parameter(torch.zeros(1, device=device))
        self.seen: list[set[torch.device]] = []

    def forward(self, input_ids, attention_mask, position_ids):
        self.seen.append({input_ids.device, attention_mask.device, position_ids.device})
        logits = torch.zeros(*input_ids.shape, self.vocab, device=input_ids.device)
        return SimpleNamespace(logits=logits)

    def generate(self, input_ids, attention_mask, max_new_tokens, **kwargs):
        self.seen.append({input_ids.device, attention_mask.device})
        new = torch.full((input_ids.shape[0], max_new_tokens), self.eos)
        return torch.cat([torch.zeros(input_ids.shape, dtype=torch.long), new], -1)


class TestTransformersWrapperDevice:
    """Where the wrapper computes and writes, as TorchRL's does: on its model's device (or
    ``device``), or on the input tensordict's device when it has one. No GPU here: a model
    on PyTorch's ``meta`` device stands for one (an op mixing a ``meta`` tensor with a
    non-scalar CPU tensor fails as one mixing CUDA and the CPU does). Sampling needs
    values, which ``meta`` lacks: generation runs a :class:`SpyLM` there."""

    @pytest.mark.parametrize("pad_output", [True, False])
    def test_scores_on_the_models_device(self, tok, model, meta_masks, pad_output):
        on_meta = make_model(tok).to(META)
        scorer = TransformersWrapper(on_meta, tokenizer=tok, generate=False, pad_output=pad_output)
        out = scorer(chats())
        assert devices(out, OUTPUTS, pad_output) == {META}
        # the text is decoded from the tokenizer's rows, on the CPU
        on_cpu = TransformersWrapper(model, tokenizer=tok, generate=False, pad_output=pad_output)
        expected = on_cpu(chats())
        assert out["text", "full"] == expected["text", "full"]
        assert (
            out.get(("tokens", "full"), as_padded_tensor=True).shape
            == expected.get(("tokens", "full"), as_padded_tensor=True).shape
        )

    @pytest.mark.parametrize("pad_output", [True, False])
    def test_generates_on_the_models_device(self, tok, pad_output):
        spy = SpyLM(tok, device=META)
        policy = TransformersWrapper(
            spy, tokenizer=tok, pad_output=pad_output, generate_kwargs={"max_new_tokens": 3}
        )
        out = policy(prompts())
        assert spy.seen == [{META}, {META}]  # generate, then the scoring forward
        assert devices(out, GENERATED, pad_output) == {META}
        assert out["history", "response"][0, -1].content == ""  # the EOS, decoded on the CPU
        assert out["history", "response"][0, -1].is_complete

    @pytest.mark.parametrize("generate", [True, False])
    def test_device_argument_is_honoured(self, tok, generate):
        """``device`` wins over the parameters' device (which stay where they are)."""
        spy = SpyLM(tok, device="cpu")
        wrapper = TransformersWrapper(
            spy, tokenizer=tok, generate=generate, pad_output=True, device="meta"
        )
        assert wrapper.device == META
        out = wrapper(prompts() if generate else chats())
        assert spy.seen and all(seen == {META} for seen in spy.seen)
        assert devices(out, GENERATED if generate else OUTPUTS, True) == {META}
        assert spy.weight.device == torch.device("cpu")

    @pytest.mark.parametrize("inplace", [True, False])
    def test_outputs_go_to_the_tensordicts_device(self, tok, model, inplace):
        """Computed on the model's device (the CPU), written where the input lives."""
        scorer = TransformersWrapper(model, tokenizer=tok, generate=False, inplace=inplace)
        out = scorer(chats(device=META))
        assert out.device == META
        assert devices(out, OUTPUTS, False) == {META}

    @pytest.mark.parametrize("mask_key", [None, ("masks", "all_assistant_mask"), "sft"])
    def test_get_dist_on_the_models_device(self, tok, model, meta_masks, mask_key):
        """A tensordict without a device (its tensors on the CPU, as the wrapper wrote them
        there) is scored where the model is, and the distribution is there."""
        if mask_key == "sft":  # the response's tokens: those past tokens.prompt
            td = TransformersWrapper(
                model, tokenizer=tok, pad_output=True, generate_kwargs={"max_new_tokens": 3}
            )(prompts()).exclude(("masks", "all_assistant_mask"))
        else:
            td = TransformersWrapper(model, tokenizer=tok, generate=False, pad_output=True)(chats())
        scorer = TransformersWrapper(
            make_model(tok).to(META), tokenizer=tok, generate=False, pad_output=True
        )
        if mask_key == "sft":
            dist = scorer._get_sft_dist(td)
        else:
            dist = scorer.get_dist(td, mask_key=mask_key)
        assert dist.logits.device == dist.mask.device == META
        assert dist.log_prob(td.get(("tokens", "full")).to(META)).device == META

    @pytest.mark.parametrize("pad_output", [True, False])
    @pytest.mark.parametrize("generate", [True, False])
    def test_cpu_outputs_unchanged(self, tok, model, pad_output, generate):
        """On the CPU, ``device="cpu"`` and the default write the same values there, and
        the assistant's log-probs are those rl wrote before it honoured ``device``."""
        kwargs = {"max_new_tokens": 4, "do_sample": False}
        outs = [
            TransformersWrapper(
                model,
                tokenizer=tok,
                generate=generate,
                pad_output=pad_output,
                generate_kwargs=kwargs,
                device=device,
            )(prompts() if generate else chats())
            for device in (None, "cpu")
        ]
        keys = GENERATED if generate else OUTPUTS
        assert devices(outs[0], keys, pad_output) == {torch.device("cpu")}
        for key in keys:
            a, b = (o.get(key, as_padded_tensor=True) for o in outs)
            assert torch.equal(a, b), key
        if not generate:  # the log-probs against the model's own logits, row by row
            lp = outs[0].get(("log_probs", "full"), as_padded_tensor=True)
            tokens = outs[0].get(("tokens", "full"), as_padded_tensor=True)
            att = outs[0].get(("masks", "all_attention_mask"), as_padded_tensor=True)
            for i in range(tokens.shape[0]):
                n = int(att[i].sum())
                with torch.no_grad():
                    logits = model(input_ids=tokens[i : i + 1, :n]).logits[0]
                hand = logits[:-1].log_softmax(-1).gather(-1, tokens[i, 1:n, None])[:, 0]
                torch.testing.assert_close(lp[i, 1:n], hand, atol=1e-4, rtol=1e-4)


def model_inputs(model) -> tuple[list, object]:
    """A list that records the shapes of ``model``'s inputs, and the hook's handle."""
    seen = []
    handle = model.register_forward_hook(
        lambda m, args, kwargs, out: seen.append(
            (tuple(kwargs["input_ids"].shape), tuple(kwargs["attention_mask"].shape))
        ),
        with_kwargs=True,
    )
    return seen, handle


def scoring_input(mode: str, tok) -> TensorDict:
    """``CHATS`` as a scorer of ``input_mode=mode`` reads them."""
    if mode == "history":
        return chats()
    texts = [
        History.from_chats([c])[0].apply_chat_template(tokenizer=tok, add_generation_prompt=False)
        for c in CHATS
    ]
    if mode == "text":
        return TensorDict({"text": Text(full=texts, batch_size=(2,))}, batch_size=(2,))
    rows = [torch.tensor(tok(t)["input_ids"]) for t in texts]
    return lazy_stack([TensorDict({"tokens": Tokens(full=r)}) for r in rows])


class TestTransformersWrapperPacking:
    """``pad_model_input=False``: one packed row, the same log-probs as padded rows."""

    @pytest.mark.parametrize("pad_output", [True, False])
    @pytest.mark.parametrize("mode", ["history", "text", "tokens"])
    def test_packed_equals_padded(self, tok, model, mode, pad_output):
        kwargs = {"input_mode": mode, "generate": False, "pad_output": pad_output}
        padded = TransformersWrapper(model, tokenizer=tok, **kwargs)
        packed = TransformersWrapper(model, tokenizer=tok, pad_model_input=False, **kwargs)
        assert padded.pad_model_input is True and packed.pad_model_input is False
        expected = padded(scoring_input(mode, tok))
        seen, handle = model_inputs(model)
        try:
            out = packed(scoring_input(mode, tok))
        finally:
            handle.remove()
        mask = out.get(("masks", "all_attention_mask"), as_padded_tensor=True)
        lengths = mask.sum(-1).tolist()
        n = sum(lengths)
        assert seen == [((1, n), (1, 1, n, n))]  # one packed row, a block-causal mask
        for key in (("log_probs", "full"), ("tokens", "full"), ("masks", "all_attention_mask")):
            a, b = (o.get(key, as_padded_tensor=True) for o in (out, expected))
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
        # and each sequence as if alone
        lp = out.get(("log_probs", "full"), as_padded_tensor=True)
        ids = out.get(("tokens", "full"), as_padded_tensor=True)
        for i, k in enumerate(lengths):
            torch.testing.assert_close(
                lp[i, 1:k], direct_log_probs(model, ids[i, :k]), atol=1e-5, rtol=1e-5
            )

    def test_eager_attention_and_gradients(self, tok):
        """The additive mask serves eager attention too; gradients match padding's."""
        eager = make_model(tok)
        eager.set_attn_implementation("eager")
        grads = []
        for pad_model_input in (True, False):
            eager.zero_grad()
            scorer = TransformersWrapper(
                eager,
                tokenizer=tok,
                generate=False,
                pad_output=True,
                pad_model_input=pad_model_input,
            )
            lp = scorer(chats())["log_probs", "full"]
            lp.sum().backward()
            grads.append(eager.transformer.wte.weight.grad.clone())
            if not pad_model_input:
                n = int(scorer(chats())["masks", "all_attention_mask"][0].sum())
                ids = scorer(chats())["tokens", "full"][0, :n]
                torch.testing.assert_close(
                    lp[0, 1:n].detach(), direct_log_probs(eager, ids), atol=1e-5, rtol=1e-5
                )
        torch.testing.assert_close(grads[0], grads[1], atol=1e-5, rtol=1e-4)

    def test_get_dist_packed(self, tok, model):
        td = TransformersWrapper(model, tokenizer=tok, generate=False, pad_output=True)(chats())
        dists = [
            TransformersWrapper(model, tokenizer=tok, generate=False, pad_model_input=p).get_dist(
                td, mask_key=("masks", "all_assistant_mask")
            )
            for p in (True, False)
        ]
        a, b = (d.log_prob(td["tokens", "full"]) for d in dists)
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)

    @pytest.mark.parametrize("pad_model_input", [True, False])
    def test_with_generate_raises(self, tok, model, pad_model_input):
        with pytest.raises(ValueError, match=f"pad_model_input={pad_model_input} is only for"):
            TransformersWrapper(model, tokenizer=tok, pad_model_input=pad_model_input)


class TestTransformersWrapperLayout:
    """``layout=torch.jagged``: each field one ``[B, j]`` nested tensor."""

    @pytest.mark.parametrize("generate", [True, False])
    def test_jagged_holds_the_strided_rows(self, tok, model, generate):
        kwargs = {
            "generate": generate,
            "generate_kwargs": {"max_new_tokens": 4, "do_sample": False},
        }
        strided = TransformersWrapper(model, tokenizer=tok, **kwargs)
        jagged = TransformersWrapper(model, tokenizer=tok, layout=torch.jagged, **kwargs)
        assert strided.layout is torch.strided and jagged.layout is torch.jagged
        make = prompts if generate else chats
        expected, out = strided(make()), jagged(make())
        keys = GENERATED if generate else OUTPUTS
        for key in keys:
            value = out.get(key)
            assert value.is_nested and value.layout is torch.jagged, key
            for row, exp in zip(value.unbind(0), expected.get(key, as_list=True)):
                torch.testing.assert_close(row, exp, atol=1e-5, rtol=1e-5)
        # the fields over the full sequence share their ragged dimension
        lp, asst = out["log_probs", "full"], out["masks", "all_assistant_mask"]
        masked = (lp * asst).to_padded_tensor(0.0)
        torch.testing.assert_close(
            masked,
            expected.get(("log_probs", "full"), as_padded_tensor=True)
            * expected.get(("masks", "all_assistant_mask"), as_padded_tensor=True),
            atol=1e-5,
            rtol=1e-5,
        )
        assert out[1]["text", "full"] == expected[1]["text", "full"]
        # the wrapper reads its jagged output back
        d_out = jagged.get_dist(out, mask_key=("masks", "all_assistant_mask"))
        d_exp = strided.get_dist(expected, mask_key=("masks", "all_assistant_mask"))
        full = expected.get(("tokens", "full"), as_padded_tensor=True)
        torch.testing.assert_close(d_out.log_prob(full), d_exp.log_prob(full))

    def test_one_row_input(self, tok, model):
        row = chats()[0]
        out = TransformersWrapper(model, tokenizer=tok, generate=False, layout=torch.jagged)(row)
        expected = TransformersWrapper(model, tokenizer=tok, generate=False)(chats()[0])
        assert out.batch_size == ()
        torch.testing.assert_close(out["log_probs", "full"], expected["log_probs", "full"])

    def test_layout_defaults_and_errors(self, tok, model):
        assert TransformersWrapper(model, tokenizer=tok, pad_output=True).layout is None
        with pytest.raises(ValueError, match="layout must be torch.strided or torch.jagged"):
            TransformersWrapper(model, tokenizer=tok, layout=torch.sparse_coo)
        with pytest.raises(ValueError, match="layout=torch.jagged is for pad_output=False"):
            TransformersWrapper(model, tokenizer=tok, layout=torch.jagged, pad_output=True)


GREEDY = {"max_new_tokens": 3, "do_sample": False}


class TestTransformersWrapperPreferTokens:
    """``prefer_tokens=True``: a history prompt's tokens read from ``tokens.prompt``."""

    def given(self, tok, text: str) -> torch.Tensor:
        return torch.tensor(tok(text)["input_ids"])

    def test_given_tokens_are_continued(self, tok, model):
        own = "<|im_start|>user\nzz<|im_end|>\n<|im_start|>assistant\n"  # not the history's
        td = prompts()[:1]
        td.set("tokens", Tokens(prompt=self.given(tok, own)[None], batch_size=(1,)))
        policy = TransformersWrapper(
            model, tokenizer=tok, prefer_tokens=True, generate_kwargs=GREEDY
        )
        assert policy.prefer_tokens is True
        out = policy(td.copy())
        torch.testing.assert_close(out[0]["tokens", "prompt"], self.given(tok, own))
        assert out[0]["text", "prompt"] == own
        assert out["history", "prompt"][0].content == ["hi"]  # the history still read
        # the same answer as a tokens-mode policy given those tokens
        tokens_in = TensorDict(
            {"tokens": Tokens(prompt=self.given(tok, own)[None], batch_size=(1,))},
            batch_size=(1,),
        )
        ref = TransformersWrapper(model, tokenizer=tok, input_mode="tokens", generate_kwargs=GREEDY)
        torch.testing.assert_close(
            out[0]["tokens", "response"], ref(tokens_in)[0]["tokens", "response"]
        )
        # without prefer_tokens the chat template is applied, as before
        plain = TransformersWrapper(model, tokenizer=tok, generate_kwargs=GREEDY)(td.copy())
        templated = History.from_chats(PROMPTS[:1])[0].apply_chat_template(tokenizer=tok)
        assert plain[0]["text", "prompt"] == templated != own

    def test_row_by_row_full_and_padding(self, tok, model):
        """Row 0 holds padded ``tokens.prompt``, row 1 only ``tokens.full``, row 2 nothing."""
        texts = ["<|im_start|>user\nab<|im_end|>\n", "<|im_start|>user\nxyz<|im_end|>\n"]
        pad = tok.pad_token_id
        ids0 = self.given(tok, texts[0])
        rows = [
            TensorDict(
                {"tokens": Tokens(prompt=torch.cat([torch.full((3,), pad), ids0]), padded=True)}
            ),
            TensorDict({"tokens": Tokens(full=self.given(tok, texts[1]))}),
            TensorDict({}),
        ]
        history = History.from_chats(PROMPTS + [[{"role": "user", "content": "q"}]])
        for i, row in enumerate(rows):
            row.set("history", ChatHistory(prompt=history[i]))
        policy = TransformersWrapper(
            model, tokenizer=tok, prefer_tokens=True, generate_kwargs=GREEDY
        )
        out = policy(lazy_stack(rows))
        prompts_out = out.get(("tokens", "prompt"), as_list=True)
        torch.testing.assert_close(prompts_out[0], ids0)
        torch.testing.assert_close(prompts_out[1], self.given(tok, texts[1]))
        assert out[2]["text", "prompt"] == history[2].apply_chat_template(tokenizer=tok)

    def test_scoring_ignores_it(self, tok, model):
        """Only a generating history policy reads the tokens (as TorchRL's)."""
        td = chats()
        td.set("tokens", Tokens(prompt=torch.zeros(2, 3, dtype=torch.long), batch_size=(2,)))
        out = TransformersWrapper(model, tokenizer=tok, generate=False, prefer_tokens=True)(td)
        expected = TransformersWrapper(model, tokenizer=tok, generate=False)(chats())
        assert out["text", "full"] == expected["text", "full"]
