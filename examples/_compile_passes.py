"""An inductor graph pass for the examples' ``--compile``: what a graph computes twice from
the same inputs, it computes once (common-subexpression elimination).

A compiled update step (``_common.UpdateStep``) repeats the work its loss code repeats.
IQL evaluates the target critics on the dataset actions for its actor loss and again for
its value loss; SAC and REDQ compute the tanh-Gaussian's log-determinant terms and the
temperature's exponential more than once. Inductor shares an expression inside one kernel
but not across kernels, and never shares a matrix product (an extern kernel call).
AOTAutograd's own CSE runs on the joint graph of a training graph only, and an
``UpdateStep`` graph is an inference graph (dynamo traces its backward). Run after
inductor's own post-grad passes, this one removes those repeats: IQL's compiled update
loses six of its forty 256-wide matrix products.

A node is replaced by an earlier one when both call the same pure operator on the same
arguments with nothing written in place between them (the same mutation region). Pure:
an ATen operator that writes none of its arguments and draws no random numbers
(``nondeterministic_seeded``, inductor's random primitives), or ``getitem``. A node is
kept when it shares storage with a graph output (two outputs that are equal values stay
two tensors) or with a buffer some operator writes in place.

Values are unchanged. Random draws are the same numbers with torch's random kernels
(``fallback_random``); inductor's own kernels draw each element from its position in the
kernel, and a kernel's shape can change when a repeat is gone: the same law, possibly
other numbers (checked on REDQ's update step).
"""

from __future__ import annotations

import hashlib
import operator
from pathlib import Path

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass
from torch._inductor.pattern_matcher import compute_mutation_region_ids, is_mutation_op
from torch.multiprocessing.reductions import StorageWeakRef

__all__ = ["CommonSubexpressions"]

#: the cache key of the pass: this file's text (read once, here: a copy of the pass sent
#: by value to a Ray actor carries it)
_VERSION = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


class CommonSubexpressions(CustomGraphPass):
    """The pass (``torch._inductor.config.post_grad_custom_post_pass``); ``uuid`` keys
    inductor's caches on this module's source, so a compiled graph cached before a change
    to it is not reused."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        compute_mutation_region_ids(graph)
        kept = _pinned_storages(graph)
        first: dict = {}
        for node in list(graph.nodes):
            if not _pure(node) or _storage(node) in kept:
                continue
            try:
                key = (
                    node.target,
                    _key(node.args),
                    _key(node.kwargs),
                    node.meta["mutation_region_id"],
                )
            except TypeError:  # an unhashable argument (a symbolic size): left alone
                continue
            earlier = first.setdefault(key, node)
            if earlier is not node:
                node.replace_all_uses_with(earlier)
                graph.erase_node(node)

    def __eq__(self, other) -> bool:  # stateless: any two are the same pass
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self))

    def uuid(self) -> str:
        return _VERSION


def _pure(node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.is_impure():
        return False
    target = node.target
    if target is operator.getitem:
        return True
    if not isinstance(target, torch._ops.OpOverload) or is_mutation_op(node):
        return False
    if torch.Tag.nondeterministic_seeded in target.tags or target._schema.name == "aten::empty":
        return False  # a draw, or uninitialised memory
    if target.namespace == "prims" and target._opname.startswith("inductor_"):
        return False  # inductor's random draws and seeds
    return not any(_writes(arg) for arg in target._schema.arguments)


def _writes(argument) -> bool:
    return argument.alias_info is not None and argument.alias_info.is_write


def _storage(node: torch.fx.Node) -> StorageWeakRef | None:
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor):
        return None
    try:
        return StorageWeakRef(value.untyped_storage())
    except NotImplementedError:  # a tensor without storage (sparse, ...)
        return None


def _pinned_storages(graph: torch.fx.Graph) -> set:
    """The storages of the graph's outputs and of every tensor an operator writes in place."""
    pinned = {_storage(node) for node in graph.output_node().all_input_nodes}
    for node in graph.nodes:
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
            continue
        arguments = target._schema.arguments
        written = [value for arg, value in zip(arguments, node.args) if _writes(arg)]
        written += [
            node.kwargs[arg.name] for arg in arguments if _writes(arg) and arg.name in node.kwargs
        ]
        for value in written:
            for item in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(item, torch.fx.Node):
                    pinned.add(_storage(item))
    pinned.discard(None)
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
