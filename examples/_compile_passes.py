"""Two inductor graph passes for the examples' ``--compile``: what a graph computes twice from
the same inputs, it computes once (common-subexpression elimination, ``CommonSubexpressions``);
and a matrix product with a narrow result is computed in the orientation this CPU's BLAS
does fast (``NarrowProducts``, at the end of this docstring).

A compiled update step (``_common.UpdateStep``) repeats the work its loss code repeats.
IQL evaluates the target critics on the dataset actions for its actor loss and again for
its value loss; SAC and REDQ compute the tanh-Gaussian's log-determinant terms and the
temperature's exponential more than once. Inductor shares an expression inside one kernel
but not across kernels, and never shares a matrix product (an extern kernel call).
AOTAutograd's own CSE runs on the joint graph of a training graph only, and an
``UpdateStep`` graph is an inference graph (dynamo traces its backward). Registered as
inductor's ``post_grad_custom_post_pass``, this one runs at the end of its post-grad
passes, before it turns functional ops back into in-place ones (the graph is functional
then, but for the input mutations it writes back at its end and the wrappers of custom
in-place ops). IQL's compiled update loses six of its fifty matrix products (the target
critics' three layers, computed a second time).

A node is replaced by an earlier one when both call the same pure operator on the same
arguments, in the same stream context, with nothing written in place between them (the
same mutation region). Pure: an ATen operator that writes none of its arguments, draws no
random numbers (``nondeterministic_seeded``, inductor's random primitives), allocates no
uninitialised memory (``empty*``), is no collective and makes no data-dependent size
(unbacked symbols); or ``getitem``. A node is kept when any tensor it gives shares
storage with a graph output (two outputs that are equal values stay two tensors), with a
tensor some operator writes in place, or with an input of a higher-order operator (a
custom in-place op's wrapper, whose input buffers it mutates).

Values are unchanged. Random draws are the same numbers with torch's random kernels
(``fallback_random``); inductor's own kernels draw each element from its position in the
kernel, and a kernel's shape can change when a repeat is gone: the same law, possibly
other numbers (checked on REDQ's update step).

``NarrowProducts`` (inductor's ``post_grad_custom_pre_pass``) rewrites two kinds of matrix
products (``mm`` and ``bmm``) of float32 CPU tensors, those a backward through a network's
first and last layers makes:

- a narrow result, ``a @ b`` with ``b`` of 2 to 24 columns and ``a`` of at least twice as many
  rows (the weight gradient of a first layer reading a few observation features, ``g.T @
  x``): computed as ``(b.T @ a.T).T``, the same sums in another order (float rounding). MKL
  on this project's CPU (an AMD EPYC, one thread) ran ``[128, 7680] @ [7680, 4]`` in 1,340
  us and its transposed form in 175 us, ``[256, 256] @ [256, 3]`` in 82 against 17 us, 17
  columns 1.2-1.6x faster transposed; from 32 columns on, the two are within a few
  percent, and a single column (a matrix-vector product) is as fast either way;
- an outer product, ``a @ b`` over an inner size of 1 (the input gradient of a layer with
  one output, a critic's last): the broadcast product ``a * b``, the same values (the same
  bits, but a zero may differ in sign: eager ``bmm`` sums onto +0), a pointwise kernel
  inductor fuses with its neighbours instead of a BLAS call (``[256, 1] @ [1, 256]``: 6.7
  us, the product 4.1).

Other devices, dtypes and symbolic sizes are left alone (the figures are this CPU's: on
another CPU or BLAS, ``benchmarks/bench_compile.py --micro ... --narrow-ab`` tells whether
it pays).
"""

from __future__ import annotations

import contextlib
import hashlib
import operator
from pathlib import Path

import torch
from torch._guards import detect_fake_mode
from torch._inductor.custom_graph_pass import CustomGraphPass
from torch._inductor.pattern_matcher import compute_mutation_region_ids, is_mutation_op
from torch._library.utils import lookup_op
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
from torch.fx.passes.shape_prop import _extract_tensor_metadata
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._pytree import tree_leaves

