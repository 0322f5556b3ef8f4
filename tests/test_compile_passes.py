"""examples/_compile_passes.py: the two inductor passes the examples' ``--compile`` runs,
the common-subexpression pass after inductor's post-grad passes and the narrow-product pass
before them. They are checked on ATen graphs traced with ``make_fx`` (a pass is called as
inductor calls it, on the graph), and through ``torch.compile`` (the code inductor
writes)."""

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
    w = torch.randn(16, 16)

    def fn(x):
        return torch.relu(x @ w).sum(-1) + torch.relu(x @ w).mean(-1)

    x = torch.randn(8, 16)
    calls = {}
    for name, (out, code) in _with_and_without(fn, x, "post_grad_custom_post_pass").items():
        torch.testing.assert_close(out, fn(x))
        calls[name] = len(re.findall(r"extern_kernels\.(?:mm|addmm)\(", code))
    assert calls == {"with": 1, "without": 2}


def _with_and_without(fn, x, slot: str, **compile_kwargs) -> dict:
    """``fn(x)`` compiled with the examples' options ("with") and with the pass in
    ``slot`` left out ("without"): ``{name: (output, inductor's code)}``."""
    from torch._inductor.utils import run_and_get_code

    common = load("_common")
    found = {}
    for name, kwargs in (
        ("with", common._compile_kwargs(True)),
        ("without", {"options": {slot: None}}),
    ):
        torch._dynamo.reset()
        with torch._dynamo.config.patch(trace_autograd_ops=True):
            out, code = run_and_get_code(torch.compile(fn, **compile_kwargs, **kwargs), x)
        found[name] = out, "\n".join(code)
    torch._dynamo.reset()
    return found


def test_the_pass_keys_inductors_caches_on_its_source(cse):
    from _compile_passes import CommonSubexpressions

    assert cse.uuid() == CommonSubexpressions().uuid() and len(cse.uuid()) == 64
    source = (
        Path(load.__code__.co_filename).parents[1] / "examples" / "_compile_passes.py"
    ).read_bytes()
    assert cse.uuid() == hashlib.sha256(source).hexdigest()  # a change to the pass: a new key
    assert cse == CommonSubexpressions() and hash(cse) == hash(CommonSubexpressions())


# --- NarrowProducts -------------------------------------------------------------------


@pytest.fixture(scope="module")
def narrow():
    load("_common")
    from _compile_passes import NarrowProducts

    return NarrowProducts()


def _products(gm) -> list:
    """(operator, output shape) of each matrix product of ``gm``."""
    return [
        (str(n.target), tuple(n.meta["val"].shape))
        for n in gm.graph.nodes
        if n.op == "call_function" and n.target in (aten.mm.default, aten.bmm.default)
    ]


def _rewritten(narrow, fn, *args, tracing_mode="fake"):
    gm = make_fx(fn, tracing_mode=tracing_mode)(*[a.clone() for a in args])
    before = _products(gm)
    narrow(gm.graph)
    gm.graph.lint()
    gm.recompile()
    return before, _products(gm), gm(*[a.clone() for a in args]), fn(*[a.clone() for a in args])


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view(torch.int32)  # -0.0 and 0.0 differ, NaNs by payload


def test_a_narrow_result_is_computed_transposed_same_sums(narrow):
    """A first layer's weight gradient, grad.T @ input, over 3 input features: computed as
    (input.T @ grad).T, a [3, 40] product; the same values to float rounding, the shape of
    the eager result (a transposed view of the [3, 40] product)."""
    g, x = torch.randn(256, 40, dtype=torch.float32), torch.randn(256, 3)
    before, after, got, want = _rewritten(narrow, lambda g, x: g.t() @ x, g, x)
    assert before == [("aten.mm.default", (40, 3))]
    assert after == [("aten.mm.default", (3, 40))]
    assert got.shape == (40, 3) and got.stride() == (1, 40)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # batched (an ensemble's members): the same, per member
    g, x = torch.randn(5, 64, 30), torch.randn(5, 64, 4)
    before, after, got, want = _rewritten(narrow, lambda g, x: g.transpose(1, 2) @ x, g, x)
    assert before == [("aten.bmm.default", (5, 30, 4))]
    assert after == [("aten.bmm.default", (5, 4, 30))]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_an_outer_product_is_a_broadcast_product_same_values(narrow):
    """The same values, and the same bits but for a zero's sign (eager bmm sums onto +0)."""
    a, b = torch.randn(300, 1), torch.randn(1, 64)
    a[:3] = torch.tensor([0.0, -0.0, float("inf")]).unsqueeze(-1)
    before, after, got, want = _rewritten(narrow, lambda a, b: torch.relu(a @ b), a, b)
    assert before == [("aten.mm.default", (300, 64))] and after == []
    _assert_same_but_zero_signs(got, want)
    a, b = torch.randn(3, 50, 1), torch.randn(3, 1, 7)
    a[0, :5] = torch.tensor([0.0, -0.0, float("inf"), 1e-30, -3e38]).unsqueeze(-1)
    before, after, got, want = _rewritten(narrow, torch.bmm, a, b)
    assert before == [("aten.bmm.default", (3, 50, 7))] and after == []
    _assert_same_but_zero_signs(got, want)


