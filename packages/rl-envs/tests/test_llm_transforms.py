"""rl.envs.llm transforms: KL (against a hand computation), the Python interpreter, thinking
prompts, the tokenizer and the chat template."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from _tiny_llm import make_tokenizer  # noqa: E402
from tensordict import TensorDict, lazy_stack  # noqa: E402

from rl.data.llm import History  # noqa: E402
from rl.envs.llm import (  # noqa: E402
    AddThinkingPrompt,
    ChatEnv,
    GSM8KEnv,
    KLComputation,
    KLRewardTransform,
    PythonInterpreter,
    RetrieveKL,
    RetrieveLogProb,
    TemplateTransform,
    Tokenizer,
)


class TableScorer(torch.nn.Module):
    """A scoring LLM wrapper stand-in: ``log p(token) = -scale * token`` (0 for the first
    token), the assistant's tokens those past ``("tokens", "prompt")``."""

    generate = False
    return_log_probs = True

    def __init__(self, scale, log_probs_key="log_probs", input_mode="history", pad_output=True):
        super().__init__()
        self.scale, self.log_probs_key = scale, log_probs_key
        self.input_mode, self.pad_output = input_mode, pad_output
        self.in_keys = [("tokens", "full")]

    def forward(self, td):
        full = td.get(("tokens", "full"))
        lp = -self.scale * full.float()
        lp[..., 0] = 0.0
        plen = td.get(("tokens", "prompt")).shape[-1]
        td.set((self.log_probs_key, "full"), lp)
        td.set(
            ("masks", "all_assistant_mask"), torch.arange(full.shape[-1]).expand_as(full) >= plen
        )
        return td


def scored_td():
    full = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    return TensorDict(
        {
            ("tokens", "full"): full,
            ("tokens", "prompt"): full[:, :2],
            "next": TensorDict(reward=torch.tensor([[[1.0]], [[2.0]]]), batch_size=(2,)),
        },
        batch_size=(2,),
    )


class TestKL:
    def test_retrieve_log_prob_assistant_only(self):
        td = RetrieveLogProb(TableScorer(0.5), log_probs_full_key=("ref", "full"))(scored_td())
        expected = torch.tensor([[0.0, 0.0, -1.5, -2.0], [0.0, 0.0, -3.5, -4.0]])
        torch.testing.assert_close(td["next", "ref", "full"], expected)

    def test_retrieve_kl_matches_hand_computation(self):
        gen, ref = TableScorer(0.5), TableScorer(0.2, log_probs_key="ref_log_probs")
        td = RetrieveKL(gen, ref, coeff=0.1)(scored_td())
        tokens = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]]).float()
        kl = (-0.5 * tokens) - (-0.2 * tokens)  # log p - log q on the assistant's tokens
        kl[:, :2] = 0.0
        torch.testing.assert_close(td["next", "kl_penalty"], kl)
        reward = torch.tensor([1.0, 2.0])[:, None, None] - 0.1 * kl.unsqueeze(-1)
        torch.testing.assert_close(td["next", "reward"], reward)

    def test_kl_computation_nested_rows_and_nan(self):
        gen = torch.nested.as_nested_tensor(
            [torch.tensor([-1.0, float("nan")]), torch.tensor([-2.0])]
        )
        ref = torch.nested.as_nested_tensor([torch.tensor([-0.5, -1.0]), torch.tensor([-1.0])])
        td = TensorDict(
            {("log_probs", "full"): gen, ("ref_log_probs", "full"): ref}, batch_size=(2,)
        )
        out = KLComputation(add_to_reward=False)(td)
        rows = [r.tolist() for r in out["kl_penalty"].unbind(0)]
        assert rows == [[-0.5, 0.0], [-1.0]]

    def test_kl_errors(self):
        td = TensorDict({("log_probs", "full"): torch.zeros(1, 3)}, batch_size=(1,))
        with pytest.raises(KeyError, match="ref_log_probs"):
            KLComputation()(td)
        td[("ref_log_probs", "full")] = torch.zeros(1, 3)
        td["reward"] = torch.zeros(1, 3)
        with pytest.raises(ValueError, match="one more \\(trailing\\) dim"):
            KLComputation()(td)
        with pytest.raises(ValueError, match="same log_probs_key"):
            RetrieveKL(TableScorer(1.0), TableScorer(2.0))
        generating = TableScorer(1.0)
        generating.generate = True
        with pytest.raises(ValueError, match="must score, not generate"):
            RetrieveLogProb(generating)
        with pytest.raises(
            ValueError, match="assistant_only=True needs a model with input_mode='history'"
        ):
            RetrieveLogProb(TableScorer(1.0, input_mode="tokens"))

    def test_kl_reward_transform(self):
        ref = TableScorer(0.2, log_probs_key="ref_lp", input_mode="tokens")
        td = scored_td()
        td[("log_probs", "full")] = -0.5 * td["tokens", "full"].float()
        td["masks"] = TensorDict(
            all_assistant_mask=torch.arange(4).expand(2, 4) >= 2, batch_size=(2,)
        )
        t = KLRewardTransform(ref, coef=2.0)
        env = ChatEnv(batch_size=(2,), input_mode="tokens", tokenizer=make_tokenizer())
        env = env.append_transform(t)
        out = t(td)
        tokens = td["tokens", "full"].float()
        kl = -0.3 * tokens
        kl[:, :2] = 0.0
        torch.testing.assert_close(out["next", "kl_penalty"].squeeze(-1), kl)
        torch.testing.assert_close(
            out["next", "reward"].squeeze(-1), torch.tensor([[1.0], [2.0]]) - 2.0 * kl
        )
        with pytest.raises(ValueError, match="must read tokens"):
            KLRewardTransform(TableScorer(1.0))


