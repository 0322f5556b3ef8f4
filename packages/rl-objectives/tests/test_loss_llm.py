"""rl.objectives.llm: GRPO / DAPO / CISPO, SFT, MCAdvantage and the k3 KL, against hand computations."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("transformers")

from tensordict import TensorDict, lazy_stack  # noqa: E402

from rl.data.llm import ChatHistory, History  # noqa: E402
from rl.modules.llm import TransformersWrapper  # noqa: E402
from rl.objectives.llm import (  # noqa: E402
    DAPO,
    CISPOLoss,
    GRPOLoss,
    GRPOLossOutput,
    MCAdvantage,
    SFTLoss,
    SFTLossOutput,
    k3_kl_token_estimate,
)

sys.path.insert(0, str(Path(__file__).parent))
from _tiny_llm import make_model, make_tokenizer  # noqa: E402

PROMPTS = [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "abcd"}]]
CHATS = [
    [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
    [
        {"role": "user", "content": "abcd"},
        {"role": "assistant", "content": "xyz"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "r"},
    ],
]


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    return make_model(tok)


def model_log_probs_and_entropy(model, tokens, attention):
    """Per-token log p(tokens[t] | tokens[:t]) and entropy, aligned with tokens (0 at t=0)."""
    with torch.no_grad():
        logits = model(input_ids=tokens, attention_mask=attention).logits
    logp = logits[:, :-1].log_softmax(-1)
    lp = logp.gather(-1, tokens[:, 1:, None]).squeeze(-1)
    ent = -(logp.exp() * logp).sum(-1)
    pad = torch.zeros(tokens.shape[0], 1)
    return torch.cat([pad, lp], 1), torch.cat([pad, ent], 1)


@pytest.fixture(scope="module")
def rollout(tok, model):
    torch.manual_seed(3)
    td = TensorDict(
        {"history": ChatHistory(prompt=History.from_chats(PROMPTS), batch_size=(2,))},
        batch_size=(2,),
    )
    policy = TransformersWrapper(
        model, tokenizer=tok, pad_output=True, generate_kwargs={"max_new_tokens": 6}
    )
    td = policy(td)
    mask = td["masks", "all_assistant_mask"]
    shift = (torch.rand(mask.shape) - 0.5) * 0.8 * mask
    td["log_probs", "full"] = td["log_probs", "full"] - shift
    td["advantage"] = torch.tensor([[1.0], [-0.5]])
    return policy, td


def hand_grpo(model, td, eps=(0.2, 0.2), cispo=False):
    tokens, att = td["tokens", "full"], td["masks", "all_attention_mask"].long()
    mask = td["masks", "all_assistant_mask"]
    cur, ent = model_log_probs_and_entropy(model, tokens, att)
    lw = (cur - td["log_probs", "full"])[mask]
    adv = td["advantage"].expand_as(mask)[mask]
    ratio = lw.exp()
    clipped = ratio.clamp(1 - eps[0], 1 + eps[1])
    loss = -(clipped * adv) if cispo else -torch.minimum(ratio * adv, clipped * adv)
    return loss.mean(), (ratio != clipped).float().mean(), (-lw).mean(), ent[mask].mean(), cur, mask


class TestK3:
    def test_values_and_expectation_is_kl(self):
        torch.testing.assert_close(
            k3_kl_token_estimate(torch.tensor([-1.0]), torch.tensor([-2.0])),
            torch.tensor([1.0]).exp() - 2,
        )
        p = torch.tensor([0.5, 0.3, 0.2])
        q = torch.tensor([0.2, 0.2, 0.6])
        # E_{x~p}[k3(log q(x), log p(x))] = KL(p || q)
        expectation = (p * k3_kl_token_estimate(q.log(), p.log())).sum()
        torch.testing.assert_close(expectation, (p * (p / q).log()).sum())
        assert (k3_kl_token_estimate(torch.randn(100), torch.randn(100)) >= 0).all()

    def test_shape_mismatch(self):
        with pytest.raises(ValueError, match="target_log_prob has shape \\(2,\\)"):
            k3_kl_token_estimate(torch.zeros(2), torch.zeros(3))


class TestGRPOLoss:
    def test_against_hand_computation(self, model, rollout):
        policy, td = rollout
        loss_fn = GRPOLoss(policy, entropy_coeff=0.01)
        out = loss_fn(td.clone())
        assert isinstance(out, GRPOLossOutput)
        loss, clip_fraction, kl_approx, entropy, _, _ = hand_grpo(model, td)
        torch.testing.assert_close(out.loss_objective, loss, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out.clip_fraction, clip_fraction)
        torch.testing.assert_close(out.kl_approx, kl_approx, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out.entropy, entropy, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out.loss_entropy, -0.01 * entropy, atol=1e-6, rtol=1e-5)
        assert 0 < out.ESS <= 1

    def test_backward_reaches_the_model(self, model, rollout):
        policy, td = rollout
        model.zero_grad()
        out = GRPOLoss(policy)(td.clone())
        (out.loss_objective + out.loss_entropy).backward()
        assert model.transformer.wte.weight.grad.abs().sum() > 0
        model.zero_grad()

    def test_kl_to_ref(self, model, rollout):
        policy, td = rollout
        *_, cur, mask = hand_grpo(model, td)
        td = td.clone()
        ref = cur - 0.3 * mask
        td["next", "ref_log_probs", "full"] = ref
        out = GRPOLoss(policy, kl_to_ref_coeff=0.5)(td)
        expected = k3_kl_token_estimate(ref, cur)[mask].mean()
        torch.testing.assert_close(out.kl_to_ref, expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out.loss_kl_to_ref, 0.5 * expected, atol=1e-5, rtol=1e-5)

    def test_ref_log_prob_padding(self, model, rollout):
        policy, td = rollout
        *_, cur, mask = hand_grpo(model, td)
        td = td.clone()
        ref = cur - 0.3 * mask
        td["next", "ref_log_probs", "full"] = ref.unsqueeze(-1)  # [B, T, 1]: squeezed
        out = GRPOLoss(policy, kl_to_ref_coeff=0.5)(td)
        expected = k3_kl_token_estimate(ref, cur)[mask].mean()
        torch.testing.assert_close(out.kl_to_ref, expected, atol=1e-5, rtol=1e-5)
        # ragged reference log-probs: padded with the given value on the given side
        rows = lazy_stack(
            [
                TensorDict(next=TensorDict(ref_log_probs=TensorDict(full=torch.tensor(x))))
                for x in ([1.0, 2.0, 3.0], [4.0])
            ]
        )
        loss = GRPOLoss(policy, ref_log_prob_padding_side="right", ref_log_prob_padding_value=-1.0)
        assert loss.ref_log_prob_padding_side == "right"
        torch.testing.assert_close(
            loss._ref_log_prob(rows, torch.zeros(2, 3)),
            torch.tensor([[1.0, 2.0, 3.0], [4.0, -1.0, -1.0]]),
        )
        with pytest.raises(ValueError, match="ragged and ref_log_prob_padding_side='left'"):
            GRPOLoss(policy)._ref_log_prob(rows, torch.zeros(2, 3))
        with pytest.raises(ValueError, match="must be 'left' or 'right', got 'top'"):
            CISPOLoss(policy, ref_log_prob_padding_side="top")

    def test_dapo_and_cispo(self, model, rollout):
        policy, td = rollout
        out = DAPO(policy, clip_epsilon=(0.1, 0.15))(td.clone())
        loss, clip_fraction, *_ = hand_grpo(model, td, eps=(0.1, 0.15))
        torch.testing.assert_close(out.loss_objective, loss, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out.clip_fraction, clip_fraction)
        out = CISPOLoss(policy, clip_epsilon=0.1)(td.clone())
        loss, *_ = hand_grpo(model, td, eps=(0.1, 0.1), cispo=True)
        torch.testing.assert_close(out.loss_objective, loss, atol=1e-5, rtol=1e-5)

    def test_bad_input(self, rollout):
        policy, td = rollout
        with pytest.raises(KeyError, match="advantage"):
            GRPOLoss(policy)(td.exclude("advantage"))
        with pytest.raises(ValueError, match="clip_epsilon low must be < 1"):
            GRPOLoss(policy, clip_epsilon=(1.0, 0.2))
        with pytest.raises(ValueError, match="masking_strategy 'x'"):
            GRPOLoss(policy, masking_strategy="x")
        bad = td.clone()
        bad["advantage"] = torch.zeros(2, 3, 4)
        with pytest.raises(ValueError, match="advantage has shape \\(2, 3, 4\\)"):
            GRPOLoss(policy)(bad)


class TestMCAdvantage:
    def test_group_standardised_rewards(self):
        transform = MCAdvantage(grpo_size=3)
        rewards = torch.tensor([1.0, 0.0, 2.0, 5.0, 4.0, 3.0])
        query = torch.tensor([0, 1, 0, 1, 0, 1])

        def steps(idx):
            return TensorDict(
                {
                    "query": query[idx],
                    "next": {
                        "reward": rewards[idx, None],
                        "done": torch.ones(len(idx), 1, dtype=torch.bool),
                    },
                },
                batch_size=(len(idx),),
            )

        assert transform.inv(steps([0, 1, 2, 3])) is None
        out = transform.inv(steps([4, 5]))
        assert out.shape == (6,)
        for q in (0, 1):
            rows = out["query"] == q
            r = out["next", "reward"][rows]
            torch.testing.assert_close(out["advantage"][rows], (r - r.mean()) / r.std())
        assert transform.queues == {}

    def test_trajectory_return_and_errors(self):
        transform = MCAdvantage(grpo_size=2, trajectory_return="sum")
        traj = TensorDict(
            {
                "query": torch.zeros(2, dtype=torch.long),
                "next": {
                    "reward": torch.tensor([[1.0], [2.0]]),
                    "done": torch.tensor([[False], [True]]),
                },
            },
            batch_size=(2,),
        )
        assert transform.inv(traj) is None
        other = traj.clone()
        other["next", "reward"] = torch.tensor([[0.0], [0.0]])
        out = transform.inv(other)
        returns = torch.tensor([3.0, 0.0])
        adv = (returns - returns.mean()) / returns.std()
        torch.testing.assert_close(out["advantage"].squeeze(-1), adv.repeat_interleave(2))
        with pytest.raises(RuntimeError, match="complete trajectories"):
            transform.inv(traj[:1])
        with pytest.raises(ValueError, match="trajectory_return must be one of"):
            MCAdvantage(grpo_size=2, trajectory_return="median")

    def test_query_as_non_tensor_data(self):
        """Groups by the query string a chat env stores (a NonTensorData)."""
        transform = MCAdvantage(grpo_size=2)
        step = TensorDict(
            {"next": {"reward": torch.tensor([[1.0]]), "done": torch.ones(1, 1, dtype=torch.bool)}},
            batch_size=(1,),
        )
        first, second = step.clone(), step.clone()
        first.set_non_tensor("query", "2+2?")
        second.set_non_tensor("query", "2+2?")
        second["next", "reward"] = torch.tensor([[3.0]])
        assert transform.inv(first) is None
        out = transform.inv(second)
        r = torch.tensor([1.0, 3.0])
        torch.testing.assert_close(out["advantage"].reshape(-1), (r - r.mean()) / r.std())


class TestSFTLoss:
    def test_against_hand_computation(self, tok, model):
        history = History.from_chats(CHATS)
        td = TensorDict({"history": ChatHistory(full=history, batch_size=(2,))}, batch_size=(2,))
        policy = TransformersWrapper(model, tokenizer=tok, generate=False, pad_output=True)
        out = SFTLoss(policy)(td)
        assert isinstance(out, SFTLossOutput)
        per_conv, per_conv_raw, full_lp = [], [], []
        for i in range(2):
            enc = tok.apply_chat_template(
                CHATS[i],
                tokenize=True,
                return_dict=True,
                return_assistant_tokens_mask=True,
                add_generation_prompt=False,
            )
            ids = torch.tensor(enc["input_ids"])
            asst = torch.tensor(enc["assistant_masks"]).bool()
            lp, _ = model_log_probs_and_entropy(
                model, ids[None], torch.ones(1, ids.numel(), dtype=torch.long)
            )
            per_conv.append(lp[0][asst].sum() / asst.sum())
            per_conv_raw.append(lp[0][asst].sum())
            full_lp.append(lp[0])
        torch.testing.assert_close(
            out.loss_sft, -torch.stack(per_conv).mean(), atol=1e-5, rtol=1e-5
        )
        out_sum = SFTLoss(policy, reduction="sum", normalize_by_seq_length=False)(td)
        torch.testing.assert_close(
            out_sum.loss_sft, -torch.stack(per_conv_raw).sum(), atol=1e-5, rtol=1e-5
        )
        # MinorSFT against reference log-probs 0.2 below the model's on every token
        width = max(x.numel() for x in full_lp)
        ref = torch.stack([F.pad(x - 0.2, (0, width - x.numel())) for x in full_lp])
        td["next", "ref_log_probs", "full"] = ref
        minor = SFTLoss(policy, loss_function="minor_sft", beta=0.5)(td)
        torch.testing.assert_close(
            minor.loss_sft, -F.logsigmoid(torch.tensor(0.5 * 0.2)), atol=1e-5, rtol=1e-5
        )
        with_kl = SFTLoss(policy, kl_to_ref_coeff=2.0)(td)
        expected = k3_kl_token_estimate(torch.tensor(-0.2), torch.tensor(0.0))
        torch.testing.assert_close(with_kl.kl_to_ref, expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(with_kl.loss_kl_to_ref, 2 * expected, atol=1e-5, rtol=1e-5)

    def test_bad_input(self, tok, model):
        policy = TransformersWrapper(model, tokenizer=tok, generate=False, pad_output=True)
        only_user = History.from_chats([[{"role": "user", "content": "hi"}]])
        td = TensorDict({"history": ChatHistory(full=only_user, batch_size=(1,))}, batch_size=(1,))
        with pytest.raises(ValueError, match="no assistant tokens"):
            SFTLoss(policy)(td)
        with pytest.raises(ValueError, match="reduction 'avg'"):
            SFTLoss(policy, reduction="avg")
        with pytest.raises(ValueError, match="needs a tokenizer"):
            SFTLoss(torch.nn.Identity())
