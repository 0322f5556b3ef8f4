"""Categorical draws under torch.compile (Gumbel-max) against torch's eager draws."""

from __future__ import annotations

import pytest
import torch
from tensordict.nn import InteractionType, TensorDictModule, set_interaction_type
from torch import distributions as D
from torch import nn

from rl.core import tensor_policy
from rl.modules import MaskedCategorical, OneHotCategorical, ProbabilisticActor
from rl.modules.distributions._discrete import gumbel_max_index

LOGITS = torch.tensor([0.0, 1.0, 2.0, -1.0])
N = 40_000


def _frequencies(index: torch.Tensor, n: int = 4) -> torch.Tensor:
    return torch.bincount(index.reshape(-1), minlength=n).double() / index.numel()


def _assert_law(freq: torch.Tensor, probs: torch.Tensor) -> None:
    # 5 standard errors of a frequency over N draws
    tol = 5 * (probs * (1 - probs) / N).sqrt() + 1e-9
    assert ((freq - probs.double()).abs() <= tol).all(), (freq, probs)


def test_gumbel_max_index_law_and_shape():
    torch.manual_seed(0)
    index = gumbel_max_index(LOGITS.expand(N, 4))
    assert index.shape == (N,) and index.dtype == torch.long
    _assert_law(_frequencies(index), LOGITS.softmax(-1))
    # sample_shape leads, as torch.distributions' sample does
    assert gumbel_max_index(LOGITS.expand(3, 4), torch.Size([5])).shape == (5, 3)
    # a category at -inf (masked) is never drawn
    masked = LOGITS.masked_fill(torch.tensor([False, True, False, False]), float("-inf"))
    assert (gumbel_max_index(masked.expand(N, 4)) != 1).all()


@pytest.mark.parametrize("kind", ["onehot", "masked", "torch"])
def test_compiled_draw_has_the_categorical_law(kind):
    torch.manual_seed(0)
    mask = torch.tensor([True, False, True, True])
    probs = LOGITS.masked_fill(~mask, float("-inf")).softmax(-1) if kind == "masked" else None
    probs = LOGITS.softmax(-1) if probs is None else probs

    def draw(logits):
        if kind == "onehot":
            return OneHotCategorical(logits=logits).sample().argmax(-1)
        if kind == "masked":
            return MaskedCategorical(logits=logits, mask=mask).sample()
        return D.Categorical(logits=logits).sample()

    compiled = torch.compile(draw, fullgraph=True)
    index = compiled(LOGITS.expand(N, 4))
    assert index.shape == (N,)
    _assert_law(_frequencies(index), probs)


def test_eager_draw_keeps_torch_multinomial_stream():
    logits = torch.randn(6, 5)
    torch.manual_seed(3)
    ours = OneHotCategorical(logits=logits).sample((2,))
    torch.manual_seed(3)
    ref = torch.multinomial(logits.softmax(-1), 2, True).T
    assert torch.equal(ours.argmax(-1), ref)
    torch.manual_seed(3)
    masked = MaskedCategorical(logits=logits, mask=torch.ones(5, dtype=torch.bool)).sample()
    torch.manual_seed(3)
    assert torch.equal(masked, D.Categorical(logits=logits).sample())


def test_compiled_actor_draws_torch_categorical_by_gumbel_max():
    """A ProbabilisticActor over torch's Categorical, compiled: the draw follows the
    actor's probabilities, and the graph holds no multinomial."""
    torch.manual_seed(0)
    net = nn.Linear(3, 4)
    with torch.no_grad():
        net.weight.zero_()
        net.bias.copy_(LOGITS)
    actor = ProbabilisticActor(
        TensorDictModule(net, ["observation"], ["logits"]),
        in_keys=["logits"],
        distribution_class=D.Categorical,
        return_log_prob=True,
    )
    twin = tensor_policy(actor)
    ops: set[str] = set()

    def backend(gm, example_inputs):
        ops.update(str(node.target) for node in gm.graph.nodes if node.op == "call_function")
        return gm

    compiled = torch.compile(twin.forward, backend=backend, fullgraph=True)
    with torch.no_grad(), set_interaction_type(InteractionType.RANDOM):
        out = dict(zip(twin.out_keys, compiled(torch.zeros(N, 3))))
    action, log_prob = out["action"], out[actor.log_prob_key]
    assert not any("multinomial" in op for op in ops), ops
    _assert_law(_frequencies(action), LOGITS.softmax(-1))
    torch.testing.assert_close(log_prob, LOGITS.log_softmax(-1)[action])
