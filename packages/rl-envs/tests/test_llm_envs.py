"""rl.envs.llm environments: ChatEnv, DatasetChatEnv, the dataset envs and their reward parsers."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")

from _tiny_llm import make_tokenizer  # noqa: E402
from tensordict import TensorDict, lazy_stack  # noqa: E402

from rl.data import SipHash  # noqa: E402
from rl.data.llm import History  # noqa: E402
from rl.envs.llm import (  # noqa: E402
    ChatEnv,
    CountdownEnv,
    CountdownRewardParser,
    DataLoadingPrimer,
    DatasetChatEnv,
    GSM8KEnv,
    GSM8KRewardParser,
    LLMEnv,
    LLMHashingEnv,
    MATHEnv,
    MATHRewardParser,
    as_nested_tensor,
    as_padded_tensor,
    load_local_dataset,
    make_gsm8k_env,
)

GSM8K_ROWS = [
    {"question": "What is 6 * 12?", "answer": "6 * 12 = 72\n#### 72"},
    {"question": "What is 1 + 1?", "answer": "1 + 1 = 2\n#### 2"},
]


def respond(td, contents):
    """Writes ``("history", "full")``: the prompt followed by one assistant turn per row."""
    turns = lazy_stack([History(role="assistant", content=c, batch_size=()) for c in contents])
    td["history"].full = td["history"].prompt.extend(turns.unsqueeze(-1))
    return td


class TestChatEnv:
    def test_reset_and_step_history(self):
        env = ChatEnv(batch_size=(2,), system_prompt="Be brief.")
        td = env.reset(TensorDict(query=["Hello", "Hi"], batch_size=(2,)))
        prompt = td["history"].prompt
        assert prompt.batch_size == (2, 2)
        assert prompt.role == [["system", "user"], ["system", "user"]]
        assert prompt.content == [["Be brief.", "Hello"], ["Be brief.", "Hi"]]
        out = env.step(respond(td, ["Hey.", "Yo."]))
        nxt = out["next", "history"].prompt
        assert nxt.role == [["system", "user", "assistant"]] * 2
        assert nxt.content == [["Be brief.", "Hello", "Hey."], ["Be brief.", "Hi", "Yo."]]
        assert not out["next", "done"].any()
        assert "reward" not in out["next"].keys()  # TorchRL's ChatEnv gives no reward

    def test_query_as_messages_and_history(self):
        env = ChatEnv(batch_size=(1,))
        chat = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
        td = env.reset(TensorDict(query=History.from_chats([chat]), batch_size=(1,)))
        assert td["history"].prompt.role == [["user", "assistant"]]
        td = env.reset(TensorDict(query="one string", batch_size=(1,)))
        assert td["history"].prompt.content == [["one string"]]

    def test_text_and_tokens_modes(self):
        tok = make_tokenizer()
        env = ChatEnv(batch_size=(1,), input_mode="text", tokenizer=tok)
        td = env.reset(TensorDict(query="hi", batch_size=(1,)))
        assert td["text", "prompt"] == ["<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"]
        env = ChatEnv(batch_size=(1,), input_mode="tokens", tokenizer=tok)
        td = env.reset(TensorDict(query="hi", batch_size=(1,)))
        ids = td.get(("tokens", "prompt"), as_list=True)[0]
        assert tok.decode(ids) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"

    def test_unknown_role_and_bad_arguments(self):
        with pytest.raises(ValueError, match="user_role='bot' is not a chat role"):
            ChatEnv(user_role="bot")
        with pytest.raises(ValueError, match="input_mode='text' needs a tokenizer"):
            ChatEnv(input_mode="text")
        with pytest.raises(ValueError, match="input_mode='pixels' is not one of"):
            ChatEnv(input_mode="pixels")
        env = ChatEnv(batch_size=(1,))
        bad = [{"role": "narrator", "content": "once"}]
        with pytest.raises(ValueError, match="role 'narrator' is not a chat role"):
            env.reset(TensorDict(query=History.from_chats([bad]), batch_size=(1,)))

    def test_missing_query_and_response(self):
        env = ChatEnv(batch_size=(1,))
        with pytest.raises(KeyError, match="needs a 'query' entry"):
            env.reset(TensorDict(batch_size=(1,)))
        td = env.reset(TensorDict(query="hi", batch_size=(1,)))
        with pytest.raises(KeyError, match=r"\('history', 'full'\)"):
            env.step(td)


class TestDatasetChatEnv:
    def test_rows_served_in_order_with_repeats(self):
        rows = [{"query": "q0", "answer": "0"}, {"query": "q1", "answer": "1"}]
        env = DatasetChatEnv(dataset=rows, shuffle=False, num_envs=2, repeats=2)
        assert env.reset()["answer"] == ["0", "0"]
        assert env.reset()["answer"] == ["1", "1"]
        td = env.reset()
        assert td["answer"] == ["0", "0"]  # restarted once the rows ran out
        out = env.step(respond(td, ["a", "b"]))
        assert out["next", "answer"] == ["0", "0"]  # carried to the next step

    def test_local_files(self, tmp_path):
        path = tmp_path / "train.jsonl"
        path.write_text("\n".join(json.dumps(r) for r in GSM8K_ROWS))
        assert load_local_dataset(path)[1]["question"] == "What is 1 + 1?"
        assert load_local_dataset(tmp_path, split="train")[0]["answer"].endswith("#### 72")
        (tmp_path / "rows.json").write_text(json.dumps({"q": ["a", "b"], "a": ["1", "2"]}))
        assert load_local_dataset(tmp_path / "rows.json") == [
            {"q": "a", "a": "1"},
            {"q": "b", "a": "2"},
        ]
        with pytest.raises(ValueError, match="split='test' is not in folder"):
            load_local_dataset(tmp_path, split="test")

    def test_refuses_a_download(self):
        with pytest.raises(
            ValueError, match="'openai/gsm8k' is not a local file.*does not download"
        ):
            GSM8KEnv()
        with pytest.raises(ValueError, match="not a local file"):
            MATHEnv()


class TestRewardParsers:
    @pytest.mark.parametrize(
        "completion, reward, success, think",
        [
            ("<think>6 times 12</think><answer>72</answer>", 1.0, True, 1.0),
            ("<answer> 72.0 </answer>", 1.0, True, 0.0),
            ("<answer>$1,200</answer>", 0.1, False, 0.0),
            ("72", 0.0, False, 0.0),
        ],
    )
    def test_gsm8k(self, completion, reward, success, think):
        out = GSM8KRewardParser().reward_of(completion, "6 * 12 = 72\n#### 72")
        assert out["reward"] == reward and out["success"] == success
        assert out["reward_think"] == think

    def test_gsm8k_normalize(self):
        assert GSM8KRewardParser.normalize_answer(" $1,200.50 ") == "1200.5"

    @pytest.mark.parametrize(
        "expression, ok",
        [
            ("(25 + 3) * 4", True),
            ("25*4+3", False),  # 103
            ("(25 + 25) * 4", False),  # 25 used twice
            ("100 - 4", False),  # 100 is not a given number
            ("(25 + 3) * 4 // 1", False),  # // is no Countdown operator
            ("__import__('os')", False),
            ("(7 + 25) / 0", False),
        ],
    )
    def test_countdown_expressions(self, expression, ok):
        assert CountdownRewardParser.validate_expression(expression, 112, [25, 3, 4, 7]) is ok

    def test_countdown_reward(self):
        parser = CountdownRewardParser(format_reward=0.2, correct_reward=2.0)
        ref = "target=112, numbers=25,3,4,7"
        assert parser.reward_of("<answer>(25+3)*4</answer>", ref)["reward"] == 2.0
        assert parser.reward_of("<answer>25+3</answer>", ref)["reward"] == 0.2
        with pytest.raises(ValueError, match="does not read 'target="):
            parser.reward_of("<answer>1</answer>", "112")

    def test_math(self):
        solution = r"Half of one is $\boxed{\frac{1}{2}}$."
        assert (
            MATHRewardParser.extract_boxed(r"\boxed{a^{2}} then \boxed{\frac{1}{2}}")
            == r"\frac{1}{2}"
        )
        parser = MATHRewardParser()
        assert parser.reward_of(r"<answer>\frac{1}{2}</answer>", solution)["success"]
        assert parser.reward_of(
            r"<answer>\left( \frac{1}{2} \right)</answer>", r"\boxed{(\frac{1}{2})}"
        )["success"]
        assert parser.reward_of("<answer>0.4</answer>", solution)["reward"] == pytest.approx(0.1)


class TestDatasetEnvs:
    def test_gsm8k_step_rewards(self):
        env = GSM8KEnv(dataset=GSM8K_ROWS, num_envs=2, shuffle=False)
        td = env.reset()
        assert td["history"].prompt.role == [["system", "user"]] * 2
        assert td["history"].prompt[1, 1].content == "What is 1 + 1?"
        out = env.step(
            respond(td, ["<think>6*12</think><answer>72</answer>", "<answer>3</answer>"])
        )
        nxt = out["next"]
        torch.testing.assert_close(nxt["reward"], torch.tensor([[[1.0]], [[0.1]]]))
        torch.testing.assert_close(nxt["reward_think"], torch.tensor([[[1.0]], [[0.0]]]))
        assert nxt["success"].flatten().tolist() == [True, False]
        assert nxt["done"].flatten().tolist() == [True, True]
        assert env.full_reward_spec["reward"].shape == (2, 1, 1)

    def test_no_answer_runs_to_max_steps(self):
        env = GSM8KEnv(dataset=GSM8K_ROWS, num_envs=1, shuffle=False, max_steps=2)
        td = env.reset()
        out = env.step(respond(td, ["thinking..."]))
        assert not out["next", "done"].any() and out["next", "reward"].item() == 0.0
        td = env.step_mdp(out)
        out = env.step(respond(td, ["still thinking"]))
        assert out["next", "truncated"].all()  # StepCounter ends the episode
        assert out["next", "history"].prompt.batch_size == (1, 4)  # system, user, two turns

    def test_countdown_env(self):
        env = CountdownEnv(seed=1, num_count=3, max_number=9, num_envs=2)
        td = env.reset()
        refs = td["answer"]
        target, numbers = CountdownRewardParser._parse_ground_truth(refs[0])
        assert len(numbers) == 3 and str(target) in td["query"][0]
        expression = "+".join(map(str, numbers))
        out = env.step(respond(td, [f"<answer>{expression}</answer>", "no answer"]))
        assert out["next", "reward"][1].item() == 0.0
        expected = 1.0 if sum(numbers) == target else 0.1
        assert out["next", "reward"][0].item() == pytest.approx(expected)

    def test_make_gsm8k_env_text(self):
        env = make_gsm8k_env(GSM8K_ROWS[:1], seed=0, tokenizer=make_tokenizer())
        td = env.reset()
        assert td["text"][0].endswith("User: What is 6 * 12?. Assistant: <think>")
        td["text_response"] = ["<answer>72</answer>"]
        out = env.step(td)["next"]
        assert out["text"][0].endswith("<think><answer>72</answer>")
        assert out["reward"].item() == 1.0 and out["done"].all()

    def test_math_env(self):
        rows = [{"problem": "1/2?", "solution": r"$\boxed{\frac12}$"}]
        env = MATHEnv(dataset=rows)
        out = env.step(respond(env.reset(), [r"<answer>\frac12</answer>"]))
        assert out["next", "success"].all()


class TestStacking:
    def test_padded_and_nested(self):
        tds = [TensorDict(a=torch.tensor([1, 2, 3])), TensorDict(a=torch.tensor([4]))]
        torch.testing.assert_close(as_padded_tensor(tds)["a"], torch.tensor([[1, 2, 3], [0, 0, 4]]))
        nested = as_nested_tensor(tds)["a"]
        assert [t.tolist() for t in nested.unbind(0)] == [[1, 2, 3], [4]]
        with pytest.raises(ValueError, match="non-negative dim"):
            as_padded_tensor(tds, dim=-1)

    def test_primer_stack_method_and_errors(self):
        rows = [{"tokens": torch.tensor([[1, 2], [3, 4]])}]
        primer = DataLoadingPrimer(rows, batch_size=(2,), stack_method="as_padded_tensor")
        out = primer._load_from_dataloader(torch.ones(2, dtype=torch.bool))
        torch.testing.assert_close(out["tokens"], torch.tensor([[1, 2], [3, 4]]))
        with pytest.raises(ValueError, match="exactly one of dataloader / dataloader_factory"):
            DataLoadingPrimer()
        with pytest.raises(ValueError, match="stack_method='stack' is not one of"):
            DataLoadingPrimer(rows, stack_method="stack")
        with pytest.raises(TypeError, match="expected a mapping"):
            DataLoadingPrimer([["not", "a", "dict"]])


@pytest.mark.filterwarnings("ignore:LLMEnv is deprecated:DeprecationWarning")
class TestLLMEnv:
    def test_text_appends_action(self):
        with pytest.warns(DeprecationWarning, match="use ChatEnv"):
            env = LLMEnv.from_dataloader(
                [{"text": ["hello ", "bye "]}], batch_size=(2,), eos_token_id=0
            )
        td = env.reset()
        assert td["text"] == ["hello ", "bye "]
        td["text_response"] = ["world", "now"]
        td["tokens_response"] = torch.tensor([[3, 4], [5, 0]])
        out = env.step(td)["next"]
        assert out["text"] == ["hello world", "bye now"]
        assert out["done"].flatten().tolist() == [False, True]  # eos_token_id=0 in row 1

    def test_tokens_and_per_token_done(self):
        env = LLMEnv(from_text=False, batch_size=(1,), eos_token_id=2, assign_done=True)
        td = TensorDict(
            tokens=torch.tensor([[5, 6]]),
            attention_mask=torch.ones(1, 2, dtype=torch.long),
            batch_size=(1,),
        )
        td = env.reset(td)
        td["tokens_response"] = torch.tensor([[7, 2]])
        out = env.step(td)["next"]
        torch.testing.assert_close(out["tokens"], torch.tensor([[5, 6, 7, 2]]))
        torch.testing.assert_close(out["attention_mask"], torch.ones(1, 4, dtype=torch.long))
        assert out["tokens_data", "done"].tolist() == [[False, True]] and out["done"].all()

    def test_errors(self):
        with pytest.raises(ValueError, match="from_text cannot be True"):
            LLMEnv(assign_reward=True, eos_token_id=0)
        env = LLMEnv(batch_size=(1,), eos_token_id=0)
        with pytest.raises(KeyError, match="needs the observation 'text'"):
            env.reset(TensorDict(batch_size=(1,)))


class TestLLMHashingEnv:
    def test_hash_chain(self):
        tok = make_tokenizer()
        env = LLMHashingEnv(tokenizer=tok)
        td = env.make_tensordict("Check")
        ids = torch.tensor([tok.convert_tokens_to_ids(c) for c in "Check"])
        torch.testing.assert_close(td["observation"], ids)
        torch.testing.assert_close(td["hashing"], SipHash()(ids[None]))
        td["action"] = torch.tensor([tok.convert_tokens_to_ids("!")])
        out = env.step(td)["next"]
        assert out["text"] == "Check!"
        torch.testing.assert_close(
            out["hashing"], SipHash()(torch.cat([td["hashing"], td["action"]])[None])
        )
        # the same chain from another start hashes the same; another token does not
        again = env.step(env.make_tensordict("Check").set("action", td["action"]))[
            "next", "hashing"
        ]
        other = env.step(env.make_tensordict("Check").set("action", td["action"] + 1))[
            "next", "hashing"
        ]
        assert again == out["hashing"] and other != out["hashing"]

    def test_batched_and_errors(self):
        tok = make_tokenizer()
        env = LLMHashingEnv(tokenizer=tok)
        td = env.make_tensordict(["ab", "cd"])
        assert td["hashing"].shape == (2, 1) and td["text"] == ["ab", "cd"]
        with pytest.raises(TypeError, match="needs a vocab_size"):
            LLMHashingEnv()
        with pytest.raises(RuntimeError, match="needs a prompt"):
            env.reset(TensorDict())

    def test_plain_callable_tokenizer(self):
        """A tokenizer that returns a list of ids (TorchRL's test tokenizer) works too."""

        class Tokenizer:
            def __call__(self, text):
                if isinstance(text, list):
                    return [self(t) for t in text]
                return [ord(c) - ord("a") for c in text]

            def decode(self, ids):
                return "".join(chr(int(i) + ord("a")) for i in ids)

            def batch_decode(self, ids):
                return [self.decode(row) for row in ids]

        env = LLMHashingEnv(vocab_size=26, tokenizer=Tokenizer())
        td = env.make_tensordict("bad")
        torch.testing.assert_close(td["observation"], torch.tensor([1, 0, 3]))
        assert td["text"] == "bad"
        batch = env.make_tensordict(["ab", "cd"])
        torch.testing.assert_close(batch["observation"], torch.tensor([[0, 1], [2, 3]]))
        env.check_env_specs(tensordict=td)


class TestPartialReset:
    def test_unmasked_conversations_are_kept(self):
        rows = [{"query": f"q{i}", "answer": str(i)} for i in range(4)]
        env = DatasetChatEnv(dataset=rows, shuffle=False, num_envs=2)
        td = env.reset()
        td = env.step_mdp(env.step(respond(td, ["a0", "a1"])))
        assert td["history"].prompt.content == [["q0", "a0"], ["q1", "a1"]]
        td["_reset"] = torch.tensor([[False], [True]])
        td = env.reset(td)
        assert td["history"].prompt.content == [["q0", "a0"], ["q2"]]
        assert td["answer"] == ["0", "2"]
        td = env.reset(td)  # a full reset: the next rows, whatever the lengths before
        assert td["history"].prompt.content == [["q3"], ["q0"]]


def test_step_mdp_carries_a_containers_plain_field():
    """A policy's padded Tokens (``padded`` a plain bool) carried to the next root."""
    from rl.data.llm import Tokens
    from rl.envs import step_mdp

    nxt = TensorDict(
        tokens=Tokens(prompt=torch.ones(2, 3, dtype=torch.long), batch_size=(2,)), batch_size=(2,)
    )
    root = Tokens(full=torch.zeros(2, 3, dtype=torch.long), padded=True, batch_size=(2,))
    out = step_mdp(TensorDict(tokens=root, next=nxt, batch_size=(2,)), keep_other=True)["tokens"]
    assert out.padded is True
    torch.testing.assert_close(out.prompt, torch.ones(2, 3, dtype=torch.long))
    torch.testing.assert_close(out.full, torch.zeros(2, 3, dtype=torch.long))
