"""rl.objectives.llm.DistillationLoss: the k3 KL between a tiny student and teacher, against a
hand computation over the masked tokens and against TorchRL 0.14.1's values."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from tensordict import TensorDict, lazy_stack  # noqa: E402

from rl.data.llm import ChatHistory, History  # noqa: E402
from rl.modules.llm import TransformersWrapper  # noqa: E402
from rl.objectives.llm import DistillationLoss, DistillationLossOutput  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from _tiny_llm import make_model, make_tokenizer  # noqa: E402

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


def encode(tok, chat):
    enc = tok.apply_chat_template(
        chat,
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
        add_generation_prompt=False,
    )
    return torch.tensor(enc["input_ids"]), torch.tensor(enc["assistant_masks"]).bool()


def token_log_probs(model, ids):
    """log p(ids[t] | ids[:t]) for each t, 0 at t=0 (the layout the wrappers write)."""
    with torch.no_grad():
        logits = model(input_ids=ids[None]).logits[0]
    lp = logits[:-1].log_softmax(-1).gather(-1, ids[1:, None]).squeeze(-1)
    return torch.cat([torch.zeros(1), lp])


def make_data(tok, teacher, chats=CHATS):
    """One row per conversation, at its own length, with the teacher's log-probs."""
    rows = []
    for chat in chats:
        ids, _ = encode(tok, chat)
        rows.append(
            TensorDict(
                {
                    "history": ChatHistory(full=History.from_chats([chat])[0]),
                    "next": {"teacher_log_probs": {"full": token_log_probs(teacher, ids)}},
                }
            )
        )
    return lazy_stack(rows)


def hand_kl(tok, student, teacher, direction, assistant_only, normalize):
    """Per conversation: sum over the scored tokens of exp(d) - 1 - d, as a plain loop."""
    out = []
    for chat in CHATS:
        ids, assistant = encode(tok, chat)
        p, q = token_log_probs(student, ids), token_log_probs(teacher, ids)
        mask = assistant if assistant_only else torch.ones_like(assistant)
        total = torch.tensor(0.0)
        for t in range(ids.numel()):
            if mask[t]:
                d = (q[t] - p[t]) if direction == "reverse" else (p[t] - q[t])
                total = total + torch.exp(d) - 1 - d
        out.append(total / mask.sum() if normalize else total)
    return torch.stack(out)