class TestPythonInterpreter:
    def test_output_and_error_appended_as_tool_turns(self):
        env = ChatEnv(batch_size=(2,)).append_transform(PythonInterpreter(timeout=20))
        td = env.reset(TensorDict(query=["compute", "nothing"], batch_size=(2,)))
        code = "Here:\n```python\nprint(6 * 7)\n```\nand\n```python\n1 / 0\n```"
        turns = lazy_stack(
            [History(role="assistant", content=c, batch_size=()) for c in (code, "no code")]
        )
        td["history"].full = td["history"].prompt.extend(turns.unsqueeze(-1))
        history = env.step(td)["next", "history"].prompt
        first, second = history[0], history[1]
        assert first.role == ["user", "assistant", "tool", "tool"]
        assert first[2].content == "Code block 1 executed successfully:\n42\n"
        assert first[3].content.startswith("Code block 2 failed:\n")
        assert "ZeroDivisionError" in first[3].content
        assert second.role == ["user", "assistant"]

    def test_timeout_kills_the_block(self):
        interpreter = PythonInterpreter(timeout=1)
        result = interpreter.execute("import time\ntime.sleep(30)")
        assert result == {
            "success": False,
            "stdout": "",
            "stderr": "Code execution timed out",
            "returncode": -1,
        }

    def test_runs_out_of_process(self):
        import os

        out = PythonInterpreter(timeout=20).execute("import os\nprint(os.getpid())")
        assert out["success"] and int(out["stdout"]) != os.getpid()

    def test_unsupported_modes(self):
        with pytest.raises(NotImplementedError, match="persistent=True"):
            PythonInterpreter(persistent=True)
        with pytest.raises(NotImplementedError, match="services='ray'"):
            PythonInterpreter(services="ray")


class TestAddThinkingPrompt:
    def test_edit_last_turn_clears_done_and_reward(self):
        rows = [
            {"question": "6*12?", "answer": "#### 72"},
            {"question": "1+1?", "answer": "#### 2"},
        ]
        env = GSM8KEnv(dataset=rows, num_envs=2, shuffle=False)
        env.append_transform(
            AddThinkingPrompt(cond=lambda td: td["reward"].item() < 1, prompt="Hmm.")
        )
        td = env.reset()
        answers = ["<answer>72</answer>", "<think>1+1</think><answer>3</answer><|im_end|>"]
        turns = lazy_stack([History(role="assistant", content=a, batch_size=()) for a in answers])
        td["history"].full = td["history"].prompt.extend(turns.unsqueeze(-1))
        nxt = env.step(td)["next"]
        assert nxt["history"].prompt[0, -1].content == "<answer>72</answer>"
        assert nxt["history"].prompt[1, -1].content == "<think>1+1</think>Hmm.<|im_end|>"
        assert nxt["done"].flatten().tolist() == [True, False]
        assert nxt["reward"].flatten().tolist() == [1.0, 0.0]

    def test_new_user_message(self):
        env = ChatEnv(batch_size=(1,)).append_transform(
            AddThinkingPrompt(cond=lambda td: True, role="user", edit_last_turn=False)
        )
        td = env.reset(TensorDict(query="q", batch_size=(1,)))
        turns = lazy_stack([History(role="assistant", content="a", batch_size=())])
        td["history"].full = td["history"].prompt.extend(turns.unsqueeze(-1))
        prompt = env.step(td)["next", "history"].prompt
        assert prompt.role == [["user", "assistant", "user"]]
        assert prompt[0, -1].content == AddThinkingPrompt.DEFAULT_PROMPTS_COG[0]

    def test_bad_role(self):
        with pytest.raises(ValueError, match="edit_last_turn=True needs role='assistant'"):
            AddThinkingPrompt(cond=bool, role="user")


class TestTokenizerAndTemplate:
    def test_tokenize_and_decode(self):
        tok = make_tokenizer()
        t = Tokenizer(in_keys=["text"], out_keys=["ids"], tokenizer=tok)
        td = t(TensorDict(text=["ab", "c"], batch_size=(2,)))
        a, b, c = (tok.convert_tokens_to_ids(x) for x in "abc")
        torch.testing.assert_close(td["ids"], torch.tensor([[a, b], [c, tok.pad_token_id]]))
        torch.testing.assert_close(td["attention_mask"], torch.tensor([[1, 1], [1, 0]]))
        assert t.call_tokenizer_inv_fn(torch.tensor([a, b])).data == "ab"

    def test_over_long_text_names_the_key(self):
        t = Tokenizer(in_keys=["query"], out_keys=["ids"], tokenizer=make_tokenizer(), max_length=3)
        with pytest.raises(
            ValueError, match="text at 'query' tokenizes to 5 tokens, more than max_length=3"
        ):
            t(TensorDict(query=["hello"], batch_size=(1,)))
        with pytest.raises(ValueError, match="Tokenizer needs a tokenizer"):
            Tokenizer(in_keys=["q"], out_keys=["ids"])

    def test_template(self):
        tok = make_tokenizer()
        t = TemplateTransform(tok)
        expected = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        td = t(TensorDict(message=[{"role": "user", "content": "hi"}]))
        assert td["message"] == expected
        td = t(TensorDict(message=History.from_chats([[{"role": "user", "content": "hi"}]])))
        assert td["message"] == [expected]
        text = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
        assert t._inv_apply_transform(text) == "Hello!"
        with pytest.raises(ValueError, match="has no chat_template"):
            TemplateTransform(make_tokenizer(chat_template=None))