def _assert_same_but_zero_signs(got, want):
    assert got.shape == want.shape and torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got.nan_to_num(0.0), want.nan_to_num(0.0))
    nonzero = got != 0
    assert torch.equal(_bits(got)[nonzero], _bits(want)[nonzero])


@pytest.mark.parametrize(
    ("rows", "inner", "cols", "dtype"),
    [
        (256, 64, 32, torch.float32),  # wide enough: BLAS's own orientation is as fast
        (256, 64, 25, torch.float32),  # just past the bound (24 columns)
        (256, 64, 1, torch.float32),  # a matrix-vector product
        (5, 64, 3, torch.float32),  # fewer rows than twice the columns
        (47, 64, 24, torch.float32),  # (one row short of twice 24)
        (256, 64, 3, torch.float64),  # another dtype: not measured, left alone
        (256, 1, 3, torch.float64),  # (an outer product in float64, the same)
    ],
)
def test_other_products_are_left_alone(narrow, rows, inner, cols, dtype):
    a, b = torch.randn(rows, inner, dtype=dtype), torch.randn(inner, cols, dtype=dtype)
    before, after, got, want = _rewritten(narrow, torch.mm, a, b)
    assert before == after == [("aten.mm.default", (rows, cols))]
    assert torch.equal(got, want)


@pytest.mark.parametrize(("rows", "cols"), [(48, 24), (256, 2), (4, 2)])
def test_the_bounds_are_included(narrow, rows, cols):
    a, b = torch.randn(rows, 64), torch.randn(64, cols)
    before, after, got, want = _rewritten(narrow, torch.mm, a, b)
    assert before == [("aten.mm.default", (rows, cols))]
    assert after == [("aten.mm.default", (cols, rows))]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_symbolic_sizes_and_other_devices_are_left_alone(narrow):
    def fn(g, x, w, v):
        return g.transpose(1, 2) @ x, w @ v  # a narrow bmm result, an outer product

    args = torch.randn(5, 256, 40), torch.randn(5, 256, 3), torch.randn(30, 1), torch.randn(1, 9)
    gm = make_fx(fn, tracing_mode="symbolic")(*args)  # every size symbolic, the batch too
    ops = _ops(gm)
    narrow(gm.graph)
    assert _ops(gm) == ops
    for got, want in zip(gm(*args), fn(*args)):
        assert torch.equal(got, want)
    meta = [x.to("meta") for x in args]  # another device (no BLAS of this CPU's)
    gm = make_fx(fn, tracing_mode="fake")(*meta)
    ops = _ops(gm)
    narrow(gm.graph)
    assert _ops(gm) == ops


