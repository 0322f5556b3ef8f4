"""examples/_compile_passes.py: the common-subexpression pass the examples' ``--compile``
runs after inductor's post-grad passes. It is checked on ATen graphs traced with
``make_fx`` (the pass is called as inductor calls it, on the graph), and once through
``torch.compile`` (the code inductor writes)."""

from __future__ import annotations

import hashlib
import re
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

sys.path.insert(0, str(Path(__file__).parent))
from _compile_checks import load  # noqa: E402

aten = torch.ops.aten


@pytest.fixture(scope="module")
def cse():
    load("_common")  # puts examples/ on sys.path
    from _compile_passes import CommonSubexpressions

    return CommonSubexpressions()


def _traced(fn, *args):
    return make_fx(fn, tracing_mode="fake")(*args)


def _ops(gm) -> Counter:
    return Counter(str(n.target) for n in gm.graph.nodes if n.op == "call_function")


def _run(cse, fn, *args):
    """(ops before, ops after, the pass's graph output, eager output) of ``fn``."""
    gm = _traced(fn, *[a.clone() for a in args])
    before = _ops(gm)
    cse(gm.graph)
    gm.graph.lint()
    gm.recompile()
    return before, _ops(gm), gm(*[a.clone() for a in args]), fn(*[a.clone() for a in args])


def test_a_repeated_product_is_computed_once(cse):
    def fn(x, w, b):
        first = torch.relu(torch.addmm(b, x, w))
        second = torch.relu(torch.addmm(b, x, w))
        return (first * second).sum(), torch.mm(x, w) - torch.mm(x, w)

    x, w, b = torch.randn(8, 5), torch.randn(5, 3), torch.randn(3)
    before, after, got, want = _run(cse, fn, x, w, b)
    assert before["aten.addmm.default"] == 2 and after["aten.addmm.default"] == 1
    assert before["aten.relu.default"] == 2 and after["aten.relu.default"] == 1
    assert before["aten.mm.default"] == 2 and after["aten.mm.default"] == 1
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_random_draws_are_never_shared(cse):
    def fn(x):
        return x + torch.rand(64), x + torch.rand(64), torch.randn_like(x) - torch.randn_like(x)

    _, after, got, _ = _run(cse, fn, torch.zeros(64))
    assert after["aten.rand.default"] == 2 and after["aten.randn_like.default"] == 2
    assert not torch.equal(got[0], got[1]) and got[2].abs().sum() > 0


def _write_between_reads(x):
    before = x * 2
    x.add_(1)
    return before + x * 2  # 2x + 2(x + 1)


def _written_buffer(x):
    buffer = x * 2
    same = x * 2
    buffer.add_(1)
    return buffer + same  # (2x + 1) + 2x


@pytest.mark.parametrize(
    "fn, offset",
    [(_write_between_reads, 2), (_written_buffer, 1)],
    ids=["reads-either-side-of-a-write", "a-buffer-written-in-place"],
)
def test_an_in_place_write_keeps_equal_looking_reads_apart(cse, fn, offset):
    before, after, got, want = _run(cse, fn, torch.arange(4.0))
    assert before["aten.mul.Tensor"] == after["aten.mul.Tensor"] == 2
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(got, 4 * torch.arange(4.0) + offset)


def test_equal_outputs_stay_two_tensors(cse):
    def fn(x):
        return x * 2, x * 2, x.max(1).values, x.max(1).values  # a one- and a two-output op

    _, after, got, _ = _run(cse, fn, torch.ones(3, 2))
    assert after["aten.mul.Tensor"] == 2 and after["aten.max.dim"] == 2
    got[0].add_(1)  # a caller writing one output does not write the other
    got[2].add_(1)
    torch.testing.assert_close(got[1], torch.full((3, 2), 2.0))
    torch.testing.assert_close(got[3], torch.ones(3))


def test_inductor_random_draws_and_uninitialised_memory_are_never_shared(cse):
    import torch._inductor.inductor_prims  # noqa: F401  (registers prims.inductor_*)

    def fn(seed, x):
        draw = torch.ops.prims.inductor_random.default
        first, second = draw([4], seed, "rand"), draw([4], seed, "rand")
        return first + second, torch.empty_like(x), torch.empty_like(x)

    _, after, _, _ = _run(cse, fn, torch.tensor(7), torch.zeros(3))
    assert after["prims.inductor_random.default"] == 2
    assert after["aten.empty_like.default"] == 2


def test_numbers_equal_by_value_but_not_by_type_or_sign_are_kept_apart(cse):
    def fn(x):
        return (x + 1) * 1.0 + (x + 1.0), torch.full((2,), 0.0), torch.full((2,), -0.0)

    before, after, got, want = _run(cse, fn, torch.arange(2))
    assert before["aten.add.Tensor"] == after["aten.add.Tensor"] == 3  # x + 1, x + 1.0, the sum
    assert after["aten.full.default"] == 2
    assert torch.equal(got[0], want[0])
    assert torch.signbit(got[2]).all() and not torch.signbit(got[1]).any()


def test_inductor_runs_the_pass_a_product_once_same_values(cse):
    """Through torch.compile with the examples' options: the code inductor writes calls
    one matrix product where the function has two (without the pass, it calls two)."""
    from torch._inductor.utils import run_and_get_code

    common = load("_common")
    w = torch.randn(16, 16)

    def fn(x):
        return torch.relu(x @ w).sum(-1) + torch.relu(x @ w).mean(-1)

    x = torch.randn(8, 16)
    calls = {}
    for name, kwargs in (
        ("with", common._compile_kwargs(True)),
        ("without", {"options": {"post_grad_custom_post_pass": None}}),
    ):
        torch._dynamo.reset()
        out, code = run_and_get_code(torch.compile(fn, **kwargs), x)
        torch.testing.assert_close(out, fn(x))
        calls[name] = sum(len(re.findall(r"extern_kernels\.(?:mm|addmm)\(", c)) for c in code)
    torch._dynamo.reset()
    assert calls == {"with": 1, "without": 2}


def test_the_pass_keys_inductors_caches_on_its_source(cse):
    from _compile_passes import CommonSubexpressions

    assert cse.uuid() == CommonSubexpressions().uuid() and len(cse.uuid()) == 64
    source = (
        Path(load.__code__.co_filename).parents[1] / "examples" / "_compile_passes.py"
    ).read_bytes()
    assert cse.uuid() == hashlib.sha256(source).hexdigest()  # a change to the pass: a new key
    assert cse == CommonSubexpressions() and hash(cse) == hash(CommonSubexpressions())
