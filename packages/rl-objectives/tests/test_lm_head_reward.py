"""LMHeadActorValueOperator and GPT2RewardModel on tiny random GPT-2s (no download)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from tensordict import TensorDict
from torch import nn

transformers = pytest.importorskip("transformers")

from rl.modules import LMHeadActorValueOperator  # noqa: E402
from rl.modules.models import GPT2RewardModel  # noqa: E402

VOCAB = 11


def tiny_gpt2(**config):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        n_layer=1,
        n_head=2,
        n_embd=8,
        vocab_size=VOCAB,
        n_positions=16,
        bos_token_id=VOCAB - 1,
        eos_token_id=VOCAB - 1,
        **config,
    )
    return transformers.GPT2LMHeadModel(cfg).eval()


@pytest.fixture
def tokens():
    torch.manual_seed(1)
    return TensorDict(
        input_ids=torch.randint(VOCAB - 1, (4, 5)),
        attention_mask=torch.ones(4, 5, dtype=torch.long),
        batch_size=[4],
    )


class TestLMHeadActorValueOperator:
    @pytest.mark.parametrize("return_dict", [False, True])
    def test_heads_against_the_model(self, tokens, return_dict):
        base = tiny_gpt2(return_dict=return_dict)
        agent = LMHeadActorValueOperator(base)
        assert agent.module[0][0].module is base.transformer
        assert agent.module[1][0].module is base.lm_head
        assert agent.module[1].out_keys == ["logits", "action", "action_log_prob"]
        value_layer = agent.module[2].module
        assert isinstance(value_layer, nn.Linear) and value_layer.bias is None
        assert (value_layer.in_features, value_layer.out_features) == (8, 1)

        out = agent(tokens.clone())
        with torch.no_grad():
            hidden = base.transformer(
                input_ids=tokens["input_ids"],
                attention_mask=tokens["attention_mask"],
                return_dict=False,
                use_cache=False,
            )[0][:, -1]
            # GPT-2 ties its head to the token embeddings
            logits = hidden @ base.transformer.wte.weight.T
        torch.testing.assert_close(out["x"], hidden)
        torch.testing.assert_close(out["logits"], logits)
        torch.testing.assert_close(
            out["action_log_prob"],
            logits.log_softmax(-1).gather(-1, out["action"][:, None]).squeeze(-1),
        )
        torch.testing.assert_close(out["state_value"], hidden @ value_layer.weight.T)

    def test_operators_share_parameters(self, tokens):
        agent = LMHeadActorValueOperator(tiny_gpt2())
        value_op = agent.get_value_operator()
        expected = set(agent.module[0].parameters()) | set(agent.module[2].parameters())
        assert set(value_op.parameters()) == expected
        torch.testing.assert_close(
            value_op(tokens.clone())["state_value"], agent(tokens.clone())["state_value"]
        )
        policy = agent.get_policy_operator()
        torch.testing.assert_close(
            policy(tokens.clone())["logits"], agent(tokens.clone())["logits"]
        )

    def test_needs_transformer_and_linear_head(self):
        with pytest.raises(
            TypeError, match="needs a model with a `transformer` module and a linear `lm_head`"
        ):
            LMHeadActorValueOperator(nn.Linear(2, 2))


@pytest.fixture
def saved_gpt2(tmp_path):
    tiny_gpt2().save_pretrained(tmp_path / "gpt2")
    return tmp_path / "gpt2"


def loss_by_loop(chosen, rejected, pad):
    """TorchRL's per-pair loop (the pairs the vectorised loss keeps)."""
    total, n = 0.0, 0
    for i in range(chosen.input_ids.shape[0]):

        def end(ids):
            pads = (ids == pad).nonzero()
            return pads[0].item() if len(pads) else ids.shape[0]

        stop = max(end(chosen.input_ids[i]), end(rejected.input_ids[i]))
        diverge = (chosen.input_ids[i] != rejected.input_ids[i]).nonzero()
        if len(diverge) == 0 or diverge[0].item() >= stop:
            continue
        start = diverge[0].item()
        diff = chosen.rewards[i, start:stop] - rejected.rewards[i, start:stop]
        total, n = total + -F.logsigmoid(diff).mean(), n + 1
    return total / n