@pytest.mark.parametrize("batch", ["symbolic", "static"])
def test_a_symbolic_batch_size_alone_leaves_a_product(narrow, batch):
    """An ensemble's bmm whose member count is symbolic (its matrices' sizes static) is
    left alone; the same product with every size static is rewritten."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import (
        DimDynamic,
        ShapeEnv,
        StatelessSymbolicContext,
    )

    mode = FakeTensorMode(shape_env=ShapeEnv())
    first = DimDynamic.DYNAMIC if batch == "symbolic" else DimDynamic.STATIC
    sizes = StatelessSymbolicContext(dynamic_sizes=[first, DimDynamic.STATIC, DimDynamic.STATIC])
    a = mode.from_tensor(torch.randn(5, 40, 256), symbolic_context=sizes)
    b = mode.from_tensor(torch.randn(5, 256, 3), symbolic_context=sizes)
    graph = torch.fx.Graph()
    pa, pb = graph.placeholder("a"), graph.placeholder("b")
    pa.meta["val"], pb.meta["val"] = a, b
    product = graph.call_function(aten.bmm.default, (pa, pb))
    with mode:
        product.meta["val"] = torch.bmm(a, b)
    graph.output(product)
    narrow(graph)
    calls = [str(n.target) for n in graph.nodes if n.op == "call_function"]
    if batch == "symbolic":
        assert calls == ["aten.bmm.default"]
    else:
        assert calls == ["aten.permute.default"] * 2 + [
            "aten.bmm.default",
            "aten.permute.default",
        ]


def test_new_nodes_carry_their_own_tensor_meta_and_the_products_provenance(narrow):
    from torch.fx.passes.shape_prop import ShapeProp

    g, x = torch.randn(64, 40), torch.randn(64, 3)
    gm = make_fx(lambda g, x: g.t() @ x, tracing_mode="fake")(g, x)
    ShapeProp(gm).propagate(g, x)  # tensor_meta, as a graph inductor is handed has
    (product,) = [n for n in gm.graph.nodes if n.target == aten.mm.default]
    product.meta["stack_trace"] = "the layer's line"
    product.meta["nn_module_stack"] = {"critic": ("critic", "Linear")}
    old = set(gm.graph.nodes)
    narrow(gm.graph)
    added = [n for n in gm.graph.nodes if n not in old]
    assert [str(n.target) for n in added] == ["aten.permute.default"] * 2 + [
        "aten.mm.default",
        "aten.permute.default",
    ]
    assert added[2].meta["val"].shape == (3, 40) and added[3].meta["val"].shape == (40, 3)
    # an outer product's broadcast product: the same
    a, b = torch.randn(30, 1), torch.randn(1, 9)
    gm2 = make_fx(torch.mm, tracing_mode="fake")(a, b)
    ShapeProp(gm2).propagate(a, b)
    (outer,) = [n for n in gm2.graph.nodes if n.target == aten.mm.default]
    outer.meta["stack_trace"] = "the layer's line"
    outer.meta["nn_module_stack"] = {"critic": ("critic", "Linear")}
    narrow(gm2.graph)
    added += [n for n in gm2.graph.nodes if n.op == "call_function"]
    assert str(added[-1].target) == "aten.mul.Tensor" and added[-1].meta["val"].shape == (30, 9)
    for node in added:
        assert node.meta["tensor_meta"].shape == node.meta["val"].shape
        assert node.meta["tensor_meta"].stride == node.meta["val"].stride()
        assert node.meta["stack_trace"] == "the layer's line"
        assert node.meta["nn_module_stack"] == {"critic": ("critic", "Linear")}


def test_inductor_runs_the_narrow_pass_through_the_examples_options(narrow):
    """Through torch.compile with the examples' options: a linear layer of 3 inputs and 1
    output, forward and backward: inductor's code calls no BLAS product for the outer
    product, and the first layer's weight gradient in the transposed orientation; the
    gradients equal eager's to float rounding."""
    common = load("_common")
    assert common._inductor_options()["post_grad_custom_pre_pass"] == narrow
    w1, w2 = torch.randn(64, 3, requires_grad=True), torch.randn(1, 64, requires_grad=True)

    def fn(x):
        loss = (torch.tanh(x @ w1.t()) @ w2.t()).square().mean()
        return torch.autograd.grad(loss, (w1, w2))

    x = torch.randn(256, 3)
    found = {}
    runs = _with_and_without(fn, x, "post_grad_custom_pre_pass", fullgraph=True)
    for name, (out, code) in runs.items():
        for got, want in zip(out, fn(x)):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        found[name] = sorted(_product_shapes(code))
    # forward: [256, 64] and [256, 1]; backward: dW2 [1, 64], the outer product dh
    # [256, 64] (gone with the pass), dW1 [64, 3] (computed as [3, 64] with it)
    assert found == {
        "without": [(1, 64), (64, 3), (256, 1), (256, 64), (256, 64)],
        "with": [(1, 64), (3, 64), (256, 1), (256, 64)],
    }


def _product_shapes(code: str) -> list:
    """The shapes of the buffers inductor's code writes BLAS products into."""
    shapes = dict(re.findall(r"(buf\d+) = empty_strided_cpu\(\(([\d, ]+)\)", code))
    outs = re.findall(r"extern_kernels\.(?:mm|addmm|bmm)\(.*out=(buf\d+)\)", code)
    return [tuple(int(n) for n in shapes[out].split(",")) for out in outs]


def test_the_narrow_pass_keys_inductors_caches_on_its_source(narrow, cse):
    from _compile_passes import NarrowProducts

    assert narrow.uuid() == cse.uuid() and narrow == NarrowProducts() and narrow != cse
    assert hash(narrow) == hash(NarrowProducts())


def test_both_passes_travel_by_value_as_a_ray_actors_policy_sends_them(cse, narrow):
    """A Ray actor's compiled policy holds the passes in its options, and the examples
    folder is not on a cluster's other nodes: ppo_ray.py sends this module by value."""
    cloudpickle = pytest.importorskip("ray.cloudpickle")
    import _compile_passes

    cloudpickle.register_pickle_by_value(_compile_passes)
    try:
        for p in (cse, narrow):
            copy = cloudpickle.loads(cloudpickle.dumps(p))
            assert copy.uuid() == p.uuid() and type(copy).__name__ == type(p).__name__
        narrow_copy = cloudpickle.loads(cloudpickle.dumps(narrow))
        g, x = torch.randn(64, 20), torch.randn(64, 3)
        before, after, got, want = _rewritten(narrow_copy, lambda g, x: g.t() @ x, g, x)
        assert after == [("aten.mm.default", (3, 20))]
        torch.testing.assert_close(got, want)
    finally:
        cloudpickle.unregister_pickle_by_value(_compile_passes)
