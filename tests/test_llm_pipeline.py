"""LLM post-training across the packages: a GSM8K chat env (rl-envs) with a KL transform,
a TransformersWrapper policy (rl-objectives), the LLMCollector (rl-collectors), then
MCAdvantage and GRPOLoss on what it collected. A tiny GPT-2 built in code; nothing downloads."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "rl-envs" / "tests"))
from _tiny_llm import make_model, make_tokenizer  # noqa: E402

from rl.collectors.llm import LLMCollector  # noqa: E402
from rl.envs.llm import GSM8KEnv, RetrieveKL  # noqa: E402
from rl.modules.llm import TransformersWrapper  # noqa: E402
from rl.objectives.llm import GRPOLoss, MCAdvantage  # noqa: E402

ROWS = [{"question": "6*12?", "answer": "#### 72"}, {"question": "1+1?", "answer": "#### 2"}]


class ShortGSM8KEnv(GSM8KEnv):
    SYSTEM_PROMPT = "Answer in <answer></answer>."  # short prompts keep the test fast


def direct_log_probs(model, ids):
    with torch.no_grad():
        logits = model(input_ids=ids[None]).logits[0]
    return logits[:-1].log_softmax(-1).gather(-1, ids[1:, None]).squeeze(-1)


def test_collect_score_and_train():
    torch.manual_seed(0)
    tok = make_tokenizer()
    model, ref_model = make_model(tok, n_positions=128), make_model(tok, n_positions=128, seed=1)
    env = ShortGSM8KEnv(dataset=ROWS, num_envs=4, repeats=4, shuffle=False, tokenizer=tok)

    def scorer(m, **kwargs):
        return TransformersWrapper(
            m, tokenizer=tok, input_mode="tokens", generate=False, pad_output=True, **kwargs
        )

    env.append_transform(
        RetrieveKL(
            scorer(model),
            scorer(ref_model, log_probs_key="ref_log_probs"),
            assistant_only=False,
            add_to_reward=False,
        )
    )
    policy = TransformersWrapper(
        model, tokenizer=tok, pad_output=True, generate_kwargs={"max_new_tokens": 6}
    )
    collector = LLMCollector(env, policy=policy, dialog_turns_per_batch=4, total_dialog_turns=8)
    advantage = MCAdvantage(grpo_size=4)
    loss_fn = GRPOLoss(policy, kl_to_ref_coeff=0.1)
    queries = []
    for batch in collector:
        assert batch.shape == (4, 1)
        flat = batch.reshape(-1)
        queries.append(set(flat["query"]))
        # the reference's log-probs are those of a direct model call on the sampled tokens
        tokens, att = flat[0]["tokens", "full"], flat[0]["masks", "all_attention_mask"]
        ids = tokens[att.bool()]
        ref = flat[0]["next", "ref_log_probs", "full"][1 : ids.numel()]
        torch.testing.assert_close(ref, direct_log_probs(ref_model, ids), atol=1e-5, rtol=1e-4)
        kl = flat["next", "kl_penalty"]
        torch.testing.assert_close(
            kl, flat["next", "log_probs", "full"] - flat["next", "ref_log_probs", "full"]
        )
        group = advantage.inv(flat)
        assert group is not None  # the four answers to one prompt make a group
        assert group["advantage"].abs().sum() == 0  # a random model: every reward is 0
        out = loss_fn(group)
        assert out.kl_to_ref > 0
        (out.loss_objective + out.loss_kl_to_ref).backward()
        assert model.transformer.wte.weight.grad.abs().sum() > 0
        model.zero_grad()
    assert queries == [{"6*12?"}, {"1+1?"}]  # repeats=4: one prompt per batch