__all__ = ["CommonSubexpressions", "NarrowProducts"]

#: the columns of a result computed transposed (bounds included)
_NARROW = (2, 24)

#: the cache key of the pass: this file's text (read once, here: a copy of the pass sent
#: by value to a Ray actor carries it)
_VERSION = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


class _Pass(CustomGraphPass):
    """A stateless pass of this module: any two of one class are the same pass, and
    ``uuid`` keys inductor's caches on this module's source, so a compiled graph cached
    before a change to it is not reused."""

    def __eq__(self, other) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self))

    def uuid(self) -> str:
        return _VERSION


class CommonSubexpressions(_Pass):
    """The pass (``torch._inductor.config.post_grad_custom_post_pass``)."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        compute_mutation_region_ids(graph)
        kept = _pinned_storages(graph)
        first: dict = {}
        for node in list(graph.nodes):
            if not _pure(node) or not kept.isdisjoint(_storages(node)):
                continue
            custom = node.meta.get("custom", {})
            try:
                key = (
                    node.target,
                    _key(node.args),
                    _key(node.kwargs),
                    node.meta["mutation_region_id"],
                    _key((custom.get("stream", 0), custom.get("mempool"))),
                )
            except TypeError:  # an unhashable argument (a symbolic size): left alone
                continue
            earlier = first.setdefault(key, node)
            if earlier is not node:
                node.replace_all_uses_with(earlier)
                graph.erase_node(node)


class NarrowProducts(_Pass):
    """The pass (``torch._inductor.config.post_grad_custom_pre_pass``): matrix products
    with a narrow result or an inner size of 1, rewritten as the module's docstring says."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        # the operators by name: a copy of this module sent by value (a Ray actor's
        # compiled policy holds the pass) pickles what its code names, and neither
        # ``torch.ops`` nor an operator pickles
        mul, permute = lookup_op("aten::mul.Tensor"), lookup_op("aten::permute")
        products = (lookup_op("aten::mm"), lookup_op("aten::bmm"))
        for node in list(graph.nodes):
            if node.op != "call_function" or node.target not in products:
                continue
            if len(node.args) != 2 or node.kwargs:
                continue
            a, b = node.args
            values = [getattr(x, "meta", {}).get("val") for x in (a, b, node)]
            if not all(isinstance(v, torch.Tensor) for v in values):
                continue
            va, vb, out = values
            if out.device.type != "cpu" or out.dtype != torch.float32:
                continue
            if not all(type(n) is int for n in (*va.shape, *vb.shape)):
                continue  # a symbolic size: left alone
            rows, inner, cols = va.shape[-2], va.shape[-1], vb.shape[-1]
            try:
                fake = detect_fake_mode(values) or contextlib.nullcontext()
            except AssertionError:  # values of two fake modes: not a graph inductor hands
                continue
            if inner == 1:
                new = _before(node, fake, mul, a, b)
            elif _NARROW[0] <= cols <= _NARROW[1] and rows >= 2 * cols:
                dims = [1, 0] if out.dim() == 2 else [0, 2, 1]
                bt, at = (
                    _before(node, fake, permute, b, dims),
                    _before(node, fake, permute, a, dims),
                )
                new = _before(node, fake, permute, _before(node, fake, node.target, bt, at), dims)
            else:
                continue
            node.replace_all_uses_with(new)
            graph.erase_node(node)


#: the metadata a node the pass adds takes from the node it replaces (where it came from)
_PROVENANCE = (*getattr(torch.fx.proxy, "_COPY_META_FIELDS", ()), "stack_trace", "seq_nr")


