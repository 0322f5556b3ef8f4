"""rl.data.llm.RolloutFromModel on tiny GPT-2s built in code: log-ratios against direct model
calls, the done layout and the rewards against a hand computation."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from tensordict import TensorClass  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel  # noqa: E402

from rl.data.llm import AdaptiveKLController, RolloutFromModel  # noqa: E402

EOS = RolloutFromModel.EOS_TOKEN_ID
N = 4  # max_new_tokens


class Prompts(TensorClass["nocast"]):
    """The fields of a PromptData that RolloutFromModel reads."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    prompt_rindex: torch.Tensor

    def mask_label(self, pad_token_id=EOS):
        keep = torch.arange(self.input_ids.shape[1]) < self.prompt_rindex[:, None]
        return Prompts(
            input_ids=torch.where(keep, self.input_ids, pad_token_id),
            attention_mask=keep.long(),
            prompt_rindex=self.prompt_rindex,
            batch_size=[],
        )


def reward_model(input_ids, attention_mask):
    """Sum of the visible token ids / 100 (per-token rewards unused)."""
    return None, (input_ids * attention_mask).sum(-1).float() / 100


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    cfg = GPT2Config(n_embd=8, n_layer=1, n_head=2, n_positions=32)
    return GPT2LMHeadModel(cfg).eval(), GPT2LMHeadModel(cfg).eval()


@pytest.fixture
def batch():
    ids = torch.tensor([[11, 12, 13, 14, 15, EOS], [21, 22, 23, EOS, EOS, EOS]])
    return Prompts(
        input_ids=ids,
        attention_mask=(ids != EOS).long(),
        prompt_rindex=torch.tensor([3, 2]),
        batch_size=[2],
    )


def _logp(model, generated):
    mask = generated != EOS
    logits = model(input_ids=generated, attention_mask=mask).logits
    lp = F.log_softmax(logits[:, :-1], -1).gather(-1, generated[:, 1:, None]).squeeze(-1)
    return lp.masked_fill(~mask[:, :-1], 0)