class TestGPT2RewardModel:
    def test_rewards_and_end_scores(self, saved_gpt2):
        model = GPT2RewardModel(saved_gpt2, pad_token_id=0)
        assert model.lm_head.out_features == 1 and model.lm_head.bias is None
        ids = torch.tensor([[3, 4, 5, 0, 0], [3, 4, 5, 6, 7], [0, 1, 1, 1, 1]])
        rewards, end_scores = model(ids, (ids != 0).long())
        assert rewards.shape == (3, 5) and end_scores.shape == (3,)
        # before the first padding token; no padding: the last; padding first: the last
        torch.testing.assert_close(
            end_scores, torch.stack([rewards[0, 2], rewards[1, 4], rewards[2, 4]])
        )

    def test_pad_token_inference(self, saved_gpt2, monkeypatch):
        def tokenizer(pad, eos):
            return classmethod(
                lambda cls, path: SimpleNamespace(pad_token_id=pad, eos_token_id=eos)
            )

        monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", tokenizer(2, 4))
        assert GPT2RewardModel(saved_gpt2).pad_id == 2  # the tokenizer's padding token
        monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", tokenizer(None, 4))
        assert GPT2RewardModel(saved_gpt2).pad_id == 4  # else its end-of-text token

        def no_tokenizer(cls, path):
            raise OSError(f"no tokenizer at {path}")

        monkeypatch.setattr(
            transformers.AutoTokenizer, "from_pretrained", classmethod(no_tokenizer)
        )
        assert GPT2RewardModel(saved_gpt2).pad_id == VOCAB - 1  # the config's end-of-text
        assert GPT2RewardModel(saved_gpt2, pad_token_id=3).pad_id == 3

    def test_reward_loss_against_loop(self):
        torch.manual_seed(2)
        pad = 0
        chosen_ids = torch.tensor(
            [[1, 2, 3, 4, 0], [1, 5, 6, 0, 0], [1, 2, 3, 0, 0], [2, 2, 7, 7, 7]]
        )
        rejected_ids = torch.tensor(
            [[1, 2, 9, 0, 0], [1, 5, 6, 0, 0], [1, 2, 4, 4, 0], [3, 2, 7, 7, 0]]
        )
        chosen = SimpleNamespace(
            input_ids=chosen_ids, rewards=torch.randn(4, 5, requires_grad=True)
        )
        rejected = SimpleNamespace(input_ids=rejected_ids, rewards=torch.randn(4, 5))
        loss = GPT2RewardModel.compute_reward_loss(chosen, rejected, pad)  # pad positionally
        torch.testing.assert_close(loss, loss_by_loop(chosen, rejected, pad))
        loss.backward()
        assert torch.all(chosen.rewards.grad[1] == 0)  # identical pair: no signal

    def test_reward_loss_identical_and_defaults(self, saved_gpt2):
        ids = torch.tensor([[1, 2, 3, 0]])
        chosen = SimpleNamespace(input_ids=ids, rewards=torch.randn(1, 4, requires_grad=True))
        rejected = SimpleNamespace(input_ids=ids.clone(), rewards=torch.randn(1, 4))
        loss = GPT2RewardModel.compute_reward_loss(chosen_batch=chosen, rejected_batch=rejected)
        assert loss.item() == 0.0
        loss.backward()
        assert torch.all(chosen.rewards.grad == 0)
        # an instance uses its own padding token (0 here): only positions 2 count
        model = GPT2RewardModel(saved_gpt2, pad_token_id=0)
        other = SimpleNamespace(input_ids=torch.tensor([[1, 2, 4, 0]]), rewards=torch.zeros(1, 4))
        chosen.rewards = torch.tensor([[5.0, 5.0, 2.0, 99.0]])
        torch.testing.assert_close(
            model.compute_reward_loss(chosen, other), -F.logsigmoid(torch.tensor(2.0))
        )
        with pytest.raises(TypeError, match="missing chosen_batch or rejected_batch"):
            model.compute_reward_loss(chosen)
        with pytest.raises(TypeError, match="two values for pad_token_id"):
            GPT2RewardModel.compute_reward_loss(chosen, other, 0, pad_token_id=0)

    def test_save_and_load_round_trip(self, saved_gpt2, tmp_path):
        model = GPT2RewardModel(saved_gpt2, pad_token_id=0)
        with torch.no_grad():
            model.lm_head.weight.normal_()
        model.save_pretrained(tmp_path / "reward")
        loaded = GPT2RewardModel.from_pretrained(tmp_path / "reward")
        assert loaded.pad_id == 0
        ids = torch.tensor([[3, 4, 5, 0]])
        for got, want in zip(loaded(ids, (ids != 0).long()), model(ids, (ids != 0).long())):
            torch.testing.assert_close(got, want)
        # the checkpoint holds only tensors and plain values
        torch.load(tmp_path / "reward" / "reward_model.pt", weights_only=True)