def _before(like: torch.fx.Node, fake, target, *args) -> torch.fx.Node:
    """A new node before ``like``, ``target(*args)``, its value computed in the fake mode
    ``fake`` and its provenance ``like``'s."""
    values = [x.meta["val"] if isinstance(x, torch.fx.Node) else x for x in args]
    with like.graph.inserting_before(like), fake:
        new = like.graph.call_function(target, args)
        _annotate(new, like, target(*values))
    return new


def _annotate(new: torch.fx.Node, like: torch.fx.Node, value: torch.Tensor) -> None:
    """``new``'s metadata: ``like``'s provenance, and its own value (``val``, and
    ``tensor_meta`` where ``like`` has one)."""
    for key in _PROVENANCE:
        if key in like.meta:
            new.meta[key] = like.meta[key]
    new.meta["val"] = value
    if "tensor_meta" in like.meta:
        new.meta["tensor_meta"] = _extract_tensor_metadata(value)


#: operator namespaces never merged: collectives (each call is a message)
_COLLECTIVES = ("_c10d_functional", "c10d_functional", "_dtensor")


def _pure(node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.is_impure():
        return False
    target = node.target
    if target is operator.getitem:
        return True
    if not isinstance(target, torch._ops.OpOverload) or is_mutation_op(node):
        return False
    name = target._schema.name
    if torch.Tag.nondeterministic_seeded in target.tags or target.namespace in _COLLECTIVES:
        return False  # a draw, a message
    if name.startswith(("aten::empty", "aten::new_empty")):
        return False  # uninitialised memory
    if target.namespace == "prims" and target._opname.startswith("inductor_"):
        return False  # inductor's random draws and seeds (untagged)
    if free_unbacked_symbols(node.meta.get("val")):
        return False  # a data-dependent size or scalar (``.item()``, ``nonzero``)
    return not any(_writes(arg) for arg in target._schema.arguments)


def _writes(argument) -> bool:
    return argument.alias_info is not None and argument.alias_info.is_write


def _storages(node: torch.fx.Node) -> set:
    """The storages of the tensors ``node`` gives (one, or each of a tuple's)."""
    found = set()
    for value in tree_leaves(node.meta.get("val")):
        if isinstance(value, torch.Tensor):
            try:
                found.add(StorageWeakRef(value.untyped_storage()))
            except NotImplementedError:  # a tensor without storage (sparse, ...)
                pass
    return found


def _pinned_storages(graph: torch.fx.Graph) -> set:
    """The storages of the graph's outputs, of every tensor an operator writes in place
    and of every input of a higher-order operator (which may mutate it)."""
    pinned: set = set()
    for node in graph.output_node().all_input_nodes:
        pinned |= _storages(node)
    for node in graph.nodes:
        target = node.target
        if node.op != "call_function" or target is operator.getitem:
            continue
        if not isinstance(target, torch._ops.OpOverload):
            for item in node.all_input_nodes:  # auto_functionalized, a kernel wrapper, ...
                pinned |= _storages(item)
            continue
        arguments = target._schema.arguments
        written = [value for arg, value in zip(arguments, node.args) if _writes(arg)]
        written += [
            node.kwargs[arg.name] for arg in arguments if _writes(arg) and arg.name in node.kwargs
        ]
        for item in tree_leaves(written):
            if isinstance(item, torch.fx.Node):
                pinned |= _storages(item)
    return pinned


def _key(value):
    """A hashable key of an argument: nodes by identity, numbers by type and exact value
    (``1`` and ``1.0``, ``0.0`` and ``-0.0`` differ)."""
    if isinstance(value, (list, tuple)):
        return type(value).__name__, tuple(_key(item) for item in value)
    if isinstance(value, dict):
        return "dict", tuple(sorted((name, _key(item)) for name, item in value.items()))
    if isinstance(value, torch.fx.Node):
        return "node", id(value)
    if isinstance(value, float):
        return "float", value.hex()
    if isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return type(value).__name__, str(value)
    hash(value)  # TypeError: no key
    return type(value).__name__, value