class TestDistillationLoss:
    @pytest.mark.parametrize("direction", ["reverse", "forward"])
    @pytest.mark.parametrize("assistant_only", [True, False])
    def test_against_hand_computation(self, tok, direction, assistant_only):
        student, teacher = make_model(tok, seed=0), make_model(tok, seed=1)
        data = make_data(tok, teacher)
        wrapper = TransformersWrapper(student, tokenizer=tok, generate=False, pad_output=False)
        loss = DistillationLoss(
            wrapper, kl_direction=direction, assistant_only=assistant_only, reduction="none"
        )
        out = loss(data)
        assert isinstance(out, DistillationLossOutput)
        expected = hand_kl(tok, student, teacher, direction, assistant_only, normalize=True)
        torch.testing.assert_close(out.loss_distill, expected, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(out.kl_to_teacher, expected.mean(), atol=1e-6, rtol=1e-5)
        assert (expected > 0).all()  # two different models: a strictly positive divergence
        summed = DistillationLoss(
            wrapper,
            kl_direction=direction,
            assistant_only=assistant_only,
            reduction="sum",
            normalize_by_seq_length=False,
        )(data)
        raw = hand_kl(tok, student, teacher, direction, assistant_only, normalize=False)
        torch.testing.assert_close(summed.loss_distill, raw.sum(), atol=1e-6, rtol=1e-5)

    def test_zero_against_itself_and_gradients_reach_the_student_only(self, tok):
        student = make_model(tok, seed=0)
        teacher = make_model(tok, seed=1)
        wrapper = TransformersWrapper(student, tokenizer=tok, generate=False, pad_output=False)
        same = DistillationLoss(wrapper)(make_data(tok, student))
        torch.testing.assert_close(same.loss_distill, torch.tensor(0.0), atol=1e-6, rtol=0)
        data = make_data(tok, teacher)
        data.get(("next", "teacher_log_probs", "full"), as_list=True)[0].requires_grad_()
        out = DistillationLoss(wrapper)(data)
        out.loss_distill.backward()
        assert all(p.grad is not None for p in student.parameters() if p.requires_grad)
        assert not out.kl_to_teacher.requires_grad
        assert data.get(("next", "teacher_log_probs", "full"), as_list=True)[0].grad is None

    def test_padded_input_with_its_own_masks(self, tok):
        """A dense batch (padded tensors and the input's masks) gives the per-row values;
        reduction='none' keeps the batch shape."""
        student, teacher = make_model(tok, seed=0), make_model(tok, seed=1)
        encoded = [encode(tok, chat) for chat in CHATS]
        width = max(ids.numel() for ids, _ in encoded)
        student_lp = torch.zeros(2, width)
        teacher_lp = torch.zeros(2, width)
        attention = torch.zeros(2, width, dtype=torch.bool)
        assistant = torch.zeros(2, width, dtype=torch.bool)
        for i, (ids, asst) in enumerate(encoded):
            n = ids.numel()
            student_lp[i, :n] = token_log_probs(student, ids)
            teacher_lp[i, :n] = token_log_probs(teacher, ids)
            attention[i, :n] = True
            assistant[i, :n] = asst

        class PaddedStudent(torch.nn.Module):
            def forward(self, td):
                td["log_probs", "full"] = student_lp.reshape(*td.batch_size, width)
                return td

        data = TensorDict(
            {
                "history": {"full": torch.zeros(2, width)},
                "masks": {"all_attention_mask": attention, "all_assistant_mask": assistant},
                "next": {"teacher_log_probs": {"full": teacher_lp}},
            },
            batch_size=(2,),
        )
        out = DistillationLoss(PaddedStudent(), reduction="none")(data.reshape(2, 1))
        assert out.loss_distill.shape == (2, 1)
        expected = hand_kl(tok, student, teacher, "reverse", True, normalize=True)
        torch.testing.assert_close(out.loss_distill.reshape(-1), expected, atol=1e-6, rtol=1e-5)

    @pytest.mark.parametrize(
        "direction, reduction, normalize, assistant_only, values",
        [
            ("reverse", "mean", True, True, [0.003628633]),
            ("reverse", "sum", False, False, [0.236586094]),
            ("reverse", "none", True, True, [0.002052707, 0.00520456]),
            ("forward", "mean", True, False, [0.002632345]),
            ("forward", "sum", False, True, [0.034599617]),
            ("forward", "none", True, True, [0.002001011, 0.004766097]),
        ],
    )
    def test_torchrl_values(self, tok, direction, reduction, normalize, assistant_only, values):
        """TorchRL 0.14.1's DistillationLoss on the same tiny Llama pair and data (its
        TransformersWrapper, teacher log-probs from a direct model call) gave these."""
        from transformers import LlamaConfig, LlamaForCausalLM

        def llama(seed):
            torch.manual_seed(seed)
            cfg = LlamaConfig(
                vocab_size=len(tok),
                hidden_size=16,
                intermediate_size=32,
                num_hidden_layers=1,
                num_attention_heads=2,
                num_key_value_heads=2,
                max_position_embeddings=64,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
                bos_token_id=tok.eos_token_id,
            )
            return LlamaForCausalLM(cfg).eval()

        student, teacher = llama(0), llama(1)
        wrapper = TransformersWrapper(student, tokenizer=tok, generate=False, pad_output=False)
        out = DistillationLoss(
            wrapper,
            kl_direction=direction,
            reduction=reduction,
            normalize_by_seq_length=normalize,
            assistant_only=assistant_only,
        )(make_data(tok, teacher))
        torch.testing.assert_close(
            out.loss_distill.reshape(-1), torch.tensor(values), atol=2e-7, rtol=1e-5
        )

    def test_bad_input(self, tok):
        student, teacher = make_model(tok, seed=0), make_model(tok, seed=1)
        wrapper = TransformersWrapper(student, tokenizer=tok, generate=False, pad_output=False)
        with pytest.raises(ValueError, match="kl_direction 'backward' is not one of"):
            DistillationLoss(wrapper, kl_direction="backward")
        with pytest.raises(ValueError, match="reduction 'avg' is not one of"):
            DistillationLoss(wrapper, reduction="avg")
        data = make_data(tok, teacher)
        with pytest.raises(
            KeyError, match="no teacher log-probs at \\('next', 'teacher_log_probs'"
        ):
            DistillationLoss(wrapper)(data.exclude("next"))
        short = make_data(tok, teacher)
        rows = short.unbind(0)
        rows[0]["next", "teacher_log_probs", "full"] = rows[0]["next", "teacher_log_probs", "full"][
            :-1
        ]
        with pytest.raises(ValueError, match="per-sequence shapes"):
            DistillationLoss(wrapper)(lazy_stack(list(rows)))
        only_user = make_data(tok, teacher, chats=[[{"role": "user", "content": "hi"}]])
        with pytest.raises(ValueError, match="no assistant tokens to distil on"):
            DistillationLoss(wrapper)(only_user)
        # teacher log-probs zero-filled outside the assistant's turns, scored everywhere
        zeroed = make_data(tok, teacher)
        for i, row in enumerate(zeroed.unbind(0)):
            _, assistant = encode(tok, CHATS[i])
            lp = row["next", "teacher_log_probs", "full"]
            row["next", "teacher_log_probs", "full"] = lp.masked_fill(~assistant, 0.0)
        with pytest.raises(RuntimeError, match="RetrieveLogProb\\(assistant_only=True\\)"):
            DistillationLoss(wrapper, assistant_only=False)(zeroed)
        torch.testing.assert_close(  # the pairing it was made for works
            DistillationLoss(wrapper)(zeroed).loss_distill,
            DistillationLoss(wrapper)(data).loss_distill,
        )

        class NoMasks(torch.nn.Module):
            def forward(self, td):
                td["log_probs", "full"] = torch.zeros(*td.batch_size, 3)
                return td

        bare = TensorDict(
            {
                "history": {"full": torch.zeros(1, 3)},
                "next": {"teacher_log_probs": {"full": torch.zeros(1, 3)}},
            },
            batch_size=(1,),
        )
        with pytest.raises(ValueError, match="no tokenizer to recover them"):
            DistillationLoss(NoMasks())(bare)

    def test_masks_from_the_tokenizer(self, tok):
        """A student that writes no masks: the history is re-tokenized with the tokenizer."""
        student, teacher = make_model(tok, seed=0), make_model(tok, seed=1)
        wrapper = TransformersWrapper(student, tokenizer=tok, generate=False, pad_output=False)

        class WithoutMasks(torch.nn.Module):
            def forward(self, td):
                return wrapper(td).exclude("masks")

        data = make_data(tok, teacher)
        out = DistillationLoss(WithoutMasks(), tokenizer=tok)(data)
        torch.testing.assert_close(out.loss_distill, DistillationLoss(wrapper)(data).loss_distill)
