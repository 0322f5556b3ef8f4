"""Compiled core of the rl library: sum and min segment trees for prioritized sampling.

The trees run on the CPU or, when rl-cpp was built with the CUDA toolkit, on a CUDA
device. The extension does not link libtorch: arrays cross the boundary through DLPack,
so numpy arrays and torch tensors (CPU or CUDA) are used in place.
"""

from rl.cpp._segment_tree import (
    MinSegmentTree,
    SumSegmentTree,
    cuda_compiled,
    cuda_device_count,
)

__version__ = "0.1.0"

__all__ = ["MinSegmentTree", "SumSegmentTree", "cuda_compiled", "cuda_device_count"]
