"""rl.modules.llm.HFRewardModelWrapper on a tiny GPT-2 reward model built in code."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from tensordict import TensorDict  # noqa: E402
from transformers import GPT2Config, GPT2ForSequenceClassification  # noqa: E402

from rl.modules.llm import HFRewardModelWrapper  # noqa: E402

PAD = 0


@pytest.fixture(scope="module")
def reward_model():
    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=20, n_positions=16, n_embd=8, n_layer=1, n_head=2, num_labels=1, pad_token_id=PAD
    )
    return GPT2ForSequenceClassification(cfg).eval()


def _batch():
    tokens = torch.tensor([[3, 4, 5, 6, 7], [8, 9, 10, PAD, PAD], [11, 12, 13, 14, PAD]])
    return TensorDict(
        {("tokens", "full"): tokens, ("masks", "all_attention_mask"): (tokens != PAD).long()},
        batch_size=[3],
    )


class TestHFRewardModelWrapper:
    def test_scores_match_direct_forward(self, reward_model):
        td = _batch()
        wrapper = HFRewardModelWrapper(reward_model)
        out = wrapper(td)
        assert out is td
        expected = reward_model(
            input_ids=td["tokens", "full"], attention_mask=td["masks", "all_attention_mask"]
        ).logits.squeeze(-1)
        torch.testing.assert_close(out["reward"], expected)
        assert out["reward"].shape == (3,) and out["reward"].dtype == torch.float32
        assert wrapper.in_keys == [("tokens", "full"), ("masks", "all_attention_mask")]
        assert wrapper.out_keys == ["reward"]
        assert wrapper.model is reward_model

    def test_gradients_and_inference_mode(self, reward_model):
        td = _batch()
        HFRewardModelWrapper(reward_model)(td)
        assert td["reward"].requires_grad
        td = _batch()
        HFRewardModelWrapper(reward_model, inference_mode=True)(td)
        assert not td["reward"].requires_grad

    def test_custom_keys_and_no_mask(self, reward_model):
        tokens = torch.tensor([[3, 4, 5], [6, 7, 8]])
        td = TensorDict({"ids": tokens}, batch_size=[2])
        wrapper = HFRewardModelWrapper(
            reward_model, token_key="ids", attention_mask_key=None, reward_key=("next", "score")
        )
        wrapper(td)
        torch.testing.assert_close(
            td["next", "score"], reward_model(input_ids=tokens).logits.squeeze(-1)
        )
        assert wrapper.in_keys == ["ids"]

    def test_tensor_output_and_rewards_attribute(self):
        class Plain(torch.nn.Module):
            def forward(self, input_ids, attention_mask=None):
                return input_ids.float().sum(-1)

        class WithRewards(torch.nn.Module):
            def forward(self, input_ids, attention_mask=None):
                return type(
                    "Out", (), {"rewards": (input_ids * attention_mask).sum(-1, keepdim=True)}
                )()

        td = _batch()
        HFRewardModelWrapper(Plain())(td)
        torch.testing.assert_close(td["reward"], td["tokens", "full"].sum(-1).float())
        HFRewardModelWrapper(WithRewards())(td)
        masked = td["tokens", "full"] * td["masks", "all_attention_mask"]
        torch.testing.assert_close(td["reward"], masked.sum(-1).float())

    def test_errors(self, reward_model):
        with pytest.raises(KeyError, match="token_key 'ids' not found"):
            HFRewardModelWrapper(reward_model, token_key="ids")(_batch())
        td = TensorDict({("tokens", "full"): torch.ones(2, 3, dtype=torch.long)}, batch_size=[2])
        with pytest.raises(
            KeyError, match="attention_mask_key \\('masks', 'all_attention_mask'\\)"
        ):
            HFRewardModelWrapper(reward_model)(td)

        class PerToken(torch.nn.Module):
            def forward(self, input_ids, attention_mask=None):
                return input_ids.float()

        with pytest.raises(RuntimeError, match="one reward per sequence, of shape \\(3,\\)"):
            HFRewardModelWrapper(PerToken())(_batch())

        class Nothing(torch.nn.Module):
            def forward(self, input_ids, attention_mask=None):
                return {"scores": input_ids}

        with pytest.raises(RuntimeError, match="returned dict, expected a tensor"):
            HFRewardModelWrapper(Nothing())(_batch())
