"""rl-cpp's compiled kernels as rl-data uses them, or a pure-torch fallback without it.

rl-data declares rl-cpp as a dependency: its segment trees and one-call prioritized
steps are the fast path. Where rl-cpp cannot be imported (installed with ``--no-deps``,
a platform without an rl-cpp wheel), ``HAS_CPP`` is ``False``: the prioritized samplers
use the torch trees of :mod:`~rl.data.replay_buffers._torch_trees` through their
general (device) path, and the compiled-only names are ``None`` (nothing calls them then).
Every use of rl-cpp in rl-data goes through this module and rl-cpp's public API.
"""

from __future__ import annotations

try:
    from rl.cpp import (
        MinSegmentTree,
        RowGather,
        SumSegmentTree,
        prioritized_sample,
        prioritized_sample_rows_into,
        prioritized_update,
        prioritized_update_at,
    )
except ImportError:  # rl-cpp not installed: the torch trees, no compiled steps
    from rl.data.replay_buffers._torch_trees import (
        TorchMinSegmentTree as MinSegmentTree,
    )
    from rl.data.replay_buffers._torch_trees import (
        TorchSumSegmentTree as SumSegmentTree,
    )

    HAS_CPP = False
    RowGather = None
    prioritized_sample = None
    prioritized_sample_rows_into = None
    prioritized_update = None
    prioritized_update_at = None
else:
    HAS_CPP = True


__all__ = [
    "HAS_CPP",
    "MinSegmentTree",
    "RowGather",
    "SumSegmentTree",
    "prioritized_sample",
    "prioritized_sample_rows_into",
    "prioritized_update",
    "prioritized_update_at",
]
