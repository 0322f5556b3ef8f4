"""Tokenizer as a transform of an env: string observations become token ids with their
specs, and a policy's token actions are decoded into the string the env reads."""

from __future__ import annotations

import pytest
import torch
from _tiny_llm import make_tokenizer
from tensordict import NonTensorData, TensorDict

from rl.core import Composite, NonTensor, Unbounded
from rl.envs import EnvBase, Tokenizer, TransformedEnv


class WordEnv(EnvBase):
    """Says ``"a" * count`` and reads a word as its action; the reward is the word's
    length, so that what the env decoded can be checked."""

    def __init__(self):
        super().__init__()
        self.observation_spec = Composite(text=NonTensor(shape=(), example_data="a"))
        self.action_spec = Composite(word=NonTensor(shape=(), example_data="ab"))
        self.reward_spec = Unbounded(shape=(1,))
        self.heard = []

    def _reset(self, tensordict):
        self.count = 1
        return TensorDict(
            text=NonTensorData("a"),
            done=torch.zeros(1, dtype=torch.bool),
            terminated=torch.zeros(1, dtype=torch.bool),
        )

    def _step(self, tensordict):
        word = tensordict["word"]
        self.heard.append(word)
        self.count += 1
        return TensorDict(
            text=NonTensorData("a" * self.count),
            reward=torch.full((1,), float(len(word))),
            done=torch.zeros(1, dtype=torch.bool),
            terminated=torch.zeros(1, dtype=torch.bool),
        )

    def _set_seed(self, seed):
        pass


def _ids(tok, text):
    return [tok.convert_tokens_to_ids(c) for c in text]


class TestTokenizerInAnEnv:
    def test_observations_are_tokenized_with_their_specs(self):
        tok = make_tokenizer()
        env = TransformedEnv(WordEnv(), Tokenizer(["text"], ["tokens"], tokenizer=tok))
        spec = env.observation_spec["tokens"]
        assert spec.shape == torch.Size([-1]) and spec.dtype == torch.int64
        assert spec.space.high.item() == len(tok)
        mask_spec = env.observation_spec["attention_mask"]
        assert mask_spec.space.high.item() == 2
        td = env.reset()
        assert td["tokens"].tolist() == _ids(tok, "a")
        assert td["attention_mask"].tolist() == [1]
        td["word"] = NonTensorData("xyz")
        out = env.step(td)["next"]
        assert out["tokens"].tolist() == _ids(tok, "aa")
        assert out["reward"].item() == 3.0

    def test_max_length_pads_and_fixes_the_spec(self):
        tok = make_tokenizer()
        env = TransformedEnv(
            WordEnv(), Tokenizer(["text"], ["tokens"], tokenizer=tok, max_length=4)
        )
        assert env.observation_spec["tokens"].shape == torch.Size([4])
        td = env.reset()
        pad = tok.pad_token_id
        assert td["tokens"].tolist() == [*_ids(tok, "a"), pad, pad, pad]
        assert td["attention_mask"].tolist() == [1, 0, 0, 0]
        assert env.observation_spec["tokens"].is_in(td["tokens"])
        assert env.observation_spec["attention_mask"].is_in(td["attention_mask"])

    def test_token_actions_are_decoded_for_the_env(self):
        tok = make_tokenizer()
        inner = WordEnv()
        t = Tokenizer([], [], in_keys_inv=["word"], out_keys_inv=["word_tokens"], tokenizer=tok)
        env = TransformedEnv(inner, t)
        # the policy writes tokens: the string action is exposed as a token spec
        assert "word" not in env.full_action_spec.keys()
        spec = env.full_action_spec["word_tokens"]
        assert spec.dtype == torch.int64 and spec.shape == torch.Size([-1])
        td = env.reset()
        td["word_tokens"] = torch.tensor(_ids(tok, "hello"))
        out = env.step(td)
        assert inner.heard == ["hello"]
        assert out["next", "reward"].item() == 5.0

    def test_missing_inverse_key_names_it(self):
        t = Tokenizer([], [], in_keys_inv=["nope"], out_keys_inv=["t"], tokenizer=make_tokenizer())
        with pytest.raises(KeyError, match="in_keys_inv entry 'nope' is in neither"):
            _ = TransformedEnv(WordEnv(), t).full_action_spec

    def test_colliding_attention_masks_are_refused(self):
        t = Tokenizer(["text", "text"], ["t1", "t2"], tokenizer=make_tokenizer())
        with pytest.raises(KeyError, match="would write the same attention mask 'attention_mask'"):
            _ = TransformedEnv(WordEnv(), t).observation_spec

    def test_a_padded_batch_of_token_rows_is_decoded(self):
        tok = make_tokenizer()
        t = Tokenizer([], [], in_keys_inv=["word"], out_keys_inv=["ids"], tokenizer=tok)
        from tensordict import lazy_stack

        rows = lazy_stack(
            [
                TensorDict(ids=torch.tensor(_ids(tok, "abc"))),
                TensorDict(ids=torch.tensor(_ids(tok, "d"))),
            ]
        )
        assert t.inv(rows)["word"] == ["abc", "d"]


