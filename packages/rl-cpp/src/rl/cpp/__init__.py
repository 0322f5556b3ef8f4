"""Compiled core of the rl library: segment trees for prioritized sampling, value-estimator kernels.

The trees run on the CPU or, when rl-cpp was built with the CUDA toolkit, on a CUDA
device. The extension does not link libtorch: arrays cross the boundary through DLPack,
so numpy arrays and torch tensors (CPU or CUDA) are used in place.
"""

from rl.cpp._gather import RowGather
from rl.cpp._prioritized import (
    prioritized_sample,
    prioritized_sample_rows,
    prioritized_sample_rows_into,
    prioritized_update,
    prioritized_update_at,
)
from rl.cpp._segment_tree import (
    MinSegmentTree,
    SumSegmentTree,
    cuda_compiled,
    cuda_device_count,
)
from rl.cpp._torchrl_trees import (
    MinSegmentTreeFp32,
    MinSegmentTreeFp64,
    SumSegmentTreeFp32,
    SumSegmentTreeFp64,
)
from rl.cpp._value import generalized_advantage_estimate, td_lambda_return_estimate

__version__ = "0.1.0"

__all__ = [
    "MinSegmentTree",
    "MinSegmentTreeFp32",
    "MinSegmentTreeFp64",
    "RowGather",
    "SumSegmentTree",
    "SumSegmentTreeFp32",
    "SumSegmentTreeFp64",
    "cuda_compiled",
    "cuda_device_count",
    "generalized_advantage_estimate",
    "prioritized_sample",
    "prioritized_sample_rows",
    "prioritized_sample_rows_into",
    "prioritized_update",
    "prioritized_update_at",
    "td_lambda_return_estimate",
]
