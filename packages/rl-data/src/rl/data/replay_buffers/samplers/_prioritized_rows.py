"""The prioritized draw of a batch and its rows in one compiled call, resolved once.

A :class:`~rl.data.PrioritizedSampler` on CPU trees over a CPU TensorDict storage
samples a batch with one call of :func:`rl.cpp.prioritized_sample_rows_into`. Everything
that call needs but the number of stored items (the trees, the storage's tables, the
outputs' shapes, a scratch array for the uniform draws) is resolved here once per
storage layout and batch size, so that a ``sample()`` does little Python beyond the
call itself: at a batch of 256, the Python around a step costs as much as the trees.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from rl.data.replay_buffers._cpp import prioritized_sample_rows_into
from rl.data.replay_buffers.storages._rows import RowPlan

_empty = np.empty
_from_numpy = torch.from_numpy
_INT64 = np.dtype(np.int64)
_FLOAT32 = np.dtype(np.float32)


class FusedRows:
    """Draws ``batch_size`` items of a CPU TensorDict storage through a
    :class:`~rl.data.PrioritizedSampler`'s CPU trees and gathers their rows, in one call.

    The uniform numbers come from the sampler's generator as in its ``sample``; the
    batch holds the storage's entries and, at its root, ``"index"``,
    ``"priority_weight"`` and ``"_weight"``.

    Args:
        sampler: the :class:`~rl.data.PrioritizedSampler` (CPU trees).
        plan: the storage's row plan (its tables and the batch's structure).
        batch_size: the number of items per draw.
    """

    __slots__ = (
        "plan",
        "batch_size",
        "_sampler",
        "_trees",
        "_gather",
        "_scratch",
        "_specs",
        "_build",
    )

    def __init__(self, sampler: Any, plan: RowPlan, batch_size: int) -> None:
        self.plan = plan
        self.batch_size = batch_size
        self._sampler = sampler
        self._trees = (sampler._sum_tree, sampler._min_tree)
        self._gather = plan.gather
        scratch = torch.empty(batch_size, dtype=sampler.dtype)
        self._scratch = (scratch, scratch.numpy(), torch.Size((batch_size,)))
        specs = plan.specs
        # the outputs' shapes and dtypes, as two tuples for map (no Python-level loop)
        self._specs = (
            tuple((batch_size, *shape) for shape, _ in specs),
            tuple(dtype for _, dtype in specs),
        )
        self._build = plan.root.build  # (RowPlan.build without its own call)

    def __call__(self, n: int) -> tuple[torch.Tensor, torch.Tensor, TensorDictBase]:
        """``(index, weight, batch)`` of a draw among the first ``n`` stored items.

        Raises:
            RuntimeError: the priorities of the ``n`` items sum to zero.
        """
        sampler = self._sampler
        scratch, uniform, size = self._scratch
        rng = sampler._rng
        # uniform_ on a float tensor draws the same numbers as torch.rand
        if rng is None:
            scratch.uniform_()
        else:
            scratch.uniform_(generator=rng)
        bs = self.batch_size
        index = _empty(bs, _INT64)
        weight = _empty(bs, _FLOAT32)
        rows = list(map(_empty, *self._specs))
        # the trees, tables and scratch array are the sampler's own and well formed; the
        # compiled call still checks n, every shape and every index
        total = prioritized_sample_rows_into(
            *self._trees, n, uniform, sampler._beta, index, weight, self._gather, rows
        )
        if not total > 0:
            sampler._raise_no_mass(n)
        index_t = _from_numpy(index)
        weight_t = _from_numpy(weight)
        extra = {"index": index_t, "priority_weight": weight_t, "_weight": weight_t}
        return index_t, weight_t, self._build(rows, size, extra)