class TestTokenizerPadding:
    @pytest.mark.parametrize("side", ["right", "left"])
    def test_a_batch_is_padded_on_the_tokenizers_side(self, side):
        # as TorchRL, which calls the tokenizer: its padding_side decides
        tok = make_tokenizer()
        tok.padding_side = side
        ids, mask = Tokenizer(["text"], ["tokens"], tokenizer=tok).call_tokenizer_fn(["ab", "abcd"])
        expected = tok(["ab", "abcd"], padding=True, add_special_tokens=False, return_tensors="pt")
        torch.testing.assert_close(ids, expected["input_ids"])
        torch.testing.assert_close(mask, expected["attention_mask"])
        pad = tok.pad_token_id
        short = [pad, pad, *_ids(tok, "ab")] if side == "left" else [*_ids(tok, "ab"), pad, pad]
        assert ids[0].tolist() == short

    def test_a_two_dim_batch_of_strings_keeps_its_shape(self):
        # a [2, 2] stack of strings: each string tokenized, ids [2, 2, T] (not the text
        # of each row's list)
        from tensordict import NonTensorStack

        tok = make_tokenizer()
        rows = [["ab", "b"], ["a", "ba"]]
        value = NonTensorStack(*[NonTensorStack(*map(NonTensorData, row)) for row in rows])
        ids, mask = Tokenizer(["text"], ["tokens"], tokenizer=tok).call_tokenizer_fn(value)
        flat_ids, flat_mask = Tokenizer(["text"], ["tokens"], tokenizer=tok).call_tokenizer_fn(
            [text for row in rows for text in row]
        )
        assert ids.shape == torch.Size([2, 2, 2])
        torch.testing.assert_close(ids, flat_ids.reshape(2, 2, 2))
        torch.testing.assert_close(mask, flat_mask.reshape(2, 2, 2))


class TestTokenizerLoading:
    def test_a_local_path_loads_with_transformers(self, tmp_path):
        tok = make_tokenizer()
        tok.save_pretrained(tmp_path)
        t = Tokenizer(["text"], ["ids"], tokenizer=str(tmp_path))
        out = t(TensorDict(text="abc"))
        assert out["ids"].tolist() == _ids(tok, "abc")

    def test_no_tokenizer_is_refused(self):
        with pytest.raises(ValueError, match="Tokenizer needs a tokenizer"):
            Tokenizer(["text"], ["ids"])

    def test_same_class_everywhere(self):
        import rl.envs.llm
        import rl.envs.transforms

        assert rl.envs.llm.Tokenizer is rl.envs.transforms.Tokenizer is Tokenizer
