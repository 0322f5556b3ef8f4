"""rl.data.map: hash and query modules, tensor-keyed maps and search trees (TorchRL's ``torchrl.data.map``)."""

from rl.data.map.hash import BinaryToDecimal, RandomProjectionHash, SipHash
from rl.data.map.query import HashToInt, QueryModule
from rl.data.map.tdstorage import TensorDictMap, TensorMap
from rl.data.map.tree import MCTSForest, Tree

__all__ = [
    "BinaryToDecimal",
    "HashToInt",
    "MCTSForest",
    "QueryModule",
    "RandomProjectionHash",
    "SipHash",
    "TensorDictMap",
    "TensorMap",
    "Tree",
]
