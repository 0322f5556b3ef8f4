"""Categorical draws under torch.compile (Gumbel-max) against torch's eager draws."""

from __future__ import annotations

import pytest
import torch
from tensordict.nn import InteractionType, TensorDictModule, set_interaction_type
from torch import distributions as D
from torch import nn

from rl.core import tensor_policy
from rl.modules import (
    MaskedCategorical,
    MaskedOneHotCategorical,
    OneHotCategorical,
    ProbabilisticActor,
)
from rl.modules.distributions._discrete import _gumbel_max_index

LOGITS = torch.tensor([0.0, 1.0, 2.0, -1.0])
N = 40_000


def _frequencies(index: torch.Tensor, n: int = 4) -> torch.Tensor:
    return torch.bincount(index.reshape(-1), minlength=n).double() / index.numel()


def _assert_law(freq: torch.Tensor, probs: torch.Tensor) -> None:
    # 5 standard errors of a frequency over N draws
    probs = probs.double()
    tol = 5 * (probs * (1 - probs) / N).sqrt() + 1e-9
    assert ((freq - probs).abs() <= tol).all(), (freq, probs)


def _recording_compile(fn):
    """``fn`` compiled whole (dynamo, eager kernels) and the functions and methods its
    graph calls."""
    ops: set[str] = set()

    def backend(gm, example_inputs):
        calls = ("call_function", "call_method")
        ops.update(str(node.target) for node in gm.graph.nodes if node.op in calls)
        return gm

    return torch.compile(fn, backend=backend, fullgraph=True), ops


class TestCategoricalCompiledDraw:
    def test_gumbel_max_index_law_shape_and_masked_categories(self):
        torch.manual_seed(0)
        index = _gumbel_max_index(LOGITS.expand(N, 4))
        assert index.shape == (N,) and index.dtype == torch.long
        _assert_law(_frequencies(index), LOGITS.softmax(-1))
        # sample_shape leads, as torch.distributions' sample does
        assert _gumbel_max_index(LOGITS.expand(3, 4), torch.Size([5])).shape == (5, 3)
        # a category at -inf (masked) is never drawn
        masked = LOGITS.masked_fill(torch.tensor([False, True, False, False]), float("-inf"))
        assert (_gumbel_max_index(masked.expand(N, 4)) != 1).all()

    @pytest.mark.parametrize("kind", ["onehot", "onehot_probs", "masked", "masked_sparse"])
    def test_compiled_draw_is_gumbel_max_with_the_categorical_law(self, kind):
        torch.manual_seed(0)
        mask = torch.tensor([True, False, True, True])
        masked_probs = LOGITS.masked_fill(~mask, float("-inf")).softmax(-1)

        def draw(logits):
            if kind == "onehot":
                return OneHotCategorical(logits=logits).sample((2,)).argmax(-1)
            if kind == "onehot_probs":
                return OneHotCategorical(probs=logits.softmax(-1)).sample((2,)).argmax(-1)
            if kind == "masked":
                return MaskedCategorical(logits=logits, mask=mask).sample((2,))
            # sparse: the allowed categories listed, positions mapped back to them
            return MaskedCategorical(logits=logits, indices=torch.tensor([0, 2, 3])).sample((2,))

        compiled, ops = _recording_compile(draw)
        index = compiled(LOGITS.expand(N // 2, 4))
        assert index.shape == (2, N // 2)
        assert not any("multinomial" in op for op in ops), ops
        assert any("argmax" in op for op in ops), ops
        probs = LOGITS.softmax(-1) if kind.startswith("onehot") else masked_probs
        _assert_law(_frequencies(index), probs)

    def test_a_zero_probability_is_never_drawn_in_low_precision(self):
        # torch's logits of probs clamp a zero to log(eps): in bfloat16 that category
        # would be drawn about 1% of the time; the draw reads log(probs) instead
        probs = torch.tensor([0.5, 0.5, 0.0], dtype=torch.bfloat16).expand(N, 3)
        compiled, _ = _recording_compile(lambda p: OneHotCategorical(probs=p).sample())
        assert compiled(probs)[:, 2].sum() == 0

        def logits_read_first(p):
            dist = OneHotCategorical(probs=p)
            _ = dist.logits  # cached by torch (clamped to log(eps)) before the draw
            return dist.sample().argmax(-1)

        compiled, _ = _recording_compile(logits_read_first)
        assert (compiled(probs) != 2).all()

    @pytest.mark.parametrize("bad", ["nan", "all_masked"])
    def test_a_row_without_a_finite_logit_raises_compiled_as_eagerly(self, bad):
        logits = torch.zeros(4, 3)
        mask = torch.ones(4, 3, dtype=torch.bool)
        if bad == "nan":
            logits[2] = float("nan")
        else:
            mask[2] = False

        def draw(logits):
            return MaskedCategorical(logits=logits, mask=mask).sample()

        with pytest.raises(RuntimeError):
            draw(logits)
        compiled, _ = _recording_compile(draw)
        with pytest.raises(RuntimeError, match="NaN or has no finite entry"):
            compiled(logits)

    def test_eager_draw_keeps_torch_multinomial_stream(self):
        logits = torch.randn(6, 5)
        torch.manual_seed(3)
        ours = OneHotCategorical(logits=logits).sample((2,))
        torch.manual_seed(3)
        ref = torch.multinomial(logits.softmax(-1), 2, True).T
        assert torch.equal(ours.argmax(-1), ref)
        mask = torch.ones(6, 5, dtype=torch.bool)
        torch.manual_seed(3)
        masked = MaskedOneHotCategorical(logits=logits, mask=mask).sample()
        torch.manual_seed(3)
        assert torch.equal(masked.argmax(-1), D.Categorical(logits=logits).sample())

    def test_compiled_actor_draws_torch_categorical_by_gumbel_max(self):
        """A ProbabilisticActor over torch's Categorical, compiled: the draw follows the
        actor's probabilities, scored by them, and the graph holds no multinomial."""
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
        compiled, ops = _recording_compile(twin.forward)
        with torch.no_grad(), set_interaction_type(InteractionType.RANDOM):
            out = dict(zip(twin.out_keys, compiled(torch.zeros(N, 3))))
        action, log_prob = out["action"], out[actor.log_prob_key]
        assert not any("multinomial" in op for op in ops), ops
        _assert_law(_frequencies(action), LOGITS.softmax(-1))
        torch.testing.assert_close(log_prob, LOGITS.log_softmax(-1)[action])