class TestRolloutFromModel:
    def test_log_ratio_matches_direct_calls(self, models):
        model, ref = models
        rollout = RolloutFromModel(model, ref, reward_model, max_new_tokens=N)
        generated = torch.tensor([[5, 6, 7, 8, 9, 10, EOS], [5, 6, 7, 8, EOS, EOS, EOS]])
        rindex = torch.tensor([3, 2])
        with torch.no_grad():
            diff = _logp(model, generated) - _logp(ref, generated)
        expected = torch.stack([diff[0, 2 : 2 + N], diff[1, 1 : 1 + N]])
        torch.testing.assert_close(rollout._log_ratio(generated, rindex), expected)

    def test_rollout_layout_and_rewards(self, models, batch):
        model, ref = models
        rollout = RolloutFromModel(
            model, ref, reward_model, kl_coef=0.5, max_new_tokens=N, score_clip=0.3
        )
        # row 0: prompt 3 tokens + 4 answer tokens (truncated); row 1: prompt 2 + 1 token, EOS
        generated = torch.tensor(
            [
                [11, 12, 13, 40, 41, 42, 43, EOS, EOS, EOS],
                [21, 22, 50, EOS, EOS, EOS, EOS, EOS, EOS, EOS],
            ]
        )
        log_probs = torch.randn(2, N, 1)
        log_ratio = torch.randn(2, N)
        td = rollout.create_rollout_td(batch, generated, log_probs, log_ratio)
        assert td.batch_size == (2, N) and td.names == [None, "time"]
        torch.testing.assert_close(
            td["action"], torch.tensor([[40, 41, 42, 43], [50, EOS, EOS, EOS]])
        )
        # step t sees the prompt and t answer tokens
        for row, r in enumerate([3, 2]):
            for t in range(N):
                seen = td["input_ids"][row, t]
                assert (seen[: r + t] == generated[row, : r + t]).all()
                assert (seen[r + t :] == EOS).all()
                nxt = td["next", "input_ids"][row, t]
                assert (nxt[: r + t + 1] == generated[row, : r + t + 1]).all()
                assert (nxt[r + t + 1 :] == EOS).all()
        torch.testing.assert_close(td["attention_mask"], td["input_ids"] != EOS)
        done = td["next", "done"].squeeze(-1)
        terminated = td["next", "terminated"].squeeze(-1)
        # row 0 is truncated at the last step; row 1 ends at its second step (first EOS), and
        # the last step is done for every row, as TorchRL
        assert done.tolist() == [[False, False, False, True], [False, True, False, True]]
        assert terminated.tolist() == [[False] * 4, [False, True, False, False]]
        final = [generated[0, :7], generated[1, :3]]
        labels = [batch.input_ids[0, :5], batch.input_ids[1, :3]]  # the reference texts
        score = torch.tensor([(f.sum() - lab.sum()) / 100 for f, lab in zip(final, labels)])
        score = score.clamp(-0.3, 0.3)
        raw = score[:, None] * done
        torch.testing.assert_close(td["next", "reward_raw"].squeeze(-1), raw)
        torch.testing.assert_close(td["next", "reward_kl"].squeeze(-1), -0.5 * log_ratio)
        torch.testing.assert_close(td["next", "reward"].squeeze(-1), raw - 0.5 * log_ratio)
        torch.testing.assert_close(td["sample_log_prob"], log_probs)

    def test_generate_greedy_matches_model(self, models, batch):
        model, ref = models
        rollout = RolloutFromModel(model, ref, reward_model, max_new_tokens=N)
        config = GenerationConfig(
            pad_token_id=EOS,
            max_new_tokens=N,
            return_dict_in_generate=True,
            output_scores=True,
            do_sample=False,
        )
        generated, log_probs, log_ratio = rollout.generate(batch, config)
        assert generated.shape == (2, 6 + N) and log_probs.shape == (2, N, 1)
        for row, r in enumerate([3, 2]):
            seq = batch.input_ids[row, :r]
            assert (generated[row, :r] == seq).all()
            for t in range(N):  # greedy: each token is the argmax of a direct forward
                with torch.no_grad():
                    logits = model(input_ids=seq[None]).logits[0, -1]
                token = logits.argmax()
                assert generated[row, r + t] == token
                torch.testing.assert_close(
                    log_probs[row, t, 0], logits.log_softmax(-1)[token], atol=1e-4, rtol=1e-4
                )
                seq = torch.cat([seq, token[None]])
        torch.testing.assert_close(log_ratio, rollout._log_ratio(generated, batch.prompt_rindex))
        td = rollout.rollout_from_data(batch)  # sampled: shapes only
        assert td.batch_size == (2, N) and td["next", "reward"].shape == (2, N, 1)

    def test_step_scheduler(self, models, batch):
        model, ref = models
        ctl = AdaptiveKLController(init_kl_coef=0.2, target=0.01, horizon=10)
        rollout = RolloutFromModel(
            model, ref, reward_model, kl_coef=0.2, max_new_tokens=N, kl_scheduler=ctl
        )
        generated = torch.tensor([[11, 12, 13, 40, 41, 42, 43, EOS, EOS, EOS]] * 2)
        log_ratio = torch.full((2, N), 0.5)
        rollout.create_rollout_td(batch, generated, torch.zeros(2, N, 1), log_ratio)
        rollout.create_rollout_td(batch, generated, torch.zeros(2, N, 1), log_ratio)
        # KL = 0.5 > target: +20% over 2 steps of a horizon of 10
        rollout.step_scheduler()
        assert rollout.kl_coef == pytest.approx(0.2 * (1 + 0.2 * 2 / 10))
        assert len(rollout._kl_queue) == 0

    def test_padding_helpers(self):
        left = RolloutFromModel._padded_right_to_left(
            torch.tensor([[1, 2, EOS, EOS], [1, 2, 3, 4]])
        )
        assert left.tolist() == [[EOS, EOS, 1, 2], [1, 2, 3, 4]]
        right = RolloutFromModel._padded_left_to_right(
            torch.tensor([[EOS, EOS, 3, 4, EOS, 5], [1, 2, 3, EOS, EOS, EOS]]), sequence_length=8
        )
        assert right.tolist() == [[3, 4, EOS, 5] + [EOS] * 4, [1, 2, 3] + [EOS] * 5]

    def test_rollout_from_prompt_data(self, models, batch):
        from rl.data.llm import PromptData

        model, ref = models
        data = PromptData(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            prompt_rindex=batch.prompt_rindex,
            batch_size=[2],
        )
        torch.manual_seed(1)
        td = RolloutFromModel(model, ref, reward_model, max_new_tokens=N).rollout_from_data(data)
        assert td.batch_size == (2, N)
        # the first step sees the prompt alone
        for row, r in enumerate([3, 2]):
            assert (td["input_ids"][row, 0, :r] == batch.input_ids[row, :r]).all()
            assert (td["input_ids"][row, 0, r:] == EOS).all()
        assert td["next", "done"][:, -1].all()
