"""Distillation across the packages: RetrieveLogProb (rl-envs) writes a teacher's log-probs,
DistillationLoss (rl-objectives) distils a student on them; the loss equals the k3 KL computed
from direct model calls, whether the wrappers pad their outputs or not."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "rl-envs" / "tests"))
from _tiny_llm import make_model, make_tokenizer  # noqa: E402
from tensordict import TensorDict, lazy_stack  # noqa: E402

from rl.data.llm import ChatHistory, History  # noqa: E402
from rl.envs.llm import RetrieveLogProb  # noqa: E402
from rl.modules.llm import TransformersWrapper  # noqa: E402
from rl.objectives.llm import DistillationLoss, k3_kl_token_estimate  # noqa: E402

CHATS = [
    [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
    [{"role": "user", "content": "abcd"}, {"role": "assistant", "content": "xyz"}],
]


def direct_kl(tok, student, teacher):
    """Mean over conversations of the mean k3 KL(student || teacher) on assistant tokens."""
    per_conv = []
    for chat in CHATS:
        enc = tok.apply_chat_template(
            chat, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        ids = torch.tensor(enc["input_ids"])
        assistant = torch.tensor(enc["assistant_masks"]).bool()[1:]
        with torch.no_grad():
            p = student(input_ids=ids[None]).logits[0, :-1].log_softmax(-1)
            q = teacher(input_ids=ids[None]).logits[0, :-1].log_softmax(-1)
        p, q = p.gather(-1, ids[1:, None])[:, 0], q.gather(-1, ids[1:, None])[:, 0]
        per_conv.append(k3_kl_token_estimate(q, p)[assistant].mean())
    return torch.stack(per_conv).mean()


@pytest.mark.parametrize("pad_output", [False, True])
def test_retrieve_log_prob_then_distillation_loss(pad_output):
    tok = make_tokenizer()
    student, teacher = make_model(tok, seed=0), make_model(tok, seed=1)
    history = History.from_chats(CHATS)
    transform = RetrieveLogProb(
        TransformersWrapper(teacher, tokenizer=tok, generate=False, pad_output=pad_output),
        log_probs_full_key=("teacher_log_probs", "full"),
        assistant_only=True,
    )
    td = TensorDict(
        history=ChatHistory(full=history, prompt=history[..., :-1], response=history[..., -1:]),
        next=TensorDict(
            done=torch.zeros(2, 1, dtype=torch.bool), history=ChatHistory(prompt=history)
        ),
        batch_size=(2,),
    )
    with torch.no_grad():
        data = transform(lazy_stack(list(td.unbind(0))))
    student_policy = TransformersWrapper(
        student, tokenizer=tok, generate=False, pad_output=pad_output
    )
    out = DistillationLoss(student_policy)(data)
    expected = direct_kl(tok, student, teacher)
    torch.testing.assert_close(out.loss_distill, expected, atol=1e-6, rtol=1e-5)
    out.loss_distill.backward()
    assert student.transformer.wte.weight.grad is not None
    assert teacher.transformer.wte.weight.grad is None
